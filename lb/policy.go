package lb

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// A policy chooses a server for a request among the available ones of a pool (Server.Available). The
// request path calls the pool's policy and never asks which one it is: each balance is a type here and
// one entry in balances.
type policy interface {
	// pick returns an available server for the request other than except (a server that just failed
	// it; nil for none), or nil if there is none now. It must not allocate for a known client.
	pick(ctx *fasthttp.RequestCtx, st *poolState, except *Server) *Server
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
	// describe and writeMetrics add what is particular to the policy to /status and /metrics.
	describe(ps *PoolStatus)
	writeMetrics(w io.Writer, labels string)
}

// health is the pool's health check (healthcheck.Leader or healthcheck.Checker): the only writer of its
// servers' health.
type health interface {
	Start(ctx context.Context)
	Ready() <-chan struct{}
	Set(targets []*healthcheck.Target)
	Update(o healthcheck.Options)
	Report(t *healthcheck.Target, err error)
	Status() []healthcheck.ServerStatus
}

// balance is one value of a pool's balance key: how its servers are checked and chosen.
type balance struct {
	newHealth func(o healthcheck.Options, targets []*healthcheck.Target) health
	newPolicy func(p *Pool, cfg *PoolConfig) policy
}

// balances are the values of balance; config validation accepts exactly these.
var balances = map[string]balance{
	"leader": {
		newHealth: func(o healthcheck.Options, ts []*healthcheck.Target) health { return healthcheck.NewLeader(o, ts) },
		newPolicy: func(p *Pool, _ *PoolConfig) policy { return &leaderPolicy{leader: p.health.(*healthcheck.Leader)} },
	},
	"sticky": {
		newHealth: func(o healthcheck.Options, ts []*healthcheck.Target) health { return healthcheck.NewChecker(o, ts) },
		newPolicy: newStickyPolicy,
	},
}

// leaderPolicy sends everything to the elected leader (balance = "leader").
type leaderPolicy struct{ leader *healthcheck.Leader }

func (lp *leaderPolicy) pick(_ *fasthttp.RequestCtx, st *poolState, except *Server) *Server {
	cur := lp.leader.Current()
	if cur == nil {
		return nil
	}
	for _, s := range st.servers {
		if s.health == cur {
			if s == except || !s.Available() {
				return nil
			}
			return s
		}
	}
	return nil
}

func (lp *leaderPolicy) refuses(status int) bool                               { return status == fasthttp.StatusServiceUnavailable }
func (lp *leaderPolicy) cookie(*fasthttp.RequestCtx, *Server) (string, string) { return "", "" }
func (lp *leaderPolicy) hold(*fasthttp.RequestCtx, *Server) func()             { return nil }
func (lp *leaderPolicy) removed(*Server)                                       {}

func (lp *leaderPolicy) describe(ps *PoolStatus) {
	if cur := lp.leader.Current(); cur != nil {
		ps.Leader = cur.Addr()
	}
	ps.LeaderChanges = lp.leader.Changes()
	ps.SplitBrains = lp.leader.SplitBrains()
}

func (lp *leaderPolicy) writeMetrics(w io.Writer, l string) {
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

func newStickyPolicy(p *Pool, cfg *PoolConfig) policy {
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

func (sp *stickyPolicy) pick(ctx *fasthttp.RequestCtx, st *poolState, except *Server) *Server {
	var buf [160]byte
	key, src, ok := sp.keys.Key(buf[:0], ctx)
	if !ok {
		return sp.rr.next(st, except)
	}
	if src == sp.cookieIdx {
		// The sticky cookie names its server directly (as HAProxy's "cookie insert" does); a cookie
		// naming a server that is not available falls back to placement by its value.
		v := key[2:]
		for _, s := range st.servers {
			if string(v) == s.cookie && s != except && s.Available() {
				return s
			}
		}
	}
	if i := sp.table.PlaceExcept(key, st, st.index(except)); i >= 0 {
		return st.servers[i]
	}
	return nil
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

func (sp *stickyPolicy) describe(ps *PoolStatus) { ps.StickyEntries = sp.table.Len() }

func (sp *stickyPolicy) writeMetrics(w io.Writer, l string) {
	metrics.WriteGaugeUint64(w, "fairlead_pool_sticky_entries{"+l+"}", uint64(sp.table.Len()))
}

// roundRobin hands out the available servers in turn.
type roundRobin struct{ n atomic.Uint32 }

// next returns the next available server other than except, or nil.
func (rr *roundRobin) next(st *poolState, except *Server) *Server {
	n := len(st.servers)
	start := int(rr.n.Add(1))
	for k := 0; k < n; k++ {
		if s := st.servers[(start+k)%n]; s != except && s.Available() {
			return s
		}
	}
	return nil
}

// poolState is seen by placement as its candidates: the servers in config order and the predicate.
func (st *poolState) Len() int          { return len(st.servers) }
func (st *poolState) Name(i int) string { return st.servers[i].Addr }
func (st *poolState) Up(i int) bool     { return st.servers[i].Available() }

// index returns the position of s among the servers, or -1 (s nil or gone).
func (st *poolState) index(s *Server) int {
	if s == nil {
		return -1
	}
	return slices.Index(st.servers, s)
}

// balanceNames lists the balances for error messages: "leader", "sticky".
func balanceNames() string {
	names := make([]string, 0, len(balances))
	for n := range balances {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
