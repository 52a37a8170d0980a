//go:build linux && !tunnel_portable

package tunnel

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
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
// Nobody blocks in epoll_wait. The epoll fd is itself pollable: it reads as ready while
// events are pending (epoll(7), Q&A 3), so it is wrapped in an *os.File and waited for through
// Go's netpoller like a socket. The poller goroutine parks there; once woken it collects up to
// eventsPerWait events with epoll_wait(timeout 0), runs the first side's turn itself and hands
// the others to idle workers (running them itself when none is idle). So an idle engine holds
// no OS thread in a system call, a lone event (the usual case) costs no goroutine hand-off, and
// a burst is spread over the workers. (Measured: a poller blocked in epoll_wait, handing every
// event to a worker, took about twice as long per round trip as this, mostly in thread and
// goroutine wake-ups.)
//
// Edge-triggered (epoll(7), "Level-triggered and edge-triggered"): the socket is put on the
// ready list each time something new happens to it (a chunk of data arrives, the peer shuts
// down or resets), and taken off when epoll_wait returns it; what happens before epoll_wait
// returns it is combined into one event (Q&A 7). Data merely left unread is not reported
// again. Who owns a side is therefore decided in user space, by side.state:
//
//	sideIdle     nobody: the next event starts a turn.
//	sideRunning  one goroutine: the poller or worker running the side's turn, or the goroutine
//	             finishing a blocked write of its bytes (below); after EOF, nobody, for good.
//	sidePending  running, and an event came meanwhile.
//
// For each event the poller either claims the side, idle -> running by compare-and-swap, and
// runs its turn (or hands it to a worker); or sets running -> pending (CAS), and the owner will
// read again; or finds it pending, and has nothing to do. A turn reads and writes to the peer
// until the socket is drained: read returned EAGAIN, or fewer bytes than asked while the event
// reported no EOF (for a stream socket that means the receive queue is empty: epoll(7), Q&A 9,
// "you can be sure of having exhausted the read I/O space"). It then lets go, running -> idle
// (CAS); if that fails, the state is pending: it sets running and reads again. No wake-up is
// lost: data that the last read did not see arrived after it, and its arrival put the socket
// on the ready list (or found it there still), so epoll_wait returns an event after it. The
// poller, taking that event, either finds the side running and makes the owner's CAS fail, or
// finds it idle (the owner let go) and claims it. (An event for data that the turn had read
// already costs one read that returns EAGAIN.) So a message turn makes no epoll_ctl call and
// takes no lock: its system calls are its reads and writes, and its share of an epoll_wait.
//
// Yielding. A turn that has read readsPerTurn buffers without draining the socket stops, so
// that one busy tunnel does not keep a worker (or the poller) from the others (epoll(7),
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
// worker ever waits for a slow receiver. When the write is done, that goroutine yields the
// side as above, so whatever arrived meanwhile is reported again. Add's pending bytes that the
// peer cannot take at once are written the same way, their side registered as running.
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
	eventsPerWait = 64 // events the poller takes per epoll_wait
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
	epfd    int             // the epoll instance, for epoll_ctl
	ep      *os.File        // the same fd, registered in Go's netpoller; Close releases it
	epRaw   syscall.RawConn // of ep
	bufs    sync.Pool       // *[]byte of BufferSize, for the worker that gave its own to a blocked write
	work    chan job        // from the poller to the workers; unbuffered: only idle workers take jobs
	closing atomic.Bool     // set by Close before it closes ep
	idsMu   sync.RWMutex
	ids     map[uint64]*side
	nextID  uint64
}

// side is one direction of a tunnel, named by the socket it reads from; it writes to its peer.
type side struct {
	t     *Tunnel
	i     int             // clientSide or serverSide
	raw   syscall.RawConn // of conns[i], obtained once
	fd    int             // of conns[i]; valid while the tunnel is not closed
	id    uint64          // epoll data
	reg   bool            // added to epoll; guarded by t.mu
	state atomic.Uint32   // sideIdle, sideRunning or sidePending; next to reg, in its padding
	peer  *side
}

// claim is the poller's answer to an event for s: true if the caller now owns s and must run
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

type job struct {
	s      *side
	events uint32
}

func (r *Engine) sysStart() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("tunnel: epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile registers it in Go's netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("tunnel: epoll fd: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "tunnel-epoll")
	epRaw, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return fmt.Errorf("tunnel: epoll fd: %w", err)
	}
	size := r.opts.BufferSize
	r.sys = sysEngine{
		epfd:   epfd,
		ep:     ep,
		epRaw:  epRaw,
		work:   make(chan job),
		ids:    make(map[uint64]*side),
		nextID: 1,
	}
	r.sys.bufs.New = func() any {
		b := make([]byte, size)
		return &b
	}
	p := newWorker(r)
	p.events = make([]unix.EpollEvent, eventsPerWait)
	p.jobs = make([]job, 0, eventsPerWait)
	p.pollFn = p.rawPoll
	r.wg.Add(1 + r.opts.Workers)
	go p.poll()
	for range r.opts.Workers {
		go newWorker(r).work()
	}
	return nil
}

// sysClose runs after every tunnel is closed: closing the epoll File wakes the parked poller
// (its RawConn.Read fails; the fd itself is closed once it has let go of it), which stops the
// workers as it exits. It then waits for every goroutine of the engine.
func (r *Engine) sysClose() {
	r.sys.closing.Store(true)
	r.sys.ep.Close()
	r.wg.Wait()
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
		var fd int
		if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
			return err
		}
		s.fd = fd
	}
	return nil
}

// sysAdd runs under t.mu with t registered but not yet watched: it assigns the epoll ids, writes
// the pending bytes as far as the sockets take them without blocking, and adds both sockets to
// epoll. The rest of a pending write goes to a goroutine that owns the side (registered as
// running, so its events are held back) and yields it when done. err means Add fails and gives
// the conns back; ioErr that writing the pending bytes failed (the tunnel is then closed by Add).
func (r *Engine) sysAdd(t *Tunnel, toServer, toClient []byte) (ioErr bool, err error) {
	r.sys.idsMu.Lock()
	for i := range t.sides {
		s := &t.sides[i]
		s.id = r.sys.nextID
		r.sys.nextID++
		r.sys.ids[s.id] = s
	}
	r.sys.idsMu.Unlock()

	// pending[i]: bytes to write to conns[1-i] before side i may be read.
	pending := [2][]byte{toServer, toClient}
	var rest [2][]byte
	for i, p := range pending {
		if len(p) == 0 {
			continue
		}
		n, werr := writeNow(t.sides[1-i].raw, p)
		r.count(t, i, n)
		if werr != nil {
			return true, nil
		}
		if n < len(p) {
			rest[i] = append([]byte(nil), p[n:]...) // the caller may reuse p once Add returns
		}
	}
	for i := range t.sides {
		s := &t.sides[i]
		if rest[i] != nil {
			s.state.Store(sideRunning) // before ADD: an event may be taken at once
		}
		if err := r.watchLocked(s, unix.EPOLL_CTL_ADD); err != nil {
			for j := range t.sides {
				r.detachLocked(&t.sides[j])
			}
			return false, err
		}
	}
	for i, p := range rest {
		if p != nil {
			r.wg.Add(1) // before Close's Wait: Close cannot get past t.mu, held here
			go r.writePending(&t.sides[i], p)
		}
	}
	return false, nil
}

// writeNow writes b to raw's socket without blocking, returning how much it took.
func writeNow(raw syscall.RawConn, b []byte) (n int, err error) {
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, e := unix.Write(int(fd), b[n:])
			if e == unix.EINTR {
				continue
			}
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
		if err := unix.EpollCtl(r.sys.epfd, unix.EPOLL_CTL_DEL, s.fd, nil); err != nil {
			r.opts.Logf("tunnel: epoll_ctl DEL fd %d: %v", s.fd, err)
		}
		s.reg = false
	}
}

// sysForget drops t's epoll ids, so that events already fetched for it are ignored.
func (r *Engine) sysForget(t *Tunnel) {
	r.sys.idsMu.Lock()
	for i := range t.sides {
		delete(r.sys.ids, t.sides[i].id)
	}
	r.sys.idsMu.Unlock()
}

// yield lets s go while its socket may still hold data that no event will report (a turn
// stopped for fairness; a blocked write finished): it sets s idle, then re-registers the
// socket (EPOLL_CTL_MOD), which queues an event if the socket is readable. The slow path: the
// only epoll_ctl and Tunnel.mu after Add, besides closing. An epoll failure closes the tunnel.
func (r *Engine) yield(s *side) {
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
	if s.t.closed || s.t.eof[s.i] {
		return nil
	}
	ev := unix.EpollEvent{Events: watchEvents, Fd: int32(uint32(s.id)), Pad: int32(uint32(s.id >> 32))}
	if err := unix.EpollCtl(r.sys.epfd, op, s.fd, &ev); err != nil {
		return fmt.Errorf("tunnel: epoll_ctl fd %d: %w", s.fd, err)
	}
	s.reg = true
	return nil
}

// worker moves bytes for the sides it is given. Its callbacks are method values made once, and
// the syscall results go through its fields, so a turn allocates nothing.
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

	// The poller's only.
	events []unix.EpollEvent
	pn     int
	perr   error
	jobs   []job
	pollFn func(fd uintptr) bool
}

func newWorker(r *Engine) *worker {
	w := &worker{r: r, buf: r.sys.bufs.Get().(*[]byte)}
	w.readFn, w.writeFn = w.rawRead, w.rawWrite
	return w
}

func (w *worker) rawRead(fd uintptr) bool {
	w.rn, w.rerr = unix.Read(int(fd), w.rb)
	return true // never let Go park: EAGAIN ends the turn and epoll tells us when to come back
}

func (w *worker) rawWrite(fd uintptr) bool {
	w.wn, w.werr = unix.Write(int(fd), w.wb)
	return true
}

// rawPoll collects ready events without blocking; returning false (none) lets Go park the
// poller until the epoll fd is readable again.
func (w *worker) rawPoll(fd uintptr) bool {
	for {
		w.pn, w.perr = unix.EpollWait(int(fd), w.events, 0)
		if w.perr != unix.EINTR {
			return w.pn > 0 || w.perr != nil
		}
	}
}

func (w *worker) work() {
	defer w.r.wg.Done()
	for j := range w.r.sys.work {
		w.turn(j.s, j.events)
	}
}

// poll waits (parked in Go's netpoller) for the epoll fd to be readable, collects the ready
// events, claims their sides, runs the first turn itself and hands the others to idle workers
// (or runs them too when none is idle). A lone event, the usual case at low load, thus costs no
// goroutine hand-off; a burst is spread over the workers. An event for a side that is owned
// already only tells its owner to read again.
func (w *worker) poll() {
	r := w.r
	defer r.wg.Done()
	defer close(r.sys.work) // the workers end when the poller does
	for {
		err := r.sys.epRaw.Read(w.pollFn)
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
		r.sys.idsMu.RLock()
		for _, ev := range w.events[:w.pn] {
			if s := r.sys.ids[uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32]; s != nil && s.claim() {
				w.jobs = append(w.jobs, job{s, ev.Events})
			}
		}
		r.sys.idsMu.RUnlock()
		for i := len(w.jobs) - 1; i >= 1; i-- {
			select {
			case r.sys.work <- w.jobs[i]:
			default:
				w.turn(w.jobs[i].s, w.jobs[i].events)
			}
		}
		if len(w.jobs) > 0 {
			w.turn(w.jobs[0].s, w.jobs[0].events)
		}
		clear(w.jobs)
		w.jobs = w.jobs[:0]
	}
}

// turn moves s's bytes to its peer; the caller has claimed s, and events is what the claiming
// event reported. It reads until the socket is drained and lets s go (release), or reads
// readsPerTurn buffers and yields s, or hands s with the data the peer would not take to
// finishWrite, or ends at EOF or an error keeping s for good.
func (w *worker) turn(s *side, events uint32) {
	r, t := w.r, s.t
	peer := s.peer
	moved := 0 // not yet counted
	for n := 0; ; {
		if n == readsPerTurn {
			// Maybe not drained: let the other ready sides go first.
			r.relayed(s, moved)
			r.yield(s)
			return
		}
		b := *w.buf
		w.rb = b
		err := s.raw.Read(w.readFn)
		w.rb = nil
		if err != nil { // the conn was closed: the tunnel is closing
			r.closeTunnel(t, Error)
			return
		}
		m, rerr := w.rn, w.rerr
		if rerr != nil {
			if rerr == unix.EINTR {
				continue
			}
			if rerr == unix.EAGAIN {
				r.relayed(s, moved)
				moved = 0
				if s.release() {
					return
				}
				continue // an event came meanwhile
			}
			r.closeTunnel(t, Error)
			return
		}
		if m == 0 {
			r.relayed(s, moved)
			r.sideEOF(t, s.i) // s stays running: nothing more to read from it
			return
		}
		for off := 0; off < m; {
			w.wb = b[off:m]
			err := peer.raw.Write(w.writeFn)
			w.wb = nil
			if err != nil {
				r.closeTunnel(t, Error)
				return
			}
			if w.werr != nil {
				if w.werr == unix.EINTR {
					continue
				}
				if w.werr == unix.EAGAIN {
					// The receiver is behind. Hand this buffer, and s, to a goroutine that
					// waits for it (and yields s afterwards), take another one, and move on.
					r.relayed(s, moved)
					r.wg.Add(1)
					go r.finishWrite(s, w.buf, off, m)
					w.buf = r.sys.bufs.Get().(*[]byte)
					return
				}
				r.writeFailed(t, s.i)
				return
			}
			off += w.wn
		}
		moved += m
		n++
		if m < len(b) && events&eofEvents == 0 {
			// Drained (a short read of a stream socket): any later data queues a new event.
			r.relayed(s, moved)
			moved = 0
			if s.release() {
				return
			}
		}
	}
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
	t.touch()
	r.yield(s)
}
