package lb

import (
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/relay"
	"github.com/fairlead/fairlead/lb/tunnel"
	"github.com/valyala/fasthttp"
)

// Metrics (GET /metrics) are written at scrape time from what the pools and servers of the current
// generation hold, so that a pool or server removed by a reload disappears from /metrics with it, and
// a server's display name is always the current one. Counters are atomics; the histograms are
// Prometheus histograms with fixed le buckets (histogram.go) kept on their pool. Recording allocates
// nothing on the request path: atomic adds.

// poolMetrics are what a pool records for /metrics beside its counters (Pool.m).
type poolMetrics struct {
	// duration observes each request routed to the pool, in seconds, from its arrival at the handler
	// until the answer's head is ready to be relayed (the body streams after it), whatever the answer:
	// fairlead's own 502, 503 or 504 included. For an upgrade that becomes a tunnel it ends when the
	// server's 101 has arrived.
	duration histogram
	// queueWait observes each wait for a server (Pool.await), in seconds, whether the request got one
	// or not; a request turned away at once by a full queue did not wait.
	queueWait histogram
	// bytesIn and bytesOut count body bytes: see requestBodyBytes and responseBodyBytes.
	bytesIn, bytesOut atomic.Uint64
	// tunnelBytes counts the bytes relayed by the pool's tunnels, to the server and to the client, when
	// each tunnel closes.
	tunnelBytes [2]atomic.Uint64

	checksMu sync.Mutex
	checks   map[string]*histogram // probe latency in seconds, by server address

	// unauthorized counts the requests routed to the pool that single-point auth ([routes.auth],
	// routeauth.go) answered 401, by route index. Only refused requests take the lock.
	unauthorizedMu sync.Mutex
	unauthorized   map[int]uint64
}

// observe accounts for one request routed to the pool.
func (m *poolMetrics) observe(took time.Duration, in, out int64) {
	m.duration.Update(took.Seconds())
	if in > 0 {
		m.bytesIn.Add(uint64(in))
	}
	if out > 0 {
		m.bytesOut.Add(uint64(out))
	}
}

// observeCheck records the latency of one probe of the server at addr, if it is still in the pool.
// It runs in the event stream's subscriber (countEvent): quick, one short lock.
func (p *Pool) observeCheck(addr string, latency time.Duration) {
	if !slices.ContainsFunc(p.view.Load().servers, func(s *Server) bool { return s.Addr == addr }) {
		return // a probe that was in flight when its server left the pool
	}
	m := &p.m
	m.checksMu.Lock()
	h := m.checks[addr]
	if h == nil {
		if m.checks == nil {
			m.checks = map[string]*histogram{}
		}
		h = &histogram{}
		m.checks[addr] = h
	}
	m.checksMu.Unlock()
	h.Update(latency.Seconds())
}

// forgetCheck drops the probe latencies of a server that left the pool.
func (p *Pool) forgetCheck(addr string) {
	p.m.checksMu.Lock()
	delete(p.m.checks, addr)
	p.m.checksMu.Unlock()
}

func (p *Pool) checkHistogram(addr string) *histogram {
	p.m.checksMu.Lock()
	defer p.m.checksMu.Unlock()
	return p.m.checks[addr]
}

// requestBodyBytes is what fairlead read of a request's body from the client: a body held in memory
// (with a Content-Length up to retry_buffer) in full, a streamed one (larger, or chunked) as far as it
// was read, which is all of it once forwarded. The caller has made the body replayable.
func requestBodyBytes(req *fasthttp.Request, replay replayable) int64 {
	if replay.stream != nil {
		return replay.stream.n
	}
	if req.IsBodyStream() {
		return 0
	}
	return int64(len(req.Body()))
}

// responseBodyBytes is the body of the answer as it is known when its head is relayed: the length of a
// body held in memory (fairlead's own answers, a refused upgrade), the Content-Length of a streamed one,
// 0 for an answer without a body (HEAD, 1xx, 204, 304, a tunnel), and -1 for a streamed body without a
// length (chunked, or read until the server closes), whose size fairlead does not learn. A client that
// disconnects during the body is not noticed either.
func responseBodyBytes(ctx *fasthttp.RequestCtx) int64 {
	resp := &ctx.Response
	if code := resp.StatusCode(); ctx.Hijacked() || ctx.IsHead() || code < 200 || code == 204 || code == 304 {
		return 0
	}
	if resp.IsBodyStream() {
		return max(int64(resp.Header.ContentLength()), -1)
	}
	return int64(len(resp.Body()))
}

// WriteMetrics writes the metrics of the current generation (admin.Backend: GET /metrics).
func (lb *LB) WriteMetrics(w io.Writer) {
	g := lb.px.gen.Load()
	metrics.WriteGaugeUint64(w, fmt.Sprintf(`fairlead_build_info{version=%q,goversion=%q}`, lb.version, runtime.Version()), 1)
	for _, code := range frontend.RefusedCodes {
		metrics.WriteCounterUint64(w, `fairlead_bad_requests_total{code="`+strconv.Itoa(code)+`"}`, lb.px.front.RefusedTotal(code))
	}
	for k := range frontend.NumConnKinds {
		n := lb.px.front.Errors.Count(k)
		if k == frontend.ConnLimit && lb.frontServer != nil {
			n += uint64(lb.frontServer.GetRejectedConnectionsCount()) // fasthttp counts them
		}
		metrics.WriteCounterUint64(w, `fairlead_frontend_connection_errors_total{kind="`+k.String()+`"}`, n)
	}
	metrics.WriteCounterUint64(w, `fairlead_frontend_requests_total{protocol="http/1.1"}`, lb.px.http1Requests.Load())
	srcs := lb.px.front.Sources()
	metrics.WriteCounterUint64(w, `fairlead_frontend_limited_total{reason="rate_per_source"}`, srcs.RateLimited.Load())
	metrics.WriteCounterUint64(w, `fairlead_frontend_limited_total{reason="max_conns_per_source"}`, srcs.ConnLimited.Load())
	if lb.h2 != nil {
		h2 := lb.h2.Counts()
		metrics.WriteCounterUint64(w, `fairlead_frontend_requests_total{protocol="h2"}`, h2.Streams)
		metrics.WriteCounterUint64(w, "fairlead_http2_connections_total", h2.Conns)
		for _, kind := range slices.Sorted(maps.Keys(h2.Refused)) {
			metrics.WriteCounterUint64(w, `fairlead_http2_refused_total{kind="`+kind+`"}`, h2.Refused[kind])
		}
	}
	if ft := g.cfg.Frontend.TLS; ft != nil {
		metrics.WriteCounterUint64(w, "fairlead_tls_handshake_failures_total", lb.px.front.Errors.Count(frontend.ConnTLS))
		for i, c := range ft.Certs {
			metrics.WriteGaugeUint64(w, fmt.Sprintf(`fairlead_tls_certificate_not_after_seconds{file=%q}`, ft.Files[i]), uint64(c.Leaf.NotAfter.Unix()))
		}
	}
	if g.acme != nil {
		g.acme.WriteMetrics(w) // fairlead_acme_*, and its certificates' fairlead_tls_certificate_not_after_seconds
	}
	metrics.WriteCounterUint64(w, "fairlead_admin_unauthorized_total", lb.adminHandler.Unauthorized())
	metrics.WriteCounterUint64(w, "fairlead_config_reloads_total", lb.reloads.Load())
	metrics.WriteCounterUint64(w, "fairlead_config_reload_failures_total", lb.reloadFailures.Load())
	metrics.WriteCounterUint64(w, `fairlead_upgrades_total{result="ok"}`, lb.upgrades[0].Load())
	metrics.WriteCounterUint64(w, `fairlead_upgrades_total{result="failed"}`, lb.upgrades[1].Load())
	metrics.WriteGaugeUint64(w, "fairlead_config_last_reload_successful", boolGauge(lb.lastReloadOK.Load()))
	for _, k := range event.Kinds() {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_events_total{kind=%q}`, k), lb.events[k].Load())
	}
	ts := lb.px.tunnels.stats()
	metrics.WriteCounterUint64(w, "fairlead_tunnels_opened_total", ts.Opened)
	metrics.WriteCounterUint64(w, "fairlead_tunnels_closed_total", ts.Closed)
	metrics.WriteCounterUint64(w, `fairlead_tunnel_bytes_total{direction="to_server"}`, ts.BytesToServer)
	metrics.WriteCounterUint64(w, `fairlead_tunnel_bytes_total{direction="to_client"}`, ts.BytesToClient)
	for r, n := range ts.ByReason {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_tunnels_closed_by_reason_total{reason=%q}`, tunnel.Reason(r)), n)
	}
	for _, name := range g.poolNames() {
		p := g.pools[name]
		st := p.view.Load()
		l := fmt.Sprintf(`pool=%q`, name)
		metrics.WriteCounterUint64(w, "fairlead_pool_requests_total{"+l+"}", p.requests.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_retries_total{"+l+"}", p.retries.Load())
		if p.leader {
			metrics.WriteCounterUint64(w, "fairlead_pool_inflight_failovers_total{"+l+"}", p.inflightMoves.Load())
		}
		// Answers fairlead gave itself, by status: 502, 504, and unavailable_status (503 by default) for
		// requests no server could take in time.
		errs := map[int]uint64{502: p.bad502.Load(), 504: p.timeout.Load()}
		errs[st.cfg.UnavailableStatus] += p.noServer.Load()
		for _, code := range slices.Sorted(maps.Keys(errs)) {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_pool_errors_total{%s,code="%d"}`, l, code), errs[code])
		}
		metrics.WriteCounterUint64(w, "fairlead_pool_unavailable_total{"+l+"}", p.noServer.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_queue_full_total{"+l+"}", p.queueFull.Load())
		metrics.WriteGaugeUint64(w, "fairlead_pool_waiting{"+l+"}", uint64(max(p.waiting.Load(), 0)))
		metrics.WriteCounterUint64(w, "fairlead_pool_tunnels_opened_total{"+l+"}", p.tunnelsOpened.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_bytes_total{"+l+`,direction="in"}`, p.m.bytesIn.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_bytes_total{"+l+`,direction="out"}`, p.m.bytesOut.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_tunnel_bytes_total{"+l+`,direction="to_server"}`, p.m.tunnelBytes[0].Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_tunnel_bytes_total{"+l+`,direction="to_client"}`, p.m.tunnelBytes[1].Load())
		metrics.WriteGaugeUint64(w, "fairlead_pool_serving_backups{"+l+"}", boolGauge(p.tier.Load() == backups))
		metrics.WriteCounterUint64(w, "fairlead_pool_failovers_total{"+l+"}", p.failovers.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_failbacks_total{"+l+"}", p.failbacks.Load())
		metrics.WriteCounterUint64(w, "fairlead_pool_pin_failures_total{"+l+"}", p.pinFailures.Load())
		lb.disc.writeMetrics(w, name) // discovery.go
		writePolicyMetrics(w, l, st, st.policy.report(st))
		p.m.duration.write(w, "fairlead_request_duration_seconds", l)
		p.m.queueWait.write(w, "fairlead_queue_wait_seconds", l)
		states := p.serverStates(st) // admin.go: the vocabulary of /api/status and the page
		metrics.WriteGaugeUint64(w, "fairlead_pool_redundancy_lost{"+l+"}", boolGauge(redundancyLost(states)))
		for i, s := range st.servers {
			sl := l + "," + serverLabels(s)
			for _, state := range admin.ServerStates {
				metrics.WriteGaugeUint64(w, "fairlead_server_state{"+sl+`,state="`+state+`"}`, boolGauge(states[i] == state))
			}
			metrics.WriteCounterUint64(w, "fairlead_server_requests_total{"+sl+"}", s.requests.Load())
			metrics.WriteCounterUint64(w, "fairlead_server_failures_total{"+sl+"}", s.failures.Load())
			metrics.WriteGaugeUint64(w, "fairlead_server_in_flight{"+sl+"}", uint64(max(s.inflight.Load(), 0)))
			metrics.WriteGaugeUint64(w, "fairlead_server_in_flight_bytes{"+sl+"}", uint64(max(s.inflightBytes.Load(), 0)))
			metrics.WriteGaugeUint64(w, "fairlead_server_backup{"+sl+"}", boolGauge(s.Backup()))
			metrics.WriteGaugeUint64(w, "fairlead_server_upstream_conns{"+sl+"}", uint64(s.client.Load().ConnsCount()))
			metrics.WriteGaugeUint64(w, "fairlead_server_tunnels{"+sl+"}", uint64(max(s.tunnels.Load(), 0)))
			metrics.WriteCounterUint64(w, "fairlead_server_new_tunnels_delayed_total{"+sl+"}", s.tunnelsDelayed.Load())
			metrics.WriteCounterUint64(w, "fairlead_server_new_tunnels_limited_total{"+sl+"}", s.tunnelsLimited.Load())
			metrics.WriteGaugeFloat64(w, "fairlead_server_slow_start_weight{"+sl+"}", s.weight(time.Now().UnixNano(), st.cfg.SlowStart.D))
			metrics.WriteGaugeUint64(w, "fairlead_server_up{"+sl+"}", boolGauge(s.Available()))
			if h := p.checkHistogram(s.Addr); h != nil {
				h.write(w, "fairlead_check_duration_seconds", sl)
			}
		}
	}
	// Single-point auth: one series per route with [routes.auth], labelled with the route's index.
	for i, r := range g.routes {
		if g.cfg.RouteAuthOf(i) != nil {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_route_unauthorized_total{route="%d",pool=%q}`, i, r.pool.name), r.pool.m.unauthorizedCount(i))
		}
	}
	relay.WriteMetrics(w, g.relayStatuses())
	metrics.WriteProcessMetrics(w)
}

// writePolicyMetrics writes what a policy reports of itself and its servers (r, of view st).
func writePolicyMetrics(w io.Writer, l string, st *poolView, r policyReport) {
	switch {
	case r.leader != nil:
		metrics.WriteCounterUint64(w, "fairlead_leader_changes_total{"+l+"}", r.leader.Changes())
		metrics.WriteCounterUint64(w, "fairlead_split_brain_total{"+l+"}", r.leader.SplitBrains())
	case r.sticky != nil:
		metrics.WriteCounterUint64(w, "fairlead_pool_sticky_evictions_total{"+l+"}", r.sticky.Evictions())
		metrics.WriteGaugeUint64(w, "fairlead_pool_sticky_entries{"+l+"}", uint64(r.sticky.Len()))
	case r.roundRobin:
		metrics.WriteGaugeUint64(w, "fairlead_pool_high_watermark{"+l+"}", uint64(r.hw))
		metrics.WriteGaugeUint64(w, "fairlead_pool_high_watermark_bytes{"+l+"}", uint64(r.hwb))
		var counts map[string]int
		if r.pins != nil {
			metrics.WriteGaugeUint64(w, "fairlead_pool_pins{"+l+"}", uint64(r.pins.Len()))
			counts = r.pins.CountByServer()
		}
		for i, s := range st.servers {
			sl := l + "," + serverLabels(s)
			metrics.WriteGaugeUint64(w, "fairlead_server_writable{"+sl+"}", boolGauge(r.writable[i]))
			if counts != nil {
				metrics.WriteGaugeUint64(w, "fairlead_server_pins{"+sl+"}", uint64(counts[s.Addr]))
			}
		}
	}
}

func boolGauge(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// redundancyLost reports whether a pool of two servers or more has fewer than two that can serve (up,
// or a healthy standby): the next failure is an outage (or one already is).
func redundancyLost(states []string) bool {
	n := 0
	for _, state := range states {
		if state == admin.StateUp || state == admin.StateStandby {
			n++
		}
	}
	return len(states) >= 2 && n < 2
}
