package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// ServeOptions configures Serve. The zero value is usable.
type ServeOptions struct {
	// KeepAlive is the interval of the SSE comment line ": keep-alive" and of the WebSocket
	// pings while a stream is idle. Default 25s.
	KeepAlive time.Duration
	// WriteTimeout is how long a write to a streaming client may block before the client is
	// dropped. Default 10s.
	WriteTimeout time.Duration
	// KeepHijacked says that the fasthttp.Server has KeepHijackedConns set: a stream then runs
	// in a goroutine of its own and fasthttp's hijack goroutine returns at once, releasing the
	// request's context. Without it a stream runs in the hijack goroutine, since fasthttp
	// closes the connection when that returns.
	KeepHijacked bool
	// Streams, if set, holds the running streams, so that a binary upgrade can move them to the new
	// process (Streams.Detach, Route.Adopt).
	Streams *Streams
}

// run runs stream, in a goroutine of its own when the server keeps hijacked connections.
func (o *ServeOptions) run(stream func()) {
	if o.KeepHijacked {
		go stream()
		return
	}
	stream()
}

const (
	defaultKeepAlive    = 25 * time.Second
	defaultWriteTimeout = 10 * time.Second
	// wsReadLimit bounds a message read (and discarded) from a WebSocket client.
	wsReadLimit = 64 << 10
	// wsCloseWait is how long a WebSocket writer waits for the client to answer its close
	// frame before closing the connection.
	wsCloseWait = time.Second
)

var (
	sseDropped   = []byte("event: dropped\ndata: {}\n\n")
	sseKeepAlive = []byte(": keep-alive\n\n")
	sseOpen      = []byte(": ok\n\n")
)

// wsUpgrader terminates client WebSocket upgrades: any origin, no subprotocol. A subscriber
// reads only control frames, so its read buffer is small, and its write buffer comes from a
// pool for the time of a write, so that an idle subscriber holds none.
var wsUpgrader = websocket.Upgrader{
	CheckOrigin:     func(*http.Request) bool { return true },
	ReadBufferSize:  1024,
	WriteBufferPool: &sync.Pool{},
}

// prepared returns the change as a WebSocket text message framed once for every subscriber.
func (m *Message) prepared() *websocket.PreparedMessage {
	prepare := func() any {
		pm, err := websocket.NewPreparedMessage(websocket.TextMessage, m.Change)
		if err != nil {
			panic(err) // only compression can fail, and none is used
		}
		return pm
	}
	if m.encoded == nil { // a Message not made by PublishChange
		return prepare().(*websocket.PreparedMessage)
	}
	return m.encoded.get(prepare).(*websocket.PreparedMessage)
}

// Serve answers one client request for topic (already validated by the caller) on hub:
//
//   - GET or HEAD, without a WebSocket upgrade and without "Accept: text/event-stream": the
//     cached snapshot (200, application/json, ETag, Cache-Control: no-cache), or 304 when
//     If-None-Match matches the ETag. Without a snapshot yet, it waits for the first one
//     until reqCtx ends, then answers 503 with Retry-After: 1.
//   - GET with "Accept: text/event-stream": a Server-Sent Events stream of the topic's
//     snapshots, each sent as "id: <version>\nevent: snapshot\ndata: ...\n\n", starting with
//     the current one unless Last-Event-ID is at least its version. Waiting for the first
//     snapshot is bounded by reqCtx as above (503 before the stream starts); reqCtx does not
//     bound the stream itself.
//   - GET with a WebSocket upgrade: a WebSocket that relays the upstream's change messages
//     as text messages; what the client sends is discarded.
//   - Any other method: 405 with Allow: GET, HEAD.
//
// A slow streaming client is dropped by the Hub: its SSE stream ends with an
// "event: dropped" event, its WebSocket with close code 1013; Hub.Close ends SSE streams
// and closes WebSockets with 1001.
func Serve(ctx *fasthttp.RequestCtx, reqCtx context.Context, hub *Hub, topic string, opts ServeOptions) {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = defaultKeepAlive
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = defaultWriteTimeout
	}
	get := ctx.IsGet()
	if !get && !ctx.IsHead() {
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("method not allowed")
		return
	}
	switch {
	case get && websocket.FastHTTPIsWebSocketUpgrade(ctx):
		serveWebSocket(ctx, hub, topic, opts)
	case get && acceptsEventStream(ctx.Request.Header.Peek("Accept")):
		serveSSE(ctx, reqCtx, hub, topic, opts)
	default:
		serveSnapshot(ctx, reqCtx, hub, topic)
	}
}

// RequestKind returns what Serve makes of a GET request: "websocket" (an upgrade), "sse"
// (Accept: text/event-stream) or "snapshot".
func RequestKind(ctx *fasthttp.RequestCtx) string {
	switch {
	case websocket.FastHTTPIsWebSocketUpgrade(ctx):
		return "websocket"
	case acceptsEventStream(ctx.Request.Header.Peek("Accept")):
		return "sse"
	}
	return "snapshot"
}

// unavailable answers 503 with Retry-After: 1, for a topic whose first snapshot did not
// arrive in time (or a closed Hub).
func unavailable(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	ctx.Response.Header.Set("Retry-After", "1")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString("snapshot not available yet")
}

func serveSnapshot(ctx *fasthttp.RequestCtx, reqCtx context.Context, hub *Hub, topic string) {
	serveSnapshotAs(ctx, reqCtx, hub, topic, nil)
}

// serveSnapshotAs answers the topic's snapshot, as it is or, with as, in the representation as
// makes of it (with its own entity tag); as failing is a 502.
func serveSnapshotAs(ctx *fasthttp.RequestCtx, reqCtx context.Context, hub *Hub, topic string, as func(*Snapshot) (body []byte, etag string, err error)) {
	s, err := hub.WaitSnapshot(reqCtx, topic)
	if err != nil {
		unavailable(ctx)
		return
	}
	hub.Touch(topic) // a topic read by GETs alone is not idle
	body, etag := s.Body, s.ETag
	if as != nil {
		if body, etag, err = as(s); err != nil {
			ctx.Error("502 Bad Gateway: the upstream's configuration cannot be served in this form\n", fasthttp.StatusBadGateway)
			return
		}
	}
	h := &ctx.Response.Header
	h.Set("Cache-Control", "no-cache")
	if etag != "" {
		h.Set("ETag", etag)
		if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && etagMatches(inm, etag) {
			ctx.SetStatusCode(fasthttp.StatusNotModified)
			return
		}
	}
	h.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	// Published snapshots are immutable, so the body is served without a copy.
	ctx.Response.SetBodyRaw(body)
}

// etagMatches reports whether an If-None-Match value matches etag, with the weak comparison
// RFC 9110 prescribes for it: "*", or a list member equal to etag once W/ prefixes are
// ignored.
func etagMatches(inm []byte, etag string) bool {
	inm = bytes.TrimSpace(inm)
	if len(inm) == 1 && inm[0] == '*' {
		return true
	}
	want := trimWeak([]byte(etag))
	for len(inm) > 0 {
		var tag []byte
		if i := bytes.IndexByte(inm, ','); i >= 0 {
			tag, inm = inm[:i], inm[i+1:]
		} else {
			tag, inm = inm, nil
		}
		if bytes.Equal(trimWeak(bytes.TrimSpace(tag)), want) {
			return true
		}
	}
	return false
}

func trimWeak(tag []byte) []byte {
	if len(tag) >= 2 && (tag[0] == 'W' || tag[0] == 'w') && tag[1] == '/' {
		return tag[2:]
	}
	return tag
}

// acceptsEventStream reports whether an Accept header lists text/event-stream.
func acceptsEventStream(accept []byte) bool {
	const want = "text/event-stream"
	for len(accept) >= len(want) {
		i := bytes.IndexByte(accept, ',')
		part := accept
		if i >= 0 {
			part, accept = accept[:i], accept[i+1:]
		} else {
			accept = nil
		}
		if j := bytes.IndexByte(part, ';'); j >= 0 {
			part = part[:j]
		}
		if bytes.EqualFold(bytes.TrimSpace(part), []byte(want)) {
			return true
		}
	}
	return false
}

func serveSSE(ctx *fasthttp.RequestCtx, reqCtx context.Context, hub *Hub, topic string, opts ServeOptions) {
	// Subscribe first, then take the current snapshot: no version published in between is
	// missed, and the ones received that are not newer than the one sent are skipped.
	sub := hub.Subscribe(topic, SSE)
	cur, err := hub.WaitSnapshot(reqCtx, topic)
	if err != nil {
		sub.Close()
		unavailable(ctx)
		return
	}
	resend := true
	if v := ctx.Request.Header.Peek("Last-Event-ID"); len(v) > 0 {
		if id, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil && id >= cur.Version {
			resend = false
		}
	}
	startSSE(ctx, sub, opts, topic, sseSnapshot, sseSnapshot, cur, resend)
}

// startSSE answers ctx with the SSE stream of sub (st.run's cur and resend), its snapshots named first
// then next. Over HTTP/1.1 the stream is written on the hijacked connection by one goroutine: the HTTP
// server's connection goroutine and its buffers are released, and an idle stream holds one goroutine
// and its subscriber; the answer is delimited by the end of the connection (no chunked framing), as a
// stream that only ends when the connection does. An HTTP/2 stream cannot be hijacked: the front end
// sends the head as the stream's HEADERS and the stream is written by a goroutine of its own as its
// DATA (frontend.StreamAnswer), which ends with END_STREAM when the stream does, or at once when the
// client resets the stream or goes away, or the front end drains. Such a stream cannot move to the new
// process of a binary upgrade (HTTP/2 connections are not moved): it is counted as staying, and ends
// with the drain (its client reconnects).
func startSSE(ctx *fasthttp.RequestCtx, sub *Subscriber, opts ServeOptions, topic string, first, next sseName, cur *Snapshot, resend bool) {
	if frontend.IsStream(ctx.Conn()) {
		ctx.SetStatusCode(fasthttp.StatusOK)
		h := &ctx.Response.Header
		h.SetContentType("text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		frontend.StreamAnswer(ctx, func(a *frontend.AnswerStream) {
			defer sub.Close()
			st := &sseStream{w: a, gone: a.Done(), sub: sub, opts: opts, first: first, next: next,
				h: opts.Streams.addStaying(a.RemoteAddr().String(), topic, "sse")}
			defer st.h.done()
			st.run(cur, resend)
		})
		return
	}
	ctx.HijackSetNoResponse(true)
	hijacked(ctx, sub, opts, func(c net.Conn, _ []byte) func() {
		st := &sseStream{conn: c, w: c, head: sseHead, sub: sub, opts: opts, first: first, next: next,
			h: opts.Streams.add(c, topic, "sse")}
		return func() { defer st.h.done(); st.run(cur, resend) }
	})
}

// sseHead is the head of an SSE answer.
var sseHead = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
	"X-Accel-Buffering: no\r\nConnection: close\r\n\r\n")

// hijacked runs setup on the request's connection once fasthttp hands it over, in fasthttp's
// goroutine, then the stream setup returns (nil: none); the connection and sub are closed when
// the stream returns (ServeOptions.run says in which goroutine). If fasthttp never hands the
// connection over (the client went away first), a guard closes sub.
func hijacked(ctx *fasthttp.RequestCtx, sub *Subscriber, opts ServeOptions, setup func(c net.Conn, pending []byte) (stream func())) {
	var state atomic.Int32
	guard := time.AfterFunc(opts.WriteTimeout+time.Second, func() {
		if state.CompareAndSwap(streamPending, streamAbandoned) {
			sub.Close()
		}
	})
	ctx.Hijack(func(c net.Conn) {
		guard.Stop()
		if !state.CompareAndSwap(streamPending, streamStarted) {
			c.Close()
			return
		}
		raw, pending, err := frontend.UnwrapHijacked(c)
		if err != nil {
			c.Close()
			sub.Close()
			return
		}
		stream := setup(raw, pending)
		if stream == nil {
			raw.Close()
			sub.Close()
			return
		}
		opts.run(func() {
			defer raw.Close()
			defer sub.Close()
			stream()
		})
	})
}

// hijackWriter is the http.ResponseWriter the net/http upgrader answers through: Hijack hands
// it the connection (with the bytes already read from it), and an error answer is written to
// the connection as a minimal HTTP/1.1 response.
type hijackWriter struct {
	conn    net.Conn
	pending []byte
	header  http.Header
	status  int
}

func (w *hijackWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *hijackWriter) WriteHeader(status int) { w.status = status }

func (w *hijackWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		w.status, http.StatusText(w.status), len(b))
	_ = w.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := w.conn.Write(append([]byte(head), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Hijack implements http.Hijacker: the connection, and a reader that returns the pending bytes
// first (the upgrader wraps the connection with it only when it has some).
func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(w.pending), w.conn), 16)
	if len(w.pending) > 0 {
		if _, err := r.Peek(min(len(w.pending), 16)); err != nil {
			return nil, nil, err
		}
	}
	return w.conn, bufio.NewReadWriter(r, bufio.NewWriterSize(w.conn, 16)), nil
}

// badWebSocketHandshake returns why an upgrade request (Connection: upgrade, Upgrade:
// websocket, GET) is not a WebSocket handshake the upgrader accepts, or "".
func badWebSocketHandshake(h *fasthttp.RequestHeader) string {
	if !headerHasToken(h.Peek("Sec-WebSocket-Version"), "13") {
		return "unsupported version: 13 not found in 'Sec-WebSocket-Version' header"
	}
	key, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(h.Peek("Sec-WebSocket-Key"))))
	if err != nil || len(key) != 16 {
		return "'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length"
	}
	return ""
}

// headerHasToken reports whether a comma-separated header value holds token (any case).
func headerHasToken(v []byte, token string) bool {
	for part := range bytes.SplitSeq(v, []byte(",")) {
		if bytes.EqualFold(bytes.TrimSpace(part), []byte(token)) {
			return true
		}
	}
	return false
}

// sseWriter is where an SSE stream is written: the hijacked connection (HTTP/1.1), or the HTTP/2
// stream's answer (frontend.AnswerStream).
type sseWriter interface {
	Write([]byte) (int, error)
	SetWriteDeadline(time.Time) error
}

// sseStream is the state of one SSE stream, used by its goroutine only.
type sseStream struct {
	conn        net.Conn        // the hijacked connection (HTTP/1.1), which a binary upgrade moves; nil over HTTP/2
	w           sseWriter       // where the stream is written: conn, or the HTTP/2 stream's answer
	head        []byte          // written first: the HTTP/1.1 answer's head (an HTTP/2 stream's is its HEADERS)
	gone        <-chan struct{} // closed when the HTTP/2 stream is over or must end (AnswerStream.Done); nil over HTTP/1.1
	sub         *Subscriber
	opts        ServeOptions
	first, next sseName // how the current snapshot is sent at the start, and each one after it
	h           *stream // its entry in ServeOptions.Streams; nil without

	// What the client was sent: the version of its latest snapshot (sent, or which it had: its
	// Last-Event-ID), whether that was a seed, the snapshot itself when known, and how the next one
	// is named.
	last uint64
	seed bool
	sent *Snapshot
	name sseName
}

// run writes the stream: cur first (none when resend is false: the client has it; or when cur is
// nil: the first snapshot published is sent as cur would have been), then each newer snapshot.
func (st *sseStream) run(cur *Snapshot, resend bool) {
	st.deadline()
	var head []byte
	if !resend || cur == nil {
		// The client already has this version, or there is none yet: open the stream with a comment.
		head = append(append([]byte(nil), st.head...), sseOpen...)
	} else {
		head = append(append([]byte(nil), st.head...), cur.sseEvent(st.first)...)
	}
	if _, err := st.w.Write(head); err != nil {
		return
	}
	st.name = st.next
	if cur != nil {
		st.last, st.seed, st.sent = cur.Version, cur.Seed, cur
	} else {
		st.name = st.first
	}
	st.loop()
}

// loop writes each newer snapshot, and a keep-alive comment when idle, until the stream ends or is
// detached (a binary upgrade moves it).
func (st *sseStream) loop() {
	idle := time.NewTimer(st.opts.KeepAlive)
	defer idle.Stop()
	detaching := st.h.detaching()
	for {
		select {
		case m, ok := <-st.sub.C():
			if !st.receive(m, ok) {
				return
			}
		case <-idle.C:
			st.deadline()
			if _, err := st.w.Write(sseKeepAlive); err != nil {
				return
			}
		case <-st.gone:
			return // the HTTP/2 stream was reset or its connection closed, or the front end drains
		case <-detaching:
			// Between two events: what is queued is sent here first, the rest goes on in the new
			// process from the version sent.
			for {
				select {
				case m, ok := <-st.sub.C():
					if !st.receive(m, ok) {
						return
					}
					continue
				default:
				}
				break
			}
			if !st.h.hand(st.conn, Resume{Version: st.last, Seed: st.seed, Sum: resumeSum(st.sent), Started: st.name == st.next}) {
				return
			}
			detaching = nil // a TLS session crypto/tls keeps: the stream stays, to end with the drain
		}
		idle.Reset(st.opts.KeepAlive)
	}
}

// receive writes m if it is a newer snapshot; false: the stream ends.
func (st *sseStream) receive(m Message, ok bool) bool {
	if st.sub.Dropped() {
		// Tell the client, if the connection still takes writes; its client
		// reconnects with Last-Event-ID.
		st.deadline()
		_, _ = st.w.Write(sseDropped)
		return false
	}
	if !ok {
		return false // Hub.Close
	}
	// The fetched snapshot that replaces a seed is sent whatever its version.
	if m.Snapshot == nil || m.Snapshot.Version <= st.last && !(st.seed && !m.Snapshot.Seed) {
		return true
	}
	st.deadline()
	if _, err := st.w.Write(m.Snapshot.sseEvent(st.name)); err != nil {
		return false
	}
	st.last, st.seed, st.sent, st.name = m.Snapshot.Version, m.Snapshot.Seed, m.Snapshot, st.next
	return true
}

// deadline bounds the writes of the connection that follow, so a client that stops reading
// makes them fail after WriteTimeout, which ends the stream.
func (st *sseStream) deadline() {
	if st.w != nil {
		_ = st.w.SetWriteDeadline(time.Now().Add(st.opts.WriteTimeout))
	}
}

// An sseName is how an SSE event carrying a snapshot is written.
type sseName uint8

const (
	// sseSnapshot: "id: <version>" and "event: snapshot" (the generic protocol).
	sseSnapshot sseName = iota
	// sseRegistration: "event: Registration", the whole configuration a client SDK of App
	// Configuration gets when it connects, without an id.
	sseRegistration
	// sseConfigPayload: "event: SSEConfig_payload", the whole configuration after a change.
	sseConfigPayload
	numSSENames
)

var sseEventLines = [numSSENames]string{"event: snapshot\n", "event: Registration\n", "event: SSEConfig_payload\n"}

// sseEvent returns the snapshot as one SSE event named as n says, a "data:" line per line of the
// body, encoded once and shared by every stream that sends it.
func (s *Snapshot) sseEvent(n sseName) []byte {
	e := &s.sse[n]
	e.once.Do(func() {
		b := make([]byte, 0, len(s.Body)+64)
		if n == sseSnapshot {
			b = append(b, "id: "...)
			b = strconv.AppendUint(b, s.Version, 10)
			b = append(b, '\n')
		}
		b = append(b, sseEventLines[n]...)
		body := s.Body
		for {
			// One data: line per line of the body; SSE lines end with CRLF, LF or CR.
			i := bytes.IndexAny(body, "\r\n")
			b = append(b, "data: "...)
			if i < 0 {
				b = append(append(b, body...), '\n')
				break
			}
			b = append(append(b, body[:i]...), '\n')
			if body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n' {
				i++
			}
			body = body[i+1:]
			if len(body) == 0 {
				break
			}
		}
		e.b = append(b, '\n')
	})
	return e.b
}

// Stream handoff states: the hijack handler and a guard timer race to own the subscriber.
const (
	streamPending int32 = iota
	streamStarted
	streamAbandoned
)

func serveWebSocket(ctx *fasthttp.RequestCtx, hub *Hub, topic string, opts ServeOptions) {
	serveWebSocketAs(ctx, hub, topic, opts, false)
}

// serveWebSocketAs answers a WebSocket subscriber of topic: the upstream's change messages, or with
// appConfig App Configuration's wsfeature frames (serveWebSocketConn).
func serveWebSocketAs(ctx *fasthttp.RequestCtx, hub *Hub, topic string, opts ServeOptions, appConfig bool) {
	if reason := badWebSocketHandshake(&ctx.Request.Header); reason != "" {
		ctx.Error("400 Bad Request: websocket: "+reason+"\n", fasthttp.StatusBadRequest)
		ctx.Response.Header.Set("Sec-WebSocket-Version", "13")
		ctx.SetConnectionClose()
		return
	}
	// The handshake is answered on the hijacked connection itself, by the net/http flavour of
	// the upgrader: fasthttp's connection wrapper and its read buffer are then released, and
	// a subscriber holds only the WebSocket's own small buffers.
	req := &http.Request{Method: http.MethodGet, Host: string(ctx.Host()), Header: http.Header{}}
	for k, v := range ctx.Request.Header.All() {
		req.Header.Add(string(k), string(v))
	}
	// Subscribe before the handshake completes, so that a client that GETs the snapshot
	// right after its dial returns misses no change message.
	var ac *appConfigWS
	kind := WebSocket
	if appConfig {
		kind = Snapshots // of which those newer than the one cached now are told as changes
	}
	sub := hub.Subscribe(topic, kind)
	if appConfig {
		ac = &appConfigWS{topic: topic}
		if s := hub.Snapshot(topic); s != nil {
			ac.since, ac.snap = s.Version, s
		}
	}
	ctx.HijackSetNoResponse(true)
	hijacked(ctx, sub, opts, func(c net.Conn, pending []byte) func() {
		// The handshake runs in fasthttp's hijack goroutine, so that the stream's own goroutine
		// starts with a small stack.
		fc := &wsConn{Conn: c, pending: pending} // the pending bytes are the client's first frames
		w := &hijackWriter{conn: fc}
		wc, err := wsUpgrader.Upgrade(w, req, nil)
		if err != nil {
			return nil // answered by the upgrader through w
		}
		ws := &wsStream{c: wc, fc: fc, sub: sub, opts: opts, ac: ac, hub: hub, topic: topic,
			h: opts.Streams.add(c, topic, "websocket")}
		return func() {
			defer wc.Close()
			defer ws.h.done()
			ws.run()
		}
	})
}

// wsStream is a WebSocket subscriber: its connection and what it was sent.
type wsStream struct {
	c     *websocket.Conn
	fc    *wsConn // under c: follows the client's frames, so that the reading stops between two
	sub   *Subscriber
	opts  ServeOptions
	ac    *appConfigWS // an App Configuration subscriber (its sub wants Snapshots); nil: the upstream's change messages
	hub   *Hub
	topic string
	h     *stream // its entry in ServeOptions.Streams; nil without

	// lastChange is the last change message sent (Resume.Change).
	lastChange []byte

	// A subscriber taken over from an old process (Route.Adopt): first is sent before anything
	// (what it missed during the switch; firstFrame for App Configuration). While holding (the
	// last change message the old process sent, skipTo, is not among this process's: its session
	// is behind, or opened after it), the change messages are held, this process's latest first,
	// until skipTo arrives (it and those before it are dropped: the client has them) or holdC fires
	// (they are all sent: they came after it). A client the old process sent no change message is
	// watched instead, until the first change message or watchC: a snapshot unlike what the old
	// process saw (seen) is a change whose message it may have missed during the switch, and it is
	// told to resync.
	first      [][]byte
	firstFrame *websocket.PreparedMessage // App Configuration's: the change frame of a snapshot it missed
	watching   bool
	seen       Resume
	skipTo     []byte
	held       []Message
	holdC      <-chan time.Time
	watchC     <-chan time.Time // the watch ends (unwatch)
}

// unwatch ends the watch for a change missed during the switch: the subscriber no longer wants
// snapshots (Hub.Resubscribe), and what it had queued goes to receive; false: the stream ends.
func (ws *wsStream) unwatch(receive func(Message, bool) bool) bool {
	ws.watching, ws.watchC = false, nil
	sub, queued := ws.hub.Resubscribe(ws.sub, WebSocket)
	ws.sub = sub
	for _, m := range queued {
		if !receive(m, true) {
			return false
		}
	}
	return true
}

// run relays sub's change messages to c until either ends; with ac (an App Configuration
// subscriber, whose sub wants Snapshots), the change frame of each new snapshot instead, and "test
// message" with each keep-alive ping.
func (ws *wsStream) run() {
	c, opts, ac := ws.c, ws.opts, ws.ac
	// A client that answers no ping nor sends anything for this long is gone.
	readTimeout := 2*opts.KeepAlive + opts.WriteTimeout
	// The hijacked connection's Close is a no-op (fasthttp closes it once this handler
	// returns), so the reader is stopped with a past read deadline, which it must not then
	// push back: arm and stop serialise on mu.
	var (
		mu      sync.Mutex
		stopped bool
	)
	arm := func() error {
		mu.Lock()
		defer mu.Unlock()
		if stopped && ws.fc.stopping.Load() {
			return nil // detaching: the reader goes on to the frames' end (wsConn.Read), then stops
		}
		if stopped {
			return net.ErrClosed
		}
		return c.SetReadDeadline(time.Now().Add(readTimeout))
	}
	stop := func(detach bool) {
		mu.Lock()
		stopped = true
		if detach {
			ws.fc.stopping.Store(true) // between two frames: the reader returns errDetached
		}
		_ = c.SetReadDeadline(time.Unix(1, 0))
		mu.Unlock()
	}
	readDone := make(chan struct{})
	defer func() {
		stop(false)
		<-readDone
	}()
	c.SetReadLimit(wsReadLimit)
	c.SetPongHandler(func(string) error { return arm() })
	go func() {
		defer close(readDone)
		if arm() != nil {
			return
		}
		for {
			_, r, err := c.NextReader()
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				return
			}
			if arm() != nil {
				return
			}
		}
	}()

	closeWith := func(code int, reason string) {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason),
			time.Now().Add(opts.WriteTimeout))
		// Let the client answer, so that it reads the close frame rather than a reset.
		t := time.NewTimer(wsCloseWait)
		defer t.Stop()
		select {
		case <-readDone:
		case <-t.C:
		}
	}
	write := func(frame *websocket.PreparedMessage) bool {
		_ = c.SetWriteDeadline(time.Now().Add(opts.WriteTimeout))
		return c.WritePreparedMessage(frame) == nil
	}
	// receive writes what m tells the client; false: the stream ends.
	var receive func(m Message, ok bool) bool
	receive = func(m Message, ok bool) bool {
		if ws.sub.Dropped() {
			closeWith(websocket.CloseTryAgainLater, "slow consumer")
			return false
		}
		if !ok && ws.sub.Resynced() {
			// Changes were missed while the upstream session was down: reconnect and
			// fetch the snapshot.
			closeWith(websocket.CloseServiceRestart, "resync")
			return false
		}
		if !ok {
			closeWith(websocket.CloseGoingAway, "")
			return false
		}
		var frame *websocket.PreparedMessage
		switch {
		case ac != nil && m.Snapshot != nil && m.Snapshot.Version > ac.since:
			frame, ac.since, ac.snap = m.Snapshot.changeFrame(ac.topic), m.Snapshot.Version, m.Snapshot
		case ac == nil && m.Change != nil && ws.holdC != nil:
			if bytes.Equal(m.Change, ws.skipTo) {
				ws.held, ws.holdC = nil, nil // the client has it, and those before it
			} else {
				ws.held = append(ws.held, m)
			}
			return true
		case ac == nil && m.Change != nil:
			ws.lastChange = m.Change
			if !write(m.prepared()) {
				return false
			}
			return !ws.watching || ws.unwatch(receive) // a change message came: none was missed
		case ws.watching && m.Snapshot != nil && differs(m.Snapshot, ws.seen):
			closeWith(websocket.CloseServiceRestart, "resync") // its change message came before this process took the stream
			return false
		default:
			return true
		}
		return write(frame)
	}

	// flush sends the change messages held (holdC).
	flush := func() bool {
		held := ws.held
		ws.held, ws.holdC = nil, nil
		for _, m := range held {
			if !write(m.prepared()) {
				return false
			}
			ws.lastChange = m.Change
		}
		return true
	}
	if ws.firstFrame != nil && !write(ws.firstFrame) {
		return
	}
	for _, msg := range ws.first {
		m := Message{Change: msg}
		if !write(m.prepared()) {
			return
		}
		ws.lastChange = msg
	}
	ping := time.NewTimer(opts.KeepAlive)
	defer ping.Stop()
	for {
		select {
		case m, ok := <-ws.sub.C():
			if !receive(m, ok) {
				return
			}
		case <-ping.C:
			if ac != nil && !write(appConfigHeartbeatFrame) {
				return
			}
			if err := c.WriteControl(websocket.PingMessage, nil, time.Now().Add(opts.WriteTimeout)); err != nil {
				return
			}
		case <-ws.holdC:
			if !flush() {
				return
			}
		case <-ws.watchC:
			if !ws.unwatch(receive) {
				return
			}
		case <-readDone:
			return // the client closed, or broke, the connection
		case <-ws.h.detaching():
			// The reading stops between two of the client's frames, the writing between two
			// messages, once what is queued is sent: the rest goes on in the new process.
			stop(true)
			t := time.NewTimer(wsDetachWait)
			select {
			case <-readDone:
			case <-t.C:
			}
			t.Stop()
			if !ws.fc.detached.Load() {
				// The client went, or stayed in the middle of a frame: it stays here, and
				// reconnects.
				closeWith(websocket.CloseGoingAway, "")
				return
			}
			for {
				select {
				case m, ok := <-ws.sub.C():
					if !receive(m, ok) {
						return
					}
					continue
				default:
				}
				break
			}
			if !flush() {
				return
			}
			if ws.h.hand(ws.fc.Conn, ws.resume()) {
				// A TLS session crypto/tls keeps: its reader stopped, it ends here, and its client
				// reconnects.
				closeWith(websocket.CloseGoingAway, "")
			}
			return
		}
		ping.Reset(opts.KeepAlive)
	}
}

// resume is what the client was sent, for the new process to go on from.
func (ws *wsStream) resume() Resume {
	s := ws.hub.Snapshot(ws.topic) // change messages: the topic as this process saw it
	if ws.ac != nil {
		if ws.ac.snap == nil {
			return Resume{Version: ws.ac.since}
		}
		s = ws.ac.snap
	}
	if s == nil {
		return Resume{Change: ws.lastChange}
	}
	return Resume{Version: s.Version, Seed: s.Seed, Sum: resumeSum(s), Change: ws.lastChange}
}
