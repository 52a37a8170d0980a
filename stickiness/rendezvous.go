package stickiness

import "math"

// Candidates is what a pool offers to placement: servers identified by a
// stable name (their address), and which of them may take new traffic right
// now. The load balancer's pool implements it; calling its methods through
// the interface must not allocate.
//
// A Table calls these methods while holding one of its internal locks, so
// they must be quick and must not call back into the Table.
type Candidates interface {
	// Len returns the number of servers, up or not.
	Len() int
	// Name returns the stable identity of server i (its address): the same
	// across processes that have the same config, and unique within c.
	Name(i int) string
	// Up reports whether server i may take new traffic.
	Up(i int) bool
}

// Weighted is what Candidates may add: server i's weight in placement, in (0, 1] — 1 for every server
// but one ramping up after it came back (a pool's slow_start), which wins new keys in proportion.
type Weighted interface {
	Weight(i int) float64
}

// rendezvous returns the index of the Up candidate of c with the highest score for key — the same in
// every process that has the same server names — or -1 when none is Up; candidate except (or none for
// -1) is treated as not Up. A candidate of weight w < 1 (Weighted) competes with its score weighted
// (-w / ln u of its score u in (0, 1), weighted rendezvous hashing): it wins about w / (w + others) of
// the keys it would have won, and the keys it wins at w it still wins at any larger weight.
func rendezvous(key []byte, c Candidates, except int) int {
	kh := mix64(fnv1a(key))
	wc, _ := c.(Weighted)
	best, bestScore, bestName := -1, uint64(0), ""
	for i, n := 0, c.Len(); i < n; i++ {
		if i == except || !c.Up(i) {
			continue
		}
		name := c.Name(i)
		s := score(kh, name)
		if wc != nil {
			if w := wc.Weight(i); w < 1 {
				s = weighted(s, w)
			}
		}
		// Ties (practically never) go to the smaller name so that the
		// order of the candidates never matters.
		if best < 0 || s > bestScore || (s == bestScore && name < bestName) {
			best, bestScore, bestName = i, s, name
		}
	}
	return best
}

// weighted is score s of a server of weight w in (0, 1), on the scale of full-weight scores: the
// score s' whose -1 / ln u' equals -w / ln u of s (u = s / 2^64), u' = u^(1/w), which is below u.
func weighted(s uint64, w float64) uint64 {
	if w <= 0 {
		return 0
	}
	u := (float64(s>>11) + 0.5) / (1 << 53)
	return uint64(math.Pow(u, 1/w) * (1 << 63) * 2)
}

// score is the rendezvous weight of the server called name for the key whose
// mixed hash is kh.
func score(kh uint64, name string) uint64 {
	return mix64(kh ^ fnv1aString(name))
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnv1a(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

func fnv1aString(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// mix64 is the SplitMix64 finalizer: a bijection on uint64 in which every
// input bit affects every output bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
