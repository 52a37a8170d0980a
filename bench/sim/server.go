package sim

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// errClosed is returned when a server of a closed Cluster is asked to listen.
var errClosed = errors.New("sim: cluster is closed")

// errStopped is returned when the listener of a stopped (killed, Dead)
// server is asked to pause or resume.
var errStopped = errors.New("sim: server is stopped")

const (
	// bindAttempts and bindRetryDelay bound how long a restart waits for the
	// old address to become bindable again.
	bindAttempts   = 50
	bindRetryDelay = 20 * time.Millisecond
)

// netServer is a fasthttp server that can be stopped and started again on the
// same address. Stopping it closes the listener and every connection it
// accepted, hijacked ones included, so the peer sees the process "die", and
// waits until the handlers of those connections have returned.
type netServer struct {
	// addr is the address resolved by the first listen; constant afterwards.
	addr string

	newServer func() *fasthttp.Server
	tls       *tls.Config // Options.TLS: nil serves plain HTTP
	logf      func(format string, args ...any)

	// opMu serializes start, stop and close.
	opMu sync.Mutex

	mu     sync.Mutex
	gen    *generation // nil while stopped
	closed bool
}

// generation is one listen-to-stop life of a netServer. Within it the
// listener may be paused and resumed (pauseListener): the accepted
// connections belong to the generation, not to one listener.
type generation struct {
	s *netServer
	// ln and served are the current listener and the channel closed when its
	// Serve returns; while paused, the closed ones. Written under opMu and mu.
	ln     net.Listener
	served chan struct{}
	paused bool
	stop   chan struct{} // closed when the generation starts stopping
	conns  map[*trackedConn]struct{}
	wg     sync.WaitGroup // one per accepted connection, until it is closed
}

// stopWait bounds how long stop waits for handlers of closed connections.
const stopWait = 5 * time.Second

// newNetServer listens on addr ("host:0" picks a free port) and serves
// connections with servers made by newServer, a fresh one per listen, over
// TLS with tlsConfig if it is not nil.
func newNetServer(addr string, tlsConfig *tls.Config, newServer func() *fasthttp.Server, logf func(string, ...any)) (*netServer, error) {
	s := &netServer{newServer: newServer, tls: tlsConfig, logf: logf}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.listenLocked(addr, 1); err != nil {
		return nil, err
	}
	s.addr = s.gen.ln.Addr().String()
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
	if s.gen != nil {
		return nil
	}
	return s.listenLocked(s.addr, bindAttempts)
}

func (s *netServer) listenLocked(addr string, attempts int) error {
	ln, err := listen(addr, attempts)
	if err != nil {
		return err
	}
	g := &generation{
		s:     s,
		stop:  make(chan struct{}),
		conns: make(map[*trackedConn]struct{}),
	}
	s.gen = g
	s.serveLocked(g, ln)
	return nil
}

// listen listens on addr, retrying up to attempts times while the address
// is still in use.
func listen(addr string, attempts int) (net.Listener, error) {
	var ln net.Listener
	var err error
	for i := range attempts {
		if i > 0 {
			time.Sleep(bindRetryDelay)
		}
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
	}
	return nil, fmt.Errorf("sim: cannot listen on %s: %w", addr, err)
}

// serveLocked makes ln the listener of g and serves it with a fresh server
// from newServer.
func (s *netServer) serveLocked(g *generation, ln net.Listener) {
	served := make(chan struct{})
	g.ln, g.served, g.paused = ln, served, false
	srv := s.newServer()
	var tl net.Listener = &trackingListener{Listener: ln, g: g}
	if s.tls != nil {
		// Under TLS: stop closes the tracked sockets, and the handshake runs in the connection's own
		// goroutine (at its first read), not in the accept loop.
		tl = tls.NewListener(tl, s.tls)
	}
	go func() {
		defer close(served)
		_ = srv.Serve(tl)
	}()
}

// pauseListener closes the listener of a running server and waits until
// its accept loop has returned, but keeps every connection it accepted open
// and served: new dials are refused while keep-alive connections and
// hijacked ones (WebSocket tunnels) go on. Pausing a paused server is a
// no-op; a stopped server gives errStopped (errClosed once closed).
func (s *netServer) pauseListener() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	g := s.gen
	switch {
	case s.closed:
		s.mu.Unlock()
		return errClosed
	case g == nil:
		s.mu.Unlock()
		return errStopped
	case g.paused:
		s.mu.Unlock()
		return nil
	}
	g.paused = true
	ln, served := g.ln, g.served
	s.mu.Unlock()
	_ = ln.Close()
	<-served
	return nil
}

// resumeListener listens again on s.addr after pauseListener, retrying
// briefly while the address is still in use; the connections accepted
// before the pause are kept. Resuming a server that is not paused is a
// no-op; a stopped server gives errStopped (errClosed once closed).
func (s *netServer) resumeListener() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gen
	switch {
	case s.closed:
		return errClosed
	case g == nil:
		return errStopped
	case !g.paused:
		return nil
	}
	ln, err := listen(s.addr, bindAttempts)
	if err != nil {
		return err
	}
	s.serveLocked(g, ln)
	return nil
}

// listening reports whether the server is running with its listener open
// (not stopped, not paused).
func (s *netServer) listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen != nil && !s.gen.paused
}

// stop closes the listener and every open connection and waits until the
// accept loop and the connections' handlers have returned. It is a no-op on
// a stopped server.
func (s *netServer) stop() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.stopLocked()
}

func (s *netServer) stopLocked() {
	s.mu.Lock()
	g := s.gen
	s.gen = nil
	var conns []*trackedConn
	var ln net.Listener
	var served chan struct{}
	if g != nil {
		close(g.stop)
		for c := range g.conns {
			conns = append(conns, c)
		}
		ln, served = g.ln, g.served
	}
	s.mu.Unlock()
	if g == nil {
		return
	}
	_ = ln.Close() // already closed if paused
	for _, c := range conns {
		_ = c.Conn.Close()
	}
	<-served
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopWait):
		s.logf("%s: handlers still running %s after stop", s.addr, stopWait)
	}
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
	return s.gen != nil
}

// stopping returns a channel that is closed when the current listen
// generation stops; it is already closed while the server is stopped.
// Handlers that wait use it so that stop does not wait for them.
func (s *netServer) stopping() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return s.gen.stop
}

// openConns returns the number of currently open accepted connections.
func (s *netServer) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == nil {
		return 0
	}
	return len(s.gen.conns)
}

type trackingListener struct {
	net.Listener
	g *generation
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := l.g
	tc := &trackedConn{Conn: c, g: g}
	g.s.mu.Lock()
	if g.s.gen != g {
		// Accepted while being stopped.
		g.s.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	g.conns[tc] = struct{}{}
	g.wg.Add(1)
	g.s.mu.Unlock()
	return tc, nil
}

// trackedConn is an accepted connection; fasthttp closes it once its
// handlers (hijack handlers included) are done.
type trackedConn struct {
	net.Conn
	g    *generation
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.g.s.mu.Lock()
		delete(c.g.conns, c)
		c.g.s.mu.Unlock()
		c.g.wg.Done()
	})
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
