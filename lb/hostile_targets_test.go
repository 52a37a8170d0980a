package lb

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/valyala/fasthttp"
)

// Targets, lengths and methods (issue 35, point 6): what a server could read otherwise is refused or
// normalised, through a running fairlead in front of a raw server that records every head it gets.

// recordHeads is a hostileUpstream handler that reads a request's Content-Length body, reports the head
// and what it read on u.bodies, and answers 204 (no body, so a HEAD is answered right too).
func recordHeads(u *hostileUpstream, c net.Conn, br *bufio.Reader, head string) bool {
	b := upstreamBody{head: head}
	cl, _ := strconv.ParseInt(hostileHeadValue(head, "Content-Length"), 10, 64)
	b.n, b.err = io.CopyN(io.Discard, br, cl)
	b.complete = b.err == nil && b.n == cl
	u.bodies <- b
	_, err := io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
	return b.complete && err == nil
}

// targetsLB starts fairlead with the pool "raw" over a recordHeads server, routed /raw.
func targetsLB(t *testing.T) (*hostileUpstream, *LB) {
	t.Helper()
	u := startHostileUpstream(t, recordHeads)
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""), hostileRawPool("raw", u.addr, []string{"/raw"}, "", "")))
	return u, l
}

// sendRaw sends raw on a new connection and reads the answer; with closes, also whether fairlead then
// closed the connection (else the wait for a close is spared).
func sendRaw(t *testing.T, l *LB, raw string, closes bool) frontendtest.Answer {
	t.Helper()
	if closes {
		return frontendtest.Request(t, l.Addr(), raw)
	}
	return frontendtest.AnswerTo(t, l.Addr(), raw, frontendtest.AnswerWait)
}

// refused400 sends raw on a new connection and checks that fairlead answered 400 and closed it, and that
// the server received nothing (what names the case in errors).
func refused400(t *testing.T, u *hostileUpstream, l *LB, raw, what string) {
	t.Helper()
	n := u.requests.Load()
	r := sendRaw(t, l, raw, true)
	if r.Status != 400 || !r.Closed {
		t.Errorf("%s: got %s; want 400 and the connection closed", what, r)
	}
	if d := u.requests.Load() - n; d != 0 {
		t.Errorf("%s: the server received %d requests, want none", what, d)
		nextHead(t, u)
	}
}

// nextHead is the next head the server recorded (it fails the test if none comes).
func nextHead(t *testing.T, u *hostileUpstream) upstreamBody {
	t.Helper()
	select {
	case b := <-u.bodies:
		return b
	case <-time.After(frontendtest.AnswerWait):
		t.Fatal("the server received no request")
		return upstreamBody{}
	}
}

// badRequestsGrew waits for fairlead_bad_requests_total{code} to have grown by n since before.
func badRequestsGrew(t *testing.T, l *LB, code string, before map[string]float64, n int) {
	t.Helper()
	if !testkit.Within(time.Second, func() bool { after, _ := hostileBadRequests(t, l); return after[code]-before[code] == float64(n) }) {
		after, _ := hostileBadRequests(t, l)
		t.Errorf(`fairlead_bad_requests_total{code=%q} grew by %v, want %d`, code, after[code]-before[code], n)
	}
}

// A request-target goes upstream as the client sent it when RFC 3986 allows its bytes ('[' ']' and a
// '%' that begins no pct-encoding too, as HAProxy), an absolute-form one in origin form. (The bytes it
// does not allow get 400 from the front end: lb/frontend's TestHostileTargetBytesRFC3986DoesNotAllowGet400;
// that they reach no server, TestHostileRefusalsReachNoServer.)
func TestHostileTargetsRFC3986AllowsGoUpstreamAsSent(t *testing.T) {
	u, l := targetsLB(t)
	f := func(target string) {
		t.Helper()
		r := sendRaw(t, l, "GET "+target+" HTTP/1.1\r\nHost: a\r\n\r\n", false)
		if r.Status != 204 {
			t.Errorf("%q: got %s; want the server's 204", target, r)
			return
		}
		want := target
		if rest, ok := strings.CutPrefix(target, "http://a"); ok {
			want = rest // absolute form goes in origin form
		}
		if line, _, _ := strings.Cut(nextHead(t, u).head, "\r\n"); line != "GET "+want+" HTTP/1.1" {
			t.Errorf("%q: the server received %q", target, line)
		}
	}
	f("/raw/azAZ09-._~!$&'()*+,;=:@/%2F?q=/?:@")
	f("/raw/a?b[]=1&c[x]=2")
	f("/raw/a%zz?b=%")
	f("http://a/raw/x?y")
}

// Content-Length goes upstream as one decimal number: no whitespace around it, no leading zeros, the
// name as the client spelled it, one field. Before the fix the value went as sent (" 005\t").
func TestHostileContentLengthGoesUpstreamAsItsDigits(t *testing.T) {
	u, l := targetsLB(t)
	f := func(field, body, want string) {
		t.Helper()
		r := sendRaw(t, l, "POST /raw/cl HTTP/1.1\r\nHost: a\r\n"+field+"\r\n\r\n"+body, false)
		if r.Status != 204 {
			t.Errorf("%q: got %s; want the server's 204", field, r)
			return
		}
		b := nextHead(t, u)
		var got []string
		for _, line := range strings.Split(b.head, "\r\n") {
			if k, _, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "content-length") {
				got = append(got, line)
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%q: the server received %q, want %q", field, got, want)
		}
		if !b.complete || b.n != int64(len(body)) {
			t.Errorf("%q: the server read %d body bytes (complete %v), want %d", field, b.n, b.complete, len(body))
		}
	}
	hello := "hello"
	f("Content-Length: 5", hello, "Content-Length: 5")
	f("Content-Length: 5 ", hello, "Content-Length: 5")
	f("Content-Length: \t5", hello, "Content-Length: 5")
	f("Content-Length:5", hello, "Content-Length: 5")
	f("Content-Length: \t 5\t ", hello, "Content-Length: 5")
	f("Content-Length: 005", hello, "Content-Length: 5")
	f("content-length: 0200", strings.Repeat("x", 200), "content-length: 200")
	f("CONTENT-LENGTH: 00", "", "CONTENT-LENGTH: 0")
	f("Content-Length: 0", "", "Content-Length: 0")
	f("Content-Length: 10", "0123456789", "Content-Length: 10")
	// Two Content-Length fields, even equal, never reach a server (the framer's 400).
	n := u.requests.Load()
	if r := frontendtest.Request(t, l.Addr(), "POST /raw/cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"); r.Status != 400 {
		t.Errorf("two equal Content-Lengths: got %s; want 400", r)
	}
	if d := u.requests.Load() - n; d != 0 {
		t.Errorf("two equal Content-Lengths: the server received %d requests", d)
	}
}

// A Connection field cannot take away the framing of the body fairlead sends: Content-Length and
// Transfer-Encoding named by Connection still go upstream (RFC 9110 section 7.6.1 forbids a client to
// name them; HAProxy keeps them too), else the server would read the body as the next request.
func TestHostileConnectionNamingTheFramingFieldsDoesNotUnframeTheBody(t *testing.T) {
	u := startHostileUpstream(t, hostileRecordBody)
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, hostileFiles(platformConfig(c, "", ""), hostileRawPool("raw", u.addr, []string{"/raw"}, "", "")))
	smuggled := "GET /raw/smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	f := func(name, raw string, wantField string) {
		t.Helper()
		n := u.requests.Load()
		r := sendRaw(t, l, raw, false)
		if r.Status != 200 {
			t.Errorf("%s: got %s; want the server's 200", name, r)
		}
		select {
		case b := <-u.bodies:
			if !strings.Contains(b.head, "\r\n"+wantField+"\r\n") || !b.complete {
				t.Errorf("%s: the server received %q (body complete %v), want %q in it", name, b.head, b.complete, wantField)
			}
		case <-time.After(frontendtest.AnswerWait):
			t.Errorf("%s: the server read no body", name)
		}
		time.Sleep(100 * time.Millisecond) // a smuggled request would arrive right behind
		if d := u.requests.Load() - n; d != 1 {
			t.Errorf("%s: the server received %d requests, want 1", name, d)
		}
	}
	f("Connection: content-length", "POST /raw/a HTTP/1.1\r\nHost: a\r\nConnection: content-length\r\nContent-Length: "+
		strconv.Itoa(len(smuggled))+"\r\n\r\n"+smuggled, "Content-Length: "+strconv.Itoa(len(smuggled)))
	f("Connection: Transfer-Encoding", "POST /raw/a HTTP/1.1\r\nHost: a\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n"+
		strconv.FormatInt(int64(len(smuggled)), 16)+"\r\n"+smuggled+"\r\n0\r\n\r\n", "Transfer-Encoding: chunked")
}

// CONNECT and TRACE, in any case, get 405 with an Allow that lists the standard methods fairlead
// forwards (GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH); the connection closes, nothing reaches a
// server, each is counted. Every other method, extension methods included, is forwarded. Before the fix
// TRACE was forwarded (and the server's echo relayed).
func TestHostileTRACEIsRefusedWith405AndEveryOtherMethodIsForwarded(t *testing.T) {
	u, l := targetsLB(t)
	before, _ := hostileBadRequests(t, l)
	refused := 0
	f := func(method string, forwarded bool) {
		t.Helper()
		n := u.requests.Load()
		target := "/raw/m"
		if method == "CONNECT" {
			target = "a:443"
		}
		r := sendRaw(t, l, method+" "+target+" HTTP/1.1\r\nHost: a\r\nCookie: session=secret\r\n\r\n", !forwarded)
		if !forwarded {
			refused++
			if r.Status != 405 || !r.Closed {
				t.Errorf("%s: got %s; want 405 and the connection closed", method, r)
			}
			if got := r.Header.Get("Allow"); got != "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH" {
				t.Errorf("%s: Allow %q", method, got)
			}
			if d := u.requests.Load() - n; d != 0 {
				t.Errorf("%s: the server received %d requests, want none", method, d)
				nextHead(t, u)
			}
			return
		}
		if r.Status != 204 {
			t.Errorf("%s: got %s; want the server's 204", method, r)
			return
		}
		if line, _, _ := strings.Cut(nextHead(t, u).head, "\r\n"); line != method+" "+target+" HTTP/1.1" {
			t.Errorf("%s: the server received %q", method, line)
		}
	}
	for _, m := range []string{"TRACE", "trace", "Trace", "CONNECT", "connect"} {
		f(m, false)
	}
	// Each method Allow lists is forwarded, and so are extension methods.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "PROPFIND", "TRACEX", "M-SEARCH"} {
		f(m, true)
	}
	badRequestsGrew(t, l, "405", before, refused)
}

// Over HTTP/2 TRACE gets 405 too, nothing reaches the leader, and the connection serves on. (A :path
// with a byte RFC 3986 does not allow gets 400 from the front end: lb/frontend's
// TestH2AuthorityAndPathAreCheckedLikeHostAndTarget.)
func TestH2TRACEIsRefusedAsOverHTTP1(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "")
	leader := c.Platforms[0]
	n := leader.Requests()
	r := dialRawH2(t, env, tlsAddr)
	r.Headers(1, true, ":method", "TRACE", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things")
	if got := r.Outcome(1); got != "405" {
		t.Errorf("TRACE: answered %s, want 405", got)
	}
	if leader.Requests() != n {
		t.Errorf("TRACE: the leader received it")
	}
	// Only the stream was refused: the connection serves the next one.
	r.Headers(3, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things?a[]=1")
	if got := r.Outcome(3); got != "200" {
		t.Errorf("the next stream on the connection: %s, want 200", got)
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

// An HTTP/1.1 Host is checked as HTTP/2's :authority is (host[:port], no userinfo, a port up to 65535,
// no IPv6 zone): 400, nothing forwarded, counted. fasthttp refused most of these before; a port over
// 65535 and a zone it let through.
func TestHostileHostIsCheckedLikeAnHTTP2Authority(t *testing.T) {
	u, l := targetsLB(t)
	before, _ := hostileBadRequests(t, l)
	bad := []string{"a b", "a/b?c", "user@evil.example", "[::1", "a:b:c", "a:99999", "[fe80::1%25eth0]", "x%41y", "a\\b"}
	for _, h := range bad {
		refused400(t, u, l, "GET /raw/x HTTP/1.1\r\nHost: "+h+"\r\n\r\n", fmt.Sprintf("Host %q", h))
	}
	badRequestsGrew(t, l, "400", before, len(bad))
	for _, h := range []string{"example.com", "example.com:8443", "[::1]:443", "127.0.0.1", "host:"} {
		if r := sendRaw(t, l, "GET /raw/x HTTP/1.1\r\nHost: "+h+"\r\n\r\n", false); r.Status != 204 {
			t.Errorf("Host %q: got %s; want the server's 204", h, r)
		}
		nextHead(t, u)
	}
	// HTTP/1.0 without a Host is still served (it goes with the address the client connected to).
	if r := sendRaw(t, l, "GET /raw/x HTTP/1.0\r\n\r\n", false); r.Status != 204 {
		t.Errorf("HTTP/1.0 without Host: got %s; want the server's 204", r)
	}
}
