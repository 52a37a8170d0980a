// Package lb is fairlead's front end: it accepts client connections, routes each request to a pool,
// picks a server with the pool's policy and forwards the request to it (proxy.go has the whole path of a
// request, top to bottom). Configuration (config.go) is an immutable generation read through one
// atomic pointer, so that a reload can swap it whole.
package lb

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

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

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// generation is everything built from one Config: pools with their servers and checks, and the routes.
// Requests hold the generation they started with.
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

// New builds a load balancer for cfg. Start makes it listen.
func New(cfg *Config, o Options) (*LB, error) {
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	lb := &LB{logf: o.Logf}
	lb.gen.Store(newGeneration(cfg, o.Logf))
	return lb, nil
}

func newGeneration(cfg *Config, logf func(string, ...any)) *generation {
	g := &generation{cfg: cfg, pools: map[string]*Pool{}}
	for name, pc := range cfg.Pools {
		g.pools[name] = newPool(name, pc, logf)
	}
	for _, rc := range cfg.Routes {
		g.routes = append(g.routes, route{paths: rc.Paths, pool: g.pools[rc.Pool]})
	}
	return g
}

// Start begins health checks, waits for their first round (bounded by the check timeout) and then
// opens the front end and the admin listener. It returns once both listen.
func (lb *LB) Start(ctx context.Context) error {
	ctx, lb.cancel = context.WithCancel(ctx)
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
		ReadTimeout:                  fe.ReadTimeout.D,
		IdleTimeout:                  fe.IdleTimeout.D,
		Concurrency:                  fe.MaxConns,
		MaxRequestBodySize:           maxBody(fe.MaxBodySize),
		CloseOnShutdown:              true,
		Logger:                       fasthttpLogger{lb.logf},
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
	lb.wg.Wait()
}

type fasthttpLogger struct{ logf func(string, ...any) }

func (l fasthttpLogger) Printf(format string, args ...any) { l.logf("frontend: "+format, args...) }
