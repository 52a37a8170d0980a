package upstream

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
// failed handshake included, is a *DialError: none of a request's bytes reached the server, so any
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
func (d *Dialer) Dial() (net.Conn, error) { return d.dial(nil, true) }

// dial connects, with TCP_NODELAY or Nagle's algorithm. under, if not nil, is put over the socket (under
// TLS): the idleConn of the client's connections, which times the socket itself.
func (d *Dialer) dial(under *idleConn, nodelay bool) (net.Conn, error) {
	c, err := fasthttp.DialDualStackTimeout(d.Addr, d.Timeout)
	if err != nil {
		return nil, &DialError{err}
	}
	if tc, ok := c.(*net.TCPConn); ok && !nodelay {
		tc.SetNoDelay(false) //nolint:errcheck // an optimisation only
	}
	if under != nil {
		if tc, ok := c.(*net.TCPConn); ok {
			if nc, err := nbio.NewTCPConn(tc); err == nil {
				c, under.nb = nc, nc
			}
		}
		under.Conn, c = c, under
	} else if tc, ok := c.(*net.TCPConn); ok && d.TLS != nil {
		// A connection for a tunnel: under TLS, the tunnel engine reads and writes it in evented mode.
		if nc, err := nbio.NewTCPConn(tc); err == nil {
			nc.CountTLSRecords()
			c = nc
		}
	}
	if d.TLS == nil {
		return c, nil
	}
	tc, err := handshakeTLS(c, d.TLS, d.Timeout)
	if err != nil {
		return nil, &DialError{err}
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

// DialError marks a failure to connect: none of the request's bytes reached the server, so any request
// may be retried.
type DialError struct{ err error }

func (e *DialError) Error() string { return e.err.Error() }
func (e *DialError) Unwrap() error { return e.err }

// idleConn is a client connection whose reads and writes time out after a period without progress, so
// that Options.ResponseTimeout bounds a silent server (or one that stopped reading an upload) without
// cutting a long transfer that keeps moving (a fixed deadline per response would). Moving a socket
// deadline costs a runtime timer update, so a deadline is pushed only once it has fallen a quarter of
// the timeout behind: the effective limit of silence is between 3/4 of the timeout and all of it. Under
// TLS it is the layer under the *tls.Conn, so that it times the socket itself.
//
// Over a TCP socket (plain, or under TLS) its reads and writes are nbio's, without the scheduler's
// system call hooks; and the bytes of a request without a body can be written by the read that waits
// for the answer (first), which saves the read that would find nothing yet.
type idleConn struct {
	net.Conn
	timeout   time.Duration // 0 while a TLS handshake runs under its own deadline
	rDeadline time.Time     // the read deadline currently set
	wDeadline time.Time     // the write deadline currently set
	nb        *nbio.TCPConn // Conn, when it is a TCP socket; nil otherwise
	// first: bytes the next Read writes before it reads (nb only); firstErr: its write failed.
	first    []byte
	firstErr error
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
	if c.first != nil {
		c.pushWrite() //nolint:errcheck // a failed write reports it
		first := c.first
		c.first = nil
		n, werr, rerr := c.nb.WriteThenRead(first, b)
		if werr != nil {
			c.firstErr = werr
			return 0, werr
		}
		return n, rerr
	}
	return c.Conn.Read(b)
}

// writeFirst has the next Read write b before it reads. The caller keeps b until then.
func (c *idleConn) writeFirst(b []byte) {
	c.first, c.firstErr = b, nil
}

func (c *idleConn) Write(b []byte) (int, error) {
	if err := c.pushWrite(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// pushWrite moves the write deadline when it has fallen behind (see the type).
func (c *idleConn) pushWrite() error {
	if c.timeout > 0 {
		if want := time.Now().Add(c.timeout); want.Sub(c.wDeadline) > c.timeout/4 {
			if err := c.Conn.SetWriteDeadline(want); err != nil {
				return err
			}
			c.wDeadline = want
		}
	}
	return nil
}
