package stickiness

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for TableOptions: the defaults of fairlead's sticky.max_entries and sticky.idle_timeout.
const (
	DefaultMaxEntries  = 1_000_000
	DefaultIdleTimeout = 10 * time.Minute
)

// SetLimits changes MaxEntries and IdleTimeout of a running table (a reload); values <= 0 take the
// defaults. A lower MaxEntries takes effect at the next new key, a shorter IdleTimeout at the next Expire.
func (t *Table) SetLimits(maxEntries int, idle time.Duration) {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	t.max.Store(int64(maxEntries))
	t.idle.Store(int64(idle))
}

// IdleTimeout returns the current idle timeout.
func (t *Table) IdleTimeout() time.Duration { return time.Duration(t.idle.Load()) }

// numShards is the number of independently locked parts of a Table.
const numShards = 64

// TableOptions configures a Table. The zero value gives the defaults.
type TableOptions struct {
	// MaxEntries bounds the number of remembered keys (default 1_000_000).
	// When a new key takes the table over it, the longest-idle entry
	// without an open tunnel is evicted; entries with open tunnels are
	// evicted, longest-idle first, only when every entry has one. So when
	// every other entry has an open tunnel, the new key's own entry is the
	// one evicted: Place still returns its server, but the key is not
	// remembered, and live tunnels keep their servers.
	MaxEntries int
	// IdleTimeout is how long an entry with no open tunnel may go without
	// activity before it is forgotten (default 10m).
	IdleTimeout time.Duration
	// Now is the clock (default time.Now). Tests inject a fake clock.
	Now func() time.Time
}

// Table remembers which server each key was placed on. It is sharded by key
// hash (64 shards, each a mutex, a map and two lists ordered by last
// activity: entries with open tunnels and entries without), bounded by
// TableOptions.MaxEntries, and forgets entries that have been idle for
// TableOptions.IdleTimeout. It is safe for concurrent use.
type Table struct {
	shards    [numShards]shard
	count     atomic.Int64  // entries in all shards
	evictions atomic.Uint64 // entries evicted for MaxEntries (not expirations or Forget)
	changes   atomic.Uint64 // keys added, moved to another server or removed (see Changes)

	seed  maphash.Seed
	max   atomic.Int64
	idle  atomic.Int64 // time.Duration
	now   func() time.Time
	epoch time.Time
}

// NewTable returns an empty Table; zero limits get their defaults (see SetLimits).
// Expiry only happens on Expire calls: the owner runs them (fairlead's pool every IdleTimeout/10, at
// least a second apart).
func NewTable(o TableOptions) *Table {
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Table{seed: maphash.MakeSeed(), now: o.Now}
	t.SetLimits(o.MaxEntries, o.IdleTimeout)
	t.epoch = t.now()
	for i := range t.shards {
		s := &t.shards[i]
		s.m = make(map[string]*entry)
		s.oldest[0].Store(math.MaxInt64)
		s.oldest[1].Store(math.MaxInt64)
	}
	return t
}

// entry is one remembered key. It sits in its shard's map and in exactly
// one of the shard's two lists: idle (refs == 0) or busy (refs > 0).
type entry struct {
	key    string
	server string // interned: the string Candidates.Name returned
	idx    int    // where server was in the last Candidates seen (a hint)
	refs   int32  // open tunnels
	last   int64  // last activity, in ns since Table.epoch
	prev   *entry // newer
	next   *entry // older
}

// list is an intrusive doubly linked list of entries, newest activity first.
type list struct {
	head, tail *entry
}

func (l *list) pushFront(e *entry) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	} else {
		l.tail = e
	}
	l.head = e
}

func (l *list) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

const (
	idleList = 0 // entries without open tunnels
	busyList = 1 // entries with open tunnels
)

type shard struct {
	mu    sync.Mutex
	m     map[string]*entry
	lists [2]list // idleList, busyList
	// oldest[i] is the last activity of lists[i].tail, or MaxInt64 if the
	// list is empty; eviction reads it without taking mu.
	oldest [2]atomic.Int64
	_      [64]byte // keep neighbouring shards' locks off one cache line
}

func listOf(e *entry) int {
	if e.refs > 0 {
		return busyList
	}
	return idleList
}

// publish refreshes oldest[which] after lists[which] changed.
func (s *shard) publish(which int) {
	v := int64(math.MaxInt64)
	if t := s.lists[which].tail; t != nil {
		v = t.last
	}
	if s.oldest[which].Load() != v {
		s.oldest[which].Store(v)
	}
}

// touch moves e to the front of its list and sets its last activity to now,
// or to that of the entry behind it if later: callers read the clock before
// taking the lock, and the lists must stay ordered.
func (s *shard) touch(e *entry, now int64) {
	which := listOf(e)
	l := &s.lists[which]
	wasTail := l.tail == e
	if l.head != e {
		l.remove(e)
		l.pushFront(e)
	}
	if n := e.next; n != nil && n.last > now {
		now = n.last
	}
	e.last = now
	if wasTail { // the list's oldest activity changed
		s.publish(which)
	}
}

// move takes e out of list from and puts it at the front of list to. The
// caller must touch e next.
func (s *shard) move(e *entry, from, to int) {
	wasTail := s.lists[from].tail == e
	s.lists[from].remove(e)
	s.lists[to].pushFront(e)
	if wasTail {
		s.publish(from)
	}
}

// drop removes e from the shard. The caller adjusts Table.count.
func (s *shard) drop(e *entry) {
	which := listOf(e)
	wasTail := s.lists[which].tail == e
	s.lists[which].remove(e)
	delete(s.m, e.key)
	if wasTail {
		s.publish(which)
	}
}

func (t *Table) shardFor(key []byte) *shard {
	return &t.shards[maphash.Bytes(t.seed, key)%numShards]
}

// clock returns now as ns since t.epoch (monotonic when Now is time.Now).
func (t *Table) clock() int64 {
	return int64(t.now().Sub(t.epoch))
}

// find returns the index of e's server in c, or -1.
func (e *entry) find(c Candidates) int {
	n := c.Len()
	if e.idx < n && c.Name(e.idx) == e.server {
		return e.idx
	}
	for i := 0; i < n; i++ {
		if c.Name(i) == e.server {
			e.idx = i
			return i
		}
	}
	return -1
}

// Place returns the index in c of the server for key: the remembered server
// if it is still among c and Up, otherwise the rendezvous choice among the Up
// servers, which is then remembered in place of the old one. It returns -1
// if no server is Up; a new key is then not remembered, and a known key
// keeps its old server. Place counts as activity for key.
//
// Place does not allocate when key is known and its server is up; for a new
// key it allocates the entry and a copy of key, while the server name is
// kept as c.Name returned it. Adding a key may evict others (see
// TableOptions.MaxEntries); under concurrent Place calls the table may
// briefly hold a few more than MaxEntries entries.
func (t *Table) Place(key []byte, c Candidates) int { return t.PlaceExcept(key, c, -1) }

// PlaceExcept is Place with candidate except (an index into c, or -1 for none) treated as not Up: the
// server that just failed this client's connection is passed over, and the key is placed anew if it
// was remembered there.
func (t *Table) PlaceExcept(key []byte, c Candidates, except int) int {
	s, now := t.shardFor(key), t.clock()
	s.mu.Lock()
	e := s.m[string(key)]
	if e != nil {
		if i := e.find(c); i >= 0 && i != except && c.Up(i) {
			s.touch(e, now)
			s.mu.Unlock()
			return i
		}
	}
	i := rendezvous(key, c, except)
	if i < 0 {
		s.mu.Unlock()
		return -1
	}
	if e != nil {
		if e.server != c.Name(i) {
			t.changes.Add(1)
		}
		e.server, e.idx = c.Name(i), i
		s.touch(e, now)
		s.mu.Unlock()
		return i
	}
	t.addUnlock(s, key, c.Name(i), i, now)
	return i
}

// addUnlock remembers a new key on server (index idx) in s, whose lock the caller holds: it releases
// the lock and evicts what no longer fits.
func (t *Table) addUnlock(s *shard, key []byte, server string, idx int, now int64) {
	e := &entry{key: string(key), server: server, idx: idx}
	s.m[e.key] = e
	s.lists[idleList].pushFront(e)
	s.touch(e, now)
	s.mu.Unlock()
	if t.addCount(1) > t.max.Load() {
		t.evict()
	}
}

// Acquire records one more open tunnel for key and counts as activity. An
// entry with open tunnels never idles out, and is evicted to respect
// MaxEntries only when every entry has open tunnels. Acquire is a no-op for
// an unknown key; call it after Place.
func (t *Table) Acquire(key []byte) {
	s, now := t.shardFor(key), t.clock()
	s.mu.Lock()
	if e := s.m[string(key)]; e != nil {
		e.refs++
		if e.refs == 1 {
			s.move(e, idleList, busyList)
		}
		s.touch(e, now)
	}
	s.mu.Unlock()
}

// Release records one fewer open tunnel for key (never fewer than zero) and
// sets its last activity to now, so an entry whose last tunnel closed
// expires IdleTimeout later unless used again. Release is a no-op for an
// unknown key, for example one that was forgotten or evicted meanwhile.
func (t *Table) Release(key []byte) {
	s, now := t.shardFor(key), t.clock()
	s.mu.Lock()
	if e := s.m[string(key)]; e != nil {
		if e.refs > 0 {
			e.refs--
			if e.refs == 0 {
				s.move(e, busyList, idleList)
			}
		}
		s.touch(e, now)
	}
	s.mu.Unlock()
}

// Forget removes every entry that points at server, whatever its open
// tunnels, and returns how many it removed: the server left its pool, so
// its keys are placed anew on their next connection. It visits every entry.
func (t *Table) Forget(server string) int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			if e.server == server {
				s.drop(e)
				n++
			}
		}
		s.mu.Unlock()
	}
	t.addCount(int64(-n))
	return n
}

// Expire removes the entries that have no open tunnel and no activity for
// at least IdleTimeout, and returns how many it removed. It only visits the
// entries it removes (plus one per shard).
func (t *Table) Expire() int {
	cutoff := t.clock() - t.idle.Load()
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		if s.oldest[idleList].Load() > cutoff {
			continue
		}
		s.mu.Lock()
		l := &s.lists[idleList]
		for e := l.tail; e != nil && e.last <= cutoff; e = l.tail {
			s.drop(e)
			n++
		}
		s.mu.Unlock()
	}
	t.addCount(int64(-n))
	return n
}

// Len returns the number of remembered keys.
func (t *Table) Len() int {
	return int(t.count.Load())
}

// Evictions returns how many entries were evicted so far to keep the table within MaxEntries (a new
// key's own entry included when every other entry has open tunnels). Entries that idled out (Expire)
// or whose server left (Forget) are not evictions.
func (t *Table) Evictions() uint64 { return t.evictions.Load() }

// Changes counts the changes of the table's placements: keys added, moved to another server, or
// removed. Activity alone (a known key used again) is not a change. A state writer compares it to skip
// writing an unchanged table.
func (t *Table) Changes() uint64 { return t.changes.Load() }

// addCount adjusts the number of entries after delta were added (or removed), and counts a change.
func (t *Table) addCount(delta int64) int64 {
	if delta != 0 {
		t.changes.Add(1)
	}
	return t.count.Add(delta)
}

// evict removes the longest-idle entries until the table is within
// MaxEntries: entries without open tunnels first, then the others.
func (t *Table) evict() {
	for t.count.Load() > t.max.Load() {
		if !t.evictOne() {
			return
		}
	}
}

// evictOne removes the entry with the oldest last activity, preferring
// entries without open tunnels. It reports false if the table is empty.
// The shard is chosen from the published oldest timestamps without locking,
// so under concurrent use the entry removed may not be quite the oldest, or,
// if the list emptied meanwhile, none is; evictOne still reports true then,
// so that the caller looks again.
func (t *Table) evictOne() bool {
	for which := idleList; which <= busyList; which++ {
		best, bestLast := -1, int64(math.MaxInt64)
		for i := range t.shards {
			if v := t.shards[i].oldest[which].Load(); v < bestLast {
				best, bestLast = i, v
			}
		}
		if best < 0 {
			continue
		}
		s := &t.shards[best]
		s.mu.Lock()
		e := s.lists[which].tail
		if e != nil {
			s.drop(e)
		}
		s.mu.Unlock()
		if e != nil {
			t.addCount(-1)
			t.evictions.Add(1)
		}
		return true
	}
	return false
}
