package harness

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"
)

// https-small-h2: https-small over HTTP/2, measured with h2load (Debian's nghttp2-client): 16 connections,
// 10 streams in flight on each, GETs with 64-byte answers. Every peer offers h2 on its TLS listener
// (fairlead http2 = true, HAProxy alpn h2,http/1.1, nginx listen … http2, Caddy alpn h2); its upstreams stay
// HTTP/1.1. h2load reports no percentiles: the mean time per request stands in for p99.

const (
	h2Conns   = 16
	h2Streams = 10
)

func httpsSmallH2Scenario() *scenario {
	return &scenario{
		name: "https-small-h2",
		summary: fmt.Sprintf("GET with 64-byte answers over HTTP/2 (h2load -c %d -m %d: %d connections, %d streams in flight on each): "+
			"req/s, mean time per request and proxy CPU; over TLS to the proxy's TLS listener with ALPN h2, upstreams plain HTTP/1.1",
			h2Conns, h2Streams, h2Conns, h2Streams),
		metrics: []metric{
			{key: "req_s", label: "req/s", better: "higher", chart: true},
			{key: "mean_ms", label: "mean ms", better: "lower", format: "%.2f"},
			{key: "errors", label: "errors", better: "lower"},
			{key: "proxy_cpu", label: "proxy CPU (cores)", format: "%.2f"},
			cpuPerOpMetric,
		},
		variants: samePeers,
		run:      runHTTPSmallH2,
	}
}

func runHTTPSmallH2(rc *runCtx) (*Result, error) {
	h2load := lookBin("h2load")
	if h2load == "" {
		return nil, fmt.Errorf("h2load not found: apt-get install -y nghttp2-client")
	}
	c, err := rc.startCluster(bytes.Repeat([]byte("x"), 64))
	if err != nil {
		return nil, err
	}
	in, _, err := rc.startTLSPeer(c, serving, func(s *Setup) { s.H2 = true })
	if err != nil {
		return nil, err
	}
	url := "https://" + in.TLSAddr() + "/Thingworx/Things/BenchThing/Properties"
	if rc.plan.Warmup > 0 {
		if _, err := runH2load(rc.ctx, h2load, rc.genCore(), url, rc.plan.Warmup); err != nil {
			return nil, fmt.Errorf("warm-up: %v", err)
		}
	}
	cpu0, t0 := in.CPU(), time.Now()
	r, err := runH2load(rc.ctx, h2load, rc.genCore(), url, rc.plan.HTTPDuration)
	if err != nil {
		return nil, err
	}
	el, cpu := time.Since(t0), in.CPU()-cpu0
	rc.note("h2load negotiated %s", r.proto)
	res := &Result{Metrics: map[string]float64{
		"req_s": r.reqPerSec, "mean_ms": r.meanMS, "errors": float64(r.failed),
		"proxy_cpu": cpu.Seconds() / el.Seconds(), "cpu_us": cpuPerOp(cpu, float64(r.succeeded)),
	}}
	if rc.costsWanted("https-small-h2") {
		load := func(d time.Duration) (float64, error) {
			r, err := runH2load(rc.ctx, h2load, rc.genCore(), url, d)
			return float64(r.succeeded), err
		}
		if err := measureCosts(rc, in, load, res.Metrics); err != nil {
			return nil, err
		}
	}
	return res, nil
}

type h2loadResult struct {
	reqPerSec, meanMS float64
	succeeded, failed int64
	proto             string
}

var (
	reH2Rate  = regexp.MustCompile(`finished in [0-9.]+m?s, ([0-9.]+) req/s`)
	reH2Reqs  = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	reH2Mean  = regexp.MustCompile(`(?m)^time for request:\s+\S+\s+\S+\s+([0-9.]+)(us|ms|s)\b`)
	reH2Proto = regexp.MustCompile(`Application protocol: (\S+)`)
)

// runH2load runs h2load against url for dur and parses its summary. A run that did not speak h2 fails.
func runH2load(ctx context.Context, h2load string, core int, url string, dur time.Duration) (*h2loadResult, error) {
	secs := max(1, int(math.Ceil(dur.Seconds())))
	out, err := runLoad(ctx, "h2load", pinned(core, []string{h2load, "-t1", "-c" + strconv.Itoa(h2Conns),
		"-m" + strconv.Itoa(h2Streams), "-D" + strconv.Itoa(secs), url}), dur)
	if err != nil {
		return nil, err
	}
	return parseH2load(out)
}

func parseH2load(out string) (*h2loadResult, error) {
	r := &h2loadResult{}
	m := reH2Rate.FindStringSubmatch(out)
	q := reH2Reqs.FindStringSubmatch(out)
	if m == nil || q == nil {
		return nil, fmt.Errorf("h2load output without its summary:\n%s", out)
	}
	r.reqPerSec, _ = strconv.ParseFloat(m[1], 64)
	r.succeeded, _ = strconv.ParseInt(q[1], 10, 64)
	for _, s := range q[2:] {
		n, _ := strconv.ParseInt(s, 10, 64)
		r.failed += n
	}
	if m := reH2Mean.FindStringSubmatch(out); m != nil {
		r.meanMS = toMS(m[1], m[2])
	}
	if m := reH2Proto.FindStringSubmatch(out); m != nil {
		r.proto = m[1]
	}
	if r.proto != "h2" {
		return nil, fmt.Errorf("h2load spoke %q, not h2:\n%s", r.proto, out)
	}
	return r, nil
}
