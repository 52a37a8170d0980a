package lb

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
)

// HTTP/2 on the TLS listener (lb/frontend/h2.go).

// h2LB starts the platform cluster and fairlead with a TLS listener (more: extra [frontend] keys).
func h2LB(t testing.TB, more string) (*sim.Cluster, *LB, *tlsEnv, string) {
	t.Helper()
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c, l, tlsAddr, _ := tlsPlatformLB(t, cert, more)
	return c, l, env, tlsAddr
}

// h2Client is a client that speaks HTTP/2 only, over one connection (StrictMaxConcurrentStreams: it
// waits for a stream rather than open another connection).
func h2Client(env *tlsEnv) (*http.Client, *http2.Transport) {
	tr := &http2.Transport{TLSClientConfig: env.clientConfig(tlsName), StrictMaxConcurrentStreams: true}
	return &http.Client{Timeout: 60 * time.Second, Transport: tr}, tr
}

func TestH2AGoClientOfferingH2GetsHTTP2ThroughTLSListenToTheLeader(t *testing.T) {
	c, l, env, tlsAddr := h2LB(t, "")

	// net/http's own client, told to try HTTP/2, as browsers do by default.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: env.clientConfig(tlsName), ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + tlsAddr + "/echo-headers")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("answered over %s (ALPN %q), want HTTP/2.0 (h2)", resp.Proto, resp.TLS.NegotiatedProtocol)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Fatalf("%d from %q, want 200 from the leader %s", resp.StatusCode, resp.Header.Get("X-Served-By"), c.Platforms[0].Name)
	}
	// The leader got an HTTP/1.1 request with the authority as Host and X-Forwarded-Proto: https.
	seen := hostileEchoed(body)
	if got := seen["x-forwarded-proto"]; len(got) != 1 || got[0] != "https" {
		t.Errorf("the leader saw X-Forwarded-Proto %q, want [https]", got)
	}
	if got := resp.Header.Get("X-Echo-Host"); got != tlsAddr {
		t.Errorf("the leader saw Host %q, want the :authority %q", got, tlsAddr)
	}
	if n := l.h2.Counts().Streams; n != 1 {
		t.Errorf("%d HTTP/2 streams counted, want 1", n)
	}

	// A client that offers http/1.1 only is still served HTTP/1.1 on the same listener.
	cfg := env.clientConfig(tlsName)
	cfg.NextProtos = []string{"http/1.1"}
	r := tlsRequest(tlsAddr, cfg, "/", nil)
	if r.status != 200 || r.state.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("an HTTP/1.1-only client: %v (ALPN %q), want 200 over http/1.1", r, r.state.NegotiatedProtocol)
	}
}

// 200 concurrent streams on one connection (http2_max_streams raised to let them all open at once),
// GETs of answers of various sizes and POSTs of bodies with and without a length, all reach the leader
// and come back intact. (x/net's client waits for stream slots, StrictMaxConcurrentStreams, only up to a
// point: it stalls once more requests wait than the server allows streams, golang/go#70809; so the
// server's limit is what lets 200 run at once here, as a browser's would need.)
func TestH2TwoHundredConcurrentStreamsOnOneConnectionReachTheLeaderIntact(t *testing.T) {
	c, l, env, tlsAddr := h2LB(t, "http2_max_streams = 250")
	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()

	const n = 200
	if err := h2Exchange(client, tlsAddr, 0, c.Platforms[0].Name); err != nil { // the server's SETTINGS known
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h2Exchange(client, tlsAddr, i, c.Platforms[0].Name)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := l.h2.Counts(); got.Conns != 1 || got.Streams != n+1 {
		t.Errorf("%d connections and %d streams, want 1 and %d", got.Conns, got.Streams, n)
	}
}

// h2Exchange makes request i: even ones GET an answer of i*517 bytes, odd ones POST i*1031 random bytes
// (every fourth without a length, as a stream of unknown size), and checks what comes back.
func h2Exchange(client *http.Client, addr string, i int, leader string) error {
	var req *http.Request
	var sum string
	var size int
	if i%2 == 0 {
		size = i * 517
		req, _ = http.NewRequest("GET", "https://"+addr+"/Thingworx/Things?bytes="+strconv.Itoa(size), nil)
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
		req, _ = http.NewRequest("POST", "https://"+addr+"/Thingworx/Services/Upload", rd)
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
	case resp.Proto != "HTTP/2.0":
		return fmt.Errorf("request %d over %s", i, resp.Proto)
	case resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != leader:
		return fmt.Errorf("request %d: %d from %q, want 200 from %s", i, resp.StatusCode, resp.Header.Get("X-Served-By"), leader)
	case i%2 == 0 && (len(got) != size || size > 0 && (got[0] != 'a' || got[size-1] != byte('a'+(size-1)%26))):
		return fmt.Errorf("request %d: a %d-byte answer, want %d bytes of the pattern", i, len(got), size)
	case i%2 == 1 && (resp.Header.Get("X-Body-Bytes") != strconv.Itoa(size) || resp.Header.Get("X-Body-Sha256") != sum):
		return fmt.Errorf("request %d: the leader read %s bytes (sha256 %.8s…), want %d (%.8s…)", i, resp.Header.Get("X-Body-Bytes"), resp.Header.Get("X-Body-Sha256"), size, sum)
	}
	return nil
}

// rawH2 is a client connection that writes HTTP/2 frames as a test wants them, valid or not.
type rawH2 struct {
	t    *testing.T
	conn *tls.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	dec  *hpack.Decoder
	hbuf bytes.Buffer
}

func dialRawH2(t *testing.T, env *tlsEnv, addr string) *rawH2 {
	t.Helper()
	cfg := env.clientConfig(tlsName)
	cfg.NextProtos = []string{"h2"}
	conn, err := tlsDial(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	r.enc = hpack.NewEncoder(&r.hbuf)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return r
}

// headers sends one HEADERS frame on stream with the fields as given (pairs of name, value), in order.
func (r *rawH2) headers(stream uint32, endStream bool, fields ...string) {
	r.t.Helper()
	r.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		r.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}) //nolint:errcheck
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: r.hbuf.Bytes(), EndStream: endStream, EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

// watchClose reads the server's frames, from now on, until it closes the connection: the channel is
// closed then.
func (r *rawH2) watchClose() <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for {
			if _, err := r.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	return closed
}

// waitClosed waits for watchClose's channel; what is what the test did to deserve the close.
func (r *rawH2) waitClosed(closed <-chan struct{}, what string) {
	r.t.Helper()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a hang guard
		r.t.Fatalf("the connection is still open after %s", what)
	}
}

// getBlock leaves in r.hbuf the header block of a GET of /Thingworx/Things at authority.
func (r *rawH2) getBlock(authority string) []byte {
	r.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", "/Thingworx/Things"}} {
		r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck
	}
	return r.hbuf.Bytes()
}

// outcome reads frames until stream ends: "reset" (RST_STREAM), "closed" (GOAWAY or the connection
// ended), or the status of the answer's HEADERS.
func (r *rawH2) outcome(stream uint32) string {
	r.t.Helper()
	if r.dec == nil { // one for the connection: the server's header blocks refer to its dynamic table
		r.dec = hpack.NewDecoder(4096, nil)
	}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return "closed"
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID == stream {
				return "reset"
			}
		case *http2.GoAwayFrame:
			return "closed"
		case *http2.HeadersFrame:
			fields, err := r.dec.DecodeFull(f.HeaderBlockFragment()) // every block, to follow the table
			if err != nil {
				return "closed"
			}
			if f.StreamID != stream {
				continue
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					return hf.Value
				}
			}
		}
	}
}

// RFC 9113 section 8: each malformed request is refused (the stream reset with PROTOCOL_ERROR) and nothing reaches
// the leader; the well-formed ones around them are forwarded.
func TestH2MalformedRequestsAreRefusedAndNothingIsForwarded(t *testing.T) {
	c, l, env, tlsAddr := h2LB(t, "")
	leader := c.Platforms[0]
	base := []string{":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things"}
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
		{"a pseudo-header after a field", append(append([]string{":method", "GET", ":scheme", "https", ":authority", tlsAddr}, "x-a", "b"), ":path", "/x")},
		{"an unknown pseudo-header", with(":foo", "bar")},
		{"no :path", []string{":method", "GET", ":scheme", "https", ":authority", tlsAddr}},
		{"no :method", []string{":scheme", "https", ":authority", tlsAddr, ":path", "/x"}},
		{"an uppercase name", with("X-Upper", "v")},
		{"CR in a value", with("x-a", "a\rb")},
		{"LF in a value", with("x-a", "a\nb")},
		{"NUL in a value", with("x-a", "a\x00b")},
		{"a space in a name", with("x a", "b")},
	}
	resets := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := leader.Requests()
			r := dialRawH2(t, env, tlsAddr)
			r.headers(1, true, tc.fields...)
			got := r.outcome(1)
			if got == "reset" {
				resets++
			} else {
				t.Errorf("answered %s, want the stream reset (PROTOCOL_ERROR)", got)
			}
			// A good request on a new connection afterwards is forwarded: the leader is reachable and
			// counts it, so an unchanged count before it means nothing else came.
			r2 := dialRawH2(t, env, tlsAddr)
			r2.headers(1, true, base...)
			if got := r2.outcome(1); got != "200" {
				t.Fatalf("a well-formed request afterwards: %s, want 200", got)
			}
			if n := leader.Requests() - before; n != 1 {
				t.Errorf("the leader got %d requests, want only the well-formed one", n)
			}
		})
	}
	// Each reset is counted: the five connection-specific fields and TE: gzip as connection_field, the
	// others by their error code.
	got := l.h2.Counts().Refused
	if got["connection_field"] != 6 || got["stream_PROTOCOL_ERROR"] != uint64(resets-6) || resets != len(cases) {
		t.Errorf("%d streams reset; counted %d connection_field (want 6) and %d stream_PROTOCOL_ERROR (want %d): %v",
			resets, got["connection_field"], got["stream_PROTOCOL_ERROR"], resets-6, got)
	}
	// TE: trailers is allowed.
	r := dialRawH2(t, env, tlsAddr)
	r.headers(1, true, with("te", "trailers")...)
	if got := r.outcome(1); got != "200" {
		t.Errorf("TE: trailers: %s, want 200", got)
	}
}

// A header list over max_header_size (as the HTTP/1.1 head written from it counts) is answered 431 and
// counted; nothing reaches the leader, and the connection serves on. Only a list past what HPACK decodes
// (h2DecodeLimit) ends the connection.
func TestH2AHeaderListOverMaxHeaderSizeIs431AndCounted(t *testing.T) {
	c, l, env, tlsAddr := h2LB(t, "max_header_size = 2048")
	leader := c.Platforms[0]
	base := []string{":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things"}
	before := leader.Requests()
	r := dialRawH2(t, env, tlsAddr)
	// One field a little over the limit, and three fields of 1,000 bytes.
	for i, n := range []int{1, 3, 1, 3} {
		stream := uint32(2*i + 1)
		fields := append([]string(nil), base...)
		for k := range n {
			fields = append(fields, "x-big"+strconv.Itoa(k), strings.Repeat("b", 2068/n+(n-1)*400))
		}
		r.headers(stream, true, fields...)
		if got := r.outcome(stream); got != "431" {
			t.Fatalf("%d large fields: %s, want 431 (%v)", n, got, l.h2.Counts().Refused)
		}
	}
	r.headers(9, true, base...)
	if got := r.outcome(9); got != "200" {
		t.Fatalf("a well-formed request after them: %s, want 200", got)
	}
	if n := leader.Requests() - before; n != 1 {
		t.Errorf("the leader got %d requests, want only the well-formed one", n)
	}
	if n := l.h2.Counts().Refused["header_too_large"]; n != 4 {
		t.Errorf("header_too_large counted %d, want 4: %v", n, l.h2.Counts().Refused)
	}
	// One field over the limit is decoded whole and answered 431 (HPACK's limits are well over
	// max_header_size); one longer than HPACK decodes (64 KiB here) closes the connection, counted.
	r.headersSplit(11, true, r.block(append(append([]string(nil), base...), "x-big", strings.Repeat("b", 4096))...))
	if got := r.outcome(11); got != "431" {
		t.Fatalf("a 4096-byte field: %s, want 431", got)
	}
	r.headersSplit(13, true, r.block(append(append([]string(nil), base...), "x-big", strings.Repeat("b", 70000))...))
	if got := r.outcome(13); got != "closed" {
		t.Fatalf("a 70,000-byte field: %s, want the connection closed", got)
	}
	if n := l.h2.Counts().Refused["conn_COMPRESSION_ERROR"]; n != 1 {
		t.Errorf("conn_COMPRESSION_ERROR counted %d, want 1: %v", n, l.h2.Counts().Refused)
	}
}

// A body whose DATA does not add up to its content-length is refused, and nothing reaches the leader.
func TestH2AContentLengthThatTheDataDoesNotMatchIsRefused(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "")
	leader := c.Platforms[0]
	for _, data := range []string{"short", "longer than declared"} {
		before := leader.Requests()
		r := dialRawH2(t, env, tlsAddr)
		r.headers(1, false, ":method", "POST", ":scheme", "https", ":authority", tlsAddr, ":path", "/up", "content-length", "10")
		if err := r.fr.WriteData(1, true, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if got := r.outcome(1); got != "reset" && got != "closed" && got != "400" {
			t.Errorf("content-length 10 with %d bytes of DATA: %s, want the stream reset or a 400", len(data), got)
		}
		if n := leader.Requests() - before; n != 0 {
			t.Errorf("content-length 10 with %d bytes of DATA: the leader got %d requests", len(data), n)
		}
	}
}

// Rapid reset (CVE-2023-44487): a client that opens streams and resets them at once, again and again,
// has its connection closed, and it is counted.
func TestH2RapidResetClosesTheConnection(t *testing.T) {
	_, l, env, tlsAddr := h2LB(t, "")
	r := dialRawH2(t, env, tlsAddr)
	closed := r.watchClose()
	sent := 0
	for stream := uint32(1); stream < 2*1000; stream += 2 {
		if r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: r.getBlock(tlsAddr), EndStream: true, EndHeaders: true}) != nil ||
			r.fr.WriteRSTStream(stream, http2.ErrCodeCancel) != nil {
			break // closed under our feet: what we want
		}
		sent++
	}
	r.waitClosed(closed, fmt.Sprintf("%d streams opened and reset at once", sent))
	if n := l.h2.Counts().Refused["rapid_reset"]; n != 1 {
		t.Errorf("rapid_reset counted %d, want 1 (after %d streams opened and reset)", n, sent)
	}
}

// A CONTINUATION flood (CVE-2024-27316 and kin): header block fragments that never end, past the header
// list size, close the connection; nothing reaches the leader.
func TestH2AContinuationFloodClosesTheConnection(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "")
	before := c.Platforms[0].Requests()
	r := dialRawH2(t, env, tlsAddr)
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.getBlock(tlsAddr), EndStream: true}); err != nil {
		t.Fatal(err)
	}
	closed := r.watchClose()
	sent := 0
	for ; sent < 4096; sent++ { // 4 MiB of fragments, against a header list of 8 KiB
		r.hbuf.Reset()
		r.enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-%d", sent), Value: string(bytes.Repeat([]byte("v"), 1000))}) //nolint:errcheck
		if r.fr.WriteContinuation(1, false, r.hbuf.Bytes()) != nil {
			break
		}
	}
	r.waitClosed(closed, fmt.Sprintf("%d CONTINUATION frames", sent))
	if n := c.Platforms[0].Requests() - before; n != 0 {
		t.Errorf("the leader got %d requests", n)
	}
}

// Streams on an HTTP/2 connection that stays open follow a leader change: every request is answered
// 200, first by the old leader, then by the new one, on the one connection.
func TestH2StreamsOnAnOpenConnectionFollowALeaderChange(t *testing.T) {
	c, l, env, tlsAddr := h2LB(t, "")
	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()
	get := func() string {
		t.Helper()
		resp, err := client.Get("https://" + tlsAddr + "/Thingworx/Things")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
			t.Fatalf("%d over %s during the leader change, want 200 over HTTP/2.0", resp.StatusCode, resp.Proto)
		}
		return resp.Header.Get("X-Served-By")
	}
	if by := get(); by != c.Platforms[0].Name {
		t.Fatalf("served by %s, want the leader %s", by, c.Platforms[0].Name)
	}
	mustSetState(t, c.Platforms[0], sim.Backup)
	mustSetState(t, c.Platforms[1], sim.Leader)
	testkit.Eventually(t, "a stream served by the new leader", 10*time.Second, func() bool { return get() == c.Platforms[1].Name })
	if n := l.h2.Counts().Conns; n != 1 {
		t.Errorf("%d HTTP/2 connections, want the one that stayed open", n)
	}
}

// Chromium loads a page through fairlead over HTTP/2.
func TestH2ChromiumLoadsAProxiedPageOverH2(t *testing.T) {
	c, _, _, tlsAddr := h2LB(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := browser.Open(t, ctx, chromedp.Flag("ignore-certificate-errors", true))
	p.Do("open the page", chromedp.Navigate("https://"+tlsAddr+"/Thingworx/Composer/index.html"))
	if got := p.Eval(`performance.getEntriesByType('navigation')[0].nextHopProtocol`); got != "h2" {
		t.Errorf("nextHopProtocol %q, want h2", got)
	}
	if got := p.Eval(`document.body.innerText`); !strings.Contains(got, c.Platforms[0].Name) {
		t.Errorf("the page says %q, want the leader's answer", got)
	}
}

// The access log says which protocol a request came over, and the metrics count requests by protocol.
func TestH2AccessLogAndMetricsNameTheProtocol(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c := startCluster(t, 2, 0)
	tlsAddr := testkit.Addr(t)
	files := platformConfig(c, "", "")
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, cert, "")
	files["30-access.toml"] = "[global]\naccess_log = true\n"
	l, logs := startLBDir(t, testkit.WriteFiles(t, files))
	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()
	for _, path := range []string{"/h2-one", "/h2-two"} {
		resp, err := client.Get("https://" + tlsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	cfg := env.clientConfig(tlsName)
	cfg.NextProtos = []string{"http/1.1"}
	if r := tlsRequest(tlsAddr, cfg, "/h1-one", nil); r.status != 200 {
		t.Fatal(r)
	}
	testkit.Eventually(t, "three access lines", 5*time.Second, func() bool {
		return strings.Contains(logs.all(), "path=/h1-one") && strings.Contains(logs.all(), "path=/h2-two")
	})
	for _, ln := range strings.Split(logs.all(), "\n") {
		switch {
		case strings.Contains(ln, "path=/h2-") && !strings.Contains(ln, "proto=h2"):
			t.Errorf("an HTTP/2 request's line: %s", ln)
		case strings.Contains(ln, "path=/h1-") && !strings.Contains(ln, "proto=http/1.1"):
			t.Errorf("an HTTP/1.1 request's line: %s", ln)
		}
	}
	var m bytes.Buffer
	l.WriteMetrics(&m)
	for _, want := range []string{`fairlead_frontend_requests_total{protocol="h2"} 2`, `fairlead_http2_connections_total 1`} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// idle_timeout closes an HTTP/2 connection without streams (x/net sends GOAWAY, then closes), as it
// closes an idle HTTP/1.1 keep-alive connection.
func TestH2AnIdleConnectionIsClosedAfterIdleTimeout(t *testing.T) {
	_, _, env, tlsAddr := h2LB(t, "idle_timeout = \"300ms\"")
	r := dialRawH2(t, env, tlsAddr)
	r.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things")
	if got := r.outcome(1); got != "200" {
		t.Fatalf("first request: %s", got)
	}
	r.waitClosed(r.watchClose(), "idle_timeout (300ms) with no stream open")
}

// read_timeout cuts an HTTP/2 request body that stops arriving, as it cuts an HTTP/1.1 one: the stream
// is answered 408 (or reset) and nothing reaches the leader.
func TestH2ARequestBodyThatStopsArrivingIsCutByReadTimeout(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "read_timeout = \"500ms\"")
	before := c.Platforms[0].Requests()
	r := dialRawH2(t, env, tlsAddr)
	r.headers(1, false, ":method", "POST", ":scheme", "https", ":authority", tlsAddr, ":path", "/up", "content-length", "100")
	if err := r.fr.WriteData(1, false, []byte("ten bytes.")); err != nil {
		t.Fatal(err)
	}
	// Then nothing: the rest of the body never comes. (outcome's reads are bounded by the connection's
	// 10 s deadline, a hang guard.)
	if got := r.outcome(1); got != "408" && got != "reset" {
		t.Errorf("a body that stopped arriving: %s, want 408 or the stream reset", got)
	}
	if n := c.Platforms[0].Requests() - before; n != 0 {
		t.Errorf("the leader got %d requests", n)
	}
}

// Trailers pass both ways over HTTP/2: a chunked answer's trailer fields reach the client as the
// stream's trailers; a request's declared trailer fields reach the leader after its body, which goes
// chunked (HTTP/1.1 carries trailers only there), with or without a content-length. An HTTP/1.1 client
// gets the same answer's body without them.
func TestH2TrailersPassBothWays(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "")
	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()
	leader := c.Platforms[0].Name

	const size = 70000 // more than one read of the answer and one DATA frame
	url := "https://" + tlsAddr + "/Thingworx/Things?bytes=" + strconv.Itoa(size) + "&chunked=1&trailers=1"
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(got)
	if err != nil || resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 || len(got) != size || resp.Header.Get("X-Served-By") != leader {
		t.Fatalf("%s %d from %q, %d bytes (%v); want HTTP/2.0 200 from %s, %d bytes", resp.Proto, resp.StatusCode, resp.Header.Get("X-Served-By"), len(got), err, leader, size)
	}
	if want := hex.EncodeToString(sum[:]); resp.Trailer.Get("X-Checksum") != want {
		t.Errorf("trailers %v, want X-Checksum %s", resp.Trailer, want)
	}

	for _, known := range []bool{false, true} {
		body := []byte(strings.Repeat("trailer test ", 5000))
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", "https://"+tlsAddr+"/Thingworx/Services/Upload", pr)
		req.Trailer = http.Header{"X-Sum": nil, "X-Parts": nil}
		if known {
			req.ContentLength = int64(len(body))
		}
		go func() {
			pw.Write(body[:1000]) //nolint:errcheck
			pw.Write(body[1000:]) //nolint:errcheck
			req.Trailer.Set("X-Sum", "65000")
			req.Trailer.Add("X-Parts", "1")
			req.Trailer.Add("X-Parts", "2")
			pw.Close()
		}()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
		h := sha256.Sum256(body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Body-Bytes") != strconv.Itoa(len(body)) || resp.Header.Get("X-Body-Sha256") != hex.EncodeToString(h[:]) {
			t.Errorf("content-length %v: %d, the leader read %s bytes, want 200 and %d", known, resp.StatusCode, resp.Header.Get("X-Body-Bytes"), len(body))
		}
		got := strings.Split(resp.Header.Get("X-Echo-Trailers"), "; ")
		slices.Sort(got) // in the order sent, which is the client's map order
		if got, want := strings.Join(got, "; "), "X-Parts: 1; X-Parts: 2; X-Sum: 65000"; got != want {
			t.Errorf("content-length %v: the leader saw the trailers %q, want %q", known, got, want)
		}
	}

	// HTTP/1.1 over the same listener: the body, no trailers (fasthttp does not relay them).
	h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: env.clientConfig(tlsName)}}
	defer h1.CloseIdleConnections()
	resp, err = h1.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.Proto != "HTTP/1.1" || len(got) != size || sha256.Sum256(got) != sum {
		t.Fatalf("HTTP/1.1: %s, %d bytes (%v), want HTTP/1.1 and the same %d bytes", resp.Proto, len(got), err, size)
	}
}

// next reads the server's frames until want says a frame is the one: it returns it, or nil once the
// connection ended (GOAWAY frames are passed to want too).
func (r *rawH2) next(want func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	if r.dec == nil {
		r.dec = hpack.NewDecoder(4096, nil)
	}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return nil
		}
		if h, ok := f.(*http2.HeadersFrame); ok {
			if _, err := r.dec.DecodeFull(h.HeaderBlockFragment()); err != nil {
				r.t.Fatalf("the server's header block: %v", err)
			}
		}
		if want(f) {
			return f
		}
	}
}

// goAwayCode reads until the server's GOAWAY and returns its code ("closed" if none came before the end).
func (r *rawH2) goAwayCode() string {
	r.t.Helper()
	f := r.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if f == nil {
		return "closed"
	}
	return f.(*http2.GoAwayFrame).ErrCode.String()
}

// resetCode reads until the server resets stream and returns the code ("closed" if the connection ended).
func (r *rawH2) resetCode(stream uint32) string {
	r.t.Helper()
	f := r.next(func(f http2.Frame) bool {
		rst, ok := f.(*http2.RSTStreamFrame)
		_, away := f.(*http2.GoAwayFrame)
		return ok && rst.StreamID == stream || away
	})
	if rst, ok := f.(*http2.RSTStreamFrame); ok {
		return rst.ErrCode.String()
	}
	return "closed"
}

// The connection's own rules (RFC 9113 sections 5 and 6), each on a fresh connection: what the server
// answers, and that it serves on (or not) afterwards.
func TestH2ConnectionRules(t *testing.T) {
	_, l, env, tlsAddr := h2LB(t, "http2_max_streams = 2")
	get := func(r *rawH2, stream uint32) {
		r.headers(stream, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things")
	}
	post := func(r *rawH2, stream uint32) { // a request whose body never ends: its stream stays open
		r.headers(stream, false, ":method", "POST", ":scheme", "https", ":authority", tlsAddr, ":path", "/up")
	}

	t.Run("PING is answered with its data", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
		r.fr.WritePing(false, data) //nolint:errcheck
		f := r.next(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
		if f == nil || f.(*http2.PingFrame).Data != data {
			t.Fatalf("got %v, want a PING ack with the same data", f)
		}
	})
	t.Run("SETTINGS are acknowledged", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		if f := r.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() }); f == nil {
			t.Fatal("no SETTINGS ack")
		}
	})
	t.Run("streams over http2_max_streams are refused", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		post(r, 1)
		post(r, 3)
		post(r, 5)
		if got := r.resetCode(5); got != "REFUSED_STREAM" {
			t.Fatalf("the third stream: %s, want REFUSED_STREAM", got)
		}
	})
	t.Run("a stream identifier lower than the last is a connection error", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		get(r, 5)
		if got := r.outcome(5); got != "200" {
			t.Fatalf("stream 5: %s", got)
		}
		get(r, 3)
		if got := r.goAwayCode(); got != "PROTOCOL_ERROR" {
			t.Fatalf("stream 3 after 5: %s, want GOAWAY PROTOCOL_ERROR", got)
		}
	})
	t.Run("DATA on a closed stream is a STREAM_CLOSED error", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		get(r, 1)
		if got := r.outcome(1); got != "200" {
			t.Fatalf("stream 1: %s", got)
		}
		r.fr.WriteData(1, true, []byte("late")) //nolint:errcheck
		if got := r.resetCode(1); got != "STREAM_CLOSED" {
			t.Fatalf("DATA after the stream closed: %s, want RST_STREAM STREAM_CLOSED", got)
		}
		get(r, 3) // and the connection serves on
		if got := r.outcome(3); got != "200" {
			t.Fatalf("stream 3 after: %s", got)
		}
	})
	t.Run("a frame over SETTINGS_MAX_FRAME_SIZE is a connection error", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		post(r, 1)
		r.fr.WriteData(1, false, make([]byte, 16385)) //nolint:errcheck
		if got := r.goAwayCode(); got != "FRAME_SIZE_ERROR" {
			t.Fatalf("a 16385-byte DATA frame: %s, want GOAWAY FRAME_SIZE_ERROR", got)
		}
	})
	t.Run("after the client's GOAWAY its open stream is answered, then the connection ends", func(t *testing.T) {
		r := dialRawH2(t, env, tlsAddr)
		r.headers(1, false, ":method", "POST", ":scheme", "https", ":authority", tlsAddr, ":path", "/up", "content-length", "4")
		r.fr.WriteGoAway(0, http2.ErrCodeNo, nil) //nolint:errcheck
		r.fr.WriteData(1, true, []byte("body"))   //nolint:errcheck
		if got := r.outcome(1); got != "200" {
			t.Fatalf("the open stream: %s, want 200", got)
		}
		r.waitClosed(r.watchClose(), "the client's GOAWAY and its last stream's answer")
	})
	got := l.h2.Counts().Refused
	for kind, want := range map[string]uint64{"stream_REFUSED_STREAM": 1, "conn_PROTOCOL_ERROR": 1, "stream_STREAM_CLOSED": 1, "conn_FRAME_SIZE_ERROR": 1} {
		if got[kind] != want {
			t.Errorf("%s counted %d, want %d: %v", kind, got[kind], want, got)
		}
	}
}

// An answer larger than the client's window waits for its WINDOW_UPDATE, then comes whole; an upload
// larger than the server's windows is taken as the server gives them back.
func TestH2FlowControlBothWays(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "")
	r := dialRawH2(t, env, tlsAddr)
	r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}) //nolint:errcheck
	const size = 5000
	r.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things?bytes="+strconv.Itoa(size))
	var body []byte
	data := func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == 1 }
	for len(body) < 100 {
		f := r.next(data)
		if f == nil {
			t.Fatal("the connection ended")
		}
		body = append(body, f.(*http2.DataFrame).Data()...)
	}
	if len(body) != 100 {
		t.Fatalf("%d bytes before the window opened, want the 100 it allows", len(body))
	}
	r.fr.WriteWindowUpdate(1, size) //nolint:errcheck
	for {
		f := r.next(data)
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

	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()
	up := make([]byte, 3<<20) // 12 stream windows, 3 connection windows
	rand.Read(up)             //nolint:errcheck
	resp, err := client.Post("https://"+tlsAddr+"/Thingworx/Services/Upload", "application/octet-stream", bytes.NewReader(up))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	sum := sha256.Sum256(up)
	if resp.StatusCode != 200 || resp.Header.Get("X-Body-Sha256") != hex.EncodeToString(sum[:]) || resp.Header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Fatalf("%d, the leader read %s bytes, want 200 and all %d", resp.StatusCode, resp.Header.Get("X-Body-Bytes"), len(up))
	}
}

// A client that stops reading its answers does not hold the connection (nor a worker) past
// idle_timeout: the write that cannot go out ends it.
func TestH2AClientThatStopsReadingIsClosedAfterIdleTimeout(t *testing.T) {
	_, l, env, tlsAddr := h2LB(t, `idle_timeout = "500ms"`)
	r := dialRawH2(t, env, tlsAddr)
	r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}) //nolint:errcheck
	r.fr.WriteWindowUpdate(0, 1<<31-1-65535)                                              //nolint:errcheck
	r.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/Things?bytes=50000000")
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
		func() bool { return l.h2.Counts().Streams > 0 && writing() == 0 })
}

// At Close (SIGTERM) an HTTP/2 client is told GOAWAY: its stream in flight is answered, an idle
// connection closes at once, and neither holds Close until drain_timeout.
func TestH2CloseDrainsHTTP2Connections(t *testing.T) {
	_, l, env, tlsAddr := h2LB(t, `drain_timeout = "60s"`)
	idle := dialRawH2(t, env, tlsAddr)
	busy := dialRawH2(t, env, tlsAddr)
	busy.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", tlsAddr, ":path", "/Thingworx/slow?delay=1s")
	testkit.Eventually(t, "the slow stream to reach the handler", 5*time.Second, func() bool { return l.h2.Counts().Streams == 1 })
	closed := make(chan struct{})
	go func() {
		l.Close()
		close(closed)
	}()
	if got := idle.goAwayCode(); got != "NO_ERROR" {
		t.Errorf("the idle connection: %s, want GOAWAY NO_ERROR", got)
	}
	idle.waitClosed(idle.watchClose(), "Close, with no stream open")
	if got := busy.goAwayCode(); got != "NO_ERROR" {
		t.Errorf("the connection with a stream in flight: %s, want GOAWAY NO_ERROR", got)
	}
	if got := busy.outcome(1); got != "200" {
		t.Errorf("the stream in flight at Close: %s, want 200", got)
	}
	busy.waitClosed(busy.watchClose(), "Close, once its last stream was answered")
	select {
	case <-closed:
	case <-time.After(hang):
		t.Fatal("Close waits for drain_timeout although every HTTP/2 connection closed")
	}
}

// rate_per_source counts each HTTP/2 stream as a request: streams over it are answered 429 with
// Retry-After, on the same connection, which serves on.
func TestH2StreamsCountAgainstRatePerSource(t *testing.T) {
	c, _, env, tlsAddr := h2LB(t, "rate_per_source = 5")
	client, tr := h2Client(env)
	defer tr.CloseIdleConnections()
	before := c.Platforms[0].Requests()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			resp, err := client.Get("https://" + tlsAddr + "/Thingworx/Things")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		})
	}
	wg.Wait()
	if codes[200] < 5 || codes[429] == 0 || codes[200]+codes[429] != 40 {
		t.Fatalf("40 streams at once: %v; want the 5 of the burst (and what refilled meanwhile) served, the rest 429", codes)
	}
	if n := c.Platforms[0].Requests() - before; n != int64(codes[200]) {
		t.Errorf("the leader got %d requests, want the %d served", n, codes[200])
	}
}
