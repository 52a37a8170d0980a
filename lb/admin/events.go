package admin

import (
	"bufio"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/valyala/fasthttp"
)

// GET /events: the event stream as Server-Sent Events, for the status page and for anyone with curl
// (https://html.spec.whatwg.org/multipage/server-sent-events.html):
//
//	retry: 2000                      once, first: how long an EventSource waits before reconnecting
//
//	event: snapshot                  at once, then every 2 s: the document of GET /api/status, on one line;
//	data: {"config_files":[...],...}  the first whole, the later ones with "events": null and each
//	                                 pool's last 3 rate steps (the past the first one carried)
//
//	event: leader_changed            each event of the stream (but check_answered), as it is published
//	id: 42                           its seq
//	data: {"seq":42,"time":"2026-12-01T10:00:00.123Z","kind":"leader_changed","pool":"platform","server":"10.0.0.2:8080","old":"10.0.0.1:8080","status":0,"latency_ms":0,"detail":"","severity":"ok"}
//
//	: ping                           every 15 s, so that proxies keep an idle stream open
//
// Probe answers (check_answered) are left out unless asked for with GET /events?checks=1: there is one
// per probe of every server, and each snapshot already carries every server's last answer, its latency
// and its time (servers[].check), which is what the status page shows.
//
// The snapshot and ping intervals are Options.SnapshotEvery and PingEvery.
//
// A subscriber never slows fairlead: the Backend calls deliver, which only tries a send on a bounded
// buffer. A client that falls EventsBuffer events behind is dropped: its stream ends (an EventSource
// reconnects and starts again from a snapshot). A stream also ends when its client goes away (the next
// write fails, within a snapshot interval), when the admin server shuts down and when the Handler
// closes.

const (
	// EventsBuffer is how many events an /events client may fall behind before it is dropped.
	EventsBuffer = 512
	// retryMs is the reconnection delay the stream asks of an EventSource.
	retryMs = 2000
	// writeTimeout bounds each write to the client: a client that reads nothing for this long, with
	// its socket buffers full, is cut even when no events arrive to overflow its buffer.
	writeTimeout = 10 * time.Second
	// closeGrace is how long a stream that ends (dropped, or fairlead stopping) may still take to
	// write what it has; a client that does not read it is cut then.
	closeGrace = time.Second
	// recentSteps is how many steps of each pool's rates the snapshots after a stream's first carry.
	recentSteps = 3
)

// StreamEvent is an event as /events sends it: the data line of every message but snapshots.
// Its fields are those of event.Event, with the kind as its name and the latency in milliseconds.
type StreamEvent struct {
	Seq       uint64    `json:"seq"`        // position in the stream, from 1, numbered on by the new process of a binary upgrade (also the message's id)
	Time      time.Time `json:"time"`       // when it was published
	Kind      string    `json:"kind"`       // the event kind, as in the message's event field
	Pool      string    `json:"pool"`       // the pool ("" for reloads)
	Server    string    `json:"server"`     // the server's address; for leader_changed the new leader ("" for none)
	Old       string    `json:"old"`        // leader_changed: the previous leader ("" for none)
	Status    int       `json:"status"`     // check_answered: the answer's status (0 on a transport error)
	LatencyMs float64   `json:"latency_ms"` // check_answered: how long the probe took
	Detail    string    `json:"detail"`     // why: an error, a status, who acted
	// Severity is what the event means for the service, decided in one place (package event) for
	// every reader, the log's level and the status page's colour included: "outage" (a pool down, a
	// leader pool left without a leader), "warn" (a loss that still serves: a server down, a failover,
	// a split brain, a failed reload), "ok" (a recovery: a server or pool up, a failback, a leader
	// elected) or "info".
	Severity string `json:"severity"`
}

func streamEventOf(e event.Event) StreamEvent {
	return StreamEvent{Seq: e.Seq, Time: e.Time, Kind: e.Kind.String(), Pool: e.Pool, Server: e.Server, Old: e.Old,
		Status: e.Status, LatencyMs: float64(e.Latency) / float64(time.Millisecond), Detail: e.Detail,
		Severity: e.Severity().String()}
}

// eventSub is one /events client's subscription to the Backend's events.
type eventSub struct {
	events  chan event.Event
	dropped chan struct{} // closed when events overflowed
	once    sync.Once
	checks  bool // send check_answered too
}

// deliver is the subscriber (Backend.Subscribe): it runs in the publisher's goroutine, possibly in
// several at once and even after the subscription was cancelled, so it only tries a send and never
// blocks.
func (s *eventSub) deliver(e event.Event) {
	if e.Kind == event.CheckAnswered && !s.checks {
		return
	}
	select {
	case s.events <- e:
	default:
		s.once.Do(func() { close(s.dropped) })
	}
}

// serveEvents is GET /events.
func (h *Handler) serveEvents(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		ctx.Error("405 Method Not Allowed\n", fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set(fasthttp.HeaderAllow, fasthttp.MethodGet) // after Error, which resets the response
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no") // nginx in front: do not buffer the stream
	// The connection ends with the stream, so that nothing waits for a keep-alive request after it.
	ctx.SetConnectionClose()

	sub := &eventSub{events: make(chan event.Event, EventsBuffer), dropped: make(chan struct{}),
		checks: string(ctx.QueryArgs().Peek("checks")) == "1"}
	cancel := h.b.Subscribe(sub.deliver)
	// The stream writer runs in its own goroutine and writes into a pipe that the connection's
	// goroutine copies to the client; it may not touch ctx. What it needs of ctx is taken here: the
	// server's shutdown channel (closed by ShutdownWithContext, which otherwise waits for the stream)
	// and the connection, whose write deadline unblocks a write to a client that does not read.
	st := &stream{h: h, sub: sub, srvDone: ctx.Done(), dl: &writeDeadline{conn: ctx.Conn(), timeout: writeTimeout, grace: closeGrace}}
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer cancel()
		st.run(w)
	})
}

// stream is one running /events stream.
type stream struct {
	h       *Handler
	sub     *eventSub
	srvDone <-chan struct{} // the admin server shuts down (nil: never)
	dl      *writeDeadline
	buf     []byte
}

// run writes the stream until it ends; each return ends it.
func (st *stream) run(w *bufio.Writer) {
	snapshots := time.NewTicker(st.h.o.SnapshotEvery)
	defer snapshots.Stop()
	pings := time.NewTicker(st.h.o.PingEvery)
	defer pings.Stop()
	// A watchdog cuts a write blocked on a client that does not read once the stream must end; the
	// loop below returns on the same signals when it is not blocked.
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-finished:
			return
		case <-st.sub.dropped:
		case <-st.srvDone:
		case <-st.h.closed:
		}
		st.dl.end()
	}()

	st.buf = strconv.AppendInt(append(st.buf[:0], "retry: "...), retryMs, 10)
	st.buf = append(st.buf, "\n\n"...)
	st.appendSnapshot(true)
	for {
		if !st.flush(w) {
			return
		}
		select {
		case <-st.sub.dropped:
			return
		case <-st.srvDone:
			return
		case <-st.h.closed:
			return
		default:
		}
		select {
		case e := <-st.sub.events:
			st.appendEvent(e)
			// Batch a burst into one write.
			for n := len(st.sub.events); n > 0; n-- {
				st.appendEvent(<-st.sub.events)
			}
		case <-snapshots.C:
			st.appendSnapshot(false)
		case <-pings.C:
			st.buf = append(st.buf, ": ping\n\n"...)
		case <-st.sub.dropped:
			return
		case <-st.srvDone:
			return
		case <-st.h.closed:
			return
		}
	}
}

// flush writes what run has put in st.buf; false means the client is gone.
func (st *stream) flush(w *bufio.Writer) bool {
	st.dl.extend()
	if _, err := w.Write(st.buf); err != nil {
		return false
	}
	st.buf = st.buf[:0]
	return w.Flush() == nil
}

func (st *stream) appendEvent(e event.Event) {
	data, _ := json.Marshal(streamEventOf(e)) // cannot fail: strings, numbers and a time
	st.buf = append(st.buf, "event: "...)
	st.buf = append(st.buf, e.Kind.String()...)
	st.buf = strconv.AppendUint(append(st.buf, "\nid: "...), e.Seq, 10)
	st.buf = append(append(append(st.buf, "\ndata: "...), data...), "\n\n"...)
}

// appendSnapshot appends the status document: whole for the first snapshot of a stream, without the
// past the stream has sent already for the later ones (no events, the last recentSteps of the rates).
func (st *stream) appendSnapshot(first bool) {
	s := st.h.b.Status()
	if !first {
		s = s.recent(recentSteps)
	}
	// One line: JSON without indentation has no newline, so one data field carries it.
	data, _ := json.Marshal(s)
	st.buf = append(append(append(st.buf, "event: snapshot\ndata: "...), data...), "\n\n"...)
}

// writeDeadline sets the write deadline of a stream's connection: extended before each write while the
// stream runs, brought to closeGrace from now when it must end, and never extended again after that.
type writeDeadline struct {
	mu             sync.Mutex
	conn           net.Conn
	timeout, grace time.Duration // writeTimeout, closeGrace
	ending         bool
}

func (d *writeDeadline) extend() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ending {
		d.conn.SetWriteDeadline(time.Now().Add(d.timeout)) //nolint:errcheck // a closed conn fails the write anyway
	}
}

func (d *writeDeadline) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ending = true
	d.conn.SetWriteDeadline(time.Now().Add(d.grace)) //nolint:errcheck
}
