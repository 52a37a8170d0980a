package main

// Black-box tests of issue 21, points 1, 2 and 4, through a real fairlead process: a client's fault is
// never a server's failure (and a request fairlead can forward after a legal normalisation is
// forwarded), CONNECT is refused at once, and messages pass as they were sent.
//
// Clients write raw bytes on their own connections; where a test must see exactly what reached a
// server, the server is a recorder (startRecorder) that keeps the raw bytes of every request and
// answers a canned raw answer.

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// hardeningWait bounds every wait of these tests for an answer of fairlead or for it to close.
const hardeningWait = 5 * time.Second

// ---- raw clients ----

// rawClient is a client connection to fairlead that writes bytes exactly as given.
type rawClient struct {
	*testkit.RawConn
	t *testing.T
}

func dialRawClient(t *testing.T, addr string) *rawClient {
	t.Helper()
	return &rawClient{testkit.DialRaw(t, addr, hardeningWait), t}
}

// tryDialRawClient is dialRawClient for a goroutine other than the test's: an error is returned.
func tryDialRawClient(t *testing.T, addr string) (*rawClient, error) {
	c, err := testkit.TryDialRaw(t, addr, hardeningWait)
	if err != nil {
		return nil, err
	}
	return &rawClient{c, t}, nil
}

// send writes raw in one write. A failed write is logged only: fairlead may have answered and closed
// already, which the answer shows.
func (c *rawClient) send(raw string) {
	if err := c.Send(raw, hardeningWait); err != nil {
		c.t.Logf("write: %v", err)
	}
}

// answer reads one answer, head and body, within hardeningWait.
func (c *rawClient) answer() (rawMessage, error) {
	c.SetReadDeadline(time.Now().Add(hardeningWait)) //nolint:errcheck
	return readMessage(c.R, true)
}

// closedByPeer reports whether fairlead closes the connection (a read gives EOF or a reset) within
// hardeningWait, with no byte before.
func (c *rawClient) closedByPeer() bool {
	closed, _ := c.ClosedWithin(hardeningWait)
	return closed
}

// roundTrip sends raw on a new connection and returns the answer.
func roundTrip(t *testing.T, addr, raw string) rawMessage {
	t.Helper()
	c := dialRawClient(t, addr)
	defer c.Close()
	c.send(raw)
	m, err := c.answer()
	if err != nil {
		t.Fatalf("no answer to %q: %v", firstLine(raw), err)
	}
	return m
}

// rawMessage is an HTTP message as it was on the wire.
type rawMessage struct {
	line   string      // the start line
	fields [][2]string // name and value of each field line, in order, names exactly as sent
	body   []byte      // the body (decoded when chunked)
	raw    string      // the head as sent, through its empty line
}

func (m rawMessage) String() string { return fmt.Sprintf("%q + %d body bytes", m.raw, len(m.body)) }

// status is the status code of an answer (0 if the start line is not a status line).
func (m rawMessage) status() int {
	parts := strings.SplitN(m.line, " ", 3)
	if len(parts) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(parts[1])
	return n
}

// values are the values of the fields called name (case-insensitively), in order.
func (m rawMessage) values(name string) []string {
	var vs []string
	for _, f := range m.fields {
		if strings.EqualFold(f[0], name) {
			vs = append(vs, f[1])
		}
	}
	return vs
}

// names are the field names, exactly as sent, in order.
func (m rawMessage) names() []string {
	var ns []string
	for _, f := range m.fields {
		ns = append(ns, f[0])
	}
	return ns
}

// hasName reports whether a field is named exactly name (case-sensitively).
func (m rawMessage) hasName(name string) bool {
	for _, f := range m.fields {
		if f[0] == name {
			return true
		}
	}
	return false
}

// readHead reads a message head through its empty line, skipping empty lines before it.
func readHead(br *bufio.Reader) (rawMessage, error) {
	head, err := testkit.ReadHead(br)
	m := rawMessage{raw: head}
	for i, line := range strings.Split(strings.TrimRight(head, "\r\n"), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if i == 0 {
			m.line = line
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		m.fields = append(m.fields, [2]string{name, strings.TrimSpace(value)})
	}
	return m, err
}

// readMessage reads a message, head and body; an answer (answer) without Content-Length or chunked
// framing has a body until the connection closes, a request none.
func readMessage(br *bufio.Reader, answer bool) (rawMessage, error) {
	m, err := readHead(br)
	if err != nil {
		return m, err
	}
	if answer {
		if code := m.status(); code < 200 || code == 204 || code == 304 {
			return m, nil
		}
	}
	switch te, cl := m.values("Transfer-Encoding"), m.values("Content-Length"); {
	case len(te) > 0 && strings.EqualFold(te[len(te)-1], "chunked"):
		if m.body, err = io.ReadAll(httputil.NewChunkedReader(br)); err != nil {
			return m, fmt.Errorf("reading the chunked body: %w", err)
		}
		for { // the trailer section ends with an empty line
			line, err := br.ReadString('\n')
			if err != nil {
				return m, fmt.Errorf("reading the trailer section: %w", err)
			}
			if line == "\r\n" || line == "\n" {
				break
			}
		}
	case len(cl) > 0:
		n, err := strconv.Atoi(cl[0])
		if err != nil {
			return m, fmt.Errorf("bad Content-Length %q", cl[0])
		}
		m.body = make([]byte, n)
		if _, err := io.ReadFull(br, m.body); err != nil {
			return m, fmt.Errorf("reading the body: %w", err)
		}
	case answer:
		if m.body, err = io.ReadAll(br); err != nil {
			return m, fmt.Errorf("reading the body until the close: %w", err)
		}
	}
	return m, nil
}

func firstLine(raw string) string {
	line, _, _ := strings.Cut(raw, "\r\n")
	return line
}

// ---- the recording upstream ----

// recorder is an upstream server that keeps every request it receives as it came on the wire and
// answers each with the raw answer set by setAnswer (by default a 200 with body "ok"). A request with
// an Upgrade header gets a 101 (a WebSocket handshake's) and its connection is then held until closed.
type recorder struct {
	*testkit.RawServer

	mu     sync.Mutex
	answer string
	reqs   []rawMessage
}

const recorderOK = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{answer: recorderOK}
	r.RawServer = testkit.StartRawServer(t, r.serve)
	return r
}

func (r *recorder) setAnswer(raw string) {
	r.mu.Lock()
	r.answer = raw
	r.mu.Unlock()
}

// requests returns the requests received so far.
func (r *recorder) requests() []rawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rawMessage(nil), r.reqs...)
}

func (r *recorder) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		m, err := readMessage(br, false)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, m)
		answer := r.answer
		r.mu.Unlock()
		if keys := m.values("Sec-WebSocket-Key"); len(m.values("Upgrade")) > 0 && len(keys) > 0 {
			sum := sha1.Sum([]byte(keys[0] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
			fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
				base64.StdEncoding.EncodeToString(sum[:]))
			io.Copy(io.Discard, br) //nolint:errcheck // held until either side closes
			return
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
	}
}

// startRecorderProc runs fairlead with a roundrobin pool "rec" over a recorder, routed from the paths
// /x and /y (plain requests) and /ws (WebSocket upgrades), before the leader pool of startProc.
func startRecorderProc(t *testing.T) (*proc, *recorder) {
	t.Helper()
	c := startQuietCluster(t, sim.Options{Platforms: 2, NoConnections: true})
	rec := startRecorder(t)
	var conf testkit.Config
	conf.Table("pools.rec").Set("balance", "roundrobin").Set("servers", []string{rec.Addr}).
		Set("queue_timeout", 2*time.Second).Set("response_timeout", 3*time.Second)
	conf.Array("routes").Set("websocket", true).Set("paths", []string{"/ws"}).Set("pool", "rec")
	conf.Array("routes").Set("paths", []string{"/x", "/y"}).Set("pool", "rec")
	p := startProcFiles(t, c, map[string]string{"05-recorder.toml": conf.String()})
	p.Eventually("the recorder to be up", func() bool { return p.sumSeries(`fairlead_server_up{pool="rec",`) == 1 })
	return p, rec
}

// forwardedAs sends raw on a new connection, checks that the client gets the recorder's answer, and
// returns the one request the recorder received for it.
func forwardedAs(t *testing.T, p *proc, rec *recorder, raw string) rawMessage {
	t.Helper()
	before := len(rec.requests())
	m := roundTrip(t, p.Addr, raw)
	if m.status() != 200 {
		t.Fatalf("%q: answered %s %q, want the recorder's 200", firstLine(raw), m, m.body)
	}
	reqs := rec.requests()
	if len(reqs) != before+1 {
		t.Fatalf("%q: the recorder received %d requests, want 1", firstLine(raw), len(reqs)-before)
	}
	return reqs[before]
}

// ---- metrics ----

// series returns every metric line of p whose name (labels included) starts with prefix: series → value.
func (p *proc) series(prefix string) map[string]float64 {
	resp, err := http.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		p.T.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sumSeries adds the values of the series starting with prefix.
func (p *proc) sumSeries(prefix string) float64 {
	var n float64
	for _, v := range p.series(prefix) {
		n += v
	}
	return n
}

// ---- point 1: what can be forwarded is forwarded ----

// TestARequestWithoutHostIsForwardedWithTheAddressTheClientReached: HTTP/1.0 without Host or with an
// empty one, and a POST over HTTP/1.0 without Host, go upstream as HTTP/1.1 with Host the address the
// client connected to (RFC 9112 section 3.3), the body intact, and the client gets the server's answer.
func TestARequestWithoutHostIsForwardedWithTheAddressTheClientReached(t *testing.T) {
	// Each case in a fairlead process of its own: a case that fails may have taken the recorder down.
	f := func(name, raw, wantLine, wantBody string, more func(t *testing.T, got rawMessage)) {
		t.Run(name, func(t *testing.T) {
			p, rec := startRecorderProc(t)
			got := forwardedAs(t, p, rec, raw)
			if got.line != wantLine {
				t.Errorf("%q went upstream as %q, want %q", firstLine(raw), got.line, wantLine)
			}
			if hosts := got.values("Host"); len(hosts) != 1 || hosts[0] != p.Addr {
				t.Errorf("%q went upstream with Host fields %q, want exactly one, %q", firstLine(raw), hosts, p.Addr)
			}
			if string(got.body) != wantBody {
				t.Errorf("%q went upstream with body %q, want %q", firstLine(raw), got.body, wantBody)
			}
			if more != nil {
				more(t, got)
			}
		})
	}
	f("HTTP/1.0 without Host", "GET /x HTTP/1.0\r\n\r\n", "GET /x HTTP/1.1", "", func(t *testing.T, got rawMessage) {
		// The forwarding fields: X-Forwarded-Host only when the client sent a Host.
		if v := got.values("X-Forwarded-Host"); len(v) > 0 {
			t.Errorf("a request without Host went upstream with X-Forwarded-Host %q", v)
		}
		if v := got.values("X-Forwarded-For"); len(v) != 1 || v[0] != "127.0.0.1" {
			t.Errorf("a request without Host went upstream with X-Forwarded-For %q, want 127.0.0.1", v)
		}
	})
	f("an empty Host over HTTP/1.0", "GET /x HTTP/1.0\r\nHost:\r\n\r\n", "GET /x HTTP/1.1", "", nil)
	f("a Host of one space over HTTP/1.0", "GET /x HTTP/1.0\r\nHost: \r\nAccept: */*\r\n\r\n", "GET /x HTTP/1.1", "", nil)
	f("a POST over HTTP/1.0 without Host", "POST /x HTTP/1.0\r\nContent-Length: 11\r\n\r\nhello world", "POST /x HTTP/1.1", "hello world", nil)
}

// TestAnHTTP11RequestWithAnEmptyHostIsRefusedWith400: an "http" URI with an empty host is invalid (RFC
// 9110 section 4.2.1) and an HTTP/1.1 request must carry a valid Host (RFC 9112 section 3.2): fairlead
// answers 400 itself, naming the reason, and forwards nothing.
func TestAnHTTP11RequestWithAnEmptyHostIsRefusedWith400(t *testing.T) {
	p, rec := startRecorderProc(t)
	for _, raw := range []string{"GET /x HTTP/1.1\r\nHost:\r\n\r\n", "GET /x HTTP/1.1\r\nHost:   \r\nAccept: */*\r\n\r\n"} {
		m := roundTrip(t, p.Addr, raw)
		if m.status() != 400 || !strings.Contains(string(m.body), "empty Host") {
			t.Errorf("%q: answered %s %q, want 400 naming the empty Host", raw, m, m.body)
		}
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("the server received %d requests, want 0", n)
	}
	if n := p.sumSeries(`fairlead_server_failures_total{`); n != 0 {
		t.Errorf("fairlead_server_failures_total: %v, want 0", n)
	}
}

// TestAnAbsoluteFormTargetGoesUpstreamInOriginFormWithItsAuthorityAsHost: RFC 9112 section 3.2.2, the
// authority of an absolute-form target replaces Host.
func TestAnAbsoluteFormTargetGoesUpstreamInOriginFormWithItsAuthorityAsHost(t *testing.T) {
	p, rec := startRecorderProc(t)
	got := forwardedAs(t, p, rec, "GET http://example.com:8081/x?y=1 HTTP/1.1\r\nHost: other\r\n\r\n")
	if got.line != "GET /x?y=1 HTTP/1.1" {
		t.Errorf("request line upstream %q, want %q", got.line, "GET /x?y=1 HTTP/1.1")
	}
	if hosts := got.values("Host"); len(hosts) != 1 || hosts[0] != "example.com:8081" {
		t.Errorf("Host fields upstream %q, want exactly one, %q", hosts, "example.com:8081")
	}
}

// ---- point 1: a client's fault is never a server's failure ----

// faultPool is a pool the client-fault matrix runs against, in a fairlead process of its own whose
// front end has read_timeout 1s and max_body_size 4096, and whose pool has max_conns 1.
type faultPool struct {
	p       *proc
	c       *sim.Cluster
	pool    string            // its name
	path    string            // a path of plain requests routed to it, without a query
	hold    int               // slow requests that take every upstream connection a request may use
	tunnels []*websocket.Conn // open through it during the fault (the sticky pool)
	leader  bool              // the leader pool: its LeaderChecks must not jump
}

const faultFrontend = `
[frontend]
read_timeout = "1s"
max_body_size = 4096
`

// startRoundRobinFaultPool: a roundrobin pool with fall = 2 over the two platforms (both serve), no
// active check (live failures alone take a server down).
func startRoundRobinFaultPool(t *testing.T) *faultPool {
	c := startQuietCluster(t, sim.Options{Platforms: 2, NoConnections: true})
	var conf testkit.Config
	conf.Table("pools.rr").Set("balance", "roundrobin").Set("servers", testkit.PlatformAddrs(c)[:2]).
		Set("max_conns", 1).Set("queue_timeout", 3*time.Second).Set("response_timeout", 3*time.Second)
	conf.Table("pools.rr.check").Set("fall", 2)
	conf.Array("routes").Set("paths", []string{"/rr"}).Set("pool", "rr")
	p := startProcFiles(t, c, map[string]string{"05-rr.toml": conf.String(), "30-frontend.toml": faultFrontend})
	fp := &faultPool{p: p, c: c, pool: "rr", path: "/rr/x", hold: 2}
	p.Eventually("both servers of rr to be up", func() bool { return p.sumSeries(`fairlead_server_up{pool="rr",`) == 2 })
	return fp
}

// startStickyFaultPool: a sticky pool of three connection servers (checked on /health) with a route of
// plain requests (/health) beside its WebSocket route, and six WebSocket tunnels open through it.
// Plain requests carry no X-Asset-Id: they stick by the client's address, so all go to one server.
func startStickyFaultPool(t *testing.T) *faultPool {
	c := startQuietCluster(t, sim.Options{Platforms: 2, Connections: 3})
	var conf testkit.Config
	conf.Table("pools.cx").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c)).
		Set("max_conns", 1).Set("queue_timeout", 3*time.Second).Set("response_timeout", 3*time.Second)
	conf.Table("pools.cx.sticky").Set("keys", []string{"header:X-Asset-Id", "source"})
	conf.Table("pools.cx.check").Set("path", "/health").Set("interval", 200*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", 300*time.Millisecond)
	conf.Array("routes").Set("websocket", true).Set("paths", []string{"/Thingworx/WS"}).Set("pool", "cx")
	conf.Array("routes").Set("paths", []string{"/health"}).Set("pool", "cx")
	p := startProcFiles(t, c, map[string]string{"05-cx.toml": conf.String(), "30-frontend.toml": faultFrontend})
	fp := &faultPool{p: p, c: c, pool: "cx", path: "/health", hold: 1}
	p.Eventually("the three servers of cx to be up", func() bool { return p.sumSeries(`fairlead_server_up{pool="cx",`) == 3 })
	d := websocket.Dialer{HandshakeTimeout: hardeningWait}
	for i := range 6 {
		conn, _, err := d.Dial("ws://"+p.Addr+"/Thingworx/WS", http.Header{"X-Asset-Id": {fmt.Sprintf("asset-%d", i)}})
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		fp.tunnels = append(fp.tunnels, conn)
	}
	fp.checkTunnelsEcho(t)
	return fp
}

// startLeaderFaultPool: the leader pool of startProc over the two platforms, whose steady check
// interval (30s) is far longer than a test, so that any LeaderCheck after the election is a reaction.
func startLeaderFaultPool(t *testing.T) *faultPool {
	c := startQuietCluster(t, sim.Options{Platforms: 2, NoConnections: true})
	p := startProcFiles(t, c, map[string]string{"30-leader.toml": `
[pools.platform]
max_conns = 1
queue_timeout = "3s"
response_timeout = "3s"
[pools.platform.check]
interval = "30s"
fast_interval = "100ms"
` + faultFrontend})
	fp := &faultPool{p: p, c: c, pool: "platform", path: "/Thingworx/x", hold: 1, leader: true}
	p.Eventually("platform1 to lead", func() bool { return p.leader() == c.Platforms[0].Addr })
	return fp
}

// startQuietCluster starts a simulated cluster that logs nothing, closed at the end of the test.
func startQuietCluster(t *testing.T, opts sim.Options) *sim.Cluster {
	t.Helper()
	opts.Logf = func(string, ...any) {}
	c := testkit.StartCluster(t, opts)
	return c
}

// checkTunnelsEcho checks that every tunnel of the pool is open and echoes a message.
func (fp *faultPool) checkTunnelsEcho(t *testing.T) {
	t.Helper()
	for i, conn := range fp.tunnels {
		msg := fmt.Sprintf("still there %d", i)
		conn.SetWriteDeadline(time.Now().Add(hardeningWait)) //nolint:errcheck
		conn.SetReadDeadline(time.Now().Add(hardeningWait))  //nolint:errcheck
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Errorf("tunnel %d: writing: %v", i, err)
			continue
		}
		if _, got, err := conn.ReadMessage(); err != nil || string(got) != msg {
			t.Errorf("tunnel %d: echo %q, %v; want %q", i, got, err, msg)
		}
	}
}

// faultSnapshot is what a fault must not change, read before it.
type faultSnapshot struct {
	failures      map[string]float64 // fairlead_server_failures_total of every server of the pool
	up            map[string]float64 // fairlead_server_up of every server of the pool
	leader        string             // the leader pool's leader
	retries       float64
	attempts      float64 // fairlead_server_requests_total of the pool's servers, summed
	handled       float64 // the pool's fairlead_request_duration_seconds_count
	refused       float64 // fairlead_bad_requests_total, summed
	platformReqs  int64   // requests received by the platforms
	probes        int     // LeaderChecks received by the platforms
	tunnelsClosed float64
}

func (fp *faultPool) snapshot() faultSnapshot {
	p, l := fp.p, `{pool="`+fp.pool+`"`
	s := faultSnapshot{
		failures:      p.series("fairlead_server_failures_total" + l + ","),
		up:            p.series("fairlead_server_up" + l + ","),
		retries:       p.sumSeries("fairlead_pool_retries_total" + l + "}"),
		attempts:      p.sumSeries("fairlead_server_requests_total" + l + ","),
		handled:       p.sumSeries("fairlead_request_duration_seconds_count" + l + "}"),
		refused:       p.sumSeries("fairlead_bad_requests_total"),
		tunnelsClosed: p.sumSeries("fairlead_tunnels_closed_total"),
	}
	if fp.leader {
		s.leader = p.leader()
	}
	for _, pl := range fp.c.Platforms {
		s.platformReqs += pl.Requests()
		s.probes += len(pl.Probes())
	}
	return s
}

// settle waits until fairlead has finished with the handled requests of a fault (or refused one), none
// is in flight to a server of the pool and, with closed, every upstream connection of the pool is
// closed (the connection of an answer whose client left mid-body is not used again: fairlead is done
// with the answer).
func (fp *faultPool) settle(before faultSnapshot, handled int, closed bool) {
	p, l := fp.p, `{pool="`+fp.pool+`"`
	p.Eventually("fairlead to finish with the fault's requests", func() bool {
		done := p.sumSeries("fairlead_request_duration_seconds_count"+l+"}") >= before.handled+float64(handled) ||
			p.sumSeries("fairlead_bad_requests_total") > before.refused
		return done && p.sumSeries("fairlead_server_in_flight"+l+",") == 0 &&
			(!closed || p.sumSeries("fairlead_server_upstream_conns"+l+",") == 0)
	})
}

// checkNothingReported checks that the fault reported no server: no failure counted, no retry, every
// server as up as it was (every one in the roundrobin and sticky pools, the leader in the leader pool)
// and the same leader, at most forwarded attempts (and requests reaching the platforms), no LeaderCheck
// burst, every tunnel open and echoing; and that the pool still serves.
func (fp *faultPool) checkNothingReported(t *testing.T, before faultSnapshot, forwarded int) {
	t.Helper()
	after := fp.snapshot()
	for series, n := range after.failures {
		if n != before.failures[series] {
			t.Errorf("%s went from %v to %v", series, before.failures[series], n)
		}
	}
	if after.retries != before.retries {
		t.Errorf("the pool retried %v times", after.retries-before.retries)
	}
	for series, up := range after.up {
		if up != before.up[series] {
			t.Errorf("%s went from %v to %v", series, before.up[series], up)
		}
	}
	if after.leader != before.leader {
		t.Errorf("the leader went from %q to %q", before.leader, after.leader)
	}
	if d := after.attempts - before.attempts; d > float64(forwarded) {
		t.Errorf("%v attempts to the pool's servers, want at most %d", d, forwarded)
	}
	if d := after.platformReqs - before.platformReqs; d > int64(forwarded) {
		t.Errorf("the platforms received %d requests, want at most %d", d, forwarded)
	}
	if d := after.probes - before.probes; fp.leader && d > 2 {
		// Each platform may have had one probe under way at the election; more is a reaction.
		t.Errorf("the platforms received %d LeaderChecks during the fault, want at most 2", d)
	} else if fp.leader {
		t.Logf("%d LeaderChecks during the fault", d)
	}
	if after.tunnelsClosed != before.tunnelsClosed {
		t.Errorf("%v tunnels closed", after.tunnelsClosed-before.tunnelsClosed)
	}
	fp.checkTunnelsEcho(t)
	t.Logf("during the fault: %v attempts, %d requests reached the platforms, %v refused by the front end",
		after.attempts-before.attempts, after.platformReqs-before.platformReqs, after.refused-before.refused)
	if m := roundTrip(t, fp.p.Addr, "GET "+fp.path+" HTTP/1.1\r\nHost: fairlead\r\n\r\n"); m.status() != 200 {
		t.Errorf("a good request after the fault: %s", m)
	}
}

// clientFault is one way a request can end by the client's fault.
type clientFault struct {
	name string
	// handled is the number of requests of the fault fairlead handles (the fault's and those it needs);
	// forwarded is the most of them that may reach a server (each once). -1 for both: the pool's hold
	// slow requests and the fault's.
	handled, forwarded int
	run                func(t *testing.T, fp *faultPool)
	// closed: fairlead is done with the fault once the pool's upstream connections are closed.
	closed bool
}

// wantAnswer sends raw on a new connection and checks the answer's status is want. It may run in a
// goroutine of its own.
func wantAnswer(t *testing.T, fp *faultPool, raw string, want int) {
	t.Helper()
	c, err := tryDialRawClient(t, fp.p.Addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	c.send(raw)
	m, err := c.answer()
	if err != nil || m.status() != want {
		t.Errorf("%q: answered %s, %v; want %d", firstLine(raw), m, err, want)
	}
}

// sendAndClose sends raw on a new connection and closes it at once.
func sendAndClose(t *testing.T, fp *faultPool, raw string) {
	c := dialRawClient(t, fp.p.Addr)
	c.send(raw)
	c.Close()
}

// inFlight is the number of requests in flight to the pool's servers.
func (fp *faultPool) inFlight() float64 {
	return fp.p.sumSeries(`fairlead_server_in_flight{pool="` + fp.pool + `",`)
}

// silentMidBody sends a POST whose head ends with framing and the start of a body, then stays silent:
// fairlead answers 408 (or closes) after read_timeout, never an error of a server.
func silentMidBody(t *testing.T, fp *faultPool, framing string) {
	c := dialRawClient(t, fp.p.Addr)
	defer c.Close()
	c.send("POST " + fp.path + " HTTP/1.1\r\nHost: fairlead\r\n" + framing)
	if m, err := c.answer(); err == nil && m.status() != 408 {
		t.Errorf("a client silent mid-body: answered %s, want 408 or a close", m)
	} else if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a client silent mid-body: neither an answer nor a close within %s: %v", hardeningWait, err)
	}
}

var clientFaults = []clientFault{
	{name: "no Host over HTTP/1.0", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		wantAnswer(t, fp, "GET "+fp.path+" HTTP/1.0\r\n\r\n", 200)
	}},
	{name: "an empty Host over HTTP/1.0", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		wantAnswer(t, fp, "GET "+fp.path+" HTTP/1.0\r\nHost:\r\n\r\n", 200)
	}},
	{name: "an empty Host over HTTP/1.1 (refused)", handled: 0, forwarded: 0, run: func(t *testing.T, fp *faultPool) {
		wantAnswer(t, fp, "GET "+fp.path+" HTTP/1.1\r\nHost:\r\n\r\n", 400)
	}},
	{name: "a POST over HTTP/1.0 without Host", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		wantAnswer(t, fp, "POST "+fp.path+" HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello", 200)
	}},
	{name: "a body cut mid-way", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		sendAndClose(t, fp, "POST "+fp.path+" HTTP/1.1\r\nHost: fairlead\r\nContent-Length: 1000\r\n\r\n0123456789")
	}},
	{name: "a chunked body cut mid-chunk", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		sendAndClose(t, fp, "POST "+fp.path+" HTTP/1.1\r\nHost: fairlead\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n01234")
	}},
	{name: "a client silent mid-body until read_timeout", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		silentMidBody(t, fp, "Content-Length: 1000\r\n\r\n0123456789")
	}},
	{name: "a client silent mid-chunk until read_timeout", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		// A chunked body streams: the request is under way to the server when the client falls silent.
		silentMidBody(t, fp, "Transfer-Encoding: chunked\r\n\r\n10\r\n01234")
	}},
	{name: "a chunked body over max_body_size", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		wantAnswer(t, fp, "POST "+fp.path+" HTTP/1.1\r\nHost: fairlead\r\nTransfer-Encoding: chunked\r\n\r\n2000\r\n"+
			strings.Repeat("z", 0x2000)+"\r\n0\r\n\r\n", 413)
	}},
	{name: "a client closing while queued", handled: -1, forwarded: -1, run: func(t *testing.T, fp *faultPool) {
		// hold slow requests take every upstream connection (max_conns = 1); the next request waits.
		var wg sync.WaitGroup
		for range fp.hold {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wantAnswer(t, fp, "GET "+fp.path+"?delay=1s HTTP/1.1\r\nHost: fairlead\r\n\r\n", 200)
			}()
		}
		defer wg.Wait()
		fp.p.Eventually("the slow requests to hold every connection", func() bool { return fp.inFlight() == float64(fp.hold) })
		requests := fmt.Sprintf(`fairlead_pool_requests_total{pool="%s"}`, fp.pool)
		n := fp.p.sumSeries(requests)
		c := dialRawClient(t, fp.p.Addr)
		c.send("GET " + fp.path + " HTTP/1.1\r\nHost: fairlead\r\n\r\n")
		fp.p.Eventually("the request to be queued", func() bool { return fp.p.sumSeries(requests) > n })
		c.Close()
	}},
	{name: "a client closing while waiting for the answer", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		c := dialRawClient(t, fp.p.Addr)
		c.send("GET " + fp.path + "?delay=1s HTTP/1.1\r\nHost: fairlead\r\n\r\n")
		fp.p.Eventually("the request to reach its server", func() bool { return fp.inFlight() == 1 })
		c.Close()
	}},
	{name: "a client closing while the answer streams", handled: 1, forwarded: 1, run: func(t *testing.T, fp *faultPool) {
		c := dialRawClient(t, fp.p.Addr)
		// 64 MiB: far more than the socket buffers between the server and the client hold, so the client
		// leaves while fairlead still streams.
		c.send("GET " + fp.path + "?bytes=67108864 HTTP/1.1\r\nHost: fairlead\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(hardeningWait)) //nolint:errcheck
		if m, err := readHead(c.R); err != nil || m.status() != 200 {
			t.Errorf("the large answer: %s, %v", m, err)
		}
		if _, err := io.ReadFull(c.R, make([]byte, 8<<10)); err != nil {
			t.Errorf("reading the start of the large answer: %v", err)
		}
		c.Close()
	}, closed: true},
}

// TestClientFaultsAreNeverServerFailures runs every client fault against a roundrobin pool with
// fall = 2, a sticky pool of connection servers with six open tunnels and the leader pool, each time
// in a fresh fairlead process, and checks that no server was reported: no failure counted, no retry,
// every server up, no tunnel closed, no LeaderCheck burst, no request to another server.
func TestClientFaultsAreNeverServerFailures(t *testing.T) {
	pools := []struct {
		name  string
		start func(t *testing.T) *faultPool
	}{
		{"roundrobin pool with fall 2", startRoundRobinFaultPool},
		{"sticky pool with six tunnels", startStickyFaultPool},
		{"leader pool", startLeaderFaultPool},
	}
	for _, pool := range pools {
		t.Run(pool.name, func(t *testing.T) {
			for _, fault := range clientFaults {
				t.Run(fault.name, func(t *testing.T) {
					fp := pool.start(t)
					handled, forwarded := fault.handled, fault.forwarded
					if handled < 0 { // the queued fault: the slow requests and the queued one
						handled, forwarded = fp.hold+1, fp.hold+1
					}
					before := fp.snapshot()
					fault.run(t, fp)
					fp.settle(before, handled, fault.closed)
					fp.checkNothingReported(t, before, forwarded)
				})
			}
		})
	}
}

// TestOneHostlessRequestEvery200msTakesNoServerDown is the measurement: a roundrobin pool with
// fall = 2 serves good requests for 2 s while a client sends `GET /rr HTTP/1.0` without Host every
// 0.2 s. Every request gets 200, and no server is ever down or counted failing.
func TestOneHostlessRequestEvery200msTakesNoServerDown(t *testing.T) {
	c := startQuietCluster(t, sim.Options{Platforms: 2, NoConnections: true})
	var conf testkit.Config
	conf.Table("pools.rr").Set("balance", "roundrobin").Set("servers", testkit.PlatformAddrs(c)[:2]).
		Set("queue_timeout", time.Second)
	conf.Table("pools.rr.check").Set("fall", 2)
	conf.Array("routes").Set("paths", []string{"/rr"}).Set("pool", "rr")
	p := startProcFiles(t, c, map[string]string{"05-rr.toml": conf.String()})
	p.Eventually("both servers of rr to be up", func() bool { return p.sumSeries(`fairlead_server_up{pool="rr",`) == 2 })

	stop := make(chan struct{})
	var good, bad []int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl := &http.Client{Timeout: hardeningWait}
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := cl.Get("http://" + p.Addr + "/rr/good")
			if err != nil {
				good = append(good, 0)
				continue
			}
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			good = append(good, resp.StatusCode)
		}
	}()
	down := map[string]bool{}
	var badMu sync.Mutex
	var badWG sync.WaitGroup
	tick := time.NewTicker(200 * time.Millisecond)
	for range 10 {
		<-tick.C
		badWG.Add(1)
		go func() { // one every 0.2 s, however long its answer takes
			defer badWG.Done()
			status := 0
			if cl, err := tryDialRawClient(t, p.Addr); err == nil {
				cl.send("GET /rr HTTP/1.0\r\n\r\n")
				if m, err := cl.answer(); err == nil {
					status = m.status()
				}
				cl.Close()
			}
			badMu.Lock()
			bad = append(bad, status)
			badMu.Unlock()
		}()
		for series, up := range p.series(`fairlead_server_up{pool="rr",`) {
			if up != 1 {
				down[series] = true
			}
		}
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	badWG.Wait()

	for _, s := range bad {
		if s != 200 {
			t.Errorf("the requests without Host were answered %v, want 200 each", bad)
			break
		}
	}
	n200 := 0
	for _, s := range good {
		if s == 200 {
			n200++
		}
	}
	if n200 != len(good) || len(good) == 0 {
		t.Errorf("%d of %d good requests got 200", n200, len(good))
	}
	if len(down) > 0 {
		t.Errorf("servers seen down: %v", down)
	}
	for series, n := range p.series(`fairlead_server_failures_total{pool="rr",`) {
		if n != 0 {
			t.Errorf("%s = %v", series, n)
		}
	}
	t.Logf("%d good requests in 2 s, %d of them 200; requests without Host answered %v", len(good), n200, bad)
}

// ---- point 2: CONNECT ----

// TestCONNECTIsRefusedAtOnceWith405AndReachesNoServer: CONNECT, in authority form or aimed at a path of
// a plain route, a WebSocket route or a relay, gets 405 at once with Allow (GET, not CONNECT) and
// Connection: close, the connection closes, nothing reaches a server and each is counted in
// fairlead_bad_requests_total{code="405"}.
func TestCONNECTIsRefusedAtOnceWith405AndReachesNoServer(t *testing.T) {
	c := startQuietCluster(t, sim.Options{Platforms: 2, Connections: 2, ConfigServers: 1})
	if _, err := c.PublishConfig("inventory/dev", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	rec := startRecorder(t)
	var conf testkit.Config
	conf.Table("pools.rec").Set("balance", "roundrobin").Set("servers", []string{rec.Addr})
	conf.Table("pools.appconfig").Set("servers", []string{c.Configs[0].Addr})
	conf.Table("relays.appconfig").Set("pool", "appconfig").Set("path", "/relay/{collection}/{environment}").
		Set("snapshot", "/config/{collection}/{environment}").Set("events", "/events/{collection}/{environment}").
		Set("topics", []string{"inventory/dev"})
	conf.Array("routes").Set("paths", []string{"/Thingworx"}).Set("pool", "platform")
	conf.Array("routes").Set("paths", []string{"/rec"}).Set("pool", "rec")
	p := startProcFiles(t, c, map[string]string{"05-connect.toml": cxPool(c) + conf.String()})
	p.Eventually("platform1 to lead", func() bool { return p.leader() == c.Platforms[0].Addr })

	platformReqs := func() (n int64) {
		for _, pl := range c.Platforms {
			n += pl.Requests()
		}
		return n
	}
	upgrades := func() (n int64) {
		for _, s := range c.Connections {
			n += s.Upgrades()
		}
		return n
	}
	fetches := func() int64 { return c.Configs[0].Stats().Topics["inventory/dev"].Fetches }
	reqs0, upgrades0, fetches0 := platformReqs(), upgrades(), fetches()
	refused0 := p.sumSeries(`fairlead_bad_requests_total{code="405"}`)

	cases := map[string]string{
		"authority form":  "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"a platform path": "CONNECT /Thingworx/x HTTP/1.1\r\nHost: fairlead\r\n\r\n",
		"a WebSocket route's path": "CONNECT /Thingworx/WS HTTP/1.1\r\nHost: fairlead\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
		"a relay's path": "CONNECT /relay/inventory/dev HTTP/1.1\r\nHost: fairlead\r\n\r\n",
	}
	t.Run("each", func(t *testing.T) {
		for name, raw := range cases {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cl := dialRawClient(t, p.Addr)
				cl.send(raw)
				m, err := cl.answer()
				if err != nil {
					t.Fatalf("no answer within %s: %v", hardeningWait, err)
				}
				if m.status() != 405 {
					t.Errorf("answered %s, want 405", m)
				}
				var allowed []string
				for _, v := range m.values("Allow") {
					for _, method := range strings.Split(v, ",") {
						allowed = append(allowed, strings.TrimSpace(method))
					}
				}
				if !containsFold(allowed, "GET") || containsFold(allowed, "CONNECT") {
					t.Errorf("Allow %q, want GET listed and CONNECT not", m.values("Allow"))
				}
				if conn := m.values("Connection"); len(conn) != 1 || !strings.EqualFold(conn[0], "close") {
					t.Errorf("Connection %q, want close", conn)
				}
				if !cl.closedByPeer() {
					t.Errorf("fairlead did not close the connection after the 405")
				}
			})
		}
	})
	if d := platformReqs() - reqs0; d != 0 {
		t.Errorf("the platforms received %d requests", d)
	}
	if n := rec.Accepted(); n != 0 {
		t.Errorf("%d upstream connections opened to the recorder", n)
	}
	if d := upgrades() - upgrades0; d != 0 {
		t.Errorf("the connection servers received %d upgrades", d)
	}
	if d := fetches() - fetches0; d != 0 {
		t.Errorf("the config server received %d fetches", d)
	}
	if d := p.sumSeries(`fairlead_bad_requests_total{code="405"}`) - refused0; d != float64(len(cases)) {
		t.Errorf(`fairlead_bad_requests_total{code="405"} went up by %v, want %d`, d, len(cases))
	}
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// ---- point 4: messages pass as they were sent ----

// TestAnAnswerWithoutServerOrContentTypeGetsNeither: fairlead invents no Server and no Content-Type for
// a server's answer, and its body passes byte for byte.
func TestAnAnswerWithoutServerOrContentTypeGetsNeither(t *testing.T) {
	p, rec := startRecorderProc(t)
	rec.setAnswer("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\x00\x01\x02\x03")
	m := roundTrip(t, p.Addr, "GET /x HTTP/1.1\r\nHost: fairlead\r\n\r\n")
	if m.status() != 200 || string(m.body) != "\x00\x01\x02\x03" {
		t.Fatalf("answer %s, body %q; want 200 with the server's four bytes", m, m.body)
	}
	for _, name := range []string{"Server", "Content-Type"} {
		if v := m.values(name); len(v) > 0 {
			t.Errorf("the answer carries %s %q, which the server did not send", name, v)
		}
	}
}

// TestAnAnswerGetsOneDateAndKeepsItsOwn: RFC 9110 section 6.6.1, a proxy adds Date to an answer without
// one, and passes one that has it unchanged.
func TestAnAnswerGetsOneDateAndKeepsItsOwn(t *testing.T) {
	p, rec := startRecorderProc(t)
	m := roundTrip(t, p.Addr, "GET /x HTTP/1.1\r\nHost: fairlead\r\n\r\n")
	if dates := m.values("Date"); len(dates) != 1 {
		t.Errorf("an answer without Date reached the client with Date fields %q, want exactly one", dates)
	} else if _, err := http.ParseTime(dates[0]); err != nil {
		t.Errorf("the Date added, %q, is not an HTTP-date: %v", dates[0], err)
	}

	const date = "Tue, 01 Jan 2030 00:00:00 GMT"
	rec.setAnswer("HTTP/1.1 200 OK\r\nDate: " + date + "\r\nContent-Length: 2\r\n\r\nok")
	m = roundTrip(t, p.Addr, "GET /x HTTP/1.1\r\nHost: fairlead\r\n\r\n")
	if dates := m.values("Date"); len(dates) != 1 || dates[0] != date {
		t.Errorf("an answer with Date %q reached the client with Date fields %q", date, dates)
	}
}

// TestFieldNamesKeepTheirCaseBothWays: ordinary field names reach the server and the client spelled
// as they were sent.
func TestFieldNamesKeepTheirCaseBothWays(t *testing.T) {
	p, rec := startRecorderProc(t)
	rec.setAnswer("HTTP/1.1 200 OK\r\nx-thingworx-session: a\r\nX-MiXeD: b\r\nContent-Length: 2\r\n\r\nok")
	got := forwardedAs(t, p, rec, "GET /x HTTP/1.1\r\nHost: fairlead\r\nx-lower: 1\r\nX-MiXeD-CaSe: 2\r\nsec-websocket-key: abc\r\n\r\n")
	for _, name := range []string{"x-lower", "X-MiXeD-CaSe", "sec-websocket-key"} {
		if !got.hasName(name) {
			t.Errorf("request field %q reached the server as %q", name, got.names())
		}
	}
	m := roundTrip(t, p.Addr, "GET /x HTTP/1.1\r\nHost: fairlead\r\n\r\n")
	for _, name := range []string{"x-thingworx-session", "X-MiXeD"} {
		if !m.hasName(name) {
			t.Errorf("answer field %q reached the client as %q", name, m.names())
		}
	}
}

// TestAWebSocketUpgradeKeepsTheClientsFieldSpelling: the opening handshake reaches the connection
// server with Sec-WebSocket-Key and Sec-WebSocket-Version spelled as the client spelled them.
func TestAWebSocketUpgradeKeepsTheClientsFieldSpelling(t *testing.T) {
	p, rec := startRecorderProc(t)
	c := dialRawClient(t, p.Addr)
	c.send("GET /ws HTTP/1.1\r\nHost: fairlead\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(hardeningWait)) //nolint:errcheck
	if m, err := readHead(c.R); err != nil || m.status() != 101 {
		t.Fatalf("the upgrade: %s, %v; want 101", m, err)
	}
	reqs := rec.requests()
	if len(reqs) != 1 {
		t.Fatalf("the connection server received %d requests, want the upgrade", len(reqs))
	}
	for _, name := range []string{"Sec-WebSocket-Key", "Sec-WebSocket-Version"} {
		if !reqs[0].hasName(name) {
			t.Errorf("%q reached the connection server as %q", name, reqs[0].names())
		}
	}
}

// TestARequestGetsNoInventedFraming: a POST without Content-Type gets none, a DELETE or OPTIONS
// without a body gets no Content-Length or Transfer-Encoding.
func TestARequestGetsNoInventedFraming(t *testing.T) {
	p, rec := startRecorderProc(t)
	got := forwardedAs(t, p, rec, "POST /x HTTP/1.1\r\nHost: fairlead\r\nContent-Length: 4\r\n\r\n\x00\x01\x02\x03")
	if v := got.values("Content-Type"); len(v) > 0 {
		t.Errorf("a POST without Content-Type reached the server with Content-Type %q", v)
	}
	if string(got.body) != "\x00\x01\x02\x03" {
		t.Errorf("the POST's body reached the server as %q", got.body)
	}
	for _, method := range []string{"DELETE", "OPTIONS"} {
		got := forwardedAs(t, p, rec, method+" /x HTTP/1.1\r\nHost: fairlead\r\n\r\n")
		for _, name := range []string{"Content-Length", "Transfer-Encoding"} {
			if v := got.values(name); len(v) > 0 {
				t.Errorf("a %s without a body reached the server with %s %q", method, name, v)
			}
		}
	}
}

// TestForwardedRequestFieldsKeepTheClientsOrder: the fields of a request reach the server in the order
// the client sent them (the fields fairlead adds aside), repeated fields included.
func TestForwardedRequestFieldsKeepTheClientsOrder(t *testing.T) {
	p, rec := startRecorderProc(t)
	sent := [][2]string{
		{"Host", "fairlead"}, {"X-B", "1"}, {"User-Agent", "t/1"}, {"X-Dup", "first"}, {"Accept", "*/*"},
		{"Cookie", "c=1"}, {"X-Dup", "second"}, {"Content-Type", "text/plain"}, {"X-A", "2"}, {"Content-Length", "2"},
	}
	var b strings.Builder
	b.WriteString("POST /x HTTP/1.1\r\n")
	for _, f := range sent {
		b.WriteString(f[0] + ": " + f[1] + "\r\n")
	}
	b.WriteString("\r\nhi")
	got := forwardedAs(t, p, rec, b.String())
	var order []string
	for _, f := range got.fields {
		if !strings.HasPrefix(strings.ToLower(f[0]), "x-forwarded-") {
			order = append(order, f[0]+": "+f[1])
		}
	}
	var want []string
	for _, f := range sent {
		want = append(want, f[0]+": "+f[1])
	}
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Errorf("the fields reached the server as\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
}

// TestHopByHopFieldsAreRemovedAndForwardingFieldsAdded: Connection and the fields it names,
// Keep-Alive, TE, Trailer, Upgrade (on a route that is not a WebSocket route), Proxy-Authorization
// and Proxy-Connection do not reach the server; X-Forwarded-For, -Proto and -Host are added (-Host
// only when the client sent a Host: TestARequestWithoutHostIsForwardedWithTheAddressTheClientReached).
func TestHopByHopFieldsAreRemovedAndForwardingFieldsAdded(t *testing.T) {
	p, rec := startRecorderProc(t)
	got := forwardedAs(t, p, rec, "GET /x HTTP/1.1\r\nHost: front.example\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"+
		"Keep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nProxy-Authorization: Basic eDp5\r\n"+
		"Proxy-Connection: keep-alive\r\nX-Kept: yes\r\n\r\n")
	for _, name := range []string{"X-Hop", "Keep-Alive", "TE", "Trailer", "Upgrade", "Proxy-Authorization", "Proxy-Connection"} {
		if v := got.values(name); len(v) > 0 {
			t.Errorf("hop-by-hop %s %q reached the server", name, v)
		}
	}
	for _, v := range got.values("Connection") {
		if strings.Contains(strings.ToLower(v), "x-hop") {
			t.Errorf("the client's Connection %q reached the server", v)
		}
	}
	if v := got.values("X-Kept"); len(v) != 1 || v[0] != "yes" {
		t.Errorf("X-Kept reached the server as %q", v)
	}
	want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "front.example"}
	for name, value := range want {
		if v := got.values(name); len(v) != 1 || v[0] != value {
			t.Errorf("%s reached the server as %q, want %q", name, v, value)
		}
	}
}

// ---- point 6: a hung leader does not hold GETs for a minute ----

// TestGETsWaitingOnAHungLeaderAreAnsweredByTheNewLeaderAndAPOSTIsNeverSentTwice: the leader hangs
// (accepts, never answers) while a GET and a POST wait for it, with scheduled LeaderChecks 30-40 s
// apart and response_timeout 8 s. The unanswered traffic gets the leader probed at once; once the
// checks elect platform2 the GET is sent there and answered, long before response_timeout, and counted
// in fairlead_pool_inflight_failovers_total; the POST is never sent to platform2 and ends with its own
// 504.
func TestGETsWaitingOnAHungLeaderAreAnsweredByTheNewLeaderAndAPOSTIsNeverSentTwice(t *testing.T) {
	c := startQuietCluster(t, sim.Options{Platforms: 2, NoConnections: true, DeliveryHeader: "X-Id"})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	p := startProcFiles(t, c, map[string]string{"20-slow-checks.toml": `
[pools.platform]
response_timeout = "8s"
[pools.platform.check]
interval = "30s"
interval_max = "40s"
timeout = "500ms"
fast_interval = "100ms"
`})
	p.Eventually("platform1 to lead", func() bool { return p.leader() == p1.Addr })
	if err := p1.SetState(sim.Hung); err != nil {
		t.Fatal(err)
	}
	if err := p2.SetState(sim.Leader); err != nil {
		t.Fatal(err)
	}

	type reply struct {
		m   rawMessage
		err error
	}
	send := func(raw string) <-chan reply {
		ch := make(chan reply, 1)
		go func() {
			cl, err := tryDialRawClient(t, p.Addr)
			if err != nil {
				ch <- reply{err: err}
				return
			}
			defer cl.Close()
			cl.send(raw)
			cl.SetReadDeadline(time.Now().Add(20 * time.Second)) //nolint:errcheck // past response_timeout
			m, err := readMessage(cl.R, true)
			ch <- reply{m, err}
		}()
		return ch
	}
	get := send("GET /Thingworx/Things HTTP/1.1\r\nHost: fairlead\r\nX-Id: get-1\r\n\r\n")
	post := send("POST /Thingworx/Things HTTP/1.1\r\nHost: fairlead\r\nX-Id: post-1\r\nContent-Length: 4\r\n\r\nbody")

	r := <-get
	if r.err != nil || r.m.status() != 200 || strings.Join(r.m.values("X-Served-By"), ",") != p2.Name {
		t.Fatalf("GET: %s (%v); want 200 from %s before its response_timeout", r.m, r.err, p2.Name)
	}
	select {
	case <-post:
		t.Fatal("the POST ended before the GET was answered: the GET waited out its response_timeout")
	default:
	}
	if n := p.sumSeries(`fairlead_pool_inflight_failovers_total{pool="platform"`); n != 1 {
		t.Errorf("fairlead_pool_inflight_failovers_total = %v, want 1", n)
	}
	r = <-post
	if r.err != nil || r.m.status() != 504 {
		t.Fatalf("POST: %s (%v); want 504 after its own response_timeout", r.m, r.err)
	}
	if d := c.Deliveries(); d["get-1"] != 2 || d["post-1"] != 1 || p2.Deliveries()["post-1"] != 0 {
		t.Errorf("deliveries %v (platform2 %v): want the GET on both platforms, the POST on platform1 only", d, p2.Deliveries())
	}
}
