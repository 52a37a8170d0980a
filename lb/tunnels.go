package lb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// The registry of tunnels: the engines belong to the LB, not to a config generation, so tunnels outlive
// reloads. Each tunnel is labelled with its pool and server (tunnelGroup), and the tunnel closer, a
// subscriber of the event stream, closes a server's tunnels when that server goes down, leaves its pool,
// or stops being the leader of a leader pool: the clients reconnect and are placed on an available server.

func tunnelGroup(pool, addr string) string { return pool + "|" + addr }

// tunnels are the tunnel engines, one per distinct tunnel_idle_timeout; mu guards the map.
type tunnels struct {
	logf    func(string, ...any)
	mu      sync.Mutex
	engines map[time.Duration]*tunnel.Engine
}

// engine returns the tunnel engine for a tunnel_idle_timeout.
func (ts *tunnels) engine(idle time.Duration) *tunnel.Engine {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if e, ok := ts.engines[idle]; ok {
		return e
	}
	e, err := tunnel.NewEngine(tunnel.Options{IdleTimeout: idle, Logf: ts.logf})
	if err != nil {
		// Only fails if the kernel refuses an epoll instance; nothing can be tunnelled then.
		panic(fmt.Sprintf("tunnel engine: %v", err))
	}
	if ts.engines == nil {
		ts.engines = map[time.Duration]*tunnel.Engine{}
	}
	ts.engines[idle] = e
	return e
}

// group returns the open tunnels of group in every engine.
func (ts *tunnels) group(group string) []*tunnel.Tunnel {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []*tunnel.Tunnel
	for _, e := range ts.engines {
		out = append(out, e.Group(group)...)
	}
	return out
}

// closeGroup closes the tunnels of group at once and returns how many it closed.
func (ts *tunnels) closeGroup(group string) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for _, e := range ts.engines {
		n += e.CloseGroup(group)
	}
	return n
}

// stats sums the counters of every engine.
func (ts *tunnels) stats() tunnel.Stats {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var sum tunnel.Stats
	for _, e := range ts.engines {
		s := e.Stats()
		sum.Opened += s.Opened
		sum.Closed += s.Closed
		sum.BytesToServer += s.BytesToServer
		sum.BytesToClient += s.BytesToClient
		for i := range sum.ByReason {
			sum.ByReason[i] += s.ByReason[i]
		}
	}
	return sum
}

// close stops every engine (at exit, after the tunnels were closed).
func (ts *tunnels) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, e := range ts.engines {
		e.Close()
	}
}

// closeTunnels is the tunnel closer: it acts on the events that end a server's service.
func (lb *LB) closeTunnels(e event.Event) {
	addr, why := e.Server, e.Kind.String()
	switch e.Kind {
	case event.ServerDown, event.ServerRemoved:
	case event.LeaderChanged:
		addr, why = e.Old, "no longer the leader"
	case event.AdminAction:
		if e.Admin != event.AdminMaint {
			return
		}
		why = "maintenance"
	default:
		return
	}
	if addr == "" {
		return
	}
	group := tunnelGroup(e.Pool, addr)
	var spread time.Duration
	if p := lb.px.gen.Load().pools[e.Pool]; p != nil {
		spread = p.view.Load().cfg.TunnelCloseSpread.D
	}
	if spread > 0 {
		ts := lb.px.tunnels.group(group)
		if len(ts) == 0 {
			return
		}
		lb.logf("tunnel: pool %s: closing %s to %s over %s (%s)", e.Pool, plural(len(ts), "tunnel"), lb.px.gen.Load().serverLabel(e.Pool, addr), spread, why)
		lb.wg.Add(1)
		go func() {
			defer lb.wg.Done()
			closeSpread(lb.ctx, ts, spread, (*tunnel.Tunnel).Close, func() bool { return true })
		}()
		return
	}
	if n := lb.px.tunnels.closeGroup(group); n > 0 {
		lb.logf("tunnel: pool %s: closed %s to %s (%s)", e.Pool, plural(n, "tunnel"), lb.px.gen.Load().serverLabel(e.Pool, addr), why)
	}
}

// closeAllTunnels ends every tunnel at exit (reason shutdown), each pool's spread over its
// tunnel_close_spread (the pools at once), and returns when they are closed.
func (lb *LB) closeAllTunnels(g *generation) {
	var wg sync.WaitGroup
	for _, p := range g.pools {
		st := p.view.Load()
		var ts []*tunnel.Tunnel
		for _, s := range st.servers {
			ts = append(ts, lb.px.tunnels.group(tunnelGroup(p.name, s.Addr))...)
		}
		if len(ts) == 0 {
			continue
		}
		spread := st.cfg.TunnelCloseSpread.D
		lb.logf("tunnel: pool %s: closing %s to stop, over %s", p.name, plural(len(ts), "tunnel"), spread)
		wg.Add(1)
		go func() {
			defer wg.Done()
			closeSpread(context.Background(), ts, spread, (*tunnel.Tunnel).Shutdown, func() bool { return true })
		}()
	}
	wg.Wait()
}

// failbackTunnels moves the tunnels of a pool's backups back to its primaries after a Failback, when
// failback_close_tunnels is set: it closes them one by one, spread evenly over failback_close_spread
// so that the devices do not all reconnect at once, and stops if the backups take over again. It runs
// in its own goroutine (subscribers must be quick).
func (lb *LB) failbackTunnels(e event.Event) {
	if e.Kind != event.Failback {
		return
	}
	p := lb.px.gen.Load().pools[e.Pool]
	if p == nil {
		return
	}
	st := p.view.Load()
	if !st.cfg.FailbackCloseTunnels {
		return
	}
	var ts []*tunnel.Tunnel
	for _, s := range st.tiers[backups].servers {
		ts = append(ts, lb.px.tunnels.group(tunnelGroup(p.name, s.Addr))...)
	}
	if len(ts) == 0 {
		return
	}
	spread := st.cfg.FailbackCloseSpread.D
	lb.logf("tunnel: pool %s: moving %s from the backups back to the primaries over %s", p.name, plural(len(ts), "tunnel"), spread)
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		closeSpread(lb.ctx, ts, spread, (*tunnel.Tunnel).Close, func() bool { return p.tier.Load() == primaries })
	}()
}

// closeSpread ends ts one by one with end (Close, or Shutdown at exit), evenly over spread, while ok
// holds.
func closeSpread(ctx context.Context, ts []*tunnel.Tunnel, spread time.Duration, end func(*tunnel.Tunnel), ok func() bool) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	start := time.Now()
	for i, t := range ts {
		if d := time.Until(start.Add(spread * time.Duration(i) / time.Duration(len(ts)))); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		if !ok() {
			return
		}
		end(t)
	}
}
