package frontend

import (
	"cmp"
	"hash/maphash"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// SourceLimits are the limits per client address ([frontend] rate_per_source, burst_per_source,
// max_conns_per_source); zero values are off.
type SourceLimits struct {
	Rate     float64 // requests per second, refilling a bucket of Burst
	Burst    float64
	MaxConns int              // connections open at once, counted from accept to close
	Trusted  []netip.Prefix   // trusted_proxies: exempt from MaxConns (they carry many clients)
	Now      func() time.Time // the clock (tests inject one); time.Now if nil
}

// Sources keeps, per client address, the connections it has open and its request bucket. An address
// has an entry while it has a connection open or its bucket is not full; the table is bounded
// (sourceShardMax per shard): when a shard is full of addresses that are all busy, a new address is
// not tracked (its requests pass; it could not have spent a full bucket yet). Safe for concurrent use.
type Sources struct {
	lim    atomic.Pointer[SourceLimits]
	seed   maphash.Seed
	shards [64]sourceShard

	// RateLimited and ConnLimited count the requests answered 429 and the connections closed at accept.
	RateLimited, ConnLimited atomic.Uint64
}

const sourceShardMax = 4096 // addresses per shard: 262,144 in all, about 20 MiB at most

type sourceShard struct {
	mu    sync.Mutex
	m     map[netip.Addr]*source
	swept time.Time // the last sweep: a full shard is swept at most once a second
}

type source struct {
	conns  int
	tokens float64
	last   time.Time // when tokens was last brought up to date
}

// NewSources returns a table with the limits lim.
func NewSources(lim SourceLimits) *Sources {
	s := &Sources{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = map[netip.Addr]*source{}
	}
	s.SetLimits(lim)
	return s
}

// SetLimits applies new limits (a reload); the addresses' counts and buckets stay.
func (s *Sources) SetLimits(lim SourceLimits) {
	if lim.Now == nil {
		lim.Now = time.Now
	}
	if lim.Burst <= 0 {
		lim.Burst = lim.Rate
	}
	s.lim.Store(&lim)
}

// Limits returns the limits in force.
func (s *Sources) Limits() SourceLimits { return *s.lim.Load() }

func (s *Sources) shard(a netip.Addr) *sourceShard {
	b := a.As16()
	return &s.shards[maphash.Bytes(s.seed, b[:])%uint64(len(s.shards))]
}

// entry returns a's entry (sh.mu held), made if need be; nil when the shard is full of busy addresses.
func (sh *sourceShard) entry(a netip.Addr, lim *SourceLimits, now time.Time) *source {
	if e := sh.m[a]; e != nil {
		return e
	}
	if len(sh.m) >= sourceShardMax {
		if now.Sub(sh.swept) < time.Second { // a stream of new addresses does not sweep at each one
			return nil
		}
		sh.swept = now
		sh.sweep(lim, now)
		if len(sh.m) >= sourceShardMax {
			return nil
		}
	}
	e := &source{tokens: lim.Burst, last: now}
	sh.m[a] = e
	return e
}

// sweep drops the entries of addresses with no connection open and a full bucket (sh.mu held).
func (sh *sourceShard) sweep(lim *SourceLimits, now time.Time) {
	for a, e := range sh.m {
		if e.conns == 0 && e.refill(lim, now) >= lim.Burst {
			delete(sh.m, a)
		}
	}
}

// refill brings e's bucket up to date and returns its tokens.
func (e *source) refill(lim *SourceLimits, now time.Time) float64 {
	if lim.Rate > 0 {
		e.tokens = min(lim.Burst, e.tokens+now.Sub(e.last).Seconds()*lim.Rate)
	} else {
		e.tokens = lim.Burst
	}
	e.last = now
	return e.tokens
}

// Admit takes one request of address a from its bucket: ok, or not and the whole seconds after which
// one will be there again (Retry-After).
func (s *Sources) Admit(a netip.Addr) (ok bool, retryAfter int) {
	lim := s.lim.Load()
	if lim.Rate <= 0 || !a.IsValid() {
		return true, 0
	}
	a = a.Unmap()
	now := lim.Now()
	sh := s.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(a, lim, now)
	if e == nil {
		return true, 0
	}
	if e.refill(lim, now) >= 1 {
		e.tokens--
		return true, 0
	}
	s.RateLimited.Add(1)
	return false, max(1, int(math.Ceil((1-e.tokens)/lim.Rate)))
}

// open counts a connection of a (counted); ok is false (nothing counted) when a has
// max_conns_per_source open. A connection not counted (the shard is full of busy addresses) passes.
func (s *Sources) open(a netip.Addr, force bool) (counted, ok bool) {
	lim := s.lim.Load()
	sh := s.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(a, lim, lim.Now())
	switch {
	case e == nil:
		return false, true
	case !force && lim.MaxConns > 0 && e.conns >= lim.MaxConns:
		return false, false
	}
	e.conns++
	return true, true
}

// close uncounts a connection of a.
func (s *Sources) close(a netip.Addr) {
	lim := s.lim.Load()
	sh := s.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[a]; e != nil {
		if e.conns--; e.conns <= 0 && e.refill(lim, lim.Now()) >= lim.Burst {
			delete(sh.m, a)
		}
	}
}

// Conns returns how many connections a has open (counted while max_conns_per_source is set).
func (s *Sources) Conns(a netip.Addr) int {
	sh := s.shard(a.Unmap())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[a.Unmap()]; e != nil {
		return e.conns
	}
	return 0
}

// accept counts a new connection c of the front end: nil, or the function that uncounts it (once)
// when it closes; ok is false when it is over max_conns_per_source (counted; the caller closes it).
func (s *Sources) accept(c net.Conn) (release func(), ok bool) { return s.count(c, false) }

// Adopt counts c, a connection the old process of a binary upgrade admitted and handed over (a
// tunnel's), against max_conns_per_source as if accepted here, whatever the count; release uncounts it
// (once). nil when nothing is counted.
func (s *Sources) Adopt(c net.Conn) (release func()) {
	release, _ = s.count(c, true)
	return release
}

// AdoptAddr is Adopt of a connection whose client is a, which may not be its peer: one that came
// through a proxy_protocol sender, counted by the client its PROXY header named, as where it was
// accepted.
func (s *Sources) AdoptAddr(a netip.Addr) (release func()) {
	release, _ = s.countAddr(a.Unmap(), true)
	return release
}

// count is accept, or Adopt when force.
func (s *Sources) count(c net.Conn, force bool) (release func(), ok bool) {
	lim := s.lim.Load()
	if lim.MaxConns <= 0 {
		return nil, true
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return nil, true
	}
	return s.countAddr(ap.Addr().Unmap(), force)
}

// countAddr is count of a connection from a (a proxy_protocol sender's, once its header named it).
func (s *Sources) countAddr(a netip.Addr, force bool) (release func(), ok bool) {
	lim := s.lim.Load()
	if lim.MaxConns <= 0 {
		return nil, true
	}
	for _, p := range lim.Trusted {
		if p.Contains(a) {
			return nil, true
		}
	}
	counted, ok := s.open(a, force)
	switch {
	case !ok:
		s.ConnLimited.Add(1)
		return nil, false
	case !counted:
		return nil, true
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			s.close(a)
		}
	}, true
}

// Bucket is one address's request bucket as a binary upgrade hands it over (Sources.Export,
// Sources.Import): the tokens it had left at the moment of the export.
type Bucket struct {
	Addr   netip.Addr `json:"addr"`
	Tokens float64    `json:"tokens"`
}

// Export returns, as of at (the clock's now), the buckets that are not full: of at most n addresses,
// those that spent the most (a bucket nearly full lets a whole burst through whatever it is told, and
// an address that spent its rate is the one the limit is for). Nothing when rate_per_source is off.
func (s *Sources) Export(n int) (at time.Time, buckets []Bucket) {
	lim := s.lim.Load()
	at = lim.Now()
	if lim.Rate <= 0 || n <= 0 {
		return at, nil
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for a, e := range sh.m {
			if t := e.refill(lim, at); t < lim.Burst {
				buckets = append(buckets, Bucket{Addr: a, Tokens: t})
			}
		}
		sh.mu.Unlock()
	}
	if len(buckets) > n {
		slices.SortFunc(buckets, func(x, y Bucket) int { return cmp.Compare(x.Tokens, y.Tokens) })
		buckets = buckets[:n]
	}
	return at, buckets
}

// Import takes the buckets another process exported at at (the old process of a binary upgrade): each
// address has what it had left then plus what the rate refilled since, so that an address that spent
// its rate before the upgrade has spent it after. An address known here already keeps the emptier of
// the two buckets. It returns how many buckets it took (a full one, or one for a full shard, is not).
func (s *Sources) Import(at time.Time, buckets []Bucket) int {
	lim := s.lim.Load()
	if lim.Rate <= 0 {
		return 0
	}
	now := lim.Now()
	refill := max(now.Sub(at), 0).Seconds() * lim.Rate
	n := 0
	for _, b := range buckets {
		tokens := min(lim.Burst, b.Tokens+refill)
		if !b.Addr.IsValid() || tokens >= lim.Burst {
			continue
		}
		a := b.Addr.Unmap()
		sh := s.shard(a)
		sh.mu.Lock()
		if e := sh.entry(a, lim, now); e != nil {
			e.tokens = min(e.refill(lim, now), tokens)
			n++
		}
		sh.mu.Unlock()
	}
	return n
}
