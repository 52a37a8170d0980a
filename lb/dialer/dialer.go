// Package dialer makes the connections to a server: the upstream client's pooled ones (lb/upstream),
// a WebSocket upgrade's, which becomes a tunnel (package lb), and the health checks' probes
// (healthcheck). One dialer, so that a probe connects exactly as traffic does (TCP, IPv6 too, TLS
// verified as configured). A leaf: it imports nothing of fairlead's but lb/nbio.
package dialer

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/lb/nbio"
)

// Dialer makes the connections to one server: those of its Client, and those the proxy makes outside
// the pool (an upgrade's, which becomes a tunnel; Client.Dial). TCP (IPv6 too: discovery may find such
// servers) within Timeout, then, with TLS, the client handshake within Timeout again. A failure, a
// failed handshake included, is an *Error: none of a request's bytes reached the server, so any
// request may go to another server.
type Dialer struct {
	Addr    string        // host:port
	Timeout time.Duration // of the TCP connect, and of the TLS handshake
	// TLS is the client config of connections over TLS (its ServerName is the name sent and verified;
	// empty for an IP address verified against the certificate's IP SANs); nil dials plain TCP.
	TLS *tls.Config
}

// Dial returns a connection of its own: a *net.TCPConn with TCP_NODELAY, or a *tls.Conn over one (an
// *nbio.TCPConn, which the tunnel engine can put in evented mode).
func (d *Dialer) Dial() (net.Conn, error) { return d.DialUnder(nil, true) }

// DialUnder connects, with TCP_NODELAY or Nagle's algorithm. under, if not nil, is given the socket
// (an *nbio.TCPConn, nb, when it is a TCP socket; nb nil otherwise) and returns what is put over it,
// under TLS: the upstream client's idle-timed layer, which times the socket itself.
func (d *Dialer) DialUnder(under func(sock net.Conn, nb *nbio.TCPConn) net.Conn, nodelay bool) (net.Conn, error) {
	c, err := fasthttp.DialDualStackTimeout(d.Addr, d.Timeout)
	if err != nil {
		return nil, &Error{err}
	}
	if tc, ok := c.(*net.TCPConn); ok && !nodelay {
		tc.SetNoDelay(false) //nolint:errcheck // an optimisation only
	}
	if under != nil {
		var nb *nbio.TCPConn
		if tc, ok := c.(*net.TCPConn); ok {
			if nc, err := nbio.NewTCPConn(tc); err == nil {
				c, nb = nc, nc
			}
		}
		c = under(c, nb)
	} else if tc, ok := c.(*net.TCPConn); ok && d.TLS != nil {
		// A connection for a tunnel: under TLS, the tunnel engine reads and writes it in evented mode,
		// and relays it with its own record layer once it has taken the session over (lb/tunnel).
		if nc, err := nbio.NewTCPConn(tc); err == nil {
			nc.CaptureTLS(false)
			c = nc
		}
	}
	if d.TLS == nil {
		return c, nil
	}
	cfg := d.TLS
	nc, _ := c.(*nbio.TCPConn)
	if nc != nil && nc.TLSSession() != nil {
		cfg = nc.TLSSession().Config(cfg, nil, nil)
	}
	tc, err := handshakeTLS(c, cfg, d.Timeout)
	if err == nil && nc != nil {
		nc.HandshakeDone()
	}
	if err != nil {
		return nil, &Error{err}
	}
	return tc, nil
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

// Error marks a failure to connect: none of a request's bytes reached the server, so any request may
// go to another server.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
