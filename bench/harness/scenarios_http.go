package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Plain HTTP scenarios: http-small (64-byte answers), http-16k (16 KiB answers), upload-1m (1 MiB POST
// bodies), http-rr (64-byte answers balanced round robin over both platform servers, with a cap on the
// requests in flight per server), measured with wrk (`wrk -t1 --latency`) or, where wrk is missing, the
// Go closed-loop generator.

func httpMetrics(rate string) []metric {
	return []metric{
		{key: "req_s", label: rate, better: "higher", chart: true},
		{key: "p99_ms", label: "p99 ms", better: "lower", chart: true, format: "%.2f"},
		{key: "errors", label: "errors", better: "lower"},
		{key: "proxy_cpu", label: "proxy CPU (cores)", format: "%.2f"},
		cpuPerOpMetric,
	}
}

// cpuPerOpMetric is the proxy's CPU time (user + system, all its processes) per request or
// round trip of the measurement. Unlike the rate, it does not depend on whether the proxy or
// the load side (generator and simulated servers, sharing the other core) is the bottleneck:
// when every proxy runs below a full core, the rates are close and this tells them apart.
var cpuPerOpMetric = metric{key: "cpu_us", ratio: true, label: "proxy CPU µs per op", better: "lower", format: "%.1f"}

// ceilingMetric is the rate the same load reaches against the simulated server directly, with no
// proxy in between, measured in the same run right after the proxy's measurement: the most any
// proxy could show on this machine, where the load side (generator and simulated servers) has
// one core of its own. A target above ceiling / HAProxy's rate cannot be met by any proxy.
var ceilingMetric = metric{key: "ceiling", label: "no-proxy ceiling"}

// cpuPerOp is cpuPerOpMetric's value: cpu over ops operations, in microseconds (0 without ops).
func cpuPerOp(cpu time.Duration, ops float64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / ops
}

func httpSmallScenario() *scenario {
	return &scenario{
		name:     "http-small",
		summary:  "GET with 64-byte answers over 64 keep-alive connections (wrk): req/s and p99",
		metrics:  httpMetrics("req/s"),
		variants: samePeers,
		run: func(rc *runCtx) (*Result, error) {
			return runHTTP(rc, httpLoad{size: 64, conns: rc.plan.HTTPConns, costs: rc.costsWanted("http-small")})
		},
	}
}

func http16kScenario() *scenario {
	return &scenario{
		name: "http-16k",
		summary: "GET with 16 KiB answers over 64 keep-alive connections (wrk): req/s and p99; the no-proxy ceiling is " +
			"the same load against the simulated leader directly",
		metrics:  append(httpMetrics("req/s"), ceilingMetric),
		variants: samePeers,
		run: func(rc *runCtx) (*Result, error) {
			return runHTTP(rc, httpLoad{size: 16 << 10, conns: rc.plan.HTTPConns, ceiling: true})
		},
	}
}

func uploadScenario() *scenario {
	ms := httpMetrics("uploads/s")
	ms = append(ms[:1], append([]metric{{key: "mib_s", ratio: true, label: "MiB/s", better: "higher", format: "%.0f"}}, ms[1:]...)...)
	return &scenario{
		name:     "upload-1m",
		summary:  "POST of 1 MiB bodies over 16 keep-alive connections (wrk with a Lua script): uploads/s, MiB/s and p99",
		metrics:  ms,
		variants: samePeers,
		run: func(rc *runCtx) (*Result, error) {
			return runHTTP(rc, httpLoad{size: 64, conns: rc.plan.UploadConns, upload: rc.plan.UploadSize})
		},
	}
}

// http-rr: the platform route balanced round robin over both simulated platform servers (both answer
// ordinary requests; platform1 is Leader, platform2 Backup), each checked with GET /Thingworx/ready and
// capped at Plan.RRWatermark requests in flight. Besides req/s and p99 it reports how the requests were
// split between the servers (the simulator's per-server request counts, reset after the warm-up; they
// include the few health checks of the measurement): a fair round robin gives 50/50.
func httpRRScenario() *scenario {
	ms := httpMetrics("req/s")
	ms = append(ms,
		metric{key: "split", label: "split platform1/2 %", format: "%.1f",
			show: func(v float64) string { return fmt.Sprintf("%.1f/%.1f", v, 100-v) }},
		metric{key: "watermark", label: "cap per server (0 = none)"},
	)
	return &scenario{
		name: "http-rr",
		summary: "GET with 64-byte answers over 64 keep-alive connections (wrk), balanced round robin over both platform " +
			"servers, each health-checked (GET /Thingworx/ready) and capped at 32 requests in flight (fairlead high_watermark, " +
			"HAProxy server maxconn, nginx max_conns, Caddy unhealthy_request_count): req/s, p99, and the split of the requests " +
			"between the two servers (50/50 is fair)",
		metrics:  ms,
		variants: samePeers,
		run: func(rc *runCtx) (*Result, error) {
			return runHTTP(rc, httpLoad{size: 64, conns: rc.plan.HTTPConns, roundRobin: true})
		},
	}
}

// httpLoad is one plain HTTP measurement.
type httpLoad struct {
	// size is the answer size; conns the client keep-alive connections.
	size, conns int
	// upload, if non-zero, makes the requests POSTs of upload-byte bodies (GETs otherwise).
	upload int
	// roundRobin balances the platform route round robin over both platform servers, capped at
	// Plan.RRWatermark requests in flight per server, and reports the split (http-rr).
	roundRobin bool
	// tls sends the requests over HTTPS to the proxy's TLS listener, with the run's certificate
	// (https-small).
	tls bool
	// costs adds the extra phases measuring the costs per request (-costs, costs.go).
	costs bool
	// ceiling also measures the same load against the leader directly (ceilingMetric).
	ceiling bool
}

// runHTTP measures l: GETs of answers of l.size bytes, or POSTs of l.upload-byte bodies.
func runHTTP(rc *runCtx, l httpLoad) (*Result, error) {
	size, conns, upload := l.size, l.conns, l.upload
	c, err := rc.startCluster(bytes.Repeat([]byte("x"), size))
	if err != nil {
		return nil, err
	}
	ready, mod, watermark := serving, func(*Setup) {}, 0
	if l.roundRobin {
		watermark = rc.plan.RRWatermark
		if rc.peer.Base == "nginx" && !nginxHasMaxConns(rc.peer.Version) {
			watermark = 0
			rc.note("no cap per server: %s has no max_conns (nginx OSS ≥ 1.11.5)", rc.peer.Version)
		}
		// Both servers must have passed their first check before the split means anything.
		ready = servingAll
		mod = func(s *Setup) { s.RoundRobin, s.Watermark = true, watermark }
	}
	var in *Instance
	addr, scheme, tlsConf := "", "http", (*tls.Config)(nil)
	if l.tls {
		in, tlsConf, err = rc.startTLSPeer(c, ready, mod)
		if err != nil {
			return nil, err
		}
		addr, scheme = in.TLSAddr(), "https"
	} else {
		in, err = rc.startPeer(c, ready, mod)
		if err != nil {
			return nil, err
		}
		addr = in.Addr()
	}
	const path = "/Thingworx/Things/BenchThing/Properties"
	wrk := ""
	if rc.plan.UseWrk {
		wrk = lookBin("wrk")
	}
	if l.tls && wrk != "" {
		if st := opensslState(rc.ctx, addr); st != "" {
			rc.note("TLS negotiated with wrk's OpenSSL (openssl s_client): %s", st)
		}
	}
	var body []byte
	method := "GET"
	if upload > 0 {
		body = bytes.Repeat([]byte("u"), upload)
		method = "POST"
	}

	raw := testkit.RawRequest(method, addr, path, body)
	// The warm-up uses the Go generator (wrk cannot run less than a second).
	if rc.plan.Warmup > 0 {
		if st := testkit.ClosedLoop(rc.ctx, addr, tlsConf, conns, rc.plan.Warmup, raw); st.Requests == 0 {
			return nil, fmt.Errorf("warm-up: no request answered with 2xx (%d errors, %d non-2xx)", st.Errors, st.Non2xx)
		}
	}
	// The platform servers count what the measurement sends them.
	for _, p := range c.Platforms {
		p.ResetCounters()
	}
	cpu0, t0 := in.CPU(), time.Now()
	var res *Result
	var ops float64 // requests answered during the measurement
	if wrk != "" {
		w, err := runWrk(rc.ctx, wrk, rc.genCore(), rc.dir, scheme+"://"+addr+path, conns, rc.plan.HTTPDuration, upload)
		if err != nil {
			return nil, err
		}
		res = &Result{Metrics: map[string]float64{
			"req_s": w.reqPerSec, "p99_ms": w.p99ms, "errors": float64(w.errors),
		}}
		ops = w.requests
	} else {
		st := testkit.ClosedLoop(rc.ctx, addr, tlsConf, conns, rc.plan.HTTPDuration, raw)
		res = &Result{Metrics: map[string]float64{
			"req_s":  float64(st.Requests) / st.Elapsed.Seconds(),
			"p99_ms": ms(st.Hist.Quantile(0.99)),
			"errors": float64(st.Errors + st.Non2xx),
		}}
		ops = float64(st.Requests)
	}
	el := time.Since(t0)
	cpu := in.CPU() - cpu0
	res.Metrics["proxy_cpu"] = cpu.Seconds() / el.Seconds()
	res.Metrics["cpu_us"] = cpuPerOp(cpu, ops)
	if upload > 0 {
		res.Metrics["mib_s"] = res.Metrics["req_s"] * float64(upload) / (1 << 20)
	}
	if wrk == "" {
		rc.note("Go load generator (wrk not used)")
	}
	if upload > 0 {
		var got int64
		for _, p := range c.Platforms {
			got += p.Requests()
		}
		if got == 0 {
			return nil, fmt.Errorf("no upload reached the platform servers")
		}
	}
	if l.costs {
		load := func(dur time.Duration) (float64, error) {
			if wrk != "" {
				w, err := runWrk(rc.ctx, wrk, rc.genCore(), rc.dir, scheme+"://"+addr+path, conns, dur, upload)
				if err != nil {
					return 0, err
				}
				return w.requests, nil
			}
			st := testkit.ClosedLoop(rc.ctx, addr, tlsConf, conns, dur, raw)
			return float64(st.Requests), nil
		}
		if err := measureCosts(rc, in, load, res.Metrics); err != nil {
			rc.note("%v", err)
		}
	}
	if l.ceiling && wrk != "" && !l.tls && upload == 0 {
		w, err := runWrk(rc.ctx, wrk, rc.genCore(), rc.dir, "http://"+c.Leader().Addr+path, conns, rc.plan.HTTPDuration, 0)
		if err != nil {
			return nil, fmt.Errorf("no-proxy ceiling: %v", err)
		}
		res.Metrics["ceiling"] = w.reqPerSec
	}
	if l.roundRobin {
		var first, total int64
		for i, p := range c.Platforms {
			n := p.Requests()
			res.Metrics[p.Name+"_requests"] = float64(n)
			if i == 0 {
				first = n
			}
			total += n
		}
		if total == 0 {
			return nil, fmt.Errorf("no request reached the platform servers")
		}
		// split is platform1's share of the requests, in percent.
		res.Metrics["split"] = 100 * float64(first) / float64(total)
		res.Metrics["watermark"] = float64(watermark)
	}
	return res, nil
}

type wrkResult struct {
	reqPerSec float64
	p99ms     float64
	errors    int64
	// requests is the total wrk completed ("N requests in …").
	requests float64
}

// runWrk runs `wrk -t1 -cN -dS --latency` on url (http:// or https://) pinned to core (the generators'
// core), with a Lua script for uploads of upload bytes.
func runWrk(ctx context.Context, wrk string, core int, dir, url string, conns int, dur time.Duration, upload int) (*wrkResult, error) {
	secs := int(math.Ceil(dur.Seconds()))
	args := []string{wrk, "-t1", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", secs), "--latency", "--timeout", "10s"}
	if upload > 0 {
		script := filepath.Join(dir, "upload.lua")
		lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = string.rep(\"u\", %d)\nwrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n", upload)
		if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "-s", script)
	}
	args = append(args, url)
	out, err := runLoad(ctx, "wrk", pinned(core, args), dur)
	if err != nil {
		return nil, err
	}
	return parseWrk(out)
}

// toMS converts a load generator's duration, a number and its unit (us, ms, s, m), to milliseconds.
func toMS(num, unit string) float64 {
	v, _ := strconv.ParseFloat(num, 64)
	switch unit {
	case "us":
		v /= 1000
	case "s":
		v *= 1000
	case "m":
		v *= 60000
	}
	return v
}

// runLoad runs a load generator (argv, pinned already) for a measurement of dur, and returns its output.
func runLoad(ctx context.Context, name string, argv []string, dur time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", name, err, out)
	}
	return string(out), nil
}

var (
	reWrkRate   = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reWrkTotal  = regexp.MustCompile(`(\d+) requests in `)
	reWrkP99    = regexp.MustCompile(`(?m)^\s+99%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	reWrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	reWrkSocket = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// parseWrk reads req/s, the 99th percentile and the errors from wrk's --latency output.
func parseWrk(out string) (*wrkResult, error) {
	m := reWrkRate.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("wrk output without Requests/sec:\n%s", out)
	}
	r := &wrkResult{}
	r.reqPerSec, _ = strconv.ParseFloat(m[1], 64)
	if m := reWrkTotal.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reWrkP99.FindStringSubmatch(out); m != nil {
		r.p99ms = toMS(m[1], m[2])
	}
	if m := reWrkNon2xx.FindStringSubmatch(out); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		r.errors += n
	}
	if m := reWrkSocket.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			r.errors += n
		}
	}
	return r, nil
}
