package frontend

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"golang.org/x/net/http2"
)

// HTTP/2 on the TLS listener (h2.go, h2conn.go), against a trivial handler (server_test.go): the
// connection's rules, its frames, flow control, HPACK's limits, malformed streams, the checks of
// :authority and :path, and a browser's page over h2. What the handler is given counts: a refused stream is never handed to it, so
// never forwarded by lb (whose whole-path tests check it with a recording server).

func TestH2AGoClientOfferingH2GetsHTTP2AndAnHTTP11ClientHTTP11(t *testing.T) {
	tf := startFront(t, frontOptions{})
	// net/http's own client, told to try HTTP/2, as browsers do by default.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tf.clientTLS(), ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + tf.tlsAddr + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" || resp.StatusCode != 200 {
		t.Fatalf("%d over %s, want 200 over HTTP/2.0 (h2)", resp.StatusCode, resp.Proto)
	}
	if n := tf.h2.Counts().Streams; n != 1 {
		t.Errorf("%d HTTP/2 streams counted, want 1", n)
	}
	// A client that offers http/1.1 only is still served HTTP/1.1 on the same listener.
	cfg := tf.clientTLS()
	cfg.NextProtos = []string{"http/1.1"}
	h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer h1.CloseIdleConnections()
	resp, err = h1.Get("https://" + tf.tlsAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS.NegotiatedProtocol != "http/1.1" || resp.Proto != "HTTP/1.1" {
		t.Fatalf("an HTTP/1.1-only client: %d over %s (ALPN %q), want 200 over http/1.1", resp.StatusCode, resp.Proto, resp.TLS.NegotiatedProtocol)
	}
}

// Chromium loads a page from the front end over HTTP/2 (it was lb's test of a page proxied to the
// leader; what the leader sees of an HTTP/2 request is lb's TestProxyPassesARequestOnWithoutHopByHopFieldsAndWithXForwarded).
func TestH2ChromiumLoadsAPageOverH2(t *testing.T) {
	tf := startFront(t, frontOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := browser.Open(t, ctx, chromedp.Flag("ignore-certificate-errors", true))
	p.Do("open the page", chromedp.Navigate("https://"+tf.tlsAddr+"/Thingworx/Composer/index.html"))
	if got := p.Eval(`performance.getEntriesByType('navigation')[0].nextHopProtocol`); got != "h2" {
		t.Errorf("nextHopProtocol %q, want h2", got)
	}
	if got := p.Eval(`document.body.innerText`); !strings.Contains(got, "ok") {
		t.Errorf("the page says %q, want the handler's answer", got)
	}
	if n := tf.requests.Load(); n == 0 {
		t.Errorf("the handler was given no request")
	}
}

// 200 concurrent streams on one connection (http2_max_streams raised to let them all open at once),
// GETs of answers of various sizes and POSTs of bodies with and without a length, all reach the handler
// and come back intact. (x/net's client waits for stream slots, StrictMaxConcurrentStreams, only up to a
// point: it stalls once more requests wait than the server allows streams, golang/go#70809; so the
// server's limit is what lets 200 run at once here, as a browser's would need.)
func TestH2TwoHundredConcurrentStreamsOnOneConnectionComeBackIntact(t *testing.T) {
	tf := startFront(t, frontOptions{maxStreams: 250})
	client := tf.h2Client(t)
	const n = 200
	if err := h2Exchange(client, tf.tlsAddr, 0); err != nil { // the server's SETTINGS known
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- h2Exchange(client, tf.tlsAddr, i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := tf.h2.Counts(); got.Conns != 1 || got.Streams != n+1 {
		t.Errorf("%d connections and %d streams, want 1 and %d", got.Conns, got.Streams, n+1)
	}
}

// h2Exchange makes request i: even ones GET an answer of i*517 bytes, odd ones POST i*1031 random bytes
// (every fourth without a length, as a stream of unknown size), and checks what comes back.
func h2Exchange(client *http.Client, addr string, i int) error {
	var req *http.Request
	var sum string
	var size int
	if i%2 == 0 {
		size = i * 517
		req, _ = http.NewRequest("GET", "https://"+addr+"/get?bytes="+strconv.Itoa(size), nil)
	} else {
		size = i * 1031
		body := make([]byte, size)
		rand.Read(body) //nolint:errcheck
		h := sha256.Sum256(body)
		sum = hex.EncodeToString(h[:])
		var rd io.Reader = bytes.NewReader(body)
		if i%4 == 3 {
			rd = io.MultiReader(rd) // no length known to the client: no content-length sent
		}
		req, _ = http.NewRequest("POST", "https://"+addr+"/upload", rd)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("request %d: %v", i, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("request %d: reading the answer: %v", i, err)
	}
	switch {
	case resp.Proto != "HTTP/2.0" || resp.StatusCode != 200:
		return fmt.Errorf("request %d: %d over %s", i, resp.StatusCode, resp.Proto)
	case i%2 == 0 && (len(got) != size || size > 0 && (got[0] != 'a' || got[size-1] != byte('a'+(size-1)%26))):
		return fmt.Errorf("request %d: a %d-byte answer, want %d bytes of the pattern", i, len(got), size)
	case i%2 == 1 && (resp.Header.Get("X-Body-Bytes") != strconv.Itoa(size) || resp.Header.Get("X-Body-Sha256") != sum):
		return fmt.Errorf("request %d: the handler read %s bytes (sha256 %.8s…), want %d (%.8s…)", i, resp.Header.Get("X-Body-Bytes"), resp.Header.Get("X-Body-Sha256"), size, sum)
	}
	return nil
}

// RFC 9113 section 8: each malformed request is refused (the stream reset with PROTOCOL_ERROR), counted,
// and never handed to the handler; the well-formed ones around them are.
func TestH2MalformedRequestsAreRefusedAndNeverHandled(t *testing.T) {
	tf := startFront(t, frontOptions{})
	a := tf.tlsAddr
	base := get(a, "/Things")
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	cases := []struct {
		name   string
		fields []string
	}{
		{"Connection", with("connection", "keep-alive")},
		{"Transfer-Encoding", with("transfer-encoding", "chunked")},
		{"Keep-Alive", with("keep-alive", "timeout=5")},
		{"Upgrade", with("upgrade", "websocket")},
		{"Proxy-Connection", with("proxy-connection", "keep-alive")},
		{"TE other than trailers", with("te", "gzip")},
		{"a pseudo-header twice", with(":path", "/other")},
		{"a pseudo-header after a field", []string{":method", "GET", ":scheme", "https", ":authority", a, "x-a", "b", ":path", "/x"}},
		{"an unknown pseudo-header", with(":foo", "bar")},
		{"no :path", []string{":method", "GET", ":scheme", "https", ":authority", a}},
		{"no :method", []string{":scheme", "https", ":authority", a, ":path", "/x"}},
		{"an uppercase name", with("X-Upper", "v")},
		{"CR in a value", with("x-a", "a\rb")},
		{"LF in a value", with("x-a", "a\nb")},
		{"NUL in a value", with("x-a", "a\x00b")},
		{"a space in a name", with("x a", "b")},
	}
	resets := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tf.requests.Load()
			r := tf.dialH2(t)
			r.Headers(1, true, tc.fields...)
			if got := r.Outcome(1); got == "reset" {
				resets++
			} else {
				t.Errorf("answered %s, want the stream reset (PROTOCOL_ERROR)", got)
			}
			// A good request on the connection afterwards is handled; only it.
			r.Headers(3, true, base...)
			if got := r.Outcome(3); got != "200" {
				t.Fatalf("a well-formed request afterwards: %s, want 200", got)
			}
			if n := tf.requests.Load() - before; n != 1 {
				t.Errorf("the handler was given %d requests, want only the well-formed one", n)
			}
		})
	}
	// Each reset is counted: the five connection-specific fields and TE: gzip as connection_field, the
	// others by their error code.
	got := tf.h2.Counts().Refused
	if got["connection_field"] != 6 || got["stream_PROTOCOL_ERROR"] != uint64(resets-6) || resets != len(cases) {
		t.Errorf("%d streams reset; counted %d connection_field (want 6) and %d stream_PROTOCOL_ERROR (want %d): %v",
			resets, got["connection_field"], got["stream_PROTOCOL_ERROR"], resets-6, got)
	}
	// TE: trailers is allowed.
	r := tf.dialH2(t)
	r.Headers(1, true, with("te", "trailers")...)
	if got := r.Outcome(1); got != "200" {
		t.Errorf("TE: trailers: %s, want 200", got)
	}
}

// A header list over max_header_size (as the HTTP/1.1 head written from it counts) is answered 431 and
// counted; the handler is given nothing, and the connection serves on. Only a list past what HPACK
// decodes (h2DecodeLimit) ends the connection.
func TestH2AHeaderListOverMaxHeaderSizeIs431AndCounted(t *testing.T) {
	tf := startFront(t, frontOptions{lim: Limits{MaxHeader: 2048}})
	base := get(tf.tlsAddr, "/Things")
	before := tf.requests.Load()
	r := tf.dialH2(t)
	// One field a little over the limit, and three fields of 1,000 bytes.
	for i, n := range []int{1, 3, 1, 3} {
		stream := uint32(2*i + 1)
		fields := append([]string(nil), base...)
		for k := range n {
			fields = append(fields, "x-big"+strconv.Itoa(k), strings.Repeat("b", 2068/n+(n-1)*400))
		}
		r.Headers(stream, true, fields...)
		if got := r.Outcome(stream); got != "431" {
			t.Fatalf("%d large fields: %s, want 431 (%v)", n, got, tf.h2.Counts().Refused)
		}
	}
	r.Headers(9, true, base...)
	if got := r.Outcome(9); got != "200" {
		t.Fatalf("a well-formed request after them: %s, want 200", got)
	}
	if n := tf.requests.Load() - before; n != 1 {
		t.Errorf("the handler was given %d requests, want only the well-formed one", n)
	}
	if n := tf.h2.Counts().Refused["header_too_large"]; n != 4 {
		t.Errorf("header_too_large counted %d, want 4: %v", n, tf.h2.Counts().Refused)
	}
	// One field over the limit is decoded whole and answered 431 (HPACK's limits are well over
	// max_header_size); one longer than HPACK decodes (64 KiB here) closes the connection, counted.
	r.HeadersSplit(11, true, r.Block(append(append([]string(nil), base...), "x-big", strings.Repeat("b", 4096))...))
	if got := r.Outcome(11); got != "431" {
		t.Fatalf("a 4096-byte field: %s, want 431", got)
	}
	r.HeadersSplit(13, true, r.Block(append(append([]string(nil), base...), "x-big", strings.Repeat("b", 70000))...))
	if got := r.Outcome(13); got != "closed" {
		t.Fatalf("a 70,000-byte field: %s, want the connection closed", got)
	}
	if n := tf.h2.Counts().Refused["conn_COMPRESSION_ERROR"]; n != 1 {
		t.Errorf("conn_COMPRESSION_ERROR counted %d, want 1: %v", n, tf.h2.Counts().Refused)
	}
}

// A head up to max_header_size is handled over HTTP/2 as over HTTP/1.1, whatever its fields' sizes
// (one 4,100-byte field, a 5,000-byte cookie); one over it is answered 431 on its stream, the
// connection serving on, even when a single field is over the limit (HPACK decodes it whole).
func TestH2AHeadUpToMaxHeaderSizeIsServedAsOverHTTP1(t *testing.T) {
	tf := startFront(t, frontOptions{lim: Limits{MaxHeader: 8192}})
	base := get(tf.tlsAddr, "/big")
	r := tf.dialH2(t)
	stream := uint32(1)
	f := func(name string, fields []string, h1 string, want string) {
		t.Helper()
		before := tf.requests.Load()
		r.HeadersSplit(stream, true, r.Block(append(append([]string(nil), base...), fields...)...))
		got := r.Result(stream)
		stream += 2
		if got.Status != want {
			t.Errorf("%s over HTTP/2: %s, want %s", name, got, want)
		}
		if n := tf.requests.Load() - before; (want == "200") != (n == 1) {
			t.Errorf("%s over HTTP/2: the handler was given %d requests", name, n)
		}
		if h1 == "" {
			return
		}
		if res := frontendtest.Request(t, tf.addr, "GET /big HTTP/1.1\r\nHost: a\r\n"+h1+"\r\n"); strconv.Itoa(res.Status) != want {
			t.Errorf("%s over HTTP/1.1: %s, want %s", name, res, want)
		}
	}
	big := strings.Repeat("b", 4100)
	f("one 4,100-byte field", []string{"x-big", big}, "X-Big: "+big+"\r\n", "200")
	cookie := "c=" + strings.Repeat("k", 4998)
	f("a 5,000-byte cookie", []string{"cookie", cookie}, "Cookie: "+cookie+"\r\n", "200")
	huge := strings.Repeat("h", 8700)
	f("one 8,700-byte field", []string{"x-huge", huge}, "X-Huge: "+huge+"\r\n", "431")
	var many []string
	var manyH1 string
	for i := range 20 {
		v := strings.Repeat("m", 500)
		many = append(many, fmt.Sprintf("x-f%d", i), v)
		manyH1 += fmt.Sprintf("X-F%d: %s\r\n", i, v)
	}
	f("twenty 500-byte fields", many, manyH1, "431")
	split := strings.Repeat("s", 40000) // over a frame: HEADERS and CONTINUATION frames, decoded whole
	f("one 40,000-byte field", []string{"x-split", split}, "", "431")
	// The connection lives on: a request after them is served.
	r.Headers(stream, true, base...)
	if got := r.Result(stream); got.Status != "200" {
		t.Fatalf("a request after them on the same connection: %s, want 200", got)
	}
}

// A body whose DATA does not add up to its content-length is refused, however the frames arrive, and
// the handler never reads a complete body; well-formed bodies, however split, are read whole.
func TestH2AContentLengthThatTheDataDoesNotMatchIsRefused(t *testing.T) {
	tf := startFront(t, frontOptions{})
	post := func(cl string) []string {
		f := []string{":method", "POST", ":scheme", "https", ":authority", tf.tlsAddr, ":path", "/up"}
		if cl != "" {
			f = append(f, "content-length", cl)
		}
		return f
	}
	f := func(name, cl string, parts []string, want string) {
		t.Helper()
		r := tf.dialH2(t)
		block := r.Block(post(cl)...)
		r.InOneWrite(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}) //nolint:errcheck
			for i, p := range parts {
				fr.WriteData(1, i == len(parts)-1, []byte(p)) //nolint:errcheck
			}
		})
		got := r.Result(1)
		if want == "reset" {
			if got.Reset != "PROTOCOL_ERROR" && got.Reset != "STREAM_CLOSED" && !got.Closed && got.Status != "400" {
				t.Errorf("%s: %s, want the stream reset or a 400", name, got)
			}
			if got.Status == "200" {
				t.Errorf("%s: the handler read a complete body", name)
			}
			return
		}
		if body := strings.Join(parts, ""); got.Status != want || got.Field("x-body-bytes") != strconv.Itoa(len(body)) {
			t.Errorf("%s: %s, want %s with the %d bytes read", name, got, want, len(body))
		}
	}
	f("content-length 10, 5 bytes and END_STREAM", "10", []string{"short"}, "reset")
	f("content-length 10, 20 bytes", "10", []string{"longer than declared"}, "reset")
	f("content-length 0, then DATA with a request in it", "0", []string{"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"}, "reset")
	f("content-length 5, then 5 bytes and 5 more", "5", []string{"hello", "world"}, "reset")
	f("content-length 5, then 4 bytes and END_STREAM", "5", []string{"hell", ""}, "reset")
	f("content-length 40, then 5 bytes and END_STREAM", "40", []string{"hello"}, "reset")
	f("content-length 0, END_STREAM on an empty DATA", "0", []string{""}, "200")
	f("content-length 5, its bytes, END_STREAM apart", "5", []string{"hel", "lo", ""}, "200")
	f("no content-length, a body", "", []string{"hello", " world"}, "200")
}

// Rapid reset (CVE-2023-44487): a client that opens streams and resets them at once, again and again,
// has its connection closed, and it is counted.
func TestH2RapidResetClosesTheConnection(t *testing.T) {
	tf := startFront(t, frontOptions{})
	r := tf.dialH2(t)
	closed := r.WatchClose()
	sent := 0
	block := r.Block(get(tf.tlsAddr, "/Things")...)
	for stream := uint32(1); stream < 2*1000; stream += 2 {
		if r.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndStream: true, EndHeaders: true}) != nil ||
			r.Fr.WriteRSTStream(stream, http2.ErrCodeCancel) != nil {
			break // closed under our feet: what we want
		}
		sent++
	}
	r.WaitClosed(closed, fmt.Sprintf("%d streams opened and reset at once", sent))
	if n := tf.h2.Counts().Refused["rapid_reset"]; n != 1 {
		t.Errorf("rapid_reset counted %d, want 1 (after %d streams opened and reset)", n, sent)
	}
}

// A CONTINUATION flood (CVE-2024-27316 and kin): header block fragments that never end, past the header
// list size, close the connection; the handler is given nothing.
func TestH2AContinuationFloodClosesTheConnection(t *testing.T) {
	tf := startFront(t, frontOptions{})
	r := tf.dialH2(t)
	if err := r.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.Block(get(tf.tlsAddr, "/Things")...), EndStream: true}); err != nil {
		t.Fatal(err)
	}
	closed := r.WatchClose()
	sent := 0
	for ; sent < 4096; sent++ { // 4 MiB of fragments, against a header list of 8 KiB
		if r.Fr.WriteContinuation(1, false, r.Block(fmt.Sprintf("x-%d", sent), strings.Repeat("v", 1000))) != nil {
			break
		}
	}
	r.WaitClosed(closed, fmt.Sprintf("%d CONTINUATION frames", sent))
	if n := tf.requests.Load(); n != 0 {
		t.Errorf("the handler was given %d requests", n)
	}
}

// idle_timeout closes an HTTP/2 connection without streams (x/net sends GOAWAY, then closes), as it
// closes an idle HTTP/1.1 keep-alive connection.
func TestH2AnIdleConnectionIsClosedAfterIdleTimeout(t *testing.T) {
	tf := startFront(t, frontOptions{idleTimeout: 300 * time.Millisecond})
	r := tf.dialH2(t)
	r.Headers(1, true, get(tf.tlsAddr, "/Things")...)
	if got := r.Outcome(1); got != "200" {
		t.Fatalf("first request: %s", got)
	}
	r.WaitClosed(r.WatchClose(), "idle_timeout (300ms) with no stream open")
}

// read_timeout cuts an HTTP/2 request body that stops arriving, as it cuts an HTTP/1.1 one: the stream
// is answered 408 (or reset).
func TestH2ARequestBodyThatStopsArrivingIsCutByReadTimeout(t *testing.T) {
	tf := startFront(t, frontOptions{readTimeout: 500 * time.Millisecond})
	r := tf.dialH2(t)
	r.Headers(1, false, ":method", "POST", ":scheme", "https", ":authority", tf.tlsAddr, ":path", "/up", "content-length", "100")
	if err := r.Fr.WriteData(1, false, []byte("ten bytes.")); err != nil {
		t.Fatal(err)
	}
	// Then nothing: the rest of the body never comes. (outcome's reads are bounded by the connection's
	// 10 s deadline, a hang guard.)
	if got := r.Outcome(1); got != "408" && got != "reset" {
		t.Errorf("a body that stopped arriving: %s, want 408 or the stream reset", got)
	}
}

// The connection's own rules (RFC 9113 sections 5 and 6), each on a fresh connection: what the server
// answers, and that it serves on (or not) afterwards.
func TestH2ConnectionRules(t *testing.T) {
	tf := startFront(t, frontOptions{maxStreams: 2})
	getOn := func(r *frontendtest.H2Conn, stream uint32) { r.Headers(stream, true, get(tf.tlsAddr, "/Things")...) }
	post := func(r *frontendtest.H2Conn, stream uint32) { // a request whose body never ends: its stream stays open
		r.Headers(stream, false, ":method", "POST", ":scheme", "https", ":authority", tf.tlsAddr, ":path", "/up")
	}

	t.Run("PING is answered with its data", func(t *testing.T) {
		r := tf.dialH2(t)
		data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
		r.Fr.WritePing(false, data) //nolint:errcheck
		f := r.Next(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
		if f == nil || f.(*http2.PingFrame).Data != data {
			t.Fatalf("got %v, want a PING ack with the same data", f)
		}
	})
	t.Run("SETTINGS are acknowledged", func(t *testing.T) {
		r := tf.dialH2(t)
		if f := r.Next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() }); f == nil {
			t.Fatal("no SETTINGS ack")
		}
	})
	t.Run("streams over http2_max_streams are refused", func(t *testing.T) {
		r := tf.dialH2(t)
		post(r, 1)
		post(r, 3)
		post(r, 5)
		if got := r.ResetCode(5); got != "REFUSED_STREAM" {
			t.Fatalf("the third stream: %s, want REFUSED_STREAM", got)
		}
	})
	t.Run("a stream identifier lower than the last is a connection error", func(t *testing.T) {
		r := tf.dialH2(t)
		getOn(r, 5)
		if got := r.Outcome(5); got != "200" {
			t.Fatalf("stream 5: %s", got)
		}
		getOn(r, 3)
		if got := r.GoAwayCode(); got != "PROTOCOL_ERROR" {
			t.Fatalf("stream 3 after 5: %s, want GOAWAY PROTOCOL_ERROR", got)
		}
	})
	t.Run("DATA on a closed stream is a STREAM_CLOSED error", func(t *testing.T) {
		r := tf.dialH2(t)
		getOn(r, 1)
		if got := r.Outcome(1); got != "200" {
			t.Fatalf("stream 1: %s", got)
		}
		r.Fr.WriteData(1, true, []byte("late")) //nolint:errcheck
		if got := r.ResetCode(1); got != "STREAM_CLOSED" {
			t.Fatalf("DATA after the stream closed: %s, want RST_STREAM STREAM_CLOSED", got)
		}
		getOn(r, 3) // and the connection serves on
		if got := r.Outcome(3); got != "200" {
			t.Fatalf("stream 3 after: %s", got)
		}
	})
	t.Run("a frame over SETTINGS_MAX_FRAME_SIZE is a connection error", func(t *testing.T) {
		r := tf.dialH2(t)
		post(r, 1)
		r.Fr.WriteData(1, false, make([]byte, 16385)) //nolint:errcheck
		if got := r.GoAwayCode(); got != "FRAME_SIZE_ERROR" {
			t.Fatalf("a 16385-byte DATA frame: %s, want GOAWAY FRAME_SIZE_ERROR", got)
		}
	})
	t.Run("after the client's GOAWAY its open stream is answered, then the connection ends", func(t *testing.T) {
		r := tf.dialH2(t)
		r.Headers(1, false, ":method", "POST", ":scheme", "https", ":authority", tf.tlsAddr, ":path", "/up", "content-length", "4")
		r.Fr.WriteGoAway(0, http2.ErrCodeNo, nil) //nolint:errcheck
		r.Fr.WriteData(1, true, []byte("body"))   //nolint:errcheck
		if got := r.Outcome(1); got != "200" {
			t.Fatalf("the open stream: %s, want 200", got)
		}
		r.WaitClosed(r.WatchClose(), "the client's GOAWAY and its last stream's answer")
	})
	got := tf.h2.Counts().Refused
	for kind, want := range map[string]uint64{"stream_REFUSED_STREAM": 1, "conn_PROTOCOL_ERROR": 1, "stream_STREAM_CLOSED": 1, "conn_FRAME_SIZE_ERROR": 1} {
		if got[kind] != want {
			t.Errorf("%s counted %d, want %d: %v", kind, got[kind], want, got)
		}
	}
}

// An answer larger than the client's window waits for its WINDOW_UPDATE, then comes whole; an upload
// larger than the server's windows is taken as the server gives them back.
func TestH2FlowControlBothWays(t *testing.T) {
	tf := startFront(t, frontOptions{})
	r := tf.dialH2(t)
	r.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}) //nolint:errcheck
	const size = 5000
	r.Headers(1, true, get(tf.tlsAddr, "/Things?bytes="+strconv.Itoa(size))...)
	var body []byte
	data := func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == 1 }
	for len(body) < 100 {
		f := r.Next(data)
		if f == nil {
			t.Fatal("the connection ended")
		}
		body = append(body, f.(*http2.DataFrame).Data()...)
	}
	if len(body) != 100 {
		t.Fatalf("%d bytes before the window opened, want the 100 it allows", len(body))
	}
	r.Fr.WriteWindowUpdate(1, size) //nolint:errcheck
	for {
		f := r.Next(data)
		if f == nil {
			t.Fatal("the connection ended")
		}
		body = append(body, f.(*http2.DataFrame).Data()...)
		if f.(*http2.DataFrame).StreamEnded() {
			break
		}
	}
	if len(body) != size || body[0] != 'a' || body[size-1] != byte('a'+(size-1)%26) {
		t.Fatalf("%d bytes, want %d of the pattern", len(body), size)
	}

	up := make([]byte, 3<<20) // 12 stream windows, 3 connection windows
	rand.Read(up)             //nolint:errcheck
	resp, err := tf.h2Client(t).Post("https://"+tf.tlsAddr+"/upload", "application/octet-stream", bytes.NewReader(up))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	sum := sha256.Sum256(up)
	if resp.StatusCode != 200 || resp.Header.Get("X-Body-Sha256") != hex.EncodeToString(sum[:]) {
		t.Fatalf("%d, the handler read %s bytes, want 200 and all %d", resp.StatusCode, resp.Header.Get("X-Body-Bytes"), len(up))
	}
}

// A client that stops reading its answers does not hold the connection (nor a worker) past
// idle_timeout: the write that cannot go out ends it.
func TestH2AClientThatStopsReadingIsClosedAfterIdleTimeout(t *testing.T) {
	tf := startFront(t, frontOptions{idleTimeout: 500 * time.Millisecond})
	r := tf.dialH2(t)
	r.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}) //nolint:errcheck
	r.Fr.WriteWindowUpdate(0, 1<<31-1-65535)                                              //nolint:errcheck
	r.Headers(1, true, get(tf.tlsAddr, "/Things?bytes=50000000")...)
	// Read nothing: the answer fills the socket's buffers, then the server's flush waits for idle_timeout.
	writing := func() (n int) {
		for _, g := range testkit.Goroutines() {
			if strings.Contains(g, "frontend.(*h2stream).writeAnswer") {
				n++
			}
		}
		return n
	}
	testkit.Eventually(t, "the stream's worker to give up on a client that reads nothing", 20*time.Second,
		func() bool { return tf.h2.Counts().Streams > 0 && writing() == 0 })
}

// At Shutdown (lb's Close) an HTTP/2 client is told GOAWAY: its stream in flight is answered, and an
// idle connection closes at once.
func TestH2ShutdownDrainsHTTP2Connections(t *testing.T) {
	tf := startFront(t, frontOptions{})
	idle := tf.dialH2(t)
	busy := tf.dialH2(t)
	busy.Headers(1, true, get(tf.tlsAddr, "/slow?delay=1s")...)
	testkit.Eventually(t, "the slow stream to reach the handler", 5*time.Second, func() bool { return tf.h2.Counts().Streams == 1 })
	go tf.h2.Shutdown()
	if got := idle.GoAwayCode(); got != "NO_ERROR" {
		t.Errorf("the idle connection: %s, want GOAWAY NO_ERROR", got)
	}
	idle.WaitClosed(idle.WatchClose(), "Shutdown, with no stream open")
	if got := busy.GoAwayCode(); got != "NO_ERROR" {
		t.Errorf("the connection with a stream in flight: %s, want GOAWAY NO_ERROR", got)
	}
	if got := busy.Outcome(1); got != "200" {
		t.Errorf("the stream in flight at Shutdown: %s, want 200", got)
	}
	busy.WaitClosed(busy.WatchClose(), "Shutdown, once its last stream was answered")
}

// :authority and Host are checked like an HTTP/1.1 Host (RFC 3986 host[:port], no userinfo), :path like
// a request target (origin form, or "*" for OPTIONS), and :path's bytes as RFC 3986 allows: anything
// else is refused on its stream and never handled, the connection serving on.
func TestH2AuthorityAndPathAreCheckedLikeHostAndTarget(t *testing.T) {
	tf := startFront(t, frontOptions{})
	f := func(method, authority, path string, extra []string, want string) {
		t.Helper()
		before := tf.requests.Load()
		r := tf.dialH2(t)
		fields := []string{":method", method, ":scheme", "https"}
		if authority != "-" {
			fields = append(fields, ":authority", authority)
		}
		fields = append(append(fields, ":path", path), extra...)
		r.Headers(1, true, fields...)
		got := r.Result(1)
		n := tf.requests.Load() - before
		switch want {
		case "reset":
			if got.Reset != "PROTOCOL_ERROR" || n != 0 {
				t.Errorf("%s %s at %q: %s, and the handler was given %d requests; want the stream reset and none", method, path, authority, got, n)
			}
		default:
			if got.Status != want || (want == "200") != (n == 1) {
				t.Errorf("%s %s at %q: %s, and the handler was given %d requests; want %s", method, path, authority, got, n, want)
			}
		}
		// Only the stream was refused: the connection serves the next one.
		r.Headers(3, true, get(tf.tlsAddr, "/Things")...)
		if got := r.Outcome(3); got != "200" {
			t.Errorf("%s %s at %q: the next stream on the connection: %s, want 200", method, path, authority, got)
		}
	}
	before := tf.h2.Counts().Refused["stream_PROTOCOL_ERROR"]
	bad := []string{"a b", "a/b?c", "user@evil.example", "[::1", "a:b:c", "", "a:99999", "[fe80::1%25eth0]", "exa mple:80", "a\\b", "x%41y"}
	for _, a := range bad {
		f("GET", a, "/raw/x", nil, "reset")
		f("GET", "-", "/raw/x", []string{"host", a}, "reset")
	}
	f("GET", "127.0.0.1", "http://evil.example/x", nil, "reset")
	f("GET", "127.0.0.1", "evil.example:80", nil, "reset")
	f("GET", "127.0.0.1", "*", nil, "reset")
	f("GET", "127.0.0.1", "raw/x", nil, "reset")
	if n := tf.h2.Counts().Refused["stream_PROTOCOL_ERROR"] - before; n != uint64(2*len(bad)+4) {
		t.Errorf("stream_PROTOCOL_ERROR counted %d, want %d", n, 2*len(bad)+4)
	}
	for _, a := range []string{"example.com", "example.com:8443", "[::1]:443", "[::1]", "127.0.0.1", "a-b.c_d~e", "host:"} {
		f("GET", a, "/raw/x", nil, "200")
	}
	f("GET", "-", "/raw/x", []string{"host", "example.com:80"}, "200")
	f("OPTIONS", "127.0.0.1", "*", nil, "200")
	// :path's bytes, as an HTTP/1.1 target's: 400 on the stream.
	f("GET", "127.0.0.1", "/Thingworx/a{b}", nil, "400")
	f("GET", "127.0.0.1", "/Thingworx/a|b", nil, "400")
	f("GET", "127.0.0.1", "/Thingworx/a#b", nil, "400")
	f("GET", "127.0.0.1", "/Thingworx/Things?a[]=1", nil, "200")
}

// A stream the client opens after the server's GOAWAY (above its last stream: one the client sends
// again on another connection, RFC 9113 §6.8) is ignored whole, its DATA included: never handled, never
// reset (a reset would fail a request the client could have sent again), while the stream in flight
// is answered and the connection then closes.
func TestH2AStreamAboveTheGoAwaysLastIsIgnoredWhole(t *testing.T) {
	tf := startFront(t, frontOptions{})
	busy := tf.dialH2(t)
	busy.Headers(1, true, get(tf.tlsAddr, "/slow?delay=1s")...)
	testkit.Eventually(t, "the slow stream to reach the handler", 5*time.Second, func() bool { return tf.h2.Counts().Streams == 1 })
	before := tf.requests.Load()
	go tf.h2.Shutdown()
	f := busy.Next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if f == nil {
		t.Fatal("no GOAWAY")
	}
	if ga := f.(*http2.GoAwayFrame); ga.LastStreamID != 1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY last stream %d %s, want 1 NO_ERROR", ga.LastStreamID, ga.ErrCode)
	}
	busy.Headers(3, false, ":method", "POST", ":scheme", "https", ":authority", tf.tlsAddr, ":path", "/Things")
	busy.Fr.WriteData(3, true, []byte("a body")) //nolint:errcheck // the read below says what came of it
	var got []string
	end := busy.Next(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			got = append(got, fmt.Sprintf("RST_STREAM %d %s", f.StreamID, f.ErrCode))
			return f.StreamID == 1
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				got = append(got, fmt.Sprintf("HEADERS %d", f.StreamID))
			}
		case *http2.DataFrame:
			return f.StreamID == 1 && f.StreamEnded()
		}
		return false
	})
	if end == nil || len(got) != 0 {
		t.Errorf("after GOAWAY: stream 1 answered %v; frames for the stream above the last: %v, want none", end != nil, got)
	}
	busy.WaitClosed(busy.WatchClose(), "Shutdown, once its last stream was answered")
	if n := tf.requests.Load() - before; n != 0 {
		t.Errorf("the handler was given %d requests after the GOAWAY, want none", n)
	}
}
