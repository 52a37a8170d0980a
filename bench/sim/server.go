package sim

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// errClosed is returned when a server of a closed Cluster is asked to listen.
var errClosed = errors.New("sim: cluster is closed")

const (
	// bindAttempts and bindRetryDelay bound how long a restart waits for the
	// old address to become bindable again.
	bindAttempts   = 50
	bindRetryDelay = 20 * time.Millisecond
)

// netServer is a fasthttp server that can be stopped and started again on the
// same address. Stopping it closes the listener and every connection it
// accepted, hijacked ones included, so the peer sees the process "die".
type netServer struct {
	// addr is the address resolved by the first listen; constant afterwards.
	addr string

	newServer func() *fasthttp.Server

	// opMu serializes start, stop and close.
	opMu sync.Mutex

	mu     sync.Mutex
	ln     *trackingListener // nil while stopped
	served chan struct{}     // closed when Serve on ln returns
	conns  map[*trackedConn]struct{}
	closed bool
}

// newNetServer listens on addr ("host:0" picks a free port) and serves
// connections with servers made by newServer, a fresh one per listen.
func newNetServer(addr string, newServer func() *fasthttp.Server) (*netServer, error) {
	s := &netServer{
		newServer: newServer,
		conns:     make(map[*trackedConn]struct{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.listenLocked(addr, 1); err != nil {
		return nil, err
	}
	s.addr = s.ln.Addr().String()
	return s, nil
}

// start listens again on s.addr if the server is stopped; it retries briefly
// while the address is still in use.
func (s *netServer) start() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if s.ln != nil {
		return nil
	}
	return s.listenLocked(s.addr, bindAttempts)
}

func (s *netServer) listenLocked(addr string, attempts int) error {
	var ln net.Listener
	var err error
	for i := range attempts {
		if i > 0 {
			time.Sleep(bindRetryDelay)
		}
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("sim: cannot listen on %s: %w", addr, err)
	}
	tl := &trackingListener{Listener: ln, s: s}
	served := make(chan struct{})
	s.ln = tl
	s.served = served
	srv := s.newServer()
	go func() {
		defer close(served)
		_ = srv.Serve(tl)
	}()
	return nil
}

// stop closes the listener and every open connection and waits until the
// accept loop has returned. It is a no-op on a stopped server.
func (s *netServer) stop() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.stopLocked()
}

func (s *netServer) stopLocked() {
	s.mu.Lock()
	ln, served, conns := s.ln, s.served, s.conns
	s.ln = nil
	s.conns = make(map[*trackedConn]struct{})
	s.mu.Unlock()
	if ln == nil {
		return
	}
	_ = ln.Listener.Close()
	for c := range conns {
		_ = c.Conn.Close()
	}
	<-served
}

// close stops the server for good: start fails afterwards.
func (s *netServer) close() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopLocked()
}

// running reports whether the server is listening.
func (s *netServer) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln != nil
}

// openConns returns the number of currently open accepted connections.
func (s *netServer) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

type trackingListener struct {
	net.Listener
	s *netServer
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: l.s}
	l.s.mu.Lock()
	if l.s.ln != l {
		// Accepted while being stopped.
		l.s.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.s.conns[tc] = struct{}{}
	l.s.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s *netServer
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// fasthttpLogger sends fasthttp's own log lines to Options.Logf.
type fasthttpLogger struct {
	prefix string
	logf   func(format string, args ...any)
}

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.logf(l.prefix+format, args...)
}
