package lb

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// send sends one request through fairlead, fails the test unless it is answered 200, and returns the
// answer's Content-Length (-1 when it had none).
func send(t *testing.T, l *LB, method, path string, body []byte) int64 {
	t.Helper()
	r := request(l, method, path, string(body))
	if r.err != nil || r.status != 200 {
		t.Fatalf("%s %s: %s", method, path, r)
	}
	if n, err := strconv.ParseInt(r.header.Get("Content-Length"), 10, 64); err == nil {
		return n
	}
	return -1
}

func TestMetricsCountEachRequestsDurationAndItsBodyBytesPerPool(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))

	var out int64
	for i := 0; i < 5; i++ { // streamed answers with a Content-Length
		out += send(t, l, "GET", "/Thingworx/Things/A?bytes=1000", nil)
	}
	if out != 5000 {
		t.Fatalf("the simulated answers carried %d bytes, want 5000", out)
	}
	// A chunked answer's size is not known when its head is relayed: it is not counted.
	if n := send(t, l, "GET", "/Thingworx/Things/A?bytes=3000&chunked=1", nil); n != -1 {
		t.Fatalf("chunked answer with Content-Length %d", n)
	}
	for i := 0; i < 3; i++ { // bodies held in memory (Content-Length within retry_buffer)
		out += send(t, l, "POST", "/Thingworx/Things/A/Services/Upload", make([]byte, 500))
	}
	// A body larger than retry_buffer streams: counted as it is read.
	out += send(t, l, "POST", "/Thingworx/Things/A/Services/Upload", make([]byte, 100_000))

	page := scrapeMetrics(t, l)
	if n := mustMetric(t, page, `fairlead_request_duration_seconds_count{pool="platform"}`); n != 10 {
		t.Errorf("request duration count %v, want 10", n)
	}
	if s := mustMetric(t, page, `fairlead_request_duration_seconds_sum{pool="platform"}`); s <= 0 || s > 10 {
		t.Errorf("request duration sum %v s for 10 quick requests", s)
	}
	if !strings.Contains(page, `fairlead_request_duration_seconds_bucket{pool="platform",le="+Inf"} 10`) {
		t.Errorf("no request duration buckets:\n%s", page)
	}
	if in := mustMetric(t, page, `fairlead_pool_bytes_total{pool="platform",direction="in"}`); in != 3*500+100_000 {
		t.Errorf("bytes in %v, want %d", in, 3*500+100_000)
	}
	if got := mustMetric(t, page, `fairlead_pool_bytes_total{pool="platform",direction="out"}`); got != float64(out) {
		t.Errorf("bytes out %v, want %d (the Content-Lengths the client saw)", got, out)
	}
	// No request waited for a server.
	if _, ok := metricValue(page, `fairlead_queue_wait_seconds_count{pool="platform"}`); ok {
		t.Errorf("queue wait observed although no request waited:\n%s", page)
	}
}

func TestMetricsHaveEachServersProbeLatencies(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	for _, p := range c.Platforms {
		series := fmt.Sprintf(`fairlead_check_duration_seconds_count{pool="platform",server=%q,name=%q}`, p.Addr, p.Addr)
		testkit.Eventually(t, "probe latencies of "+p.Addr, 3*time.Second, func() bool {
			n, _ := metricValue(scrapeMetrics(t, l), series)
			return n >= 2
		})
	}
	page := scrapeMetrics(t, l)
	sum := mustMetric(t, page, fmt.Sprintf(`fairlead_check_duration_seconds_sum{pool="platform",server=%q,name=%q}`, c.Platforms[0].Addr, c.Platforms[0].Addr))
	if sum <= 0 || sum > 5 {
		t.Errorf("probe latency sum %v s", sum)
	}
}

func TestBuildInfoReportsTheVersionAndGoVersion(t *testing.T) {
	c := startCluster(t, 1, 0)
	l, _ := startLBOpts(t, testkit.WriteFiles(t, platformConfig(c, "", "")), Options{Version: "1.2.3"})
	mustMetric(t, scrapeMetrics(t, l), fmt.Sprintf(`fairlead_build_info{version="1.2.3",goversion=%q}`, runtime.Version()))

	l2, _ := startLB(t, platformConfig(c, "", ""))
	mustMetric(t, scrapeMetrics(t, l2), fmt.Sprintf(`fairlead_build_info{version="dev",goversion=%q}`, runtime.Version()))
}

func TestQueueWaitIsObservedForARequestThatWaitedForAServer(t *testing.T) {
	c := startCluster(t, 2, 0)
	files := platformConfig(c, "", "")
	// A leader pool whose only server is not there: its requests wait queue_timeout, then get 503.
	nobody, pool, check, route := poolConf("nobody", "leader", []string{testkit.Addr(t)}, false)
	pool.Set("queue_timeout", 300*time.Millisecond)
	check.Set("timeout", 300*time.Millisecond)
	route.Set("paths", []string{"/nobody"})
	files["05-nobody.toml"] = nobody.String()
	l, _ := startLB(t, files)
	send(t, l, "GET", "/Thingworx/Things/A", nil)
	if code, _ := get(t, l, "/nobody"); code != 503 {
		t.Fatalf("GET /nobody: %d, want 503", code)
	}

	page := scrapeMetrics(t, l)
	if n := mustMetric(t, page, `fairlead_queue_wait_seconds_count{pool="nobody"}`); n != 1 {
		t.Errorf("queue waits %v, want 1", n)
	}
	if s := mustMetric(t, page, `fairlead_queue_wait_seconds_sum{pool="nobody"}`); s < 0.3 || s > 2 {
		t.Errorf("queue wait %v s, want about queue_timeout (0.3 s)", s)
	}
	if _, ok := metricValue(page, `fairlead_queue_wait_seconds_count{pool="platform"}`); ok {
		t.Errorf("the platform pool's request did not wait, yet a wait was observed")
	}
	// The 503 is a request of its pool like any other.
	if n := mustMetric(t, page, `fairlead_request_duration_seconds_count{pool="nobody"}`); n != 1 {
		t.Errorf("request durations of the nobody pool %v, want 1", n)
	}
}

func TestStickyEvictionsAndTunnelBytesAreCountedPerPool(t *testing.T) {
	c := startCluster(t, 1, 2)
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver.sticky]\nmax_entries = 2\n"))
	const msg = "hello, connection server"
	for i := 0; i < 5; i++ {
		conn, _ := dialAsset(t, l, fmt.Sprintf("asset-%d", i))
		mustEcho(t, conn, msg)
		conn.Close()
	}
	testkit.Eventually(t, "the tunnels to close", 3*time.Second, func() bool {
		return l.px.tunnels.stats().Closed == 5
	})

	page := scrapeMetrics(t, l)
	// Five keys in a table of two: three evicted.
	if n := mustMetric(t, page, `fairlead_pool_sticky_evictions_total{pool="cxserver"}`); n != 3 {
		t.Errorf("sticky evictions %v, want 3", n)
	}
	if _, ok := metricValue(page, `fairlead_pool_sticky_evictions_total{pool="platform"}`); ok {
		t.Errorf("a leader pool has no sticky table, yet evictions are written")
	}
	// Each tunnel carried at least one frame of the message each way (a client frame is masked: 4
	// bytes more), and the per-pool counts add up to the relay's.
	ts := l.px.tunnels.stats()
	toServer := mustMetric(t, page, `fairlead_pool_tunnel_bytes_total{pool="cxserver",direction="to_server"}`)
	toClient := mustMetric(t, page, `fairlead_pool_tunnel_bytes_total{pool="cxserver",direction="to_client"}`)
	if toServer < float64(5*len(msg)) || toServer != float64(ts.BytesToServer) {
		t.Errorf("tunnel bytes to the servers %v, relay %d", toServer, ts.BytesToServer)
	}
	if toClient < float64(5*len(msg)) || toClient != float64(ts.BytesToClient) {
		t.Errorf("tunnel bytes to the clients %v, relay %d", toClient, ts.BytesToClient)
	}
	// The upgrades are requests of their pool: the duration until each 101.
	if n := mustMetric(t, page, `fairlead_request_duration_seconds_count{pool="cxserver"}`); n != 5 {
		t.Errorf("upgrade durations %v, want 5", n)
	}
}

func TestARemovedPoolsSeriesDisappear(t *testing.T) {
	c := startCluster(t, 2, 0)
	files := platformConfig(c, "", "")
	other, _, check, route := poolConf("other", "leader", testkit.PlatformAddrs(c)[:1], false)
	check.Set("credentials", sim.DefaultCredentials)
	route.Set("paths", []string{"/other"})
	files["05-other.toml"] = other.String()
	l, _ := startLB(t, files)
	send(t, l, "GET", "/Thingworx/Things/A", nil)
	if _, ok := metricValue(scrapeMetrics(t, l), `fairlead_request_duration_seconds_count{pool="platform"}`); !ok {
		t.Fatal("no request duration of the platform pool")
	}
	delete(files, "05-other.toml")
	reloadWith(t, l, files)
	page := scrapeMetrics(t, l)
	if strings.Contains(page, `pool="other"`) {
		t.Errorf("series of the removed pool remain:\n%s", page)
	}
	mustMetric(t, page, `fairlead_request_duration_seconds_count{pool="platform"}`)
}
