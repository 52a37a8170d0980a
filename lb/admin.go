package lb

import (
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
)

// What the admin listener (package admin) reads of the LB: LB is its admin.Backend. The status
// document is computed here from the pools, whose internals only lb reads; the metrics are written in
// metrics.go and the actions carried out in actions.go.

var _ admin.Backend = (*LB)(nil)

// adminOptions are the admin Handler's (New reads them; tests shorten the event stream's intervals).
var adminOptions admin.Options

// Config returns the configuration in force.
func (lb *LB) Config() *config.Config { return lb.gen.Load().cfg }

// Subscribe calls fn with every event published from now on, until cancel is called (Events().Subscribe).
func (lb *LB) Subscribe(fn func(event.Event)) (cancel func()) { return lb.bus.Subscribe(fn) }

// Status returns a snapshot of the running state.
func (lb *LB) Status() admin.Status {
	g := lb.gen.Load()
	st := admin.Status{ConfigFiles: g.cfg.Files}
	for _, name := range g.poolNames() {
		p := g.pools[name]
		ps := p.view.Load()
		out := admin.PoolStatus{Name: name, Balance: p.balance, Waiting: p.waiting.Load(),
			Requests: p.requests.Load(), Retries: p.retries.Load(), InflightFailovers: p.inflightMoves.Load(),
			Errors: p.bad502.Load() + p.timeout.Load() + p.noServer.Load(), Serving: tierNames[p.tier.Load()],
			Failovers: p.failovers.Load(), Failbacks: p.failbacks.Load(), PinFailures: p.pinFailures.Load()}
		out.Discovery = lb.disc.status(name)
		checks := p.health.Status()
		for _, s := range ps.servers {
			ss := serverStatusOf(s)
			for i := range checks {
				if checks[i].Addr == s.Addr {
					ss.Check = &checks[i]
				}
			}
			out.Servers = append(out.Servers, ss)
		}
		ps.policy.describe(&out, ps)
		st.Pools = append(st.Pools, out)
	}
	st.Relays = g.relayStatuses() // relays.go
	return st
}

// serverStatusOf is what /status says of s, without its check state.
func serverStatusOf(s *Server) admin.ServerStatus {
	return admin.ServerStatus{Addr: s.Addr, Name: s.Name(), Tier: tierOf(s), State: s.state(),
		AdminState: adminStates[s.admin.Load()], Available: s.Available(), Writable: true,
		Requests: s.requests.Load(), Failures: s.failures.Load(), InFlight: s.inflight.Load(),
		InFlightBytes: s.inflightBytes.Load(), Conns: s.client.Load().ConnsCount(), Tunnels: s.tunnels.Load()}
}

// serverStatus is what /status says of s of pool p, with its check state and what its policy adds.
func (lb *LB) serverStatus(p *Pool, s *Server) admin.ServerStatus {
	for _, ps := range lb.Status().Pools {
		if ps.Name == p.name {
			for _, ss := range ps.Servers {
				if ss.Addr == s.Addr {
					return ss
				}
			}
		}
	}
	return serverStatusOf(s)
}

func tierOf(s *Server) string {
	if s.Backup() {
		return "backup"
	}
	return "primary"
}

// poolNames lists g's pools as the status page shows them: leader pools first, then the others, in
// the config files' order (config.PoolNames).
func (g *generation) poolNames() []string { return g.cfg.PoolNames() }
