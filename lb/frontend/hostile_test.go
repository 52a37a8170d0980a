package frontend

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"golang.org/x/net/http2"
)

// Hostile input against the front end with a trivial handler (server_test.go): every test sends raw
// bytes over TCP, reads the answer with a deadline and checks its status, whether the front end then
// closed the connection, the refusal's count, and that the handler was never given a refused request
// (lb's whole-path tests check, with a recording server, that such a request reaches no server).

const hostilePath = "/Thingworx/hostile"

// hostileCase is one raw request of a table and what must come of it.
type hostileCase struct {
	name    string
	raw     string
	want    []int // acceptable statuses
	close   bool  // the front end must close the connection after its answer
	handled int64 // requests the handler must be given: 0 = refused before it
}

// hostileBad is a request that must get 400, be closed and never be handled.
func hostileBad(name, raw string) hostileCase {
	return hostileCase{name: name, raw: raw, want: []int{400}, close: true}
}

// run sends the case's bytes in one write on a new connection and checks the answer, the close and
// the handler's count.
func (tc hostileCase) run(t *testing.T, tf *testFront) {
	t.Helper()
	before := tf.requests.Load()
	conn := frontendtest.Dial(t, tf.addr)
	conn.WriteRaw(tc.raw) //nolint:errcheck
	r := conn.Answer(frontendtest.AnswerWait)
	if tc.close && r.Status != 0 && !r.Closed {
		r.Closed, r.After = conn.ClosedWithin(frontendtest.CloseWait)
	}
	ok := false
	for _, w := range tc.want {
		ok = ok || r.Status == w
	}
	if !ok {
		t.Errorf("got %s; want status %v", r, tc.want)
	}
	if tc.close && !r.Closed {
		t.Errorf("the connection was not closed within %s of the answer (%s); got %s", frontendtest.CloseWait, r.After, r)
	}
	if got := tf.requests.Load() - before; got != tc.handled {
		t.Errorf("the handler was given %d requests, want %d (answer: %s)", got, tc.handled, r)
	}
}

// hostileFramingCases are the framing errors of the specification, each with the head and the bad
// bytes in one write, and the two requests that must be served (a version other than 1 aside).
func hostileFramingCases() []hostileCase {
	reqLine := "GET " + hostilePath + " HTTP/1.1\r\n"
	getHost := reqLine + "Host: a\r\n"
	post := "POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\n"
	chunked := post + "Transfer-Encoding: chunked\r\n\r\n"
	body := "5\r\nhello\r\n0\r\n\r\n"
	return []hostileCase{
		// Content-Length and Transfer-Encoding.
		hostileBad("Content-Length then Transfer-Encoding", post+"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"+body),
		hostileBad("Transfer-Encoding then Content-Length", post+"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"+body),
		hostileBad("Content-Length then Transfer-Encoding, a request behind", post+"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"),
		hostileBad("Transfer-Encoding then a lower-case content-length", post+"Transfer-Encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n"),
		hostileBad("two equal Content-Lengths", post+"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
		hostileBad("two different Content-Lengths", post+"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
		hostileBad("Content-Length 12a", post+"Content-Length: 12a\r\n\r\nhello"),
		hostileBad("Content-Length -1", post+"Content-Length: -1\r\n\r\nhello"),
		hostileBad("Content-Length +5", post+"Content-Length: +5\r\n\r\nhello"),
		hostileBad("Content-Length 1 2", post+"Content-Length: 1 2\r\n\r\nhello"),
		hostileBad("empty Content-Length", post+"Content-Length: \r\n\r\nhello"),
		// obs-fold.
		hostileBad("obs-fold with a space", getHost+"X-A: a\r\n b\r\n\r\n"),
		hostileBad("obs-fold with a tab", getHost+"X-A: a\r\n\tb\r\n\r\n"),
		// Transfer-Encoding other than exactly chunked.
		hostileBad("Transfer-Encoding gzip", post+"Transfer-Encoding: gzip\r\n\r\n"+body),
		hostileBad("Transfer-Encoding chunked, gzip", post+"Transfer-Encoding: chunked, gzip\r\n\r\n"+body),
		hostileBad("Transfer-Encoding gzip, chunked", post+"Transfer-Encoding: gzip, chunked\r\n\r\n"+body),
		hostileBad("Transfer-Encoding identity", post+"Transfer-Encoding: identity\r\n\r\n"+body),
		hostileBad("Transfer-Encoding chunked NUL", post+"Transfer-Encoding: chunked\x00\r\n\r\n"+body),
		hostileBad("Transfer-Encoding xchunked", post+"Transfer-Encoding: xchunked\r\n\r\n"+body),
		hostileBad("two Transfer-Encoding headers", post+"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"+body),
		hostileBad("Transfer-Encoding on HTTP/1.0", "POST "+hostilePath+" HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"+body),
		// Chunk sizes and extensions, in the same write as the head.
		hostileBad("chunk size zz", chunked+"zz\r\nhello\r\n0\r\n\r\n"),
		hostileBad("empty chunk size", chunked+"\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk size -1", chunked+"-1\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk size 0x10", chunked+"0x10\r\n0123456789abcdef\r\n0\r\n\r\n"),
		hostileBad("chunk size with a leading space", chunked+" 5\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk size of 20 hex digits", chunked+"10000000000000000000\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk extension with a CTL byte", chunked+"5;a=\x01\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk extension starting with =", chunked+"5;=a\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk extension name bad[", chunked+"5;bad[=x\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk extension of three words", chunked+"5;a b c\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk extension with an unterminated quoted value", chunked+"5;a=\"open\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk extension with a bad quoted-pair", chunked+"5;a=\"\\\x01\"\r\nhello\r\n0\r\n\r\n"),
		hostileBad("chunk data not followed by CRLF", chunked+"5\r\nhelloXY\r\n0\r\n\r\n"),
		// Line endings.
		hostileBad("bare LF after the request line", "GET "+hostilePath+" HTTP/1.1\nHost: a\r\n\r\n"),
		hostileBad("bare LF after a header line", getHost+"X-A: 1\nX-B: 2\r\n\r\n"),
		hostileBad("bare LF as the final blank line", getHost+"\n"),
		hostileBad("bare CR inside a header value", getHost+"X-A: a\rb\r\n\r\n"),
		// Header names.
		hostileBad("space between Host and the colon", reqLine+"Host : a\r\n\r\n"),
		hostileBad("space between a name and the colon", getHost+"X-A : 1\r\n\r\n"),
		hostileBad("tab between a name and the colon", getHost+"X-A\t: 1\r\n\r\n"),
		hostileBad("NUL in a header value", getHost+"X-A: a\x00b\r\n\r\n"),
		hostileBad("NUL in the request target", "GET /Thingworx/hos\x00tile HTTP/1.1\r\nHost: a\r\n\r\n"),
		hostileBad("NUL in a header name", getHost+"X-\x00A: 1\r\n\r\n"),
		hostileBad("header name X(A)", getHost+"X(A): 1\r\n\r\n"),
		hostileBad("empty header name", getHost+":x\r\n\r\n"),
		hostileBad("header name with a space", getHost+"X A: 1\r\n\r\n"),
		hostileBad("non-ASCII header name", getHost+"X-\xc3\xa9: 1\r\n\r\n"),
		// Host.
		hostileBad("HTTP/1.1 without Host", reqLine+"X-A: 1\r\n\r\n"),
		hostileBad("two equal Host headers", getHost+"Host: a\r\n\r\n"),
		hostileBad("two different Host headers", getHost+"Host: b\r\n\r\n"),
		// Request line.
		hostileBad("space in the request target", "GET /Thingworx/ho stile HTTP/1.1\r\nHost: a\r\n\r\n"),
		hostileBad("control byte in the request target", "GET /Thingworx/hos\x01tile HTTP/1.1\r\nHost: a\r\n\r\n"),
		hostileBad("DEL in the request target", "GET /Thingworx/hos\x7ftile HTTP/1.1\r\nHost: a\r\n\r\n"),
		hostileBad("request line without a version", "GET "+hostilePath+"\r\nHost: a\r\n\r\n"),
		hostileBad("request line with two spaces", "GET  "+hostilePath+" HTTP/1.1\r\nHost: a\r\n\r\n"),
		hostileBad("request line with an extra word", "GET "+hostilePath+" HTTP/1.1 extra\r\nHost: a\r\n\r\n"),
		// Versions and leading empty lines.
		{name: "HTTP/2.0", raw: "GET " + hostilePath + " HTTP/2.0\r\nHost: a\r\n\r\n", want: []int{505, 400}},
		{name: "leading empty lines are served", raw: "\r\n\r\n" + getHost + "\r\n", want: []int{200}, handled: 1},
	}
}

func TestHostileFramingGets400ClosesAndIsNeverHandled(t *testing.T) {
	tf := startFront(t, frontOptions{})
	for _, tc := range hostileFramingCases() {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, tf) })
	}
	// The front end still serves well-formed requests.
	if r := frontendtest.Request(t, tf.addr, "GET "+hostilePath+" HTTP/1.1\r\nHost: a\r\n\r\n"); r.Status != 200 {
		t.Fatalf("got %s after the hostile requests, want 200", r)
	}
}

// Beyond the specification's same-write cases: the same bad requests cut in two writes (at the middle,
// and three bytes before the end), so that the bad bytes meet the check across two reads. A head is
// complete only with the second write, so a request cut inside its head is never handled; one cut
// inside its body may be, but the 400 must still come from the front end.
func TestHostileFramingSplitAcrossWritesGets400AndCloses(t *testing.T) {
	tf := startFront(t, frontOptions{})
	for _, tc := range hostileFramingCases() {
		if !tc.close {
			continue
		}
		for _, at := range []int{len(tc.raw) / 2, len(tc.raw) - 3} {
			t.Run(fmt.Sprintf("%s split at %d of %d", tc.name, at, len(tc.raw)), func(t *testing.T) {
				headEnd := strings.Index(tc.raw, "\r\n\r\n")
				inHead := headEnd < 0 || at < headEnd+4
				before := tf.requests.Load()
				conn := frontendtest.Dial(t, tf.addr)
				conn.WriteRaw(tc.raw[:at]) //nolint:errcheck
				// Give the first part time to be read on its own (pacing, not an assertion).
				time.Sleep(20 * time.Millisecond)
				conn.WriteRaw(tc.raw[at:]) //nolint:errcheck
				r := conn.AnswerAndClose()
				if r.Status != 400 || !r.Closed {
					t.Errorf("got %s; want 400 and a closed connection", r)
				}
				if n := tf.requests.Load() - before; inHead && n != 0 {
					t.Errorf("cut inside its head, the request was handled (%d requests)", n)
				}
			})
		}
	}
}

// Chunk extensions are checked against their whole grammar (RFC 9112 7.1.1): a bad one in the first
// chunk-size line gets the front end's 400 and the handler is given nothing; valid ones are handled
// and the whole body read.
func TestHostileChunkExtensionsAreCheckedWholeAndOnlyValidOnesHandled(t *testing.T) {
	tf := startFront(t, frontOptions{})
	const chunked = "POST /rec HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	f := func(ext string, handled bool) {
		t.Helper()
		before := tf.requests.Load()
		r := frontendtest.Request(t, tf.addr, chunked+"5"+ext+"\r\nhello\r\n0\r\n\r\n")
		got := tf.requests.Load() - before
		if !handled {
			if r.Status != 400 || !r.Closed || got != 0 {
				t.Errorf("5%s: got %s with %d requests handled; want the front end's 400, a closed connection, none handled", ext, r, got)
			}
			return
		}
		if r.Status != 200 || r.Header.Get("X-Body-Bytes") != "5" || got != 1 {
			t.Errorf("5%s: got %s after %d requests handled; want 200 with X-Body-Bytes 5", ext, r, got)
		}
	}
	f(";bad[=x", false)
	f(";a b c", false)
	f(";a=\"unterminated", false)
	f(";a=\"bad pair \\\x01\"", false)
	f(";a=b ", false)
	f(";a=b", true)
	f(" ; a = \"x y\"", true)
	f(";a;b=c", true)
	f(";a=\"q\\\"uote\"", true)
}

// A bad chunk that arrives after the handler began reading the body fails the body's read: the
// handler claims the framer's refusal (Claim) and the client gets its 400, and the connection closes.
func TestHostileChunkErrorArrivingLaterIsClaimedByTheHandler(t *testing.T) {
	tf := startFront(t, frontOptions{})
	conn := frontendtest.Dial(t, tf.addr)
	conn.WriteRaw("POST /rec HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n") //nolint:errcheck
	testkit.Within(time.Second, func() bool { return tf.requests.Load() > 0 })
	before := tf.f.RefusedTotal(400)
	conn.WriteRaw("zz\r\n") //nolint:errcheck
	r := conn.AnswerAndClose()
	if r.Status != 400 || !r.Closed || !strings.Contains(string(r.Body), "chunk") {
		t.Errorf("got %s; want the framer's 400 on the chunk size and a closed connection", r)
	}
	if n := tf.f.RefusedTotal(400) - before; n != 1 {
		t.Errorf("refusals with 400: +%d, want 1", n)
	}
}

func TestHostileSizeLimits(t *testing.T) {
	const limit = 1024
	tf := startFront(t, frontOptions{lim: Limits{MaxHeader: limit, MaxBody: limit}})
	longTarget := hostilePath + "?q=" + strings.Repeat("a", limit+100)
	var manyHeaders strings.Builder
	for i := 0; manyHeaders.Len() <= limit+200; i++ {
		fmt.Fprintf(&manyHeaders, "X-Hostile-%02d: %s\r\n", i, strings.Repeat("h", 30))
	}
	prefix := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\nX-Pad: "
	atLimit := prefix + strings.Repeat("p", limit-len(prefix)-len("\r\n\r\n")) + "\r\n\r\n"
	if len(atLimit) != limit {
		t.Fatalf("head of %d bytes", len(atLimit))
	}
	chunks := func(total, size int) string {
		var b strings.Builder
		for total > 0 {
			n := min(size, total)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, strings.Repeat("b", n))
			total -= n
		}
		return b.String() + "0\r\n\r\n"
	}
	post := "POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\n"
	tf.refusal(t, "request line over max_header_size", "GET "+longTarget+" HTTP/1.1\r\nHost: a\r\n\r\n", 431)
	tf.refusal(t, "headers over max_header_size", "GET "+hostilePath+" HTTP/1.1\r\nHost: a\r\n"+manyHeaders.String()+"\r\n", 431)
	hostileCase{name: "a head of exactly max_header_size is served", raw: atLimit, want: []int{200}, handled: 1}.run(t, tf)
	tf.refusal(t, "Content-Length over max_body_size", post+"Content-Length: 4000\r\n\r\n"+strings.Repeat("b", 4000), 413)
	// A chunked body over the limit is found while the handler reads it: it is given the request, and
	// answers the framer's 413 (Claim).
	before := tf.f.RefusedTotal(413)
	if r := frontendtest.Request(t, tf.addr, post+"Transfer-Encoding: chunked\r\n\r\n"+chunks(4000, 500)); r.Status != 413 || !r.Closed {
		t.Errorf("chunked body over max_body_size: got %s; want 413 and a closed connection", r)
	}
	if n := tf.f.RefusedTotal(413) - before; n != 1 {
		t.Errorf("chunked body over max_body_size: refusals with 413 +%d, want 1", n)
	}
	r := frontendtest.Request(t, tf.addr, post+"Transfer-Encoding: chunked\r\n\r\n"+chunks(limit, 500))
	if r.Status != 200 || r.Header.Get("X-Body-Bytes") != strconv.Itoa(limit) {
		t.Errorf("chunked body of exactly max_body_size: got %s with X-Body-Bytes %q; want 200 and %d", r, r.Header.Get("X-Body-Bytes"), limit)
	}
}

func TestHostileSlowlorisHeadersGet408WithinTheHeaderTimeout(t *testing.T) {
	tf := startFront(t, frontOptions{lim: Limits{HeaderTimeout: time.Second}, readTimeout: 30 * time.Second, idleTimeout: 60 * time.Second})
	before, refused := tf.requests.Load(), tf.f.RefusedTotal(408)
	// 150 bytes, one every 100 ms: 15 s to send the whole head.
	head := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\nX-Slow: " + strings.Repeat("s", 100) + "\r\n\r\n"
	conn := frontendtest.Dial(t, tf.addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range len(head) {
			if _, err := conn.Write([]byte{head[i]}); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	})
	r := conn.AnswerBy(start.Add(5 * time.Second))
	took := time.Since(start)
	if r.Status != 0 && !r.Closed {
		r.Closed, r.After = conn.ClosedWithin(frontendtest.CloseWait)
	}
	close(stop)
	wg.Wait()
	if r.Status != 408 || !r.Closed {
		t.Errorf("got %s after %s; want 408 and a closed connection", r, took.Round(time.Millisecond))
	}
	if r.Status != 0 && (took < 900*time.Millisecond || took > 5*time.Second) {
		t.Errorf("answered after %s; want between 0.9s and 5s (header_timeout 1s)", took.Round(time.Millisecond))
	}
	if n := tf.requests.Load() - before; n != 0 {
		t.Errorf("the handler was given %d requests", n)
	}
	if r.Status == 408 && !testkit.Within(time.Second, func() bool { return tf.f.RefusedTotal(408) == refused+1 }) {
		t.Errorf("refusals with 408 went from %d to %d, want +1", refused, tf.f.RefusedTotal(408))
	}
}

// A POST with Content-Length 100000 whose body stops after 10 bytes (fasthttp reads up to 8 KiB of a
// body before the handler runs) or after 60000 (the handler is reading it): the connection is cut about
// read_timeout after the last byte, with a 408 or without an answer.
func TestHostileSlowBodyGets408OrACloseAfterTheReadTimeout(t *testing.T) {
	tf := startFront(t, frontOptions{readTimeout: time.Second})
	for _, sent := range []int{10, 60000} {
		t.Run(fmt.Sprintf("after %d bytes", sent), func(t *testing.T) {
			conn := frontendtest.Dial(t, tf.addr)
			start := time.Now()
			conn.WriteRaw("POST /rec HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("b", sent)) //nolint:errcheck
			conn.ExpectCut(t, start)
		})
	}
}

// Over max_conns fasthttp refuses connections with 503 (or closes them) at once, without a goroutine
// held each; fasthttp counts them (lb adds its count to the limit kind), a WARN line of the limit kind
// says so, and the held connections serve on.
func TestHostileMaxConnsRefusesExtraConnectionsCountsAndWarns(t *testing.T) {
	buf := &testkit.SyncBuffer{}
	tf := startFront(t, frontOptions{maxConns: 4, log: slog.New(slog.NewTextHandler(buf, nil))})
	req := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\n\r\n"
	held := make([]*frontendtest.Conn, 4)
	for i := range held {
		held[i] = frontendtest.Dial(t, tf.addr)
		held[i].WriteRaw(req) //nolint:errcheck
		if r := held[i].Answer(frontendtest.AnswerWait); r.Status != 200 {
			t.Fatalf("keep-alive connection %d: got %s, want 200", i, r)
		}
	}
	g0 := runtime.NumGoroutine()

	var extras []*frontendtest.Conn
	refused := 0
	for range 50 {
		conn, err := testkit.TryDialRaw(t, tf.addr, time.Second)
		if err != nil {
			refused++ // not accepted at all: refused quickly too
			continue
		}
		extras = append(extras, &frontendtest.Conn{RawConn: conn})
	}
	deadline := time.Now().Add(3 * time.Second) // one bound for all of them
	var kept []string
	for i, e := range extras {
		e.WriteRaw(req) //nolint:errcheck
		r := e.AnswerBy(deadline)
		switch {
		case r.Status == 503, r.Status == 0 && r.Closed:
			refused++
		default:
			kept = append(kept, fmt.Sprintf("#%d: %s", i, r))
		}
	}
	t.Logf("%d of 50 extra connections refused", refused)
	if len(kept) > 0 {
		t.Errorf("%d of 50 extra connections were neither answered 503 nor closed within 3s: %s", len(kept), strings.Join(kept, "; "))
	}
	// Checked while the extra connections are still open on the client's side.
	const slack = 15
	if !testkit.Within(time.Second, func() bool { return runtime.NumGoroutine()-g0 < slack }) {
		t.Errorf("goroutines went from %d to %d while 50 extra connections were refused (slack %d)", g0, runtime.NumGoroutine(), slack)
	}
	for i, h := range held {
		h.WriteRaw(req) //nolint:errcheck
		if r := h.Answer(frontendtest.AnswerWait); r.Status != 200 {
			t.Errorf("held connection %d after the refusals: got %s, want 200", i, r)
		}
	}
	testkit.Eventually(t, "the refused connections to be counted and logged", 3*time.Second, func() bool {
		return tf.srv.GetRejectedConnectionsCount() >= 1 &&
			strings.Contains(buf.String(), `level=WARN msg="frontend: connection limit reached: new connections are refused" kind=limit detail="4 connections open"`)
	})
}

func TestHostilePipelinedInvalidRequestAfterAValidOneIsNeverHandled(t *testing.T) {
	tf := startFront(t, frontOptions{})
	valid := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, tc := range []struct{ name, invalid string }{
		{"Content-Length with Transfer-Encoding", "POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"obs-fold", "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n"},
		{"bare LF", "GET " + hostilePath + " HTTP/1.1\nHost: a\r\n\r\n"},
		{"Content-Length 12a", "POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\nContent-Length: 12a\r\n\r\nhello"},
		{"NUL in a header value", "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tf.requests.Load()
			conn := frontendtest.Dial(t, tf.addr)
			conn.WriteRaw(valid + tc.invalid) //nolint:errcheck
			first := conn.Answer(frontendtest.AnswerWait)
			if first.Status != 200 {
				t.Fatalf("the valid request: got %s; want 200", first)
			}
			second := conn.AnswerAndClose()
			if second.Status != 400 || !second.Closed {
				t.Errorf("the invalid request: got %s; want 400 and a closed connection", second)
			}
			if n := tf.requests.Load() - before; n != 1 {
				t.Errorf("the handler was given %d requests, want 1 (the valid one)", n)
			}
		})
	}
}

// Each refusal is counted by its status code, and by that one only.
func TestHostileBadRequestsAreCountedByStatusCode(t *testing.T) {
	tf := startFront(t, frontOptions{})
	codes := []int{400, 408, 413, 431, 505}
	for _, tc := range []struct{ name, raw string }{
		{"ambiguous framing", "POST " + hostilePath + " HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"HTTP/2.0", "GET " + hostilePath + " HTTP/2.0\r\nHost: a\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[int]uint64{}
			for _, c := range codes {
				before[c] = tf.f.RefusedTotal(c)
			}
			r := frontendtest.Request(t, tf.addr, tc.raw)
			if r.Status != 400 && r.Status != 505 {
				t.Fatalf("got %s; want 400 or 505", r)
			}
			if !testkit.Within(time.Second, func() bool { return tf.f.RefusedTotal(r.Status) == before[r.Status]+1 }) {
				t.Errorf("after a %d answer its refusals went from %d to %d, want +1", r.Status, before[r.Status], tf.f.RefusedTotal(r.Status))
			}
			for _, c := range codes {
				if c != r.Status && tf.f.RefusedTotal(c) != before[c] {
					t.Errorf("refusals with %d changed too: %d → %d", c, before[c], tf.f.RefusedTotal(c))
				}
			}
		})
	}
}

// The socket's read deadline moves later lazily (frontConn.armRead): after a request, the socket keeps
// the read_timeout deadline of that request while fasthttp asks for idle_timeout. A keep-alive client
// that pauses longer than read_timeout (but less than idle_timeout) between requests must still be
// served, and the connection must still close once idle_timeout has passed; a head that stops
// mid-way still gets its 408 after header_timeout.
func TestHostileLazyReadDeadlineKeepsIdleAndReadTimeouts(t *testing.T) {
	tf := startFront(t, frontOptions{lim: Limits{HeaderTimeout: time.Second}, readTimeout: 200 * time.Millisecond, idleTimeout: 3 * time.Second})
	get := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\n\r\n"
	conn := frontendtest.Dial(t, tf.addr)
	for i := range 3 {
		if i > 0 {
			time.Sleep(800 * time.Millisecond) // 4 read_timeouts of silence, well within idle_timeout
		}
		conn.WriteRaw(get) //nolint:errcheck
		if r := conn.Answer(frontendtest.AnswerWait); r.Status != 200 {
			t.Fatalf("request %d after a pause longer than read_timeout: %s", i+1, r)
		}
	}
	// Idle from now on: closed after idle_timeout (3 s), well before 10 s.
	if closed, after := conn.ClosedWithin(10 * time.Second); !closed {
		t.Fatalf("an idle keep-alive connection was not closed after idle_timeout: %s", after)
	}

	// A head that stops half-way, after a served request on the same connection: 408.
	conn = frontendtest.Dial(t, tf.addr)
	conn.WriteRaw(get) //nolint:errcheck
	if r := conn.Answer(frontendtest.AnswerWait); r.Status != 200 {
		t.Fatalf("first request: %s", r)
	}
	conn.WriteRaw("GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\nX-Half: ") //nolint:errcheck
	if r := conn.AnswerBy(time.Now().Add(10 * time.Second)); r.Status != 408 {
		t.Fatalf("a head stopped half-way: %s, want 408 after header_timeout", r)
	}
}

// A head far over max_header_size is refused by fasthttp itself (its read buffer fills before the
// framer's limit is passed) or by the framer; either way the client reads the 431 and then the end of
// the connection, not a reset that could lose the answer on a real network (the connection is closed
// with a lingering close, its unread bytes drained).
func TestHostileOversizedHeadsGet431AndACleanClose(t *testing.T) {
	tf := startFront(t, frontOptions{lim: Limits{MaxHeader: 8 << 10}}) // lb's default max_header_size
	f := func(name, raw string) {
		t.Helper()
		conn, err := net.Dial("tcp", tf.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if _, err := conn.Write([]byte(raw)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(conn)
		if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 431 ") {
			t.Errorf("%s: read %q then %v; want the 431 and a clean end of the connection", name, got, err)
		}
	}
	f("a 9 KB target", "GET /"+strings.Repeat("a", 9000)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	f("a 100 KB target", "GET /"+strings.Repeat("a", 100000)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	var many strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&many, "X-H%d: v\r\n", i)
	}
	f("10,000 fields", "GET / HTTP/1.1\r\nHost: x\r\n"+many.String()+"\r\n")
	f("a 64 KiB cookie", "GET / HTTP/1.1\r\nHost: x\r\nCookie: "+strings.Repeat("a", 65536)+"\r\n\r\n")
}

// A request-target holds only the bytes RFC 3986 allows: '#', '"', '<', '>', '\', '^', '`', '{', '|',
// '}' (and controls, DEL, bytes over 0x7e) get 400, the connection closes, the handler is given
// nothing and each is counted. '[' ']' and a '%' that begins no pct-encoding are handled (HAProxy
// forwards them too).
func TestHostileTargetBytesRFC3986DoesNotAllowGet400(t *testing.T) {
	tf := startFront(t, frontOptions{})
	f := func(target string, handled bool) {
		t.Helper()
		raw := "GET " + target + " HTTP/1.1\r\nHost: a\r\n\r\n"
		if !handled {
			tf.refusal(t, fmt.Sprintf("%q", target), raw, 400)
			return
		}
		hostileCase{raw: raw, want: []int{200}, handled: 1}.run(t, tf)
	}
	for _, c := range []string{"#", `"`, "<", ">", `\`, "^", "`", "{", "|", "}"} {
		f("/raw/a"+c+"b", false)
		f("/raw/a?q="+c, false)
		f("http://a/raw/a"+c, false)
	}
	f("/raw/a#", false) // a bare fragment
	f("/raw/caf\xc3\xa9", false)
	f("/raw/a\x7f", false)
	f("/raw/azAZ09-._~!$&'()*+,;=:@/%2F?q=/?:@", true)
	f("/raw/a?b[]=1&c[x]=2", true)
	f("/raw/a%zz?b=%", true)
	f("http://a/raw/x?y", true)
}

// A request target is in one of RFC 9112's forms: origin ("/path"), absolute ("http://host/path"), or
// asterisk ("*", for OPTIONS). Anything else ("a/b", "x:80", "raw/x", GET *) is read by each server its
// own way: 400, nothing handled, counted (HAProxy refuses them too). fasthttp's parser refuses them
// (answered by the front end's ErrorHandler): this test guards that. Over HTTP/2, :path holds the same
// rule (TestH2AuthorityAndPathAreCheckedLikeHostAndTarget).
func TestHostileATargetInNoFormOfRFC9112Gets400(t *testing.T) {
	tf := startFront(t, frontOptions{})
	for _, target := range []string{"a/b", "x:80", "raw/x", "*", "http:/raw/x", "1http://a/raw", "-:/"} {
		tf.refusal(t, "GET "+target, "GET "+target+" HTTP/1.1\r\nHost: a\r\n\r\n", 400)
	}
	for _, raw := range []string{"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "GET http://a/raw/x HTTP/1.1\r\nHost: a\r\n\r\n", "GET HTTPS://a/raw/y HTTP/1.1\r\nHost: a\r\n\r\n"} {
		hostileCase{name: raw, raw: raw, want: []int{200}, handled: 1}.run(t, tf)
	}
}

// Every refusal is recorded for the access log as it was (OnRefused; lb writes the line:
// TestRefusalsAreLoggedAsTheyWere): the method and path the client sent (never the query string), the
// status (or, for an HTTP/2 stream reset without an answer, its code), the reason, the real duration
// and the protocol: HTTP/1.1 refused by the framer in the read that brought it or in a later one, a
// request line that is not one (neither its "method" nor its "path" kept), and each refused HTTP/2
// stream. None is handled.
func TestRefusalsAreRecordedAsTheyWere(t *testing.T) {
	var mu sync.Mutex
	var recs []RefusedRequest
	tf := startFront(t, frontOptions{lim: Limits{HeaderTimeout: 300 * time.Millisecond, MaxHeader: 2048}, onRefused: func(r *RefusedRequest) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, *r)
	}})
	records := func() []RefusedRequest { mu.Lock(); defer mu.Unlock(); return slices.Clone(recs) }
	f := func(path, proto string, want RefusedRequest, minTook, maxTook time.Duration) {
		t.Helper()
		var got RefusedRequest
		testkit.Eventually(t, "the record of "+path, 5*time.Second, func() bool {
			for _, r := range records() {
				if r.Path == path && r.Proto == proto {
					got = r
					return true
				}
			}
			return false
		})
		took := got.Took
		got.Client, got.Took, want.Path, want.Proto = nil, 0, path, proto
		if want.Reason == "" { // not checked
			got.Reason = ""
		}
		if got != want || took < minTook || took > maxTook {
			t.Errorf("%s over %s: %+v after %s; want %+v after %s to %s", path, proto, got, took, want, minTook, maxTook)
		}
	}
	// HTTP/1.1, refused in the read that brought it.
	frontendtest.Request(t, tf.addr, "POST /abc?appKey=s3cret HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
	f("/abc", "http/1.1", RefusedRequest{Method: "POST", Status: 400, Reason: "Content-Length with Transfer-Encoding"}, 0, time.Second)
	// Refused in a later read than its request line's: a head that stops arriving (408).
	c := frontendtest.Dial(t, tf.addr)
	c.WriteRaw("GET /slow HTTP/1.1\r\nHost: x\r\n") //nolint:errcheck
	if r := c.AnswerAndClose(); r.Status != 408 {
		t.Fatalf("a head that stops arriving: %s, want 408", r)
	}
	f("/slow", "http/1.1", RefusedRequest{Method: "GET", Status: 408}, 300*time.Millisecond, 10*time.Second)
	// A request line that is not one: neither its "method" nor its "path" is kept.
	for _, line := range []string{"Cookie: s3cret=1\r\n\r\n", "Authorization Basic s3cret\r\n\r\n"} {
		frontendtest.Request(t, tf.addr, line)
	}
	testkit.Eventually(t, "the records of the two non-request lines", 5*time.Second, func() bool {
		n := 0
		for _, r := range records() {
			if r.Status == 400 && r.Path == "" && r.Proto == "http/1.1" {
				n++
			}
		}
		return n == 2
	})

	// HTTP/2: a malformed stream (reset), a head over max_header_size (431), a content-length the DATA
	// does not agree with (reset after the request was read), each recorded.
	r := tf.dialH2(t)
	r.Headers(1, true, append(get(tf.tlsAddr, "/raw/malformed?appKey=s3cret"), "connection", "close")...)
	if got := r.Result(1); got.Reset != "PROTOCOL_ERROR" {
		t.Fatalf("a connection-specific field: %s", got)
	}
	f("/raw/malformed", "h2", RefusedRequest{Method: "GET", Reset: "PROTOCOL_ERROR", Reason: "a connection-specific field"}, 0, time.Second)
	r.Headers(3, true, append(get(tf.tlsAddr, "/raw/big"), "x-big", strings.Repeat("b", 3000))...)
	if got := r.Result(3); got.Status != "431" {
		t.Fatalf("a head over max_header_size: %s", got)
	}
	f("/raw/big", "h2", RefusedRequest{Method: "GET", Status: 431, Reason: "request header fields too large"}, 0, time.Second)
	block := r.Block(":method", "POST", ":scheme", "https", ":authority", tf.tlsAddr, ":path", "/raw/cl", "content-length", "0")
	r.InOneWrite(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block, EndHeaders: true}) //nolint:errcheck
		fr.WriteData(5, true, []byte("GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"))                    //nolint:errcheck
	})
	if got := r.Result(5); got.Reset != "PROTOCOL_ERROR" {
		t.Fatalf("content-length 0 and DATA: %s", got)
	}
	f("/raw/cl", "h2", RefusedRequest{Method: "POST", Reset: "PROTOCOL_ERROR", Reason: "content-length and DATA disagree"}, 0, time.Second)

	if n := tf.requests.Load(); n != 0 {
		t.Errorf("the handler was given %d requests, want none", n)
	}
	for _, r := range records() {
		if strings.Contains(fmt.Sprintf("%+v", r), "s3cret") {
			t.Errorf("a query string or a non-request line reached a record: %+v", r)
		}
	}
}
