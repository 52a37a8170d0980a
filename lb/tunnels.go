package lb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// The registry of tunnels: relays belong to the LB, not to a config generation, so tunnels outlive
// reloads. Each tunnel is labelled with its pool and server (tunnelGroup), and the tunnel closer, a
// subscriber of the event stream, closes a server's tunnels when that server goes down, leaves its pool,
// or stops being the leader of a leader pool: the clients reconnect and are placed on an available server.

func tunnelGroup(pool, addr string) string { return pool + "|" + addr }

// engineFor returns the tunnel engine for a tunnel_idle_timeout.
func (lb *LB) engineFor(idle time.Duration) *tunnel.Engine {
	lb.engineMu.Lock()
	defer lb.engineMu.Unlock()
	if r, ok := lb.engines[idle]; ok {
		return r
	}
	r, err := tunnel.NewEngine(tunnel.Options{IdleTimeout: idle, Logf: lb.logf})
	if err != nil {
		// Only fails if the kernel refuses an epoll instance; nothing can be relayed then.
		panic(fmt.Sprintf("tunnel engine: %v", err))
	}
	lb.engines[idle] = r
	return r
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
	if p := lb.gen.Load().pools[e.Pool]; p != nil {
		spread = p.state.Load().cfg.TunnelCloseSpread.D
	}
	if spread > 0 {
		ts := lb.tunnelsOf(group)
		if len(ts) == 0 {
			return
		}
		lb.logf("tunnel: pool %s: closing %d tunnels to %s over %s (%s)", e.Pool, len(ts), lb.serverLabel(e.Pool, addr), spread, why)
		lb.wg.Add(1)
		go func() {
			defer lb.wg.Done()
			closeSpread(lb.ctx, ts, spread, func() bool { return true })
		}()
		return
	}
	lb.engineMu.Lock()
	n := 0
	for _, r := range lb.engines {
		n += r.CloseGroup(group)
	}
	lb.engineMu.Unlock()
	if n > 0 {
		lb.logf("tunnel: pool %s: closed %d tunnels to %s (%s)", e.Pool, n, lb.serverLabel(e.Pool, addr), why)
	}
}

// tunnelsOf returns the open tunnels of group in every relay.
func (lb *LB) tunnelsOf(group string) []*tunnel.Tunnel {
	lb.engineMu.Lock()
	defer lb.engineMu.Unlock()
	var ts []*tunnel.Tunnel
	for _, r := range lb.engines {
		ts = append(ts, r.Group(group)...)
	}
	return ts
}

// closeAllTunnels closes every tunnel at exit, each pool's spread over its tunnel_close_spread (the
// pools at once), and returns when they are closed.
func (lb *LB) closeAllTunnels(g *generation) {
	var wg sync.WaitGroup
	for _, p := range g.pools {
		st := p.state.Load()
		var ts []*tunnel.Tunnel
		for _, s := range st.servers {
			ts = append(ts, lb.tunnelsOf(tunnelGroup(p.name, s.Addr))...)
		}
		if len(ts) == 0 {
			continue
		}
		spread := st.cfg.TunnelCloseSpread.D
		lb.logf("tunnel: pool %s: closing %d tunnels to stop, over %s", p.name, len(ts), spread)
		wg.Add(1)
		go func() {
			defer wg.Done()
			closeSpread(context.Background(), ts, spread, func() bool { return true })
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
	p := lb.gen.Load().pools[e.Pool]
	if p == nil {
		return
	}
	st := p.state.Load()
	if !st.cfg.FailbackCloseTunnels {
		return
	}
	var ts []*tunnel.Tunnel
	for _, s := range st.tiers[backups].servers {
		ts = append(ts, lb.tunnelsOf(tunnelGroup(p.name, s.Addr))...)
	}
	if len(ts) == 0 {
		return
	}
	spread := st.cfg.FailbackCloseSpread.D
	lb.logf("tunnel: pool %s: moving %d tunnels from the backups back to the primaries over %s", p.name, len(ts), spread)
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		closeSpread(lb.ctx, ts, spread, func() bool { return p.tier.Load() == primaries })
	}()
}

// closeSpread closes ts one by one, evenly over spread, while ok holds.
func closeSpread(ctx context.Context, ts []*tunnel.Tunnel, spread time.Duration, ok func() bool) {
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
		t.Close()
	}
}

// relayStats sums the counters of every relay.
func (lb *LB) relayStats() tunnel.Stats {
	lb.engineMu.Lock()
	defer lb.engineMu.Unlock()
	var sum tunnel.Stats
	for _, r := range lb.engines {
		s := r.Stats()
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
