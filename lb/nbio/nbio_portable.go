//go:build !linux || nbio_portable

package nbio

import (
	"errors"
	"net"
)

// The portable package: Conn and TCPConn are the *net.TCPConn's own Read and Write, each system call
// made the ordinary way (the scheduler's hooks around it, or Windows' overlapped I/O). What the rest of
// fairlead calls is here with Linux's semantics, but for one difference: WriteThenRead is a Write then a
// Read, so under a read deadline that had passed before the call first is written before the read fails
// (on Linux nothing is). The evented mode (SetEvented, Flush, Blocked, Drained) and the free Read, Write,
// Recv, Send and EpollWait are not: only the epoll tunnel engine uses them, and where nbio is portable
// lb/tunnel runs its portable engine (engine_other.go). -tags nbio_portable builds this on Linux too,
// to run and test the Windows and macOS paths there.

// Conn is a *net.TCPConn read and written with its own Read and Write. Its zero value is unusable:
// Init it. Like a net.Conn it may be read by one goroutine while another writes.
type Conn struct {
	tc *net.TCPConn
}

// Init makes c read and write tc.
func (c *Conn) Init(tc *net.TCPConn) error {
	c.tc = tc
	return nil
}

// TCP is the connection c reads and writes.
func (c *Conn) TCP() *net.TCPConn { return c.tc }

// Read reads as net.Conn.Read does.
func (c *Conn) Read(b []byte) (int, error) { return c.tc.Read(b) }

// Write writes as net.Conn.Write does: all of b, or an error.
func (c *Conn) Write(b []byte) (int, error) { return c.tc.Write(b) }

// WriteThenRead writes first, then reads into b: werr is the write's error (nothing is read then), rerr
// the read's; on a closed c, rerr is net.ErrClosed and nothing is written. Unlike Linux's it makes the two
// calls one after the other, and a read deadline that had passed before the call fails the read only
// (first is written).
func (c *Conn) WriteThenRead(first, b []byte) (n int, werr, rerr error) {
	if len(first) > 0 {
		if n, err := c.tc.Write(first); err != nil {
			if n == 0 && errors.Is(err, net.ErrClosed) {
				return 0, nil, err // as Linux's: c was closed before the call, a read error
			}
			return 0, err, nil
		}
	}
	if len(b) == 0 {
		return 0, nil, nil
	}
	n, rerr = c.tc.Read(b)
	return n, nil, rerr
}

// TCPConn is a *net.TCPConn that can count the TLS records it reads (CountTLSRecords), and whose
// WriteThenRead is Conn's.
type TCPConn struct {
	*net.TCPConn
	nb          Conn
	recordCount // the TLS framing of what was read, when counted (CountTLSRecords)
	client      clientAddr
}

// NewTCPConn wraps tc.
func NewTCPConn(tc *net.TCPConn) (*TCPConn, error) {
	c := &TCPConn{TCPConn: tc}
	c.nb.Init(tc) //nolint:errcheck // never fails
	return c, nil
}

// Read reads as net.Conn.Read does.
func (c *TCPConn) Read(b []byte) (int, error) {
	if c.hold {
		return 0, ErrWouldBlock
	}
	b = c.clip(b)
	n, err := c.TCPConn.Read(b)
	if n > 0 {
		c.sawRead(b[:n])
	}
	return n, err
}

// Write writes as net.Conn.Write does.
func (c *TCPConn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	if n > 0 {
		c.sawWrite(b[:n])
	}
	return n, err
}

// WriteThenRead is Conn.WriteThenRead.
func (c *TCPConn) WriteThenRead(first, b []byte) (n int, werr, rerr error) {
	return c.nb.WriteThenRead(first, b)
}
