package lb

import (
	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/lb/admin"
)

// Act carries out an admin action (admin.Backend; POST /api/servers/POOL/ADDRESS/ACTION) on the server
// of pool poolName whose address or display name is addr:
//
//	drain   no new traffic (not even sticky clients'); open tunnels stay
//	maint   no traffic; its tunnels are closed (spread over the pool's tunnel_close_spread)
//	ready   back to normal: traffic as its health checks allow
//	probe   probe it now (without active checks: try a server that live failures took down again now)
//
// Each is published on the event stream (admin_action, which the log shows) with by, who asked. The
// operator's state survives reloads that keep the server. It returns the server's status after it.
func (lb *LB) Act(poolName, addr string, action admin.Action, by string) (ServerStatus, error) {
	g := lb.gen.Load()
	p := g.pools[poolName]
	var s *Server
	if p != nil {
		for _, c := range p.state.Load().servers {
			if c.Addr == addr || c.Name() == addr {
				s = c
			}
		}
	}
	if s == nil {
		return ServerStatus{}, admin.ErrNoServer
	}
	switch action {
	case admin.Drain:
		s.admin.Store(adminDrain)
	case admin.Maint:
		s.admin.Store(adminMaint)
	case admin.Ready:
		s.admin.Store(adminReady)
	case admin.Probe:
		p.health.Probe(s.health)
	default:
		return ServerStatus{}, admin.ErrUnknownAction
	}
	lb.bus.Publish(healthcheck.Event{Kind: healthcheck.AdminAction, Pool: p.name, Server: s.Addr,
		Detail: string(action) + " by " + by})
	return lb.serverStatus(p, s), nil
}
