package lb

// TLS on the front end: an HTTPS listener (tls_listen) beside the plain one, served by the same
// fasthttp.Server and checked by the same framer (framing.go) once decrypted. Certificates are chosen
// by SNI among tls_cert and [[frontend.certs]] (exact name, then wildcard, else the first); client
// certificates are asked for with client_ca + client_auth. The certificates and CAs are read when the
// config is loaded (a bad file fails the load or the reload, naming the file and the key, and the
// running ones stay) and every handshake takes the running generation's: a reload replaces them
// without touching open connections. TLS 1.2 and 1.3 only, Go's default cipher suites, ALPN http/1.1.

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// tlsListener wraps the HTTPS listener: every accepted connection becomes a TLS server connection
// with the running generation's configuration, under a frontConn (framing.go).
func (lb *LB) tlsListener(ln net.Listener) net.Listener {
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			ft := lb.gen.Load().cfg.Frontend.TLS
			if ft == nil { // a reload removed tls_listen: the listener stays until a restart, serving nothing
				return nil, errNoTLS
			}
			return ft.Config, nil
		},
	}
	return &frontListener{Listener: ln, lb: lb, tls: base}
}

var errNoTLS = errors.New("tls_listen is no longer configured")

// tlsFrontConn is a frontConn over TLS: fasthttp sees the TLS connection state through it
// (RequestCtx.IsTLS, X-Forwarded-Proto: https).
type tlsFrontConn struct{ *frontConn }

func (c tlsFrontConn) Handshake() error                     { return c.handshake() }
func (c tlsFrontConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// frontOf returns the frontConn under a connection fasthttp hands to the handler, or nil.
func frontOf(c net.Conn) *frontConn {
	switch fc := c.(type) {
	case *frontConn:
		return fc
	case tlsFrontConn:
		return fc.frontConn
	}
	return nil
}

// handshake runs a TLS connection's handshake once (fasthttp asks for it before the first read, to
// learn the ALPN protocol; Read asks too), bounded by header_timeout (10s when unset). A failed
// handshake (no client certificate when one is required, an old protocol version, plain HTTP) is a
// connection error of kind tls, and the connection then reads EOF: it closes without an answer. A
// client that went away before its hello (a port probe) is not a failure.
func (c *frontConn) handshake() error {
	if c.shook {
		return c.hsErr
	}
	c.shook = true
	d := c.f.lim.headerTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	c.tc.SetDeadline(time.Now().Add(d)) //nolint:errcheck // a failed handshake reports it
	if c.hsErr = c.tc.Handshake(); c.hsErr != nil {
		if !errors.Is(c.hsErr, io.EOF) {
			c.noteError(connTLS)
		}
		return c.hsErr
	}
	c.tc.SetWriteDeadline(time.Time{}) //nolint:errcheck
	c.sockDeadline = c.deadline
	c.Conn.SetReadDeadline(c.deadline) //nolint:errcheck
	return nil
}

// redirectHTTPS answers a plain request with a 308 to the same URI over HTTPS, on tls_listen's port
// (none for 443).
func redirectHTTPS(ctx *fasthttp.RequestCtx, ft *frontTLS) {
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
	if ft.Port != "" && ft.Port != "443" {
		loc += ":" + ft.Port
	}
	loc += string(ctx.URI().RequestURI()) // path and query, also of an absolute-form request target
	ctx.Error("308 Permanent Redirect: use HTTPS\n", fasthttp.StatusPermanentRedirect)
	ctx.Response.Header.Set(fasthttp.HeaderLocation, loc)
}
