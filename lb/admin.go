package lb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/healthcheck"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
)

// Admin endpoints (on [admin] listen):
//
//	GET /healthz   200 "ok" while the process serves
//	GET /status    JSON: every pool, its servers, the leader and the probe state
//	GET /metrics   Prometheus text format
//	GET /debug/pprof/...  Go profiles (CPU, heap, goroutines)
func (lb *LB) handleAdmin(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/healthz":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.WriteString("ok\n") //nolint:errcheck
	case "/status":
		ctx.SetContentType("application/json")
		enc := json.NewEncoder(ctx)
		enc.SetIndent("", "  ")
		enc.Encode(lb.Status()) //nolint:errcheck
	case "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4")
		lb.writeMetrics(ctx)
	default:
		if bytes.HasPrefix(ctx.Path(), []byte("/debug/pprof/")) {
			// Go's profiler, for finding where time and memory go under real traffic.
			pprofhandler.PprofHandler(ctx)
			return
		}
		ctx.Error("404 Not Found: try /status, /metrics or /healthz\n", fasthttp.StatusNotFound)
	}
}

// Status is the JSON document of GET /status.
type Status struct {
	ConfigFiles []string     `json:"config_files"`
	Pools       []PoolStatus `json:"pools"`
}

// PoolStatus describes one pool.
type PoolStatus struct {
	Name     string `json:"name"`
	Balance  string `json:"balance"`
	Leader   string `json:"leader,omitempty"`
	Waiting  int64  `json:"waiting"`
	Requests uint64 `json:"requests"`
	Retries  uint64 `json:"retries"`
	// StickyEntries is the number of keys in the sticky table (balance = "sticky").
	StickyEntries int            `json:"sticky_entries,omitempty"`
	Servers       []ServerStatus `json:"servers"`
}

// ServerStatus describes one server of a pool.
type ServerStatus struct {
	Addr     string                    `json:"addr"`
	Requests uint64                    `json:"requests"`
	Failures uint64                    `json:"failures"`
	Conns    int                       `json:"conns"`
	Tunnels  int64                     `json:"tunnels"`
	Check    *healthcheck.ServerStatus `json:"check,omitempty"`
}

// Status returns a snapshot of the running state.
func (lb *LB) Status() Status {
	g := lb.gen.Load()
	st := Status{ConfigFiles: g.cfg.Files}
	for _, name := range g.poolNames() {
		p := g.pools[name]
		ps := PoolStatus{Name: name, Balance: p.cfg.Balance, Waiting: p.waiting.Load(),
			Requests: p.requests.Load(), Retries: p.retries.Load()}
		var checks []healthcheck.ServerStatus
		if p.leader != nil {
			checks = p.leader.Status()
			if i := p.leader.Current(); i >= 0 {
				ps.Leader = p.servers[i].Addr
			}
		} else {
			checks = p.checker.Status()
		}
		if p.table != nil {
			ps.StickyEntries = p.table.Len()
		}
		for i, s := range p.servers {
			ss := ServerStatus{Addr: s.Addr, Requests: s.requests.Load(), Failures: s.failures.Load(), Conns: s.client.ConnsCount(), Tunnels: s.tunnels.Load()}
			if checks != nil {
				ss.Check = &checks[i]
			}
			ps.Servers = append(ps.Servers, ss)
		}
		st.Pools = append(st.Pools, ps)
	}
	return st
}

func (g *generation) poolNames() []string {
	names := make([]string, 0, len(g.pools))
	for n := range g.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// writeMetrics writes the counters of the current generation, read from their atomics at scrape time, so
// a pool or server removed by a reload disappears from /metrics with it.
func (lb *LB) writeMetrics(w io.Writer) {
	g := lb.gen.Load()
	metrics.WriteCounterUint64(w, "fairlead_bad_requests_total", lb.badRequests.Load())
	metrics.WriteCounterUint64(w, "fairlead_config_reloads_total", lb.reloads.Load())
	metrics.WriteCounterUint64(w, "fairlead_config_reload_failures_total", lb.reloadFailures.Load())
	ok := uint64(0)
	if lb.lastReloadOK.Load() {
		ok = 1
	}
	metrics.WriteGaugeUint64(w, "fairlead_config_last_reload_successful", ok)
	for _, name := range g.poolNames() {
		p := g.pools[name]
		l := fmt.Sprintf(`pool=%q`, name)
		metrics.WriteCounterUint64(w, "fairlead_pool_requests_total{"+l+"}", p.requests.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_retries_total{"+l+"}", p.retries.Load())
		metrics.WriteCounterUint64(w, `fairlead_pool_errors_total{`+l+`,code="502"}`, p.bad502.Load())
		metrics.WriteCounterUint64(w, `fairlead_pool_errors_total{`+l+`,code="503"}`, p.noServer.Load())
		metrics.WriteCounterUint64(w, `fairlead_pool_errors_total{`+l+`,code="504"}`, p.timeout.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_queue_full_total{"+l+"}", p.queueFull.Load())
		metrics.WriteGaugeUint64(w, "fairlead_pool_waiting{"+l+"}", uint64(max(p.waiting.Load(), 0)))
		if p.leader != nil {
			metrics.WriteCounterUint64(w, "fairlead_leader_changes_total{"+l+"}", p.leader.Changes())
			metrics.WriteCounterUint64(w, "fairlead_split_brain_total{"+l+"}", p.leader.SplitBrains())
		}
		cur := -1
		if p.leader != nil {
			cur = p.leader.Current()
		}
		metrics.WriteCounterUint64(w, "fairlead_pool_tunnels_opened_total{"+l+"}", p.tunnelsOpened.Load())
		if p.table != nil {
			metrics.WriteGaugeUint64(w, "fairlead_pool_sticky_entries{"+l+"}", uint64(p.table.Len()))
		}
		for i, s := range p.servers {
			sl := fmt.Sprintf(`%s,server=%q`, l, s.Addr)
			metrics.WriteCounterUint64(w, "fairlead_server_requests_total{"+sl+"}", s.requests.Load())
			metrics.WriteCounterUint64(w, "fairlead_server_failures_total{"+sl+"}", s.failures.Load())
			metrics.WriteGaugeUint64(w, "fairlead_server_upstream_conns{"+sl+"}", uint64(s.client.ConnsCount()))
			metrics.WriteGaugeUint64(w, "fairlead_server_tunnels{"+sl+"}", uint64(max(s.tunnels.Load(), 0)))
			if p.checker != nil {
				v := uint64(0)
				if p.Up(i) {
					v = 1
				}
				metrics.WriteGaugeUint64(w, "fairlead_server_up{"+sl+"}", v)
			}
			if p.leader != nil {
				v := uint64(0)
				if i == cur {
					v = 1
				}
				metrics.WriteGaugeUint64(w, "fairlead_server_leader{"+sl+"}", v)
			}
		}
	}
	metrics.WriteProcessMetrics(w)
}
