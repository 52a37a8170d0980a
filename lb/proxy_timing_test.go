package lb

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// newHandlerBench starts a cluster and fairlead and returns a function that runs one request through the
// handler itself (no client socket), so allocations of the proxy path can be counted.
func newHandlerBench(tb testing.TB) func() {
	c := startCluster(tb, 2, 0)
	l, _ := startLB(tb, platformConfig(c, "", ""))
	var ctx fasthttp.RequestCtx
	remote := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4567}
	var req fasthttp.Request
	return func() {
		req.Reset()
		req.Header.SetMethod("GET")
		req.SetRequestURI("/Thingworx/Things/Asset1/Properties")
		req.Header.SetHost("thingworx.example.com")
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		req.Header.Set("Connection", "keep-alive")
		ctx.Init(&req, remote, nil)
		l.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			tb.Fatalf("status %d", ctx.Response.StatusCode())
		}
		ctx.Response.Body() // drain the streamed body so the upstream connection is reused
		ctx.Response.Reset()
	}
}

func BenchmarkProxyHandlerGET(b *testing.B) {
	do := newHandlerBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		do()
	}
}

func TestProxyPathDoesNotAllocatePerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; run without -race")
	}
	do := newHandlerBench(t)
	for i := 0; i < 100; i++ { // warm pools and connections
		do()
	}
	// Known and bounded: RequestCtx.Init in this harness allocates 1, and fasthttp's response body
	// streaming (HostClient.StreamResponseBody, transport.RoundTrip) allocates 4 small objects per
	// response (a clientStreamBody and three closures). fairlead's own code on the path must add none.
	const harness, fasthttpStreaming = 1, 4
	if n := testing.AllocsPerRun(500, do); n > harness+fasthttpStreaming {
		t.Fatalf("%.1f allocations per proxied request, want at most %d", n, harness+fasthttpStreaming)
	}
}
