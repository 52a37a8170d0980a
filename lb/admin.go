package lb

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
)

// Admin endpoints (on [admin] listen):
//
//	GET  /               the live status page (statuspage.go)
//	GET  /events         Server-Sent Events: the event stream and periodic snapshots (sse.go)
//	GET  /api/status     JSON: every pool, its servers, the leader and the probe state (also /status)
//	GET  /metrics        Prometheus text format
//	GET  /healthz        200 "ok" while the process serves
//	GET  /debug/pprof/... Go profiles (CPU, heap, goroutines)
//	POST /api/servers/POOL/ADDRESS/ACTION   drain, maint, ready or probe a server (actions.go)
//
// Access (auth.go): actions need the configured token or user and password; every path does when the
// listener is not a loopback address.
func (lb *LB) handleAdmin(ctx *fasthttp.RequestCtx) {
	g := lb.gen.Load()
	if !lb.adminAccess(ctx, g) {
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/":
		lb.servePage(ctx)
	case path == "/events":
		lb.serveEvents(ctx)
	case path == "/healthz":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.WriteString("ok\n") //nolint:errcheck
	case path == "/status" || path == "/api/status":
		ctx.SetContentType("application/json")
		enc := json.NewEncoder(ctx)
		enc.SetIndent("", "  ")
		enc.Encode(lb.Status()) //nolint:errcheck
	case path == "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4")
		lb.writeMetrics(ctx)
	case strings.HasPrefix(path, "/api/servers/"):
		lb.serverAction(ctx, strings.TrimPrefix(path, "/api/servers/"))
	case strings.HasPrefix(path, "/debug/pprof/"):
		// Go's profiler, for finding where time and memory go under real traffic.
		pprofhandler.PprofHandler(ctx)
	default:
		ctx.Error("404 Not Found: try /, /api/status, /events, /metrics or /healthz\n", fasthttp.StatusNotFound)
	}
}

// Status is the JSON document of GET /status.
type Status struct {
	// ConfigFiles are the files the running config was read from, in merge order.
	ConfigFiles []string `json:"config_files"`
	// Pools are every pool, by name.
	Pools []PoolStatus `json:"pools"`
	// Relays are the relay routes ([relays.NAME]), by name; omitted when there are none.
	Relays []RelayStatus `json:"relays,omitempty"`
}

// PoolStatus describes one pool.
type PoolStatus struct {
	Name    string `json:"name"`    // the NAME of [pools.NAME]
	Balance string `json:"balance"` // "leader", "sticky" or "roundrobin"
	// Waiting is the requests waiting for a server now.
	Waiting int64 `json:"waiting"`
	// Requests counts the requests routed to the pool; Retries the attempts retried on another server
	// (or on the confirmed leader).
	Requests uint64 `json:"requests"`
	Retries  uint64 `json:"retries"`
	// InflightFailovers counts the requests sent to a new leader while they waited for the old one's
	// answer (balance = "leader"; among the retries; leaderwatch.go).
	InflightFailovers uint64 `json:"inflight_failovers,omitempty"`
	// Errors counts the answers fairlead gave itself: 502, 504 and unavailable_status (the sum of
	// fairlead_pool_errors_total).
	Errors uint64 `json:"errors"`
	// Leader is the elected leader's address (balance = "leader"; "" while none is known), with the
	// number of leader changes (LeaderChanges) and split brains (SplitBrains) seen.
	Leader        string `json:"leader,omitempty"`
	LeaderChanges uint64 `json:"leader_changes,omitempty"`
	SplitBrains   uint64 `json:"split_brains,omitempty"`
	// StickyEntries is the number of keys in the sticky table (balance = "sticky").
	StickyEntries int `json:"sticky_entries,omitempty"`
	// Serving is the tier that takes traffic: "primaries", or "backups" after a failover. Failovers and
	// Failbacks count the switches.
	Serving   string `json:"serving"`
	Failovers uint64 `json:"failovers"`
	Failbacks uint64 `json:"failbacks"`
	// HighWatermark and HighWatermarkBytes are a roundrobin pool's watermarks (0: no limit).
	HighWatermark      int   `json:"high_watermark,omitempty"`
	HighWatermarkBytes int64 `json:"high_watermark_bytes,omitempty"`
	// MultipartHeader, Pins and PinFailures: a roundrobin pool's multi-part pins, and the requests
	// that failed with 502 because their pinned server was not connected and writable.
	MultipartHeader string `json:"multipart_header,omitempty"`
	Pins            int    `json:"pins,omitempty"`
	PinFailures     uint64 `json:"pin_failures,omitempty"`
	// Discovery is the pool's service discovery (nil without a provider).
	Discovery *DiscoveryStatus `json:"discovery,omitempty"`
	// Servers are the pool's servers: primaries, then backups, then servers a reload removed that still
	// drain.
	Servers []ServerStatus `json:"servers"`
}

// DiscoveryStatus describes a pool's service discovery provider.
type DiscoveryStatus struct {
	Provider string `json:"provider"` // "zookeeper", "dns" or "file"
	// Servers is the list in force from the provider (null before its first answer: the seed serves).
	Servers []string `json:"servers"`
	// Changes and Errors count the lists applied and the failed reads of the registry; LastSuccess is
	// the time of the provider's last answer, LastError the last failed read since then ("" if none).
	Changes     uint64    `json:"changes"`
	Errors      uint64    `json:"errors"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// EmptyPending: the provider lists no server; it is applied at the end of empty_grace.
	EmptyPending bool `json:"empty_pending,omitempty"`
}

// ServerStatus describes one server of a pool.
type ServerStatus struct {
	Addr string `json:"addr"` // host:port, as configured or discovered
	// Name is the display name ([pools.NAME.names]; the address by default).
	Name string `json:"name"`
	// Tier is "primary" or "backup".
	Tier string `json:"tier"`
	// State is "up" (available), "down" (failing its checks; in a leader pool: not the leader),
	// "drain" or "maint" (put there by an operator) or "removed" (draining after a server set change).
	State string `json:"state"`
	// AdminState is the operator's state: "ready", "drain" or "maint" (admin actions).
	AdminState string `json:"admin_state"`
	// Available is the one predicate the policies read: passes its checks (in a leader pool: is the
	// leader), in the pool, not drained or in maintenance.
	Available bool `json:"available"`
	// Writable: below the pool's watermarks (always true without them). A roundrobin pool sends new
	// requests only to servers that are available and writable.
	Writable bool `json:"writable"`
	// Requests counts the requests sent to the server; Failures the attempts that failed by its fault.
	Requests uint64 `json:"requests"`
	Failures uint64 `json:"failures"`
	// InFlight is the requests sent whose response head has not arrived; InFlightBytes their body bytes.
	InFlight      int64 `json:"in_flight"`
	InFlightBytes int64 `json:"in_flight_bytes"`
	Pins          int   `json:"pins,omitempty"` // multi-part pins on the server (roundrobin pools)
	Conns         int   `json:"conns"`          // open upstream connections
	Tunnels       int64 `json:"tunnels"`        // open tunnels
	// Check is the server's health check state.
	Check *healthcheck.ServerStatus `json:"check,omitempty"`
}

// Status returns a snapshot of the running state.
func (lb *LB) Status() Status {
	g := lb.gen.Load()
	st := Status{ConfigFiles: g.cfg.Files}
	for _, name := range g.poolNames() {
		p := g.pools[name]
		ps := p.state.Load()
		out := PoolStatus{Name: name, Balance: p.balance, Waiting: p.waiting.Load(),
			Requests: p.requests.Load(), Retries: p.retries.Load(), InflightFailovers: p.inflightMoves.Load(),
			Errors: p.bad502.Load() + p.timeout.Load() + p.noServer.Load(), Serving: tierNames[p.tier.Load()],
			Failovers: p.failovers.Load(), Failbacks: p.failbacks.Load(), PinFailures: p.pinFailures.Load()}
		out.Discovery = lb.disc.status(name)
		checks := p.health.Status()
		for _, s := range ps.servers {
			ss := serverStatusOf(s)
			for i := range checks {
				if checks[i].Addr == s.Addr {
					ss.Check = &checks[i]
				}
			}
			out.Servers = append(out.Servers, ss)
		}
		ps.policy.describe(&out, ps)
		st.Pools = append(st.Pools, out)
	}
	st.Relays = g.relayStatuses() // relaystatus.go
	return st
}

// serverStatusOf is what /status says of s, without its check state.
func serverStatusOf(s *Server) ServerStatus {
	return ServerStatus{Addr: s.Addr, Name: s.Name(), Tier: tierOf(s), State: s.state(),
		AdminState: adminStates[s.admin.Load()], Available: s.Available(), Writable: true,
		Requests: s.requests.Load(), Failures: s.failures.Load(), InFlight: s.inflight.Load(),
		InFlightBytes: s.inflightBytes.Load(), Conns: s.client.Load().ConnsCount(), Tunnels: s.tunnels.Load()}
}

// serverStatus is what /status says of s of pool p, with its check state and what its policy adds.
func (lb *LB) serverStatus(p *Pool, s *Server) ServerStatus {
	for _, ps := range lb.Status().Pools {
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

func (g *generation) poolNames() []string {
	names := make([]string, 0, len(g.pools))
	for n := range g.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
