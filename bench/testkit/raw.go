package testkit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Raw sockets, for the tests that must send bytes exactly as written and see exactly what came back or
// what reached a server: a client connection (RawConn) and a TCP server that hands each connection to
// the test (RawServer).

// RawConn is a client connection that writes bytes exactly as given. R reads from it; every byte R
// reads is also kept until Take, so that a test can show an answer as it was on the wire.
type RawConn struct {
	net.Conn
	R   *bufio.Reader
	rec rawRecorder
}

// TryDialRaw connects to addr, waiting at most wait; the connection is closed at the end of the test.
// It returns its error rather than failing the test: for a goroutine other than the test's, or a test
// that counts the connections it could not open.
func TryDialRaw(t T, addr string, wait time.Duration) (*RawConn, error) {
	conn, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &RawConn{Conn: conn}
	c.rec.r = conn
	c.R = bufio.NewReader(&c.rec)
	return c, nil
}

// DialRaw is TryDialRaw that fails the test when addr cannot be reached within wait.
func DialRaw(t T, addr string, wait time.Duration) *RawConn {
	t.Helper()
	c, err := TryDialRaw(t, addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Send writes raw in one write, giving up after wait. The error is the caller's to judge: the peer
// may have answered and closed before the whole of raw was written, which its answer shows.
func (c *RawConn) Send(raw string, wait time.Duration) error {
	c.SetWriteDeadline(time.Now().Add(wait)) //nolint:errcheck
	_, err := io.WriteString(c.Conn, raw)
	return err
}

// Take returns the bytes read through R since the last Take, less those R still buffers (they belong
// to what is read next), and forgets them.
func (c *RawConn) Take() []byte {
	all := c.rec.buf.Bytes()
	n := len(all) - c.R.Buffered()
	out := bytes.Clone(all[:n])
	rest := bytes.Clone(all[n:])
	c.rec.buf.Reset()
	c.rec.buf.Write(rest)
	return out
}

// ClosedWithin reports whether the peer closes the connection (a read gives EOF or a reset) within
// wait, with no byte before; otherwise what the read got instead: the bytes, or the timeout.
func (c *RawConn) ClosedWithin(wait time.Duration) (closed bool, instead string) {
	c.SetReadDeadline(time.Now().Add(wait)) //nolint:errcheck
	b, err := c.R.ReadByte()
	if err == nil {
		more, _ := c.R.Peek(c.R.Buffered())
		return false, fmt.Sprintf("more bytes after the answer: %q", append([]byte{b}, more...))
	}
	if ClosedErr(err) {
		return true, ""
	}
	return false, err.Error()
}

// ClosedErr reports whether err says the connection was closed (EOF, a reset, a broken pipe), as
// opposed to a timeout or a malformed message.
func ClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// rawRecorder keeps every byte read through it.
type rawRecorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *rawRecorder) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.buf.Write(b[:n])
	return n, err
}

// ReadHead reads an HTTP message head through its empty line, as it was on the wire; empty lines
// before the start line are skipped. On an error it returns what it read.
func ReadHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\r\n" || line == "\n" {
			if b.Len() == len(line) {
				b.Reset() // an empty line before the start line
				continue
			}
			return b.String(), nil
		}
	}
}

// RawServer is a TCP server on 127.0.0.1 standing in for an upstream server whose every byte a test
// controls: each connection it accepts is handed to serve in a goroutine of its own and closed when
// serve returns. At the end of the test it closes its listener and every open connection, and waits
// for the serve calls to return.
type RawServer struct {
	Addr string

	ln    net.Listener
	serve func(net.Conn)

	mu       sync.Mutex
	open     map[net.Conn]struct{}
	accepted int
	closed   bool
	wg       sync.WaitGroup
}

// StartRawServer starts a RawServer on a port of the kernel's choosing (the listener stays open, so
// no other socket can take the port).
func StartRawServer(t T, serve func(c net.Conn)) *RawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &RawServer{Addr: ln.Addr().String(), ln: ln, serve: serve, open: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Accepted is the number of connections accepted so far.
func (s *RawServer) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

func (s *RawServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.accepted++
		s.open[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				c.Close()
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
			}()
			s.serve(c)
		}()
	}
}

// Close closes the listener and every open connection and waits for the serve calls to return. It is
// called at the end of the test; calling it before is allowed.
func (s *RawServer) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}
