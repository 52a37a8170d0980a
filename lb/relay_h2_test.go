package lb

// A relay's Server-Sent Events over HTTP/2 (ALPN h2 on tls_listen, as browsers and the App
// Configuration browser SDKs negotiate it) through a running fairlead in front of the simulated config
// server: an HTTP/2 stream cannot be hijacked, so the front end sends the answer's head as the stream's
// HEADERS and the relay writes each event as DATA as it is published (frontend.StreamAnswer). Real
// sockets, x/net's HTTP/2 client, and raw frames where the test needs a client that misbehaves.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/http2"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// h2Relay is fairlead with relay "appconfig" (client auth) on an HTTP/2 TLS front end, in front of one
// simulated config server.
type h2Relay struct {
	c       *sim.Cluster
	l       *LB
	tlsAddr string
	cfg     *tls.Config
}

// startH2Relay starts it; relayExtra holds more keys of [relays.appconfig], more more keys of [frontend].
func startH2Relay(t *testing.T, relayExtra, more string) *h2Relay {
	t.Helper()
	c := testkit.StartRelaySim(t, 1)
	env := newTLSEnv(t, "relay CA")
	l, _, tlsAddr, _ := startTLSLB(t, relayFiles(t, testkit.ConfigAddrs(c), "", relayExtra, ""),
		env.issue(t, "front", tlsName, "127.0.0.1"), "http2 = true\n"+more)
	return &h2Relay{c: c, l: l, tlsAddr: tlsAddr, cfg: env.clientConfig(tlsName)}
}

// subscribers is how many subscribers the relay has.
func (r *h2Relay) subscribers() int64 {
	rs := r.l.Status().Relays
	if len(rs) != 1 {
		return -1
	}
	return rs[0].Subscribers
}

// h2SSEClient is an HTTP/2-only client over one connection, whose connections the test can close.
type h2SSEClient struct {
	*http.Client
	mu    sync.Mutex
	conns []net.Conn
}

func (r *h2Relay) client(t *testing.T) *h2SSEClient { return newH2SSEClient(t, r.cfg) }

func newH2SSEClient(t *testing.T, cfg *tls.Config) *h2SSEClient {
	c := &h2SSEClient{}
	tr := &http2.Transport{TLSClientConfig: cfg, StrictMaxConcurrentStreams: true,
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: cfg}
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		}}
	t.Cleanup(tr.CloseIdleConnections)
	c.Client = &http.Client{Transport: tr} // no timeout: the streams last
	return c
}

// closeConns closes the client's connections under its streams, as a client that goes away.
func (c *h2SSEClient) closeConns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}

// h2SSE is one SSE stream over HTTP/2: a goroutine parses its events onto events, closed when the
// stream ends (err then says how: nil for a clean end, END_STREAM).
type h2SSE struct {
	resp   *http.Response
	events chan testkit.Event
	mu     sync.Mutex
	raw    strings.Builder // every body byte read
	err    error
}

// openH2SSE subscribes to the relay's topic over c (openH2SSEAt).
func openH2SSE(t *testing.T, c *h2SSEClient, r *h2Relay, topic string) *h2SSE {
	t.Helper()
	return openH2SSEAt(t, c, "https://"+r.tlsAddr+"/relay/"+topic, testkit.RelayClientHeader, testkit.RelayClientKey)
}

// openH2SSEAt sends an SSE request for url with header pairs (name, value, ...) over c and checks the
// answer's head: 200 over HTTP/2, text/event-stream, no-cache. The stream is closed at cleanup.
func openH2SSEAt(t *testing.T, c *h2SSEClient, url string, hdr ...string) *h2SSE {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("SSE over HTTP/2: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
		resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("SSE over HTTP/2: %d over %s, %v; want 200 over HTTP/2.0, text/event-stream, no-cache", resp.StatusCode, resp.Proto, resp.Header)
	}
	s := &h2SSE{resp: resp, events: make(chan testkit.Event, 64)}
	go s.read()
	return s
}

func (s *h2SSE) read() {
	defer close(s.events)
	br := bufio.NewReader(s.resp.Body)
	for {
		ev, err := testkit.ReadEvent(br, func(line string) {
			s.mu.Lock()
			s.raw.WriteString(line)
			s.mu.Unlock()
		})
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
			}
			return
		}
		s.events <- ev
	}
}

func (s *h2SSE) rawString() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

// waitVersion reads events until a snapshot event with an id of at least v, and returns it.
func (s *h2SSE) waitVersion(t *testing.T, v uint64) testkit.Event {
	t.Helper()
	return s.wait(t, "version "+strconv.FormatUint(v, 10), func(ev testkit.Event) bool {
		id, _ := strconv.ParseUint(ev.ID, 10, 64)
		return ev.Event == "snapshot" && id >= v
	})
}

// wait reads events until one that want takes, and returns it.
func (s *h2SSE) wait(t *testing.T, what string, want func(testkit.Event) bool) testkit.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended (%v) waiting for %s; read: %q", s.err, what, testkit.Tail(s.rawString(), 400))
			}
			if want(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s within 5s; read: %q", what, testkit.Tail(s.rawString(), 400))
		}
	}
}

// ended waits for the stream's end and returns how it ended (nil: END_STREAM).
func (s *h2SSE) ended(t *testing.T, within time.Duration) error {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return s.err
			}
		case <-timeout:
			t.Fatalf("the stream is still open after %s", within)
		}
	}
}

// An SSE subscriber over HTTP/2 gets the snapshot, then each change as it is published, and keep-alive
// comments while idle; two subscribers on one connection (two streams) each get it; a stream the client
// resets, and one whose connection the client closes, each remove their subscriber and their writer, the
// other stream serving on. (Not parallel: it counts the streams' writers among all goroutines.)
func TestRelaySSEOverHTTP2StreamsEachChangeAndEndsWithTheClient(t *testing.T) {
	r := startH2Relay(t, `keepalive = "300ms"`, "")
	const topic = "inventory/dev"
	c := r.client(t)
	a, b := openH2SSE(t, c, r, topic), openH2SSE(t, c, r, topic)
	a.waitVersion(t, 1)
	b.waitVersion(t, 1)
	testkit.Eventually(t, "2 subscribers", 5*time.Second, func() bool { return r.subscribers() == 2 })
	if n := streamWriters(); n != 2 {
		t.Fatalf("%d streamed answers' writers, want the two streams'", n)
	}
	if n := r.l.h2.Counts().Conns; n != 1 {
		t.Fatalf("%d HTTP/2 connections, want the two streams on one", n)
	}

	v := testkit.Publish(t, r.c, topic, `{"over":"h2"}`)
	for name, s := range map[string]*h2SSE{"first": a, "second": b} {
		if ev := s.waitVersion(t, v); !strings.Contains(ev.Data, `"over":"h2"`) {
			t.Errorf("the %s stream's change: %+v", name, ev)
		}
	}
	testkit.Eventually(t, "a keep-alive comment on an idle stream", 5*time.Second, func() bool {
		return strings.Contains(a.rawString(), ": keep-alive\n\n")
	})

	// The client resets the first stream (closing its body sends RST_STREAM CANCEL).
	a.resp.Body.Close()
	testkit.Eventually(t, "the reset stream's subscriber and writer to go", 5*time.Second, func() bool {
		return r.subscribers() == 1 && streamWriters() == 1
	})
	v = testkit.Publish(t, r.c, topic, `{"after":"reset"}`)
	if ev := b.waitVersion(t, v); !strings.Contains(ev.Data, `"after":"reset"`) {
		t.Errorf("the stream left open, after the other's reset: %+v", ev)
	}

	// The client goes away: its connection closes under the second stream.
	c.closeConns()
	testkit.Eventually(t, "the closed connection's subscriber and writer to go", 5*time.Second, func() bool {
		return r.subscribers() == 0 && streamWriters() == 0
	})
	if err := b.ended(t, 5*time.Second); err == nil {
		t.Error("the stream whose connection closed ended cleanly, want an error")
	}
}

// At Close (SIGTERM, or the old process's drain after a binary upgrade) an SSE stream over HTTP/2 ends
// cleanly (END_STREAM, after the GOAWAY: its client reconnects elsewhere), and does not hold the
// process until drain_timeout.
func TestRelaySSEOverHTTP2EndsAtCloseWithoutWaitingForDrainTimeout(t *testing.T) {
	t.Parallel()
	r := startH2Relay(t, "", `drain_timeout = "60s"`)
	const topic = "inventory/dev"
	s := openH2SSE(t, r.client(t), r, topic)
	s.waitVersion(t, 1)
	testkit.Eventually(t, "1 subscriber", 5*time.Second, func() bool { return r.subscribers() == 1 })
	closed := make(chan struct{})
	go func() {
		r.l.Close()
		close(closed)
	}()
	if err := s.ended(t, 10*time.Second); err != nil {
		t.Errorf("the stream at Close: %v, want a clean end (END_STREAM)", err)
	}
	select {
	case <-closed:
	case <-time.After(hang):
		t.Fatal("Close waits for drain_timeout although the SSE stream over HTTP/2 ended")
	}
}

// A client that stops reading holds nothing here past its flow-control window: the stream's write
// waits for the window up to the relay's write_timeout, then the stream is reset (CANCEL) and its
// subscriber dropped, as a slow HTTP/1.1 subscriber's connection is; no DATA goes past the window.
func TestRelaySSEOverHTTP2AClientThatStopsReadingIsDropped(t *testing.T) {
	t.Parallel()
	r := startH2Relay(t, `write_timeout = "500ms"`, "")
	const topic = "inventory/dev"
	const window = 20
	h2 := frontendtest.DialH2(t, r.tlsAddr, r.cfg)
	h2.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}) //nolint:errcheck
	h2.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", r.tlsAddr, ":path", "/relay/"+topic,
		"accept", "text/event-stream", strings.ToLower(testkit.RelayClientHeader), testkit.RelayClientKey)
	res := h2.Result(1)
	if res.Status != "200" || res.Field("content-type") != "text/event-stream" || res.Reset != "CANCEL" {
		t.Fatalf("a stream whose client reads nothing: %s, want 200 text/event-stream then RST_STREAM CANCEL", res)
	}
	if len(res.Body) > window {
		t.Errorf("%d bytes of DATA sent, past the client's window of %d", len(res.Body), window)
	}
	testkit.Eventually(t, "the subscriber to go", 5*time.Second, func() bool { return r.subscribers() == 0 })
}

// The App Configuration client SDKs' SSE over HTTP/2 (a browser SDK's): Registration with the
// configuration at once, then SSEConfig_payload with each change as the instance makes it.
func TestAppConfigurationSSEOverHTTP2SendsRegistrationThenEachChange(t *testing.T) {
	t.Parallel()
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, BackupGUID: acBackupID, Topics: acTopics, ExpiresIn: time.Hour})
	var c testkit.Config
	listenAnywhere(&c)
	env.Relay(&c, `response_timeout = "2s"`, `keepalive = "400ms"`)
	tenv := newTLSEnv(t, "appconfig CA")
	_, _, tlsAddr, _ := startTLSLB(t, map[string]string{"10-ibm.toml": c.String()}, tenv.issue(t, "front", tlsName, "127.0.0.1"), "http2 = true")
	const topic = "payments/prod"
	testkit.Eventually(t, "the relay's session and fetches", 10*time.Second, func() bool {
		st := env.Primary.Stats().Topics[topic]
		return st.WSSessions == 1 && st.Fetches >= 2
	})
	url := "https://" + tlsAddr + "/apprapp/feature/v1/instances/" + acGUID + "/environments/prod/sse/subscribe?collection_id=payments"
	s := openH2SSEAt(t, newH2SSEClient(t, tenv.clientConfig(tlsName)), url, "Authorization", acClientKey)
	if ev := s.wait(t, "Registration", func(ev testkit.Event) bool { return true }); ev.Event != "Registration" || testkit.AppConfigVersion(t, []byte(ev.Data)) != 1 {
		t.Fatalf("first event: %+v, want Registration of version 1", ev)
	}
	v := env.Primary.Bump(topic)
	ev := s.wait(t, "SSEConfig_payload", func(ev testkit.Event) bool { return true })
	if ev.Event != "SSEConfig_payload" || testkit.AppConfigVersion(t, []byte(ev.Data)) != v {
		t.Fatalf("after a change: %+v, want SSEConfig_payload of version %d", ev, v)
	}
}

// streamWriters counts the goroutines that write a streamed HTTP/2 answer (an SSE stream over HTTP/2).
func streamWriters() (n int) {
	for _, g := range testkit.Goroutines() {
		if strings.Contains(g, "frontend.(*h2stream).runAnswer") {
			n++
		}
	}
	return n
}

// A browser's EventSource (Chromium's, which negotiates h2 as the App Configuration browser SDKs'
// browsers do) on a relay topic gets the snapshot, then a change as it is published, over HTTP/2.
func TestRelaySSEOverHTTP2ReachesABrowsersEventSource(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	env := newTLSEnv(t, "relay CA")
	const topic = "inventory/dev"
	l, _, tlsAddr, _ := startTLSLB(t, openRelayFiles(t, testkit.ConfigAddrs(c), []string{topic}, ""),
		env.issue(t, "front", tlsName, "127.0.0.1"), "http2 = true")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := browser.Open(t, ctx, chromedp.Flag("ignore-certificate-errors", true))
	// A page of the relay's origin (its snapshot), from which the page subscribes.
	p.Do("open the topic's snapshot", chromedp.Navigate("https://"+tlsAddr+"/relay/"+topic))
	if got := p.Eval(`performance.getEntriesByType('navigation')[0].nextHopProtocol`); got != "h2" {
		t.Fatalf("nextHopProtocol %q, want h2", got)
	}
	p.Eval(`window.got = []; window.es = new EventSource('/relay/` + topic + `');
		es.addEventListener('snapshot', e => got.push(e.lastEventId + ' ' + e.data)); 'subscribed'`)
	p.WaitFor(10*time.Second, "the snapshot in the browser", `got.length >= 1 && got[0].startsWith('1 ')`)
	v := testkit.Publish(t, c, topic, `{"in":"the browser"}`)
	p.WaitFor(10*time.Second, "the change in the browser", `got.some(e => e.startsWith('`+strconv.FormatUint(v, 10)+` ') && e.includes('"in":"the browser"'))`)
	if n := l.h2.Counts().Streams; n < 2 {
		t.Errorf("%d HTTP/2 streams, want the page's and the EventSource's", n)
	}
	p.Eval(`es.close(); 'closed'`)
	testkit.Eventually(t, "the browser's subscriber to go once it closed its EventSource", 5*time.Second, func() bool {
		rs := l.Status().Relays
		return len(rs) == 1 && rs[0].Subscribers == 0
	})
}

// The official App Configuration client SDK (bench/appconfig's, unmodified) in Chromium, whose fetches
// go over h2: a page of fairlead's origin (a route to a server of the page and the SDK's bundle) starts
// the SDK against the relay; setContext resolves with the configuration (the SSE stream's
// Registration), and a change made at the instance reaches it as a configurationUpdate (its
// SSEConfig_payload), on HTTP/2 streams.
func TestTheAppConfigurationSDKInABrowserGetsItsConfigurationAndAChangeOverHTTP2(t *testing.T) {
	t.Parallel()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(filepath.Join(root, "bench", "appconfig", "node_modules", "ibm-appconfiguration-js-client-sdk", "dist", "appconfiguration.js"))
	if err != nil {
		t.Fatalf("the App Configuration JS SDK is not installed: run `npm ci --prefix bench/appconfig --no-audit --no-fund` (%s)", err)
	}
	const topic, property = "payments/prod", sim.AppConfigProperty
	page := `<!doctype html><meta charset="utf-8"><title>sdk</title><script src="/sdk/appconfiguration.js"></script>
<script>
window.lines = [];
const AC = AppConfiguration.default || AppConfiguration;
AC.overrideServiceUrl(location.origin);
const sdk = AC.getInstance();
sdk.setLogLevel('error');
sdk.init('us-south', ` + browser.JSString(acGUID) + `, ` + browser.JSString(acClientKey) + `);
const value = () => sdk.getProperty(` + browser.JSString(property) + `).getCurrentValue('entity-1');
sdk.emitter.on('configurationUpdate', () => lines.push('update ' + value()));
sdk.setContext('payments', 'prod').then(() => lines.push('ready ' + value()), e => lines.push('rejected ' + JSON.stringify(e)));
</script>`
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sdk/index.html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page) //nolint:errcheck
		case "/sdk/appconfiguration.js":
			w.Header().Set("Content-Type", "text/javascript")
			w.Write(bundle) //nolint:errcheck
		default:
			http.NotFound(w, r)
		}
	}))
	defer web.Close()

	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, BackupGUID: acBackupID, Topics: acTopics, ExpiresIn: time.Hour})
	var c testkit.Config
	listenAnywhere(&c)
	env.Relay(&c, `response_timeout = "2s"`, `keepalive = "400ms"`)
	c.Table("pools.web").Set("balance", "roundrobin").Set("servers", []string{strings.TrimPrefix(web.URL, "http://")})
	c.Array("routes").Set("pool", "web").Set("paths", []string{"/sdk"})
	tenv := newTLSEnv(t, "appconfig CA")
	l, _, tlsAddr, _ := startTLSLB(t, map[string]string{"10-ibm.toml": c.String()}, tenv.issue(t, "front", tlsName, "127.0.0.1"), "http2 = true")
	testkit.Eventually(t, "the relay's session and fetches", 10*time.Second, func() bool {
		st := env.Primary.Stats().Topics[topic]
		return st.WSSessions == 1 && st.Fetches >= 2
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := browser.Open(t, ctx, chromedp.Flag("ignore-certificate-errors", true))
	p.Do("open the SDK's page", chromedp.Navigate("https://"+tlsAddr+"/sdk/index.html"))
	if got := p.Eval(`performance.getEntriesByType('navigation')[0].nextHopProtocol`); got != "h2" {
		t.Fatalf("nextHopProtocol %q, want h2", got)
	}
	p.WaitFor(10*time.Second, "setContext to resolve with the configuration", `lines.includes('ready 1')`)
	v := env.Primary.Bump(topic)
	p.WaitFor(10*time.Second, "the change to reach the SDK", `lines.includes('update `+strconv.Itoa(v)+`')`)
	if got := p.Eval(`lines.join('; ')`); strings.Contains(got, "rejected") {
		t.Errorf("the SDK's lines: %s", got)
	}
	rs := l.Status().Relays
	if len(rs) != 1 || rs[0].Subscribers != 1 {
		t.Errorf("relay status %+v, want the browser's one subscriber", rs)
	}
	if n := l.h2.Counts().Streams; n < 3 {
		t.Errorf("%d HTTP/2 streams, want the page's, the bundle's and the SDK's SSE at least", n)
	}
}
