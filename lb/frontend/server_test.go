package frontend

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
)

// The front end as lb serves it, with a trivial handler: a fasthttp server configured as lb.go
// configures its own, behind Front.Listener (plain) and Front.TLSListener (TLS, h2 served by NewH2),
// with the Front's ErrorHandler and Logger. What the handler is given is counted, so that a test
// asserts that a refused request never reached it (and so never a server behind lb).

// testServerName is the DNS name of the test certificate (which also holds 127.0.0.1).
const testServerName = "fairlead.example"

// frontOptions are the limits and timeouts of a test front end (zero: lb's default).
type frontOptions struct {
	lim                      Limits
	readTimeout, idleTimeout time.Duration
	maxConns                 int
	maxStreams               uint32 // http2_max_streams (default 100)
	log                      *slog.Logger
	onRefused                func(*RefusedRequest)           // Front.OnRefused
	handle                   func(*fasthttp.RequestCtx) bool // if set, called first: true if it answered
}

// testFront is a running front end with a trivial handler.
type testFront struct {
	f        *Front
	h2       *H2
	srv      *fasthttp.Server
	addr     string // plain HTTP/1.1
	tlsAddr  string // TLS, h2 or http/1.1 by ALPN
	ca       *sim.CA
	requests atomic.Int64 // requests the handler was given
	handleFn func(*fasthttp.RequestCtx) bool
}

// startFront serves the trivial handler behind a Front with o's limits on two listeners of 127.0.0.1,
// plain and TLS. The handler answers 200: "?bytes=N" with N bytes of the pattern a…z, a request with a
// body with X-Body-Bytes and X-Body-Sha256 of what it read, "?delay=D" after D. A body it could not
// read is answered as lb answers it (clientFailed): the framer's refusal (Claim), 413, 408 or 400,
// with Connection: close.
func startFront(t testing.TB, o frontOptions) *testFront {
	t.Helper()
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.lim.HeaderTimeout, 10 * time.Second}, {&o.readTimeout, 30 * time.Second}, {&o.idleTimeout, 60 * time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.lim.MaxHeader == 0 {
		o.lim.MaxHeader = 8 << 10
	}
	if o.maxStreams == 0 {
		o.maxStreams = 100
	}
	ca, err := sim.NewCA("frontend test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testServerName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFront{f: New(o.lim, o.log), ca: ca, handleFn: o.handle}
	tf.f.OnRefused = o.onRefused
	maxBody := int(^uint(0) >> 1)
	if o.lim.MaxBody > 0 {
		maxBody = int(o.lim.MaxBody)
	}
	tf.srv = &fasthttp.Server{
		Handler:                      tf.handle,
		ErrorHandler:                 tf.f.ErrorHandler,
		NoDefaultServerHeader:        true,
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		StreamRequestBody:            true,
		WriteBufferSize:              32 << 10,
		ReadBufferSize:               max(o.lim.MaxHeader, 4<<10),
		ReduceMemoryUsage:            true,
		ReadTimeout:                  o.readTimeout,
		IdleTimeout:                  o.idleTimeout,
		Concurrency:                  o.maxConns,
		MaxRequestBodySize:           maxBody,
		CloseOnShutdown:              true,
		Logger:                       tf.f.Logger(),
		SecureErrorLogMessage:        true,
	}
	tf.h2 = tf.f.NewH2(tf.handle, func() H2Config {
		return H2Config{MaxStreams: o.maxStreams, MaxHeader: o.lim.MaxHeader, ReadTimeout: o.readTimeout, IdleTimeout: o.idleTimeout}
	})
	tf.srv.NextProto("h2", tf.h2.Serve)
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	var done []chan struct{}
	var lns []net.Listener
	for _, wrap := range []func(net.Listener) net.Listener{
		tf.f.Listener,
		func(ln net.Listener) net.Listener { return tf.f.TLSListener(ln, func() *tls.Config { return cfg }) },
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if tf.addr == "" {
			tf.addr = ln.Addr().String()
		} else {
			tf.tlsAddr = ln.Addr().String()
		}
		lns = append(lns, ln)
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); tf.srv.Serve(wrap(ln)) }() //nolint:errcheck
	}
	t.Cleanup(func() {
		tf.h2.Close()
		tf.srv.Shutdown() //nolint:errcheck
		// A Serve that had not begun when Shutdown ran is not known to it: closing its listener ends it.
		for _, ln := range lns {
			ln.Close()
		}
		for _, d := range done {
			<-d
		}
	})
	return tf
}

func (tf *testFront) handle(ctx *fasthttp.RequestCtx) {
	tf.requests.Add(1)
	if tf.handleFn != nil && tf.handleFn(ctx) {
		return
	}
	args := ctx.QueryArgs()
	if d, err := time.ParseDuration(string(args.Peek("delay"))); err == nil {
		time.Sleep(d) // the handler's own work, as a slow server behind lb
	}
	var body []byte
	var err error
	if s := ctx.RequestBodyStream(); s != nil {
		body, err = io.ReadAll(s)
	} else {
		body = ctx.PostBody()
	}
	if err != nil {
		status, reason := BodyRefusal(ctx.Conn(), err)
		tf.f.Refused(status)
		ctx.Error(RefusalBody(status, reason), status)
		ctx.SetConnectionClose()
		return
	}
	if len(body) > 0 || ctx.IsPost() {
		sum := sha256.Sum256(body)
		ctx.Response.Header.Set("X-Body-Bytes", strconv.Itoa(len(body)))
		ctx.Response.Header.Set("X-Body-Sha256", hex.EncodeToString(sum[:]))
	}
	if n, err := strconv.Atoi(string(args.Peek("bytes"))); err == nil {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		ctx.SetBody(b)
		return
	}
	ctx.WriteString("ok\n") //nolint:errcheck
}

// clientTLS verifies the test certificate.
func (tf *testFront) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: tf.ca.Pool(), ServerName: testServerName}
}

// h2Client is a client that speaks HTTP/2 only, over one connection.
func (tf *testFront) h2Client(t testing.TB) *http.Client {
	tr := &http2.Transport{TLSClientConfig: tf.clientTLS(), StrictMaxConcurrentStreams: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 60 * time.Second, Transport: tr}
}

// refusal checks that raw, sent in one write on a new connection, gets want, the connection closes, the
// handler is given nothing and the refusal is counted by its status.
func (tf *testFront) refusal(t *testing.T, what, raw string, want int) {
	t.Helper()
	n, counted := tf.requests.Load(), tf.f.RefusedTotal(want)
	r := frontendtest.Request(t, tf.addr, raw)
	if r.Status != want || !r.Closed {
		t.Errorf("%s: got %s; want %d and the connection closed (%s)", what, r, want, r.After)
	}
	if d := tf.requests.Load() - n; d != 0 {
		t.Errorf("%s: the handler was given %d requests, want none", what, d)
	}
	if r.Status == want {
		if !testkit.Within(time.Second, func() bool { return tf.f.RefusedTotal(want) == counted+1 }) {
			t.Errorf("%s: refusals with %d went from %d to %d, want +1", what, want, counted, tf.f.RefusedTotal(want))
		}
	}
}

// dialH2 opens a raw HTTP/2 connection to the TLS listener.
func (tf *testFront) dialH2(t *testing.T) *frontendtest.H2Conn {
	t.Helper()
	return frontendtest.DialH2(t, tf.tlsAddr, tf.clientTLS())
}

// get is the fields of a GET of path at authority.
func get(authority, path string) []string {
	return []string{":method", "GET", ":scheme", "https", ":authority", authority, ":path", path}
}
