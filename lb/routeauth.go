package lb

// Single-point auth of a route ([routes.auth], from the ThingWorx relay proxy): clients present a key
// fairlead defines; fairlead removes it and injects the upstream credential (the platform's application
// key) that only fairlead holds, so that devices never hold it.
//
// The keys file and the upstream value file are read when the config is loaded, so they reload with it,
// and both are folded into the config digest, so that a reload after editing only a keys file applies.
// Only each key's SHA-256 is kept. A presented key is hashed and compared with every key in constant
// time, with no early exit, so the time taken tells neither which key matched nor how many bytes did.
// The upstream value is kept as it must be sent; it never appears in logs, errors, /status or answers.

import (
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/valyala/fasthttp"
)

// routeAuthorized is the single-point auth of route ri, called by handle once the route is found and
// before anything of the request is forwarded (upgrades included, before any dial). It reports whether
// the request may go on: on a route without [routes.auth] at once; with a right key too (the head sent
// upstream leaves out the key's field and any upstream field the client sent, and carries the upstream
// credential: appendUpstreamHead). Otherwise it has answered 401, counted it
// (fairlead_route_unauthorized_total) and written the access log line. The success path does not
// allocate.
func (px *proxy) routeAuthorized(ctx *fasthttp.RequestCtx, g *generation, ri int) bool {
	a := g.cfg.RouteAuthOf(ri)
	if a == nil {
		return true
	}
	if a.Admits(ctx.Request.Header.Peek(a.Header)) {
		return true
	}
	p := g.routes[ri].pool
	p.m.countUnauthorized(ri)
	unauthorized(ctx, a)
	if g.accessLog() {
		px.logRequest(ctx, ri, p, nil, time.Since(ctx.Time()), 0, 0, 0)
	}
	return false
}

// unauthorized answers 401 to a request without a right key: the same short answer for a missing and
// a wrong key.
func unauthorized(ctx *fasthttp.RequestCtx, a *config.Auth) {
	ctx.Error("401 Unauthorized\n", fasthttp.StatusUnauthorized) // resets the response: headers after
	if a.Bearer {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="fairlead"`)
	}
	if len(ctx.Request.Header.Peek(fasthttp.HeaderUpgrade)) > 0 {
		// A refused upgrade ends its connection: what the client sends next may be another protocol's.
		ctx.SetConnectionClose()
	}
}

// countUnauthorized counts a 401 of single-point auth on route ri (fairlead_route_unauthorized_total).
func (m *poolMetrics) countUnauthorized(ri int) {
	m.unauthorizedMu.Lock()
	if m.unauthorized == nil {
		m.unauthorized = map[int]uint64{}
	}
	m.unauthorized[ri]++
	m.unauthorizedMu.Unlock()
}

// unauthorizedCount is the 401s of single-point auth on route ri counted by the pool.
func (m *poolMetrics) unauthorizedCount(ri int) uint64 {
	m.unauthorizedMu.Lock()
	defer m.unauthorizedMu.Unlock()
	return m.unauthorized[ri]
}
