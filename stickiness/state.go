package stickiness

import (
	"cmp"
	"hash/maphash"
	"slices"
	"time"
)

// Export and Import carry a table's keys across a restart (fairlead's state file): each key with its
// server and how long it has been idle, so that after a fast start devices reconnect to the server they
// were on, and keys that were about to expire still do.

// Entry is one remembered key, as Export gives it and Import takes it.
type Entry struct {
	Key    string
	Server string // the server's name, as Candidates.Name gave it (fairlead: its address)
	// Idle is how long the key had gone without activity when it was exported; 0 for a key with open
	// tunnels (it was in use then).
	Idle time.Duration
}

// Export returns every remembered key, in no particular order. It locks one shard at a time, so under
// concurrent use it is a snapshot of each shard rather than of the whole table at one instant. It
// allocates the returned slice; the keys and server names are shared with the table.
func (t *Table) Export() []Entry {
	now := t.clock()
	out := make([]Entry, 0, t.Len())
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			var idle time.Duration
			if e.refs == 0 {
				idle = time.Duration(max(now-e.last, 0))
			}
			out = append(out, Entry{Key: e.key, Server: e.server, Idle: idle})
		}
		s.mu.Unlock()
	}
	return out
}

// Import remembers entries as if each key had been placed on its server and then left idle for its
// Idle; none has open tunnels. Keys the table knows already keep their server (a live placement wins),
// entries idle for IdleTimeout or longer are skipped (they would expire at once), as are entries with
// an empty key or server, and when they do not all fit in MaxEntries the most recently active ones are
// kept. Equal server names share one string. It returns how many keys it added. Import is safe for
// concurrent use, but meant for a table not yet in use (a fast start fills it before serving).
func (t *Table) Import(entries []Entry) int {
	idle := time.Duration(t.idle.Load())
	keep := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if e.Key != "" && e.Server != "" && e.Idle < idle {
			keep = append(keep, e)
		}
	}
	// The most recently active first, so that what does not fit is the longest idle.
	slices.SortStableFunc(keep, func(a, b Entry) int { return cmp.Compare(max(a.Idle, 0), max(b.Idle, 0)) })
	if room := max(t.max.Load()-t.count.Load(), 0); int64(len(keep)) > room {
		keep = keep[:room]
	}
	names := map[string]string{}
	now := t.clock()
	n := 0
	// The longest idle first: each entry then goes to the front of its shard's idle list, which stays
	// ordered by last activity without a walk.
	for i := len(keep) - 1; i >= 0; i-- {
		en := keep[i]
		server, ok := names[en.Server]
		if !ok {
			server = en.Server
			names[server] = server
		}
		s := &t.shards[maphash.String(t.seed, en.Key)%numShards] // the shard shardFor gives its bytes
		s.mu.Lock()
		if _, known := s.m[en.Key]; known {
			s.mu.Unlock()
			continue
		}
		e := &entry{key: en.Key, server: server, last: now - int64(max(en.Idle, 0))}
		s.m[e.key] = e
		s.insertIdle(e)
		s.mu.Unlock()
		n++
	}
	if t.addCount(int64(n)) > t.max.Load() {
		t.evict() // live keys added meanwhile
	}
	return n
}

// insertIdle puts e, which has no open tunnels, into the idle list at the place its last activity gives
// it: the list is ordered newest first.
func (s *shard) insertIdle(e *entry) {
	l := &s.lists[idleList]
	var prev *entry
	next := l.head
	for next != nil && next.last > e.last {
		prev, next = next, next.next
	}
	e.prev, e.next = prev, next
	if prev != nil {
		prev.next = e
	} else {
		l.head = e
	}
	if next != nil {
		next.prev = e
	} else {
		l.tail = e
		s.publish(idleList)
	}
}
