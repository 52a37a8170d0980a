package upstream

import (
	"net"
	"time"

	"github.com/fairlead/fairlead/lb/dialer"
	"github.com/fairlead/fairlead/lb/nbio"
)

// Dialer makes the connections to one server (package dialer): the client's, and an upgrade's through
// Client.Dial. A failure is a *DialError.
type Dialer = dialer.Dialer

// DialError marks a failure to connect (dialer.Error): none of the request's bytes reached the server,
// so any request may be retried.
type DialError = dialer.Error

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
