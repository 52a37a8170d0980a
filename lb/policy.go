package lb

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// A policy chooses a server for a request among the available ones of a pool (Server.Available), in
// the pool's active tier (its primaries while any is available, else its backups). The request path
// calls the pool's policy and never asks which one it is: each balance is a type here and one entry in
// balances. A policy is pick, and holds its own state (the sticky table, the pins, the round-robin
// cycle), which the next config's policy of the same pool takes over (newPolicy's old). What only some
// policies do is an interface of its own, found once when the pool's view is made (poolView): refuser,
// clientPins, and every policy's report for /status and /metrics, in lb's words (policyReport).
type policy interface {
	// pick returns an available server for the request other than except (a server that just failed
	// it; nil for none), with the attempt counted in flight to it (Server.begin; the caller ends it
	// with Pool.end), or no server now. It must not allocate for a known client.
	pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice
	// report is what the policy adds to /status and /metrics (admin.go and metrics.go write it out).
	report(st *poolView) policyReport
}

// refuser is a policy for which an answer with some status means the server no longer serves the pool
// (a leader stepping down answers 503): an idempotent request then waits for the checks and goes to
// the new server.
type refuser interface{ refuses(status int) bool }

// clientPins is a policy that pins each client to a server: by a cookie it sets (cookie returns it, or
// "" when there is none to set), and by the tunnels it holds open (hold records one; its release is
// called when the tunnel closes). removed forgets what it remembers of s (it left the pool).
type clientPins interface {
	cookie(ctx *fasthttp.RequestCtx, s *Server) (name, value string)
	hold(ctx *fasthttp.RequestCtx, s *Server) (key []byte, release func())
	holdKey(key []byte) (release func())
	removed(s *Server)
}

// policyReport is what a policy says of itself and its servers, for /status (admin.go) and /metrics
// (metrics.go).
type policyReport struct {
	leader     *healthcheck.Leader // balance = "leader": the leader, its changes and split brains
	sticky     *stickiness.Table   // balance = "sticky": the keys
	roundRobin bool                // balance = "roundrobin": the watermarks, writable and the pins below
	hw         int
	hwb        int64
	writable   []bool            // by server, in the order of the view's servers
	pinHeader  string            // multipart_header, "" without pins
	pins       *stickiness.Table // the multi-part pins (with pinHeader)
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
	// newPolicy makes the policy of cfg; old is the pool's policy before (of the same balance: a pool
	// whose balance changes is a new pool), nil for a new pool: the new policy takes over its state.
	newPolicy func(cfg *config.Pool, old policy, h health) policy
}

// balances are the values of balance; config validation accepts exactly these.
var balances = map[string]balance{
	"leader": {
		newHealth: func(o healthcheck.Options, ts []*healthcheck.Target) health { return healthcheck.NewLeader(o, ts) },
		newPolicy: func(_ *config.Pool, _ policy, h health) policy { return &leaderPolicy{leader: h.(*healthcheck.Leader)} },
	},
	"sticky": {
		newHealth: newChecker,
		newPolicy: func(cfg *config.Pool, old policy, _ health) policy { return newStickyPolicy(cfg, old) },
	},
	"roundrobin": {
		newHealth: newChecker,
		newPolicy: func(cfg *config.Pool, old policy, _ health) policy { return newRoundRobinPolicy(cfg, old) },
	},
}

func newChecker(o healthcheck.Options, ts []*healthcheck.Target) health {
	return healthcheck.NewChecker(o, ts)
}

// policyTables are the tables a policy keeps (the sticky keys, the pins), which the pool's janitor
// expires.
func policyTables(pol policy) []*stickiness.Table {
	switch p := pol.(type) {
	case *stickyPolicy:
		return []*stickiness.Table{p.table}
	case *roundRobinPolicy:
		return []*stickiness.Table{p.pins}
	}
	return nil
}

// leaderPolicy sends everything to the elected leader (balance = "leader").
type leaderPolicy struct{ leader *healthcheck.Leader }

func (lp *leaderPolicy) pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice {
	cur := lp.leader.Current()
	if cur == nil {
		return choice{}
	}
	for _, s := range st.servers {
		if s.target == cur {
			if s == except || !s.Available() {
				return choice{}
			}
			return take(ctx, s)
		}
	}
	return choice{}
}

func (lp *leaderPolicy) refuses(status int) bool       { return status == fasthttp.StatusServiceUnavailable }
func (lp *leaderPolicy) report(*poolView) policyReport { return policyReport{leader: lp.leader} }

// stickyPolicy keeps each key (asset, session) on one server (balance = "sticky"): a known key whose
// server is available stays there; a new key, or one whose server is not available, is placed by
// rendezvous hashing over the available servers. A request without a key goes round robin.
type stickyPolicy struct {
	keys       *stickiness.Extractor
	table      *stickiness.Table // the keys: made by the pool's first policy, taken over by the next
	cookieName string            // "" without a sticky cookie
	cookieIdx  int               // index of the cookie source in keys, -1 without a sticky cookie
	rr         *rrCycle          // the requests without a key, in turn (roundrobin.go)
}

func newStickyPolicy(cfg *config.Pool, old policy) policy {
	keys, _ := stickiness.NewExtractor(cfg.Sticky.Keys) // validated with the config
	sp := &stickyPolicy{keys: keys, cookieIdx: -1}
	if o, ok := old.(*stickyPolicy); ok {
		sp.table, sp.rr = o.table, o.rr
	} else {
		sp.table, sp.rr = stickiness.NewTable(stickiness.TableOptions{}), &rrCycle{}
	}
	sp.table.SetLimits(cfg.Sticky.MaxEntries, cfg.Sticky.IdleTimeout.D)
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
		return choice{s: sp.rr.next(t, except, 0, 0, bodyBytes(&ctx.Request.Header))}
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

func (sp *stickyPolicy) cookie(ctx *fasthttp.RequestCtx, s *Server) (string, string) {
	if sp.cookieName == "" || string(ctx.Request.Header.Cookie(sp.cookieName)) == s.cookie {
		return "", ""
	}
	return sp.cookieName, s.cookie
}

func (sp *stickyPolicy) hold(ctx *fasthttp.RequestCtx, _ *Server) ([]byte, func()) {
	var buf [160]byte
	k, _, ok := sp.keys.Key(buf[:0], ctx)
	if !ok {
		return nil, nil
	}
	key := bytes.Clone(k)
	return key, sp.holdKey(key)
}

// holdKey holds key as a tunnel open in this process does (a tunnel handed over by the old process of
// a binary upgrade holds the key it held there).
func (sp *stickyPolicy) holdKey(key []byte) func() {
	sp.table.Acquire(key)
	return func() { sp.table.Release(key) }
}

func (sp *stickyPolicy) removed(s *Server) { sp.table.Forget(s.Addr) }

func (sp *stickyPolicy) report(*poolView) policyReport { return policyReport{sticky: sp.table} }

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
