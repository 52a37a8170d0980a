package stickiness

// Pins: the same table used as a map from a key to the one server it must go to, with no placement of
// its own. fairlead's multi-part requests are pinned this way: the first request of an id is placed by
// the pool's policy and Pin remembers it there; later requests Lookup the pin and go to that server or
// fail. Pins share the table's bounds: IdleTimeout is their time to live after the last use (exact:
// Lookup does not return an expired pin even before Expire removes it), MaxEntries their number, the
// longest-unused first out.

// Lookup returns the index in c of the server key is pinned to, and whether key is pinned at all. A
// pinned key whose server is not among c gives (-1, true). It counts as a use of the pin. Lookup does
// not allocate.
func (t *Table) Lookup(key []byte, c Candidates) (int, bool) {
	s, now := t.shardFor(key), t.clock()
	s.mu.Lock()
	e := s.m[string(key)]
	if e == nil {
		s.mu.Unlock()
		return -1, false
	}
	if e.refs == 0 && now-e.last >= t.idle.Load() {
		s.drop(e)
		s.mu.Unlock()
		t.addCount(-1)
		return -1, false
	}
	i := e.find(c)
	s.touch(e, now)
	s.mu.Unlock()
	return i, true
}

// Pin remembers key on server i of c, replacing any earlier pin of key, and counts as a use. A new
// key may evict others (see TableOptions.MaxEntries).
func (t *Table) Pin(key []byte, c Candidates, i int) {
	s, now := t.shardFor(key), t.clock()
	s.mu.Lock()
	if e := s.m[string(key)]; e != nil {
		if e.server != c.Name(i) {
			t.changes.Add(1)
		}
		e.server, e.idx = c.Name(i), i
		s.touch(e, now)
		s.mu.Unlock()
		return
	}
	t.addUnlock(s, key, c.Name(i), i, now)
}

// Unpin forgets key; it reports whether key was remembered.
func (t *Table) Unpin(key []byte) bool {
	s := t.shardFor(key)
	s.mu.Lock()
	e := s.m[string(key)]
	if e != nil {
		s.drop(e)
	}
	s.mu.Unlock()
	if e != nil {
		t.addCount(-1)
	}
	return e != nil
}

// CountByServer returns how many keys each server holds (for status pages; it visits every entry).
func (t *Table) CountByServer() map[string]int {
	out := map[string]int{}
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			out[e.server]++
		}
		s.mu.Unlock()
	}
	return out
}
