package lb

import (
	"bufio"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// An HTTP/2 request is rewritten as HTTP/1.1 for the server behind, and its answer back (issue 35): what
// the client sent and the server answered passes, nothing more, and a malformed request reaches no server.

// h2RawLB starts fairlead with a TLS listener (more: extra [frontend] keys) in front of a raw upstream,
// the leader of pool "raw", that gets every request under /raw and answers with handler. It returns the
// upstream, fairlead, the TLS environment and address, and fairlead's log.
func h2RawLB(t *testing.T, handler func(*hostileUpstream, net.Conn, *bufio.Reader, string) bool, more string) (*hostileUpstream, *LB, *tlsEnv, string, *logSink) {
	t.Helper()
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	u := startHostileUpstream(t, handler)
	c := startCluster(t, 2, 0)
	tlsAddr := testkit.Addr(t)
	files := hostileFiles(platformConfig(c, "", ""), hostileRawPool("raw", u.addr, []string{"/raw"}, "", ""))
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, cert, more)
	files["30-access.toml"] = "[global]\naccess_log = true\n"
	l, logs := startLB(t, files)
	return u, l, env, tlsAddr, logs
}

// A server's answer reaches an HTTP/2 client with the fields the server sent, and those RFC 9110
// requires a proxy to add (a Date when it had none), as it reaches an HTTP/1.1 client: fasthttp's
// default Content-Type is not among them.
func TestH2AnAnswerCarriesWhatItsServerSentNothingMore(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-App: one\r\n\r\nok"
	u, l, env, tlsAddr, _ := h2RawLB(t, hostileAnswerWith(answer, false), "")
	_ = u
	r := dialRawH2(t, env, tlsAddr)
	r.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/x")
	got := r.Result(1)
	var names []string
	for _, f := range got.Fields {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if got.Status != "200" || got.Body != "ok" || strings.Join(names, ",") != ":status,content-length,date,x-app" {
		t.Errorf("HTTP/2: %s; want 200 \"ok\" with the fields content-length, x-app and a date (added: the server sent none), nothing else", got)
	}
	// The same answer over HTTP/1.1: the same fields.
	h1 := frontendtest.Request(t, l.Addr(), "GET /raw/x HTTP/1.1\r\nHost: a\r\n\r\n")
	if h1.Status != 200 || h1.Header.Get("Content-Type") != "" || h1.Header.Get("X-App") != "one" || h1.Header.Get("Date") == "" {
		t.Errorf("HTTP/1.1: %s; want 200 with X-App and Date and no Content-Type", h1)
	}
}

// RFC 9113 section 8.1.1: a request is forwarded only once it is known well formed. A content-length
// that the DATA does not agree with is a malformed request: reset, and no server receives a complete
// request (not even the bodiless one its head alone would make), however the frames arrive.
func TestH2AMalformedRequestReachesNoServer(t *testing.T) {
	u, _, env, tlsAddr, _ := h2RawLB(t, hostileRecordBody, "")
	post := func(cl string) []string {
		f := []string{":method", "POST", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/up"}
		if cl != "" {
			f = append(f, "content-length", cl)
		}
		return f
	}
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	var seen int64 // the server's reports read so far: one per request whose head it received
	complete := func() int {
		t.Helper()
		// A marker after the case, then every report of a head the server got: each request it
		// received is judged (complete, or cut) by then.
		m := dialRawH2(t, env, tlsAddr)
		m.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/marker")
		if got := m.Result(1); got.Status != "200" {
			t.Fatalf("the marker: %s", got)
		}
		n := 0
		for seen < u.requests.Load() {
			select {
			case b := <-u.bodies:
				seen++
				if b.complete && !strings.Contains(b.head, "/raw/marker") {
					n++
				}
			case <-time.After(10 * time.Second): // a hang guard
				t.Fatalf("the server's report of a request it received did not come")
			}
		}
		return n
	}
	f := func(name, cl string, frames func(fr *http2.Framer), want string) {
		t.Helper()
		r := dialRawH2(t, env, tlsAddr)
		block := r.Block(post(cl)...)
		r.InOneWrite(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}) //nolint:errcheck
			frames(fr)
		})
		if want == "cancelled" { // by the client: nothing comes back
			if n := complete(); n != 0 {
				t.Errorf("%s: the server received %d complete requests, want none", name, n)
			}
			return
		}
		got := r.Result(1)
		switch want {
		case "reset":
			if got.Reset != "PROTOCOL_ERROR" && got.Reset != "STREAM_CLOSED" {
				t.Errorf("%s: %s, want the stream reset", name, got)
			}
			if n := complete(); n != 0 {
				t.Errorf("%s: the server received %d complete requests, want none", name, n)
			}
		default:
			if got.Status != want {
				t.Errorf("%s: %s, want %s", name, got, want)
			}
			if n := complete(); n != 1 {
				t.Errorf("%s: the server received %d complete requests, want 1", name, n)
			}
		}
	}
	data := func(parts ...string) func(fr *http2.Framer) {
		return func(fr *http2.Framer) {
			for i, p := range parts {
				fr.WriteData(1, i == len(parts)-1, []byte(p)) //nolint:errcheck
			}
		}
	}
	f("content-length 0, then DATA with a request in it", "0", data(smuggled), "reset")
	f("content-length 5, then 5 bytes and 5 more", "5", data("hello", "world"), "reset")
	f("content-length 5, then 4 bytes and END_STREAM", "5", data("hell", ""), "reset")
	f("content-length 40, then 5 bytes and END_STREAM", "40", data("hello"), "reset")
	// Well formed, however split: forwarded whole.
	f("content-length 0, END_STREAM on an empty DATA", "0", data(""), "200")
	f("content-length 5, its bytes, END_STREAM apart", "5", data("hel", "lo", ""), "200")
	f("no content-length, a body", "", data("hello", " world"), "200")
	// A body without a content-length goes upstream chunked; a client's reset before END_STREAM leaves
	// it without its last chunk.
	f("no content-length, reset by the client", "", func(fr *http2.Framer) {
		fr.WriteData(1, false, []byte("hello"))   //nolint:errcheck
		fr.WriteRSTStream(1, http2.ErrCodeCancel) //nolint:errcheck
	}, "cancelled")
}

// Every refusal is logged as it was: the method and path the client sent (never the query string),
// the status (or, for an HTTP/2 stream reset without an answer, its code), the real duration and the
// protocol: HTTP/1.1 refused by the framer in the read that brought it or in a later one, and each
// refused HTTP/2 stream.
func TestRefusalsAreLoggedAsTheyWere(t *testing.T) {
	u, l, env, tlsAddr, logs := h2RawLB(t, hostileRecordBody, "header_timeout = \"300ms\"\nmax_header_size = 2048")
	find := func(path, proto string) map[string]string {
		t.Helper()
		var line map[string]string
		testkit.Eventually(t, "the access log line of "+path, 5*time.Second, func() bool {
			for _, m := range accessLines(t, logs, "request") {
				if m["path"] == path && m["proto"] == proto {
					line = m
					return true
				}
			}
			return false
		})
		return line
	}
	check := func(line map[string]string, want map[string]string, minMS, maxMS float64) {
		t.Helper()
		for k, v := range want {
			if line[k] != v {
				t.Errorf("%s=%q, want %q: %v", k, line[k], v, line)
			}
		}
		if d, err := strconv.ParseFloat(line["duration_ms"], 64); err != nil || d < minMS || d > maxMS {
			t.Errorf("duration_ms=%s, want between %g and %g: %v", line["duration_ms"], minMS, maxMS, line)
		}
	}
	before := u.requests.Load()

	// HTTP/1.1, refused in the read that brought it.
	frontendtest.Request(t, l.Addr(), "POST /abc?appKey=s3cret HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
	check(find("/abc", "http/1.1"), map[string]string{"method": "POST", "status": "400", "route": "-1", "refused": "Content-Length with Transfer-Encoding"}, 0, 1000)
	// Refused in a later read than its request line's: a head that stops arriving (408).
	c := frontendtest.Dial(t, l.Addr())
	c.WriteRaw("GET /slow HTTP/1.1\r\nHost: x\r\n") //nolint:errcheck
	if r := c.AnswerAndClose(); r.Status != 408 {
		t.Fatalf("a head that stops arriving: %s, want 408", r)
	}
	check(find("/slow", "http/1.1"), map[string]string{"method": "GET", "status": "408"}, 300, 10000)
	// A request line that is not one: neither its "method" nor its "path" is logged.
	for _, line := range []string{"Cookie: s3cret=1\r\n\r\n", "Authorization Basic s3cret\r\n\r\n"} {
		frontendtest.Request(t, l.Addr(), line)
	}
	testkit.Eventually(t, "the refusals of the two non-request lines", 5*time.Second, func() bool {
		n := 0
		for _, m := range accessLines(t, logs, "request") {
			if m["status"] == "400" && m["path"] == "" && m["proto"] == "http/1.1" {
				n++
			}
		}
		return n == 2
	})

	// HTTP/2: a malformed stream (reset), a head over max_header_size (431), a content-length the DATA
	// does not agree with (reset after the request was read), each on its line.
	r := dialRawH2(t, env, tlsAddr)
	r.Headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/malformed?appKey=s3cret", "connection", "close")
	if got := r.Result(1); got.Reset != "PROTOCOL_ERROR" {
		t.Fatalf("a connection-specific field: %s", got)
	}
	check(find("/raw/malformed", "h2"), map[string]string{"method": "GET", "status": "0", "reset": "PROTOCOL_ERROR", "refused": "a connection-specific field"}, 0, 1000)
	r.Headers(3, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/big", "x-big", strings.Repeat("b", 3000))
	if got := r.Result(3); got.Status != "431" {
		t.Fatalf("a head over max_header_size: %s", got)
	}
	check(find("/raw/big", "h2"), map[string]string{"method": "GET", "status": "431"}, 0, 1000)
	block := r.Block(":method", "POST", ":scheme", "https", ":authority", tlsAddr, ":path", "/raw/cl", "content-length", "0")
	r.InOneWrite(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block, EndHeaders: true}) //nolint:errcheck
		fr.WriteData(5, true, []byte("GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"))                    //nolint:errcheck
	})
	if got := r.Result(5); got.Reset != "PROTOCOL_ERROR" {
		t.Fatalf("content-length 0 and DATA: %s", got)
	}
	check(find("/raw/cl", "h2"), map[string]string{"method": "POST", "status": "0", "reset": "PROTOCOL_ERROR"}, 0, 1000)

	if n := u.requests.Load() - before; n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
	if strings.Contains(logs.all(), "s3cret") {
		t.Errorf("a query string reached the log:\n%s", logs.all())
	}
}
