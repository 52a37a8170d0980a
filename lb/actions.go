package lb

import (
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
)

// Act carries out an admin action (admin.Backend: POST /api/servers/POOL/ADDRESS/ACTION, the actions
// being admin.Drain, Maint, Ready and Probe) on the server of pool poolName whose address or display
// name is addr. Drain and maint set the operator's state, which Available reads and which survives
// reloads that keep the server; maint's tunnels are closed by the tunnel closer (tunnels.go), which
// follows the admin_action event that each action publishes with by, who asked. It returns the
// server's status after it.
func (lb *LB) Act(poolName, addr string, action admin.Action, by string) (admin.ServerStatus, error) {
	g := lb.px.gen.Load()
	p := g.pools[poolName]
	var s *Server
	if p != nil {
		for _, c := range p.view.Load().servers {
			if c.Addr == addr || c.Name() == addr {
				s = c
			}
		}
	}
	if s == nil {
		return admin.ServerStatus{}, admin.ErrNoServer
	}
	var state event.Admin // none for a re-probe
	switch action {
	case admin.Drain:
		s.opState.Store(adminDrain)
		state = event.AdminDrain
	case admin.Maint:
		s.opState.Store(adminMaint)
		state = event.AdminMaint
	case admin.Ready:
		s.opState.Store(adminReady)
		state = event.AdminReady
	case admin.Probe:
		p.checks.Probe(s.target)
	default:
		return admin.ServerStatus{}, admin.ErrUnknownAction
	}
	lb.bus.Publish(event.Event{Kind: event.AdminAction, Pool: p.name, Server: s.Addr, Admin: state,
		Detail: string(action) + " by " + by})
	return serverIn(lb.Status(), p, s), nil
}
