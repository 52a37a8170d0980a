//go:build linux && !tunnel_portable && !nbio_portable

package tunnel

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// How it works on Linux.
//
// Each socket of a tunnel is registered once in the engine's epoll instance, edge-triggered
// (EPOLLIN|EPOLLRDHUP|EPOLLET), with as epoll data a uint64 id looked up in sysEngine.ids (no Go
// pointer goes to the kernel). Go's own netpoller keeps its registration of the same fd in its
// own epoll instance; one file may be watched by several epoll instances (epoll(7), Q&A 1 and
// 2; the questions are numbered from 0, as in older editions of the page), and we never let Go
// wait on a tunnel's reads, so the two do not interfere.
//
// Loops. The engine runs Options.Loops event loops, each with an epoll instance of its own and
// one goroutine; a tunnel is given to one loop when it is added (round robin) and both its
// sockets stay registered there, so every turn of a tunnel runs on its loop's goroutine, which
// reads, writes and goes back to waiting without handing anything to another goroutine. That is
// HAProxy's and nginx's model (a thread or process per core, each connection owned by one) in
// Go terms: with GOMAXPROCS loops, each Go worker thread normally runs one loop, and a ready
// socket wakes exactly one goroutine. (Measured at GOMAXPROCS=2, ws-echo: a single poller handing
// bursts to a pool of worker goroutines spent about 27 µs of CPU per round trip against nginx's
// 22, mostly in goroutine hand-offs and thread wake-ups; one loop per core, each running its own
// turns, about 22.)
//
// Nobody blocks in epoll_wait. A loop's epoll fd is itself pollable: it reads as ready while
// events are pending (epoll(7), Q&A 3), so it is wrapped in an *os.File and waited for through
// Go's netpoller like a socket. The loop goroutine parks there; once woken it collects up to
// eventsPerWait events with epoll_wait(timeout 0) and runs their turns. So an idle engine holds
// no OS thread in a system call, and a busy loop keeps collecting events without parking.

// Edge-triggered (epoll(7), "Level-triggered and edge-triggered"): the socket is put on the
// ready list each time something new happens to it (a chunk of data arrives, the peer shuts
// down or resets), and taken off when epoll_wait returns it; what happens before epoll_wait
// returns it is combined into one event (Q&A 7). Data merely left unread is not reported
// again. Who owns a side is therefore decided in user space, by side.state:
//
//	sideIdle     nobody: the next event starts a turn.
//	sideRunning  one goroutine: the loop running the side's turn, or the goroutine
//	             finishing a blocked write of its bytes (below); after EOF, nobody, for good.
//	sidePending  running, and an event came meanwhile.
//
// For each event the loop either claims the side, idle -> running by compare-and-swap, and
// runs its turn; or sets running -> pending (CAS), and the owner (a goroutine finishing a
// blocked write, below) will
// read again; or finds it pending, and has nothing to do. A turn reads and writes to the peer
// until the socket is drained: read returned EAGAIN, or fewer bytes than asked while the event
// reported no EOF (for a stream socket that means the receive queue is empty: epoll(7), Q&A 9,
// "you can be sure of having exhausted the read I/O space"). It then lets go, running -> idle
// (CAS); if that fails, the state is pending: it sets running and reads again. No wake-up is
// lost: data that the last read did not see arrived after it, and its arrival put the socket
// on the ready list (or found it there still), so epoll_wait returns an event after it. The
// loop, taking that event, either finds the side running and makes the owner's CAS fail, or
// finds it idle (the owner let go) and claims it. (An event for data that the turn had read
// already costs one read that returns EAGAIN.) So a message turn makes no epoll_ctl call and
// takes no lock: its system calls are its reads and writes, and its share of an epoll_wait.
//
// Yielding. A turn that has read readsPerTurn buffers without draining the socket stops, so
// that one busy tunnel does not keep its loop from the others (epoll(7),
// "Starvation (edge-triggered)"). The data it leaves will not be reported again by itself, so
// the turn yields: it sets idle, then re-registers the socket with EPOLL_CTL_MOD and the same
// events. MOD re-reads the socket's readiness (Q&A 8: "Modify will reread available I/O";
// ep_modify in fs/eventpoll.c) and queues an event if it is readable, so the side goes to the
// back of the ready list. An event that claims the side between the store and the MOD is
// harmless: the CAS gives the side one owner, and the MOD's event at worst makes it read again.
//
// EPOLLRDHUP (epoll_ctl(2)): the peer shut down its writing half. Data may still precede it,
// so it is treated like EPOLLIN (read until EOF); it only tells the turn not to stop at a
// short read. EPOLLERR and EPOLLHUP are always reported (epoll_ctl(2)); the read that follows
// returns the error or EOF. After EOF the side stays running for good: it is still registered
// (until the tunnel closes), and its further events are ignored.
//
// A side's read is done inside RawConn.Read with a callback that always returns true, so Go
// never parks on it (EAGAIN means drained). The write to the peer is a non-blocking write
// inside the peer's RawConn.Write; if the peer's socket buffer is full, the rest is written by a
// goroutine of its own with the ordinary, parking net.Conn.Write. The side stays running
// meanwhile, so the sender is not read (backpressure: its events only set pending), and no
// loop ever waits for a slow receiver. When the write is done, that goroutine yields the
// side as above, so whatever arrived meanwhile is reported again. Add's pending bytes that the
// peer cannot take at once are written the same way, their side registered as running.
//
// TLS sides. A side whose connection is a *tls.Conn (its handshake done) over an *nbio.TCPConn is
// registered like a plain one, by its socket, and read with tls.Conn.Read once the TCPConn is in
// evented mode: every read of the socket under it is one non-blocking read, and an empty socket
// answers nbio.ErrWouldBlock, a temporary net.Error, which crypto/tls returns without failing the
// connection (it keeps the part of a record it has). Writes to it (tls.Conn.Write) never park either:
// what the socket does not take waits in the TCPConn, and the turn hands its side to a goroutine that
// flushes it (finishFlush), as a blocked plain write is handed to finishWrite.
//
// A TLS connection may hold whole records already read from the socket, which no event will announce
// again. So a TLS side is let go only when it is known to hold none: after a read that found nothing,
// or after a short read of the socket when every whole record read so far has given its data (the
// TCPConn counts the records whose last byte it read; each tls.Conn.Read with a buffer of at least
// a record's largest plaintext returns one whole record's data: so the count tells, without another
// read that would find nothing). And a TLS side is never yielded with EPOLL_CTL_MOD, whose event only
// reports the socket: it goes to its loop's run queue, which an eventfd in the loop's epoll announces,
// and the loop turns it again. A new TLS side's first turn comes from the run queue too: its
// connection may have read frames with the upgrade.
//
// Lifecycle and fd reuse: Tunnel.mu guards closed and each side's registration. Every
// epoll_ctl on a tunnel's socket (ADD in Add, MOD in a yield) is done under it and only while
// !closed; closeTunnel sets closed and removes both fds from epoll (EPOLL_CTL_DEL) under it,
// before closing the conns. So no epoll_ctl ever names a closed fd, whose number may already
// belong to another connection. Events already fetched for a closed tunnel find no id (ids are
// never reused) or fail on the closed conn, and are dropped.

// epollEngine tells the tests which implementation they run against.
const epollEngine = true

const (
	readsPerTurn  = 4  // buffers read from one side before it yields to the others
	eventsPerWait = 64 // events a loop takes per epoll_wait
	watchEvents   = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET
	eofEvents     = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
)

// Values of side.state (see the comment at the top).
const (
	sideIdle    = iota // nobody owns the side: the next event claims it
	sideRunning        // one goroutine owns it (for good after EOF)
	sidePending        // owned, and an event came meanwhile: the owner reads again before letting go
)

type sysEngine struct {
	loops   []*loop
	next    atomic.Uint32 // round robin over loops for new tunnels
	bufs    sync.Pool     // *[]byte of BufferSize, for the loop that gave its own to a blocked write
	closing atomic.Bool   // set by Close before it closes the loops' epoll files
}

// loop is one event loop: an epoll instance and the goroutine that runs its tunnels' turns.
type loop struct {
	epfd   int             // the epoll instance, for epoll_ctl
	ep     *os.File        // the same fd, registered in Go's netpoller; Close releases it
	epRaw  syscall.RawConn // of ep
	idsMu  sync.RWMutex
	ids    map[uint64]*side
	nextID uint64
	w      *worker // the loop's goroutine state: its buffer and events

	// The run queue: sides owned (running) that the loop must turn again although their socket may
	// report nothing (a TLS side whose connection may hold records already read). The eventfd,
	// watched by the loop's epoll with id 0, is written when the queue gets its first side.
	efd   int
	runMu sync.Mutex
	runq  []*side
}

// side is one direction of a tunnel, named by the socket it reads from; it writes to its peer.
type side struct {
	t     *Tunnel
	i     int             // clientSide or serverSide
	raw   syscall.RawConn // of conns[i], obtained once
	fd    int             // of conns[i]; valid while the tunnel is not closed
	id    uint64          // epoll data
	lp    *loop           // the loop the tunnel belongs to; set by sysAdd before any event
	reg   bool            // added to epoll; guarded by t.mu
	state atomic.Uint32   // sideIdle, sideRunning or sidePending; next to reg, in its padding
	peer  *side
	tls   tlsSide         // read (and written) instead of the socket, when the side is TLS
	nb    *nbio.TCPConn   // under tls, in evented mode while the tunnel lives
	own   *tlsrecord.Conn // tls's record layer when the session is fairlead's (session.go), else nil

	// A TLS side's owner's: whether nb's record count is known to match what tls consumed (synced,
	// from the first read that found nothing), the records tls has returned data from since (each
	// read of at least a record's largest plaintext takes one whole), and whether the socket
	// reported its peer's end (hup: the socket must then be read until EOF).
	synced bool
	hup    bool
	apps   uint64
}

// maxTLSPlaintext is the largest plaintext of a TLS record (RFC 8446 5.1): a read of at least this
// much returns the whole of the next record's.
const maxTLSPlaintext = 1 << 14

// claim is the loop's answer to an event for s: true if the caller now owns s and must run
// its turn; false if s is owned already, whose owner is then told to read again.
func (s *side) claim() bool {
	for {
		switch s.state.Load() {
		case sideIdle:
			if s.state.CompareAndSwap(sideIdle, sideRunning) {
				return true
			}
		case sideRunning:
			if s.state.CompareAndSwap(sideRunning, sidePending) {
				return false
			}
		default:
			return false
		}
	}
}

// release lets s go once its owner found the socket drained. False means an event came while
// it was owned: the data it announced may have arrived after that last read, so the caller
// keeps s and reads again. Only the owner moves the state out of sidePending, so the plain
// store cannot undo another's change.
func (s *side) release() bool {
	if s.state.CompareAndSwap(sideRunning, sideIdle) {
		return true
	}
	s.state.Store(sideRunning)
	return false
}

func (r *Engine) sysStart() error {
	size := r.opts.BufferSize
	r.sys.bufs.New = func() any {
		b := make([]byte, size)
		return &b
	}
	for range r.opts.Loops {
		lp, err := newLoop(r)
		if err != nil {
			for _, lp := range r.sys.loops {
				lp.ep.Close()
				unix.Close(lp.efd)
			}
			r.sys.loops = nil
			return err
		}
		r.sys.loops = append(r.sys.loops, lp)
	}
	r.wg.Add(len(r.sys.loops))
	for _, lp := range r.sys.loops {
		go lp.run(r)
	}
	return nil
}

func newLoop(r *Engine) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("tunnel: epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile registers it in Go's netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("tunnel: epoll fd: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "tunnel-epoll")
	epRaw, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("tunnel: epoll fd: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("tunnel: eventfd: %w", err)
	}
	// Level-triggered: the loop reads it back to zero each time it takes the queue.
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil {
		unix.Close(efd)
		ep.Close()
		return nil, fmt.Errorf("tunnel: epoll_ctl eventfd: %w", err)
	}
	w := newWorker(r)
	w.events = make([]unix.EpollEvent, eventsPerWait)
	w.pollFn = w.rawPoll
	return &loop{epfd: epfd, ep: ep, epRaw: epRaw, ids: make(map[uint64]*side), nextID: 1, w: w, efd: efd}, nil
}

// eventfdOne is what requeue writes to a loop's eventfd (1, as a native 64-bit integer; any value
// other than 0 wakes it).
var eventfdOne = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// requeue puts s, which the caller owns and gives up, on its loop's run queue: the loop runs its turn
// soon, from any goroutine, without an event of its socket.
func (lp *loop) requeue(s *side) {
	lp.runMu.Lock()
	first := len(lp.runq) == 0
	lp.runq = append(lp.runq, s)
	lp.runMu.Unlock()
	if first {
		nbio.Write(uintptr(lp.efd), eventfdOne) //nolint:errcheck // EAGAIN: the counter is far from empty, so the loop wakes anyway
	}
}

// takeQueue empties the run queue into w.queued (the loop's goroutine only).
func (lp *loop) takeQueue(w *worker) {
	var cnt [8]byte
	nbio.Read(uintptr(lp.efd), cnt[:]) //nolint:errcheck // EAGAIN: read back already
	lp.runMu.Lock()
	w.queued, lp.runq = lp.runq, w.queued[:0]
	lp.runMu.Unlock()
}

// sysClose runs after every tunnel is closed: closing the epoll Files wakes the parked loops
// (their RawConn.Read fails; each fd itself is closed once its loop has let go of it), which then
// exit. It waits for every goroutine of the engine.
func (r *Engine) sysClose() {
	r.sys.closing.Store(true)
	for _, lp := range r.sys.loops {
		lp.ep.Close()
	}
	r.wg.Wait()
	for _, lp := range r.sys.loops {
		unix.Close(lp.efd)
	}
}

// sysPrepare fetches each conn's fd and RawConn, before t is visible to anyone.
func (r *Engine) sysPrepare(t *Tunnel) error {
	for i, c := range t.conns {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		s := &t.sides[i]
		s.t, s.i, s.raw, s.peer = t, i, raw, &t.sides[1-i]
		switch tc := t.tlsConns[i].(type) {
		case *tls.Conn:
			s.tls, s.nb = tc, tc.NetConn().(*nbio.TCPConn)
		case *tlsrecord.NetConn:
			s.tls, s.nb, s.own = tc, tc.TCPConn, tc.TLS
		}
		var fd int
		if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
			return err
		}
		s.fd = fd
	}
	return nil
}

// sysAdd runs under t.mu with t registered but not yet watched: it gives t to the next loop and
// assigns the epoll ids there, writes
// the pending bytes as far as the sockets take them without blocking, and adds both sockets to
// epoll. The rest of a pending write goes to a goroutine that owns the side (registered as
// running, so its events are held back) and yields it when done. err means Add fails and gives
// the conns back; ioErr that writing the pending bytes failed (the tunnel is then closed by Add).
func (r *Engine) sysAdd(t *Tunnel, toServer, toClient []byte) (ioErr bool, err error) {
	lp := r.sys.loops[int(r.sys.next.Add(1)-1)%len(r.sys.loops)]
	lp.idsMu.Lock()
	for i := range t.sides {
		s := &t.sides[i]
		s.lp = lp
		s.id = lp.nextID
		lp.nextID++
		lp.ids[s.id] = s
	}
	lp.idsMu.Unlock()

	// From here the TLS sides' connections never park: the loop reads and writes them.
	for i := range t.sides {
		if nb := t.sides[i].nb; nb != nil {
			nb.SetEvented(true)
		}
	}

	// pending[i]: bytes to write to conns[1-i] before side i may be read.
	pending := [2][]byte{toServer, toClient}
	var rest [2][]byte
	var flush [2]bool // side i's pending bytes are in its TLS peer's evented buffer, not yet sent
	for i, p := range pending {
		if len(p) == 0 {
			continue
		}
		peer := &t.sides[1-i]
		if peer.tls != nil {
			if _, werr := peer.tls.Write(p); werr != nil {
				return true, nil
			}
			r.count(t, i, len(p))
			flush[i] = peer.nb.Blocked()
			continue
		}
		n, werr := writeNow(peer.raw, p)
		r.count(t, i, n)
		if werr != nil {
			return true, nil
		}
		if n < len(p) {
			rest[i] = append([]byte(nil), p[n:]...) // the caller may reuse p once Add returns
		}
	}
	// A side that is TLS gets a first turn from the run queue: its connection may hold records read
	// before the tunnel (with the upgrade's answer) that no event of the socket will announce.
	var first [2]bool
	for i := range t.sides {
		s := &t.sides[i]
		first[i] = s.tls != nil && rest[i] == nil && !flush[i]
		if rest[i] != nil || flush[i] || first[i] {
			s.state.Store(sideRunning) // before ADD: an event may be taken at once
		}
		if err := r.watchLocked(s, unix.EPOLL_CTL_ADD); err != nil {
			for j := range t.sides {
				r.detachLocked(&t.sides[j])
				if nb := t.sides[j].nb; nb != nil {
					nb.SetEvented(false) // the caller gets its connections back as they were
				}
			}
			return false, err
		}
	}
	for i := range t.sides {
		switch s := &t.sides[i]; {
		case rest[i] != nil:
			r.wg.Add(1) // before Close's Wait: Close cannot get past t.mu, held here
			go r.writePending(s, rest[i])
		case flush[i]:
			r.wg.Add(1)
			go r.finishFlush(s)
		case first[i]:
			lp.requeue(s)
		}
	}
	return false, nil
}

// writeNow writes b to raw's socket without blocking, returning how much it took.
func writeNow(raw syscall.RawConn, b []byte) (n int, err error) {
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, e := nbio.Send(fd, b[n:])
			if e != nil {
				if e != unix.EAGAIN {
					werr = e
				}
				break
			}
			n += m
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}

// writePending finishes writing Add's pending bytes for side s (to its peer), then yields s.
func (r *Engine) writePending(s *side, p []byte) {
	defer r.wg.Done()
	t := s.t
	n, err := t.conns[1-s.i].Write(p)
	r.count(t, s.i, n)
	if err != nil {
		r.closeTunnel(t, Error)
		return
	}
	t.touch()
	r.yield(s)
}

// sysDetachLocked removes t's sockets from epoll; t.mu is held and the conns are still open.
func (r *Engine) sysDetachLocked(t *Tunnel) {
	for i := range t.sides {
		r.detachLocked(&t.sides[i])
	}
}

func (r *Engine) detachLocked(s *side) {
	if s.reg {
		if err := unix.EpollCtl(s.lp.epfd, unix.EPOLL_CTL_DEL, s.fd, nil); err != nil {
			r.opts.Logf("tunnel: epoll_ctl DEL fd %d: %v", s.fd, err)
		}
		s.reg = false
	}
}

// sysForget drops t's epoll ids, so that events already fetched for it are ignored.
func (r *Engine) sysForget(t *Tunnel) {
	if lp := t.sides[0].lp; lp != nil {
		lp.idsMu.Lock()
		for i := range t.sides {
			delete(lp.ids, t.sides[i].id)
		}
		lp.idsMu.Unlock()
	}
}

// yield lets s go while its socket may still hold data that no event will report (a turn
// stopped for fairness; a blocked write finished): it sets s idle, then re-registers the
// socket (EPOLL_CTL_MOD), which queues an event if the socket is readable. A TLS side, whose
// connection may hold whole records already read, goes to its loop's run queue instead. The slow path: the
// only epoll_ctl and Tunnel.mu after Add, besides closing. An epoll failure closes the tunnel.
func (r *Engine) yield(s *side) {
	if s.tls != nil {
		// Its connection may hold records read already, which no event would announce.
		s.lp.requeue(s)
		return
	}
	t := s.t
	s.state.Store(sideIdle)
	t.mu.Lock()
	err := r.watchLocked(s, unix.EPOLL_CTL_MOD)
	t.mu.Unlock()
	if err != nil {
		r.opts.Logf("%v", err)
		r.closeTunnel(t, Error)
	}
}

// watchLocked adds (op EPOLL_CTL_ADD) or re-registers (EPOLL_CTL_MOD) s's socket, unless the
// tunnel has closed (its fd may be closed already) or s has reached EOF.
func (r *Engine) watchLocked(s *side, op int) error {
	if s.t.closed || s.t.handing || s.t.eof[s.i] {
		return nil
	}
	ev := unix.EpollEvent{Events: watchEvents, Fd: int32(uint32(s.id)), Pad: int32(uint32(s.id >> 32))}
	if err := unix.EpollCtl(s.lp.epfd, op, s.fd, &ev); err != nil {
		return fmt.Errorf("tunnel: epoll_ctl fd %d: %w", s.fd, err)
	}
	s.reg = true
	return nil
}

// worker is a loop's goroutine state. Its callbacks are method values made once, and the
// syscall results go through its fields, so a turn allocates nothing.
type worker struct {
	r   *Engine
	buf *[]byte

	rb   []byte
	rn   int
	rerr error
	wb   []byte
	wn   int
	werr error

	readFn, writeFn func(fd uintptr) bool

	events []unix.EpollEvent
	pn     int
	perr   error
	jobs   []job
	pollFn func(fd uintptr) bool
	queued []*side // the run queue, taken
}

// job is a side claimed by the loop, with the events that claimed it.
type job struct {
	s      *side
	events uint32
}

func newWorker(r *Engine) *worker {
	w := &worker{r: r, buf: r.sys.bufs.Get().(*[]byte), jobs: make([]job, 0, eventsPerWait)}
	w.readFn, w.writeFn = w.rawRead, w.rawWrite
	return w
}

func (w *worker) rawRead(fd uintptr) bool {
	w.rn, w.rerr = nbio.Recv(fd, w.rb)
	return true // never let Go park: EAGAIN ends the turn and epoll tells us when to come back
}

func (w *worker) rawWrite(fd uintptr) bool {
	w.wn, w.werr = nbio.Send(fd, w.wb)
	return true
}

// rawPoll collects ready events without blocking; returning false (none) lets Go park the
// loop until the epoll fd is readable again.
func (w *worker) rawPoll(fd uintptr) bool {
	w.pn, w.perr = nbio.EpollWait(fd, w.events)
	return w.pn > 0 || w.perr != nil
}

// run is the loop: it waits (parked in Go's netpoller) for the epoll fd to be readable,
// collects the ready events, claims their sides and runs their turns, one after the other. An
// event for a side that is owned already (by a goroutine finishing a blocked write) only tells
// its owner to read again.
func (lp *loop) run(r *Engine) {
	defer r.wg.Done()
	w := lp.w
	for {
		err := lp.epRaw.Read(w.pollFn)
		if err == nil {
			err = w.perr
		}
		if err != nil {
			if !r.sys.closing.Load() {
				// Cannot happen short of a bug; do not leave tunnels hanging unserved.
				r.opts.Logf("tunnel: epoll: %v; closing the engine", err)
				go r.Close()
			}
			return
		}
		queue := false
		lp.idsMu.RLock()
		for _, ev := range w.events[:w.pn] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				queue = true
			} else if s := lp.ids[id]; s != nil && s.claim() {
				w.jobs = append(w.jobs, job{s, ev.Events})
			}
		}
		lp.idsMu.RUnlock()
		for _, j := range w.jobs { // outside idsMu: a turn may close its tunnel (sysForget)
			w.turn(j.s, j.events)
		}
		clear(w.jobs)
		w.jobs = w.jobs[:0]
		if queue {
			lp.takeQueue(w)
			for _, s := range w.queued {
				w.turn(s, 0)
			}
			clear(w.queued)
		}
	}
}

// turn moves s's bytes to its peer; the caller has claimed s, and events is what the claiming
// event reported. It reads until the socket is drained and lets s go (release), or reads
// readsPerTurn buffers and yields s, or hands s with the data the peer would not take to a
// goroutine that finishes the write, or ends at EOF or an error keeping s for good.
func (w *worker) turn(s *side, events uint32) {
	r, t := w.r, s.t
	moved := 0 // not yet counted
	if events&eofEvents != 0 {
		s.hup = true
	}
	for n := 0; ; {
		if n == readsPerTurn {
			// Maybe not drained: let the other ready sides go first.
			r.relayed(s, moved)
			r.yield(s)
			return
		}
		b := *w.buf
		m, rerr := w.read(s, b)
		if m > 0 {
			if !w.write(s, b[:m], moved) {
				return
			}
			moved += m
			n++
		}
		switch {
		case rerr == errDrained:
			if s.tls != nil && s.own == nil { // tls has taken every whole record: the count is exact from here
				s.synced, s.apps = true, s.nb.TLSRecords()
			}
			r.relayed(s, moved)
			moved = 0
			if s.release() {
				return
			}
			continue // an event came meanwhile
		case rerr == io.EOF:
			r.relayed(s, moved)
			r.sideEOF(t, s.i) // s stays running: nothing more to read from it
			return
		case rerr != nil:
			r.closeTunnel(t, Error)
			return
		}
		if s.drained(m, len(b), events) {
			// Drained: any later data queues a new event.
			r.relayed(s, moved)
			moved = 0
			if s.release() {
				return
			}
		}
	}
}

// drained tells, after a read of m bytes into a buffer of size bytes, that the socket is drained
// without reading it again. A plain side: a short read of a stream socket (epoll(7), Q&A 9), unless
// the claiming event reported the peer's end. A TLS side: its connection's last read from the socket
// was short too, and it has returned data from every whole record read (none waits decrypted or not);
// a partial record waits for bytes whose arrival is an event. A TLS side relayed with fairlead's record
// layer: its last read from the socket was short, and it holds no whole record.
func (s *side) drained(m, size int, events uint32) bool {
	if s.tls == nil {
		return m < size && events&eofEvents == 0
	}
	if s.own != nil { // fairlead's record layer says what it holds
		return m > 0 && !s.hup && s.nb.Drained() && !s.own.HasRecord()
	}
	if m == 0 || !s.synced || s.hup || size < maxTLSPlaintext {
		return false
	}
	s.apps++
	return s.nb.Drained() && s.nb.TLSRecords() == s.apps
}

// errDrained is w.read's answer when the socket has nothing more for now.
var errDrained = errors.New("tunnel: drained")

// read reads what s's socket holds next into b (for a TLS side, the plaintext of its next record):
// n > 0 bytes, and maybe an error too (a TLS close_notify after the data); or errDrained when there
// is nothing for now; io.EOF at the end; another error when the read failed or the conn was closed.
func (w *worker) read(s *side, b []byte) (int, error) {
	if s.tls != nil {
		n, err := s.tls.Read(b)
		if err == nbio.ErrWouldBlock {
			err = errDrained
		}
		return n, err
	}
	w.rb = b
	err := s.raw.Read(w.readFn)
	w.rb = nil
	switch {
	case err != nil: // the conn was closed: the tunnel is closing
		return 0, err
	case w.rerr == unix.EAGAIN:
		return 0, errDrained
	case w.rerr != nil:
		return 0, w.rerr
	case w.rn == 0:
		return 0, io.EOF
	}
	return w.rn, nil
}

// write writes b, read from s, to s's peer; moved is what the turn moved before, not yet counted.
// True means the turn goes on; false that it ends: the tunnel failed, or a goroutine finishes the
// write, owning s meanwhile (the sender is not read while the receiver is behind: backpressure).
func (w *worker) write(s *side, b []byte, moved int) bool {
	r, t, peer := w.r, s.t, s.peer
	if peer.tls == nil {
		return w.writeSocket(s, b, moved)
	}
	if _, err := peer.tls.Write(b); err != nil {
		r.writeFailed(t, s.i)
		return false
	}
	// Evented connections never park: what the socket did not take waits in the connection.
	if peer.nb.Blocked() || s.tls != nil && s.nb.Blocked() { // (a TLS read may write: an alert, a key update)
		r.relayed(s, moved+len(b))
		r.wg.Add(1)
		go r.finishFlush(s)
		return false
	}
	return true
}

// writeSocket is write to a plain socket.
func (w *worker) writeSocket(s *side, b []byte, moved int) bool {
	r, t, peer := w.r, s.t, s.peer
	for off := 0; off < len(b); {
		w.wb = b[off:]
		err := peer.raw.Write(w.writeFn)
		w.wb = nil
		if err != nil {
			r.closeTunnel(t, Error)
			return false
		}
		if w.werr != nil {
			if w.werr == unix.EAGAIN {
				// The receiver is behind. Hand this buffer, and s, to a goroutine that waits for it
				// (and yields s afterwards), take another one, and move on.
				r.relayed(s, moved)
				r.wg.Add(1)
				go r.finishWrite(s, w.buf, off, len(b))
				w.buf = r.sys.bufs.Get().(*[]byte)
				return false
			}
			r.writeFailed(t, s.i)
			return false
		}
		off += w.wn
	}
	if s.tls != nil && s.nb.Blocked() { // its TLS read wrote (an alert, a key update) more than the socket took
		r.relayed(s, moved+len(b))
		r.wg.Add(1)
		go r.finishFlush(s)
		return false
	}
	return true
}

// relayed records n bytes moved from s to its peer (nothing if n is 0). It is called before s
// is let go, so that the counts are final when the tunnel ends.
func (r *Engine) relayed(s *side, n int) {
	if n > 0 {
		r.count(s.t, s.i, n)
		s.t.touch()
	}
}

// finishWrite writes (*bp)[off:m] to s's peer, parking in Go's netpoller as long as needed
// (until the receiver reads, or the tunnel is closed), then yields s, which it owned meanwhile.
func (r *Engine) finishWrite(s *side, bp *[]byte, off, m int) {
	defer r.wg.Done()
	t := s.t
	_, err := t.conns[1-s.i].Write((*bp)[off:m])
	r.sys.bufs.Put(bp)
	if err != nil {
		r.writeFailed(t, s.i)
		return
	}
	r.count(t, s.i, m)
	if s.tls != nil && !r.flush(s) { // its TLS read may have written too
		return
	}
	t.touch()
	r.yield(s)
}

// finishFlush waits until the sockets of s's tunnel have taken what their evented TLS connections
// still hold (written by s's turn), then yields s, which it owned meanwhile.
func (r *Engine) finishFlush(s *side) {
	defer r.wg.Done()
	if !r.flush(s) {
		return
	}
	s.t.touch()
	r.yield(s)
}

// flush waits until the sockets of s's tunnel have taken what their evented TLS connections hold.
// False means a write failed, and the tunnel is closed.
func (r *Engine) flush(s *side) bool {
	for _, x := range [2]*side{s.peer, s} {
		if x.nb != nil {
			if err := x.nb.Flush(); err != nil {
				r.writeFailed(s.t, s.i)
				return false
			}
		}
	}
	return true
}

// sysClosedWrite runs after a TLS close_notify was written to side i's connection (closeWrite),
// which tls.Conn follows with a write deadline of now: the alert, if the socket did not take it at
// once, is flushed without one (the connection refuses anything after it anyway).
func (r *Engine) sysClosedWrite(t *Tunnel, i int) {
	nb := t.sides[i].nb
	if nb == nil || !nb.Blocked() {
		return
	}
	nb.SetWriteDeadline(time.Time{}) //nolint:errcheck // Flush reports a closed connection
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if nb.Flush() != nil {
			r.closeTunnel(t, Error)
		}
	}()
}

// sysQuiesce waits, for Detach, until neither side of t is owned — no turn reading or writing it, no
// blocked write finishing — and takes both, so that none starts: t's sockets are out of epoll already.
func (r *Engine) sysQuiesce(t *Tunnel, timeout time.Duration) error {
	r.sysForget(t) // events fetched before the DEL are dropped
	deadline := time.Now().Add(timeout)
	for i := range t.sides {
		s := &t.sides[i]
		for !s.state.CompareAndSwap(sideIdle, sideRunning) {
			if time.Now().After(deadline) {
				return fmt.Errorf("tunnel: detach: a write toward %s still blocked after %s", [2]string{"the server", "the client"}[i], timeout)
			}
			time.Sleep(time.Millisecond) // a turn or a blocked write is finishing: rare, and short
		}
	}
	return nil
}
