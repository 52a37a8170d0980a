package lb

import (
	"bufio"
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// Hostile input through a whole fairlead: raw bytes over TCP (frames over HTTP/2) to its front end, the
// answer read with a deadline, and what the servers behind it received (helpers in
// hostile_helpers_test.go). What the front end refuses, and how (status, close, counts, timeouts,
// limits), is tested in detail against lb/frontend with a trivial handler (lb/frontend/hostile_test.go,
// h2conn_test.go); here, that a refused request reaches no server, what lb itself refuses, and what a
// forwarded one looks like to its server.

// Every kind of request refused before a server, over HTTP/1.1 and HTTP/2, reaches none behind a whole
// fairlead (a recording server: it sees every head fairlead sends), and each HTTP/1.1 refusal is counted
// by its code on /metrics: the front end's refusals, and lb's own (proxy.go): a Host that is not
// host[:port] as HTTP/2's :authority (no userinfo, a port up to 65535, no IPv6 zone: fasthttp let a port
// over 65535 and a zone through), and CONNECT and TRACE in any case, 405 with an Allow that lists the
// standard methods (TRACE was forwarded once, and the server's echo relayed). Requests let pass (valid
// chunk extensions, a body of exactly max_body_size, targets in absolute form) reach it whole. An HTTP/2
// stream whose content-length the DATA does not agree with never reaches a server complete (not even as
// the bodiless request its head alone would make, RFC 9113 section 8.1.1), however the frames arrive; a
// refused stream leaves its connection serving.
func TestHostileRefusalsReachNoServer(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "max_header_size = 1024\nmax_body_size = 1024\nheader_timeout = \"1s\"")
	u, l, tlsAddr := fr.u, fr.l, fr.tlsAddr
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
	badRequests := func(code string) float64 {
		return opMetric(t, l.AdminAddr(), "", `fairlead_bad_requests_total{code="`+code+`"}`)
	}
	before, refused := map[string]float64{}, map[string]float64{}
	for _, code := range []string{"400", "405", "408", "413", "431", "505"} {
		before[code] = badRequests(code)
	}
	f := func(name string, send func(c *frontendtest.Conn), want int, bodyBytes string) {
		t.Helper()
		n := u.requests.Load()
		c := frontendtest.Dial(t, l.Addr())
		send(c)
		if bodyBytes != "" { // let through: the server answers with what it read
			r := c.Answer(frontendtest.AnswerWait)
			if r.Status != 204 || r.Header.Get("X-Body-Bytes") != bodyBytes || u.requests.Load()-n != 1 {
				t.Errorf("%s: got %s after %d requests reached the server; want the server's 204 with X-Body-Bytes %s", name, r, u.requests.Load()-n, bodyBytes)
			}
			<-u.bodies
			return
		}
		r := c.AnswerAndClose()
		if (r.Status != want && (want != 505 || r.Status != 400)) || !r.Closed || r.Header.Get("X-Body-Bytes") != "" {
			t.Errorf("%s: got %s; want fairlead's %d and the connection closed", name, r, want)
		}
		if allow := r.Header.Get("Allow"); want == 405 && allow != "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH" {
			t.Errorf("%s: Allow %q", name, allow)
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
		{"HTTP/2.0 (505 from the framer, or 400 from fasthttp's parser)", "GET /raw/h HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"target byte {", "GET /raw/a{b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"target byte # in absolute form", "GET http://a/raw/a# HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"target in no form", "GET raw/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"GET *", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"request line over max_header_size", "GET /raw/h?q=" + strings.Repeat("a", 1100) + " HTTP/1.1\r\nHost: a\r\n\r\n", 431},
		{"headers over max_header_size", get + strings.Repeat("X-Hostile: "+strings.Repeat("h", 30)+"\r\n", 40) + "\r\n", 431},
		{"Content-Length over max_body_size", post + "Content-Length: 4000\r\n\r\n" + strings.Repeat("b", 4000), 413},
		{"chunked body over max_body_size", chunked + chunks(4000), 413},
	} {
		f(tc.name, one(tc.raw), tc.want, "")
	}
	for _, h := range []string{"a b", "a/b?c", "user@evil.example", "[::1", "a:b:c", "a:99999", "[fe80::1%25eth0]", "x%41y", "a\\b"} {
		f(fmt.Sprintf("Host %q", h), one("GET /raw/x HTTP/1.1\r\nHost: "+h+"\r\n\r\n"), 400, "")
	}
	for _, m := range []string{"TRACE", "trace", "Trace", "CONNECT", "connect"} {
		target := "/raw/m"
		if m == "CONNECT" {
			target = "a:443"
		}
		f(m, one(m+" "+target+" HTTP/1.1\r\nHost: a\r\nCookie: session=secret\r\n\r\n"), 405, "")
	}
	// A refusal in a later read: the head cut in two writes, the bad byte in the second.
	f("obs-fold split across writes", func(c *frontendtest.Conn) {
		c.WriteRaw(get + "X-A: a\r")      //nolint:errcheck
		time.Sleep(20 * time.Millisecond) // pacing: the first part read on its own, not an assertion
		c.WriteRaw("\n b\r\n\r\n")        //nolint:errcheck
	}, 400, "")
	// A head that stops arriving: 408 after header_timeout.
	f("a head that stops arriving", one(get+"X-Slow: "), 408, "")
	// Let through: valid chunk extensions, a body of exactly max_body_size (absolute targets:
	// TestHostileRequestsLetThroughReachTheServerAsSent).
	f("chunk extension ;a=b", one(chunked+"5;a=b\r\nhello\r\n0\r\n\r\n"), 0, "5")
	f("chunk extension ; a = \"x y\"", one(chunked+"5 ; a = \"x y\"\r\nhello\r\n0\r\n\r\n"), 0, "5")
	f("chunked body of exactly max_body_size", one(chunked+chunks(1024)), 0, "1024")
	f("Content-Length body of exactly max_body_size", one(post+"Content-Length: 1024\r\n\r\n"+strings.Repeat("b", 1024)), 0, "1024")
	// A valid request, then an invalid one in the same write: only the valid one reaches the server.
	n := u.requests.Load()
	c := frontendtest.Dial(t, l.Addr())
	c.WriteRaw(get + "\r\n" + post + "Content-Length: 12a\r\n\r\nhello") //nolint:errcheck
	if r := c.Answer(frontendtest.AnswerWait); r.Status != 204 || r.Header.Get("X-Body-Bytes") != "0" {
		t.Errorf("the valid request before an invalid one: got %s; want the server's 204", r)
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
		if !testkit.Within(time.Second, func() bool { return badRequests(code)-before[code] == want }) {
			t.Errorf(`fairlead_bad_requests_total{code=%q} grew by %v, want %v`, code, badRequests(code)-before[code], want)
		}
	}

	// HTTP/2, each stream on a new connection, its DATA in the write of its head. settle sends a marker
	// and then reads every report of a head the server got: each request it received is judged (complete,
	// or cut) by then.
	seen := u.requests.Load()
	settle := func() (heads, complete int) {
		t.Helper()
		m := fr.h2(t)
		m.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/marker")
		if got := m.Result(1); got.Status != "204" {
			t.Fatalf("the marker: %s", got)
		}
		for seen < u.requests.Load() {
			select {
			case b := <-u.bodies:
				if seen++; !strings.Contains(b.head, "/raw/marker") {
					heads++
					if b.complete {
						complete++
					}
				}
			case <-time.After(10 * time.Second): // a hang guard
				t.Fatalf("the server's report of a request it received did not come")
			}
		}
		return heads, complete
	}
	// want: "reset", a status of fairlead's, "204" (the server's: reached it complete) or "200" (the
	// platform's). A stream without DATA must not reach the server at all, and leaves its connection serving.
	h2 := func(name, want string, fields []string, data ...string) {
		t.Helper()
		r := fr.h2(t)
		block := r.Block(fields...)
		r.InOneWrite(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: data == nil, EndHeaders: true}) //nolint:errcheck
			for i, p := range data {
				fr.WriteData(1, i == len(data)-1, []byte(p)) //nolint:errcheck
			}
		})
		got := r.Result(1)
		if want == "reset" && got.Reset != "PROTOCOL_ERROR" && got.Reset != "STREAM_CLOSED" || want != "reset" && got.Status != want {
			t.Errorf("HTTP/2 %s: %s, want %s", name, got, want)
		}
		heads, complete := settle()
		wantN := 0
		if want == "204" {
			wantN = 1
		}
		if complete != wantN || data == nil && heads != wantN {
			t.Errorf("HTTP/2 %s: the server received %d requests, %d complete; want %d", name, heads, complete, wantN)
		}
		if data == nil { // only the stream was refused: the connection serves the next one
			r.Headers(3, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things?a[]=1")
			if got := r.Outcome(3); got != "200" {
				t.Errorf("HTTP/2 %s: the next stream on the connection: %s, want 200", name, got)
			}
		}
	}
	hdr := func(method, path string, extra ...string) []string {
		return append([]string{":method", method, ":scheme", "https", ":authority", tlsAddr, ":path", path}, extra...)
	}
	base := func(extra ...string) []string { return hdr("GET", "/raw/h2", extra...) }
	h2("a connection-specific field", "reset", base("connection", "keep-alive"))
	h2("TE: gzip", "reset", base("te", "gzip"))
	h2("an uppercase name", "reset", base("X-Upper", "v"))
	h2("NUL in a value", "reset", base("x-a", "a\x00b"))
	h2("no :path", "reset", []string{":method", "GET", ":scheme", "https", ":authority", tlsAddr})
	h2("userinfo in :authority", "reset", []string{":method", "GET", ":scheme", "https", ":authority", "user@evil.example", ":path", "/raw/h2"})
	h2("a port over 65535 in Host", "reset", []string{":method", "GET", ":scheme", "https", ":path", "/raw/h2", "host", "a:99999"})
	h2(":path in absolute form", "reset", hdr("GET", "http://evil.example/raw/h2"))
	h2(":path byte {", "400", hdr("GET", "/raw/a{b}"))
	h2("a header list over max_header_size", "431", base("x-big", strings.Repeat("b", 1100)))
	h2("TRACE", "405", hdr("TRACE", "/raw/h2"))
	h2("OPTIONS * (routed by its path: the platform pool's)", "200", hdr("OPTIONS", "*"))
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	h2("content-length 0, then DATA with a request in it", "reset", hdr("POST", "/raw/up", "content-length", "0"), smuggled)
	h2("content-length 5, then 5 bytes and 5 more", "reset", hdr("POST", "/raw/up", "content-length", "5"), "hello", "world")
	h2("content-length 5, then 4 bytes and END_STREAM", "reset", hdr("POST", "/raw/up", "content-length", "5"), "hell", "")
	h2("content-length 40, then 5 bytes and END_STREAM", "reset", hdr("POST", "/raw/up", "content-length", "40"), "hello")
	// Well formed, however split: forwarded whole.
	h2("content-length 0, END_STREAM on an empty DATA", "204", hdr("POST", "/raw/up", "content-length", "0"), "")
	h2("content-length 5, its bytes, END_STREAM apart", "204", hdr("POST", "/raw/up", "content-length", "5"), "hel", "lo", "")
	h2("no content-length, a body", "204", hdr("POST", "/raw/up"), "hello", " world")
	// A body without a content-length goes upstream chunked; a client's reset before END_STREAM leaves
	// it without its last chunk.
	r := fr.h2(t)
	block := r.Block(hdr("POST", "/raw/up")...)
	r.InOneWrite(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}) //nolint:errcheck
		fr.WriteData(1, false, []byte("hello"))                                                       //nolint:errcheck
		fr.WriteRSTStream(1, http2.ErrCodeCancel)                                                     //nolint:errcheck
	})
	if _, complete := settle(); complete != 0 {
		t.Errorf("HTTP/2 no content-length, reset by the client: the server received %d complete requests, want none", complete)
	}
}

// What reaches the server of a request fairlead forwards, one request for each (a Connection field
// naming Content-Length or Transfer-Encoding does not take the framing away, RFC 9110 section 7.6.1
// forbids a client to name them and HAProxy keeps them too, else the server would read the body as the
// next request): the request line as the client sent it, when RFC 3986 allows its target's bytes ('['
// ']' and a '%' that begins no pct-encoding too, as HAProxy), an absolute-form target in origin form;
// every method but CONNECT and TRACE, extension methods included; Content-Length as one decimal number,
// no whitespace around it, no leading zeros, the name as the client spelled it (before the fix the
// value went as sent: " 005\t"); a Host that is host[:port], and none for HTTP/1.0 (it goes with the
// address the client connected to).
func TestHostileRequestsLetThroughReachTheServerAsSent(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "")
	u, l := fr.u, fr.l
	rows := 0
	// wantLine "" is not checked; every wantField is a line of the head, the only one of its name.
	f := func(raw, wantLine string, body int, wantFields ...string) {
		t.Helper()
		rows++
		name, _, _ := strings.Cut(raw, "\r\n\r\n")
		r := frontendtest.AnswerTo(t, l.Addr(), raw, frontendtest.AnswerWait)
		if r.Status != 204 {
			t.Errorf("%q: got %s; want the server's 204", name, r)
			return
		}
		b := nextHead(t, u)
		if line, _, _ := strings.Cut(b.head, "\r\n"); wantLine != "" && line != wantLine {
			t.Errorf("%q: the server received %q, want %q", name, line, wantLine)
		}
		for _, w := range wantFields {
			k, _, _ := strings.Cut(w, ":")
			var got []string
			for _, line := range strings.Split(b.head, "\r\n") {
				if n, _, ok := strings.Cut(line, ":"); ok && strings.EqualFold(n, k) {
					got = append(got, line)
				}
			}
			if len(got) != 1 || got[0] != w {
				t.Errorf("%q: the server received %q, want %q", name, got, w)
			}
		}
		if !b.complete || b.n != int64(body) {
			t.Errorf("%q: the server read %d body bytes (complete %v), want %d", name, b.n, b.complete, body)
		}
	}
	smuggled := "GET /raw/smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	f("POST /raw/a HTTP/1.1\r\nHost: a\r\nConnection: content-length\r\nContent-Length: "+strconv.Itoa(len(smuggled))+"\r\n\r\n"+smuggled,
		"POST /raw/a HTTP/1.1", len(smuggled), "Content-Length: "+strconv.Itoa(len(smuggled)))
	f("POST /raw/a HTTP/1.1\r\nHost: a\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n"+
		strconv.FormatInt(int64(len(smuggled)), 16)+"\r\n"+smuggled+"\r\n0\r\n\r\n", "POST /raw/a HTTP/1.1", len(smuggled), "Transfer-Encoding: chunked")
	for _, target := range []string{"/raw/azAZ09-._~!$&'()*+,;=:@/%2F?q=/?:@", "/raw/a?b[]=1&c[x]=2", "/raw/a%zz?b=%", "http://a/raw/x?y", "HTTPS://a/raw/y"} {
		_, origin, _ := strings.Cut(target, "://a")
		f("GET "+target+" HTTP/1.1\r\nHost: a\r\n\r\n", "GET "+cmp.Or(origin, target)+" HTTP/1.1", 0)
	}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "PROPFIND", "TRACEX", "M-SEARCH"} {
		f(m+" /raw/m HTTP/1.1\r\nHost: a\r\nCookie: session=secret\r\n\r\n", m+" /raw/m HTTP/1.1", 0)
	}
	for _, tc := range []struct {
		field, body, want string
	}{
		{"Content-Length: 5", "hello", "Content-Length: 5"},
		{"Content-Length: 5 ", "hello", "Content-Length: 5"},
		{"Content-Length: \t5", "hello", "Content-Length: 5"},
		{"Content-Length:5", "hello", "Content-Length: 5"},
		{"Content-Length: \t 5\t ", "hello", "Content-Length: 5"},
		{"Content-Length: 005", "hello", "Content-Length: 5"},
		{"content-length: 0200", strings.Repeat("x", 200), "content-length: 200"},
		{"CONTENT-LENGTH: 00", "", "CONTENT-LENGTH: 0"},
		{"Content-Length: 0", "", "Content-Length: 0"},
		{"Content-Length: 10", "0123456789", "Content-Length: 10"},
	} {
		f("POST /raw/cl HTTP/1.1\r\nHost: a\r\n"+tc.field+"\r\n\r\n"+tc.body, "POST /raw/cl HTTP/1.1", len(tc.body), tc.want)
	}
	for _, h := range []string{"example.com", "example.com:8443", "[::1]:443", "127.0.0.1", "host:"} {
		f("GET /raw/x HTTP/1.1\r\nHost: "+h+"\r\n\r\n", "GET /raw/x HTTP/1.1", 0)
	}
	f("GET /raw/x HTTP/1.0\r\n\r\n", "", 0)
	// One request reached the server for each: no body was read as a request of its own.
	if n := u.requests.Load(); n != int64(rows) {
		t.Errorf("the server received %d requests for %d sent", n, rows)
	}
}

// A request whose body goes bad after fairlead forwarded it (a bad chunk: the front end's 400; a body
// that stops arriving, after 10 bytes, the specification's case, or after 60000, past fasthttp's 8 KiB
// pre-read and the upstream connection's 32 KiB write buffer: cut about read_timeout after its last byte)
// never reaches its server complete: fairlead aborts the upstream request instead of finishing it, and
// holds no connection to the server after (a completed request would leave one idle in its pool).
func TestHostileBodyGoingBadAfterItWasForwardedIsAbortedUpstream(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "read_timeout = \"1s\"")
	u, l := fr.u, fr.l
	f := func(name, raw string, then func(c *frontendtest.Conn, start time.Time)) {
		t.Helper()
		n := u.requests.Load()
		c := frontendtest.Dial(t, l.Addr())
		start := time.Now()
		c.WriteRaw(raw) //nolint:errcheck
		then(c, start)
		if u.requests.Load() == n {
			t.Logf("%s: fairlead held the request: nothing reached the server", name)
			return
		}
		select {
		case b := <-u.bodies:
			if b.complete {
				t.Errorf("%s: the server received a complete body (%d bytes): fairlead finished the upstream request", name, b.n)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("%s: 3s after the client's end the upstream request is still open with a partial body: fairlead did not abort it", name)
		}
		if !testkit.Within(3*time.Second, func() bool { return mustServerStatus(t, l, "raw", u.addr).Conns == 0 }) {
			t.Errorf("%s: fairlead still holds %d upstream connections to the server 3s after", name, mustServerStatus(t, l, "raw", u.addr).Conns)
		}
	}
	f("a bad chunk", "POST /raw/c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", func(c *frontendtest.Conn, _ time.Time) {
		testkit.Within(time.Second, func() bool { return u.requests.Load() > 0 }) // the server's first; fairlead may also hold it
		c.WriteRaw("zz\r\n")                                                      //nolint:errcheck
		if r := c.AnswerAndClose(); r.Status != 400 || !r.Closed || r.Header.Get("X-Body-Bytes") != "" {
			t.Errorf("a bad chunk: got %s; want fairlead's 400 and a closed connection", r)
		}
	})
	for _, sent := range []int{10, 60000} {
		f(fmt.Sprintf("a body that stops after %d bytes", sent), "POST /raw/s HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("b", sent),
			func(c *frontendtest.Conn, start time.Time) { c.ExpectCut(t, start) })
	}
}

// An invalid WebSocket upgrade gets fairlead's 400 (with Sec-WebSocket-Version: 13 for a version it does
// not speak) and reaches no connection server; a valid one still works.
func TestHostileInvalidWebSocketUpgradesGet400AndDialNoConnectionServer(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	upgrades := func() (n int64) {
		for _, s := range c.Connections {
			n += s.Upgrades()
		}
		return n
	}
	before := upgrades()
	const key, version = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "Sec-WebSocket-Version: 13\r\n"
	f := func(name, method, headers string, wantVersion bool) {
		t.Helper()
		// The marker shows whether the request reached a connection server's handler.
		marker := strings.ReplaceAll(name, " ", "-")
		r := frontendtest.AnswerTo(t, l.Addr(), method+" /Thingworx/WS HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"X-Asset-Id: hostile\r\nX-Hostile-Case: "+marker+"\r\n"+headers+"\r\n", frontendtest.AnswerWait)
		if r.Status != 400 || r.Header.Get("X-Served-By") != "" {
			t.Errorf("%s: got %s; want fairlead's 400", name, r)
		}
		if v := r.Header.Get("Sec-WebSocket-Version"); wantVersion && v != "13" {
			t.Errorf("%s: the answer carries Sec-WebSocket-Version %q, want 13", name, v)
		}
		for _, s := range c.Connections {
			if s.LastUpgradeHeaders().Get("X-Hostile-Case") == marker {
				t.Errorf("%s: the upgrade request reached %s", name, s.Name)
			}
		}
	}
	f("no Sec-WebSocket-Key", "GET", version, false)
	f("Sec-WebSocket-Key not base64 of 16 bytes", "GET", "Sec-WebSocket-Key: abc\r\n"+version, false)
	f("no Sec-WebSocket-Version", "GET", key, false)
	f("Sec-WebSocket-Version 8", "GET", key+"Sec-WebSocket-Version: 8\r\n", true)
	f("POST upgrade", "POST", key+version+"Content-Length: 0\r\n", false)
	if n := upgrades() - before; n != 0 {
		t.Errorf("the connection servers upgraded %d of the invalid requests", n)
	}
	conn, by := dialAsset(t, l, "hostile-ok")
	if !strings.HasPrefix(by, "cx") {
		t.Fatalf("a valid upgrade: upgraded by %q, want a connection server", by)
	}
	mustEcho(t, conn, "ping")
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
	files := mergeFiles(platformConfig(c, "", credCheck),
		hostileRawPool("raw", u.addr, []string{"/Thingworx/raw"}, `response_timeout = "500ms"`, credCheck))
	nolead, pool, check, route := poolConf("nolead", "leader", []string{testkit.Addr(t)}, false)
	pool.Set("queue_timeout", 300*time.Millisecond)
	fastChecks(check.Set("credentials", cred))
	route.Set("paths", []string{"/Thingworx/nolead"})
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
	leaks("/api/status", adminPage(t, l.AdminAddr(), "/api/status", ""))
	leaks("/status", adminPage(t, l.AdminAddr(), "/status", ""))
	leaks("/metrics", adminPage(t, l.AdminAddr(), "/metrics", ""))

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

// Over max_conns fasthttp refuses connections with 503 (lb/frontend's
// TestHostileMaxConnsRefusesExtraConnectionsCountsAndWarns): lb counts them as limit on /metrics, and a
// WARN line says so.
func TestConnectionsOverMaxConnsAreCountedAsLimitAndWarned(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, logs := startLB(t, mergeFiles(platformConfig(c, "", ""), map[string]string{"30-limit.toml": "[frontend]\nmax_conns = 2\n"}))
	req := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\n\r\n"
	for i := range 3 {
		conn := frontendtest.Dial(t, l.Addr())
		conn.WriteRaw(req) //nolint:errcheck
		if r := conn.Answer(frontendtest.AnswerWait); i < 2 && r.Status != 200 {
			t.Fatalf("keep-alive connection %d: got %s, want 200", i, r)
		} else if i == 2 && r.Status != 503 && !(r.Status == 0 && r.Closed) {
			t.Fatalf("the third connection: got %s, want 503 or a close", r)
		}
	}
	testkit.Eventually(t, "the refused connection to be counted and logged", 3*time.Second, func() bool {
		return opMetric(t, l.AdminAddr(), "", `fairlead_frontend_connection_errors_total{kind="limit"}`) >= 1 &&
			strings.Contains(logs.all(), `level=WARN msg="frontend: connection limit reached: new connections are refused" kind=limit detail="2 connections open"`)
	})
}

// The access log line of a refusal (lb.logRefused; what the front end records of each refusal is
// lb/frontend's TestRefusalsAreRecordedAsTheyWere): the method and path the client sent, never the
// query string, route=-1, the status and refused=REASON, the real duration and the protocol; for an
// HTTP/2 stream reset without an answer status=0 and reset=CODE. Nothing of them reaches a server.
func TestRefusalsAreLoggedAsTheyWere(t *testing.T) {
	fr := startRawFront(t, hostileRecordBody, "")
	f := func(path, proto string, want map[string]string) {
		t.Helper()
		var line map[string]string
		testkit.Eventually(t, "the access log line of "+path, 5*time.Second, func() bool {
			for _, m := range accessLines(t, fr.logs, "request") {
				if m["path"] == path && m["proto"] == proto {
					line = m
					return true
				}
			}
			return false
		})
		for k, v := range want {
			if line[k] != v {
				t.Errorf("%s=%q, want %q: %v", k, line[k], v, line)
			}
		}
		if d, err := strconv.ParseFloat(line["duration_ms"], 64); err != nil || d < 0 || d > 1000 {
			t.Errorf("duration_ms=%s, want between 0 and 1000: %v", line["duration_ms"], line)
		}
	}
	frontendtest.Request(t, fr.l.Addr(), "POST /abc?appKey=s3cret HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
	f("/abc", "http/1.1", map[string]string{"method": "POST", "status": "400", "route": "-1", "refused": "Content-Length with Transfer-Encoding"})
	r := fr.h2(t)
	r.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", fr.tlsAddr, ":path", "/raw/malformed?appKey=s3cret", "connection", "close")
	if got := r.Result(1); got.Reset != "PROTOCOL_ERROR" {
		t.Fatalf("a connection-specific field: %s", got)
	}
	f("/raw/malformed", "h2", map[string]string{"method": "GET", "status": "0", "route": "-1", "reset": "PROTOCOL_ERROR", "refused": "a connection-specific field"})
	if n := fr.u.requests.Load(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
	if strings.Contains(fr.logs.all(), "s3cret") {
		t.Errorf("a query string reached the log:\n%s", fr.logs.all())
	}
}
