package relay

// A Route as fairlead runs one, without the load balancer: its config loaded from TOML as conf.d
// holds it, a listPool of its pool's servers (primaries, then backups: the pool's health, which
// judges the servers, is package lb's and tested there), and a fasthttp server on 127.0.0.1 whose
// handler is what lb does with a relay's request but route auth and the access log (Match, then
// Serve). Upstreams are the simulator's config servers and App Configuration instances; clients are
// real SSE streams and WebSockets. Waits poll with a deadline; no fixed sleep is an assertion.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// routeEnv is a running Route served on its own listener.
type routeEnv struct {
	rr     *Route
	pool   *listPool
	logs   *logBuf
	addr   string
	client *http.Client
}

// routeFiles is a config with relay "appconfig" without client auth (route auth is package lb's)
// over pool "appconfig" (servers[0] the server, servers[1:] its backups), testkit.RelayTopics and
// the upstream key; relayExtra holds more keys of [relays.appconfig].
func routeFiles(t testing.TB, servers []string, relayExtra string) map[string]string {
	t.Helper()
	return map[string]string{"10-relay.toml": testkit.Relay{Servers: servers, Open: true, RelayExtra: relayExtra,
		PoolExtra: "connect_timeout = \"1s\"\nresponse_timeout = \"3s\"\n"}.Config(t)}
}

// newRoute builds relay name of the config files over a listPool of its pool's servers, without
// starting it; it is closed at cleanup.
func newRoute(t testing.TB, files map[string]string, name string) (*Route, *listPool, *logBuf) {
	t.Helper()
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	spec, rc := cfg.RelaySpecs[name], cfg.Relays[name]
	if spec == nil {
		t.Fatalf("no relay %q in the config", name)
	}
	pc := cfg.Pools[rc.Pool]
	pool := newListPool(append(slices.Clone(pc.Servers), pc.Backups...)...)
	logs := &logBuf{}
	rr := NewRoute(spec, rc, pc, pool, logs.logf)
	t.Cleanup(func() {
		rr.Close()
		if t.Failed() {
			t.Logf("the relay's log:\n%s", logs.String())
		}
	})
	return rr, pool, logs
}

// startRoute builds relay name of the config files, starts it (failing the test if Start fails) and
// serves it.
func startRoute(t testing.TB, files map[string]string, name string) *routeEnv {
	t.Helper()
	rr, pool, logs := newRoute(t, files, name)
	if err := rr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return serveRoute(t, rr, pool, logs)
}

// serveRoute serves rr on 127.0.0.1 as fairlead's front end serves a relay's path: a request the
// relay matches is its to answer, any other is 404. The server keeps hijacked connections, as
// fairlead's does: the streams own them.
func serveRoute(t testing.TB, rr *Route, pool *listPool, logs *logBuf) *routeEnv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			var kb [256]byte
			req, ok := rr.Match(ctx, kb[:0])
			if !ok {
				ctx.Error("404 Not Found: no relay path\n", fasthttp.StatusNotFound)
				return
			}
			rr.Serve(ctx, req)
		},
		KeepHijackedConns: true,
		ReduceMemoryUsage: true,
	}
	return &routeEnv{rr: rr, pool: pool, logs: logs, addr: ln.Addr().String(),
		client: serveForTest(t, srv, ln, rr.Close, 10*time.Second)}
}

// get sends method path with header pairs (name, value, ...) and returns the answer.
func (e *routeEnv) get(t testing.TB, method, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return e.send(t, method, path, nil, hdr...)
}

// send sends method path with body and header pairs and returns the answer.
func (e *routeEnv) send(t testing.TB, method, path string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return testkit.Do(t, e.client, method, "http://"+e.addr+path, body, hdr...)
}

// ws opens a WebSocket on path; it is closed at cleanup.
func (e *routeEnv) ws(t testing.TB, path string) *websocket.Conn {
	t.Helper()
	return testkit.DialWS(t, "ws://"+e.addr+path, nil)
}

// both subscribes to topic with an SSE stream, which has received version 1, and a WebSocket.
func (e *routeEnv) both(t testing.TB, topic string) (*testkit.SSE, *websocket.Conn) {
	t.Helper()
	sse := testkit.DialSSE(t, e.addr, "/relay/"+topic)
	sse.WaitVersion(t, 1, 5*time.Second)
	return sse, e.ws(t, "/relay/"+topic)
}

// topic returns the status of topic, as the relay's Status shows it (zero if it holds none).
func (e *routeEnv) topic(topic string) TopicStatus {
	for _, s := range e.rr.Status().Topics {
		if s.Topic == topic {
			return s
		}
	}
	return TopicStatus{}
}

// holds reports whether the relay holds topic.
func (e *routeEnv) holds(topic string) bool {
	return slices.ContainsFunc(e.rr.Status().Topics, func(s TopicStatus) bool { return s.Topic == topic })
}

// settled waits until the relay's fetches of each topic have all ended and each topic has had its
// start (or first-request) fetch and the refresh that follows its session's connection: the config
// server counted as many fetches as the relay ended, at least 2. Counters reset after it count only
// what the test does next.
func (e *routeEnv) settled(t testing.TB, s *sim.ConfigServer, topics ...string) {
	t.Helper()
	testkit.Eventually(t, "the relay's fetches to settle", 10*time.Second, func() bool {
		ended := map[string]uint64{}
		for _, ts := range e.rr.Status().Topics {
			ended[ts.Topic] = ts.Fetches
		}
		for _, tp := range topics {
			if n := testkit.Fetches(s, tp); n < 2 || uint64(n) != ended[tp] {
				return false
			}
		}
		return true
	})
}

// metric returns the value of series in the relay's metrics, or -1 if it has none.
func (e *routeEnv) metric(t testing.TB, series string) float64 {
	t.Helper()
	var b bytes.Buffer
	WriteMetrics(&b, []Status{e.rr.Status()})
	for line := range strings.Lines(b.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return -1
}

// relayScale is the number of SSE and of WebSocket subscribers of the fan-out test: the race
// detector allows 8128 goroutines, and each subscriber costs the relay one or two.
func relayScale() int {
	if raceEnabled {
		return 100
	}
	return 1000
}

// smallReceiveBuffer dials addr with a tiny socket receive buffer, so that a peer that does not
// read fills it at once.
func smallReceiveBuffer(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = setRcvBuf(fd, 1024) })
		if err != nil {
			return err
		}
		return serr
	}}
	return d.DialContext(ctx, network, addr)
}

// writeSeed writes a seed file in the format of SeedFile.
func writeSeed(t testing.TB, path string, topics map[string]uint64) {
	t.Helper()
	sf := map[string]any{"relay": "appconfig", "written": time.Now().UTC()}
	tp := map[string]any{}
	for name, v := range topics {
		tp[name] = map[string]any{"version": v, "json": json.RawMessage(`{"seed":"` + name + `"}`)}
	}
	sf["topics"] = tp
	b, err := json.Marshal(sf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// readSeed reads a seed file; nil if it is missing or not whole.
func readSeed(path string) *SeedFile {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var sf SeedFile
	if json.Unmarshal(b, &sf) != nil {
		return nil
	}
	return &sf
}

func TestRelayFansOutOneChangePerTopicToThousandsOfSubscribersOverFourUpstreamSessions(t *testing.T) {
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), "subscriber_buffer = 64"), "appconfig")
	n := relayScale()
	path := func(i int) string { return "/relay/" + testkit.RelayTopics[i%4] }

	// Dial n SSE and n WebSocket subscribers, a few at a time.
	sses := make([]*testkit.SSE, n)
	wss := make([]*websocket.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				s, resp, err := testkit.TrySSE(e.addr, path(i), nil)
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("SSE %d: %v %v", i, err, resp)
					continue
				}
				sses[i] = s
				d := websocket.Dialer{HandshakeTimeout: 20 * time.Second}
				ws, _, err := d.Dial("ws://"+e.addr+path(i), nil)
				if err != nil {
					errs <- fmt.Errorf("WebSocket %d: %v", i, err)
					continue
				}
				wss[i] = ws
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Cleanup(func() {
		for i := range n {
			if sses[i] != nil {
				sses[i].Conn.Close()
			}
			if wss[i] != nil {
				wss[i].Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every SSE stream starts with the current snapshot (version 1: nothing was published yet).
	for i, s := range sses {
		if ev := s.WaitVersion(t, 1, 10*time.Second); !strings.Contains(ev.Data, `"topic":"`+testkit.RelayTopics[i%4]+`"`) {
			t.Fatalf("SSE %d: first event %+v", i, ev)
		}
	}
	testkit.Eventually(t, "one upstream session per topic at the config server", 5*time.Second, func() bool {
		return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...)
	})
	for _, tp := range testkit.RelayTopics {
		if st := e.topic(tp); st.Subscribers != n/2 {
			t.Fatalf("%s: %d subscribers in the hub, want %d", tp, st.Subscribers, n/2)
		}
	}

	// One change per topic reaches every subscriber and costs one fetch per topic.
	e.settled(t, cfg, testkit.RelayTopics...)
	cfg.ResetCounters()
	versions := map[string]uint64{}
	for _, tp := range testkit.RelayTopics {
		versions[tp] = testkit.Publish(t, c, tp, `{"changed":"`+tp+`"}`)
	}
	start := time.Now()
	for i, s := range sses {
		tp := testkit.RelayTopics[i%4]
		ev := s.WaitVersion(t, versions[tp], 20*time.Second)
		if snap := testkit.SnapshotOf(t, []byte(ev.Data)); snap.Version != versions[tp] || !strings.Contains(string(snap.Data), tp) {
			t.Fatalf("SSE %d: got %+v, want %s version %d", i, snap, tp, versions[tp])
		}
	}
	for i, ws := range wss {
		tp := testkit.RelayTopics[i%4]
		ch, raw, err := testkit.ReadChange(ws, 20*time.Second)
		if err != nil || ch.Topic != tp || ch.Version != versions[tp] {
			t.Fatalf("WebSocket %d: %q %v; want the change of %s to version %d", i, raw, err, tp, versions[tp])
		}
	}
	t.Logf("%d SSE and %d WebSocket subscribers got the change within %s", n, n, time.Since(start))
	for _, tp := range testkit.RelayTopics {
		if f := testkit.Fetches(cfg, tp); f != 1 {
			t.Errorf("%s: %d snapshot fetches for one change, want 1", tp, f)
		}
		if st := cfg.Stats().Topics[tp]; st.Sessions != 1 || st.SessionsTotal != 0 {
			t.Errorf("%s: %d sessions open, %d opened since the publish; want 1 and 0", tp, st.Sessions, st.SessionsTotal)
		}
	}
}

func TestRelaySnapshotsAreServedFromTheCacheWithAnETag(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	v := testkit.Publish(t, c, "inventory/dev", `{"cached":true}`)
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), ""), "appconfig")
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	// The session's first fetch (after it connects) may still be on its way: wait for it.
	e.settled(t, cfg, testkit.RelayTopics...)
	cfg.ResetCounters()

	var etag string
	for i := range 50 {
		resp, body := e.get(t, http.MethodGet, "/relay/inventory/dev")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("GET %d: %d %q %q", i, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if s := testkit.SnapshotOf(t, body); s.Version != v || string(s.Data) != `{"cached":true}` {
			t.Fatalf("GET %d: %+v, want version %d", i, s, v)
		}
		if etag = resp.Header.Get("ETag"); etag != `"`+strconv.FormatUint(v, 10)+`"` {
			t.Fatalf("GET %d: ETag %q, want %q", i, etag, strconv.FormatUint(v, 10))
		}
	}
	resp, body := e.get(t, http.MethodGet, "/relay/inventory/dev", "If-None-Match", etag)
	if resp.StatusCode != 304 || len(body) != 0 || resp.Header.Get("ETag") != etag {
		t.Errorf("If-None-Match %s: %d %q ETag %q; want 304 without a body", etag, resp.StatusCode, body, resp.Header.Get("ETag"))
	}
	resp, _ = e.get(t, http.MethodGet, "/relay/inventory/dev", "If-None-Match", `"0"`)
	if resp.StatusCode != 200 {
		t.Errorf("If-None-Match with another tag: %d, want 200", resp.StatusCode)
	}
	resp, _ = e.get(t, http.MethodHead, "/relay/inventory/dev")
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != etag {
		t.Errorf("HEAD: %d ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	if f := testkit.Fetches(cfg, "inventory/dev"); f != 0 {
		t.Errorf("%d upstream fetches for 53 client requests, want 0", f)
	}
}

func TestRelayDropsASlowSubscriberWhileTheOthersKeepReceiving(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), "subscriber_buffer = 2\nwrite_timeout = \"300ms\""), "appconfig")
	// An on-demand topic with a long name: its change messages (which hold the name) are large
	// enough to fill a slow client's socket after a few changes.
	topic := "slow/" + strings.Repeat("s", 2000)
	path := "/relay/" + topic

	sse := testkit.DialSSE(t, e.addr, path)
	sse.WaitVersion(t, 1, 5*time.Second)
	ws := e.ws(t, path)
	slowSSE, _, err := testkit.TrySSE(e.addr, path, func() (net.Conn, error) {
		return smallReceiveBuffer(context.Background(), "tcp", e.addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer slowSSE.Conn.Close()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, NetDialContext: smallReceiveBuffer}
	slowWS, _, err := d.Dial("ws://"+e.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slowWS.Close()
	testkit.Eventually(t, "4 subscribers", 5*time.Second, func() bool { return e.topic(topic).Subscribers == 4 })

	// Publish changes one at a time until both slow subscribers are gone; the reading ones get
	// every version.
	var versions []uint64
	deadline := time.Now().Add(20 * time.Second)
	for e.topic(topic).Subscribers > 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d changes, %d subscribers remain: the slow ones were not dropped", len(versions),
				e.topic(topic).Subscribers)
		}
		v := testkit.Publish(t, c, topic, fmt.Sprintf(`{"n":%d,"pad":"%s"}`, len(versions), strings.Repeat("x", 8<<10)))
		versions = append(versions, v)
		if ev := sse.WaitVersion(t, v, 5*time.Second); ev.ID != strconv.FormatUint(v, 10) {
			t.Fatalf("the reading SSE client got version %s, want %d", ev.ID, v)
		}
		if ch, raw, err := testkit.ReadChange(ws, 5*time.Second); err != nil || ch.Version != v {
			t.Fatalf("the reading WebSocket client got %q %v, want version %d", testkit.Tail(string(raw), 400), err, v)
		}
	}
	drops := e.topic(topic).Drops
	t.Logf("the slow subscribers were dropped after %d changes; hub drops: %d", len(versions), drops)
	// The metrics count the drops.
	if d := e.metric(t, fmt.Sprintf(`fairlead_relay_drops_total{relay="appconfig",topic=%q}`, topic)); d != float64(drops) || drops == 0 {
		t.Errorf("fairlead_relay_drops_total = %v, the hub counted %d", d, drops)
	}

	// The slow SSE stream ends (after an "event: dropped" if the socket still took it).
	for {
		_, err := slowSSE.Next(5 * time.Second)
		if err == nil {
			continue
		}
		if testkit.DeadlinePassed(err) {
			t.Errorf("the slow SSE stream did not end: %v", err)
		}
		break
	}
	// The slow WebSocket is closed: with 1013, or at the TCP level when even the close frame did not fit.
	for {
		_, _, err := testkit.ReadChange(slowWS, 5*time.Second)
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		// 1006 is the client's name for a connection closed without a close frame.
		if errors.As(err, &ce) && ce.Code != websocket.CloseTryAgainLater && ce.Code != websocket.CloseAbnormalClosure {
			t.Errorf("the slow WebSocket closed with %d, want 1013 or the connection closed", ce.Code)
		}
		if testkit.DeadlinePassed(err) {
			t.Errorf("the slow WebSocket was not closed: %v", err)
		}
		t.Logf("the slow WebSocket ended with: %v", err)
		break
	}
	// The reading ones still receive.
	v := testkit.Publish(t, c, topic, `{"after":"drop"}`)
	sse.WaitVersion(t, v, 5*time.Second)
	testkit.WaitChange(t, ws, topic, v, 5*time.Second)
}

func TestRelayOnDemandTopicsIdleTimeoutAndMaxTopics(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), "max_topics = 5\ntopic_idle_timeout = \"300ms\""), "appconfig")
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })

	// An on-demand topic is fetched at its first GET, then watched.
	resp, body := e.get(t, http.MethodGet, "/relay/extra/one")
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Topic != "extra/one" {
		t.Fatalf("on-demand GET: %d %q", resp.StatusCode, body)
	}
	if f := testkit.Fetches(cfg, "extra/one"); f < 1 {
		t.Errorf("the on-demand topic was not fetched upstream")
	}
	testkit.Eventually(t, "a session for the on-demand topic", 5*time.Second, func() bool { return testkit.Sessions(cfg, "extra/one") == 1 })

	// max_topics = 5: the 4 listed and extra/one; one more is refused.
	resp, body = e.get(t, http.MethodGet, "/relay/extra/two")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a sixth topic with max_topics = 5: %d %q, want 503 with Retry-After", resp.StatusCode, body)
	}
	if f := testkit.Fetches(cfg, "extra/two"); f != 0 {
		t.Errorf("the refused topic was fetched %d times", f)
	}

	// Idle for topic_idle_timeout: the session closes (the listed ones too: nobody subscribes).
	testkit.Eventually(t, "the idle topics' sessions to close", 5*time.Second, func() bool {
		return testkit.Sessions(cfg, "extra/one") == 0 && testkit.Sessions(cfg, "inventory/dev") == 0
	})
	// Now extra/one is forgotten, so another on-demand topic fits.
	resp, _ = e.get(t, http.MethodGet, "/relay/extra/two")
	if resp.StatusCode != 200 {
		t.Errorf("an on-demand topic after the idle one was forgotten: %d, want 200", resp.StatusCode)
	}
	// The next GET of an idle listed topic fetches fresh and watches it again.
	v := testkit.Publish(t, c, "inventory/dev", `{"while":"idle"}`)
	cfg.ResetCounters()
	resp, body = e.get(t, http.MethodGet, "/relay/inventory/dev")
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Version != v {
		t.Errorf("GET of an idle topic changed meanwhile: %d %q, want version %d", resp.StatusCode, body, v)
	}
	if f := testkit.Fetches(cfg, "inventory/dev"); f < 1 {
		t.Errorf("the idle topic was not fetched again")
	}
	// A subscriber keeps the topic watched past the idle timeout.
	sse := testkit.DialSSE(t, e.addr, "/relay/inventory/dev")
	sse.WaitVersion(t, v, 5*time.Second)
	testkit.Eventually(t, "the session back", 5*time.Second, func() bool { return testkit.Sessions(cfg, "inventory/dev") == 1 })
	// Meanwhile another listed topic, read once, goes idle again: the idle loop ran, and the topic
	// with a subscriber kept its session.
	if resp, _ := e.get(t, http.MethodGet, "/relay/payments/prod"); resp.StatusCode != 200 {
		t.Fatalf("GET payments/prod: %d", resp.StatusCode)
	}
	testkit.Eventually(t, "payments/prod watched again", 5*time.Second, func() bool { return testkit.Sessions(cfg, "payments/prod") == 1 })
	testkit.Eventually(t, "payments/prod idle again", 5*time.Second, func() bool { return testkit.Sessions(cfg, "payments/prod") == 0 })
	if testkit.Sessions(cfg, "inventory/dev") != 1 {
		t.Errorf("the session of a topic with a subscriber closed")
	}
	v = testkit.Publish(t, c, "inventory/dev", `{"still":"watched"}`)
	sse.WaitVersion(t, v, 5*time.Second)
}

func TestRelaySSEHonoursLastEventID(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	v := testkit.Publish(t, c, "inventory/dev", `{"n":1}`)
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), ""), "appconfig")
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	path := "/relay/inventory/dev"

	// A client that has the current version gets no event until the next one.
	upToDate := testkit.DialSSE(t, e.addr, path, "Last-Event-ID", strconv.FormatUint(v, 10))
	// A client that is behind gets the current snapshot at once.
	behind := testkit.DialSSE(t, e.addr, path, "Last-Event-ID", strconv.FormatUint(v-1, 10))
	if ev := behind.WaitVersion(t, v, 5*time.Second); ev.ID != strconv.FormatUint(v, 10) {
		t.Errorf("Last-Event-ID %d: first event %+v, want version %d", v-1, ev, v)
	}
	v2 := testkit.Publish(t, c, "inventory/dev", `{"n":2}`)
	ev, err := upToDate.Next(5 * time.Second)
	if err != nil || ev.ID != strconv.FormatUint(v2, 10) {
		t.Errorf("Last-Event-ID %d: first event %+v %v, want version %d (not %d again)", v, ev, err, v2, v)
	}
	behind.WaitVersion(t, v2, 5*time.Second)
}

func TestRelayConcurrentFirstRequestsForAnOnDemandTopicFetchItOnce(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), ""), "appconfig")
	const n = 20
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			resp, err := e.client.Get("http://" + e.addr + "/relay/ondemand/burst")
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != 200 {
			t.Errorf("request %d: %d, want 200", i, code)
		}
	}
	testkit.Eventually(t, "the on-demand topic's session", 5*time.Second, func() bool { return testkit.Sessions(cfg, "ondemand/burst") == 1 })
	// One fetch for the first request, and one by the session once connected (a change may have
	// come in between); none per waiting request.
	testkit.Eventually(t, "the session's fetch", 5*time.Second, func() bool { return testkit.Fetches(cfg, "ondemand/burst") >= 2 })
	if f := testkit.Fetches(cfg, "ondemand/burst"); f != 2 {
		t.Errorf("%d concurrent first requests made %d upstream fetches, want 2 (the first fetch and the session's)", n, f)
	}
}

func TestRelayOnDemandTopicsTheUpstreamRefusesAreNotHeld(t *testing.T) {
	t.Parallel()
	hr := testkit.StartHeaderRecorder(t, map[string]int{"no/such": 404, "broken/one": 500, "secret/one": 401})
	e := startRoute(t, routeFiles(t, []string{hr.Addr}, "max_topics = 5"), "appconfig")
	f := func(path string, want int) {
		t.Helper()
		for range 2 { // the second request is answered the same: nothing was cached
			if resp, body := e.get(t, http.MethodGet, path); resp.StatusCode != want {
				t.Errorf("GET %s: %d %q, want %d", path, resp.StatusCode, body, want)
			}
		}
	}
	f("/relay/no/such", 404)
	f("/relay/broken/one", 502)
	f("/relay/secret/one", 502)
	// None of them took the one free topic of max_topics, and none got an events session.
	if resp, _ := e.get(t, http.MethodGet, "/relay/good/one"); resp.StatusCode != 200 {
		t.Errorf("an on-demand topic after three refused ones: %d, want 200", resp.StatusCode)
	}
	testkit.Eventually(t, "the events session of good/one", 5*time.Second, func() bool {
		return slices.Contains(hr.Paths(), "/events/good/one")
	})
	for _, p := range hr.Paths() {
		if p == "/events/no/such" || p == "/events/broken/one" || p == "/events/secret/one" {
			t.Errorf("a refused topic got an events session: %s", p)
		}
	}
}

func TestRelayAnOnDemandTopicWithTheUpstreamDownIsAnsweredWithinWaitTimeout(t *testing.T) {
	t.Parallel()
	upstream := testkit.Addr(t)
	seed := filepath.Join(t.TempDir(), "seed.json")
	writeSeed(t, seed, map[string]uint64{"inventory/dev": 3})
	e := startRoute(t, routeFiles(t, []string{upstream},
		fmt.Sprintf("start = \"fast\"\nseed_file = %q\nwait_timeout = \"500ms\"\nmax_topics = 5", seed)), "appconfig")
	for i := range 3 {
		start := time.Now()
		resp, body := e.get(t, http.MethodGet, "/relay/new/topic")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET %d of an on-demand topic with the upstream down: %d %q, want 503 with Retry-After", i, resp.StatusCode, body)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("GET %d took %s with wait_timeout = 500ms", i, took)
		}
	}
	// The failed first fetches hold no topic: once the upstream is up, the topic is served.
	c := testkit.StartRelaySim(t, 1, upstream)
	testkit.Eventually(t, "the on-demand topic served", 10*time.Second, func() bool {
		resp, _ := e.get(t, http.MethodGet, "/relay/new/topic")
		return resp.StatusCode == 200
	})
	testkit.Eventually(t, "its session", 5*time.Second, func() bool { return testkit.Sessions(c.Configs[0], "new/topic") == 1 })
}

// A change made while the upstream is down has no change message: when the session is back, the
// SSE subscribers get the new snapshot and the WebSocket subscribers are closed with 1012 "resync"
// (the message they missed cannot be replayed): a client that reconnects gets the next changes.
func TestRelayAChangePublishedWhileTheOnlyUpstreamIsDownReachesSubscribersWhenItReturns(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), ""), "appconfig")
	const topic = "payments/dev"
	sse, ws := e.both(t, topic)
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	cfg.Stop()
	v := testkit.Publish(t, c, topic, `{"while":"down"}`) // no session hears it
	if err := cfg.Start(); err != nil {
		t.Fatal(err)
	}
	// The session reconnects (with backoff) and fetches: the SSE subscriber gets the new snapshot.
	if s := testkit.SnapshotOf(t, []byte(sse.WaitVersion(t, v, 15*time.Second).Data)); s.Version != v {
		t.Errorf("after the upstream returned: %+v, want version %d", s, v)
	}
	resp, body := e.get(t, http.MethodGet, "/relay/"+topic)
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Version != v {
		t.Errorf("GET after the upstream returned: %d %q", resp.StatusCode, body)
	}
	testkit.Eventually(t, "the sessions back", 10*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	// The WebSocket subscriber missed the change message: it is told to resync.
	ws.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	var ce *websocket.CloseError
	if _, _, err := ws.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseServiceRestart || ce.Text != "resync" {
		t.Fatalf("the WebSocket subscriber after a change it missed: %v, want close 1012 \"resync\"", err)
	}
	// Reconnected, it gets the next change message; the SSE stream stayed open.
	ws = e.ws(t, "/relay/"+topic)
	v = testkit.Publish(t, c, topic, `{"after":"return"}`)
	testkit.WaitChange(t, ws, topic, v, 5*time.Second)
	sse.WaitVersion(t, v, 5*time.Second)
}

func TestRelayABurstOfChangesEndsWithTheLatestSnapshotEverywhere(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), "subscriber_buffer = 256"), "appconfig")
	const topic = "payments/prod"
	sse, ws := e.both(t, topic)
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	testkit.Eventually(t, "2 subscribers", 5*time.Second, func() bool { return e.topic(topic).Subscribers == 2 })
	e.settled(t, cfg, testkit.RelayTopics...)
	cfg.ResetCounters()
	const n = 50
	var last uint64
	for i := range n {
		last = testkit.Publish(t, c, topic, fmt.Sprintf(`{"burst":%d}`, i))
	}
	// Changes arriving while a fetch runs are coalesced, but the last one is never lost.
	if s := testkit.SnapshotOf(t, []byte(sse.WaitVersion(t, last, 10*time.Second).Data)); s.Version != last || string(s.Data) != fmt.Sprintf(`{"burst":%d}`, n-1) {
		t.Errorf("SSE after the burst: %+v, want version %d", s, last)
	}
	testkit.WaitChange(t, ws, topic, last, 10*time.Second)
	resp, body := e.get(t, http.MethodGet, "/relay/"+topic)
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Version != last {
		t.Errorf("GET after the burst: %d %q, want version %d", resp.StatusCode, body, last)
	}
	f := testkit.Fetches(cfg, topic)
	t.Logf("%d changes cost %d fetches", n, f)
	if f < 1 || f > n {
		t.Errorf("%d changes cost %d fetches, want between 1 and %d", n, f, n)
	}
	if st := cfg.Stats().Topics[topic]; st.Sessions != 1 || st.SessionsTotal != 0 {
		t.Errorf("the burst cost sessions: %+v", st)
	}
}

// With max_subscribers = 2, a third stream gets 503 while GETs are still served, and a stream is
// admitted again once one ends (an SSE stream does not read its client: a client gone is noticed at
// the next write, here a keep-alive).
func TestRelayMaxSubscribersRefusesOneMoreStream(t *testing.T) {
	c := testkit.StartRelaySim(t, 1)
	files := map[string]string{"10-relay.toml": testkit.Relay{Servers: testkit.ConfigAddrs(c), Topics: []string{"inventory/dev", "payments/dev"},
		RelayExtra: "max_subscribers = 2\nkeepalive = \"200ms\"", Open: true}.Config(t)}
	e := startRoute(t, files, "appconfig")
	stream := func(path string) (net.Conn, string) {
		t.Helper()
		s, resp, err := testkit.TrySSE(e.addr, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Conn.Close() })
		return s.Conn, resp.Status
	}
	a, s1 := stream("/relay/inventory/dev")
	_, s2 := stream("/relay/payments/dev")
	if s1 != "200 OK" || s2 != "200 OK" {
		t.Fatalf("the first two streams: %q, %q", s1, s2)
	}
	testkit.Eventually(t, "two subscribers", 5*time.Second, func() bool { return e.rr.Status().Subscribers == 2 })
	if _, s3 := stream("/relay/inventory/dev"); s3 != "503 Service Unavailable" {
		t.Fatalf("a third stream: %q, want 503", s3)
	}
	if resp, _ := e.get(t, http.MethodGet, "/relay/inventory/dev"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET at the subscriber limit: %s", resp.Status)
	}
	if n := e.rr.Status().Refused["503"]; n != 1 {
		t.Errorf("refused 503 = %d, want 1", n)
	}
	a.Close()
	testkit.Eventually(t, "the closed stream to leave", 5*time.Second, func() bool { return e.rr.Status().Subscribers == 1 })
	if _, s := stream("/relay/inventory/dev"); s != "200 OK" {
		t.Fatalf("a stream after one ended: %q", s)
	}
}
