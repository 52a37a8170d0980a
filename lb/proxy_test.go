package lb

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/valyala/fasthttp"
)

// What a server behind fairlead sees of a client's request, and a client of a server's answer
// (headers.go, proxy.go), through a whole fairlead.

// The server sees the client's request as a proxy must pass it on: the Host as sent; X-Forwarded-For,
// -Proto and -Host set by fairlead (from a client not in trusted_proxies its own replaced, its
// X-Forwarded-Port and Forwarded dropped; from a trusted proxy its X-Forwarded-For first and its -Proto
// kept); over HTTP/2, offered by a Go client as browsers offer it, the :authority as Host and
// X-Forwarded-Proto https; no hop-by-hop field (nor those Connection names) but every end-to-end one.
// An upgrade on a route without websocket goes as a plain request (no Upgrade, no Connection), upgrades
// nothing, and fairlead closes its connection after the answer.
func TestProxyPassesARequestOnWithoutHopByHopFieldsAndWithXForwarded(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "")
	trusted, _ := startLB(t, mergeFiles(platformConfig(fr.c, "", ""), map[string]string{"30-trusted.toml": "[frontend]\ntrusted_proxies = [\"127.0.0.0/8\"]\n"}))
	f := func(name string, status int, servedBy, body string, want map[string]string, absent ...string) {
		t.Helper()
		if status != 200 || servedBy != fr.c.Platforms[0].Name {
			t.Errorf("%s: %d from %q, want the leader's 200", name, status, servedBy)
			return
		}
		got := echoedHeaders(body)
		for k, v := range want {
			if len(got[k]) != 1 || got[k][0] != v {
				t.Errorf("%s: the platform received %s %q, want exactly %q", name, k, got[k], v)
			}
		}
		for _, k := range absent {
			if v, ok := got[k]; ok {
				t.Errorf("%s: the platform received %s: %q", name, k, v)
			}
		}
	}
	h1 := func(name string, l *LB, raw string, want map[string]string, absent ...string) {
		t.Helper()
		r := frontendtest.AnswerTo(t, l.Addr(), raw, frontendtest.AnswerWait)
		f(name, r.Status, r.Header.Get("X-Served-By"), string(r.Body), want, absent...)
	}
	h1("hop-by-hop fields", fr.l, "GET /echo-headers HTTP/1.1\r\nHost: thingworx.example.com\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\n"+
		"Keep-Alive: 5\r\nTE: trailers\r\nProxy-Authorization: x\r\nUpgrade: foo\r\nX-Keep: yes\r\n\r\n",
		map[string]string{"host": "thingworx.example.com", "x-keep": "yes"}, "connection", "x-secret", "keep-alive", "te", "proxy-authorization", "upgrade")
	const forged = "GET /echo-headers HTTP/1.1\r\nHost: hostile.example\r\nX-Forwarded-For: 6.6.6.6\r\n" +
		"X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Port: 1\r\nForwarded: for=6.6.6.6\r\n\r\n"
	h1("an untrusted client's X-Forwarded-*", fr.l, forged,
		map[string]string{"x-forwarded-for": "127.0.0.1", "x-forwarded-proto": "http", "x-forwarded-host": "hostile.example"}, "x-forwarded-port", "forwarded")
	h1("a trusted proxy's X-Forwarded-*", trusted, forged, map[string]string{"x-forwarded-for": "6.6.6.6, 127.0.0.1", "x-forwarded-proto": "https"})
	r := frontendtest.Request(t, fr.l.Addr(), "GET /echo-headers HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	f("an upgrade on a plain route", r.Status, r.Header.Get("X-Served-By"), string(r.Body), nil, "upgrade", "connection")
	if !r.Closed {
		t.Errorf("an upgrade on a plain route: fairlead did not close the connection within %s of the answer (%s)", frontendtest.CloseWait, r.After)
	}
	for _, p := range fr.c.Platforms {
		if n := p.Upgrades(); n != 0 {
			t.Errorf("%s upgraded %d connections", p.Name, n)
		}
	}
	h2 := fr.h2(t)
	h2.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", fr.tlsAddr, ":path", "/echo-headers")
	res := h2.Result(1)
	status, _ := strconv.Atoi(res.Status)
	f("HTTP/2", status, res.Field("x-served-by"), res.Body, map[string]string{"x-forwarded-proto": "https"})
	if got := res.Field("x-echo-host"); got != fr.tlsAddr {
		t.Errorf("HTTP/2: the leader saw Host %q, want the :authority %q", got, fr.tlsAddr)
	}
}

// A server's answer reaches the client as a proxy must relay it: its status as it is; its end-to-end
// fields and those RFC 9110 requires a proxy to add (a Date when it had none), but no hop-by-hop one
// (nor those its Connection names) and no fasthttp default (Content-Type), over HTTP/1.1 and HTTP/2
// alike; a 101 to an upgrade with Connection and Upgrade only of its hop-by-hop fields. An unrequested
// 101 gets 502. A server that never answers gets the request once, and the client its 504 after one
// response_timeout: the upstream client does not retry an idempotent request after a timeout (it used
// to, five times).
func TestProxyRelaysAServersAnswerAsAProxyMust(t *testing.T) {
	const sent = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-Internal\r\nX-Internal: 1\r\n" +
		"Keep-Alive: timeout=5\r\nProxy-Authenticate: x\r\nX-Visible: yes\r\n\r\nok"
	up101 := startHostileUpstream(t, hostileAnswerWith("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", true))
	silent := startHostileUpstream(t, func(_ *hostileUpstream, _ net.Conn, br *bufio.Reader, _ string) bool {
		io.Copy(io.Discard, br) //nolint:errcheck // silent until fairlead gives up
		return false
	})
	ws := startHostileUpstream(t, hostileAnswerWith("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade, X-Internal\r\nX-Internal: secret\r\nKeep-Alive: timeout=5\r\n"+
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nX-Keep: yes\r\n\r\n", true))
	wsConf, _, wsCheck, wsRoute := poolConf("ws", "leader", []string{ws.addr}, false)
	fastChecks(wsCheck)
	wsRoute.Set("websocket", true).Set("paths", []string{"/Thingworx/WS"})
	fr := startRawFront(t, hostileAnswerWith(sent, false), "", hostileRawPool("up101", up101.addr, []string{"/up101"}, "", ""),
		hostileRawPool("silent", silent.addr, []string{"/silent"}, `response_timeout = "300ms"`, ""), map[string]string{"05-ws.toml": wsConf.String()})
	l := fr.l

	for _, code := range []int{200, 201, 204, 301, 404, 418, 500} {
		if r := frontendtest.AnswerTo(t, l.Addr(), "GET /x?status="+strconv.Itoa(code)+" HTTP/1.1\r\nHost: a\r\n\r\n", frontendtest.AnswerWait); r.Status != code {
			t.Errorf("status %d relayed as %s", code, r)
		}
	}
	r := frontendtest.AnswerTo(t, l.Addr(), "GET /raw/x HTTP/1.1\r\nHost: a\r\n\r\n", frontendtest.AnswerWait)
	if r.Status != 200 || string(r.Body) != "ok" || r.Header.Get("X-Visible") != "yes" || r.Header.Get("Date") == "" || r.Header.Get("Content-Type") != "" {
		t.Errorf("HTTP/1.1: %s; want 200 \"ok\" with X-Visible and Date and no Content-Type: %q", r, r.Raw)
	}
	for _, h := range []string{"X-Internal", "Keep-Alive", "Proxy-Authenticate"} {
		if v, ok := r.Header[h]; ok {
			t.Errorf("HTTP/1.1: the client received %s: %q", h, v)
		}
	}
	for _, v := range r.Header.Values("Connection") {
		if strings.Contains(strings.ToLower(v), "x-internal") {
			t.Errorf("HTTP/1.1: the client received Connection: %s", v)
		}
	}
	h2 := fr.h2(t)
	h2.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", fr.tlsAddr, ":path", "/raw/x")
	got := h2.Result(1)
	var names []string
	for _, f := range got.Fields {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if got.Status != "200" || got.Body != "ok" || strings.Join(names, ",") != ":status,content-length,date,x-visible" {
		t.Errorf("HTTP/2: %s; want 200 \"ok\" with the fields content-length, x-visible and a date (added: the server sent none), nothing else", got)
	}

	conn := frontendtest.Dial(t, l.Addr())
	conn.WriteRaw("GET /Thingworx/WS HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" + //nolint:errcheck
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if r := conn.Answer(5 * time.Second); r.Status != 101 {
		t.Errorf("an upgrade: got %v, want 101", r)
	} else {
		for _, h := range []string{"X-Internal", "Keep-Alive"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("the 101 carried the hop-by-hop %s: %q", h, v)
			}
		}
		for h, want := range map[string]string{"Upgrade": "websocket", "X-Keep": "yes", "Sec-WebSocket-Accept": "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="} {
			if v := r.Header.Get(h); v != want {
				t.Errorf("the 101's %s = %q, want %q", h, v, want)
			}
		}
	}
	if r := frontendtest.AnswerTo(t, l.Addr(), "GET /up101 HTTP/1.1\r\nHost: a\r\n\r\n", 5*time.Second); r.Status != 502 || up101.requests.Load() == 0 {
		t.Errorf("an unrequested 101: got %s after %d requests reached the server; want 502", r, up101.requests.Load())
	}
	if r := frontendtest.AnswerTo(t, l.Addr(), "GET /silent HTTP/1.1\r\nHost: x\r\n\r\n", 10*time.Second); r.Status != 504 {
		t.Errorf("a silent server: got %v, want 504", r)
	}
	if n := silent.requests.Load(); n != 1 {
		t.Errorf("the silent server received the request %d times, want once", n)
	}
}

// appendUpstreamHead writes the canonical Content-Length without allocating (the proxy path allocates
// nothing per request).
func TestUpstreamContentLengthIsWrittenWithoutAllocating(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	var req fasthttp.Request
	if err := req.Header.Read(bufio.NewReader(strings.NewReader("POST /a HTTP/1.1\r\nHost: a\r\ncontent-length: \t0005 \r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}, nil)
	dst := make([]byte, 0, 1024)
	var head []byte
	if n := testing.AllocsPerRun(100, func() { head, _ = appendUpstreamHead(dst[:0], &ctx, forwardSpec{}) }); n != 0 {
		t.Errorf("%v allocations per head", n)
	}
	if !strings.Contains(string(head), "\r\ncontent-length: 5\r\n") {
		t.Errorf("head %q", head)
	}
}

// An IPv6 server (discovery's AAAA answers find them) is probed and serves: the upstream and check
// dialers are dual-stack.
func TestAnIPv6ServerIsProbedAndServes(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := testkit.StartCluster(t, sim.Options{Platforms: 1, NoConnections: true, PlatformAddrs: []string{addr}, Logf: func(string, ...any) {}})
	l, _ := startLB(t, platformConfig(c, "", ""))
	if code, by := get(t, l, "/x"); code != 200 || by != c.Platforms[0].Name {
		t.Fatalf("GET through an IPv6 leader: %d from %q", code, by)
	}
}
