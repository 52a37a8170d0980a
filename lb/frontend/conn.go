package frontend

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Front is what a front end's connections share: the framer's limits, and the counters of the requests
// it refused (by status) and of its connections' errors (by kind). Safe for concurrent use.
type Front struct {
	lim     Limits
	sources *Sources // per client address limits, nil without any
	// proxyFrom are the proxy_protocol senders (proxyproto.go), nil without any.
	proxyFrom atomic.Pointer[[]netip.Prefix]
	refused   [len(RefusedCodes)]atomic.Uint64
	// Errors counts and logs the connection errors of the front end's clients, as "frontend".
	Errors *ConnErrors
	// OnRefused, if set (before the front end serves), is told of every request the front end refuses
	// before a handler reads it, HTTP/1.1 and HTTP/2 (the access log's line of it).
	OnRefused func(*RefusedRequest)
	// A binary upgrade's hand-over of idle connections (idle.go): the plain connections, the hand-over
	// under way, and whether it ran (answers close their connection from then on).
	idle    idleConns
	handing atomic.Pointer[handing]
	leaving atomic.Bool
}

// New returns a front end checking requests against lim; its connection errors are logged to log.
func New(lim Limits, log *slog.Logger) *Front {
	return &Front{lim: lim, Errors: NewConnErrors("frontend", log), sources: NewSources(SourceLimits{})}
}

// Sources returns the front end's limits per client address.
func (f *Front) Sources() *Sources { return f.sources }

// Limits returns the limits the front end's framers enforce.
func (f *Front) Limits() Limits { return f.lim }

// Listener wraps ln, a plain HTTP listener: every connection it accepts is checked by a framer.
func (f *Front) Listener(ln net.Listener) net.Listener {
	return &listener{Listener: ln, front: f}
}

// listener wraps one of the front end's listeners: every connection it accepts is a frontConn.
type listener struct {
	net.Listener
	front *Front
	tls   *tls.Config // the HTTPS listener's (tls.go), nil for the plain one
	inj   injected    // connections a binary upgrade's old process handed over (Inject, idle.go)
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		if in := l.inj.pop(); in.c != nil {
			return l.adopt(in), nil
		}
		c, err := l.Listener.Accept()
		if err != nil {
			if l.inj.woke(l.Listener, err) {
				continue
			}
			return nil, err
		}
		if l.front.proxied(c) { // counted per source once its header names its client
			if fc := l.wrapProxied(c); fc != nil {
				return fc, nil
			}
			c.Close() //nolint:errcheck // no socket to read its header from
			continue
		}
		if l.front.sources == nil {
			return l.wrap(c, nil), nil
		}
		if release, ok := l.front.sources.accept(c); ok {
			return l.wrap(c, release), nil
		}
		c.Close() //nolint:errcheck // over max_conns_per_source: closed at accept
	}
}

// adopt makes a connection a binary upgrade's old process handed over (Inject) the front end's, its
// client the one the old process knew (a PROXY header's), counted by max_conns_per_source whatever the
// count (a sender's own, LOCAL, is not: nor was it there).
func (l *listener) adopt(in injectedConn) net.Conn {
	c := in.c
	if rc, ok := c.(*tlsrecord.NetConn); ok && in.client != nil {
		rc.TCPConn.SetRemoteAddr(in.client)
	}
	var release func()
	if l.front.sources != nil && !in.local {
		if in.client != nil {
			release = l.front.sources.AdoptAddr(in.client.AddrPort().Addr())
		} else {
			release = l.front.sources.Adopt(c) // admitted by the old process: counted whatever the count
		}
	}
	fc := l.wrapConn(c, release, nil, in.client)
	if in.local {
		frontOf(fc).px = &proxyRead{done: true, local: true}
	}
	return fc
}

// Close closes the listener, and the connections injected that it did not accept yet.
func (l *listener) Close() error {
	l.inj.close()
	return l.Listener.Close()
}

// wrap makes an accepted connection the front end's; release (if not nil) uncounts it from its
// address's connections when it closes.
func (l *listener) wrap(c net.Conn, release func()) net.Conn {
	return l.wrapConn(c, release, nil, nil)
}

// wrapProxied is wrap for a connection from a proxy_protocol sender: its PROXY header is read from its
// socket's nbio wrapper before anything else (proxyRead), and then it is any other connection: a TLS
// one's session is captured from the header's end on. nil when it has no such socket.
func (l *listener) wrapProxied(c net.Conn) net.Conn {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	nc, err := nbio.NewTCPConn(tcp)
	if err != nil {
		return nil
	}
	return l.wrapConn(nc, nil, &proxyRead{sock: nc}, nil)
}

// wrapConn is wrap: px is a proxy_protocol sender's header to read first (nil for none), client the
// client a binary upgrade's old process knew a plain connection by (nil: its peer).
func (l *listener) wrapConn(c net.Conn, release func(), px *proxyRead, client *net.TCPAddr) net.Conn {
	if tcp, ok := c.(*net.TCPConn); ok {
		if nc, err := nbio.NewTCPConn(tcp); err == nil {
			c = nc // read and written without the scheduler's system call hooks (lb/nbio)
			if client != nil {
				nc.SetRemoteAddr(client)
			}
			if l.tls != nil {
				nc.CaptureTLS(true) // for the tunnel engine, if it becomes a wss:// tunnel (lb/tunnel takes its session over)
			}
		}
	}
	fc := &frontConn{Conn: c, front: l.front, release: release, px: px}
	fc.f.lim = &l.front.lim
	switch rc, resumed := c.(*tlsrecord.NetConn); {
	case resumed: // injected with its TLS session (Inject): the handshake was the old process's
		fc.rec, fc.shook = rc, true
		fc.listable = true
	case l.tls != nil:
		fc.tc = tls.Server(c, l.tls)
		fc.Conn = fc.tc
		nc, ok := c.(*nbio.TCPConn)
		// Its session can be taken over from crypto/tls (idle.go): captured from its first byte, or
		// from its PROXY header's end (readProxy).
		fc.listable = ok && (nc.TLSSession() != nil || px != nil)
	default:
		fc.listable = hasSocket(c)
	}
	if fc.listable {
		l.front.idle.list(fc) // may be idle at a binary upgrade (idle.go)
	} else {
		fc.hand.Store(handNever)
	}
	if l.tls != nil {
		return tlsFrontConn{fc}
	}
	return fc
}

// frontOf returns the frontConn under a connection fasthttp hands to the handler, or nil.
func frontOf(c net.Conn) *frontConn {
	switch fc := c.(type) {
	case *frontConn:
		return fc
	case tlsFrontConn:
		return fc.frontConn
	}
	return nil
}

// frontConn is an accepted client connection whose bytes are checked by a framer as fasthttp reads them.
// fasthttp uses it from the connection's serving goroutine only (Close may also come from Shutdown).
type frontConn struct {
	net.Conn
	front *Front
	tc    *tls.Conn  // the TLS connection under an HTTPS client's (Conn), nil for a plain one
	px    *proxyRead // a proxy_protocol sender's connection's header (proxyproto.go), nil for another
	// rec is Conn when it is an HTTPS client's whose session fairlead's record layer carries (a
	// connection a binary upgrade's old process handed over, Inject), nil otherwise.
	rec     *tlsrecord.NetConn
	shook   bool // its handshake ran (tls.go), with this result:
	hsErr   error
	f       framer
	pending *Refusal // found, returned by the next Read
	// failed is the error Read returned; answered is set once its answer was written or claimed.
	failed   atomic.Pointer[Refusal]
	answered atomic.Bool
	// The read deadline fasthttp asked for, and the header_timeout deadline of a head that did not
	// arrive in one read (zero when none): the socket's deadline is the earlier of the two.
	deadline, headDeadline time.Time
	sockDeadline           time.Time // the read deadline set on the socket (armRead)
	// errNoted is set once the connection's error was counted (noteError), or once it was handed to
	// a tunnel or a relay stream (handOver), whose ends are theirs to account for.
	errNoted atomic.Bool
	// release uncounts the connection from its address's (max_conns_per_source), once: at Close, or
	// when the tunnel that took its socket ends (TakeRelease). nil when not counted.
	release func()
	// The start of the current request's line and when it was read, for the log of its refusal
	// (keepLine): kept only at a refusal, or when the request spans reads.
	line     []byte
	lineAt   time.Time
	lineOf   int64 // the framer's headStart for the message the line is of
	lineDone bool  // the line is whole (or as long as kept)
	// Its part in a binary upgrade's hand-over of idle connections (idle.go): handBusy, handIdle…,
	// and its place in the front end's list of the connections that may be idle (guarded by the list's
	// lock).
	hand       atomic.Int32
	listable   bool // it may be idle at a hand-over: listed from accept to Close
	listed     bool
	prev, next *frontConn
	// A TLS connection given over (idle.go, takeSession): its session taken over from crypto/tls
	// (own, nil for a connection whose record layer carries it already) and its state, to go with
	// the socket; carry is plaintext crypto/tls gave back when it kept the session, read first.
	own   *tlsrecord.NetConn
	st    *tlsrecord.State
	carry []byte
}

func (c *frontConn) Read(p []byte) (int, error) {
	if c.tc != nil && c.handshake() != nil {
		return 0, io.EOF
	}
	if c.px != nil && !c.px.done && c.readProxy() != nil { // a plain one's (a TLS one's: handshake)
		return 0, io.EOF
	}
	if c.pending != nil {
		return 0, c.fail(c.pending)
	}
	idle, late := c.idleRead() // waiting for its next request: a binary upgrade may take it (idle.go)
	if late {
		return 0, io.EOF
	}
	n, err := c.read(p)
	for n == 0 && err != nil && isTimeout(err) {
		// The socket's deadline may be earlier than the one in force (armRead), or a hand-over woke
		// the connection, or set it on a connection it did not take after all.
		if idle && c.taken() {
			idle = false
			if c.woken(n, err) {
				return 0, io.EOF // woken by the hand-over, and given
			}
			// It stays here (its TLS session stays with crypto/tls): it reads on, as a busy one.
		}
		t := c.wanted()
		if !t.IsZero() && !time.Now().Before(t) {
			break // the one in force passed
		}
		c.sockDeadline = t
		if c.Conn.SetReadDeadline(t) != nil {
			break
		}
		if idle && c.taken() {
			continue // taken meanwhile: its wake may be undone
		}
		n, err = c.read(p)
	}
	if idle && c.woken(n, err) {
		return 0, io.EOF
	}
	if n > 0 && c.f.state != stOpaque {
		base := c.f.base
		start, ferr := c.f.scan(p[:n])
		if ferr != nil {
			c.keepLine(p[:n], base)
			if start > 0 { // the complete messages before it first
				c.pending = ferr
				return start, nil
			}
			return 0, c.fail(ferr)
		}
		if c.f.inRequest() && (c.f.headStart >= base || !c.lineDone) { // a request line read here goes on in a later read
			c.keepLine(p[:n], base)
		}
		c.headTimer()
	}
	if err != nil && !c.headDeadline.IsZero() && isTimeout(err) && !time.Now().Before(c.headDeadline) {
		return n, c.fail(&Refusal{408, "request header timeout"})
	}
	if err != nil && c.f.inRequest() {
		// The client closed, reset or stalled in the middle of a request. Between requests (and
		// before the first) that is how connections end.
		if k, ok := connKindOf(err); ok {
			c.noteError(k)
		}
	}
	return n, err
}

// read reads the connection: first what crypto/tls gave back when a hand-over found that it keeps
// the session (takeSession), then the connection itself.
func (c *frontConn) read(p []byte) (int, error) {
	if len(c.carry) > 0 {
		n := copy(p, c.carry)
		c.carry = c.carry[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *frontConn) fail(e *Refusal) error {
	c.failed.Store(e)
	k, _ := connKindOf(e)
	c.noteError(k)
	return e
}

// Write notes a failed write (the client went away while its answer was written) as the
// connection's error.
func (c *frontConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		if k, ok := connKindOf(err); ok {
			c.noteError(k)
		}
	}
	return n, err
}

// noteError counts the connection's error of kind k (connerrors.go), the first one only.
func (c *frontConn) noteError(k ConnKind) {
	if c.errNoted.CompareAndSwap(false, true) {
		c.front.Errors.note(k, c.Conn.RemoteAddr())
	}
}

// handOver is called when the connection goes to a tunnel or a relay stream (UnwrapHijacked): from
// then on its errors are not the front end's to count.
func (c *frontConn) handOver() {
	c.errNoted.Store(true)
	c.hand.Store(handNever) // never idle: its bytes are the tunnel's or the stream's
	c.front.idle.unlist(c)
}

// headTimer starts header_timeout when a head did not arrive whole in one read, and stops it when
// the head is complete. A head that arrives in one read (nearly all) costs nothing.
func (c *frontConn) headTimer() {
	switch in := c.f.inHead(); {
	case in && c.headDeadline.IsZero() && c.f.lim.HeaderTimeout > 0:
		c.headDeadline = time.Now().Add(c.f.lim.HeaderTimeout)
		c.armRead() //nolint:errcheck // a failed read reports it
	case !in && !c.headDeadline.IsZero():
		c.headDeadline = time.Time{}
		c.armRead() //nolint:errcheck
	}
}

func (c *frontConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.armRead()
}

// wanted is the read deadline in force: the earlier of fasthttp's and header_timeout's (zero: none).
func (c *frontConn) wanted() time.Time {
	t := c.deadline
	if !c.headDeadline.IsZero() && (t.IsZero() || c.headDeadline.Before(t)) {
		t = c.headDeadline
	}
	return t
}

// armRead gives the socket the read deadline in force, lazily on a plain TCP connection (or one whose
// TLS session fairlead's record layer carries, which keeps a partial record at a timeout): a deadline
// later than the socket's is not set, the socket keeps its earlier one, and a read that times out
// before the deadline in force sets it then and reads again (Read). fasthttp moves the deadline later
// twice per request (idle_timeout while a keep-alive connection waits, read_timeout once a request
// starts), and each move is a runtime timer update; this way a busy connection pays one every
// read_timeout instead. An earlier deadline, or none, is set at once.
func (c *frontConn) armRead() error {
	t := c.wanted()
	if c.tc == nil && !t.IsZero() && !c.sockDeadline.IsZero() && !t.Before(c.sockDeadline) {
		return nil
	}
	c.sockDeadline = t
	return c.Conn.SetReadDeadline(t)
}

func (c *frontConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// claim returns the error to answer if nobody answered it yet, and marks it answered.
func (c *frontConn) claim() *Refusal {
	e := c.failed.Load()
	if e == nil || !c.answered.CompareAndSwap(false, true) {
		return nil
	}
	return e
}

// Close answers a refused request that fasthttp closed without answering (it answers errors of a
// connection's first request only), then closes. Either way the client's unread bytes are drained for
// a moment after the answer (a lingering close), so that closing does not reset the connection before
// the client read the answer.
func (c *frontConn) Close() error {
	if c.listable {
		c.front.idle.unlist(c)
	}
	if c.release != nil {
		c.release()
	}
	if c.px != nil {
		c.px.close()
	}
	if c.hand.CompareAndSwap(handGiven, handNever) {
		return c.giveSocket() // a binary upgrade's new process serves it from now on (idle.go)
	}
	if e := c.claim(); e != nil {
		c.front.Refused(e.Status)
		c.logRefusal(e.Status, e.Reason)
		c.Conn.SetWriteDeadline(time.Now().Add(time.Second)) //nolint:errcheck
		c.Conn.Write(errorAnswer(e))                         //nolint:errcheck // closing anyway
	}
	if c.failed.Load() != nil {
		linger(c.Conn)
	}
	return c.Conn.Close()
}

// isTimeout reports whether err is a timeout: fasthttp's, or a deadline's.
func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
