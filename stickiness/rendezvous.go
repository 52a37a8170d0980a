package stickiness

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

// rendezvous returns the index of the Up candidate of c with the highest score for key — the same in
// every process that has the same server names — or -1 when none is Up; candidate except (or none for
// -1) is treated as not Up.
func rendezvous(key []byte, c Candidates, except int) int {
	kh := mix64(fnv1a(key))
	best, bestScore, bestName := -1, uint64(0), ""
	for i, n := 0, c.Len(); i < n; i++ {
		if i == except || !c.Up(i) {
			continue
		}
		name := c.Name(i)
		s := score(kh, name)
		// Ties (practically never) go to the smaller name so that the
		// order of the candidates never matters.
		if best < 0 || s > bestScore || (s == bestScore && name < bestName) {
			best, bestScore, bestName = i, s, name
		}
	}
	return best
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
