package lb

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/fasthttp/websocket"
)

// Hostile input through a whole fairlead: every test sends raw bytes over TCP to fairlead's front end,
// reads the answer with a deadline and checks its status, whether fairlead then closed the connection,
// and what the servers behind it received (helpers in hostile_helpers_test.go). What the front end
// refuses, and how (status, close, counts, timeouts, limits), is tested in detail against lb/frontend
// with a trivial handler (lb/frontend/hostile_test.go, h2conn_test.go); here, that a refused request
// reaches no server and what lb itself refuses or forwards.

// Every kind of request the front end refuses, over HTTP/1.1 and HTTP/2, reaches no server behind a
// whole fairlead (a recording server: it sees every head fairlead sends), and each refusal is counted by
// its code on /metrics; requests the front end lets pass (valid chunk extensions, a body of exactly
// max_body_size, targets in absolute form) reach it whole.
func TestHostileRefusalsReachNoServer(t *testing.T) {
	u, l, env, tlsAddr, _ := h2RawLB(t, hostileRecordBody, "max_header_size = 1024\nmax_body_size = 1024\nheader_timeout = \"1s\"")
	get := "GET /raw/h HTTP/1.1\r\nHost: a\r\n"
	post := "POST /raw/h HTTP/1.1\r\nHost: a\r\n"
	chunked := post + "Transfer-Encoding: chunked\r\n\r\n"
	chunks := func(total int) string {
		var b strings.Builder
		for ; total > 0; total -= 512 {
			fmt.Fprintf(&b, "200\r\n%s\r\n", strings.Repeat("b", 512))
		}
		return b.String() + "0\r\n\r\n"
	}
	before, _ := hostileBadRequests(t, l)
	refused := map[string]float64{}
	f := func(name string, send func(c *frontendtest.Conn), want int, bodyBytes string) {
		t.Helper()
		n := u.requests.Load()
		c := frontendtest.Dial(t, l.Addr())
		send(c)
		if bodyBytes != "" { // let through: the server answers with what it read
			r := c.Answer(frontendtest.AnswerWait)
			if r.Status != 200 || r.Header.Get("X-Body-Bytes") != bodyBytes || u.requests.Load()-n != 1 {
				t.Errorf("%s: got %s after %d requests reached the server; want the server's 200 with X-Body-Bytes %s", name, r, u.requests.Load()-n, bodyBytes)
			}
			<-u.bodies
			return
		}
		r := c.AnswerAndClose()
		if r.Status != want || !r.Closed || r.Header.Get("X-Body-Bytes") != "" {
			t.Errorf("%s: got %s; want fairlead's %d and the connection closed", name, r, want)
		}
		refused[strconv.Itoa(r.Status)]++
		if d := u.requests.Load() - n; d != 0 {
			t.Errorf("%s: the server received %d requests, want none", name, d)
			<-u.bodies
		}
	}
	one := func(raw string) func(c *frontendtest.Conn) { return func(c *frontendtest.Conn) { c.WriteRaw(raw) } } //nolint:errcheck
	for _, tc := range []struct {
		name, raw string
		want      int
	}{
		{"Content-Length with Transfer-Encoding", post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400},
		{"Content-Length with Transfer-Encoding, a request behind", post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /raw/smuggled HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"Transfer-Encoding then a lower-case content-length", post + "Transfer-Encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n", 400},
		{"two equal Content-Lengths", post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400},
		{"two different Content-Lengths", post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
		{"Content-Length 12a", post + "Content-Length: 12a\r\n\r\nhello", 400},
		{"obs-fold", get + "X-A: a\r\n b\r\n\r\n", 400},
		{"Transfer-Encoding gzip, chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400},
		{"chunk size zz", chunked + "zz\r\nhello\r\n0\r\n\r\n", 400},
		{"chunk extension name bad[", chunked + "5;bad[=x\r\nhello\r\n0\r\n\r\n", 400},
		{"chunk extension a=b and a space", chunked + "5;a=b \r\nhello\r\n0\r\n\r\n", 400},
		{"chunk data not followed by CRLF", chunked + "5\r\nhelloXY\r\n0\r\n\r\n", 400},
		{"bare LF after the request line", "GET /raw/h HTTP/1.1\nHost: a\r\n\r\n", 400},
		{"bare CR inside a header value", get + "X-A: a\rb\r\n\r\n", 400},
		{"NUL in a header value", get + "X-A: a\x00b\r\n\r\n", 400},
		{"header name X(A)", get + "X(A): 1\r\n\r\n", 400},
		{"space between Host and the colon", "GET /raw/h HTTP/1.1\r\nHost : a\r\n\r\n", 400},
		{"HTTP/1.1 without Host", "GET /raw/h HTTP/1.1\r\nX-A: 1\r\n\r\n", 400},
		{"two different Host headers", get + "Host: b\r\n\r\n", 400},
		{"request line with an extra word", "GET /raw/h HTTP/1.1 extra\r\nHost: a\r\n\r\n", 400},
		{"HTTP/2.0", "GET /raw/h HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"target byte {", "GET /raw/a{b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"target byte # in absolute form", "GET http://a/raw/a# HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"target in no form", "GET raw/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"GET *", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"request line over max_header_size", "GET /raw/h?q=" + strings.Repeat("a", 1100) + " HTTP/1.1\r\nHost: a\r\n\r\n", 431},
		{"headers over max_header_size", get + strings.Repeat("X-Hostile: "+strings.Repeat("h", 30)+"\r\n", 40) + "\r\n", 431},
		{"Content-Length over max_body_size", post + "Content-Length: 4000\r\n\r\n" + strings.Repeat("b", 4000), 413},
		{"chunked body over max_body_size", chunked + chunks(4000), 413},
	} {
		if tc.name == "HTTP/2.0" {
			// 505 from the framer, or 400 from fasthttp's parser: both refuse it.
			n := u.requests.Load()
			if r := frontendtest.Request(t, l.Addr(), tc.raw); (r.Status != 505 && r.Status != 400) || !r.Closed || u.requests.Load() != n {
				t.Errorf("HTTP/2.0: got %s and the server received %d requests; want 505 or 400, closed, none", r, u.requests.Load()-n)
			} else {
				refused[strconv.Itoa(r.Status)]++
			}
			continue
		}
		f(tc.name, one(tc.raw), tc.want, "")
	}
	// A refusal in a later read: the head cut in two writes, the bad byte in the second.
	f("obs-fold split across writes", func(c *frontendtest.Conn) {
		c.WriteRaw(get + "X-A: a\r")      //nolint:errcheck
		time.Sleep(20 * time.Millisecond) // pacing: the first part read on its own, not an assertion
		c.WriteRaw("\n b\r\n\r\n")        //nolint:errcheck
	}, 400, "")
	// A head that stops arriving: 408 after header_timeout.
	f("a head that stops arriving", one(get+"X-Slow: "), 408, "")
	// Let through: valid chunk extensions, a body of exactly max_body_size, absolute targets.
	f("chunk extension ;a=b", one(chunked+"5;a=b\r\nhello\r\n0\r\n\r\n"), 0, "5")
	f("chunk extension ; a = \"x y\"", one(chunked+"5 ; a = \"x y\"\r\nhello\r\n0\r\n\r\n"), 0, "5")
	f("chunked body of exactly max_body_size", one(chunked+chunks(1024)), 0, "1024")
	f("Content-Length body of exactly max_body_size", one(post+"Content-Length: 1024\r\n\r\n"+strings.Repeat("b", 1024)), 0, "1024")
	f("absolute http target", one("GET http://a/raw/x HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "0")
	f("absolute HTTPS target", one("GET HTTPS://a/raw/y HTTP/1.1\r\nHost: a\r\n\r\n"), 0, "0")
	// A valid request, then an invalid one in the same write: only the valid one reaches the server.
	n := u.requests.Load()
	c := frontendtest.Dial(t, l.Addr())
	c.WriteRaw(get + "\r\n" + post + "Content-Length: 12a\r\n\r\nhello") //nolint:errcheck
	if r := c.Answer(frontendtest.AnswerWait); r.Status != 200 || r.Header.Get("X-Body-Bytes") != "0" {
		t.Errorf("the valid request before an invalid one: got %s; want the server's 200", r)
	}
	if r := c.AnswerAndClose(); r.Status != 400 || !r.Closed {
		t.Errorf("the invalid request after a valid one: got %s; want 400 and the connection closed", r)
	}
	refused["400"]++
	<-u.bodies
	if d := u.requests.Load() - n; d != 1 {
		t.Errorf("a valid request and an invalid one: the server received %d requests, want 1", d)
	}
	for code, want := range refused {
		if !testkit.Within(time.Second, func() bool { after, _ := hostileBadRequests(t, l); return after[code]-before[code] == want }) {
			after, _ := hostileBadRequests(t, l)
			t.Errorf(`fairlead_bad_requests_total{code=%q} grew by %v, want %v`, code, after[code]-before[code], want)
		}
	}

	// HTTP/2: malformed streams, a bad :authority, Host or :path, a header list over max_header_size.
	h2 := func(name, want string, fields ...string) {
		t.Helper()
		n := u.requests.Load()
		r := dialRawH2(t, env, tlsAddr)
		r.Headers(1, true, fields...)
		if got := r.Outcome(1); got != want {
			t.Errorf("HTTP/2 %s: %s, want %s", name, got, want)
		}
		if d := u.requests.Load() - n; d != 0 {
			t.Errorf("HTTP/2 %s: the server received %d requests, want none", name, d)
			<-u.bodies
		}
	}
	base := func(extra ...string) []string {
		return append([]string{":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/h2"}, extra...)
	}
	h2("a connection-specific field", "reset", base("connection", "keep-alive")...)
	h2("TE: gzip", "reset", base("te", "gzip")...)
	h2("an uppercase name", "reset", base("X-Upper", "v")...)
	h2("NUL in a value", "reset", base("x-a", "a\x00b")...)
	h2("no :path", "reset", ":method", "GET", ":scheme", "https", ":authority", tlsAddr)
	h2("userinfo in :authority", "reset", ":method", "GET", ":scheme", "https", ":authority", "user@evil.example", ":path", "/raw/h2")
	h2("a port over 65535 in Host", "reset", ":method", "GET", ":scheme", "https", ":path", "/raw/h2", "host", "a:99999")
	h2(":path in absolute form", "reset", ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "http://evil.example/raw/h2")
	h2(":path byte {", "400", ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/a{b}")
	h2("a header list over max_header_size", "431", base("x-big", strings.Repeat("b", 1100))...)
	// OPTIONS * is routed by its path: the platform pool's, not the recording server's.
	h2("OPTIONS *", "200", ":method", "OPTIONS", ":scheme", "https", ":authority", tlsAddr, ":path", "*")
}

// A bad chunk that arrives after the request was forwarded: the client gets 400 and the server behind
// never receives a complete request (fairlead aborts the upstream request instead of finishing it).
func TestHostileChunkErrorArrivingLaterGets400AndAbortsTheUpstreamRequest(t *testing.T) {
	t.Run("simulator", func(t *testing.T) {
		c := startCluster(t, 2, 0)
		l, _ := startLB(t, platformConfig(c, "", ""))
		leader := c.Platforms[0]
		before := hostilePlatformRequests(c)
		conn := frontendtest.Dial(t, l.Addr())
		conn.WriteRaw("POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n") //nolint:errcheck
		// Wait for the request to reach the platform (fairlead may also hold it; then ~1 s at most).
		reached := testkit.Within(time.Second, func() bool { return hostilePlatformRequests(c) > before })
		conn.WriteRaw("zz\r\n") //nolint:errcheck
		r := conn.AnswerAndClose()
		if r.Status != 400 || !r.Closed {
			t.Errorf("got %s; want 400 and a closed connection", r)
		}
		if by := r.Header.Get("X-Served-By"); by != "" {
			t.Errorf("the 400 came from %s, not from fairlead: fairlead streamed the bad chunk to it", by)
		}
		if reached {
			// The simulator counts no completed bodies: fairlead's connection to the leader must have
			// been aborted (a completed request leaves it idle in fairlead's pool).
			if !testkit.Within(3*time.Second, func() bool { return hostileServerConns(l, "platform", leader.Addr) == 0 }) {
				t.Errorf("fairlead still holds %d upstream connections to the leader 3s after the bad chunk: the upstream request was not aborted",
					hostileServerConns(l, "platform", leader.Addr))
			}
		} else {
			t.Logf("fairlead held the request: the platform never saw it")
		}
	})
	t.Run("recording server", func(t *testing.T) {
		c := startCluster(t, 2, 0)
		u := startHostileUpstream(t, hostileRecordBody)
		l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""), hostileRawPool("rec", u.addr, []string{"/Thingworx/rec"}, "", "")))
		conn := frontendtest.Dial(t, l.Addr())
		conn.WriteRaw("POST /Thingworx/rec HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n") //nolint:errcheck
		testkit.Within(time.Second, func() bool { return u.requests.Load() > 0 })
		conn.WriteRaw("zz\r\n") //nolint:errcheck
		r := conn.AnswerAndClose()
		if r.Status != 400 || !r.Closed {
			t.Errorf("got %s; want 400 and a closed connection", r)
		}
		if u.requests.Load() == 0 {
			t.Logf("fairlead held the request: nothing reached the server")
			return
		}
		select {
		case b := <-u.bodies:
			if b.complete {
				t.Errorf("the server received a complete chunked body (%d bytes): fairlead finished the upstream request", b.n)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("3s after the bad chunk the upstream request is still open with a partial body: fairlead did not abort it")
		}
	})
}

// A POST with Content-Length 100000 whose body stops: after 10 bytes (the specification's case; fasthttp
// reads up to 8 KiB of a body before the handler runs, so nothing is forwarded yet), and after 60000
// bytes, when the request is already streaming to the server (past the 8 KiB pre-read and the upstream
// connection's 32 KiB write buffer).
func TestHostileSlowBodyIsCutAfterTheReadTimeout(t *testing.T) {
	for _, sent := range []int{10, 60000} {
		t.Run(fmt.Sprintf("after %d bytes", sent), func(t *testing.T) {
			c := startCluster(t, 2, 0)
			u := startHostileUpstream(t, hostileRecordBody)
			files := hostileFiles(platformConfig(c, "", ""), hostileRawPool("rec", u.addr, []string{"/Thingworx/rec"}, "", ""))
			files["30-hostile.toml"] = "[frontend]\nread_timeout = \"1s\"\n"
			l, _ := startLB(t, files)
			conn := frontendtest.Dial(t, l.Addr())
			start := time.Now()
			conn.WriteRaw("POST /Thingworx/rec HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("b", sent)) //nolint:errcheck
			conn.ExpectCut(t, start)
			if u.requests.Load() == 0 {
				t.Logf("fairlead held the request: nothing reached the server")
				return
			}
			select {
			case b := <-u.bodies:
				if b.complete {
					t.Errorf("the server received a complete body of %d bytes", b.n)
				}
				t.Logf("the server received %d body bytes, then fairlead closed the upstream connection", b.n)
			case <-time.After(3 * time.Second):
				t.Errorf("the upstream request is still open with a partial body 3s after the client was cut")
			}
		})
	}
}

func TestHostileInvalidWebSocketUpgradesGet400AndDialNoConnectionServer(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	upgrades := func() int64 {
		var n int64
		for _, s := range c.Connections {
			n += s.Upgrades()
		}
		return n
	}
	before := upgrades()
	upgrade := func(method, marker string, headers ...string) string {
		h := "Host: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Asset-Id: hostile\r\nX-Hostile-Case: " + marker + "\r\n"
		for _, x := range headers {
			h += x + "\r\n"
		}
		return method + " /Thingworx/WS HTTP/1.1\r\n" + h + "\r\n"
	}
	const key, version = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"
	cases := []struct {
		name, method string
		headers      []string
		wantVersion  bool // the answer must carry Sec-WebSocket-Version: 13
	}{
		{"no Sec-WebSocket-Key", "GET", []string{version}, false},
		{"Sec-WebSocket-Key not base64 of 16 bytes", "GET", []string{"Sec-WebSocket-Key: abc", version}, false},
		{"no Sec-WebSocket-Version", "GET", []string{key}, false},
		{"Sec-WebSocket-Version 8", "GET", []string{key, "Sec-WebSocket-Version: 8"}, true},
		{"POST upgrade", "POST", []string{key, version, "Content-Length: 0"}, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The marker shows whether the request reached a connection server's handler.
			marker := "case-" + strconv.Itoa(i)
			r := frontendtest.AnswerTo(t, l.Addr(), upgrade(tc.method, marker, tc.headers...), frontendtest.AnswerWait)
			if r.Status != 400 {
				t.Errorf("got %s; want 400", r)
			}
			if tc.wantVersion && r.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Errorf("the answer carries Sec-WebSocket-Version %q, want 13", r.Header.Get("Sec-WebSocket-Version"))
			}
			if by := r.Header.Get("X-Served-By"); by != "" {
				t.Errorf("the answer came from %s: the upgrade was forwarded", by)
			}
			for _, s := range c.Connections {
				if s.LastUpgradeHeaders().Get("X-Hostile-Case") == marker {
					t.Errorf("the upgrade request reached %s", s.Name)
				}
			}
		})
	}
	if n := upgrades() - before; n != 0 {
		t.Errorf("the connection servers upgraded %d of the invalid requests", n)
	}
	t.Run("a valid upgrade still works", func(t *testing.T) {
		conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("hostile-ok"))
		defer conn.Close()
		if !strings.HasPrefix(by, "cx") {
			t.Errorf("upgraded by %q, want a connection server", by)
		}
		conn.SetReadDeadline(time.Now().Add(frontendtest.AnswerWait)) //nolint:errcheck
		if err := conn.WriteMessage(websocket.TextMessage, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := conn.ReadMessage(); err != nil || string(msg) != "ping" {
			t.Fatalf("echo: %q, %v", msg, err)
		}
	})
}

func TestHostileUpgradeOnAPlainRouteIsForwardedAsAPlainRequestAndClosed(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	r := frontendtest.Request(t, l.Addr(), "GET /echo-headers HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if r.Status != 200 || !strings.HasPrefix(r.Header.Get("X-Served-By"), "platform") {
		t.Errorf("got %s; want the platform's ordinary 200 answer", r)
	}
	got := hostileEchoed(r.Body)
	for _, h := range []string{"upgrade", "connection"} {
		if v, ok := got[h]; ok {
			t.Errorf("the platform received %s: %q", h, v)
		}
	}
	if !r.Closed {
		t.Errorf("fairlead did not close the connection within %s of the answer (%s)", frontendtest.CloseWait, r.After)
	}
	for _, p := range c.Platforms {
		if n := p.Upgrades(); n != 0 {
			t.Errorf("%s upgraded %d connections", p.Name, n)
		}
	}
}

func TestHostileUnrequested101FromAServerGets502(t *testing.T) {
	c := startCluster(t, 2, 0)
	u := startHostileUpstream(t, hostileAnswerWith("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", true))
	l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""), hostileRawPool("raw", u.addr, []string{"/Thingworx/raw"}, "", "")))
	r := frontendtest.AnswerTo(t, l.Addr(), "GET /Thingworx/raw HTTP/1.1\r\nHost: a\r\n\r\n", 5*time.Second)
	if r.Status != 502 {
		t.Errorf("got %s; want 502", r)
	}
	if u.requests.Load() == 0 {
		t.Errorf("the request never reached the server")
	}
}

func TestHostileHopByHopHeadersAreNeverForwardedEitherWay(t *testing.T) {
	t.Run("request", func(t *testing.T) {
		c := startCluster(t, 2, 0)
		l, _ := startLB(t, platformConfig(c, "", ""))
		r := frontendtest.AnswerTo(t, l.Addr(), "GET /echo-headers HTTP/1.1\r\nHost: a\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\n"+
			"Keep-Alive: 5\r\nTE: trailers\r\nProxy-Authorization: x\r\nUpgrade: foo\r\nX-Keep: yes\r\n\r\n", frontendtest.AnswerWait)
		if r.Status != 200 {
			t.Fatalf("got %s, want 200", r)
		}
		got := hostileEchoed(r.Body)
		for _, h := range []string{"connection", "x-secret", "keep-alive", "te", "proxy-authorization", "upgrade"} {
			if v, ok := got[h]; ok {
				t.Errorf("the platform received %s: %q", h, v)
			}
		}
		if got["x-keep"] == nil {
			t.Errorf("an end-to-end header was dropped: %q", r.Body)
		}
	})
	t.Run("response", func(t *testing.T) {
		c := startCluster(t, 2, 0)
		u := startHostileUpstream(t, hostileAnswerWith("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: X-Internal\r\nX-Internal: 1\r\n"+
			"Keep-Alive: timeout=5\r\nProxy-Authenticate: x\r\nX-Visible: yes\r\n\r\nok\n", false))
		l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""), hostileRawPool("raw", u.addr, []string{"/Thingworx/raw"}, "", "")))
		r := frontendtest.AnswerTo(t, l.Addr(), "GET /Thingworx/raw HTTP/1.1\r\nHost: a\r\n\r\n", frontendtest.AnswerWait)
		if r.Status != 200 {
			t.Fatalf("got %s, want 200", r)
		}
		for _, h := range []string{"X-Internal", "Keep-Alive", "Proxy-Authenticate"} {
			if v, ok := r.Header[h]; ok {
				t.Errorf("the client received %s: %q", h, v)
			}
		}
		for _, v := range r.Header.Values("Connection") {
			if strings.Contains(strings.ToLower(v), "x-internal") {
				t.Errorf("the client received Connection: %s", v)
			}
		}
		if r.Header.Get("X-Visible") != "yes" {
			t.Errorf("an end-to-end response header was dropped: %q", r.Raw)
		}
	})
}

// hostileXForwardedRequest carries forged X-Forwarded-* and Forwarded headers to /echo-headers.
const hostileXForwardedRequest = "GET /echo-headers HTTP/1.1\r\nHost: hostile.example\r\nX-Forwarded-For: 6.6.6.6\r\n" +
	"X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Port: 1\r\nForwarded: for=6.6.6.6\r\n\r\n"

func TestHostileXForwardedHeadersFromAnUntrustedClientAreReplaced(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	r := frontendtest.AnswerTo(t, l.Addr(), hostileXForwardedRequest, frontendtest.AnswerWait)
	if r.Status != 200 {
		t.Fatalf("got %s, want 200", r)
	}
	got := hostileEchoed(r.Body)
	want := map[string]string{"x-forwarded-for": "127.0.0.1", "x-forwarded-proto": "http", "x-forwarded-host": "hostile.example"}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("the platform received %s %q, want exactly %q", k, got[k], v)
		}
	}
	for _, k := range []string{"x-forwarded-port", "forwarded"} {
		if v, ok := got[k]; ok {
			t.Errorf("the platform received the client's %s: %q", k, v)
		}
	}
}

func TestHostileXForwardedHeadersFromATrustedProxyAreKept(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""), map[string]string{
		"30-hostile.toml": "[frontend]\ntrusted_proxies = [\"127.0.0.0/8\"]\n",
	}))
	r := frontendtest.AnswerTo(t, l.Addr(), hostileXForwardedRequest, frontendtest.AnswerWait)
	if r.Status != 200 {
		t.Fatalf("got %s, want 200", r)
	}
	got := hostileEchoed(r.Body)
	want := map[string]string{"x-forwarded-for": "6.6.6.6, 127.0.0.1", "x-forwarded-proto": "https"}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("the platform received %s %q, want exactly %q", k, got[k], v)
		}
	}
}

func TestHostileCheckCredentialsNeverLeak(t *testing.T) {
	const user, password = "lbcheck", "Hostile-Pa55word-7f3a9c"
	cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	secrets := []string{cred, password, user + ":" + password}
	leaks := func(what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s contains the check credentials (%q)", what, s)
			}
		}
	}

	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Credentials: cred, Logf: func(string, ...any) {}})
	// A server that resets POSTs (502) and never answers anything else (504).
	u := startHostileUpstream(t, func(_ *hostileUpstream, _ net.Conn, br *bufio.Reader, head string) bool {
		if strings.HasPrefix(head, "POST ") {
			return false
		}
		io.Copy(io.Discard, br) //nolint:errcheck
		return false
	})
	credCheck := fmt.Sprintf("credentials = %q", cred)
	files := hostileFiles(platformConfig(c, "", credCheck),
		hostileRawPool("raw", u.addr, []string{"/Thingworx/raw"}, `response_timeout = "500ms"`, credCheck))
	var nolead testkit.Config
	nolead.Table("pools.nolead").Set("balance", "leader").Set("servers", []string{testkit.Addr(t)}).
		Set("queue_timeout", 300*time.Millisecond)
	fastChecks(nolead.Table("pools.nolead.check").Set("credentials", cred))
	nolead.Array("routes").Set("pool", "nolead").Set("paths", []string{"/Thingworx/nolead"})
	files["07-nolead.toml"] = nolead.String()
	files["30-hostile.toml"] = "[global]\naccess_log = true\n"
	l, logs := startLB(t, files)
	if probes := c.Platforms[0].Probes(); len(probes) == 0 || probes[len(probes)-1].Authorization != "Basic "+cred {
		t.Fatalf("the LeaderCheck probes do not carry the configured credentials")
	}

	for _, tc := range []struct {
		name string
		raw  string
		want int
	}{
		{"200", "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\n\r\n", 200},
		{"400", "POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"502", "POST /Thingworx/raw HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 502},
		{"503", "GET /Thingworx/nolead HTTP/1.1\r\nHost: a\r\n\r\n", 503},
		{"504", "GET /Thingworx/raw HTTP/1.1\r\nHost: a\r\n\r\n", 504},
	} {
		start := time.Now()
		r := frontendtest.AnswerTo(t, l.Addr(), tc.raw, 5*time.Second)
		t.Logf("%s: %s in %s", tc.name, r, time.Since(start).Round(time.Millisecond))
		if r.Status != tc.want {
			t.Errorf("%s: got %s, want %d", tc.name, r, tc.want)
		}
		leaks("the "+tc.name+" answer", string(r.Raw))
	}
	leaks("/api/status", hostileAdminGet(t, l, "/api/status"))
	leaks("/status", hostileAdminGet(t, l, "/status"))
	leaks("/metrics", hostileAdminGet(t, l, "/metrics"))

	ev := testkit.DialSSE(t, l.AdminAddr(), "/events")
	for deadline := time.Now().Add(time.Second); time.Until(deadline) > 0; {
		if _, err := ev.Next(time.Until(deadline)); err != nil {
			break
		}
	}
	if ev.Raw.Len() == 0 {
		t.Errorf("no event in the first second of /events")
	}
	leaks("/events", ev.Raw.String())
	leaks("the log", logs.all())
}

// A server that never answers gets the request once, and the client its 504 after one response_timeout:
// the upstream client does not retry an idempotent request after a timeout (it used to, five times).
func TestHostileSilentServerGetsTheRequestOnceAndTheClient504(t *testing.T) {
	u := startHostileUpstream(t, func(_ *hostileUpstream, _ net.Conn, br *bufio.Reader, _ string) bool {
		io.Copy(io.Discard, br) //nolint:errcheck // silent until fairlead gives up
		return false
	})
	c := startCluster(t, 1, 0)
	l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""),
		hostileRawPool("raw", u.addr, []string{"/Thingworx/raw"}, `response_timeout = "300ms"`, "")))
	r := frontendtest.AnswerTo(t, l.Addr(), "GET /Thingworx/raw HTTP/1.1\r\nHost: x\r\n\r\n", 10*time.Second)
	if r.Status != 504 {
		t.Fatalf("got %v, want 504", r)
	}
	if n := u.requests.Load(); n != 1 {
		t.Fatalf("the silent server received the request %d times, want once", n)
	}
}

// A server's 101 is relayed without the hop-by-hop fields other than Connection and Upgrade, and without
// the fields its Connection header names.
func TestHostileSwitchingProtocolsAnswerLosesItsHopByHopFields(t *testing.T) {
	u := startHostileUpstream(t, hostileAnswerWith("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade, X-Internal\r\nX-Internal: secret\r\nKeep-Alive: timeout=5\r\n"+
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nX-Keep: yes\r\n\r\n", true))
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	var ws testkit.Config
	ws.Table("pools.ws").Set("balance", "leader").Set("servers", []string{u.addr})
	fastChecks(ws.Table("pools.ws.check"))
	ws.Array("routes").Set("pool", "ws").Set("websocket", true).Set("paths", []string{"/Thingworx/WS"})
	files["05-ws.toml"] = ws.String()
	l, _ := startLB(t, files)
	conn := frontendtest.Dial(t, l.Addr())
	conn.WriteRaw("GET /Thingworx/WS HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" + //nolint:errcheck
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	r := conn.Answer(5 * time.Second)
	if r.Status != 101 {
		t.Fatalf("got %v, want 101", r)
	}
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
