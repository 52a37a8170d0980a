package lb

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// handleDo returns a function that runs GET /Thingworx/Things/Asset1/Properties with the header pairs
// (name, value, ...) through l's handler itself (no client socket), so that allocations of the proxy
// path can be counted, and fails unless it is answered 200. The request is read from its bytes, as the
// front end reads it: the head sent upstream is built from the raw header lines (headers.go).
func handleDo(tb testing.TB, l *LB, hdr ...string) func() {
	raw := "GET /Thingworx/Things/Asset1/Properties HTTP/1.1\r\nHost: thingworx.example.com\r\n"
	for i := 0; i+1 < len(hdr); i += 2 {
		raw += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	rawBytes := []byte(raw + "\r\n")
	var (
		ctx    fasthttp.RequestCtx
		req    fasthttp.Request
		src    bytes.Reader
		remote = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4567}
	)
	br := bufio.NewReader(&src)
	return func() {
		req.Reset()
		src.Reset(rawBytes)
		br.Reset(&src)
		if err := req.Header.Read(br); err != nil {
			tb.Fatal(err)
		}
		ctx.Init(&req, remote, nil)
		l.px.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			tb.Fatalf("status %d", ctx.Response.StatusCode())
		}
		ctx.Response.Body() // drain the streamed body so the upstream connection is reused
		ctx.Response.Reset()
	}
}

// newHandlerBench starts a cluster and fairlead and returns handleDo of it, the request from a proxy
// (X-Forwarded-For) on a keep-alive connection. extraPool overrides keys of the platform pool (another
// balance); header, if not empty, is set on every request.
func newHandlerBench(tb testing.TB, extraPool string, header ...string) func() {
	l, _ := startLB(tb, platformConfig(startCluster(tb, 2, 0), extraPool, ""))
	return handleDo(tb, l, append([]string{"X-Forwarded-For", "203.0.113.9", "Connection", "keep-alive"}, header...)...)
}

// allocsPerRequest warms the pools and connections with 200 runs of do, then returns the allocations of
// one, averaged over 500.
func allocsPerRequest(do func()) float64 {
	for range 200 {
		do()
	}
	return testing.AllocsPerRun(500, do)
}

// wantNoOwnAllocations fails the test if fairlead's own code allocates per run of do (ownAllocations
// over 400 runs: a site with a quarter as many objects is per request, not a pool or a connection
// warming up).
func wantNoOwnAllocations(t *testing.T, do func()) {
	t.Helper()
	const requests = 400
	for site, n := range ownAllocations(t, requests, do) {
		if n >= requests/4 {
			t.Errorf("fairlead's own code allocates per request: %d objects in %d requests at %s", n, requests, site)
		}
	}
}

func BenchmarkProxyHandlerGET(b *testing.B) {
	do := newHandlerBench(b, "")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		do()
	}
}

// roundRobinPool makes the bench's platform pool a roundrobin pool with watermarks and multi-part pins.
const roundRobinPool = `
balance = "roundrobin"
high_watermark = 100
high_watermark_bytes = 1000000
multipart_header = "X-Multipart-Id"
`

func BenchmarkProxyHandlerRoundRobinGET(b *testing.B) {
	do := newHandlerBench(b, roundRobinPool)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		do()
	}
}

// TestProxyPathDoesNotAllocatePerRequest counts, with the memory profiler recording every allocation,
// the allocations of the proxied-request path and attributes each to the first function outside the Go
// runtime on its stack: none may be fairlead's own code. The whole path (fasthttp included) is bounded
// too. make test runs it in a separate step without -race (the race detector allocates on its own).
// It covers the leader policy and the roundrobin policy, with and without a multi-part pin.
func TestProxyPathDoesNotAllocatePerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	for _, tc := range []struct {
		name, pool string
		header     []string
	}{
		{"leader", "", nil},
		{"roundrobin", roundRobinPool, nil},
		{"roundrobin-pinned", roundRobinPool, []string{"X-Multipart-Id", "upload-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			do := newHandlerBench(t, tc.pool, tc.header...)
			// RequestCtx.Init in this harness allocates 1 (the whole path over real sockets, with no
			// harness of its own, allocates nothing: wholepath_timing_test.go).
			const harness = 1
			if n := allocsPerRequest(do); n > harness {
				t.Errorf("%.1f allocations per proxied request, want at most %d (the harness's)", n, harness)
			}
			wantNoOwnAllocations(t, do)
		})
	}
}

// ownAllocations runs fn n times with every allocation profiled and returns, per allocating function
// of this module (outside tests), the objects allocated during the runs.
func ownAllocations(t *testing.T, n int, fn func()) map[string]int64 {
	t.Helper()
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	snapshot := func() map[string]int64 {
		// The profile shows allocations as of the last completed GC cycle: two cycles publish all.
		runtime.GC()
		runtime.GC()
		var recs []runtime.MemProfileRecord
		for {
			k, ok := runtime.MemProfile(recs, true)
			if ok {
				recs = recs[:k]
				break
			}
			recs = make([]runtime.MemProfileRecord, k+64)
		}
		out := map[string]int64{}
		for _, r := range recs {
			frames := runtime.CallersFrames(r.Stack())
			for {
				f, more := frames.Next()
				if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "internal/") {
					if strings.HasPrefix(f.Function, "github.com/fairlead/fairlead/") && !strings.HasSuffix(f.File, "_test.go") {
						out[fmt.Sprintf("%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)] += r.AllocObjects
					}
					break
				}
				if !more {
					break
				}
			}
		}
		return out
	}
	before := snapshot()
	for i := 0; i < n; i++ {
		fn()
	}
	after := snapshot()
	for site, v := range after {
		if d := v - before[site]; d > 0 {
			after[site] = d
		} else {
			delete(after, site)
		}
	}
	return after
}
