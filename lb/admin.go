package lb

import (
	"context"
	"os"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
)

// What the admin listener (package admin) reads of the LB: LB is its admin.Backend. The status
// document is computed here from the pools, whose internals only lb reads; the metrics are written in
// metrics.go and the actions carried out in actions.go.

var _ admin.Backend = (*LB)(nil)

// Config returns the configuration in force.
func (lb *LB) Config() *config.Config { return lb.px.gen.Load().cfg }

// Subscribe calls fn with every event published from now on, until cancel is called: the one way to
// the event stream from outside (the admin listener, the binary's own subscribers, tests).
func (lb *LB) Subscribe(fn func(event.Event)) (cancel func()) { return lb.bus.Subscribe(fn) }

// Status returns a snapshot of the running state, with what the history remembers (history.go).
func (lb *LB) Status() admin.Status {
	st := lb.status()
	lb.hist.Observe(time.Now(), &st)
	lb.hist.Fill(&st)
	return st
}

// status is the running state without the past: every pool, its servers and their states, the
// alarms, the relays.
func (lb *LB) status() admin.Status {
	g := lb.px.gen.Load()
	st := admin.Status{ConfigFiles: g.cfg.Files, Alarms: []admin.Alarm{},
		Process: admin.ProcessStatus{Version: lb.version, PID: os.Getpid(), Since: lb.started}}
	if from := lb.given.From; from.PID != 0 {
		st.Process.UpgradedFrom = &admin.Predecessor{Version: from.Version, PID: from.PID}
	}
	var warnings []admin.Alarm // after the critical alarms
	for _, name := range g.poolNames() {
		p := g.pools[name]
		ps := p.view.Load()
		out := admin.PoolStatus{Name: name, Balance: p.balance, Waiting: p.waiting.Load(),
			Requests: p.requests.Load(), Retries: p.retries.Load(), InflightFailovers: p.inflightMoves.Load(),
			Errors: p.bad502.Load() + p.timeout.Load() + p.noServer.Load(), Serving: tierNames[p.tier.Load()],
			Failovers: p.failovers.Load(), Failbacks: p.failbacks.Load(), PinFailures: p.pinFailures.Load(),
			Check: p.checkKind(ps), NewTunnelsPerSecond: ps.cfg.NewTunnelsPerSecond, TunnelsOpened: p.tunnelsOpened.Load()}
		out.Discovery = lb.disc.status(name)
		checks := p.checks.Status()
		available := false
		for _, s := range ps.servers {
			ss := serverStatusOf(s)
			for i := range checks {
				if checks[i].Addr == s.Addr {
					ss.Check = &checks[i]
				}
			}
			ss.State = p.serverState(s, ss.Check)
			if w := s.weight(time.Now().UnixNano(), ps.cfg.SlowStart.D); w < 1 {
				ss.Ramp = w
			}
			available = available || ss.Available
			out.Servers = append(out.Servers, ss)
		}
		describePolicy(&out, ps.policy.report(ps))
		switch {
		case p.leader && out.Leader == "":
			st.Alarms = append(st.Alarms, admin.Alarm{Kind: admin.AlarmNoLeader, Severity: admin.SeverityCritical, Pool: name})
		case !available:
			st.Alarms = append(st.Alarms, admin.Alarm{Kind: admin.AlarmNoServer, Severity: admin.SeverityCritical, Pool: name})
		case redundancyLost(serverStates(out.Servers)): // metrics.go: the same rule as fairlead_pool_redundancy_lost
			warnings = append(warnings, admin.Alarm{Kind: admin.AlarmRedundancyLost, Severity: admin.SeverityWarning, Pool: name})
		}
		st.Pools = append(st.Pools, out)
	}
	st.Alarms = append(st.Alarms, warnings...)
	st.Relays = g.relayDocuments()             // relays.go
	st.Certificates = g.certificateDocuments() // certificates.go
	return st
}

// serverState names s's state in the one vocabulary of /api/status, /metrics and the page
// (admin.ServerStates); check is its health check state (nil if it has none).
func (p *Pool) serverState(s *Server, check *healthcheck.ServerStatus) string {
	switch {
	case s.removed.Load():
		return admin.StateRemoved
	case s.opState.Load() != adminReady:
		return adminStates[s.opState.Load()]
	case p.leader:
		if s.target.Up() {
			return admin.StateUp
		}
		// Not the leader: a standby while its LeaderChecks show it there to take over (200, 400, 401,
		// 503), down from the moment its server_down event says so (fall checks in a row without such
		// an answer, or none in the first round) until its server_up: one rule for the row, the metrics,
		// the redundancy alarm and the events (healthcheck.Leader).
		if check != nil && check.Answered && !check.Lost {
			return admin.StateStandby
		}
		return admin.StateDown
	case !s.target.Up():
		return admin.StateDown
	case s.Backup() != (p.tier.Load() == backups):
		return admin.StateStandby // healthy, in the tier that does not serve (a backup at rest)
	}
	return admin.StateUp
}

// serverStates returns the states of ps's servers, in order (for /metrics).
func (p *Pool) serverStates(ps *poolView) []string {
	checks := p.checks.Status()
	states := make([]string, len(ps.servers))
	for i, s := range ps.servers {
		var c *healthcheck.ServerStatus
		for j := range checks {
			if checks[j].Addr == s.Addr {
				c = &checks[j]
			}
		}
		states[i] = p.serverState(s, c)
	}
	return states
}

// describePolicy adds to ps what its pool's policy reports (r); ps.Servers are filled in, in the order
// of the view's servers.
func describePolicy(ps *admin.PoolStatus, r policyReport) {
	switch {
	case r.leader != nil:
		if cur := r.leader.Current(); cur != nil {
			ps.Leader = cur.Addr()
		}
		ps.LeaderChanges = r.leader.Changes()
		ps.SplitBrains = r.leader.SplitBrains()
	case r.sticky != nil:
		ps.StickyEntries = r.sticky.Len()
	case r.roundRobin:
		ps.HighWatermark, ps.HighWatermarkBytes = r.hw, r.hwb
		for i := range ps.Servers {
			ps.Servers[i].Writable = r.writable[i]
		}
		if r.pins == nil {
			return
		}
		ps.MultipartHeader = r.pinHeader
		ps.Pins = r.pins.Len()
		counts := r.pins.CountByServer()
		for i := range ps.Servers {
			ps.Servers[i].Pins = counts[ps.Servers[i].Addr]
		}
	}
}

// serverStates lists the states of servers, in order.
func serverStates(servers []admin.ServerStatus) []string {
	states := make([]string, len(servers))
	for i := range servers {
		states[i] = servers[i].State
	}
	return states
}

// checkKind names the pool's active health check (admin.PoolStatus.Check).
func (p *Pool) checkKind(ps *poolView) string {
	switch {
	case p.leader:
		return "leader"
	case ps.cfg.Check.Path != "":
		return "http"
	case ps.connect:
		return "connect"
	}
	return "passive"
}

// serverStatusOf is what /status says of s, without its check state; its State is its own (its pool
// refines it, serverState).
func serverStatusOf(s *Server) admin.ServerStatus {
	return admin.ServerStatus{Addr: s.Addr, Name: s.Name(), Tier: tierOf(s), State: s.state(),
		AdminState: adminStates[s.opState.Load()], Available: s.Available(), Writable: true,
		Requests: s.requests.Load(), Failures: s.failures.Load(), InFlight: s.inflight.Load(),
		InFlightBytes: s.inflightBytes.Load(), InFlightSince: s.inFlightSince(),
		Conns: s.client.Load().ConnsCount(), Tunnels: s.tunnels.Load(),
		TunnelsDelayed: s.tunnelsDelayed.Load(), TunnelsLimited: s.tunnelsLimited.Load()}
}

// historyEvery is how often the history samples the pools' counters and the servers' states.
const historyEvery = time.Second

// startHistory samples the running state into lb.hist every historyEvery until ctx ends.
func (lb *LB) startHistory(ctx context.Context) {
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		tick := time.NewTicker(historyEvery)
		defer tick.Stop()
		for {
			// The state now: the servers' states, the alarms and the pools' counters.
			now := time.Now()
			st := lb.status()
			lb.hist.Observe(now, &st)
			counts := make([]admin.PoolCount, len(st.Pools))
			for i, p := range st.Pools {
				counts[i] = admin.PoolCount{Pool: p.Name, Requests: p.Requests, Errors: p.Errors}
			}
			lb.hist.Sample(now, counts)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// serverIn is what st says of s of pool p, with its check state and what its policy adds; without
// st's word on it (it left the pool), what s says of itself.
func serverIn(st admin.Status, p *Pool, s *Server) admin.ServerStatus {
	for _, ps := range st.Pools {
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
