// Package lb is the load balancer: the request path (proxy), which serves every request, and its
// supervisor (LB), which builds it, starts, reloads and stops everything a running fairlead holds.
//
// The request path, in the order a request takes it: proxy.go (the whole path, top to bottom, and how
// each attempt ended), sources.go (rate_per_source at the first byte of a request), routeauth.go
// (single-point auth), relays.go (relay routes answered by fairlead itself, package relay), pool.go (a
// pool, its immutable view and its server set changes), policy.go and roundrobin.go (the balance
// policies), server.go (a server and the one Available predicate), admission.go
// (new_tunnels_per_second), headers.go (the head sent upstream and the answer relayed), transport.go
// (each server's client from lb/upstream), upgrade.go (a WebSocket upgrade's handshake and its hand-over
// to a tunnel), leaderwatch.go (the in-flight failover of leader pools), log.go (the access log).
//
// The supervisor: lb.go (LB: New, Start, Close; a generation is one config and the routes built from
// it), reload.go (Reload step by step, and the list of what a running fairlead holds), listeners.go
// (the listeners and the wiring of lb/frontend), certificates.go (the certificates tls_listen serves:
// the files' and [frontend.acme]'s, whose manager, lb/acme, lives across reloads), tunnels.go (the tunnel engines and the closing of
// tunnels on events), discovery.go (package discovery's lists put in force in their pools),
// statefile.go (the state file and the fast start), events.go (the event stream's subscribers: counts,
// the log, slow_start ramps), metrics.go and histogram.go (the metrics written at scrape time), admin.go
// and actions.go (what the admin listener, package admin, reads and does).
//
// Packages of their own: the config (lb/config), the front end's framer, HTTP/2 and limits
// (lb/frontend), the field names treated by name (lb/httpfield), the upstream client (lb/upstream)
// and the dialer it shares with the health checks' probes (lb/dialer, a leaf), the tunnel engine
// (lb/tunnel) over lb/nbio, with fairlead's own TLS record layer for the sessions it takes over from
// crypto/tls (lb/tlsrecord, a leaf), discovery (lb/discovery), the admin listener and status document
// (lb/admin), the relays (lb/relay), files replaced whole (lb/atomicfile), and the hand-over of a running
// process to a new one of a binary upgrade (lb/handover; handover.go here: LB.Succession, and
// Options.Given; handover_streams.go: the relays' subscribers; handover_conns.go: the idle keep-alive
// connections).
//
// Configuration is an immutable generation read through one atomic pointer, so that a reload can swap it
// whole; pools outlive generations, and a reload applies a server set change to each.
package lb

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/acme"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/handover"
	"github.com/fairlead/fairlead/lb/relay"
	"github.com/valyala/fasthttp"
)

// LB is a running load balancer.
type LB struct {
	given    handover.Given   // Options.Given: what the old process of a binary upgrade handed over
	upgrades [2]atomic.Uint64 // binary upgrades: ok (this process or an ancestor took over), failed
	started  time.Time        // when Start was called (admin.ProcessStatus.Since); set before its goroutines
	// px is the request path: every request is served by it alone (proxy.go).
	px      *proxy
	log     *slog.Logger         // events and the access log (log.go)
	logf    func(string, ...any) // printf-style lines, through log unless Options.Logf was given
	level   *slog.LevelVar       // log's level: [global] log_level
	version string               // fairlead_build_info

	frontServer *fasthttp.Server
	// frontConns counts the front end's open connections (HTTP/1.1 and HTTP/2; a hijacked one, now a
	// tunnel's or a relay stream's, leaves the count); draining is set by Close: every answer on an
	// HTTP/1.1 connection then says Connection: close (frontHandle). See drainKeepAlive.
	frontConns  atomic.Int64
	draining    atomic.Bool
	h2          *frontend.H2 // the front end's HTTP/2 streams
	adminServer *fasthttp.Server
	lns         listeners // the front end's and the admin's (listeners.go)

	// adminConnErrs counts and logs the admin listener's connection errors; fasthttp's own lines never
	// reach the log.
	adminConnErrs *frontend.ConnErrors
	// adminHandler answers the admin listener's requests (package admin; LB is its Backend).
	adminHandler *admin.Handler

	// bus is the event stream: health checks, server set changes and reloads publish on it; the tunnel
	// closer, the log and the event counters subscribe.
	bus    *event.Bus
	events [event.NumKinds]atomic.Uint64 // published events by kind
	// hist is what the status document remembers: the last events, rates, state changes (admin.go).
	hist *admin.History

	// relays are the running relays ([relays.NAME], relays.go). A relay outlives the generations that
	// keep its fingerprint.
	relays relays

	// disc runs each pool's service discovery provider (discovery.go), across reloads.
	disc discoveries

	ctx    context.Context // lives until Close; parent of every pool's checks
	cancel context.CancelFunc
	wg     sync.WaitGroup

	reloadMu       sync.Mutex
	closed         bool // Close began: a Reload does nothing (guarded by reloadMu)
	reloads        atomic.Uint64
	now            func() time.Time // Options.Now
	reloadFailures atomic.Uint64
	lastReloadOK   atomic.Bool
}

// generation is one Config and the routes built from it. Requests hold the generation they started with;
// its pools are shared with the generations before and after it.
type generation struct {
	cfg    *config.Config
	pools  map[string]*Pool
	routes []route
	relays []relayBinding // by name; matched before routes
	byHost bool           // a route or a relay has hosts: the request's host is looked up for them
	// acme is [frontend.acme]'s manager (nil without it), shared by the generations that keep the
	// table; tls is the configuration of tls_listen's handshakes (certificates.go), nil without it.
	acme *acme.Manager
	tls  *tls.Config
}

// Options configures New.
type Options struct {
	// Logger receives the log: operational lines, events and the access log. Default NewLogger with
	// [global] log_format on standard error, or Logf's lines when Logf is set.
	Logger *slog.Logger
	// Logf, when Logger is nil, receives every line instead, as text (tests collect them). Ignored
	// when Logger is set.
	Logf func(format string, args ...any)
	// Level is the level Logger logs at (NewLogger's level): New sets it to [global] log_level and a
	// reload to the new one. Default a LevelVar of New's own, which a Logger given without it ignores.
	Level *slog.LevelVar
	// Version is the version fairlead_build_info reports. Default "dev".
	Version string
	// Now is the clock of the limits per client address (rate_per_source's buckets); time.Now if nil.
	// Tests inject one.
	Now func() time.Time
	// Given is what the old process of a binary upgrade handed over (package handover): Start serves
	// on its listeners where the config names the same addresses, and starts from its state (each pool's
	// leader and health, the sticky keys) instead of the first round of probes. Nil: a start of its own.
	Given *handover.Given
}

// New builds a load balancer for cfg, a Config that config.Load returned. Start makes it listen.
func New(cfg *config.Config, o Options) *LB {
	o.setDefaults(cfg)
	lb := &LB{log: o.Logger, logf: o.Logf, level: o.Level, version: o.Version, bus: event.NewBus(),
		px: &proxy{log: o.Logger, logf: o.Logf}}
	lb.px.tunnels.logf = o.Logf
	lb.px.front = frontend.New(frontLimits(&cfg.Frontend), o.Logger)
	lb.px.front.OnRefused = lb.px.logRefused
	lb.now = o.Now
	if o.Given != nil {
		lb.given = *o.Given
		lb.upgrades[0].Store(o.Given.Upgrades.OK)
		lb.upgrades[1].Store(o.Given.Upgrades.Failed)
	}
	lb.px.front.Sources().SetLimits(sourceLimits(&cfg.Frontend, lb.now))
	lb.px.front.SetProxyProtocol(cfg.Frontend.ProxyFrom)
	lb.adminConnErrs = frontend.NewConnErrors("admin", o.Logger)
	lb.disc.lb = lb
	lb.lastReloadOK.Store(true)
	lb.adminHandler = admin.New(lb, admin.Options{})
	lb.bus.Subscribe(lb.countEvent)
	lb.bus.Subscribe(lb.logEvent)
	lb.bus.Subscribe(lb.closeTunnels)
	lb.bus.Subscribe(lb.failbackTunnels)
	lb.bus.Subscribe(lb.leaderChanged) // leaderwatch.go
	lb.bus.Subscribe(lb.rampOnReturn)  // slow_start
	lb.hist = admin.NewHistory()
	lb.bus.Subscribe(lb.hist.Record)
	lb.relays.running, _ = lb.relays.prepare(lb, cfg)
	g, _ := lb.newGeneration(cfg, nil, lb.relays.running)
	m, _, err := lb.acmeFor(cfg, nil)
	if err != nil { // an address config.Load validated: not seen
		lb.log.Error(err.Error())
	}
	g.withACME(m)
	lb.px.gen.Store(g)
	return lb
}

// SecretFiles returns the running config's secret files (Config.SecretFiles).
func (lb *LB) SecretFiles() []string { return lb.px.gen.Load().cfg.SecretFiles() }

// newGeneration builds the routes of cfg over its pools, and binds its relays to the running relays rrs
// (relays.prepare). A pool of old with the same balance is kept and brought to its new config by a
// server set change; other pools are new (returned in fresh, not yet started).
func (lb *LB) newGeneration(cfg *config.Config, old *generation, rrs map[string]*relay.Route) (g *generation, fresh []*Pool) {
	g = &generation{cfg: cfg, pools: map[string]*Pool{}}
	for name, pc := range cfg.Pools {
		pc = lb.disc.discovered(name, pc) // a pool with service discovery keeps the servers it found
		if old != nil {
			if op, ok := old.pools[name]; ok && op.balance == pc.Balance {
				op.relayOnly.Store(cfg.RelayOnlyPool(name))
				op.apply(pc, lb.logf)
				g.pools[name] = op
				continue
			}
		}
		p := newPool(name, pc, cfg.RelayOnlyPool(name), lb.bus, lb.logf)
		g.pools[name] = p
		fresh = append(fresh, p)
	}
	for name, pc := range cfg.Pools {
		if pc.TLS.Enabled && pc.TLS.InsecureSkipVerify { // at start and at every reload that keeps it
			lb.log.Warn(fmt.Sprintf("pool %s: pools.%s.tls.insecure_skip_verify = true: the servers' certificates are not verified, anyone on the path can impersonate them", name, name),
				slog.String("pool", name))
		}
	}
	for _, rc := range cfg.Routes {
		g.routes = append(g.routes, route{hosts: config.LowerHosts(rc.Hosts), paths: rc.Paths, websocket: rc.WebSocket, pool: g.pools[rc.Pool]})
	}
	g.relays = bindRelays(cfg, rrs)
	for _, r := range g.routes {
		g.byHost = g.byHost || len(r.hosts) > 0
	}
	for _, b := range g.relays {
		g.byHost = g.byHost || len(b.spec.Hosts) > 0
	}
	return g, fresh
}

// Start begins health checks, waits for their first round (bounded by the check timeout; with start =
// "fast", a pool restored from the state file does not wait, see statefile.go) and then opens the front end
// and the admin listener. It returns once both listen.
func (lb *LB) Start(ctx context.Context) error {
	lb.started = time.Now().UTC().Truncate(time.Second) // before any goroutine reads it (status)
	ctx, lb.cancel = context.WithCancel(ctx)
	lb.ctx = ctx
	g := lb.px.gen.Load()
	lb.restoreState(g, lb.given.State) // start = "fast" or a binary upgrade: pools with a remembered state are ready before their first probe
	for _, p := range g.pools {
		p.start(ctx)
	}
	for _, p := range g.pools {
		select {
		case <-p.ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Relays: start = "normal" fetches every listed topic before the front end opens.
	var rrs []*relay.Route
	for _, b := range g.relays {
		rrs = append(rrs, b.rr)
	}
	if err := startRelays(ctx, rrs); err != nil {
		lb.cancel()
		return err
	}
	lb.startStateWriter(ctx, g) // state_file: written every few seconds and once more at stop
	lb.disc.sync(g)             // service discovery providers (discovery.go)
	lb.startHistory(ctx)        // the status document's memory (admin.go)

	fe := g.cfg.Frontend
	var fls []net.Listener // the plain and the HTTPS listener, as configured
	for _, f := range lb.frontListeners() {
		if addr := f.addr(g.cfg); addr != "" {
			raw, err := listenAs(&lb.given, f.key, addr)
			if err != nil {
				for _, l := range fls {
					l.Close() //nolint:errcheck
				}
				lb.cancel()
				return fmt.Errorf("frontend: %s: %w", f.key, err)
			}
			ln := f.wrap(raw)
			lb.lns.set(f.id, ln, raw, addr)
			fls = append(fls, ln)
		}
	}
	lb.frontServer = &fasthttp.Server{
		Handler:      lb.px.front.Handler(lb.frontHandle), // and once a binary upgrade took the idle connections
		ConnState:    lb.frontConnState,
		ErrorHandler: lb.px.frontendError,
		// No Server, Date or Content-Type of fasthttp's own on relayed answers: they pass as the server
		// sent them (headers.go adds a missing Date).
		NoDefaultServerHeader:        true,
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		StreamRequestBody:            true,
		// A 32 KiB write buffer sends a 16 KiB answer in one system call; ReduceMemoryUsage gives the
		// buffers back to a pool between requests, so an idle keep-alive client holds none.
		WriteBufferSize: 32 << 10,
		// A head must fit fasthttp's read buffer; the framer (lb/frontend) enforces max_header_size first.
		ReadBufferSize:     max(fe.MaxHeaderSize, 4<<10),
		ReduceMemoryUsage:  true,
		ReadTimeout:        fe.ReadTimeout.D,
		IdleTimeout:        fe.IdleTimeout.D,
		Concurrency:        fe.MaxConns,
		MaxRequestBodySize: maxBody(fe.MaxBodySize),
		CloseOnShutdown:    true,
		KeepHijackedConns:  true, // tunnels outlive the handler; the tunnel engine owns them
		// fasthttp's lines quote the bytes of a request it could not read: its errors are counted and
		// logged without them (lb/frontend), and its error messages leave the bytes out too.
		Logger:                lb.px.front.Logger(),
		SecureErrorLogMessage: true,
	}
	// HTTP/2 on the TLS listener: a connection whose handshake chose h2 (offered with http2 = true)
	// is served stream by stream into the same handler (lb/frontend/h2.go).
	lb.h2 = lb.px.front.NewH2(lb.px.handle, func() frontend.H2Config {
		fe := &lb.px.gen.Load().cfg.Frontend
		return frontend.H2Config{MaxStreams: uint32(fe.HTTP2MaxStreams), MaxHeader: fe.MaxHeaderSize, ReadTimeout: fe.ReadTimeout.D, IdleTimeout: fe.IdleTimeout.D}
	})
	lb.frontServer.NextProto("h2", lb.h2.Serve)
	if g.acme != nil {
		g.acme.LoadStored() // [frontend.acme]: the stored certificates served from the first handshake
	}
	for _, ln := range fls {
		lb.serve(lb.frontServer, ln, "frontend")
	}
	lb.startACME(g, nil, true) // [frontend.acme]: obtains what storage lacks, answering on the listeners above

	if g.cfg.Admin.Listen != "" {
		aln, err := listenAs(&lb.given, "admin.listen", g.cfg.Admin.Listen)
		if err != nil {
			lb.Close()
			return fmt.Errorf("admin: %w", err)
		}
		lb.lns.set(lnAdmin, aln, aln, g.cfg.Admin.Listen)
		lb.adminServer = &fasthttp.Server{Handler: lb.adminHandler.Handle, Name: "fairlead-admin", ReadTimeout: 10 * time.Second,
			Logger: lb.adminConnErrs.Logger(), SecureErrorLogMessage: true}
		lb.serve(lb.adminServer, aln, "admin")
	}
	for key, hl := range lb.given.Listeners { // handed over for an address the config no longer names
		hl.Close() //nolint:errcheck
		delete(lb.given.Listeners, key)
	}
	return nil
}

// serve runs srv on ln until ln is closed (Close, or a reload that moved the listener).
func (lb *LB) serve(srv *fasthttp.Server, ln net.Listener, what string) {
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			lb.log.Error(fmt.Sprintf("%s: no longer serving: %v", what, err)) // the listener failed: an outage
		}
	}()
}

// rebind moves the listener id to nl: the new one serves first, then the old one closes; connections
// accepted on the old one (keep-alive clients, requests in flight) are served to their end.
func (lb *LB) rebind(srv *fasthttp.Server, id listenerID, nl, raw net.Listener, addr, what string) {
	lb.serve(srv, nl, what)
	old := lb.lns.set(id, nl, raw, addr)
	old.Close() //nolint:errcheck // its Serve returns
	lb.logf("%s: now listening on %s (was %s)", what, nl.Addr(), old.Addr())
}

// maxBody maps max_body_size (0 = unlimited) to fasthttp's limit. With StreamRequestBody the limit is
// enforced while streaming.
func maxBody(n int64) int {
	if n <= 0 || n > int64(^uint(0)>>1) {
		return int(^uint(0) >> 1)
	}
	return int(n)
}

// Addr returns the front end's plain HTTP listening address, or "" if it has none.
func (lb *LB) Addr() string { return lb.lns.addr(lnPlain) }

// TLSAddr returns the front end's HTTPS listening address, or "" if it has none.
func (lb *LB) TLSAddr() string { return lb.lns.addr(lnTLS) }

// AdminAddr returns the admin listener's address, or "" if disabled.
func (lb *LB) AdminAddr() string { return lb.lns.addr(lnAdmin) }

// Close is the drain at exit (SIGTERM, or the old process's after a binary upgrade): it stops
// accepting, ends keep-alive connections after their next answer (drainKeepAlive) and HTTP/2 ones by
// GOAWAY after their last stream, lets in-flight requests finish for up to [frontend] drain_timeout,
// closes the tunnels (each pool's spread over its tunnel_close_spread), then
// stops the checks and the admin listener.
func (lb *LB) Close() {
	g := lb.px.gen.Load()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Frontend.DrainTimeout.D)
	defer cancel()
	// Closing the listeners first stops accepting even if a Serve goroutine has not started yet (its
	// Serve then returns at once; Shutdown alone only knows the listeners Serve registered).
	lb.lns.closeAll()
	// Relay streams never end by themselves: closing the relays ends them (SSE streams end, WebSockets
	// close with 1001), so that the shutdown below does not wait for them.
	lb.relays.swap(nil)
	if lb.h2 != nil {
		lb.h2.Shutdown() // HTTP/2 clients are told GOAWAY; their connections close with their last stream
	}
	if lb.frontServer != nil {
		lb.drainKeepAlive(ctx, min(keepAliveGrace, g.cfg.Frontend.DrainTimeout.D/2))
		lb.frontServer.ShutdownWithContext(ctx) //nolint:errcheck // best effort on stop
	}
	if lb.h2 != nil {
		lb.h2.Close() // those still streaming when drain_timeout ran out
	}
	lb.closeAllTunnels(g)
	if lb.cancel != nil {
		lb.cancel() // ends the checks and the discovery providers
	}
	// No reload after this one (a reload under way ends first): the ACME manager in force is the last.
	lb.reloadMu.Lock()
	lb.closed = true
	m := lb.px.gen.Load().acme
	lb.reloadMu.Unlock()
	if m != nil {
		m.Close() // ends renewals and any attempt under way ([frontend.acme])
	}
	lb.adminHandler.Close() // ends the admin's event streams
	lb.disc.stop()
	if lb.adminServer != nil {
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		lb.adminServer.ShutdownWithContext(actx) //nolint:errcheck
		acancel()
	}
	lb.px.tunnels.close()
	lb.wg.Wait()
}

// keepAliveGrace is how long the drain lets HTTP/1.1 keep-alive clients send their next request (see
// drainKeepAlive).
const keepAliveGrace = time.Second

// drainKeepAlive ends the front end's HTTP/1.1 keep-alive connections without dropping a request: from
// now on every answer says Connection: close, and the connection closes after it; this waits grace (or
// until no front-end connection is left) before the shutdown closes the idle ones. Closing an idle
// connection at once, as fasthttp's shutdown does, drops the request a busy client has already sent on
// it (seen in a binary upgrade under load: requests written whole, unanswered, and sent again by the
// client); after the grace, only a client idle for that long can meet the close, as it can meet
// idle_timeout's.
func (lb *LB) drainKeepAlive(ctx context.Context, grace time.Duration) {
	lb.draining.Store(true)
	t := time.NewTimer(grace)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for lb.frontConns.Load() > 0 {
		select {
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// frontHandle serves a request of the front end's HTTP/1.1 connections (HTTP/2 streams go to the proxy
// directly); while Close drains, the answer ends its connection.
func (lb *LB) frontHandle(ctx *fasthttp.RequestCtx) {
	lb.px.handle(ctx)
	if lb.draining.Load() && !ctx.Hijacked() {
		ctx.SetConnectionClose()
	}
}

// frontConnState counts the front end's open connections (frontConns).
func (lb *LB) frontConnState(_ net.Conn, s fasthttp.ConnState) {
	switch s {
	case fasthttp.StateNew:
		lb.frontConns.Add(1)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		lb.frontConns.Add(-1)
	}
}

// Reload swaps in cfg. Pools with the same balance keep running and get a server set change: servers
// whose address stays keep their health, leader role, sticky keys, tunnels and counters; new servers
// take traffic after their first passing probe; removed servers drain and their tunnels close. New pools
// (or pools whose balance changed) start their checks, and the swap waits for their first round (bounded
// by the check timeout) so that no request meets a pool that knows no server yet. A new [frontend] or
// [admin] listen address is bound before anything applies and served at once, the old listener closing
// without cutting its connections. Other changes to [frontend], and the logger and state file settings
// of [global], need a restart; they are reported in the error and the rest of the reload still applies.
//
// Reload logs its outcome itself (a ReloadApplied or ReloadFailed event, the restart warning), so the
// caller need not log the error again. fairlead_config_last_reload_successful is 1 after a reload
// whose files are in force (applied, or unchanged: identical to the running config's), 0 after one
// that kept the running config (ReloadFailed).
func (lb *LB) Reload(cfg *config.Config) error {
	lb.reloadMu.Lock()
	defer lb.reloadMu.Unlock()
	if lb.closed {
		return errStopping
	}
	old := lb.px.gen.Load()
	if sameFiles(old.cfg, cfg) {
		// The files say what is running: this reload succeeded, even after a failed one (a bad edit
		// put back as it was), whose 0 would otherwise stay. After a failed one it is a ReloadApplied
		// event (nothing new applied, so fairlead_config_reloads_total stays): the failure it ends
		// leaves /api/status and the page's banner with the metric.
		if lb.lastReloadOK.Swap(true) {
			lb.logf("reload: config unchanged, nothing to do")
			return nil
		}
		lb.bus.Publish(event.Event{Kind: event.ReloadApplied,
			Detail: "config unchanged: the files are the running config's again, as before the failed reload"})
		return nil
	}
	r := &reload{lb: lb, cfg: cfg, old: old}
	if err := r.bind(); err != nil {
		lb.ReloadFailed(err)
		return err
	}
	if err := r.prepareACME(); err != nil {
		r.unbind()
		lb.ReloadFailed(err)
		return err
	}
	if err := r.startRelays(); err != nil {
		r.unbind()
		r.dropACME()
		lb.ReloadFailed(err)
		return err
	}
	r.build()
	if err := r.startPools(); err != nil {
		r.dropACME()
		return err // fairlead is stopping
	}
	r.swap()
	r.rebind()
	r.startACME()
	r.retire()
	lb.reloads.Add(1)
	lb.lastReloadOK.Store(true)
	lb.bus.Publish(event.Event{Kind: event.ReloadApplied,
		Detail: fmt.Sprintf("%s, %d new", plural(len(r.g.pools), "pool"), len(r.fresh))})
	if restart := r.needsRestart(); len(restart) > 0 {
		// The rest is in force and a reload of the same files finds nothing to do, so the reload
		// counts as successful; the changes waiting for a restart are a warning.
		err := fmt.Errorf("reload: changes to %s take effect only after a restart", strings.Join(restart, " and "))
		lb.log.Warn(err.Error())
		return err
	}
	return nil
}

// errStopping is what a Reload after Close began returns.
var errStopping = errors.New("reload: fairlead is stopping")

// ReloadFailed records a reload whose config did not load; the running config stays.
func (lb *LB) ReloadFailed(err error) {
	lb.reloadFailures.Add(1)
	lb.lastReloadOK.Store(false)
	lb.bus.Publish(event.Event{Kind: event.ReloadFailed, Detail: err.Error()})
}

// Unchanged reports whether cfg was read from the same bytes as the running config: a Reload of it
// would find nothing to do.
func (lb *LB) Unchanged(cfg *config.Config) bool { return sameFiles(lb.px.gen.Load().cfg, cfg) }

// sameFiles reports whether two configs were read from identical bytes (a reload of unchanged files is
// skipped).
func sameFiles(a, b *config.Config) bool { return a.Digest != "" && a.Digest == b.Digest }
