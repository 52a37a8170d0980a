package frontend

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
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
)

// The TLS listener (tls.go) against a trivial handler: each handshake takes the configuration in force
// when it runs, once; a failed handshake is a connection error of kind tls, closes the connection
// without an answer and gives the handler nothing. (The configuration lb/config builds from [frontend]
// — versions, ALPN, certificates by SNI, client_auth — is served the same way in tls_config_test.go.)

// tlsFront serves the trivial handler behind f's TLS listener on 127.0.0.1 with the configuration
// config returns at each handshake, and returns its address and the handler's request count.
func tlsFront(t *testing.T, f *Front, config func() *tls.Config) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &fasthttp.Server{
		Handler:      func(ctx *fasthttp.RequestCtx) { n.Add(1); ctx.WriteString("ok") }, //nolint:errcheck
		ErrorHandler: f.ErrorHandler,
		Logger:       f.Logger(),
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(f.TLSListener(ln, config)) }() //nolint:errcheck
	t.Cleanup(func() { srv.Shutdown(); ln.Close(); <-done })                //nolint:errcheck
	return ln.Addr().String(), &n
}

// tlsGet sends one GET on a new TLS connection to addr and returns the status (0 and the error when
// the handshake or the exchange failed) and the server's certificate.
func tlsGet(addr string, cfg *tls.Config) (int, *x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	return tlsGetOn(conn)
}

// tlsGetOn sends one GET on conn and reads the answer.
func tlsGetOn(conn *tls.Conn) (int, *x509.Certificate, error) {
	conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil, err
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	return resp.StatusCode, conn.ConnectionState().PeerCertificates[0], nil
}

// A handshake takes the configuration in force when it runs: after a change (lb's reload) new
// connections get the new certificate while an open connection keeps its own and serves on; with no
// configuration (tls_listen removed by a reload) a handshake fails.
func TestTLSListenerTakesTheConfigurationInForceAtEachHandshake(t *testing.T) {
	ca, err := sim.NewCA("frontend test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf := func() tls.Certificate {
		l, err := ca.Issue(testServerName, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return l.TLS
	}
	var cur atomic.Pointer[tls.Config]
	cur.Store(&tls.Config{Certificates: []tls.Certificate{leaf()}})
	f := New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
	addr, _ := tlsFront(t, f, cur.Load)
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: testServerName}

	open, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	_, first, err := tlsGetOn(open)
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(&tls.Config{Certificates: []tls.Certificate{leaf()}})
	status, second, err := tlsGet(addr, client)
	if err != nil || status != 200 || second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("a new connection after the change: %d, %v; want 200 with the new certificate", status, err)
	}
	if status, cert, err := tlsGetOn(open); err != nil || status != 200 || cert.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("the connection open before the change: %d, %v; want 200 with its own certificate", status, err)
	}
	cur.Store(nil)
	if _, _, err := tlsGet(addr, client); err == nil {
		t.Fatal("a handshake without a configuration succeeded")
	}
}

// A handshake that fails — the client certificate missing or from another CA, an old protocol version,
// plain HTTP on the TLS port, a client silent past header_timeout — is counted as a connection error of
// kind tls; the connection closes without an answer and the handler is given nothing. A client that
// goes away before its hello (a port probe) is no error.
func TestTLSHandshakeFailuresAreCountedAndReachNoHandler(t *testing.T) {
	ca, err := sim.NewCA("frontend test CA")
	if err != nil {
		t.Fatal(err)
	}
	clients, err := sim.NewCA("clients CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(testServerName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{server.TLS}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients.Pool()}
	f := New(Limits{MaxHeader: 8 << 10, HeaderTimeout: 500 * time.Millisecond}, slog.New(slog.DiscardHandler))
	addr, handled := tlsFront(t, f, func() *tls.Config { return cfg })
	withCert := func(from *sim.CA, ver uint16) *tls.Config { return clientTLS(t, ca, from, ver) }
	failed := func(what string, try func()) {
		t.Helper()
		before := f.Errors.Count(ConnTLS)
		try()
		if !testkit.Within(3*time.Second, func() bool { return f.Errors.Count(ConnTLS) == before+1 }) {
			t.Errorf("%s: tls connection errors went from %d to %d, want +1", what, before, f.Errors.Count(ConnTLS))
		}
	}
	refused := func(what string, c *tls.Config) {
		t.Helper()
		failed(what, func() {
			if status, _, err := tlsGet(addr, c); err == nil {
				t.Errorf("%s: answered %d, want the handshake refused", what, status)
			}
		})
	}
	refused("no client certificate, TLS 1.2", withCert(nil, tls.VersionTLS12))
	refused("no client certificate, TLS 1.3", withCert(nil, tls.VersionTLS13))
	refused("a client certificate from another CA", withCert(ca, tls.VersionTLS13))
	refused("TLS 1.1", withCert(clients, tls.VersionTLS11))
	failed("plain HTTP on the TLS port", func() {
		c := frontendtest.Dial(t, addr)
		c.WriteRaw("GET / HTTP/1.1\r\nHost: a\r\n\r\n") //nolint:errcheck
		if r := c.Answer(frontendtest.AnswerWait); r.Status != 0 || !r.Closed {
			t.Errorf("plain HTTP on the TLS port: %s, want the connection closed without an answer", r)
		}
	})
	failed("a client silent past header_timeout", func() {
		c := frontendtest.Dial(t, addr)
		if closed, after := c.ClosedWithin(5 * time.Second); !closed {
			t.Errorf("a silent client: still open 5s after header_timeout (500ms): %s", after)
		}
	})
	before := f.Errors.Count(ConnTLS)
	probe, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	probe.Close()
	if status, _, err := tlsGet(addr, withCert(clients, tls.VersionTLS13)); err != nil || status != 200 {
		t.Fatalf("a client with a certificate from the client CA: %d, %v; want 200", status, err)
	}
	if n := f.Errors.Count(ConnTLS); n != before {
		t.Errorf("a port probe was counted as a tls error (%d → %d)", before, n)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("the handler was given %d requests, want only the accepted client's", n)
	}
}

// RedirectHTTPS answers 308 to the same path and query over HTTPS at the request's host and the given
// port, without the port when it is 443 (or unknown); an absolute-form target redirects as its path,
// an IPv6 host keeps its brackets, and a request without a host gets 400.
func TestRedirectHTTPSSendsTheSameURIToTheTLSPort(t *testing.T) {
	for _, tc := range []struct{ port, raw, status, location string }{
		{"8443", "GET /Thingworx/x?y=1 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "308", "https://example.com:8443/Thingworx/x?y=1"},
		{"8443", "GET /Thingworx/x?y=1 HTTP/1.1\r\nHost: example.com\r\n\r\n", "308", "https://example.com:8443/Thingworx/x?y=1"},
		{"8443", "GET http://example.com:8080/Thingworx/x?y=1 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "308", "https://example.com:8443/Thingworx/x?y=1"},
		{"443", "GET /Thingworx/x?y=1 HTTP/1.1\r\nHost: example.com\r\n\r\n", "308", "https://example.com/Thingworx/x?y=1"},
		{"", "GET /a HTTP/1.1\r\nHost: example.com:80\r\n\r\n", "308", "https://example.com/a"},
		{"8443", "GET /a HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", "308", "https://[::1]:8443/a"},
		{"8443", "GET /a HTTP/1.0\r\n\r\n", "400", ""},
	} {
		f := New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { RedirectHTTPS(ctx, tc.port) }, ErrorHandler: f.ErrorHandler}
		go srv.Serve(f.Listener(ln)) //nolint:errcheck
		r := frontendtest.AnswerTo(t, ln.Addr().String(), tc.raw, frontendtest.AnswerWait)
		srv.Shutdown() //nolint:errcheck
		ln.Close()
		if strconv.Itoa(r.Status) != tc.status || r.Header.Get("Location") != tc.location {
			t.Errorf("port %q, %q: %s with Location %q; want %s to %q", tc.port, tc.raw, r, r.Header.Get("Location"), tc.status, tc.location)
		}
	}
}

// clientTLS is a client's config trusting ca for testServerName, of version ver only (0: any the two
// ends share), presenting a certificate from the CA from (none if nil) whatever CAs the server names
// as acceptable.
func clientTLS(t *testing.T, ca, from *sim.CA, ver uint16) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: ca.Pool(), ServerName: testServerName, MinVersion: ver, MaxVersion: ver}
	if from != nil {
		leaf, err := from.Issue("device-1")
		if err != nil {
			t.Fatal(err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
	}
	return c
}

// A client resumes its TLS 1.3 session on a new connection, as it would without fairlead's capture of
// each session (tickets encrypted with the keys the listener decrypts them with); a client that offers
// only TLS 1.2 is sent no ticket (crypto/tls logs no secret for a resumed TLS 1.2 session, which could
// then not move at a binary upgrade) and makes full handshakes.
func TestTLSSessionsResumeThroughTheCapture(t *testing.T) {
	ca, err := sim.NewCA("frontend test CA")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ca.Issue(testServerName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{l.TLS}}
	f := New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
	addr, _ := tlsFront(t, f, func() *tls.Config { return cfg })
	for _, c := range []struct {
		max    uint16
		resume bool
	}{{tls.VersionTLS13, true}, {tls.VersionTLS12, false}} {
		client := &tls.Config{RootCAs: ca.Pool(), ServerName: testServerName, MaxVersion: c.max,
			ClientSessionCache: tls.NewLRUClientSessionCache(4)}
		for i := range 3 {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, client)
			if err != nil {
				t.Fatal(err)
			}
			if code, _, err := tlsGetOn(conn); code != 200 { // a TLS 1.3 ticket comes after the handshake: read it
				t.Fatalf("GET: %d %v", code, err)
			}
			if got, want := conn.ConnectionState().DidResume, c.resume && i > 0; got != want {
				t.Errorf("%s, connection %d: resumed %v, want %v", tls.VersionName(c.max), i, got, want)
			}
			conn.Close()
		}
	}
}
