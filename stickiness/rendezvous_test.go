package stickiness

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"testing"
)

// pool is a Candidates for tests: servers by name, all up unless marked down.
type pool struct {
	names []string
	down  []bool
}

func newPool(names ...string) *pool {
	return &pool{names: names, down: make([]bool, len(names))}
}

func (p *pool) Len() int             { return len(p.names) }
func (p *pool) Name(i int) string    { return p.names[i] }
func (p *pool) Up(i int) bool        { return !p.down[i] }
func (p *pool) setUp(i int, up bool) { p.down[i] = !up }

// index returns the index of the server called name, or -1.
func (p *pool) index(name string) int {
	for i, n := range p.names {
		if n == name {
			return i
		}
	}
	return -1
}

// without returns a copy of p without the server called name.
func (p *pool) without(name string) *pool {
	q := newPool()
	for i, n := range p.names {
		if n != name {
			q.names = append(q.names, n)
			q.down = append(q.down, p.down[i])
		}
	}
	return q
}

var threeServers = []string{"10.0.1.11:8443", "10.0.1.12:8443", "10.0.1.13:8443"}

func TestRendezvousIsFixedAcrossProcesses(t *testing.T) {
	// These indices pin the hash: if they change, every key in a running
	// cluster moves on upgrade. Change them only on purpose.
	p := newPool(threeServers...)
	f := func(key string, want int) {
		t.Helper()
		if got := rendezvous([]byte(key), p, -1); got != want {
			t.Fatalf("rendezvous(%q, -1) = %d, want %d", key, got, want)
		}
	}
	f("h:pump-7", 0)
	f("h:valve-2", 0)
	f("q:asset-0001", 1)
	f("h:tank-1", 1)
	f("c:cx-3", 0)
	f("s:192.0.2.7", 2)
	f("s:2001:db8::1", 0)
	f("", 0)

	// And the score itself, so that a change is caught even where it
	// happens to leave the choices above alone.
	if got := score(mix64(fnv1a([]byte("h:pump-7"))), threeServers[0]); got != 0xe0dad8bfbdf3d9d2 {
		t.Fatalf("score(h:pump-7, %s) = %#x, want 0xe0dad8bfbdf3d9d2", threeServers[0], got)
	}
}

func TestHashesAreStandardFNV1a(t *testing.T) {
	f := func(s string) {
		t.Helper()
		h := fnv.New64a()
		h.Write([]byte(s))
		if want := h.Sum64(); fnv1a([]byte(s)) != want || fnv1aString(s) != want {
			t.Fatalf("fnv1a(%q) = %#x / %#x, want %#x", s, fnv1a([]byte(s)), fnv1aString(s), want)
		}
	}
	f("")
	f("a")
	f("10.0.1.11:8443")
	f("h:pump-7")
}

func TestRendezvousScoresDoNotDependOnOrder(t *testing.T) {
	a := newPool(threeServers...)
	b := newPool(threeServers[2], threeServers[0], threeServers[1])
	for k := 0; k < 1000; k++ {
		key := []byte(fmt.Sprintf("h:asset-%d", k))
		if na, nb := a.Name(rendezvous(key, a, -1)), b.Name(rendezvous(key, b, -1)); na != nb {
			t.Fatalf("key %q goes to %s with one order and %s with another", key, na, nb)
		}
	}
}

func TestRendezvousSpreadsKeysEvenly(t *testing.T) {
	f := func(servers []string, keys int, format string) {
		t.Helper()
		p := newPool(servers...)
		counts := make([]int, len(servers))
		for k := 0; k < keys; k++ {
			counts[rendezvous([]byte(fmt.Sprintf(format, k)), p, -1)]++
		}
		even := keys / len(servers)
		for i, n := range counts {
			if n < even*9/10 || n > even*11/10 {
				t.Fatalf("server %d got %d of %d keys (%v); want within 10%% of %d", i, n, keys, counts, even)
			}
		}
	}
	f(threeServers, 30_000, "h:asset-%d")
	f(threeServers, 30_000, "s:10.0.%d.1") // sequential, similar keys
	f([]string{"a", "b", "c"}, 30_000, "q:%08d")
	f([]string{"cx1:8443", "cx2:8443", "cx3:8443", "cx4:8443", "cx5:8443"}, 50_000, "h:%x")
}

func TestRendezvousMovesOnlyTheKeysOfARemovedServer(t *testing.T) {
	all := newPool(threeServers...)
	f := func(removed string, remaining *pool) {
		t.Helper()
		moved := 0
		for k := 0; k < 30_000; k++ {
			key := []byte(fmt.Sprintf("h:asset-%d", k))
			before := all.Name(rendezvous(key, all, -1))
			i := rendezvous(key, remaining, -1)
			if i < 0 || !remaining.Up(i) {
				t.Fatalf("key %q placed on %d, not an up server", key, i)
			}
			after := remaining.Name(i)
			if before != removed && after != before {
				t.Fatalf("key %q moved from %s to %s though only %s went away", key, before, after, removed)
			}
			if before == removed {
				moved++
			}
		}
		if moved < 9000 || moved > 11000 {
			t.Fatalf("%d keys moved off %s, want about a third", moved, removed)
		}
	}
	for i, name := range threeServers {
		f(name, all.without(name))
		down := newPool(threeServers...)
		down.setUp(i, false)
		f(name, down)
	}
}

func TestRendezvousReturnsMinusOneWhenNothingIsUp(t *testing.T) {
	f := func(p *pool) {
		t.Helper()
		if got := rendezvous([]byte("h:pump-7"), p, -1); got != -1 {
			t.Fatalf("rendezvous over %v (down %v) = %d, want -1", p.names, p.down, got)
		}
	}
	f(newPool())
	p := newPool(threeServers...)
	for i := range threeServers {
		p.setUp(i, false)
	}
	f(p)
}

func TestRendezvousSkipsDownServers(t *testing.T) {
	p := newPool(threeServers...)
	p.setUp(0, false)
	p.setUp(2, false)
	for k := 0; k < 100; k++ {
		if got := rendezvous([]byte(fmt.Sprintf("h:%d", k)), p, -1); got != 1 {
			t.Fatalf("rendezvous with only server 1 up = %d", got)
		}
	}
}

// weightedTier is a set of up candidates with weights.
type weightedTier struct {
	names   []string
	weights []float64
}

func (w weightedTier) Len() int             { return len(w.names) }
func (w weightedTier) Name(i int) string    { return w.names[i] }
func (w weightedTier) Up(int) bool          { return true }
func (w weightedTier) Weight(i int) float64 { return w.weights[i] }

// A candidate of weight w wins about w / (w + 1) of the keys against one of full weight, only keys it
// would win at full weight, and more of them as w grows (slow_start).
func TestWeightedRendezvousGivesARampingServerItsShare(t *testing.T) {
	const keys = 20000
	names := []string{"10.0.0.1:80", "10.0.0.2:80"}
	won := func(w float64) (n int, set map[int]bool) {
		set = map[int]bool{}
		c := weightedTier{names: names, weights: []float64{1, w}}
		for k := range keys {
			if rendezvous([]byte("asset-"+strconv.Itoa(k)), c, -1) == 1 {
				n++
				set[k] = true
			}
		}
		return n, set
	}
	full, fullSet := won(1)
	prev := map[int]bool{}
	for _, w := range []float64{0.05, 0.25, 0.5, 0.75, 1} {
		n, set := won(w)
		want := w / (w + 1) * keys
		if math.Abs(float64(n)-want) > 0.03*keys {
			t.Errorf("weight %.2f: %d of %d keys, want about %.0f", w, n, keys, want)
		}
		for k := range set {
			if !fullSet[k] && w < 1 {
				t.Fatalf("weight %.2f: key %d won, which full weight does not win", w, k)
			}
		}
		for k := range prev {
			if !set[k] {
				t.Fatalf("weight %.2f: key %d, won at a lower weight, is lost", w, k)
			}
		}
		prev = set
	}
	if full != len(fullSet) {
		t.Fatal("inconsistent")
	}
}
