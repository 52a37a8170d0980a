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
// up to queue_timeout for a free one, each connection made by the server's dialer.
func newTransport(addr string, cfg *PoolConfig) *upstream {
	d := dialer{addr: addr, timeout: cfg.ConnectTimeout.D, tls: cfg.TLS.clientFor(addr)}
	idle, nodelay := cfg.ResponseTimeout.D, cfg.NoDelay
	return &upstream{
		addr:         addr,
		dialer:       d,
		maxConns:     cfg.MaxConns,
		queueTimeout: cfg.QueueTimeout.D,
		idleTimeout:  upstreamIdleTimeout,
		dialFn: func() (net.Conn, error) {
			ic := &idleConn{} // no deadlines of its own during a TLS handshake
			c, err := d.dial(ic, nodelay)
			if err != nil {
				return nil, err
			}
			ic.timeout = idle // before the connection is handed over: nobody uses it yet
			return c, nil
		},
	}
}

// dialer makes the connections to one server, those of its upstream client and those of upgrades: TCP
// (IPv6 too: discovery may find such servers) within connect_timeout, then for a pool with
// [pools.NAME.tls] the TLS handshake within connect_timeout again, sending and verifying the server's
// name (clientFor). A failure, a failed handshake included, is a *dialError: none of a request's bytes
// reached the server, so any request may go to another server.
type dialer struct {
	addr    string
	timeout time.Duration
	tls     *tls.Config // nil: plain TCP
}

// Dial returns a connection of its own, outside the client's pool (an upgrade's, which becomes a
// tunnel): a *net.TCPConn with TCP_NODELAY, or a *tls.Conn over one.
func (d *dialer) Dial() (net.Conn, error) { return d.dial(nil, true) }

// dial connects, with TCP_NODELAY or Nagle's algorithm. under, if not nil, is put over the socket (under
// TLS): the idleConn of the client's connections, which times the socket itself.
func (d *dialer) dial(under *idleConn, nodelay bool) (net.Conn, error) {
	c, err := fasthttp.DialDualStackTimeout(d.addr, d.timeout)
	if err != nil {
		return nil, &dialError{err}
	}
	if tc, ok := c.(*net.TCPConn); ok && !nodelay {
		tc.SetNoDelay(false) //nolint:errcheck // an optimisation only
	}
	if under != nil {
		under.Conn, c = c, under
	}
	if d.tls == nil {
		return c, nil
	}
	tc, err := handshakeTLS(c, d.tls, d.timeout)
	if err != nil {
		return nil, &dialError{err}
	}
	return tc, nil
}

// upstreamIdleTimeout is how long an upstream connection stays open unused.
const upstreamIdleTimeout = 10 * time.Second

// sameTransport reports whether two pool configs build identical transports (a reload that changes none
// of these keeps every server's connections).
func sameTransport(a, b *PoolConfig) bool {
	return a.MaxConns == b.MaxConns && a.QueueTimeout.D == b.QueueTimeout.D &&
		a.ConnectTimeout.D == b.ConnectTimeout.D && a.ResponseTimeout.D == b.ResponseTimeout.D &&
		a.NoDelay == b.NoDelay && a.TLS.same(&b.TLS)
}

// same reports whether two [pools.NAME.tls] tables make the same connections: the same keys and the
// same contents of their files.
func (t *PoolTLSConfig) same(o *PoolTLSConfig) bool {
	return t.Enabled == o.Enabled && t.CAFile == o.CAFile && t.ServerName == o.ServerName &&
		t.InsecureSkipVerify == o.InsecureSkipVerify && t.Cert == o.Cert && t.Key == o.Key && t.sum == o.sum
}

// clientFor returns the TLS config of connections to the server at addr, or nil for plain TCP. Without
// server_name, the name sent (SNI) and verified is the server's host; an IP address is verified
// against the certificate's IP SANs (and sent as no SNI).
func (t *PoolTLSConfig) clientFor(addr string) *tls.Config {
	if t.client == nil {
		return nil
	}
	cfg := t.client.Clone() // shares the session cache
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
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
