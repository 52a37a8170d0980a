// Package tunnel relays upgraded connections (WebSocket) as raw bytes, epoll-driven, no
// per-idle-tunnel goroutine or buffer.
//
// Once the load balancer has seen a successful upgrade (101 Switching Protocols), it hands the
// client connection and the upstream connection to an Engine, which copies bytes both ways
// without parsing frames, like HAProxy's tunnel mode.
//
// On Linux an Engine runs one event loop per core (Options.Loops): an epoll instance watching
// the two sockets of each tunnel it was given, and a goroutine that waits for it through Go's
// netpoller (no thread blocked in epoll_wait) and moves the bytes of each socket that became
// readable, with the loop's one buffer, without handing them to another goroutine. An idle tunnel
// therefore costs its two file descriptors and about a kilobyte of Go structures (its two
// net.TCPConn included), and no goroutine and no buffer. A write that would block (the
// receiver is slower than the sender) is finished by a goroutine of its own, which holds that
// one buffer until the receiver catches up; meanwhile the sending side is not read
// (backpressure), so no other tunnel waits for it. Relaying allocates nothing per message.
// A TLS connection (a wss:// client on the HTTPS listener, a pool's TLS upstream) is relayed the same
// way once its handshake is done, when it runs over an *nbio.TCPConn in evented mode: its records are
// read only when the socket is readable, its writes never park the loop, and an idle one holds no
// goroutine either. A tunnel with any other kind of connection is streamed by two goroutines
// (stream.go); elsewhere than Linux every tunnel is, keeping the same API.
package tunnel

import (
	"crypto/tls"
	"errors"
	"log"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Options configure an Engine. The zero value is usable: no idle timeout, 32 KiB buffers,
// GOMAXPROCS loops.
type Options struct {
	// IdleTimeout closes a tunnel with no bytes either way for this long; 0 = never.
	IdleTimeout time.Duration
	// IdleCheck is the janitor's period: the idle timeout is enforced within IdleTimeout+IdleCheck.
	// Default IdleTimeout/4, at least 100ms, at most 5s. Unused when IdleTimeout is 0.
	IdleCheck time.Duration
	// BufferSize is the size of the buffer one read uses, default 32 KiB. Buffers are owned by
	// the loops (and by the rare blocked write), never by a tunnel.
	BufferSize int
	// Loops is the number of event loops, default GOMAXPROCS: each an epoll instance and a
	// goroutine owning one buffer; a tunnel belongs to one loop, which moves all of its bytes.
	Loops int
	// Logf reports unexpected failures (of epoll itself, not of tunnels); default log.Printf.
	Logf func(format string, args ...any)
}

const (
	defaultBufferSize = 32 << 10
	minIdleCheck      = 100 * time.Millisecond
	maxIdleCheck      = 5 * time.Second
)

func (o *Options) setDefaults() {
	if o.IdleTimeout < 0 {
		o.IdleTimeout = 0
	}
	if o.IdleTimeout > 0 && o.IdleCheck <= 0 {
		o.IdleCheck = min(max(o.IdleTimeout/4, minIdleCheck), maxIdleCheck)
	}
	if o.BufferSize <= 0 {
		o.BufferSize = defaultBufferSize
	}
	if o.Loops <= 0 {
		o.Loops = runtime.GOMAXPROCS(0)
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
}

// Reason tells why a tunnel ended.
type Reason int

const (
	// ClosedByClient: the client closed its side first (EOF), and the tunnel then ended
	// cleanly, or because the server refused the data the client still sent.
	ClosedByClient Reason = iota
	// ClosedByServer: the same, the server first.
	ClosedByServer
	// Error: a read or write failed (connection reset, ...) before either side closed.
	Error
	// IdleTimeout: no byte either way for Options.IdleTimeout.
	IdleTimeout
	// Closed: by Tunnel.Close or Engine.CloseGroup.
	Closed
	// Shutdown: by Tunnel.Shutdown or Engine.Close (the program is stopping).
	Shutdown
	// HandedOver: by Tunnel.Detach: its sockets went on, open, to be relayed elsewhere.
	HandedOver

	numReasons
)

var reasonNames = [numReasons]string{"closed by client", "closed by server", "error", "idle timeout", "closed", "shutdown", "handed over"}

func (r Reason) String() string {
	if r >= 0 && r < numReasons {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Stats are cumulative counters of an Engine.
type Stats struct {
	Opened, Closed uint64 // tunnels; Opened-Closed are open now
	BytesToServer  uint64 // relayed client -> server, including Add's toServer
	BytesToClient  uint64 // relayed server -> client, including Add's toClient
	// ByReason counts closed tunnels by why they ended, indexed by Reason.
	ByReason [numReasons]uint64
}

type counters struct {
	opened, closed atomic.Uint64
	bytes          [2]atomic.Uint64 // indexed by the reading side: [client] = to server
	byReason       [numReasons]atomic.Uint64
}

var (
	// ErrClosed is returned by Add after Close.
	ErrClosed = errors.New("tunnel: engine closed")
	// ErrNilConn is Add's answer to a nil connection.
	ErrNilConn = errors.New("tunnel: nil connection")
)

// Side indexes: a side is named by the connection it reads from.
const (
	clientSide = 0
	serverSide = 1
)

// Engine carries tunnels. All its methods are safe for concurrent use.
type Engine struct {
	opts  Options
	start time.Time // monotonic base of Tunnel.lastActive

	mu     sync.Mutex // guards closed, groups, n; lock order: Tunnel.mu before Engine.mu
	closed bool
	groups map[string]map[*Tunnel]struct{}
	n      int

	stats counters

	streamBufs sync.Pool // large buffers of streamed tunnels while busy (stream.go)

	stop      chan struct{}  // closed by Close: stops the janitor
	wg        sync.WaitGroup // janitor, loops, blocked writes
	closeOnce sync.Once

	sys sysEngine // the platform's machinery (epoll on Linux)
}

// Tunnel is one relayed client/server pair. Its methods are safe for concurrent use.
type Tunnel struct {
	r        *Engine
	group    string
	onClose  func(Reason)
	conns    [2]*net.TCPConn // referenced until the end, so no finalizer closes an fd under the engine
	tlsConns [2]tlsSide      // the TLS connection over conns[i], read and written instead of it; or nil
	streams  [2]net.Conn     // instead, for a streamed tunnel (stream.go)

	lastActive atomic.Int64     // Engine.now() after the last relayed bytes
	bytes      [2]atomic.Uint64 // relayed, indexed by the reading side: [clientSide] = to the server

	mu      sync.Mutex // guards what follows and the platform's registration state in sides
	closed  bool
	handing bool    // Detach is under way: no socket is watched again
	eof     [2]bool // the side's read returned EOF (and the peer was shut for writing)
	first   int8    // the side that reached EOF first, -1 if none

	sides [2]side // platform-specific per-side state
}

// NewEngine starts an engine: on Linux Options.Loops event loops (each an epoll instance and
// its goroutine) and, with an idle timeout, a janitor. Close releases them.
func NewEngine(o Options) (*Engine, error) {
	o.setDefaults()
	r := &Engine{
		opts:   o,
		start:  time.Now(),
		groups: make(map[string]map[*Tunnel]struct{}),
		stop:   make(chan struct{}),
	}
	size := o.BufferSize
	r.streamBufs.New = func() any { b := make([]byte, size); return &b }
	if err := r.sysStart(); err != nil {
		return nil, err
	}
	if o.IdleTimeout > 0 {
		r.wg.Add(1)
		go r.janitor()
	}
	return r, nil
}

// Add relays between client and server until one side errors, both sides reach EOF, the idle
// timeout passes, or the tunnel is closed. toServer / toClient are bytes already read from the
// other side (may be nil) that are written first: nothing read from the client reaches the
// server before toServer, and likewise toClient. Add does not keep them past its return (a
// part that cannot be written at once is copied). group labels the tunnel (the upstream server
// address) for CloseGroup/GroupLen. onClose (may be nil) runs once when the tunnel ends, with
// the reason; it runs on an engine goroutine (or the one calling a Close method), must not block,
// and must not call Engine.Close (which waits for the engine's goroutines).
//
// A *net.TCPConn, or a *tls.Conn over an *nbio.TCPConn whose handshake is done, is relayed by epoll (on
// Linux); a pair with any other connection is a streamed tunnel carried by two goroutines (stream.go). A connection hijacked from fasthttp wraps
// the client's (its UnsafeConn method returns it), and the bytes its reader had buffered past the
// request belong in toServer. Add clears both conns' deadlines.
//
// On error from Add the caller still owns the conns (a TLS one whose session the engine had taken over
// with its socket closed: see ownSession). On success the engine owns them: it closes
// both when the tunnel ends, and the caller must neither use nor close them (close the Tunnel
// instead). A failure to write the pending bytes is not an error of Add: the tunnel ends with
// reason Error.
func (r *Engine) Add(client, server net.Conn, toServer, toClient []byte, group string, onClose func(reason Reason)) (_ *Tunnel, err error) {
	if client == nil || server == nil {
		return nil, ErrNilConn
	}
	cc, ctls := socketOf(client)
	sc, stls := socketOf(server)
	streamed := cc == nil || sc == nil
	if !streamed && epollEngine {
		var left [2][]byte
		ctls, left[clientSide] = r.ownSession(ctls)
		stls, left[serverSide] = r.ownSession(stls)
		// A session taken over is the engine's record layer's from here: should Add fail, the caller's
		// crypto/tls connection must not write on it (its close_notify would reuse a nonce of the
		// record layer's key), so its socket closes here.
		defer func() {
			if err != nil {
				for _, c := range [2]tlsSide{ctls, stls} {
					if own, ok := c.(*tlsrecord.NetConn); ok {
						own.TCPConn.Close()
					}
				}
			}
		}()
		if left[clientSide] != nil {
			toServer = append(append([]byte(nil), toServer...), left[clientSide]...) // read before it
		}
		if left[serverSide] != nil {
			toClient = append(append([]byte(nil), toClient...), left[serverSide]...)
		}
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	// A deadline left by the HTTP server (fasthttp sets them per request) would fail the
	// relay's reads and writes once passed; the engine's own idle timeout replaces them.
	for _, c := range [2]net.Conn{client, server} {
		if err := c.SetDeadline(time.Time{}); err != nil {
			return nil, err
		}
	}
	t := &Tunnel{r: r, group: group, onClose: onClose, first: -1}
	if streamed {
		t.streams = [2]net.Conn{client, server}
	} else {
		t.conns = [2]*net.TCPConn{cc, sc}
		t.tlsConns = [2]tlsSide{ctls, stls}
	}
	t.touch()
	if !streamed {
		if err := r.sysPrepare(t); err != nil {
			return nil, err
		}
	}

	// t.mu is held until the tunnel is fully set up: a concurrent CloseGroup or Close that
	// finds it in the registry waits, so it never closes conns that Add may yet give back.
	t.mu.Lock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		t.mu.Unlock()
		return nil, ErrClosed
	}
	g := r.groups[group]
	if g == nil {
		g = make(map[*Tunnel]struct{})
		r.groups[group] = g
	}
	g[t] = struct{}{}
	r.n++
	r.mu.Unlock()

	var ioErr bool
	if streamed {
		r.startPumps(t, toServer, toClient)
	} else {
		ioErr, err = r.sysAdd(t, toServer, toClient)
	}
	if err != nil {
		t.closed = true // never opened: closers skip it
		t.mu.Unlock()
		r.unregister(t)
		return nil, err
	}
	r.stats.opened.Add(1)
	t.mu.Unlock()
	if ioErr {
		r.closeTunnel(t, Error)
	}
	return t, nil
}

// socketOf returns the TCP socket that carries c's bytes, if the engine can watch it: c itself, or the
// socket under a TLS connection whose handshake is done, over an *nbio.TCPConn (the front end's and the
// upstream dialer's), or resumed (Resume), returned as well. Otherwise nil: c is streamed.
func socketOf(c net.Conn) (*net.TCPConn, tlsSide) {
	switch c := c.(type) {
	case *net.TCPConn:
		return c, nil
	case *tls.Conn:
		if nc, ok := c.NetConn().(*nbio.TCPConn); ok && nc.TCPConn != nil && c.ConnectionState().HandshakeComplete {
			return nc.TCPConn, c
		}
	case *tlsrecord.NetConn:
		return c.TCPConn.TCPConn, c
	}
	return nil, nil
}

// ownSession takes a TLS side's session over from crypto/tls (session.go), if it can; it returns the
// side's connection from here, and the plaintext crypto/tls held, to relay first.
func (r *Engine) ownSession(c tlsSide) (tlsSide, []byte) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return c, nil
	}
	bp := r.streamBufs.Get().(*[]byte)
	defer r.streamBufs.Put(bp)
	own, left := tlsrecord.TakeOver(tc, tc.NetConn().(*nbio.TCPConn), *bp)
	if own == nil {
		return c, left
	}
	return own, left
}

// Close ends the tunnel now (reason Closed) and closes both conns; no-op once it has ended.
func (t *Tunnel) Close() { t.r.closeTunnel(t, Closed) }

// Shutdown is Close at the program's stop: the reason is Shutdown.
func (t *Tunnel) Shutdown() { t.r.closeTunnel(t, Shutdown) }

// ErrNotDetachable is Detach's answer for a tunnel whose state is more than its two sockets and its
// sessions: a TLS side whose session crypto/tls kept (session.go), a streamed tunnel, one side closed
// already.
var ErrNotDetachable = errors.New("tunnel: not detachable: a TLS session crypto/tls kept, a streamed or a half-closed tunnel")

// Detached is a tunnel as Detach gives it up: its two sockets, open, and each TLS side's session (its
// keys: never log it), nil for a plain side.
type Detached struct {
	Client, Server       *os.File
	ClientTLS, ServerTLS *tlsrecord.State
}

// Detach stops relaying t and returns its two sockets as files, open, with the TLS sessions, for
// another process to relay (Add there, with the connections Resume makes): nothing read from either
// side stays unwritten here — a turn or a blocked write under way finishes first, within timeout —
// and neither end sees anything. The tunnel then ends here with reason HandedOver (onClose runs);
// the caller owns the files. A tunnel that cannot be detached in time is closed (reason Error).
func (t *Tunnel) Detach(timeout time.Duration) (Detached, error) {
	return t.r.detach(t, timeout)
}

// detach is Detach; the platform's part waits for the sides (sysDetach).
func (r *Engine) detach(t *Tunnel, timeout time.Duration) (Detached, error) {
	t.mu.Lock()
	_, kept0 := t.tlsConns[0].(*tls.Conn)
	_, kept1 := t.tlsConns[1].(*tls.Conn)
	switch {
	case t.closed || t.handing:
		t.mu.Unlock()
		return Detached{}, ErrClosed
	case t.streams[0] != nil || kept0 || kept1 || t.eof[0] || t.eof[1]:
		t.mu.Unlock()
		return Detached{}, ErrNotDetachable
	}
	t.handing = true
	r.sysDetachLocked(t)
	t.mu.Unlock()
	if err := r.sysQuiesce(t, timeout); err != nil {
		r.closeTunnel(t, Error)
		return Detached{}, err
	}
	t.mu.Lock()
	if t.closed { // the janitor, or a close, came first
		t.mu.Unlock()
		return Detached{}, ErrClosed
	}
	t.closed = true
	t.mu.Unlock()
	var d Detached
	var states [2]*tlsrecord.State
	for i, c := range t.tlsConns {
		if own, ok := c.(*tlsrecord.NetConn); ok { // quiesced: no write of it is pending
			st := own.State()
			states[i] = &st
		}
	}
	var files [2]*os.File
	var err error
	for i, c := range t.conns {
		if files[i], err = c.File(); err != nil {
			break
		}
	}
	r.unregister(t)
	t.conns[0].Close()
	t.conns[1].Close()
	r.stats.closed.Add(1)
	reason := HandedOver
	if err != nil {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		reason = Error
	}
	r.stats.byReason[reason].Add(1)
	if t.onClose != nil {
		t.onClose(reason)
	}
	if err != nil {
		return Detached{}, err
	}
	d = Detached{Client: files[0], Server: files[1], ClientTLS: states[0], ServerTLS: states[1]}
	return d, nil
}

// Group is the label given to Add.
func (t *Tunnel) Group() string { return t.group }

// Bytes returns the bytes relayed so far each way, Add's toServer and toClient included; once the
// tunnel has ended (in its onClose, for instance) they are final.
func (t *Tunnel) Bytes() (toServer, toClient uint64) {
	return t.bytes[clientSide].Load(), t.bytes[serverSide].Load()
}

func (t *Tunnel) touch() { t.lastActive.Store(t.r.now()) }

// count records n bytes relayed from side i of t, in the tunnel's and the engine's counters (once per
// turn, not per message).
func (r *Engine) count(t *Tunnel, i, n int) {
	t.bytes[i].Add(uint64(n))
	r.stats.bytes[i].Add(uint64(n))
}

// now is monotonic nanoseconds since the engine started.
func (r *Engine) now() int64 { return int64(time.Since(r.start)) }

// CloseGroup closes every tunnel of group now (reason Closed), e.g. because its server went
// down, and returns how many it closed.
func (r *Engine) CloseGroup(group string) int {
	n := 0
	for _, t := range r.Group(group) {
		if r.closeTunnel(t, Closed) {
			n++
		}
	}
	return n
}

// Group returns the open tunnels of group, in no particular order (to close them one by one, e.g.
// spread over a few seconds).
func (r *Engine) Group(group string) []*Tunnel {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[group]
	ts := make([]*Tunnel, 0, len(g))
	for t := range g {
		ts = append(ts, t)
	}
	return ts
}

// Len is the number of open tunnels.
func (r *Engine) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// GroupLen is the number of open tunnels of group.
func (r *Engine) GroupLen(group string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.groups[group])
}

// Stats returns the cumulative counters.
func (r *Engine) Stats() Stats {
	s := Stats{
		Opened:        r.stats.opened.Load(),
		Closed:        r.stats.closed.Load(),
		BytesToServer: r.stats.bytes[clientSide].Load(),
		BytesToClient: r.stats.bytes[serverSide].Load(),
	}
	for i := range s.ByReason {
		s.ByReason[i] = r.stats.byReason[i].Load()
	}
	return s
}

// Close closes every tunnel (reason Shutdown), then stops the loops and the janitor,
// and returns when all of the engine's goroutines have exited. Add fails afterwards.
// Idempotent; concurrent callers all return once it is done.
func (r *Engine) Close() {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		var ts []*Tunnel
		for _, g := range r.groups {
			for t := range g {
				ts = append(ts, t)
			}
		}
		r.mu.Unlock()
		close(r.stop)
		for _, t := range ts {
			r.closeTunnel(t, Shutdown)
		}
		r.sysClose()
	})
}

// closeTunnel ends t once: it detaches both sockets from the platform (epoll DEL, before the
// fds can be closed and reused), closes both conns, counts, and runs onClose. It reports
// whether this call did it.
func (r *Engine) closeTunnel(t *Tunnel, reason Reason) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.closed = true
	r.sysDetachLocked(t)
	t.mu.Unlock()

	r.unregister(t)
	t.conn(clientSide).Close()
	t.conn(serverSide).Close()
	r.stats.closed.Add(1)
	r.stats.byReason[reason].Add(1)
	if t.onClose != nil {
		t.onClose(reason)
	}
	return true
}

func (r *Engine) unregister(t *Tunnel) {
	r.sysForget(t)
	r.mu.Lock()
	if g := r.groups[t.group]; g != nil {
		if _, ok := g[t]; ok {
			delete(g, t)
			r.n--
			if len(g) == 0 {
				delete(r.groups, t.group)
			}
		}
	}
	r.mu.Unlock()
}

// sideEOF records that side i of t read EOF. The first EOF is propagated as a half-close
// (shutdown(SHUT_WR) on the peer, so the other end reads EOF while it can still send); the
// second ends the tunnel, with the reason naming who closed first.
func (r *Engine) sideEOF(t *Tunnel, i int) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.eof[i] = true
	if t.first < 0 {
		t.first = int8(i)
	}
	both := t.eof[1-i]
	first := Reason(t.first) // clientSide/serverSide match ClosedByClient/ClosedByServer
	t.mu.Unlock()
	if both {
		r.closeTunnel(t, first)
		return
	}
	if err := closeWrite(t.conn(1 - i)); err != nil {
		r.closeTunnel(t, Error)
		return
	}
	if t.tlsConns[1-i] != nil {
		r.sysClosedWrite(t, 1-i)
	}
}

// writeFailed ends t after a write toward side 1-i failed. If that side had already sent EOF,
// its end closed the connection and refused the rest: that is a close by it, not an error.
func (r *Engine) writeFailed(t *Tunnel, i int) {
	t.mu.Lock()
	reason := Error
	if t.eof[1-i] {
		reason = Reason(1 - i)
	}
	t.mu.Unlock()
	r.closeTunnel(t, reason)
}

// janitor closes the tunnels idle for longer than IdleTimeout, checking every IdleCheck.
func (r *Engine) janitor() {
	defer r.wg.Done()
	tk := time.NewTicker(r.opts.IdleCheck)
	defer tk.Stop()
	var idle []*Tunnel
	for {
		select {
		case <-r.stop:
			return
		case <-tk.C:
		}
		limit := r.now() - int64(r.opts.IdleTimeout)
		r.mu.Lock()
		for _, g := range r.groups {
			for t := range g {
				if t.lastActive.Load() < limit {
					idle = append(idle, t)
				}
			}
		}
		r.mu.Unlock()
		for i, t := range idle {
			// Re-check: bytes may have moved since the scan.
			if t.lastActive.Load() < limit {
				r.closeTunnel(t, IdleTimeout)
			}
			idle[i] = nil
		}
		idle = idle[:0]
	}
}
