package lb

// Relay routes ([relays.NAME], package relay): the running relays, which outlive the generations that
// keep their fingerprint, a generation's binding of each to its spec, the requests a relay's path
// matches (route auth and the access log here, the rest in relay.Route), and the relay's view of its
// pool (relayPool), whose health check is the one verdict on the relay's servers.

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/relay"
	"github.com/valyala/fasthttp"
)

// relays are the running relays by name. Start, Reload and Close change them; mu guards the map.
type relays struct {
	mu      sync.Mutex
	running map[string]*relay.Route
}

// prepare returns the relays of cfg: the running ones whose fingerprint stays, and new ones over lb's
// pools (returned in fresh too, not started).
func (rs *relays) prepare(lb *LB, cfg *config.Config) (all map[string]*relay.Route, fresh []*relay.Route) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	all = map[string]*relay.Route{}
	for name, spec := range cfg.RelaySpecs {
		if rr := rs.running[name]; rr != nil && rr.Spec().Fingerprint == spec.Fingerprint {
			all[name] = rr
			continue
		}
		rc := cfg.Relays[name]
		pc := cfg.Pools[rc.Pool]
		pool := &relayPool{lb: lb, name: rc.Pool, servers: slices.Clone(pc.Servers), backups: slices.Clone(pc.Backups)}
		rr := relay.NewRoute(spec, rc, pc, pool, lb.logf)
		all[name] = rr
		fresh = append(fresh, rr)
	}
	return all, fresh
}

// start starts routes (relay.Route.Start); on the first failure it closes them all and returns the
// error.
func startRelays(ctx context.Context, routes []*relay.Route) error {
	for _, rr := range routes {
		if err := rr.Start(ctx); err != nil {
			for _, r := range routes {
				r.Close()
			}
			return err
		}
	}
	return nil
}

// swap makes all the running relays and closes those it does not hold.
func (rs *relays) swap(all map[string]*relay.Route) {
	rs.mu.Lock()
	old := rs.running
	rs.running = all
	rs.mu.Unlock()
	for name, rr := range old {
		if all[name] != rr {
			rr.Close()
		}
	}
}

// relayBinding is a relay of a generation: the running relay and the spec of that generation's config
// (its auth).
type relayBinding struct {
	rr   *relay.Route
	spec *config.RelaySpec
}

// bindRelays returns the bindings of cfg's relays, by name, to the running relays all.
func bindRelays(cfg *config.Config, all map[string]*relay.Route) []relayBinding {
	var bs []relayBinding
	for _, name := range slices.Sorted(maps.Keys(cfg.RelaySpecs)) {
		bs = append(bs, relayBinding{rr: all[name], spec: cfg.RelaySpecs[name]})
	}
	return bs
}

// relayStatuses are what the relays of generation g report (for /metrics: relay.WriteMetrics).
func (g *generation) relayStatuses() []relay.Status {
	var out []relay.Status
	for _, b := range g.relays {
		out = append(out, b.rr.Status())
	}
	return out
}

// relayDocuments are the relays of generation g in the status document (/api/status).
func (g *generation) relayDocuments() []admin.RelayStatus {
	var out []admin.RelayStatus
	for i, rs := range g.relayStatuses() {
		d := admin.RelayStatus{Name: rs.Name, Hosts: g.relays[i].spec.Hosts, Protocol: rs.Protocol, GUID: rs.GUID, Path: rs.Path, Pool: rs.Pool,
			Start: rs.Start, Seeded: rs.Seeded, Upstream: rs.Upstream, ServingBackup: rs.ServingBackup,
			Switches: rs.Switches, Sessions: rs.Sessions, Subscribers: rs.Subscribers, Requests: rs.Requests,
			Refused: rs.Refused, SeedWrites: rs.SeedWrites, SeedWriteErrors: rs.SeedWriteErrors}
		if i := rs.IAM; i != nil {
			d.IAM = &admin.IAMStatus{URL: i.URL, TokenExpires: i.TokenExpires, Tokens: i.Tokens, Failures: i.Failures}
		}
		for _, t := range rs.Topics {
			d.Topics = append(d.Topics, admin.TopicStatus{Topic: t.Topic, Listed: t.Listed, Watched: t.Watched,
				Subscribers: t.Subscribers, Version: t.Version, Seed: t.Seed, Fetched: t.Fetched,
				Publishes: t.Publishes, Fetches: t.Fetches, FetchErrors: t.FetchErrors, Drops: t.Drops})
		}
		out = append(out, d)
	}
	return out
}

// relayPool is a relay's pool as its upstream sees it (relay.Pool): the running pool that holds the
// relay's servers. Its health is the one verdict on them: the upstream takes the pool's choice, reports
// every attempt to its health check as a request would (a run of failures takes a server down, which
// the pool publishes, counts and shows like any failover), and follows the pool's changes.
type relayPool struct {
	lb               *LB
	name             string
	servers, backups []string // the relay's pool config, as its fingerprint holds it
}

// pool returns the running pool and its state when it holds the relay's servers. A relay that a
// reload adds or changes starts (fetches its listed topics) before the reload's generation is in
// force (LB.Reload): until then its pool may be missing or hold other servers, and pool returns nil.
func (rp *relayPool) pool() (*Pool, *poolView) {
	g := rp.lb.px.gen.Load()
	if g == nil {
		return nil, nil
	}
	p := g.pools[rp.name]
	if p == nil {
		return nil, nil
	}
	st := p.view.Load()
	if !slices.Equal(st.cfg.Servers, rp.servers) || !slices.Equal(st.cfg.Backups, rp.backups) {
		return nil, nil
	}
	return p, st
}

// Choose returns the pool's first available server, the serving tier first (primaries in config
// order while any is available, else the backups), other than those tried. Until the relay's pool is
// in force (see pool), the config's order without health.
func (rp *relayPool) Choose(tried []string) string {
	_, st := rp.pool()
	if st == nil {
		for _, list := range [][]string{rp.servers, rp.backups} {
			for _, addr := range list {
				if !slices.Contains(tried, addr) {
					return addr
				}
			}
		}
		return ""
	}
	if s := st.firstAvailable(tried); s != nil {
		return s.Addr
	}
	return ""
}

// Report tells the pool's health check how an attempt on server ended, as a request's end is told
// (Pool.health.Report); a failure counts in the server's failures too.
func (rp *relayPool) Report(server string, err error) {
	p, st := rp.pool()
	if p == nil {
		return
	}
	for _, s := range st.servers {
		if s.Addr == server {
			if err != nil {
				s.failures.Add(1)
			}
			p.checks.Report(s.target, err)
			return
		}
	}
}

// Changed returns the pool's change notification (a server's availability, a reload).
func (rp *relayPool) Changed() <-chan struct{} { return rp.lb.bus.Changed(rp.name) }

// serveRelay answers the request if its host and path match a relay's; it reports whether one did.
// Relays are tried by name, but lb/config refuses two that could take one request (relayOverlaps), so
// the order never decides.
func (px *proxy) serveRelay(ctx *fasthttp.RequestCtx, g *generation, host []byte, upgradeHeader bool) bool {
	var kb [256]byte
	for i := range g.relays {
		b := &g.relays[i]
		req, ok := b.takes(ctx, host, kb[:0])
		if !ok {
			continue
		}
		px.relayRequest(ctx, g, b, req)
		px.closeUnlessTunnel(ctx, upgradeHeader) // a refused upgrade, or one that was not a WebSocket
		return true
	}
	return false
}

// takes reports whether relay b takes the request: its host (without port, as frontend.AuthorityHost
// gives it) matches the generation's hosts of the relay, then its path the relay's (relay.Match, whose
// topic key is appended to dst; the path, protocol and instance are in the running relay's fingerprint,
// so b.spec's are its own). It allocates nothing.
func (b *relayBinding) takes(ctx *fasthttp.RequestCtx, host, dst []byte) (relay.Request, bool) {
	if !config.HostMatches(b.spec.Hosts, host) {
		return relay.Request{}, false
	}
	return relay.Match(b.spec, ctx, dst)
}

// relayRequest answers one request relay b matched: route auth first (a refused key is counted by the
// relay and answered 401 here), then the relay.
func (px *proxy) relayRequest(ctx *fasthttp.RequestCtx, g *generation, b *relayBinding, req relay.Request) {
	if a := b.spec.Auth; a != nil {
		h := &ctx.Request.Header
		if !a.Admits(h.Peek(a.Header)) {
			b.rr.CountRefused(fasthttp.StatusUnauthorized)
			unauthorized(ctx, a)
			px.logRelay(ctx, g, b.rr.Name(), string(req.Key), req.Kind(ctx))
			return
		}
		h.Del(a.Header) // the relay answers itself: the key goes nowhere, but not even into a log
	}
	topic, kind := b.rr.Serve(ctx, req)
	px.logRelay(ctx, g, b.rr.Name(), topic, kind)
}

// logRelay writes the access log line of a relay request, when the access log is on. A stream's line
// is written when its answer's head is ready, not when it ends.
func (px *proxy) logRelay(ctx *fasthttp.RequestCtx, g *generation, name, topic, kind string) {
	if !g.accessLog() {
		return
	}
	status := ctx.Response.StatusCode()
	if ctx.Hijacked() && kind == "websocket" {
		status = fasthttp.StatusSwitchingProtocols // an SSE stream, hijacked too, answered 200
	}
	px.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("type", "relay"),
		slog.String("client", ctx.RemoteIP().String()),
		slog.String("method", string(ctx.Method())),
		slog.String("path", string(ctx.Path())),
		slog.String("relay", name),
		slog.String("topic", topic),
		slog.String("kind", kind),
		slog.Int("status", status),
		slog.Float64("duration_ms", milliseconds(time.Since(ctx.Time()))),
	)
}
