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

// Rendezvous returns the index of the Up candidate with the highest
// rendezvous (highest-random-weight) score for key, or -1 if none is up.
//
// The score of a server depends only on key and the server's name, so the
// choice is the same in every process and does not depend on the order of
// the candidates; when a server goes down only its keys move, and when it
// comes back only the keys it would have had move back. The hash is fixed:
// the score is mix(mix(fnv1a(key)) ^ fnv1a(name)), with 64-bit FNV-1a and
// the SplitMix64 finalizer as mix. Changing it would reshuffle every key in a
// running cluster.
//
// Rendezvous does not allocate. It costs one hash of key plus one hash of
// each up server's name.
func Rendezvous(key []byte, c Candidates) int { return rendezvous(key, c, -1) }

// rendezvous is Rendezvous with candidate except (or none for -1) treated as not Up.
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
