package frontend

// TLS on the front end: an HTTPS listener (tls_listen) beside the plain one, served by the same
// fasthttp.Server and checked by the same framer (framer.go) once decrypted. The configuration is
// lb/config's (FrontTLS): certificates chosen by SNI among tls_cert and [[frontend.certs]] (exact name,
// then wildcard, else the first), client certificates asked for with client_ca + client_auth. The
// certificates and CAs are read when the config is loaded (a bad file fails the load or the reload,
// naming the file and the key, and the running ones stay) and every handshake takes the running
// generation's: a reload replaces them without touching open connections. TLS 1.2 and 1.3 only, Go's
// default cipher suites, ALPN http/1.1.

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// TLSListener wraps ln, the HTTPS listener: every accepted connection becomes a TLS server connection
// with the configuration config returns at its handshake (the running generation's, so that a reload
// replaces certificates without touching open connections; nil when a reload removed tls_listen: the
// listener stays until a restart, serving nothing), and is checked by a framer once decrypted.
// Connections handed to the handler expose their TLS state (fasthttp's RequestCtx.IsTLS).
func (f *Front) TLSListener(ln net.Listener, config func() *tls.Config) net.Listener {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := config()
		if c == nil {
			return nil, errNoTLS
		}
		if nc, ok := hello.Conn.(*nbio.TCPConn); ok && nc.TLSSession() != nil {
			// Its secrets and tickets, should its session move (a tunnel, a relay stream, an idle
			// keep-alive connection at a binary upgrade); its tickets encrypted with base's keys,
			// which crypto/tls decrypts them with.
			c = nc.TLSSession().Config(c, hello, base)
		}
		return c, nil
	}
	return &listener{Listener: ln, front: f, tls: base}
}

var errNoTLS = errors.New("tls_listen is no longer configured")

// acmeALPN is the protocol of an ACME server's TLS-ALPN-01 validation (RFC 8737), which the TLS
// configuration offers with [frontend.acme] (lb/acme).
const acmeALPN = "acme-tls/1"

var errACMEValidation = errors.New("an ACME TLS-ALPN-01 validation: closed after its handshake")

// tlsFrontConn is a frontConn over TLS: fasthttp sees the TLS connection state through it
// (RequestCtx.IsTLS, X-Forwarded-Proto: https). Its session is crypto/tls's, or fairlead's record
// layer's for a connection a binary upgrade's old process handed over (its handshake done there).
type tlsFrontConn struct{ *frontConn }

func (c tlsFrontConn) Handshake() error { return c.handshake() }

func (c tlsFrontConn) ConnectionState() tls.ConnectionState {
	if c.rec != nil {
		return c.rec.ConnectionState()
	}
	return c.tc.ConnectionState()
}

// handshake runs a TLS connection's handshake once (fasthttp asks for it before the first read, to
// learn the ALPN protocol; Read asks too), bounded by header_timeout (10s when unset), a proxy_protocol
// sender's PROXY header read first within the same bound. A failed handshake (no client certificate
// when one is required, an old protocol version, plain HTTP) is a connection error of kind tls, and the
// connection then reads EOF: it closes without an answer. A client that went away before its hello (a
// port probe) is not a failure.
func (c *frontConn) handshake() error {
	if c.shook {
		return c.hsErr
	}
	c.shook = true
	d := c.f.lim.HeaderTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	end := time.Now().Add(d)
	if c.px != nil && !c.px.done { // a proxy_protocol sender's header first, within the same bound (proxyproto.go)
		if c.hsErr = c.readProxy(); c.hsErr != nil {
			return c.hsErr
		}
	}
	c.tc.SetDeadline(end) //nolint:errcheck // a failed handshake reports it
	if c.hsErr = c.tc.Handshake(); c.hsErr != nil {
		if !errors.Is(c.hsErr, io.EOF) {
			c.noteError(ConnTLS)
		}
		return c.hsErr
	}
	if c.tc.ConnectionState().NegotiatedProtocol == acmeALPN {
		// An ACME server's TLS-ALPN-01 validation ([frontend.acme]): the handshake was all of it, and
		// the connection closes without a read (not an error).
		c.hsErr = errACMEValidation
		return c.hsErr
	}
	if nc, ok := c.tc.NetConn().(*nbio.TCPConn); ok {
		nc.HandshakeDone()
	}
	if cs := c.tc.ConnectionState(); !tlsrecord.Supports(cs.Version, cs.CipherSuite) {
		c.hand.Store(handNever) // a session fairlead's record layer cannot carry: never given over (idle.go)
	}
	c.tc.SetWriteDeadline(time.Time{}) //nolint:errcheck
	c.sockDeadline = c.deadline
	c.Conn.SetReadDeadline(c.deadline) //nolint:errcheck
	return nil
}

// RedirectHTTPS answers a plain request with a 308 to the same URI over HTTPS, on port, tls_listen's
// port (none in the Location for "443" or "").
func RedirectHTTPS(ctx *fasthttp.RequestCtx, port string) {
	host := string(ctx.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		ctx.Error("400 Bad Request: HTTPS only, and no Host to redirect to\n", fasthttp.StatusBadRequest)
		return
	}
	if strings.IndexByte(host, ':') >= 0 { // a bare IPv6 address
		host = "[" + host + "]"
	}
	loc := "https://" + host
	if port != "" && port != "443" {
		loc += ":" + port
	}
	loc += string(ctx.URI().RequestURI()) // path and query, also of an absolute-form request target
	ctx.Error("308 Permanent Redirect: use HTTPS\n", fasthttp.StatusPermanentRedirect)
	ctx.Response.Header.Set(fasthttp.HeaderLocation, loc)
}
