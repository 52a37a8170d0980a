package lb

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// A policy chooses a server for a request among the available ones of a pool (Server.Available), in
// the pool's active tier (its primaries while any is available, else its backups). The request path
// calls the pool's policy and never asks which one it is: each balance is a type here and one entry in
// balances.
type policy interface {
	// pick returns an available server for the request other than except (a server that just failed
	// it; nil for none), with the attempt counted in flight to it (Server.begin; the caller ends it
	// with Pool.end), or no server now. It must not allocate for a known client.
	pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice
	// refuses reports whether an answer with this status means the server no longer serves the pool
	// (a leader stepping down answers 503): an idempotent request then waits for the checks and goes to
	// the new server.
	refuses(status int) bool
	// cookie returns the cookie that pins the client to s, or "" when there is none to set.
	cookie(ctx *fasthttp.RequestCtx, s *Server) (name, value string)
	// hold records a tunnel opened to s for the request's client; the returned release (nil if there is
	// nothing to release) is called when the tunnel closes.
	hold(ctx *fasthttp.RequestCtx, s *Server) (release func())
	// removed forgets what the policy remembers of s (it left the pool).
	removed(s *Server)
	// describe and writeMetrics add what is particular to the policy to /status and /metrics; describe
	// is called with ps.Servers filled in, in the order of st.servers.
	describe(ps *admin.PoolStatus, st *poolView)
	writeMetrics(w io.Writer, labels string, st *poolView)
}

// choice is what a policy picked for a request.
type choice struct {
	s *Server // nil: no server now
	// pinned means the request belongs to s and nowhere else (a later part of a multi-part request):
	// it fails with 502 if s is nil or fails, and is never retried on another server.
	pinned bool
}

// take returns s as the choice for the request, counted in flight to it.
func take(ctx *fasthttp.RequestCtx, s *Server) choice {
	if s != nil {
		s.begin(bodyBytes(&ctx.Request.Header))
	}
	return choice{s: s}
}

// bodyBytes is what a request's body counts against high_watermark_bytes when it is sent: its
// Content-Length (a chunked body counts its bytes as they stream instead).
func bodyBytes(h *fasthttp.RequestHeader) int64 { return int64(max(h.ContentLength(), 0)) }

// health is the pool's health check (healthcheck.Leader or healthcheck.Checker): the only writer of its
// servers' health.
type health interface {
	Start(ctx context.Context)
	Ready() <-chan struct{}
	Set(targets []*healthcheck.Target)
	Update(o healthcheck.Options)
	Report(t *healthcheck.Target, err error)
	Probe(t *healthcheck.Target)
	Status() []healthcheck.ServerStatus
}

// balance is one value of a pool's balance key: how its servers are checked and chosen.
type balance struct {
	newHealth func(o healthcheck.Options, targets []*healthcheck.Target) health
	newPolicy func(p *Pool, cfg *config.Pool) policy
}

// balances are the values of balance; config validation accepts exactly these.
var balances = map[string]balance{
	"leader": {
		newHealth: func(o healthcheck.Options, ts []*healthcheck.Target) health { return healthcheck.NewLeader(o, ts) },
		newPolicy: func(p *Pool, _ *config.Pool) policy { return &leaderPolicy{leader: p.health.(*healthcheck.Leader)} },
	},
	"sticky": {
		newHealth: newChecker,
		newPolicy: newStickyPolicy,
	},
	"roundrobin": {
		newHealth: newChecker,
		newPolicy: newRoundRobinPolicy,
	},
}

func newChecker(o healthcheck.Options, ts []*healthcheck.Target) health {
	return healthcheck.NewChecker(o, ts)
}

// leaderPolicy sends everything to the elected leader (balance = "leader").
type leaderPolicy struct{ leader *healthcheck.Leader }

func (lp *leaderPolicy) pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice {
	cur := lp.leader.Current()
	if cur == nil {
		return choice{}
	}
	for _, s := range st.servers {
		if s.health == cur {
			if s == except || !s.Available() {
				return choice{}
			}
			return take(ctx, s)
		}
	}
	return choice{}
}

func (lp *leaderPolicy) refuses(status int) bool                               { return status == fasthttp.StatusServiceUnavailable }
func (lp *leaderPolicy) cookie(*fasthttp.RequestCtx, *Server) (string, string) { return "", "" }
func (lp *leaderPolicy) hold(*fasthttp.RequestCtx, *Server) func()             { return nil }
func (lp *leaderPolicy) removed(*Server)                                       {}

func (lp *leaderPolicy) describe(ps *admin.PoolStatus, _ *poolView) {
	if cur := lp.leader.Current(); cur != nil {
		ps.Leader = cur.Addr()
	}
	ps.LeaderChanges = lp.leader.Changes()
	ps.SplitBrains = lp.leader.SplitBrains()
}

func (lp *leaderPolicy) writeMetrics(w io.Writer, l string, _ *poolView) {
	metrics.WriteCounterUint64(w, "fairlead_leader_changes_total{"+l+"}", lp.leader.Changes())
	metrics.WriteCounterUint64(w, "fairlead_split_brain_total{"+l+"}", lp.leader.SplitBrains())
}

// stickyPolicy keeps each key (asset, session) on one server (balance = "sticky"): a known key whose
// server is available stays there; a new key, or one whose server is not available, is placed by
// rendezvous hashing over the available servers. A request without a key goes round robin.
type stickyPolicy struct {
	keys       *stickiness.Extractor
	table      *stickiness.Table // the pool's: it outlives config changes
	cookieName string            // "" without a sticky cookie
	cookieIdx  int               // index of the cookie source in keys, -1 without a sticky cookie
	rr         *roundRobin
}

func newStickyPolicy(p *Pool, cfg *config.Pool) policy {
	keys, _ := stickiness.NewExtractor(cfg.Sticky.Keys) // validated with the config
	if p.table == nil {
		p.table = stickiness.NewTable(stickiness.TableOptions{})
	}
	p.table.SetLimits(cfg.Sticky.MaxEntries, cfg.Sticky.IdleTimeout.D)
	sp := &stickyPolicy{keys: keys, table: p.table, cookieIdx: -1, rr: &p.rr}
	if c := cfg.Sticky.Cookie; c != "" {
		sp.cookieName = c
		sp.cookieIdx = slices.Index(cfg.Sticky.Keys, "cookie:"+c)
	}
	return sp
}

func (sp *stickyPolicy) pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice {
	t := st.active()
	var buf [160]byte
	key, src, ok := sp.keys.Key(buf[:0], ctx)
	if !ok {
		return take(ctx, sp.rr.next(t, except))
	}
	if src == sp.cookieIdx {
		// The sticky cookie names its server directly (as HAProxy's "cookie insert" does); a cookie
		// naming a server that is not available (or not in the active tier) falls back to placement by
		// its value.
		v := key[2:]
		for _, s := range t.servers {
			if string(v) == s.cookie && s != except && s.Available() {
				return take(ctx, s)
			}
		}
	}
	if i := sp.table.PlaceExcept(key, t, t.index(except)); i >= 0 {
		return take(ctx, t.servers[i])
	}
	return choice{}
}

func (sp *stickyPolicy) refuses(int) bool { return false }

func (sp *stickyPolicy) cookie(ctx *fasthttp.RequestCtx, s *Server) (string, string) {
	if sp.cookieName == "" || string(ctx.Request.Header.Cookie(sp.cookieName)) == s.cookie {
		return "", ""
	}
	return sp.cookieName, s.cookie
}

func (sp *stickyPolicy) hold(ctx *fasthttp.RequestCtx, _ *Server) func() {
	var buf [160]byte
	k, _, ok := sp.keys.Key(buf[:0], ctx)
	if !ok {
		return nil
	}
	key := bytes.Clone(k)
	sp.table.Acquire(key)
	return func() { sp.table.Release(key) }
}

func (sp *stickyPolicy) removed(s *Server) { sp.table.Forget(s.Addr) }

func (sp *stickyPolicy) describe(ps *admin.PoolStatus, _ *poolView) {
	ps.StickyEntries = sp.table.Len()
}

func (sp *stickyPolicy) writeMetrics(w io.Writer, l string, _ *poolView) {
	metrics.WriteGaugeUint64(w, "fairlead_pool_sticky_entries{"+l+"}", uint64(sp.table.Len()))
}

// roundRobin hands out the available servers of a tier in turn (the sticky policy's requests without
// a key).
type roundRobin struct{ n atomic.Uint32 }

// next returns the next available server of t other than except, or nil. Under slow_start a server
// ramping up takes its turn with a probability of its weight, and passes it on otherwise (to the next
// server, or to itself when it is the only one).
func (rr *roundRobin) next(t *tier, except *Server) *Server {
	n := len(t.servers)
	if n == 0 {
		return nil
	}
	start := int(rr.n.Add(1))
	var passed *Server
	for k := 0; k < n; k++ {
		if s := t.servers[(start+k)%n]; s != except && s.Available() {
			if t.slowStart > 0 && passed == nil {
				if w := t.Weight((start + k) % n); w < 1 && rand.Float64() >= w {
					passed = s
					continue
				}
			}
			return s
		}
	}
	return passed
}

// tier is the primaries or the backups of a pool, in config order: the candidates of placement (or
// all of a pool's servers, the candidates of its pins).
type tier struct {
	which     int // primaries, backups, or everyone
	servers   []*Server
	slowStart time.Duration // the pool's slow_start (Weight)
}

const (
	primaries = 0
	backups   = 1
	everyone  = -1
)

var tierNames = [2]string{"primaries", "backups"}

func (t *tier) Len() int          { return len(t.servers) }
func (t *tier) Name(i int) string { return t.servers[i].Addr }
func (t *tier) Up(i int) bool     { return t.servers[i].Available() }

// Weight is server i's share of new placements under slow_start (stickiness.Weighted).
func (t *tier) Weight(i int) float64 {
	if t.slowStart <= 0 {
		return 1
	}
	return t.servers[i].weight(time.Now().UnixNano(), t.slowStart)
}

// index returns the position of s in t, or -1 (s nil or not in t).
func (t *tier) index(s *Server) int {
	if s == nil {
		return -1
	}
	return slices.Index(t.servers, s)
}

func (t *tier) anyAvailable() bool {
	for _, s := range t.servers {
		if s.Available() {
			return true
		}
	}
	return false
}

// serving returns the tier that takes traffic now: the primaries while any is available, else the
// backups while any is, else -1 (none is available).
func (st *poolView) serving() int {
	switch {
	case st.tiers[primaries].anyAvailable():
		return primaries
	case st.tiers[backups].anyAvailable():
		return backups
	}
	return -1
}

// active is the tier policies choose in: the serving one, or the primaries when no server is available.
func (st *poolView) active() *tier {
	if len(st.tiers[backups].servers) > 0 && st.serving() == backups {
		return &st.tiers[backups]
	}
	return &st.tiers[primaries]
}
