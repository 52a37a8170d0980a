// Package admin serves fairlead's admin listener (Listen of [config.Admin]): the live status page, the
// status document (/api/status), the event stream as Server-Sent Events (/events), the Prometheus
// metrics (/metrics), the liveness check (/healthz), Go's profiler (/debug/pprof/) and the operator's
// actions on servers (POST /api/servers/POOL/SERVER/ACTION), with the admin credentials checked first
// (auth.go).
//
// It knows the load balancer only through Backend, which package lb implements: lb computes the
// status from its pools, writes their metrics and carries out the actions; this package owns the HTTP
// side of each (paths, methods, answers, the stream's framing and pacing) and the types of the status
// document (status.go), which lb fills. It never imports lb.
//
// The endpoints, the status document's fields and every metric family are documented in ADMIN.md,
// generated from this package (metricsdoc.go and the doc comments of status.go) by `make reference`.
package admin

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
)

// Backend is what the admin listener serves: the running load balancer. Its methods are called
// concurrently, from every admin request and every /events stream.
type Backend interface {
	// Config returns the configuration in force: its [admin] table and the secrets read for it
	// (AdminToken, AdminPassword) decide who may read and act (auth.go). A reload may change it.
	Config() *config.Config
	// Status returns a snapshot of every pool, server and relay (GET /api/status, and the snapshots of
	// /events).
	Status() Status
	// WriteMetrics writes every metric in the Prometheus text format (GET /metrics).
	WriteMetrics(w io.Writer)
	// Subscribe calls fn with every event published from now on, until cancel is called. fn runs in
	// the publisher's goroutine, possibly in several at once and even after cancel: it must only try a
	// send and never block.
	Subscribe(fn func(event.Event)) (cancel func())
	// Act carries out an operator's action on the server of pool named server (its address or display
	// name) on behalf of by (the client's address, for the log and the event), and returns the
	// server's status after it. Errors: ErrNoServer, ErrUnknownAction.
	Act(pool, server string, action Action, by string) (ServerStatus, error)
}

// Options tune a Handler; a zero field takes its default.
type Options struct {
	// SnapshotEvery is how often an /events stream sends the status document (default 2 s); PingEvery
	// how often it sends a comment, so that proxies keep an idle stream open (default 15 s).
	SnapshotEvery, PingEvery time.Duration
}

// Handler answers the admin listener's requests for a Backend. It is safe for concurrent use.
type Handler struct {
	b            Backend
	o            Options
	unauthorized atomic.Uint64 // requests answered 401

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: every /events stream ends
}

// New returns the Handler of b's admin listener.
func New(b Backend, o Options) *Handler {
	if o.SnapshotEvery <= 0 {
		o.SnapshotEvery = 2 * time.Second
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 15 * time.Second
	}
	return &Handler{b: b, o: o, closed: make(chan struct{})}
}

// Close ends every /events stream, cleanly for a client that reads (its stream ends after what was
// sent), and makes streams opened after it end at once. The other endpoints go on answering: the
// listener's owner shuts its server down.
func (h *Handler) Close() { h.closeOnce.Do(func() { close(h.closed) }) }

// Unauthorized counts the requests answered 401 (fairlead_admin_unauthorized_total).
func (h *Handler) Unauthorized() uint64 { return h.unauthorized.Load() }

// Handle serves one admin request (fasthttp.Server's Handler):
//
//	GET  /               the live status page (page.go)
//	GET  /events         Server-Sent Events: the event stream and periodic snapshots (events.go)
//	GET  /api/status     JSON: every pool, its servers, the leader and the probe state (also /status)
//	GET  /metrics        Prometheus text format
//	GET  /healthz        200 "ok" while the process serves
//	GET  /debug/pprof/... Go profiles (CPU, heap, goroutines)
//	POST /api/servers/POOL/ADDRESS/ACTION   drain, maint, ready or probe a server (actions.go)
//
// Access (auth.go): actions need the configured token or user and password; every path does when the
// listener is not a loopback address.
func (h *Handler) Handle(ctx *fasthttp.RequestCtx) {
	if !h.access(ctx, h.b.Config()) {
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/":
		servePage(ctx)
	case path == "/events":
		h.serveEvents(ctx)
	case path == "/healthz":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.WriteString("ok\n") //nolint:errcheck
	case path == "/status" || path == "/api/status":
		ctx.SetContentType("application/json")
		enc := json.NewEncoder(ctx)
		enc.SetIndent("", "  ")
		enc.Encode(h.b.Status()) //nolint:errcheck
	case path == "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4")
		writeMetrics(ctx, h.b) // exposition.go
	case strings.HasPrefix(path, "/api/servers/"):
		h.serveAction(ctx, strings.TrimPrefix(path, "/api/servers/"))
	case strings.HasPrefix(path, "/debug/pprof/"):
		// Go's profiler, for finding where time and memory go under real traffic.
		pprofhandler.PprofHandler(ctx)
	default:
		ctx.Error("404 Not Found: try /, /api/status, /events, /metrics or /healthz\n", fasthttp.StatusNotFound)
	}
}
