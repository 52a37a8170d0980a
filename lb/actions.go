package lb

import (
	"encoding/json"
	"strings"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/valyala/fasthttp"
)

// Admin actions, like HAProxy's runtime API: POST /api/servers/POOL/ADDRESS/ACTION with ACTION one of
//
//	drain   no new traffic (not even sticky clients'); open tunnels stay
//	maint   no traffic; its tunnels are closed (spread over the pool's tunnel_close_spread)
//	ready   back to normal: traffic as its health checks allow
//	probe   probe it now (without active checks: try a server that live failures took down again now)
//
// Each is logged and published on the event stream (admin_action). The operator's state survives
// reloads that keep the server. The answer is the server's status as JSON.

func (lb *LB) serverAction(ctx *fasthttp.RequestCtx, rest string) {
	if !ctx.IsPost() {
		ctx.Error("405 Method Not Allowed: actions are POSTs\n", fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set(fasthttp.HeaderAllow, fasthttp.MethodPost)
		return
	}
	poolName, rest, _ := strings.Cut(rest, "/")
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		ctx.Error("404 Not Found: want /api/servers/POOL/ADDRESS/ACTION\n", fasthttp.StatusNotFound)
		return
	}
	addr, action := rest[:i], rest[i+1:]
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
		ctx.Error("404 Not Found: no server "+addr+" in pool "+poolName+"\n", fasthttp.StatusNotFound)
		return
	}
	var state event.Admin // none for a re-probe
	switch action {
	case "drain":
		s.admin.Store(adminDrain)
		state = event.AdminDrain
	case "maint":
		s.admin.Store(adminMaint)
		state = event.AdminMaint
	case "ready":
		s.admin.Store(adminReady)
		state = event.AdminReady
	case "probe":
		p.health.Probe(s.health)
	default:
		ctx.Error("400 Bad Request: unknown action "+action+" (want drain, maint, ready or probe)\n", fasthttp.StatusBadRequest)
		return
	}
	lb.bus.Publish(event.Event{Kind: event.AdminAction, Pool: p.name, Server: s.Addr, Admin: state,
		Detail: action + " by " + ctx.RemoteIP().String()})
	ctx.SetContentType("application/json")
	json.NewEncoder(ctx).Encode(lb.serverStatus(p, s)) //nolint:errcheck
}
