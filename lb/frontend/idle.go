package frontend

// Idle keep-alive connections at a binary upgrade. fasthttp has no word for a connection that waits
// for its next request, but the front end sees it: a connection whose framer is between two messages
// (the last request read whole, no byte of a next one) and that fasthttp reads again has written its
// answer (the server flushes it before it waits for the next request) and is idle. The old process
// takes those (HandOverIdle): it wakes each one's Read with a past read deadline, Read returns no
// bytes, fasthttp closes the connection as it closes a keep-alive connection that timed out (no answer
// written), and Close keeps a descriptor of the socket for the new process instead of closing it. A
// connection that got a byte of a request before the wake is served here, and its answer closes it
// (Connection: close, Handler). The new process puts each socket it is given in the listener it was
// accepted on (Inject): fasthttp serves the connection's next request as that of a new one.
//
// An HTTPS connection (tls_listen) goes with its TLS session: once woken (crypto/tls's Read returns the
// deadline's timeout, a temporary error that does not fail the connection), its Read takes the session
// over from crypto/tls (tlsrecord.TakeOver, from what its socket captured of the handshake), and the
// session's state goes with the socket; the new process resumes it with fairlead's record layer
// (tlsrecord.Resume) and serves the connection from its TLS listener with no handshake, as HTTPS. A
// session crypto/tls keeps (not captured, a suite the record layer has not, or part of a record held:
// the client is sending its next request) stays: the connection reads on and is served here, and its
// answer closes it. crypto/tls never writes on a socket given (no close_notify: its Close never runs).
// A connection the new process took so moves on at the next upgrade with its record layer's state.
// HTTP/2 connections and those a tunnel or a relay stream took are never idle here: HTTP/2 ones stay
// with the old process's drain (GOAWAY), the others move as theirs.

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// A connection's part in a hand-over of idle connections (frontConn.hand).
const (
	handBusy  int32 = iota // reading or answering a request (or not read yet)
	handIdle               // in Read, waiting for the first byte of its next request
	handTaken              // taken while idle (HandOverIdle): its Read is woken
	handGiven              // its Read ended by the wake: its Close gives the socket over
	handNever              // a tunnel's, a relay stream's or HTTP/2's (handOver), or a TLS session that cannot move: never idle
)

// IdleConn is an idle keep-alive connection given over (HandOverIdle): a descriptor of its socket,
// its client's address (a PROXY header's, for a connection that came through a proxy_protocol
// sender), and for an HTTPS connection its TLS session (it holds keys: never log it). Local is set
// for a sender's own connection (a LOCAL header), which max_conns_per_source does not count.
type IdleConn struct {
	File   *os.File
	Client net.Addr
	TLS    *tlsrecord.State
	Local  bool
}

// idleConns lists the front end's connections that may be idle at a hand-over: the plain ones, and
// the HTTPS ones whose TLS session can be taken over.
type idleConns struct {
	mu   sync.Mutex
	head *frontConn
}

// list adds c (at accept).
func (l *idleConns) list(c *frontConn) {
	l.mu.Lock()
	c.listed, c.next = true, l.head
	if l.head != nil {
		l.head.prev = c
	}
	l.head = c
	l.mu.Unlock()
}

// unlist removes c, if listed (at close, or when a tunnel or a relay stream takes it).
func (l *idleConns) unlist(c *frontConn) {
	l.mu.Lock()
	if c.listed {
		if c.prev != nil {
			c.prev.next = c.next
		} else {
			l.head = c.next
		}
		if c.next != nil {
			c.next.prev = c.prev
		}
		c.listed, c.prev, c.next = false, nil, nil
	}
	l.mu.Unlock()
}

// handing is one hand-over's collection: the sockets of the connections it took, as their Close
// gives them, until each taken one said what became of it.
type handing struct {
	mu    sync.Mutex
	left  int // taken connections that did not say yet
	given []IdleConn
	kept  int           // taken, but a request began (served here) or the client closed
	done  chan struct{} // closed when left is 0
	over  bool          // the collection ended: a late socket is closed
}

// report says what became of a taken connection: its socket (f) and its TLS session (st, nil for a
// plain one), or f nil when it stays here or closed.
func (h *handing) report(f *os.File, client net.Addr, st *tlsrecord.State, local bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case f == nil:
		h.kept++
	case h.over:
		f.Close() //nolint:errcheck // too late: the new process was told it had everything
		h.kept++
	default:
		h.given = append(h.given, IdleConn{File: f, Client: client, TLS: st, Local: local})
	}
	if h.left--; h.left == 0 {
		close(h.done)
	}
}

// join takes c late, as it goes idle (handIdle): its answer went out keep-alive as the hand-over
// began, and it now waits for its next request. joined: c is counted and handTaken; taken: c went idle
// as the hand-over began and takeIdle took it (counted already, woken by it); neither: the collection
// is over (or its last connection reported, the collection about to end), and c is busy again. Under
// the lock takeIdle holds while it takes connections: c is counted once.
func (h *handing) join(c *frontConn) (joined, taken bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case c.hand.Load() == handTaken:
		return false, true
	case h.over || h.left == 0:
		c.hand.Store(handBusy)
		return false, false
	}
	h.left++
	c.hand.Store(handTaken)
	return true, false
}

// HandOverIdle gives the front end's idle HTTP/1.1 keep-alive connections away, for a new process of a
// binary upgrade: it takes every one idle now, wakes it and returns its socket (the caller closes the
// files once given) with its TLS session if it is an HTTPS one; kept counts those taken that began a
// request meanwhile, or whose TLS session crypto/tls keeps (they are answered here, and closed: from
// now on every HTTP/1.1 answer of the front end closes its connection, Handler), or whose client
// closed. It waits at most wait for the connections taken to say which. Call it once the
// listeners are closed.
func (f *Front) HandOverIdle(wait time.Duration) (given []IdleConn, kept int) {
	h, taken := f.takeIdle()
	for _, c := range taken {
		c.wake()
	}
	return h.collect(wait)
}

// takeIdle takes the connections idle now for a hand-over, h; from now on the front end's answers
// close their connections.
func (f *Front) takeIdle() (h *handing, taken []*frontConn) {
	h = &handing{done: make(chan struct{})}
	h.mu.Lock()        // a connection taken reports only once all are: left is counted first
	f.handing.Store(h) // read by a connection only once it finds itself taken (the CAS below), or leaving
	f.leaving.Store(true)
	f.idle.mu.Lock()
	for c := f.idle.head; c != nil; c = c.next {
		if c.hand.CompareAndSwap(handIdle, handTaken) {
			taken = append(taken, c)
		}
	}
	f.idle.mu.Unlock()
	h.left = len(taken)
	if h.left == 0 {
		close(h.done)
	}
	h.mu.Unlock()
	return h, taken
}

// wake wakes the Read of a connection taken (it returns no bytes and fasthttp closes it), or makes its
// next read time out at once if it is about to block. Read answers a timeout before the deadline in
// force by setting that one again and reading on, unless the connection was taken: a connection that
// read a byte of a request before the wake goes on as if nothing happened.
func (c *frontConn) wake() {
	c.Conn.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // closed already: it reports anyway
}

// collect waits at most wait for the connections taken to say what became of them, and returns the
// sockets given; kept counts the others (a late one's socket is closed).
func (h *handing) collect(wait time.Duration) (given []IdleConn, kept int) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-h.done:
	case <-timer.C:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.over = true
	return h.given, h.kept + h.left
}

// Handler wraps h, the front end's HTTP/1.1 handler: once HandOverIdle ran, each answer closes its
// connection (Connection: close), as the drain's answers do, so that no keep-alive connection waits
// here for a request the process will not serve. A connection taken by a tunnel or a relay stream is
// left as it is. It costs an atomic load per request.
func (f *Front) Handler(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		if f.leaving.Load() && !ctx.Hijacked() {
			ctx.SetConnectionClose()
		}
	}
}

// idleRead says, at the start of a Read, whether c waits for its next request (handIdle from now
// until woken): a connection between two messages, with nothing to answer first. late is true when it
// goes idle once a hand-over began (its answer went out keep-alive just before, or it had not been
// read yet) and the hand-over still collects: it joins it without reading (its Read returns io.EOF and
// its Close gives the socket over; bytes the client sent meanwhile wait in the socket for the new
// process, or in the record layer's state). A connection whose session crypto/tls carries joins it
// taken, and awake: crypto/tls may hold the client's next request already, and a read that cannot wait
// tells (woken). Once the collection is over it reads on, and its answer closes it.
func (c *frontConn) idleRead() (idle, late bool) {
	if c.pending != nil || c.f.state != stStart || !c.hand.CompareAndSwap(handBusy, handIdle) {
		return false, false
	}
	if !c.front.leaving.Load() {
		return true, false
	}
	switch joined, taken := c.front.handing.Load().join(c); {
	case taken:
		return true, false // its wake comes
	case !joined:
		return false, false
	case c.tc != nil:
		c.wake()
		return true, false
	}
	c.takeSession()
	c.hand.Store(handGiven)
	return false, true
}

// taken reports whether an idle Read's connection was taken for a hand-over.
func (c *frontConn) taken() bool { return c.hand.Load() == handTaken }

// woken ends an idle Read that read n bytes and err, and reports whether a hand-over took the
// connection meanwhile and woke it with nothing read, and it could take its TLS session (takeSession):
// Read then returns io.EOF (fasthttp closes a keep-alive connection that read nothing, without an
// answer) and Close gives its socket over. A connection taken that read a byte of a request meanwhile,
// or whose session crypto/tls keeps, is served here; one whose client closed closes.
func (c *frontConn) woken(n int, err error) bool {
	if c.hand.CompareAndSwap(handIdle, handBusy) {
		return false
	}
	if n == 0 && err != nil && isTimeout(err) && c.takeSession() {
		c.hand.Store(handGiven)
		return true
	}
	c.hand.Store(handBusy)
	c.front.handing.Load().report(nil, nil, nil, false)
	return false
}

// takeSession readies a connection to be given, in its Read: nothing to do for a plain one; the state
// of the session of one whose record layer carries it (rec); and for one whose session crypto/tls
// carries, the session taken over from crypto/tls (own) and its state. false when crypto/tls keeps it
// (not captured, a suite the record layer has not, part of a record held, or the client's
// close_notify): the connection reads on with crypto/tls, what it gave back first (carry).
func (c *frontConn) takeSession() bool {
	switch {
	case c.rec != nil:
		st := c.rec.State()
		c.st = &st
		return true
	case c.tc == nil:
		return true
	}
	nb, ok := c.tc.NetConn().(*nbio.TCPConn)
	if !ok {
		return false
	}
	own, left := tlsrecord.TakeOver(c.tc, nb, make([]byte, 4096))
	if own == nil {
		c.carry = left
		return false
	}
	c.own = own // the session is own's: crypto/tls must not write on the socket again
	st := own.State()
	if len(left) > 0 {
		// Plaintext crypto/tls held (none after a read that found nothing: it opens every whole
		// record it has first): the client's, read first in the new process.
		if len(left)+len(st.Plain)+len(st.Pending) > tlsrecord.MaxRecord {
			return true // more than a Resume takes: no session goes, and its socket closes here (kept)
		}
		st.Plain = append(left, st.Plain...)
	}
	c.st = &st
	return true
}

// giveSocket is Close for a connection whose Read a hand-over woke: it gives a descriptor of the socket
// to the hand-over, with the TLS session, and closes its own, without a byte or a FIN to the client
// (the socket's: a session taken over from crypto/tls never sees crypto/tls's Close and its
// close_notify).
func (c *frontConn) giveSocket() error {
	conn, st := c.Conn, c.st
	if c.tc != nil {
		conn = c.own
	}
	f, ferr := socketFile(conn)
	client := conn.RemoteAddr() // a PROXY header's client, if it named one (nbio's SetRemoteAddr)
	err := conn.Close()
	if ferr != nil || c.tc != nil && st == nil {
		if f != nil {
			f.Close() //nolint:errcheck
		}
		f = nil
	}
	c.front.handing.Load().report(f, client, st, c.px != nil && c.px.local)
	return err
}

// fileConn is a connection whose socket's descriptor can be had (a *net.TCPConn).
type fileConn interface{ File() (*os.File, error) }

// hasSocket reports whether c's socket can be given to another process (socketFile).
func hasSocket(c net.Conn) bool {
	_, ok := nbio.Unwrap(c).(fileConn)
	return ok
}

// socketFile returns a new descriptor of c's socket (a *net.TCPConn's, under nbio's wrapper).
func socketFile(c net.Conn) (*os.File, error) {
	if s, ok := nbio.Unwrap(c).(fileConn); ok {
		return s.File()
	}
	return nil, errors.New("frontend: no socket to give")
}

// injected are the connections put in a listener's Accept (Inject), not accepted yet.
type injected struct {
	n      atomic.Int32 // how many: Accept takes the lock only when there are some
	mu     sync.Mutex
	q      []injectedConn
	armed  bool // the listener's deadline is set to wake its Accept
	closed bool
}

// deadliner is a listener whose Accept a deadline wakes (a *net.TCPListener).
type deadliner interface{ SetDeadline(time.Time) error }

// injectedConn is a connection injected, with the client and the LOCAL mark it was handed over with
// (InjectAs).
type injectedConn struct {
	c      net.Conn
	client *net.TCPAddr // nil: its peer
	local  bool
}

// Inject makes c, a client connection the old process of a binary upgrade accepted and handed over
// (HandOverIdle), the next connection ln accepts: fasthttp serves it from its next request on, as a
// connection accepted here, and max_conns_per_source counts it whatever the count. ln is the front
// end's plain listener (Listener) for a plain connection, its TLS listener (TLSListener) for one whose
// TLS session fairlead's record layer resumed (a *tlsrecord.NetConn: no handshake, RequestCtx.IsTLS).
// A listener's Accept that waits is woken by a past deadline, which Accept takes back before it accepts
// again. On an error c is not taken (the caller closes it).
func Inject(ln net.Listener, c net.Conn) error { return InjectAs(ln, c, nil, false) }

// InjectAs is Inject of a connection whose client is not its peer: one that came through a
// proxy_protocol sender, client the client its PROXY header named (nil: its peer), or local for the
// sender's own (a LOCAL header: not counted per source). Its RemoteAddr is client from then on (X-Forwarded-For,
// the sticky source key, the limits per source, the access log), and it moves on with it at the next
// upgrade.
func InjectAs(ln net.Listener, c net.Conn, client *net.TCPAddr, local bool) error {
	l, ok := ln.(*listener)
	if !ok {
		return errors.New("frontend: connections are injected in the front end's listeners only")
	}
	if _, resumed := c.(*tlsrecord.NetConn); resumed != (l.tls != nil) {
		return errors.New("frontend: a TLS connection is injected in the TLS listener, a plain one in the plain listener")
	}
	d, ok := l.Listener.(deadliner)
	if !ok {
		return errors.New("frontend: the listener's Accept cannot be woken")
	}
	in := &l.inj
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return net.ErrClosed
	}
	if !in.armed {
		if err := d.SetDeadline(time.Unix(1, 0)); err != nil {
			return err
		}
		in.armed = true
	}
	in.q = append(in.q, injectedConn{c: c, client: client, local: local})
	in.n.Add(1)
	return nil
}

// pop returns the first connection injected, or none (its c nil).
func (in *injected) pop() injectedConn {
	if in.n.Load() == 0 {
		return injectedConn{}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.q) == 0 {
		return injectedConn{}
	}
	c := in.q[0]
	in.q[0] = injectedConn{}
	in.q = in.q[1:]
	in.n.Add(-1)
	return c
}

// woke reports whether err, an Accept's error, is the wake of an injection: the listener's deadline is
// taken back, and Accept looks for the connections injected.
func (in *injected) woke(ln net.Listener, err error) bool {
	if !isTimeout(err) {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.armed {
		return false
	}
	in.armed = false
	return ln.(deadliner).SetDeadline(time.Time{}) == nil
}

// close closes the connections injected that were not accepted (the listener closes).
func (in *injected) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closed = true
	for _, c := range in.q {
		c.c.Close() //nolint:errcheck
	}
	in.q = nil
	in.n.Store(0)
}
