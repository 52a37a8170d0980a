// Package lb is fairlead's front end: it accepts client connections, routes each request to a pool,
// picks a server with the pool's policy and forwards the request to it (proxy.go has the whole path of a
// request, top to bottom).
//
// Files by concern: config*.go (schema, merge, defaults, validation), pool.go (a pool and its server
// set changes), server.go (a server and the one Available predicate), policy.go (balance policies as
// types), proxy.go (the forwarding loop), upgrade.go and tunnels.go (WebSocket tunnels and their
// registry), transport.go (upstream connections), events.go (the event stream's subscribers), admin.go.
//
// Configuration is an immutable generation read through one atomic pointer, so that a reload can swap it
// whole; pools outlive generations, and a reload applies a server set change to each.
package lb

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/lb/tunnel"
	"github.com/valyala/fasthttp"
)

// LB is a running load balancer.
type LB struct {
	gen  atomic.Pointer[generation]
	logf func(string, ...any)

	frontend *fasthttp.Server
	ln       net.Listener
	adminLn  net.Listener
	admin    *fasthttp.Server

	badRequests atomic.Uint64
	adminDenied atomic.Uint64 // admin requests answered 401

	// bus is the event stream: health checks, server set changes and reloads publish on it; the tunnel
	// closer, the log and the event counters subscribe.
	bus    *healthcheck.Bus
	events [healthcheck.NumKinds]atomic.Uint64 // published events by kind

	// relays carry WebSocket tunnels, one per distinct tunnel_idle_timeout. They belong to the LB, not
	// to a generation, so that tunnels outlive config reloads.
	relayMu sync.Mutex
	relays  map[time.Duration]*tunnel.Relay

	ctx    context.Context // lives until Close; parent of every pool's checks
	cancel context.CancelFunc
	wg     sync.WaitGroup

	reloadMu       sync.Mutex
	reloads        atomic.Uint64
	reloadFailures atomic.Uint64
	lastReloadOK   atomic.Bool
}

// generation is one Config and the routes built from it. Requests hold the generation they started with;
// its pools are shared with the generations before and after it.
type generation struct {
	cfg    *Config
	pools  map[string]*Pool
	routes []route
}

// Options configures New.
type Options struct {
	// Logf logs operational events. Default log.Printf.
	Logf func(format string, args ...any)
}

// New builds a load balancer for cfg, a Config that LoadConfig returned. Start makes it listen.
func New(cfg *Config, o Options) *LB {
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	lb := &LB{logf: o.Logf, relays: map[time.Duration]*tunnel.Relay{}, bus: healthcheck.NewBus()}
	lb.lastReloadOK.Store(true)
	lb.bus.Subscribe(lb.countEvent)
	lb.bus.Subscribe(lb.logEvent)
	lb.bus.Subscribe(lb.closeTunnels)
	lb.bus.Subscribe(lb.failbackTunnels)
	g, _ := lb.newGeneration(cfg, nil)
	lb.gen.Store(g)
	return lb
}

// Events returns the event stream (for subscribers such as the admin event feed).
func (lb *LB) Events() *healthcheck.Bus { return lb.bus }

// newGeneration builds the routes of cfg over its pools. A pool of old with the same balance is kept and
// brought to its new config by a server set change; other pools are new (returned in fresh, not yet
// started) and the pools of old that are not kept are returned in dropped.
func (lb *LB) newGeneration(cfg *Config, old *generation) (g *generation, fresh []*Pool) {
	g = &generation{cfg: cfg, pools: map[string]*Pool{}}
	for name, pc := range cfg.Pools {
		if old != nil {
			if op, ok := old.pools[name]; ok && op.balance == pc.Balance {
				op.apply(pc, lb.logf)
				g.pools[name] = op
				continue
			}
		}
		p := newPool(name, pc, lb.bus, lb.logf)
		g.pools[name] = p
		fresh = append(fresh, p)
	}
	for _, rc := range cfg.Routes {
		g.routes = append(g.routes, route{paths: rc.Paths, websocket: rc.WebSocket, pool: g.pools[rc.Pool]})
	}
	return g, fresh
}

// Start begins health checks, waits for their first round (bounded by the check timeout) and then
// opens the front end and the admin listener. It returns once both listen.
func (lb *LB) Start(ctx context.Context) error {
	ctx, lb.cancel = context.WithCancel(ctx)
	lb.ctx = ctx
	g := lb.gen.Load()
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

	fe := g.cfg.Frontend
	ln, err := net.Listen("tcp", fe.Listen)
	if err != nil {
		lb.cancel()
		return fmt.Errorf("frontend: %w", err)
	}
	lb.ln = ln
	lb.frontend = &fasthttp.Server{
		Handler:                      lb.handle,
		Name:                         "fairlead",
		NoDefaultServerHeader:        true,
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		StreamRequestBody:            true,
		// A 32 KiB write buffer sends a 16 KiB answer in one system call; ReduceMemoryUsage gives the
		// buffers back to a pool between requests, so an idle keep-alive client holds none.
		WriteBufferSize:    32 << 10,
		ReduceMemoryUsage:  true,
		ReadTimeout:        fe.ReadTimeout.D,
		IdleTimeout:        fe.IdleTimeout.D,
		Concurrency:        fe.MaxConns,
		MaxRequestBodySize: maxBody(fe.MaxBodySize),
		CloseOnShutdown:    true,
		KeepHijackedConns:  true, // tunnels outlive the handler; the relay owns them
		Logger:             fasthttpLogger{lb.logf},
	}
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		if err := lb.frontend.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			lb.logf("frontend: %v", err)
		}
	}()

	if g.cfg.Admin.Listen != "" {
		aln, err := net.Listen("tcp", g.cfg.Admin.Listen)
		if err != nil {
			lb.Close()
			return fmt.Errorf("admin: %w", err)
		}
		lb.adminLn = aln
		lb.admin = &fasthttp.Server{Handler: lb.handleAdmin, Name: "fairlead-admin", ReadTimeout: 10 * time.Second}
		lb.wg.Add(1)
		go func() {
			defer lb.wg.Done()
			lb.admin.Serve(aln) //nolint:errcheck // ends with Close
		}()
	}
	return nil
}

// maxBody maps max_body_size (0 = unlimited) to fasthttp's limit. With StreamRequestBody the limit is
// enforced while streaming.
func maxBody(n int64) int {
	if n <= 0 || n > int64(^uint(0)>>1) {
		return int(^uint(0) >> 1)
	}
	return int(n)
}

// Addr returns the front end's listening address.
func (lb *LB) Addr() string { return lb.ln.Addr().String() }

// AdminAddr returns the admin listener's address, or "" if disabled.
func (lb *LB) AdminAddr() string {
	if lb.adminLn == nil {
		return ""
	}
	return lb.adminLn.Addr().String()
}

// Close stops accepting, finishes in-flight requests for up to 10 seconds, then stops the checks.
func (lb *LB) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if lb.frontend != nil {
		lb.frontend.ShutdownWithContext(ctx) //nolint:errcheck // best effort on stop
	}
	if lb.admin != nil {
		lb.admin.ShutdownWithContext(ctx) //nolint:errcheck
	}
	if lb.cancel != nil {
		lb.cancel()
	}
	lb.relayMu.Lock()
	for _, r := range lb.relays {
		r.Close()
	}
	lb.relayMu.Unlock()
	lb.wg.Wait()
}

// Reload swaps in cfg. Pools with the same balance keep running and get a server set change: servers
// whose address stays keep their health, leader role, sticky keys, tunnels and counters; new servers
// take traffic after their first passing probe; removed servers drain and their tunnels close. New pools
// (or pools whose balance changed) start their checks, and the swap waits for their first round (bounded
// by the check timeout) so that no request meets a pool that knows no server yet. Changes to [frontend]
// or [admin] need a restart; they are reported in the error and the rest of the reload still applies.
func (lb *LB) Reload(cfg *Config) error {
	lb.reloadMu.Lock()
	defer lb.reloadMu.Unlock()
	old := lb.gen.Load()
	if sameFiles(old.cfg, cfg) {
		lb.logf("reload: config unchanged, nothing to do")
		return nil
	}
	g, fresh := lb.newGeneration(cfg, old)
	for _, p := range fresh {
		p.start(lb.ctx)
	}
	for _, p := range fresh {
		select {
		case <-p.ready():
		case <-lb.ctx.Done():
			return lb.ctx.Err()
		}
	}
	lb.gen.Store(g)
	for name, p := range old.pools {
		if g.pools[name] != p {
			p.close()
		}
	}
	lb.reloads.Add(1)
	lb.lastReloadOK.Store(true)
	lb.bus.Publish(healthcheck.Event{Kind: healthcheck.ReloadApplied,
		Detail: fmt.Sprintf("%d pools, %d new", len(g.pools), len(fresh))})
	var restart []string
	if cfg.Frontend != old.cfg.Frontend {
		restart = append(restart, "[frontend]")
	}
	if cfg.Admin != old.cfg.Admin {
		restart = append(restart, "[admin]")
	}
	if len(restart) > 0 {
		return fmt.Errorf("reload: changes to %s take effect only after a restart", strings.Join(restart, " and "))
	}
	return nil
}

// ReloadFailed records a reload whose config did not load; the running config stays.
func (lb *LB) ReloadFailed(err error) {
	lb.reloadFailures.Add(1)
	lb.lastReloadOK.Store(false)
	lb.bus.Publish(healthcheck.Event{Kind: healthcheck.ReloadFailed, Detail: err.Error()})
}

// sameFiles reports whether two configs were read from identical bytes (a reload of unchanged files is
// skipped).
func sameFiles(a, b *Config) bool { return a.digest != "" && a.digest == b.digest }

type fasthttpLogger struct{ logf func(string, ...any) }

func (l fasthttpLogger) Printf(format string, args ...any) { l.logf("frontend: "+format, args...) }
