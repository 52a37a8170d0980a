package relay

// A binary upgrade moves the relay's subscribers to the new process (issue #38): each stream stops
// here between two messages, and between two of its client's frames (a WebSocket), once what is
// queued for it is sent (Streams.Detach); its socket and what it was sent go to the new process,
// which subscribes it to the same topic and goes on from there (Route.Adopt): the snapshot it has
// that the client was not sent, then each one after. The client sees nothing: not a byte lost,
// repeated or cut.
//
// A stream over HTTPS moves with its TLS session: once its writer and reader stopped, the session is
// taken over from crypto/tls (tlsrecord.TakeOver, from what the front end's socket captured of it),
// its state (keys, sequence numbers, the client's bytes read but not yet given to the stream) goes
// with the socket, and the new process resumes it with fairlead's record layer (tlsrecord.Resume): the
// stream's code there reads and writes a net.Conn as for a plain client. A session crypto/tls keeps
// (not captured, a suite the record layer has not, part of a record or the client's close_notify
// held) stays here, to end with the drain.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
	"github.com/fasthttp/websocket"
)

// wsDetachWait bounds how long a WebSocket subscriber's detach waits for its reader to stop between
// two of the client's frames.
const wsDetachWait = 2 * time.Second

// wsHoldWait is how long a WebSocket subscriber taken over holds the change messages it receives when
// this process may be behind the old one (wsStream.holdC).
const wsHoldWait = time.Second

// wsWatchWait is how long a WebSocket subscriber taken over that was sent no change message is watched
// for a change it missed during the switch (wsStream.watchC): the fetch that a change published then
// causes has ended.
const wsWatchWait = 5 * time.Second

// Resume is what a subscriber was sent, for another process to go on from: the version of the last
// snapshot it got (a subscriber of change messages: the topic's version when it stopped), whether
// that was a seed, and, when the versions are not the upstream's (local counts, a seed's), the
// SHA-256 of that snapshot's body, by which another process, counting its own, compares.
type Resume struct {
	Version uint64
	Seed    bool
	Sum     []byte
	Started bool   // an SSE stream whose first event was sent (App Configuration names it apart)
	Change  []byte // a WebSocket of change messages: the last one it was sent
}

// Moved is a stream detached from this process (Streams.Detach), to go on in another (Route.Adopt).
type Moved struct {
	Topic  string
	Kind   string // "sse" or "websocket"
	Resume Resume
	Client string // the client's address
	Opened time.Time
	File   *os.File // its socket; the caller owns it
	// TLS is the stream's TLS session, nil for a plain client: its state (keys: never log it), the
	// plaintext the client sent that the stream has not read included (a WebSocket's next frames).
	TLS *tlsrecord.State
}

// Streams are a relay's running subscriber streams (ServeOptions.Streams).
type Streams struct {
	mu sync.Mutex
	m  map[*stream]struct{}
}

// NewStreams returns an empty set of streams.
func NewStreams() *Streams { return &Streams{m: map[*stream]struct{}{}} }

// Len returns how many streams run.
func (ss *Streams) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// stream is a running stream as Streams holds it: what Detach asks of its writer, and its answer.
type stream struct {
	ss                  *Streams
	topic, kind, client string
	opened              time.Time
	movable             bool          // its socket can go to another process (movable)
	detach              chan struct{} // closed by Detach: the writer stops at its next message boundary
	result              chan *Moved   // the writer's answer to Detach: nil when it cannot move

	mu                         sync.Mutex
	asked, answered, abandoned bool // abandoned: Detach no longer waits for the answer
}

// add registers the stream of a connection (nil without a set: a Serve of no relay).
func (ss *Streams) add(c net.Conn, topic, kind string) *stream {
	if ss == nil {
		return nil
	}
	h := &stream{ss: ss, topic: topic, kind: kind, client: c.RemoteAddr().String(), opened: time.Now(),
		movable: movable(c), detach: make(chan struct{}), result: make(chan *Moved, 1)}
	ss.mu.Lock()
	ss.m[h] = struct{}{}
	ss.mu.Unlock()
	return h
}

// addStaying registers a stream that cannot move to another process (an HTTP/2 stream's: its
// connection stays): Detach counts it as staying, to end with the drain.
func (ss *Streams) addStaying(client, topic, kind string) *stream {
	if ss == nil {
		return nil
	}
	h := &stream{ss: ss, topic: topic, kind: kind, client: client, opened: time.Now(), result: make(chan *Moved, 1)}
	ss.mu.Lock()
	ss.m[h] = struct{}{}
	ss.mu.Unlock()
	return h
}

// detaching returns the channel Detach closes (nil, never closed, without a set).
func (h *stream) detaching() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.detach
}

// done unregisters the stream as it ends; a Detach that asked for it is told it did not move.
func (h *stream) done() {
	if h == nil {
		return
	}
	h.ss.mu.Lock()
	delete(h.ss.m, h)
	h.ss.mu.Unlock()
	h.answer(nil)
}

// movable reports whether the socket of c, a connection add accepted, can go to another process: a
// plain TCP connection, a TLS one whose session the front end captured with a suite the record layer
// has (tlsrecord.TakeOver can take it over from crypto/tls), or one whose session the record layer
// carries already (a stream taken over from an old process).
func movable(c net.Conn) bool {
	switch s := frontend.Socket(c).(type) {
	case *tls.Conn:
		nb, ok := s.NetConn().(*nbio.TCPConn)
		if !ok || nb.TLSSession() == nil {
			return false
		}
		cs := s.ConnectionState()
		return cs.HandshakeComplete && tlsrecord.Supports(cs.Version, cs.CipherSuite)
	case interface{ File() (*os.File, error) }: // a *net.TCPConn, a *tlsrecord.NetConn
		return true
	}
	return false
}

// hand gives the stream's socket (of c, a connection add accepted) and what its client was sent to
// Detach, with its TLS session if it has one; the writer then returns, and its connection closes here
// only. The reader and the writer of c have stopped. stays: the stream did not move and its connection
// is as it was, for the writer to go on with (a TLS session crypto/tls keeps: TakeOver found part of a
// record, or the client's close_notify); otherwise it ends here, moved or not.
func (h *stream) hand(c net.Conn, r Resume) (stays bool) {
	sock := frontend.Socket(c)
	var st *tlsrecord.State
	switch s := sock.(type) {
	case *tls.Conn:
		nb, ok := s.NetConn().(*nbio.TCPConn)
		if !ok {
			h.answer(nil)
			return true
		}
		own, left := tlsrecord.TakeOver(s, nb, make([]byte, 4096))
		if own == nil {
			h.answer(nil) // what it took out of crypto/tls (left) is the client's bytes a stream ignores
			return true
		}
		// The session is own's now: crypto/tls's close_notify, as c closes here, must not reach the
		// socket. Its descriptor closes once File made the one that moves.
		defer nb.Close()
		cur := own.State()
		if len(left)+len(cur.Plain)+len(cur.Pending) > tlsrecord.MaxRecord { // more than a Resume takes
			h.answer(nil)
			return false
		}
		cur.Plain = append(left, cur.Plain...) // the client's next bytes, read first in the new process
		st, sock = &cur, own
	case *tlsrecord.NetConn:
		cur := s.State()
		st = &cur
	}
	fs, ok := sock.(interface{ File() (*os.File, error) })
	if !ok {
		h.answer(nil)
		return false
	}
	f, err := fs.File()
	if err != nil {
		h.answer(nil)
		return false
	}
	h.answer(&Moved{Topic: h.topic, Kind: h.kind, Resume: r, Client: h.client, Opened: h.opened, File: f, TLS: st})
	return false
}

// answer answers Detach once; a socket nobody waits for any more is closed (its client reconnects).
func (h *stream) answer(m *Moved) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.asked || h.answered || h.abandoned {
		if m != nil {
			m.File.Close()
		}
		return
	}
	h.answered = true
	h.result <- m
}

// Detach stops every stream that can move (movable: plain, or over HTTPS with a session fairlead's
// record layer can carry) at its next message boundary, once what is queued for it is sent, and
// returns them, their sockets open (the caller closes the files) with their TLS sessions; stayed
// counts those that stay here (a TLS session crypto/tls keeps, gone meanwhile, or not stopped within
// timeout: a writer blocked on a client that does not read), to end with the drain.
func (ss *Streams) Detach(timeout time.Duration) (moved []*Moved, stayed int) {
	if ss == nil {
		return nil, 0
	}
	var asked []*stream
	ss.mu.Lock()
	for h := range ss.m {
		h.mu.Lock()
		switch {
		case !h.movable:
			stayed++
		case !h.asked:
			h.asked = true
			close(h.detach)
			asked = append(asked, h)
		}
		h.mu.Unlock()
	}
	ss.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	late := false
	for _, h := range asked {
		var m *Moved
		if !late {
			select {
			case m = <-h.result:
			case <-deadline.C:
				late = true
			}
		}
		if late {
			h.mu.Lock()
			h.abandoned = true
			select {
			case m = <-h.result:
			default:
			}
			h.mu.Unlock()
		}
		if m != nil {
			moved = append(moved, m)
		} else {
			stayed++
		}
	}
	return moved, stayed
}

// DetachStreams is Streams.Detach of the relay's streams.
func (rr *Route) DetachStreams(timeout time.Duration) (moved []*Moved, stayed int) {
	return rr.opts.Streams.Detach(timeout)
}

// snapshotSum returns the SHA-256 of the snapshot's body, computed once.
func (s *Snapshot) snapshotSum() []byte {
	return s.sum.get(func() any { b := sha256.Sum256(s.Body); return b[:] }).([]byte)
}

// resumeSum is the Sum of a Resume that ends at s: none when s's version is the upstream's.
func resumeSum(s *Snapshot) []byte {
	if s == nil || !s.localVersion && !s.Seed {
		return nil
	}
	return s.snapshotSum()
}

// differs reports whether s, a snapshot of this process, is one the client resumed with r was not
// sent: a newer version, or other content when the versions cannot be compared.
func differs(s *Snapshot, r Resume) bool {
	if r.Sum != nil || s.localVersion || s.Seed {
		return !bytes.Equal(s.snapshotSum(), r.Sum)
	}
	return s.Version > r.Version
}

// same reports whether s is the snapshot the client resumed with r has (and s's version, in this
// process's count, is then where the stream goes on from).
func same(s *Snapshot, r Resume) bool {
	if r.Sum != nil || s.localVersion || s.Seed {
		return bytes.Equal(s.snapshotSum(), r.Sum)
	}
	return s.Version == r.Version
}

// Adopt goes on with a stream an old process detached (a binary upgrade, Moved): conn is its
// connection, made of m.File by the caller; release, if not nil, runs when the stream ends. The
// stream is subscribed to its topic, sent this process's snapshot if the client was not, and each
// newer one after (a subscriber of change messages that may have missed one during the switch is
// told to resync). An error (the relay no longer serves the topic) leaves conn to the caller.
func (rr *Route) Adopt(m Moved, conn net.Conn, release func()) error {
	ctx, cancel := context.WithTimeout(context.Background(), rr.cfg.WaitTimeout.D)
	defer cancel()
	topic, ready := rr.ready([]byte(m.Topic))
	if !ready {
		if status, reason := rr.activate(ctx, topic); status != 0 {
			return fmt.Errorf("topic %s: %s", topic, reason)
		}
	}
	appConfig := rr.spec.Protocol == "appconfiguration"
	switch m.Kind {
	case "sse":
		rr.adoptSSE(m, topic, conn, release, appConfig)
		return nil
	case "websocket":
		return rr.adoptWebSocket(m, topic, conn, release, appConfig)
	}
	return fmt.Errorf("a stream of kind %q", m.Kind)
}

// entry registers an adopted stream as add does, with the time it opened in the old process.
func (rr *Route) entry(conn net.Conn, m Moved, topic string) *stream {
	h := rr.opts.Streams.add(conn, topic, m.Kind)
	if h != nil && !m.Opened.IsZero() {
		h.opened = m.Opened
	}
	return h
}

// adoptSSE goes on with an SSE stream: the current snapshot if the client was not sent it, then
// each newer one, named as they were to come.
func (rr *Route) adoptSSE(m Moved, topic string, conn net.Conn, release func(), appConfig bool) {
	r := m.Resume
	st := &sseStream{conn: conn, w: conn, opts: rr.opts, first: sseSnapshot, next: sseSnapshot, last: r.Version, seed: r.Seed}
	if appConfig {
		st.first, st.next = sseRegistration, sseConfigPayload
	}
	st.name = st.first
	if r.Started {
		st.name = st.next
	}
	st.sub = rr.hub.Subscribe(topic, SSE) // first, then the current snapshot: none is missed between
	cur := rr.hub.Snapshot(topic)
	st.h = rr.entry(conn, m, topic)
	go func() {
		defer func() {
			if release != nil {
				release()
			}
		}()
		defer conn.Close()
		defer st.sub.Close()
		defer st.h.done()
		switch {
		case cur != nil && differs(cur, r): // published during the switch
			st.deadline()
			if _, err := conn.Write(cur.sseEvent(st.name)); err != nil {
				return
			}
			st.last, st.seed, st.sent, st.name = cur.Version, cur.Seed, cur, st.next
		case cur != nil && same(cur, r):
			st.last, st.seed, st.sent = cur.Version, cur.Seed, cur
		}
		st.loop()
	}()
}

// adoptWebSocket goes on with a WebSocket subscriber: its connection is taken up where it stopped
// (no handshake: the upgrader's answer is swallowed), with the same keep-alives and close handling.
// App Configuration's is sent the change frame of a snapshot it was not told of; one of the
// upstream's change messages, which cannot be made again, is told to resync if its topic changed
// during the switch.
func (rr *Route) adoptWebSocket(m Moved, topic string, conn net.Conn, release func(), appConfig bool) error {
	r := m.Resume
	fc := &wsConn{Conn: conn}
	fc.swallow.Store(true)
	req := &http.Request{Method: http.MethodGet, Header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
		"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"AAAAAAAAAAAAAAAAAAAAAA=="}}}
	wc, err := wsUpgrader.Upgrade(&hijackWriter{conn: fc}, req, nil)
	fc.swallow.Store(false)
	if err != nil {
		return err
	}
	ws := &wsStream{c: wc, fc: fc, opts: rr.opts, hub: rr.hub, topic: topic, lastChange: r.Change}
	resync := false
	if appConfig {
		ws.sub = rr.hub.Subscribe(topic, Snapshots)
		cur := rr.hub.Snapshot(topic)
		ws.ac = &appConfigWS{topic: topic, since: r.Version}
		switch {
		case cur != nil && differs(cur, r):
			ws.firstFrame, ws.ac.since, ws.ac.snap = cur.changeFrame(topic), cur.Version, cur
		case cur != nil && same(cur, r):
			ws.ac.since, ws.ac.snap = cur.Version, cur
		}
	} else if r.Change != nil {
		// The change messages this process got after the last one the client was sent are sent
		// first; when that one is not among them, they are held (wsStream.holdC).
		var latest [][]byte
		var found bool
		ws.sub, latest, found = rr.hub.SubscribeAfter(topic, WebSocket, r.Change)
		if found {
			ws.first = latest
		} else {
			for _, msg := range latest {
				ws.held = append(ws.held, Message{Change: msg})
			}
			ws.skipTo, ws.holdC = r.Change, time.After(wsHoldWait)
		}
	} else {
		// No change message sent yet: which of this process's came before the client subscribed
		// cannot be told, so snapshots are watched for a change it missed (wsStream.watchC).
		ws.sub = rr.hub.Subscribe(topic, WebSocket|Snapshots)
		cur := rr.hub.Snapshot(topic)
		ws.watching, ws.seen, ws.watchC = true, r, time.After(wsWatchWait)
		resync = cur != nil && differs(cur, r)
	}
	ws.h = rr.entry(conn, m, topic)
	go func() {
		defer func() {
			if release != nil {
				release()
			}
		}()
		defer conn.Close()
		defer func() { ws.sub.Close() }() // the subscriber of the end (unwatch replaces it)
		defer wc.Close()
		defer ws.h.done()
		if resync {
			ws.resyncNow()
			return
		}
		ws.run()
	}()
	return nil
}

// resyncNow tells the client to reconnect and fetch the snapshot (close 1012), as a change it was
// not sent happened during the switch; it waits a moment for the client's close.
func (ws *wsStream) resyncNow() {
	_ = ws.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseServiceRestart, "resync"),
		time.Now().Add(ws.opts.WriteTimeout))
	_ = ws.c.SetReadDeadline(time.Now().Add(wsCloseWait))
	for {
		if _, _, err := ws.c.NextReader(); err != nil {
			return
		}
	}
}

// errDetached ends a WebSocket subscriber's reader stopped between two frames to move.
var errDetached = errors.New("relay: stream detached")

// wsConn is a WebSocket subscriber's connection under its websocket.Conn. It follows the client's
// frames as their bytes pass up, so that the reader can be stopped between two (stopping): what the
// client sends next stays in the socket, whole, for the new process. It also serves the bytes read
// with the handshake first, and swallows what is written while swallow is set (the handshake answer
// of a connection taken up, Route.Adopt).
type wsConn struct {
	net.Conn
	pending  []byte
	stopping atomic.Bool // set to move the stream: Read returns errDetached at the next frame boundary
	detached atomic.Bool // Read did
	swallow  atomic.Bool

	fr       frames    // the reader's only
	finishBy time.Time // stopping in the middle of a frame: its end is waited for until then
}

func (c *wsConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.fr.scan(p[:n])
		return n, nil
	}
	for {
		if c.stopping.Load() && c.fr.between() {
			c.detached.Store(true)
			return 0, errDetached
		}
		n, err := c.Conn.Read(p)
		c.fr.scan(p[:n])
		if n > 0 || err == nil || !c.stopping.Load() || !isTimeout(err) {
			return n, err
		}
		if c.fr.between() {
			continue
		}
		if !c.finishBy.IsZero() { // the rest of the frame did not come
			return n, err
		}
		c.finishBy = time.Now().Add(wsDetachWait / 2)
		if c.Conn.SetReadDeadline(c.finishBy) != nil {
			return n, err
		}
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	if c.swallow.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// isTimeout reports whether err is a passed deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// frames follows a client's WebSocket frames (RFC 6455 section 5.2) through the bytes read.
type frames struct {
	hdr  [14]byte
	hn   int    // bytes of the current frame's header so far
	rest uint64 // bytes of its payload still to come
	frag bool   // a data message in fragments is under way (its final frame not read)
}

// between reports whether the bytes so far end between two frames, outside a fragmented message.
func (f *frames) between() bool { return f.hn == 0 && f.rest == 0 && !f.frag }

// scan follows b, the next bytes of the client.
func (f *frames) scan(b []byte) {
	for len(b) > 0 {
		if f.rest > 0 {
			n := min(uint64(len(b)), f.rest)
			f.rest -= n
			b = b[n:]
			continue
		}
		f.hdr[f.hn] = b[0]
		f.hn++
		b = b[1:]
		if f.hn < 2 {
			continue
		}
		need := 2
		switch f.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if f.hdr[1]&0x80 != 0 {
			need += 4 // the mask
		}
		if f.hn < need {
			continue
		}
		var n uint64
		switch l := f.hdr[1] & 0x7f; l {
		case 126:
			n = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		case 127:
			n = binary.BigEndian.Uint64(f.hdr[2:10])
		default:
			n = uint64(l)
		}
		if op := f.hdr[0] & 0x0f; op < 8 { // a data or continuation frame: the message ends with its final one
			f.frag = f.hdr[0]&0x80 == 0
		}
		f.hn, f.rest = 0, n
	}
}
