package lb

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/valyala/fasthttp"
)

// Pool is a named set of servers, their health check and the policy that picks one for a request. A
// Pool outlives config generations: a reload applies a server set change to it (apply), so that servers
// whose address stays keep everything. Only a change of balance replaces a pool.
type Pool struct {
	name    string
	balance string
	leader  bool // balance = "leader": its requests are watched (leaderwatch.go)
	// relayOnly: only relays name the pool, no [[routes]] entry. Without a check path its servers are
	// checked by opening a connection (healthcheck.Options.Connect): a relay speaks its own protocol to
	// them, and they need a state of their own. Set by each generation before apply.
	relayOnly atomic.Bool
	bus       *event.Bus
	checks    health

	view atomic.Pointer[poolView]

	waiting atomic.Int64 // requests waiting for a usable server
	freed   broadcast    // an in-flight request ended while requests wait (a server may be writable again)
	tier    atomic.Int32 // the tier serving, as last seen by watchTier (primaries or backups)

	// counters for /status and /metrics
	requests      atomic.Uint64
	retries       atomic.Uint64
	noServer      atomic.Uint64 // 503 after queue_timeout or with a full queue
	bad502        atomic.Uint64
	timeout       atomic.Uint64
	queueFull     atomic.Uint64
	tunnelsOpened atomic.Uint64
	pinFailures   atomic.Uint64 // 502: a multi-part request whose server was not connected and writable
	failovers     atomic.Uint64 // the backups took over
	failbacks     atomic.Uint64 // the primaries took back
	inflightMoves atomic.Uint64 // requests sent to a new leader while they waited for the old one (leaderwatch.go)
	m             poolMetrics   // histograms and byte counters (metrics.go)

	stop context.CancelFunc // ends the pool's checks and janitor when a reload drops it
}

// poolView is one immutable view of a pool: its config, its servers (primaries then backups, each in
// config order), its tiers and its policy. A request loads it once; a server set change or a reload
// swaps in a new one.
type poolView struct {
	cfg     *config.Pool
	servers []*Server
	tiers   [2]tier // primaries, backups: sub-slices of servers
	all     tier    // servers
	policy  policy
	refuser refuser    // the policy, if it is one (else nil)
	pins    clientPins // the policy, if it is one (else nil)
	connect bool       // relayOnly when the view was made: its checks open connections when no path is set
}

func newPool(name string, cfg *config.Pool, relayOnly bool, bus *event.Bus, logf func(string, ...any)) *Pool {
	p := &Pool{name: name, balance: cfg.Balance, leader: cfg.Balance == "leader", bus: bus}
	p.relayOnly.Store(relayOnly)
	var servers []*Server
	for _, addr := range serverAddrs(cfg) {
		servers = append(servers, newServer(addr, cfg))
	}
	b := balances[cfg.Balance]
	p.checks = b.newHealth(p.checkOptions(cfg, logf), targetsOf(servers))
	p.view.Store(p.newView(cfg, servers))
	return p
}

// serverAddrs lists a pool's servers: the primaries, then the backups.
func serverAddrs(cfg *config.Pool) []string { return append(slices.Clip(cfg.Servers), cfg.Backups...) }

func targetsOf(servers []*Server) []*healthcheck.Target {
	ts := make([]*healthcheck.Target, len(servers))
	for i, s := range servers {
		ts[i] = s.target
	}
	return ts
}

// cookie returns the cookie that pins the client to s, or "" when the policy sets none.
func (st *poolView) cookie(ctx *fasthttp.RequestCtx, s *Server) (name, value string) {
	if st.pins == nil {
		return "", ""
	}
	return st.pins.cookie(ctx, s)
}

// newView makes the pool's view of cfg over servers (primaries then backups, as serverAddrs).
func (p *Pool) newView(cfg *config.Pool, servers []*Server) *poolView {
	np := len(cfg.Servers)
	st := &poolView{cfg: cfg, servers: servers, connect: p.relayOnly.Load()}
	st.tiers[primaries] = tier{which: primaries, servers: servers[:np:np], slowStart: cfg.SlowStart.D}
	st.tiers[backups] = tier{which: backups, servers: servers[np:], slowStart: cfg.SlowStart.D}
	st.all = tier{which: everyone, servers: servers, slowStart: cfg.SlowStart.D}
	var old policy // the policy before, whose state the new one takes over
	if v := p.view.Load(); v != nil {
		old = v.policy
	}
	st.policy = balances[cfg.Balance].newPolicy(cfg, old, p.checks)
	st.refuser, _ = st.policy.(refuser)
	st.pins, _ = st.policy.(clientPins)
	return st
}

// checkOptions are the health check options of the pool with config cfg.
func (p *Pool) checkOptions(cfg *config.Pool, logf func(string, ...any)) healthcheck.Options {
	ck := cfg.Check
	return healthcheck.Options{
		Pool:         p.name,
		Path:         ck.Path,
		Connect:      p.relayOnly.Load(),
		Credentials:  ck.Credentials,
		Port:         ck.Port,
		Interval:     ck.Interval.D,
		IntervalMax:  ck.IntervalMax.D,
		FastInterval: ck.FastInterval.D,
		Timeout:      ck.Timeout.D,
		Fall:         ck.Fall,
		Rise:         ck.Rise,
		TLS:          cfg.TLS.Client, // nil: plain HTTP
		Bus:          p.bus,
		Logf:         logf,
		// Only a pool with backups probes its primaries for failback.
		FailbackInterval: failbackInterval(cfg),
	}
}

func failbackInterval(cfg *config.Pool) time.Duration {
	if len(cfg.Backups) == 0 {
		return 0
	}
	return cfg.FailbackInterval.D
}

// apply brings a running pool to cfg (same balance) as one server set change: servers whose address
// stays keep their health, role, sticky keys, tunnels and counters; new servers start unknown and take
// traffic after their first passing probe; removed servers drain (no new traffic, in-flight requests
// finish, their tunnels close and their sticky keys are forgotten, through the ServerRemoved event).
func (p *Pool) apply(cfg *config.Pool, logf func(string, ...any)) {
	old := p.view.Load()
	byAddr := make(map[string]*Server, len(old.servers))
	for _, s := range old.servers {
		byAddr[s.Addr] = s
	}
	newClients := !sameTransport(old.cfg, cfg)
	var servers, added []*Server
	for _, addr := range serverAddrs(cfg) {
		s, ok := byAddr[addr]
		switch {
		case !ok:
			s = newServer(addr, cfg)
			added = append(added, s)
		case newClients:
			s.client.Swap(newTransport(addr, cfg)).Retire()
		}
		if ok {
			s.configure(cfg) // its name and tier may have changed
		}
		delete(byAddr, addr)
		servers = append(servers, s)
	}
	if !reflect.DeepEqual(old.cfg.Check, cfg.Check) || failbackInterval(old.cfg) != failbackInterval(cfg) ||
		!old.cfg.TLS.Same(&cfg.TLS) || old.connect != p.relayOnly.Load() {
		p.checks.Update(p.checkOptions(cfg, logf))
	}
	p.checks.Set(targetsOf(servers))
	st := p.newView(cfg, servers)
	p.view.Store(st)
	for _, s := range added {
		p.bus.Publish(event.Event{Kind: event.ServerAdded, Pool: p.name, Server: s.Addr})
	}
	for _, s := range old.servers {
		if _, gone := byAddr[s.Addr]; gone {
			p.drop(st, s, "removed from the pool")
		}
	}
}

// drop takes s out of service for good: it leaves its pool (the caller already swapped in a view
// without it), ServerRemoved closes its tunnels, and the policy forgets it. In-flight requests finish
// on its client, whose idle connections are closed now.
func (p *Pool) drop(st *poolView, s *Server, why string) {
	s.removed.Store(true)
	s.client.Load().Retire()
	p.bus.Publish(event.Event{Kind: event.ServerRemoved, Pool: p.name, Server: s.Addr, Detail: why})
	// Only once its tunnels are closed (and their keys released): a key of s that a client re-placed
	// meanwhile names another server now and is kept.
	if st.pins != nil {
		st.pins.removed(s)
	}
}

// start launches the pool's health checks, the janitor of its sticky table or pins, and the watch of
// its serving tier; they stop with ctx or stop.
func (p *Pool) start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	p.checks.Start(ctx)
	for _, t := range policyTables(p.view.Load().policy) {
		every := func() time.Duration { return max(t.IdleTimeout()/10, time.Second) }
		go healthcheck.Loop(ctx, nil, nil, every, func() { t.Expire() })
	}
	go p.watchTier(ctx)
	if p.leader {
		go p.watchLeader(ctx)
	}
}

// watchTier follows which tier serves (primaries or backups) from the event stream: when the backups
// take over it counts and publishes a Failover, when a primary takes back a Failback (on which the
// tunnel closer may move tunnels back, see failback_close_tunnels). While no server at all is
// available the tier stays as it was, and the outage is published once as PoolDown, its end as PoolUp
// (also at start: a pool that has no server available after its first round of checks is down).
func (p *Pool) watchTier(ctx context.Context) {
	select {
	case <-p.ready():
	case <-ctx.Done():
		return
	}
	first, down := true, false
	for {
		changed := p.bus.Changed(p.name)
		st := p.view.Load()
		now := st.serving()
		if now < 0 && !down {
			// A leader change marks the old leader down, then the new one up, under the check's lock,
			// and this goroutine may have looked in between (woken by an earlier change of the pool):
			// Status takes that lock, so a second look after it sees no change in progress.
			p.checks.Status()
			st = p.view.Load()
			now = st.serving()
		}
		if (now < 0) != down && ctx.Err() == nil { // a pool being closed is not an outage
			down = now < 0
			p.availabilityChanged(st, down)
		}
		if now >= 0 {
			if old := int(p.tier.Swap(int32(now))); old != now && !first {
				p.tierChanged(st, now)
			}
			first = false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// availabilityChanged publishes PoolDown when no server of the pool is available any more (Detail
// counts its servers by state), PoolUp when one is again (Detail names those available).
func (p *Pool) availabilityChanged(st *poolView, down bool) {
	if down {
		detail := "no servers"
		if n := len(st.servers); n > 0 {
			var states []string
			count := map[string]int{}
			for _, state := range p.serverStates(st) {
				if count[state] == 0 {
					states = append(states, state)
				}
				count[state]++
			}
			for i, state := range states {
				states[i] = strconv.Itoa(count[state]) + " " + state
			}
			detail = plural(n, "server") + ": " + strings.Join(states, ", ")
			if p.leader && p.credentialsRefused() {
				detail = plural(n, "server") + ": the LeaderCheck credentials are refused (every server answers 401)"
			}
		}
		p.bus.Publish(event.Event{Kind: event.PoolDown, Pool: p.name, Detail: detail})
		return
	}
	var up []string
	for _, s := range st.servers {
		if s.Available() {
			up = append(up, s.label())
		}
	}
	p.bus.Publish(event.Event{Kind: event.PoolUp, Pool: p.name, Detail: "available: " + strings.Join(up, ", ")})
}

// credentialsRefused reports whether every server of a leader pool answered its latest LeaderCheck with
// 401: nobody leads because fairlead's credentials are wrong, not because the servers are down.
func (p *Pool) credentialsRefused() bool {
	checks := p.checks.Status()
	for _, c := range checks {
		if !c.Answered || c.LastError != "" || c.LastStatus != 401 {
			return false
		}
	}
	return len(checks) > 0
}

func (p *Pool) tierChanged(st *poolView, now int) {
	if now == backups {
		p.failovers.Add(1)
		p.bus.Publish(event.Event{Kind: event.Failover, Pool: p.name,
			Detail: "no primary is available; the backups serve"})
		return
	}
	p.failbacks.Add(1)
	var back []string
	for _, s := range st.tiers[primaries].servers {
		if s.Available() {
			back = append(back, s.label())
		}
	}
	p.bus.Publish(event.Event{Kind: event.Failback, Pool: p.name,
		Detail: "primaries available again: " + strings.Join(back, ", ")})
}

// firstAvailable returns the first available server of the serving tier, then of the other tier, in
// config order, other than those in skip; nil if there is none. It is a relay's choice (relayPool):
// its sessions and fetches all go to one server, the primaries' order deciding which.
func (st *poolView) firstAvailable(skip []string) *Server {
	act := st.active()
	for _, t := range [2]*tier{act, &st.tiers[1-act.which]} {
		for _, s := range t.servers {
			if s.Available() && !slices.Contains(skip, s.Addr) {
				return s
			}
		}
	}
	return nil
}

// close stops the pool for good (a reload dropped it or changed its balance): its checks end and its
// servers leave service.
func (p *Pool) close() {
	p.stop()
	st := p.view.Load()
	for _, s := range st.servers {
		p.drop(st, s, "pool removed")
	}
}

// ready is closed when the pool has finished its first round of checks.
func (p *Pool) ready() <-chan struct{} { return p.checks.Ready() }

// errQueueFull means more requests are waiting than max_queue allows.
var errQueueFull = errors.New("queue full")

// await waits for a server for the request until deadline (then no server): the policy's pick among
// the available servers other than except, or including except once it answered its checks after since
// (a leader that confirmed itself after a refused connection or a 503; a server whose probe passed again).
// It waits on the pool's changes (event.Bus.Changed: a server's availability, the leader, a reload; and
// a passing probe of except, through AwaitPass) and on in-flight requests ending (a server becoming
// writable again), not on a timer loop nor on the other pools' events. Requests waiting at once are bounded by max_queue; past it await returns
// errQueueFull at once. The server returned is counted in flight, as pick's. Each wait is observed in
// fairlead_queue_wait_seconds, whatever its outcome. Slow path only.
func (p *Pool) await(ctx *fasthttp.RequestCtx, except *Server, since, deadline time.Time) (choice, error) {
	if n := p.waiting.Add(1); n > int64(p.view.Load().cfg.MaxQueue) {
		p.waiting.Add(-1)
		return choice{}, errQueueFull
	}
	defer p.waiting.Add(-1)
	defer p.m.queueWait.UpdateDuration(time.Now())
	if except != nil {
		except.target.AwaitPass()
		defer except.target.EndAwaitPass()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		changed, freed := p.bus.Changed(p.name), p.freed.wait()
		st := p.view.Load()
		if c := st.policy.pick(ctx, st, except); c.s != nil || c.pinned {
			return c, nil
		}
		if except != nil && except.Available() && except.target.PassedSince(since) {
			// except answered its checks again: the policy may choose it too (a roundrobin pool only
			// while it is writable).
			if c := st.policy.pick(ctx, st, nil); c.s != nil || c.pinned {
				return c, nil
			}
		}
		d := time.Until(deadline)
		if d <= 0 {
			return choice{}, nil
		}
		if timer == nil {
			timer = time.NewTimer(d)
		}
		select {
		case <-changed:
		case <-freed:
		case <-timer.C:
			return choice{}, nil
		}
	}
}

// end ends an attempt counted in flight to s (by pick or await) with n request-body bytes, and wakes
// the requests waiting for a writable server.
func (p *Pool) end(s *Server, n int64) {
	s.end(n)
	if p.waiting.Load() > 0 {
		p.freed.notify()
	}
}

// broadcast wakes every waiter at once, like a pool's changes (event.Bus.Changed): a waiter takes the channel,
// checks its condition, then waits on it. It allocates only when someone waits.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}
