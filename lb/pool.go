package lb

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// Pool is a named set of servers, their health check and the policy that picks one for a request. A
// Pool outlives config generations: a reload applies a server set change to it (apply), so that servers
// whose address stays keep everything. Only a change of balance replaces a pool.
type Pool struct {
	name    string
	balance string
	bus     *healthcheck.Bus
	health  health
	table   *stickiness.Table // sticky keys, made by the first sticky policy and kept across reloads
	rr      roundRobin

	state atomic.Pointer[poolState]

	waiting atomic.Int64 // requests waiting for a usable server

	// counters for /status and /metrics
	requests      atomic.Uint64
	retries       atomic.Uint64
	noServer      atomic.Uint64 // 503 after queue_timeout or with a full queue
	bad502        atomic.Uint64
	timeout       atomic.Uint64
	queueFull     atomic.Uint64
	tunnelsOpened atomic.Uint64

	stop context.CancelFunc // ends the pool's checks and janitor when a reload drops it
}

// poolState is one immutable view of a pool: its config, its servers in config order and its policy.
// A request loads it once; a server set change or a reload swaps in a new one.
type poolState struct {
	cfg     *PoolConfig
	servers []*Server
	policy  policy
}

func newPool(name string, cfg *PoolConfig, bus *healthcheck.Bus, logf func(string, ...any)) *Pool {
	p := &Pool{name: name, balance: cfg.Balance, bus: bus}
	servers := make([]*Server, len(cfg.Servers))
	targets := make([]*healthcheck.Target, len(cfg.Servers))
	for i, addr := range cfg.Servers {
		servers[i] = newServer(addr, cfg)
		targets[i] = servers[i].health
	}
	b := balances[cfg.Balance]
	p.health = b.newHealth(checkOptions(name, cfg, bus, logf), targets)
	p.state.Store(&poolState{cfg: cfg, servers: servers, policy: b.newPolicy(p, cfg)})
	return p
}

// checkOptions are the health check options of a pool config.
func checkOptions(name string, cfg *PoolConfig, bus *healthcheck.Bus, logf func(string, ...any)) healthcheck.Options {
	ck := cfg.Check
	return healthcheck.Options{
		Pool:         name,
		Path:         ck.Path,
		Credentials:  ck.Credentials,
		Port:         ck.Port,
		Interval:     ck.Interval.D,
		IntervalMax:  ck.IntervalMax.D,
		FastInterval: ck.FastInterval.D,
		Timeout:      ck.Timeout.D,
		Fall:         ck.Fall,
		Rise:         ck.Rise,
		Bus:          bus,
		Logf:         logf,
	}
}

// apply brings a running pool to cfg (same balance) as one server set change: servers whose address
// stays keep their health, role, sticky keys, tunnels and counters; new servers start unknown and take
// traffic after their first passing probe; removed servers drain (no new traffic, in-flight requests
// finish, their tunnels close and their sticky keys are forgotten, through the ServerRemoved event).
func (p *Pool) apply(cfg *PoolConfig, logf func(string, ...any)) {
	old := p.state.Load()
	byAddr := make(map[string]*Server, len(old.servers))
	for _, s := range old.servers {
		byAddr[s.Addr] = s
	}
	newClients := !sameTransport(old.cfg, cfg)
	servers := make([]*Server, len(cfg.Servers))
	targets := make([]*healthcheck.Target, len(cfg.Servers))
	var added []*Server
	for i, addr := range cfg.Servers {
		s, ok := byAddr[addr]
		switch {
		case !ok:
			s = newServer(addr, cfg)
			added = append(added, s)
		case newClients:
			s.client.Swap(newTransport(addr, cfg)).CloseIdleConnections()
		}
		delete(byAddr, addr)
		servers[i], targets[i] = s, s.health
	}
	if !reflect.DeepEqual(old.cfg.Check, cfg.Check) {
		p.health.Update(checkOptions(p.name, cfg, p.bus, logf))
	}
	p.health.Set(targets)
	st := &poolState{cfg: cfg, servers: servers, policy: balances[cfg.Balance].newPolicy(p, cfg)}
	p.state.Store(st)
	for _, s := range added {
		p.bus.Publish(healthcheck.Event{Kind: healthcheck.ServerAdded, Pool: p.name, Server: s.Addr})
	}
	for _, s := range old.servers {
		if _, gone := byAddr[s.Addr]; gone {
			p.drop(st, s, "removed from the pool")
		}
	}
}

// drop takes s out of service for good: it leaves its pool (the caller already swapped in a state
// without it), ServerRemoved closes its tunnels, and the policy forgets it. In-flight requests finish
// on its client, whose idle connections are closed now.
func (p *Pool) drop(st *poolState, s *Server, why string) {
	s.removed.Store(true)
	s.client.Load().CloseIdleConnections()
	p.bus.Publish(healthcheck.Event{Kind: healthcheck.ServerRemoved, Pool: p.name, Server: s.Addr, Detail: why})
	// Only once its tunnels are closed (and their keys released): a key of s that a client re-placed
	// meanwhile names another server now and is kept.
	st.policy.removed(s)
}

// start launches the pool's health checks and sticky table janitor; they stop with ctx or stop.
func (p *Pool) start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	p.health.Start(ctx)
	if t := p.table; t != nil {
		every := func() time.Duration { return max(t.IdleTimeout()/10, time.Second) }
		go healthcheck.Loop(ctx, nil, nil, every, func() { t.Expire() })
	}
}

// close stops the pool for good (a reload dropped it or changed its balance): its checks end and its
// servers leave service.
func (p *Pool) close() {
	p.stop()
	st := p.state.Load()
	for _, s := range st.servers {
		p.drop(st, s, "pool removed")
	}
}

// ready is closed when the pool has finished its first round of checks.
func (p *Pool) ready() <-chan struct{} { return p.health.Ready() }

// errQueueFull means more requests are waiting than max_queue allows.
var errQueueFull = errors.New("queue full")

// await waits for a server for the request until deadline (then nil): the policy's pick among the
// available servers other than except, or except itself once it answered its checks after since (a
// leader that confirmed itself after a refused connection or a 503; a server whose probe passed again).
// It waits on the event stream, not on a timer loop. Requests waiting at once are bounded by max_queue;
// past it await returns errQueueFull at once. Slow path only.
func (p *Pool) await(ctx *fasthttp.RequestCtx, except *Server, since, deadline time.Time) (*Server, error) {
	if n := p.waiting.Add(1); n > int64(p.state.Load().cfg.MaxQueue) {
		p.waiting.Add(-1)
		return nil, errQueueFull
	}
	defer p.waiting.Add(-1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		changed := p.bus.Changed()
		st := p.state.Load()
		if s := st.policy.pick(ctx, st, except); s != nil {
			return s, nil
		}
		if except != nil && except.Available() && except.health.PassedSince(since) {
			return except, nil
		}
		d := time.Until(deadline)
		if d <= 0 {
			return nil, nil
		}
		if timer == nil {
			timer = time.NewTimer(d)
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, nil
		}
	}
}
