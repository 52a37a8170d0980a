package lb

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// The upstream transport: one bounded upstream client (upstream.go) per server.
//
// TLS to a pool's servers ([pools.NAME.tls]): the dial runs the handshake, bounded by connect_timeout, and
// a failed handshake is a failed dial (*dialError: no byte of the request reached the server, any request
// may go to another server). The idleConn deadlines sit under TLS, on the socket.

// newTransport returns the client of the server at addr: at most max_conns connections, requests waiting
// up to queue_timeout for a free one.
func newTransport(addr string, cfg *PoolConfig) *upstream {
	connectTimeout, idle, nodelay := cfg.ConnectTimeout.D, cfg.ResponseTimeout.D, cfg.NoDelay
	tlsConfig := cfg.TLS.ClientFor(addr)
	return &upstream{
		addr:         addr,
		maxConns:     cfg.MaxConns,
		queueTimeout: cfg.QueueTimeout.D,
		idleTimeout:  upstreamIdleTimeout,
		dialFn: func() (net.Conn, error) {
			c, err := fasthttp.DialDualStackTimeout(addr, connectTimeout) // IPv6 servers too (discovery may find them)
			if err != nil {
				return nil, &dialError{err}
			}
			if tc, ok := c.(*net.TCPConn); ok && !nodelay {
				tc.SetNoDelay(false) //nolint:errcheck // an optimisation only
			}
			if tlsConfig == nil {
				return &idleConn{Conn: c, timeout: idle}, nil
			}
			ic := &idleConn{Conn: c} // no deadlines of its own during the handshake
			tc, err := handshakeTLS(ic, tlsConfig, connectTimeout)
			if err != nil {
				return nil, &dialError{err}
			}
			ic.timeout = idle // before the connection is handed over: nobody uses it yet
			return tc, nil
		},
	}
}

// upstreamIdleTimeout is how long an upstream connection stays open unused.
const upstreamIdleTimeout = 10 * time.Second

// sameTransport reports whether two pool configs build identical transports (a reload that changes none
// of these keeps every server's connections).
func sameTransport(a, b *PoolConfig) bool {
	return a.MaxConns == b.MaxConns && a.QueueTimeout.D == b.QueueTimeout.D &&
		a.ConnectTimeout.D == b.ConnectTimeout.D && a.ResponseTimeout.D == b.ResponseTimeout.D &&
		a.NoDelay == b.NoDelay && a.TLS.Same(&b.TLS)
}

// handshakeTLS runs the client handshake over conn within timeout. On failure conn is closed and the
// error says it is TLS ("TLS handshake: tls: failed to verify certificate: x509: ...").
func handshakeTLS(conn net.Conn, cfg *tls.Config, timeout time.Duration) (*tls.Conn, error) {
	tc := tls.Client(conn, cfg)
	err := tc.SetDeadline(time.Now().Add(timeout))
	if err == nil {
		err = tc.Handshake()
	}
	if err == nil {
		err = tc.SetDeadline(time.Time{})
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// dialError marks a failure to connect: none of the request's bytes reached the server, so any request
// may be retried.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// idleConn is an upstream connection whose reads and writes time out after a period without progress,
// so that response_timeout bounds a silent server (or one that stopped reading an upload) without cutting
// a long transfer that keeps moving (a fixed deadline per response would). Moving a socket deadline costs
// a runtime timer update, so a deadline is pushed only once it has fallen a quarter of the timeout
// behind: the effective limit of silence is between 3/4 of response_timeout and all of it. Under TLS it is
// the layer under the *tls.Conn, so that it times the socket itself.
type idleConn struct {
	net.Conn
	timeout   time.Duration // 0 while a TLS handshake runs under its own deadline
	rDeadline time.Time     // the read deadline currently set
	wDeadline time.Time     // the write deadline currently set
}

func (c *idleConn) Read(b []byte) (int, error) {
	if c.timeout > 0 {
		if want := time.Now().Add(c.timeout); want.Sub(c.rDeadline) > c.timeout/4 {
			if err := c.Conn.SetReadDeadline(want); err != nil {
				return 0, err
			}
			c.rDeadline = want
		}
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if c.timeout > 0 {
		if want := time.Now().Add(c.timeout); want.Sub(c.wDeadline) > c.timeout/4 {
			if err := c.Conn.SetWriteDeadline(want); err != nil {
				return 0, err
			}
			c.wDeadline = want
		}
	}
	return c.Conn.Write(b)
}

func idempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete()
}
