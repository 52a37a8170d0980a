//go:build linux && !nbio_portable

package nbio

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read is read(2) on the non-blocking fd, made with RawSyscall; EINTR is retried, EAGAIN returned.
func Read(fd uintptr, b []byte) (int, error) { return call(unix.SYS_READ, fd, b) }

// Write is write(2) on the non-blocking fd, made with RawSyscall; EINTR is retried, EAGAIN returned.
func Write(fd uintptr, b []byte) (int, error) { return call(unix.SYS_WRITE, fd, b) }

// Recv is recv(2) (recvfrom with no address) on the non-blocking socket fd, made with RawSyscall;
// EINTR is retried, EAGAIN returned. For a socket it is read(2) without the file layer's part (no
// file position to take: fdget_pos, vfs_read), as nginx and HAProxy read theirs.
func Recv(fd uintptr, b []byte) (int, error) { return call(unix.SYS_RECVFROM, fd, b) }

// Send is send(2) (sendto with no address) on the non-blocking socket fd, made with RawSyscall; EINTR
// is retried, EAGAIN returned. For a socket it is write(2) without the file layer's part.
func Send(fd uintptr, b []byte) (int, error) { return call(unix.SYS_SENDTO, fd, b) }

func call(trap, fd uintptr, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(unsafe.SliceData(b))
	}
	for {
		// recvfrom and sendto take three more arguments: flags 0 and no address (0, 0); read and
		// write ignore them.
		n, _, e := unix.RawSyscall6(trap, fd, uintptr(p), uintptr(len(b)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// EpollWait is epoll_wait(2) with a zero timeout (it never blocks), made with RawSyscall. It is made as
// epoll_pwait(2) with no signal mask (arguments timeout 0, sigmask NULL, sigsetsize 0), which the kernel
// runs as epoll_wait: arm64, riscv64 and loong64 have no epoll_wait system call, only epoll_pwait, and
// Go's own netpoller makes the same call on every architecture. (Measured on amd64, 64 events asked of
// an epoll instance with 0 and 8 ready: the two calls cost the same, within the noise of 1-2 µs each.)
func EpollWait(epfd uintptr, events []unix.EpollEvent) (int, error) {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// Conn is a *net.TCPConn read and written with Read and Write. Its zero value is unusable: Init it.
// Like a net.Conn it may be read by one goroutine while another writes, but not read (or written)
// by two at once. Reads and writes allocate nothing but their errors.
type Conn struct {
	tc  *net.TCPConn
	raw syscall.RawConn

	// The reading goroutine's: the buffer, the results, and bytes to write first (WriteThenRead).
	rb        []byte
	rn        int
	rerr      error
	first     []byte
	ferr      error
	readFn    func(fd uintptr) bool
	readNowFn func(fd uintptr) bool

	// The writing goroutine's.
	wb      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// Init makes c read and write tc.
func (c *Conn) Init(tc *net.TCPConn) error {
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	c.tc, c.raw = tc, raw
	c.readFn, c.writeFn = c.doRead, c.doWrite
	c.readNowFn = c.doReadNow
	return nil
}

// TCP is the connection c reads and writes.
func (c *Conn) TCP() *net.TCPConn { return c.tc }

func (c *Conn) doRead(fd uintptr) bool {
	if c.first != nil {
		// Written in the callback, after Go reset the socket's readiness for this read and
		// before it waits: the answer to these bytes cannot come before the reset and be missed.
		for len(c.first) > 0 {
			n, err := Send(fd, c.first)
			if err != nil { // EAGAIN (the socket is full: the rest goes the ordinary way) or a failure
				c.ferr = err
				return true
			}
			c.first = c.first[n:]
		}
		c.first = nil
		return false // wait for the answer
	}
	c.rn, c.rerr = Recv(fd, c.rb)
	return c.rerr != unix.EAGAIN
}

func (c *Conn) doWrite(fd uintptr) bool {
	for len(c.wb) > 0 {
		n, err := Send(fd, c.wb)
		if err == unix.EAGAIN {
			return false // Go waits until the socket is writable, then calls again
		}
		if err != nil {
			c.werr = err
			return true
		}
		c.wn += n
		c.wb = c.wb[n:]
	}
	return true
}

// readNow reads once without parking: ErrWouldBlock when the socket holds nothing.
func (c *Conn) readNow(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rb, c.rn, c.rerr = b, 0, nil
	err := c.raw.Read(c.readNowFn)
	c.rb = nil
	switch {
	case err != nil:
		return 0, err
	case c.rerr == unix.EAGAIN:
		return 0, ErrWouldBlock
	case c.rerr != nil:
		return 0, c.opError("read", c.rerr)
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

func (c *Conn) doReadNow(fd uintptr) bool {
	c.rn, c.rerr = Recv(fd, c.rb)
	return true
}

// Read reads as net.Conn.Read does.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rb, c.rn, c.rerr = b, 0, nil
	err := c.raw.Read(c.readFn)
	c.rb = nil
	if err != nil { // closed, or the deadline passed, as net.Conn reports it
		return 0, err
	}
	if c.rerr != nil {
		return 0, c.opError("read", c.rerr)
	}
	if c.rn == 0 {
		return 0, io.EOF
	}
	return c.rn, nil
}

// WriteThenRead writes first, then reads into b, without the read that usually follows a write in
// a request-response exchange and finds nothing yet (EAGAIN) before it waits: the write is made
// inside the read's callback, after Go has reset the socket's readiness and before it waits for
// it. werr is the write's error (nothing is read then), rerr the read's; a deadline that has passed
// before the call is rerr, with nothing written.
//
// The caller must know that nothing is waiting unread in the socket when it calls (a request on a
// connection whose previous answer was read whole): bytes that arrived before the call and whose
// readiness Go had already consumed are not looked for, and the read waits for more (or for its
// deadline; a peer that closes or resets wakes it).
func (c *Conn) WriteThenRead(first, b []byte) (n int, werr, rerr error) {
	if len(first) == 0 {
		n, rerr = c.Read(b)
		return n, nil, rerr
	}
	if len(b) == 0 {
		_, werr = c.Write(first)
		return 0, werr, nil
	}
	c.first, c.ferr = first, nil
	c.rb, c.rn, c.rerr = b, 0, nil
	err := c.raw.Read(c.readFn)
	rest, ferr := c.first, c.ferr
	c.first, c.ferr, c.rb = nil, nil, nil
	switch {
	case err != nil && ferr == nil && rest != nil:
		// The deadline had passed (or c was closed) before anything was written: a read error, as
		// the caller was waiting for an answer.
		return 0, nil, err
	case ferr == unix.EAGAIN: // the socket took part of it: the rest the ordinary way, then read
		if _, werr = c.Write(rest); werr != nil {
			return 0, werr, nil
		}
		n, rerr = c.Read(b)
		return n, nil, rerr
	case ferr != nil:
		return 0, c.opError("write", ferr), nil
	case err != nil:
		return 0, nil, err
	case c.rerr != nil:
		return 0, nil, c.opError("read", c.rerr)
	case c.rn == 0:
		return 0, nil, io.EOF
	}
	return c.rn, nil, nil
}

// Write writes as net.Conn.Write does: all of b, or an error.
func (c *Conn) Write(b []byte) (int, error) { return c.write(c.writeFn, b) }

// write writes b with fn, one of c's write callbacks (made once: passing one allocates nothing).
func (c *Conn) write(fn func(fd uintptr) bool, b []byte) (int, error) {
	c.wb, c.wn, c.werr = b, 0, nil
	err := c.raw.Write(fn)
	n, werr := c.wn, c.werr
	c.wb = nil
	if err != nil {
		return n, err
	}
	if werr != nil {
		return n, c.opError("write", werr)
	}
	return n, nil
}

// opError wraps a system call's error as the net package does.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.tc.LocalAddr(), Addr: c.tc.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// TCPConn is a *net.TCPConn whose Read and Write are a Conn's, for a layer that takes a net.Conn
// and reads and writes it (TLS); everything else (deadlines, addresses, close) is the TCPConn's.
//
// Evented mode (SetEvented) is for an event loop that owns the socket once the layer above has done
// its blocking part (a TLS handshake) and must never park on it: Read then makes one read and answers
// ErrWouldBlock when the socket is drained, and Write never waits: what the socket does not take is
// kept, in order, until Flush (in another goroutine) writes it.
type TCPConn struct {
	*net.TCPConn
	nb          Conn
	ev          evented
	recordCount // the TLS framing of what was read, when counted (CountTLSRecords)
	client      clientAddr
}

// evented is a TCPConn's state in evented mode.
type evented struct {
	on      atomic.Bool
	mu      sync.Mutex // guards the socket's writes in evented mode, and pending
	pending []byte     // written, not yet taken by the socket; nil when nothing is
	blocked atomic.Bool
	drained bool  // the last evented read found the socket empty; the reading goroutine's
	fwerr   error // the failure Flush's callback met; guarded by mu
	flushFn func(fd uintptr) bool

	// The writing goroutine's (writes are not concurrent, as for a net.Conn: a TLS connection over the
	// TCPConn makes them under its own lock).
	wb      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// NewTCPConn wraps tc.
func NewTCPConn(tc *net.TCPConn) (*TCPConn, error) {
	c := &TCPConn{TCPConn: tc}
	if err := c.nb.Init(tc); err != nil {
		return nil, err
	}
	return c, nil
}

// Read reads as net.Conn.Read does; in evented mode it makes one read that never parks, and answers
// ErrWouldBlock when nothing is there.
func (c *TCPConn) Read(b []byte) (n int, err error) {
	if c.hold {
		return 0, ErrWouldBlock
	}
	b = c.clip(b)
	if c.ev.on.Load() {
		n, err = c.nb.readNow(b)
		c.ev.drained = err == ErrWouldBlock || n > 0 && n < len(b)
	} else {
		n, err = c.nb.Read(b)
	}
	if n > 0 {
		c.sawRead(b[:n])
	}
	return n, err
}

// Drained reports whether the last read in evented mode found the socket empty: it answered
// ErrWouldBlock, or fewer bytes than asked (a stream socket's receive queue is then empty: epoll(7),
// Q&A 9). For the reading goroutine.
func (c *TCPConn) Drained() bool { return c.ev.drained }

// Write writes as net.Conn.Write does; in evented mode it never parks: what the socket does not take
// at once is kept for Flush (Blocked reports it), and it answers len(b) unless the socket failed.
func (c *TCPConn) Write(b []byte) (n int, err error) {
	if c.ev.on.Load() {
		n, err = c.writeEvented(b)
	} else {
		n, err = c.nb.Write(b)
	}
	if n > 0 {
		c.sawWrite(b[:n])
	}
	return n, err
}

// SetEvented switches evented mode on or off. The caller makes sure that no Read or Write is under way
// meanwhile. Switching it off with bytes still pending is the caller's mistake: Flush them first.
func (c *TCPConn) SetEvented(on bool) {
	if c.ev.flushFn == nil {
		c.ev.flushFn, c.ev.writeFn = c.flushNow, c.writeNow
	}
	c.ev.drained = false
	c.ev.on.Store(on)
}

// Blocked reports whether evented writes left bytes that the socket has not taken yet.
func (c *TCPConn) Blocked() bool { return c.ev.blocked.Load() }

func (c *TCPConn) writeEvented(b []byte) (int, error) {
	c.ev.wb, c.ev.wn, c.ev.werr = b, 0, nil
	err := c.nb.raw.Write(c.ev.writeFn)
	n, werr := c.ev.wn, c.ev.werr
	c.ev.wb = nil
	if err != nil { // closed, or the write deadline passed: nothing taken
		return 0, err
	}
	if werr != nil {
		return n, c.nb.opError("write", werr)
	}
	return len(b), nil
}

// writeNow is writeEvented's callback: it writes what the socket takes, unless bytes are pending
// already, and keeps the rest. Like Flush's callback it runs under the socket's write lock (taken by
// RawConn.Write) and then takes mu: one lock order, so a Flush and a Write never wait for each other
// in a circle.
func (c *TCPConn) writeNow(fd uintptr) bool {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	b := c.ev.wb
	if c.ev.pending == nil {
		for len(b) > 0 {
			n, err := Send(fd, b)
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				c.ev.werr = err
				return true
			}
			c.ev.wn += n
			b = b[n:]
		}
		if len(b) == 0 {
			return true
		}
	}
	c.ev.pending = append(c.ev.pending, b...)
	c.ev.blocked.Store(true)
	return true
}

// Flush writes what evented writes left pending, parked in Go's netpoller until the socket takes it
// all (honouring the write deadline, and woken by Close). Writes made meanwhile are flushed too.
func (c *TCPConn) Flush() error {
	if !c.ev.blocked.Load() {
		return nil
	}
	err := c.nb.raw.Write(c.ev.flushFn)
	c.ev.mu.Lock()
	werr := c.ev.fwerr
	c.ev.fwerr = nil
	c.ev.mu.Unlock()
	if err != nil {
		return err
	}
	if werr != nil {
		return c.nb.opError("write", werr)
	}
	return nil
}

// flushNow is Flush's callback: false (wait until writable, then call again) while bytes remain.
func (c *TCPConn) flushNow(fd uintptr) bool {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	for len(c.ev.pending) > 0 {
		n, err := Send(fd, c.ev.pending)
		if err == unix.EAGAIN {
			return false
		}
		if err != nil {
			c.ev.fwerr = err
			return true
		}
		c.ev.pending = c.ev.pending[n:]
	}
	c.ev.pending = nil // the buffer was the rare blocked write's: let it go
	c.ev.blocked.Store(false)
	return true
}

// WriteThenRead is Conn.WriteThenRead.
func (c *TCPConn) WriteThenRead(first, b []byte) (n int, werr, rerr error) {
	return c.nb.WriteThenRead(first, b)
}
