package lb

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// HTTP/2 through a whole fairlead: trailers both ways, a leader change under open streams, Close, the
// access log and rate_per_source (what the server sees of a stream and the client of an answer:
// proxy_test.go; that refused streams reach no server: hostile_test.go). The connection's rules, frames,
// flow control, HPACK limits, malformed streams and a browser's h2 are lb/frontend's (h2conn_test.go,
// against a trivial handler).

// h2Client is a client that speaks HTTP/2 only, over one connection (StrictMaxConcurrentStreams: it
// waits for a stream rather than open another connection), closed with the test.
func (f *rawFront) h2Client(t testing.TB) *http.Client {
	tr := &http2.Transport{TLSClientConfig: f.env.clientConfig(tlsName), StrictMaxConcurrentStreams: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 60 * time.Second, Transport: tr}
}

// Streams on an HTTP/2 connection that stays open follow a leader change: every request is answered
// 200, first by the old leader, then by the new one, on the one connection.
func TestH2StreamsOnAnOpenConnectionFollowALeaderChange(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "")
	c, l, tlsAddr := fr.c, fr.l, fr.tlsAddr
	client := fr.h2Client(t)
	get := func() string {
		t.Helper()
		r := replyOf(client.Get("https://" + tlsAddr + "/Thingworx/Things"))
		if r.err != nil || r.status != 200 || r.proto != "HTTP/2.0" {
			t.Fatalf("%s over %s during the leader change, want 200 over HTTP/2.0", r, r.proto)
		}
		return r.by
	}
	if by := get(); by != c.Platforms[0].Name {
		t.Fatalf("served by %s, want the leader %s", by, c.Platforms[0].Name)
	}
	mustSetState(t, c.Platforms[0], sim.Backup)
	mustSetState(t, c.Platforms[1], sim.Leader)
	testkit.Eventually(t, "a stream served by the new leader", 10*time.Second, func() bool { return get() == c.Platforms[1].Name })
	if n := l.h2.Counts().Conns; n != 1 {
		t.Errorf("%d HTTP/2 connections, want the one that stayed open", n)
	}
}

// The access log says which protocol a request came over, and the metrics count requests by protocol.
func TestH2AccessLogAndMetricsNameTheProtocol(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "")
	l, logs, env, tlsAddr := fr.l, fr.logs, fr.env, fr.tlsAddr
	client := fr.h2Client(t)
	for _, path := range []string{"/h2-one", "/h2-two"} {
		if r := replyOf(client.Get("https://" + tlsAddr + path)); r.err != nil {
			t.Fatal(r.err)
		}
	}
	cfg := env.clientConfig(tlsName)
	cfg.NextProtos = []string{"http/1.1"}
	if r := tlsRequest(tlsAddr, cfg, "/h1-one", nil); r.status != 200 {
		t.Fatal(r)
	}
	testkit.Eventually(t, "three access lines", 5*time.Second, func() bool {
		return strings.Contains(logs.all(), "path=/h1-one") && strings.Contains(logs.all(), "path=/h2-two")
	})
	for _, ln := range strings.Split(logs.all(), "\n") {
		switch {
		case strings.Contains(ln, "path=/h2-") && !strings.Contains(ln, "proto=h2"):
			t.Errorf("an HTTP/2 request's line: %s", ln)
		case strings.Contains(ln, "path=/h1-") && !strings.Contains(ln, "proto=http/1.1"):
			t.Errorf("an HTTP/1.1 request's line: %s", ln)
		}
	}
	wantMetrics(t, l, `fairlead_frontend_requests_total{protocol="h2"} 2`, `fairlead_http2_connections_total 1`)
}

// Trailers pass both ways over HTTP/2: a chunked answer's trailer fields reach the client as the
// stream's trailers; a request's declared trailer fields reach the leader after its body, which goes
// chunked (HTTP/1.1 carries trailers only there), with or without a content-length. An HTTP/1.1 client
// gets the same answer's body without them.
func TestH2TrailersPassBothWays(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "")
	c, env, tlsAddr := fr.c, fr.env, fr.tlsAddr
	client := fr.h2Client(t)
	leader := c.Platforms[0].Name

	const size = 70000 // more than one read of the answer and one DATA frame
	url := "https://" + tlsAddr + "/Thingworx/Things?bytes=" + strconv.Itoa(size) + "&chunked=1&trailers=1"
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(got)
	if err != nil || resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 || len(got) != size || resp.Header.Get("X-Served-By") != leader {
		t.Fatalf("%s %d from %q, %d bytes (%v); want HTTP/2.0 200 from %s, %d bytes", resp.Proto, resp.StatusCode, resp.Header.Get("X-Served-By"), len(got), err, leader, size)
	}
	if want := hex.EncodeToString(sum[:]); resp.Trailer.Get("X-Checksum") != want {
		t.Errorf("trailers %v, want X-Checksum %s", resp.Trailer, want)
	}

	for _, known := range []bool{false, true} {
		body := []byte(strings.Repeat("trailer test ", 5000))
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", "https://"+tlsAddr+"/Thingworx/Services/Upload", pr)
		req.Trailer = http.Header{"X-Sum": nil, "X-Parts": nil}
		if known {
			req.ContentLength = int64(len(body))
		}
		go func() {
			pw.Write(body[:1000]) //nolint:errcheck
			pw.Write(body[1000:]) //nolint:errcheck
			req.Trailer.Set("X-Sum", "65000")
			req.Trailer.Add("X-Parts", "1")
			req.Trailer.Add("X-Parts", "2")
			pw.Close()
		}()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
		h := sha256.Sum256(body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Body-Bytes") != strconv.Itoa(len(body)) || resp.Header.Get("X-Body-Sha256") != hex.EncodeToString(h[:]) {
			t.Errorf("content-length %v: %d, the leader read %s bytes, want 200 and %d", known, resp.StatusCode, resp.Header.Get("X-Body-Bytes"), len(body))
		}
		got := strings.Split(resp.Header.Get("X-Echo-Trailers"), "; ")
		slices.Sort(got) // in the order sent, which is the client's map order
		if got, want := strings.Join(got, "; "), "X-Parts: 1; X-Parts: 2; X-Sum: 65000"; got != want {
			t.Errorf("content-length %v: the leader saw the trailers %q, want %q", known, got, want)
		}
	}

	// HTTP/1.1 over the same listener: the body, no trailers (fasthttp does not relay them).
	h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: env.clientConfig(tlsName)}}
	defer h1.CloseIdleConnections()
	resp, err = h1.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.Proto != "HTTP/1.1" || len(got) != size || sha256.Sum256(got) != sum {
		t.Fatalf("HTTP/1.1: %s, %d bytes (%v), want HTTP/1.1 and the same %d bytes", resp.Proto, len(got), err, size)
	}
}

// At Close (SIGTERM) the HTTP/2 connections drain as lb/frontend's TestH2ShutdownDrainsHTTP2Connections
// has them (GOAWAY, the stream in flight answered, an idle connection closed at once): through a whole
// fairlead, each connection is told GOAWAY, the stream in flight answered, and Close does not wait for
// drain_timeout.
func TestH2CloseDrainsHTTP2Connections(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, `drain_timeout = "60s"`)
	idle, busy := fr.h2(t), fr.h2(t)
	busy.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", fr.tlsAddr, ":path", "/Thingworx/slow?delay=1s")
	testkit.Eventually(t, "the slow stream to reach the handler", 5*time.Second, func() bool { return fr.l.h2.Counts().Streams == 1 })
	closed := make(chan struct{})
	go func() {
		fr.l.Close()
		close(closed)
	}()
	if got := idle.GoAwayCode(); got != "NO_ERROR" {
		t.Errorf("the idle connection: %s, want GOAWAY NO_ERROR", got)
	}
	if got := busy.GoAwayCode(); got != "NO_ERROR" {
		t.Errorf("the connection with a stream in flight: %s, want GOAWAY NO_ERROR", got)
	}
	if got := busy.Outcome(1); got != "200" {
		t.Errorf("the stream in flight at Close: %s, want 200", got)
	}
	select {
	case <-closed:
	case <-time.After(hang):
		t.Fatal("Close waits for drain_timeout although every HTTP/2 connection closed")
	}
}

// rate_per_source counts each HTTP/2 stream as a request: streams over it are answered 429 with
// Retry-After, on the same connection, which serves on.
func TestH2StreamsCountAgainstRatePerSource(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "rate_per_source = 5")
	c, tlsAddr := fr.c, fr.tlsAddr
	client := fr.h2Client(t)
	before := c.Platforms[0].Requests()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			r := replyOf(client.Get("https://" + tlsAddr + "/Thingworx/Things"))
			if r.err != nil {
				t.Error(r.err)
				return
			}
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
			if r.status == 429 && r.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		})
	}
	wg.Wait()
	if codes[200] < 5 || codes[429] == 0 || codes[200]+codes[429] != 40 {
		t.Fatalf("40 streams at once: %v; want the 5 of the burst (and what refilled meanwhile) served, the rest 429", codes)
	}
	if n := c.Platforms[0].Requests() - before; n != int64(codes[200]) {
		t.Errorf("the leader got %d requests, want the %d served", n, codes[200])
	}
}
