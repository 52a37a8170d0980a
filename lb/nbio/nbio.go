// Package nbio reads and writes non-blocking sockets without telling Go's scheduler about each
// system call.
//
// Go makes every read(2) and write(2) of a net.Conn through syscall.Syscall, which calls
// entersyscall before and exitsyscall after, so that a thread blocked in the kernel gives its P
// (the right to run Go code) to another thread. A socket that Go has made non-blocking never
// blocks, but a loopback write still runs for several microseconds (it runs the receiver's TCP
// input too), long enough for sysmon, polling every 20 µs under load, to find the P "in a system
// call" and retake it, waking another thread to run it, only for the writer to find its P gone
// on return and park. Measured on this project's proxy at GOMAXPROCS=2 (ws-echo, http-small):
// entersyscall/exitsyscall, sysmon's retakes and the futex wake-ups they start were 8–10% of the
// proxy's CPU. Read, Write, Recv and Send here are RawSyscall: the thread keeps its P through
// the call. Recv and Send (recvfrom and sendto with no address) are for sockets: they skip the
// file layer that read and write go through, as nginx and HAProxy do.
//
// They are only for file descriptors in non-blocking mode (every fd of a net.Conn, os.File
// pipes, eventfds and epoll fds that Go polls). Conn wraps a *net.TCPConn with Recv and Send,
// parking in Go's netpoller (and so honouring deadlines) only when the socket would block; TCPConn
// adds the evented mode of an event loop that must never park.
//
// All of that is Linux's (nbio_linux.go: linux on every architecture, arm64 included). Elsewhere
// (Windows, macOS, the BSDs), and on Linux built with -tags nbio_portable, the package is portable
// (nbio_portable.go): Conn and TCPConn read and write through the *net.TCPConn as any Go program does,
// with what the rest of fairlead uses of them (NewTCPConn, CountTLSRecords, WriteThenRead, Unwrap) and
// Conn's semantics, but no evented mode and no free system calls: their only user, the epoll tunnel
// engine, is Linux's, and lb/tunnel runs its portable engine wherever nbio is portable.
package nbio

import (
	"net"
	"sync/atomic"
	"syscall"
)

// clientAddr is the client a TCPConn carries when it is not its peer (SetRemoteAddr).
type clientAddr struct{ a atomic.Pointer[net.TCPAddr] }

// SetRemoteAddr makes a the address RemoteAddr returns from now on: the client a PROXY header names,
// whose bytes the peer (an L4 load balancer) carries, or that a binary upgrade's old process handed
// over with the socket. A TLS connection over c, or fairlead's record layer over it, then names it too.
func (c *TCPConn) SetRemoteAddr(a *net.TCPAddr) { c.client.a.Store(a) }

// RemoteAddr is the client's address SetRemoteAddr set, else the peer's.
func (c *TCPConn) RemoteAddr() net.Addr {
	if a := c.client.a.Load(); a != nil {
		return a
	}
	return c.TCPConn.RemoteAddr()
}

// recordCount is a TCPConn's count of the TLS records it read, and what it learns of the TLS session
// over it when asked (CaptureTLS) (both builds).
type recordCount struct {
	rec   *records
	sess  *TLSSession
	exact bool // reads stop at the end of the record under way (CaptureTLS, until HandshakeDone)
	hold  bool // reads answer ErrWouldBlock without reading the socket (Hold)
}

// CaptureTLS makes c count the TLS records it reads (CountTLSRecords) and learn what it takes to take
// the TLS session over it from crypto/tls once its handshake is done (TLSSession); server tells which
// end of the session c is. Call it before c's first read of the session (before its first read, or
// after a preamble that is not TLS and was read to its last byte and no further: a PROXY header), and
// Config the handshake's configuration.
func (c *recordCount) CaptureTLS(server bool) {
	c.rec = new(records)
	c.sess = &TLSSession{server: server}
	c.exact = true
}

// TLSSession returns what c learns of its TLS session (CaptureTLS), or nil.
func (c *recordCount) TLSSession() *TLSSession { return c.sess }

// HandshakeDone tells c that the handshake of the TLS session over it ended (Handshake returned nil):
// the records it read and wrote so far were the handshake's, and its reads need not stop at records'
// ends any more. For the reading goroutine, once.
func (c *recordCount) HandshakeDone() {
	c.exact = false
	if s := c.sess; s != nil {
		s.mu.Lock()
		s.hsRead, s.hsWritten, s.done = c.rec.complete, s.written.complete, true
		s.hsUpdates = c.rec.updates
		s.mu.Unlock()
	}
}

// TLSCaptured returns what c learned of its TLS session, once its handshake is done (false before,
// or without CaptureTLS). For the reading goroutine, with no write under way.
func (c *recordCount) TLSCaptured() (TLSCaptured, bool) {
	s := c.sess
	if s == nil {
		return TLSCaptured{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		return TLSCaptured{}, false
	}
	g := TLSCaptured{ClientRandom: s.clientRandom, ClientSecret: s.clientSecret, ServerSecret: s.serverSecret,
		Master: s.master, Tickets: s.tickets, Read: c.rec.complete - s.hsRead, Written: s.written.complete - s.hsWritten,
		Whole: c.rec.whole(), MaybeUpdated: c.rec.updates != s.hsUpdates}
	if s.randomSeen == len(s.serverRandom) {
		g.ServerRandom = s.serverRandom[:]
	}
	return g, true
}

// Hold makes c's reads answer ErrWouldBlock without reading the socket (on), or read it again (off):
// the layer above can then take out what it holds already, and nothing more. For the reading goroutine.
func (c *recordCount) Hold(on bool) { c.hold = on }

// clip is the part of b a read may fill: to the end of the record under way during a captured
// session's handshake, all of it otherwise.
func (c *recordCount) clip(b []byte) []byte {
	if c.exact {
		return b[:c.rec.boundary(len(b))]
	}
	return b
}

// sawRead and sawWrite follow what was read and written.
func (c *recordCount) sawRead(b []byte) {
	if c.rec != nil {
		c.rec.observe(b)
		if c.sess != nil {
			c.sess.sawRead(b)
		}
	}
}

func (c *recordCount) sawWrite(b []byte) {
	if c.sess != nil {
		c.sess.sawWrite(b)
	}
}

// CountTLSRecords makes c count the TLS records whose last byte it has read (TLSRecords): an event
// loop reading a TLS connection over c can then tell, without reading the socket again, whether the
// connection holds whole records it has not decrypted yet. Call it before c's first read: the count
// follows the record framing from the connection's first byte.
func (c *recordCount) CountTLSRecords() { c.rec = new(records) }

// TLSRecords is the number of whole TLS records read so far (CountTLSRecords), 0 if not counted.
func (c *recordCount) TLSRecords() uint64 {
	if c.rec == nil {
		return 0
	}
	return c.rec.complete
}

// records follows the TLS record framing (RFC 8446 5.1: a 5-byte header whose last two bytes are the
// length of the fragment that follows; the same from SSL 3.0 to TLS 1.3) of a byte stream read from
// its first byte, and counts the records whose last byte went by.
type records struct {
	complete uint64
	hdr      [5]byte
	hn       int // header bytes seen of the record under way
	body     int // fragment bytes still to come
	// The whole records whose fragment is 22 bytes, the size of a TLS 1.3 KeyUpdate (its 5 bytes, the
	// inner content type and a 16-byte tag) — and of 5 bytes of data, which a client of fairlead hardly
	// sends alone (a WebSocket client's smallest frame is 6, a request longer).
	updates uint64
}

// keyUpdateLen is the length of a TLS 1.3 record that holds a KeyUpdate alone.
const keyUpdateLen = 22

func (r *records) observe(b []byte) {
	for len(b) > 0 {
		if r.body > 0 {
			k := min(r.body, len(b))
			r.body -= k
			b = b[k:]
			if r.body == 0 {
				r.complete++
				if r.hdr[3] == 0 && r.hdr[4] == keyUpdateLen {
					r.updates++
				}
			}
			continue
		}
		k := copy(r.hdr[r.hn:], b)
		r.hn += k
		b = b[k:]
		if r.hn == len(r.hdr) {
			r.hn = 0
			if r.body = int(r.hdr[3])<<8 | int(r.hdr[4]); r.body == 0 {
				r.complete++
			}
		}
	}
}

// ErrWouldBlock is what an evented TCPConn's Read answers when the socket holds nothing more to read.
// It is a net.Error whose Temporary is true, so a TLS connection over the TCPConn keeps the part of a
// record it has and reads on at the next call, rather than failing for good.
var ErrWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "nbio: the socket would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }
func (wouldBlock) Unwrap() error   { return syscall.EAGAIN }

// Unwrap returns the *net.TCPConn under a *TCPConn (the socket itself, for epoll), and any other
// connection as it is.
func Unwrap(c net.Conn) net.Conn {
	if nc, ok := c.(*TCPConn); ok {
		return nc.TCPConn
	}
	return c
}
