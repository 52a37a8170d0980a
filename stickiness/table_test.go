package stickiness

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/fairlead/fairlead/bench/testkit"
)

func unsafeStringData(s string) *byte { return unsafe.StringData(s) }

// checkInvariants verifies the table's internal bookkeeping: every entry is
// in its map and in the right list, lists are ordered by activity, the
// published oldest timestamps match, and count matches.
// remembered returns the server the table remembers for key, reading the shard's map directly:
// unlike Place, it is not activity and never places the key.
func remembered(tb *Table, key []byte) (server string, ok bool) {
	s := tb.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[string(key)]; e != nil {
		return e.server, true
	}
	return "", false
}

func checkInvariants(t *testing.T, tb *Table) {
	t.Helper()
	total := 0
	for si := range tb.shards {
		s := &tb.shards[si]
		s.mu.Lock()
		inLists := 0
		for which := idleList; which <= busyList; which++ {
			l := &s.lists[which]
			var prev *entry
			for e := l.head; e != nil; prev, e = e, e.next {
				inLists++
				if e.prev != prev {
					t.Errorf("shard %d list %d: broken back link at %q", si, which, e.key)
				}
				if listOf(e) != which {
					t.Errorf("shard %d: entry %q with %d refs in list %d", si, e.key, e.refs, which)
				}
				if s.m[e.key] != e {
					t.Errorf("shard %d: entry %q in a list but not in the map", si, e.key)
				}
				if prev != nil && prev.last < e.last {
					t.Errorf("shard %d list %d: %q (%d) before older %q (%d)", si, which, prev.key, prev.last, e.key, e.last)
				}
			}
			if l.tail != prev {
				t.Errorf("shard %d list %d: tail is not the last entry", si, which)
			}
			want := int64(1<<63 - 1)
			if l.tail != nil {
				want = l.tail.last
			}
			if got := s.oldest[which].Load(); got != want {
				t.Errorf("shard %d list %d: published oldest %d, want %d", si, which, got, want)
			}
		}
		if inLists != len(s.m) {
			t.Errorf("shard %d: %d entries in lists, %d in the map", si, inLists, len(s.m))
		}
		total += len(s.m)
		s.mu.Unlock()
	}
	if tb.Len() != total {
		t.Errorf("Len() = %d, but the shards hold %d entries", tb.Len(), total)
	}
}

func TestNewTableFillsInDefaults(t *testing.T) {
	tb := NewTable(TableOptions{})
	if tb.max.Load() != DefaultMaxEntries || tb.IdleTimeout() != DefaultIdleTimeout || tb.now == nil {
		t.Fatalf("defaults: max %d, idle %v", tb.max.Load(), tb.IdleTimeout())
	}
	tb = NewTable(TableOptions{MaxEntries: -1, IdleTimeout: -time.Second})
	if tb.max.Load() != DefaultMaxEntries || tb.IdleTimeout() != DefaultIdleTimeout {
		t.Fatalf("negative limits: max %d, idle %v; want the defaults", tb.max.Load(), tb.IdleTimeout())
	}
	if DefaultMaxEntries != 1_000_000 || DefaultIdleTimeout != 10*time.Minute {
		t.Fatalf("documented defaults changed")
	}
}

func TestPlaceKeepsAKeyOnOneServer(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	f := func(key string) {
		t.Helper()
		first := tb.Place([]byte(key), p)
		if first < 0 {
			t.Fatalf("Place(%q) = -1 with all servers up", key)
		}
		if want := rendezvous([]byte(key), p, -1); first != want {
			t.Fatalf("first Place(%q) = %d, want the rendezvous choice %d", key, first, want)
		}
		for n := 0; n < 100; n++ {
			if got := tb.Place([]byte(key), p); got != first {
				t.Fatalf("Place(%q) #%d = %d, want %d", key, n, got, first)
			}
		}
		if s, ok := remembered(tb, []byte(key)); !ok || s != p.Name(first) {
			t.Fatalf("%q remembered on %q, %v; want %q", key, s, ok, p.Name(first))
		}
	}
	for k := 0; k < 20; k++ {
		f(fmt.Sprintf("h:asset-%d", k))
	}
	if tb.Len() != 20 {
		t.Fatalf("Len() = %d, want 20", tb.Len())
	}
	checkInvariants(t, tb)
}

func TestPlaceStoresTheCandidatesNameWithoutCopying(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	i := tb.Place([]byte("h:pump-7"), p)
	s, _ := remembered(tb, []byte("h:pump-7"))
	if len(s) == 0 || unsafeStringData(s) != unsafeStringData(p.Name(i)) {
		t.Fatalf("remembered server name is a copy of %q", p.Name(i))
	}
}

func TestPlaceFindsTheRememberedServerWhenTheOrderChanges(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	key := []byte("h:pump-7")
	name := p.Name(tb.Place(key, p))
	// The same servers in another order, plus a new one in front.
	q := newPool("10.0.1.99:8443", threeServers[2], threeServers[1], threeServers[0])
	if got := tb.Place(key, q); got < 0 || q.Name(got) != name {
		t.Fatalf("after reordering, Place = %d, want %s at %d", got, name, q.index(name))
	}
}

func TestPlaceKeepsTheRememberedServerWhenHashingWouldMoveIt(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	// Keys whose rendezvous choice is server 0 move while it is down...
	var keys [][]byte
	for k := 0; len(keys) < 50; k++ {
		key := []byte(fmt.Sprintf("h:asset-%d", k))
		if rendezvous(key, p, -1) == 0 {
			keys = append(keys, key)
		}
	}
	p.setUp(0, false)
	moved := map[string]int{}
	for _, key := range keys {
		i := tb.Place(key, p)
		if i == 0 || i < 0 {
			t.Fatalf("Place(%q) = %d with server 0 down", key, i)
		}
		moved[string(key)] = i
	}
	// ...and stay where they went when it comes back, though hashing
	// would now choose server 0 again.
	p.setUp(0, true)
	for _, key := range keys {
		if got := tb.Place(key, p); got != moved[string(key)] {
			t.Fatalf("Place(%q) = %d after server 0 came back, want %d where it moved", key, got, moved[string(key)])
		}
	}
	// A key never seen before goes where hashing says.
	if got := tb.Place([]byte("h:asset-new-0"), p); got != rendezvous([]byte("h:asset-new-0"), p, -1) {
		t.Fatalf("a new key was not placed by rendezvous")
	}
	checkInvariants(t, tb)
}

func TestPlaceReplacesAServerThatIsDownOrGone(t *testing.T) {
	f := func(what string, change func(p *pool, name string) *pool) {
		t.Helper()
		tb := NewTable(TableOptions{})
		p := newPool(threeServers...)
		key := []byte("h:pump-7")
		old := p.Name(tb.Place(key, p))
		q := change(p, old)
		i := tb.Place(key, q)
		if i < 0 || !q.Up(i) || q.Name(i) == old {
			t.Fatalf("%s: Place = %d, want an up server other than %s", what, i, old)
		}
		if want := rendezvous(key, q, -1); i != want {
			t.Fatalf("%s: Place = %d, want the rendezvous choice %d", what, i, want)
		}
		if s, _ := remembered(tb, key); s != q.Name(i) {
			t.Fatalf("%s: remembered %q, want the new server %q", what, s, q.Name(i))
		}
		// The new choice sticks even after the old server is back.
		if got := tb.Place(key, newPool(threeServers...)); newPool(threeServers...).Name(got) != q.Name(i) {
			t.Fatalf("%s: the new server was not remembered", what)
		}
		if tb.Len() != 1 {
			t.Fatalf("%s: Len() = %d, want 1", what, tb.Len())
		}
		checkInvariants(t, tb)
	}
	f("server down", func(p *pool, name string) *pool { p.setUp(p.index(name), false); return p })
	f("server removed", func(p *pool, name string) *pool { return p.without(name) })
}

func TestPlaceReturnsMinusOneAndRemembersNothingWhenNothingIsUp(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	known := []byte("h:known")
	old := p.Name(tb.Place(known, p))
	for i := range threeServers {
		p.setUp(i, false)
	}
	if got := tb.Place([]byte("h:new"), p); got != -1 {
		t.Fatalf("Place(new key) = %d, want -1", got)
	}
	if _, ok := remembered(tb, []byte("h:new")); ok {
		t.Fatalf("a key placed nowhere was remembered")
	}
	if got := tb.Place(known, p); got != -1 {
		t.Fatalf("Place(known key) = %d, want -1", got)
	}
	if s, ok := remembered(tb, known); !ok || s != old {
		t.Fatalf("known key's server became %q, %v; want %q kept", s, ok, old)
	}
	if got := tb.Place(known, newPool()); got != -1 {
		t.Fatalf("Place over no candidates = %d, want -1", got)
	}
}

func TestIdleEntriesExpireUnlessATunnelIsOpen(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{IdleTimeout: time.Minute, Now: clock.Now})
	p := newPool(threeServers...)
	idle, open, unknown := []byte("h:idle"), []byte("h:open"), []byte("h:unknown")
	tb.Place(idle, p)
	tb.Place(open, p)
	tb.Acquire(open)
	tb.Acquire(unknown) // no-op
	tb.Release(unknown) // no-op

	f := func(advance time.Duration, wantExpired int, wantIdle, wantOpen bool) {
		t.Helper()
		clock.Advance(advance)
		if got := tb.Expire(); got != wantExpired {
			t.Fatalf("after %v more, Expire() = %d, want %d", advance, got, wantExpired)
		}
		if _, ok := remembered(tb, idle); ok != wantIdle {
			t.Fatalf("idle key remembered = %v, want %v", ok, wantIdle)
		}
		if _, ok := remembered(tb, open); ok != wantOpen {
			t.Fatalf("open key remembered = %v, want %v", ok, wantOpen)
		}
		if _, ok := remembered(tb, unknown); ok {
			t.Fatalf("Acquire/Release created an entry")
		}
		checkInvariants(t, tb)
	}
	f(59*time.Second, 0, true, true)
	f(time.Second, 1, false, true) // exactly IdleTimeout
	f(time.Hour, 0, false, true)   // an open tunnel never idles out

	tb.Acquire(open) // two tunnels
	tb.Release(open)
	f(time.Hour, 0, false, true) // one still open
	tb.Release(open)
	f(59*time.Second, 0, false, true) // idle since Release, not since Place
	f(time.Second, 1, false, false)
	if tb.Len() != 0 {
		t.Fatalf("Len() = %d, want 0", tb.Len())
	}
}

func TestActivityPostponesExpiry(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{IdleTimeout: time.Minute, Now: clock.Now})
	p := newPool(threeServers...)
	key := []byte("h:busy")
	tb.Place(key, p)
	for range 10 {
		clock.Advance(50 * time.Second)
		tb.Place(key, p)
		if n := tb.Expire(); n != 0 {
			t.Fatalf("Expire() = %d for a key used every 50s", n)
		}
	}
	clock.Advance(50 * time.Second)
	tb.Release(key) // unbalanced: activity, refs stay at zero
	clock.Advance(59 * time.Second)
	if n := tb.Expire(); n != 0 {
		t.Fatalf("Expire() = %d, want 0: Release counts as activity", n)
	}
	clock.Advance(time.Second)
	if n := tb.Expire(); n != 1 {
		t.Fatalf("Expire() = %d, want 1", n)
	}
}

func TestMaxEntriesEvictsTheLongestIdleFirst(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{MaxEntries: 3, IdleTimeout: time.Hour, Now: clock.Now})
	p := newPool(threeServers...)
	step := func(op func(key []byte), key string) {
		clock.Advance(time.Second)
		op([]byte(key))
	}
	place := func(key []byte) { tb.Place(key, p) }
	f := func(want ...string) {
		t.Helper()
		checkInvariants(t, tb)
		if tb.Len() != len(want) {
			t.Fatalf("Len() = %d, want %d", tb.Len(), len(want))
		}
		for _, k := range want {
			if _, ok := remembered(tb, []byte(k)); !ok {
				t.Fatalf("%q was evicted", k)
			}
		}
	}
	step(place, "a")
	step(place, "b")
	step(place, "c")
	f("a", "b", "c")
	step(place, "a") // a is now the most recent; b the longest idle
	step(place, "d")
	f("a", "c", "d")
	// Entries with open tunnels go last, even when they are the longest idle.
	step(place, "c")
	step(tb.Acquire, "c")
	step(place, "a")
	step(tb.Acquire, "a")
	step(place, "e") // d is the only entry without a tunnel
	f("a", "c", "e")
	step(tb.Acquire, "e")
	// Every other entry has a tunnel: the new key is served but not kept.
	clock.Advance(time.Second)
	if i := tb.Place([]byte("f"), p); i != rendezvous([]byte("f"), p, -1) {
		t.Fatalf("Place(f) on a table full of open tunnels = %d, want the rendezvous choice", i)
	}
	f("a", "c", "e")
	step(tb.Release, "a") // a has no tunnel now, and is older than the new g
	step(place, "g")
	f("c", "e", "g")
}

func TestEvictionTakesEntriesWithTunnelsLongestIdleFirstWhenNothingElseIsLeft(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{MaxEntries: 10, Now: clock.Now})
	p := newPool(threeServers...)
	for _, k := range []string{"a", "b", "c", "d"} {
		clock.Advance(time.Second)
		tb.Place([]byte(k), p)
		tb.Acquire([]byte(k))
	}
	clock.Advance(time.Second)
	tb.Place([]byte("a"), p) // a is now the most recent
	tb.SetLimits(2, 0)
	tb.evict()
	checkInvariants(t, tb)
	for k, want := range map[string]bool{"a": true, "b": false, "c": false, "d": true} {
		if _, ok := remembered(tb, []byte(k)); ok != want {
			t.Fatalf("%q kept = %v, want %v", k, ok, want)
		}
	}
}

func TestMaxEntriesBoundsTheTable(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{MaxEntries: 1000, Now: clock.Now})
	p := newPool(threeServers...)
	for k := 0; k < 10_000; k++ {
		clock.Advance(time.Millisecond)
		tb.Place([]byte(fmt.Sprintf("h:asset-%d", k)), p)
		if tb.Len() > 1000 {
			t.Fatalf("Len() = %d after %d keys, want at most 1000", tb.Len(), k+1)
		}
	}
	if tb.Len() != 1000 {
		t.Fatalf("Len() = %d, want 1000", tb.Len())
	}
	// With a clock that moves between keys, the most recent keys survive.
	for k := 9000; k < 10_000; k++ {
		if _, ok := remembered(tb, []byte(fmt.Sprintf("h:asset-%d", k))); !ok {
			t.Fatalf("recent key %d was evicted", k)
		}
	}
	checkInvariants(t, tb)
}

func TestForgetRemovesEveryEntryOfAServer(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	per := map[string]int{}
	for k := 0; k < 3000; k++ {
		key := []byte(fmt.Sprintf("h:asset-%d", k))
		i := tb.Place(key, p)
		per[p.Name(i)]++
		if k%2 == 0 {
			tb.Acquire(key) // open tunnels do not protect from Forget
		}
	}
	f := func(server string, want int) {
		t.Helper()
		if got := tb.Forget(server); got != want {
			t.Fatalf("Forget(%q) = %d, want %d", server, got, want)
		}
		checkInvariants(t, tb)
	}
	f(threeServers[1], per[threeServers[1]])
	f(threeServers[1], 0)
	f("10.9.9.9:1", 0)
	if tb.Len() != 3000-per[threeServers[1]] {
		t.Fatalf("Len() = %d, want %d", tb.Len(), 3000-per[threeServers[1]])
	}
	for k := 0; k < 3000; k++ {
		if s, ok := remembered(tb, []byte(fmt.Sprintf("h:asset-%d", k))); ok && s == threeServers[1] {
			t.Fatalf("key %d still on a forgotten server", k)
		}
	}
}

func TestTableIsSafeForConcurrentUse(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{MaxEntries: 500, IdleTimeout: time.Minute, Now: clock.Now})
	p := newPool(threeServers...)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			var buf []byte
			for n := 0; n < 5000; n++ {
				buf = fmt.Appendf(buf[:0], "h:asset-%d", r.IntN(1000))
				switch op := r.IntN(100); {
				case op < 50:
					if i := tb.Place(buf, p); i < 0 || i >= 3 {
						t.Errorf("Place = %d", i)
						return
					}
				case op < 70:
					tb.Acquire(buf)
				case op < 90:
					tb.Release(buf)
				case op < 95:
					if i := tb.PlaceExcept(buf, p, r.IntN(4)-1); i < 0 || i >= 3 {
						t.Errorf("PlaceExcept = %d", i)
						return
					}
				case op < 97:
					// A reload: MaxEntries stays within 400..500, the idle timeout within 1..2m.
					tb.SetLimits(400+r.IntN(101), time.Minute+time.Duration(r.IntN(61))*time.Second)
				case op < 98:
					clock.Advance(time.Second)
					tb.Expire()
				case op < 99:
					tb.Forget(threeServers[r.IntN(3)])
				default:
					tb.Len()
				}
			}
		}(g)
	}
	wg.Wait()
	checkInvariants(t, tb)
	if tb.Len() > 500 {
		t.Fatalf("Len() = %d after the dust settled, want at most 500", tb.Len())
	}
}

func TestPlaceExceptPassesOverTheExceptedServerAndReplacesTheKey(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	key := []byte("h:pump-7")
	old := tb.Place(key, p)
	if old < 0 {
		t.Fatal("Place = -1 with all servers up")
	}
	// Excepting another server leaves the key where it is.
	other := (old + 1) % p.Len()
	if got := tb.PlaceExcept(key, p, other); got != old {
		t.Fatalf("PlaceExcept(except %d) = %d, want the remembered %d", other, got, old)
	}
	// Excepting its own server places it anew, by rendezvous among the others...
	i := tb.PlaceExcept(key, p, old)
	if i < 0 || i == old {
		t.Fatalf("PlaceExcept(except the remembered %d) = %d, want another up server", old, i)
	}
	if want := rendezvous(key, p, old); i != want {
		t.Fatalf("PlaceExcept = %d, want the rendezvous choice without %d: %d", i, old, want)
	}
	if s, _ := remembered(tb, key); s != p.Name(i) {
		t.Fatalf("remembered %q, want the new server %q", s, p.Name(i))
	}
	// ...and the new server sticks, though every server is up and hashing would choose the old one.
	for n := 0; n < 10; n++ {
		if got := tb.Place(key, p); got != i {
			t.Fatalf("Place #%d after PlaceExcept = %d, want the new server %d", n, got, i)
		}
	}
	if tb.Len() != 1 {
		t.Fatalf("Len() = %d, want 1", tb.Len())
	}
	checkInvariants(t, tb)
}

func TestPlaceExceptNeverReturnsTheExceptedServerForANewKey(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	passedOver := 0 // keys whose rendezvous choice was the excepted server
	for k := 0; k < 300; k++ {
		key := []byte(fmt.Sprintf("h:asset-%d", k))
		except := k % p.Len()
		if rendezvous(key, p, -1) == except {
			passedOver++
		}
		i := tb.PlaceExcept(key, p, except)
		if i < 0 || i == except {
			t.Fatalf("PlaceExcept(%q, except %d) = %d", key, except, i)
		}
		if want := rendezvous(key, p, except); i != want {
			t.Fatalf("PlaceExcept(%q, except %d) = %d, want the rendezvous choice %d", key, except, i, want)
		}
		if got := tb.Place(key, p); got != i {
			t.Fatalf("Place(%q) = %d after PlaceExcept, want %d remembered", key, got, i)
		}
	}
	if passedOver == 0 {
		t.Fatal("no key had the excepted server as its rendezvous choice: the test proves nothing")
	}
	// Except -1 is Place.
	key := []byte("h:fresh")
	if got, want := tb.PlaceExcept(key, p, -1), rendezvous(key, p, -1); got != want {
		t.Fatalf("PlaceExcept(-1) = %d, want the rendezvous choice %d", got, want)
	}
	checkInvariants(t, tb)
}

func TestPlaceExceptOfTheOnlyUpServerPlacesNothing(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	known := []byte("h:known")
	old := tb.Place(known, p)
	for i := range threeServers {
		p.setUp(i, i == old)
	}
	if got := tb.PlaceExcept([]byte("h:new"), p, old); got != -1 {
		t.Fatalf("PlaceExcept(new key, except the only up server) = %d, want -1", got)
	}
	if _, ok := remembered(tb, []byte("h:new")); ok {
		t.Fatal("a key placed nowhere was remembered")
	}
	if got := tb.PlaceExcept(known, p, old); got != -1 {
		t.Fatalf("PlaceExcept(known key, except the only up server) = %d, want -1", got)
	}
	if s, ok := remembered(tb, known); !ok || s != p.Name(old) {
		t.Fatalf("known key's server became %q, %v; want %q kept", s, ok, p.Name(old))
	}
	if got := tb.Place(known, p); got != old {
		t.Fatalf("Place(known key) = %d, want its server %d", got, old)
	}
}

func TestSetLimitsLowersMaxEntriesAtTheNextNewKey(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{MaxEntries: 10, IdleTimeout: time.Hour, Now: clock.Now})
	p := newPool(threeServers...)
	place := func(key string) {
		clock.Advance(time.Second)
		tb.Place([]byte(key), p)
	}
	for k := 0; k < 10; k++ {
		place(fmt.Sprintf("k%d", k))
	}
	tb.SetLimits(4, time.Hour)
	if tb.Len() != 10 {
		t.Fatalf("Len() = %d right after SetLimits, want 10: the bound applies at the next new key", tb.Len())
	}
	place("k0") // a known key: k0 becomes the most recent, nothing is evicted
	if tb.Len() != 10 {
		t.Fatalf("Len() = %d after placing a known key, want 10", tb.Len())
	}
	place("new")
	if tb.Len() != 4 {
		t.Fatalf("Len() = %d after a new key, want the new bound 4", tb.Len())
	}
	for k, want := range map[string]bool{"k8": true, "k9": true, "k0": true, "new": true, "k1": false, "k7": false} {
		if _, ok := remembered(tb, []byte(k)); ok != want {
			t.Fatalf("%q kept = %v, want %v (the longest idle go first)", k, ok, want)
		}
	}
	checkInvariants(t, tb)

	// Raising the bound lets the table grow again.
	tb.SetLimits(6, time.Hour)
	place("new2")
	place("new3")
	place("new4")
	if tb.Len() != 6 {
		t.Fatalf("Len() = %d after raising the bound to 6 and three new keys, want 6", tb.Len())
	}
	checkInvariants(t, tb)

	// Zero or negative limits are the defaults.
	tb.SetLimits(0, 0)
	if tb.max.Load() != DefaultMaxEntries || tb.IdleTimeout() != DefaultIdleTimeout {
		t.Fatalf("SetLimits(0, 0): max %d, idle %v; want the defaults", tb.max.Load(), tb.IdleTimeout())
	}
	tb.SetLimits(-5, -time.Minute)
	if tb.max.Load() != DefaultMaxEntries || tb.IdleTimeout() != DefaultIdleTimeout {
		t.Fatalf("SetLimits(-5, -1m): max %d, idle %v; want the defaults", tb.max.Load(), tb.IdleTimeout())
	}
}

func TestSetLimitsShorterIdleTimeoutAppliesAtTheNextExpire(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{IdleTimeout: 10 * time.Minute, Now: clock.Now})
	p := newPool(threeServers...)
	old, open, recent := []byte("h:old"), []byte("h:open"), []byte("h:recent")
	tb.Place(old, p)
	tb.Place(open, p)
	tb.Acquire(open)
	clock.Advance(2 * time.Minute)
	tb.Place(recent, p)
	clock.Advance(time.Minute) // old and open idle 3m, recent 1m
	if n := tb.Expire(); n != 0 {
		t.Fatalf("Expire() = %d under a 10m idle timeout, want 0", n)
	}

	tb.SetLimits(0, 90*time.Second)
	if got := tb.IdleTimeout(); got != 90*time.Second {
		t.Fatalf("IdleTimeout() = %v after SetLimits, want 1m30s", got)
	}
	if tb.max.Load() != DefaultMaxEntries {
		t.Fatalf("max %d after SetLimits(0, ...), want the default", tb.max.Load())
	}
	if tb.Len() != 3 {
		t.Fatalf("Len() = %d right after SetLimits, want 3: expiry happens at Expire", tb.Len())
	}
	if n := tb.Expire(); n != 1 {
		t.Fatalf("Expire() = %d, want 1: only the entry idle 3m without a tunnel", n)
	}
	for k, want := range map[string]bool{"h:old": false, "h:open": true, "h:recent": true} {
		if _, ok := remembered(tb, []byte(k)); ok != want {
			t.Fatalf("%q kept = %v, want %v", k, ok, want)
		}
	}
	clock.Advance(29 * time.Second) // recent idle 1m29s
	if n := tb.Expire(); n != 0 {
		t.Fatalf("Expire() = %d with recent idle 1m29s, want 0", n)
	}
	clock.Advance(time.Second) // exactly the new timeout
	if n := tb.Expire(); n != 1 {
		t.Fatalf("Expire() = %d with recent idle 1m30s, want 1", n)
	}
	if _, ok := remembered(tb, recent); ok {
		t.Fatal("recent key still remembered past the new idle timeout")
	}
	checkInvariants(t, tb)
}
