package frontend

// HTTP/2 on the TLS listener (RFC 9113). A connection whose handshake chose ALPN "h2" is served here, on
// golang.org/x/net/http2's Framer (frames, CONTINUATION, the header list limit and its floods, the
// checks of each field's name and value, pseudo-header fields once each and first) and HPACK
// (golang.org/x/net/http2/hpack); the connection's state — streams, flow control, settings, limits —
// is this file's (h2conn.go). Each stream that passes RFC 9113 section 8's checks (no
// connection-specific fields, TE only "trailers", the pseudo-header fields a request needs, :path in
// origin form or "*" for OPTIONS, :authority and Host a valid host[:port] without userinfo,
// content-length equal to the DATA received) becomes one HTTP/1.1 request for the front end's handler,
// the same as a request read from an HTTP/1.1 connection: its head is written from the validated fields
// only (request line in origin form, Host from :authority, the fields in the order sent, Content-Length
// or chunked framing for a body), run through this package's framer like any request, and parsed by
// fasthttp; its body streams from the stream's DATA, and no server gets a complete request before it is
// known well formed (a content-length's last byte waits for END_STREAM: see h2stream.read). The
// answer goes back as the stream's HEADERS and
// DATA, less the HTTP/1.1 connection-specific fields.
//
// Trailers pass both ways. A request's trailer fields follow its body upstream when it declared them
// in a trailer field (the body then goes chunked, the only HTTP/1.1 framing that carries them); a
// chunked answer's trailer section (lb/upstream keeps its well-formed fields) goes to the client as
// the stream's trailers, but for the fields a trailer may not carry.
//
// Limits: concurrent streams per connection (MaxStreams; more are refused with REFUSED_STREAM), the
// head's size (max_header_size, counted as the HTTP/1.1 head written from the fields would be, so that
// a head passes over HTTP/2 exactly when it would over HTTP/1.1; advertised as
// SETTINGS_MAX_HEADER_LIST_SIZE with x/net's allowance for ten fields' overhead; a head over it is
// answered 431 and the connection serves on: HPACK decodes up to h2DecodeLimit, well past it, and only
// a header list past that, or a CONTINUATION flood, closes the connection), the flow-control windows (what a client may send ahead: h2StreamWindow per stream,
// h2ConnWindow per connection), read_timeout (a request body's silence: 408) and idle_timeout (a
// connection without streams, or one whose client stops reading), and rapid reset (CVE-2023-44487): a
// connection whose client has reset at least rapidResetMin streams, more than half of those it opened,
// is closed. Every refusal is counted (H2Counts).
//
// A handler's answer may be streamed (StreamAnswer, AnswerStream): its head sent once the handler returns,
// its body written as it goes by a goroutine of its own, for a stream that has no end of its own (a
// relay's Server-Sent Events subscriber, which over HTTP/1.1 takes over its connection).
//
// Not offered: server push, WebSocket over HTTP/2 (RFC 8441; SETTINGS_ENABLE_CONNECT_PROTOCOL is not
// sent: WebSocket devices use HTTP/1.1 upgrades on the same listener), priorities (ignored, as RFC 9113
// allows).

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/httpfield"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// H2Config are the limits of the HTTP/2 connections, read at each connection's start (a reload applies
// to new connections).
type H2Config struct {
	MaxStreams  uint32        // concurrent streams per connection
	MaxHeader   int           // max_header_size: the header list size
	ReadTimeout time.Duration // read_timeout: a request body's silence (unless the handler set a deadline)
	IdleTimeout time.Duration // idle_timeout: a connection without streams, or whose client stops reading
}

// rapidResetMin is the number of streams a client must have reset before its connection may be closed
// for rapid reset: a browser cancels some requests (a page left, a fetch aborted), never most.
const rapidResetMin = 100

// H2 serves the front end's HTTP/2 connections: Serve is fasthttp's NextProto handler for "h2".
type H2 struct {
	front   *Front
	handler fasthttp.RequestHandler
	config  func() H2Config
	log     *slog.Logger

	streamPool sync.Pool      // *h2stream
	work       chan *h2stream // to a worker waiting for a stream (h2Worker)

	streams     atomic.Uint64 // streams handed to the handler
	conns       atomic.Uint64 // connections served
	rapidResets atomic.Uint64 // connections closed for rapid reset
	badHeads    atomic.Uint64 // streams whose request the framer refused with a 400
	bigHeads    atomic.Uint64 // with a 431 (a header list or head over max_header_size)
	errMu       sync.Mutex
	errs        map[string]uint64 // stream resets and GOAWAYs sent with an error, by kind

	liveMu   sync.Mutex
	live     map[*h2conn]struct{} // the connections being served
	draining bool                 // Shutdown was called: every connection, new ones too, is drained
}

// NewH2 returns the HTTP/2 server of the front end f, handing each stream to handler.
func (f *Front) NewH2(handler fasthttp.RequestHandler, config func() H2Config) *H2 {
	h := &H2{front: f, handler: handler, config: config, errs: map[string]uint64{}, log: f.Errors.log,
		work: make(chan *h2stream), live: map[*h2conn]struct{}{}}
	h.streamPool.New = func() any { return new(h2stream) }
	return h
}

func (h *H2) countError(kind string) {
	h.errMu.Lock()
	h.errs[kind]++
	h.errMu.Unlock()
}

// H2Counts are the counters of an H2.
type H2Counts struct {
	Conns, Streams uint64
	// Refused counts what was refused, by kind: "rapid_reset" (connections closed), "bad_request"
	// (streams answered 400 by the framer), "connection_field" (streams reset: a connection-specific
	// field, or TE other than trailers), "header_too_large" (431: a header list over max_header_size),
	// "stream_CODE" (streams reset with the error CODE: a malformed request's PROTOCOL_ERROR, a stream
	// over the limit's REFUSED_STREAM…) and "conn_CODE" (connections closed with a GOAWAY of error CODE).
	Refused map[string]uint64
}

// Counts returns the counters.
func (h *H2) Counts() H2Counts {
	c := H2Counts{Conns: h.conns.Load(), Streams: h.streams.Load(), Refused: map[string]uint64{}}
	h.errMu.Lock()
	for k, v := range h.errs {
		c.Refused[k] = v
	}
	h.errMu.Unlock()
	c.Refused["rapid_reset"] = h.rapidResets.Load()
	c.Refused["bad_request"] = h.badHeads.Load()
	c.Refused["header_too_large"] = h.bigHeads.Load()
	return c
}

// Serve serves one connection that negotiated h2 (c is the TLS listener's), until it ends.
func (h *H2) Serve(c net.Conn) error {
	fc := frontOf(c)
	if fc == nil || fc.tc == nil {
		return errors.New("h2: not a connection of the TLS listener")
	}
	fc.handOver() // from here its ends are HTTP/2's: counted by kind in H2Counts
	h.conns.Add(1)
	hc := newH2Conn(h, fc.tc, h.config())
	h.liveMu.Lock()
	draining := h.draining
	if !draining {
		h.live[hc] = struct{}{}
	}
	h.liveMu.Unlock()
	if draining { // accepted as the listener closed: not served
		return fc.tc.Close()
	}
	hc.serve()
	h.liveMu.Lock()
	delete(h.live, hc)
	h.liveMu.Unlock()
	return nil
}

// Shutdown drains every HTTP/2 connection (one that comes now is closed): the client is told GOAWAY
// (NO_ERROR), the streams it has open are served (a streamed answer, which has no end of its own, is
// told to end: AnswerStream.Done), no new one is taken, and the connection closes when the last one
// ends (at once for an idle one).
func (h *H2) Shutdown() {
	h.liveMu.Lock()
	defer h.liveMu.Unlock()
	h.draining = true
	for c := range h.live {
		go c.drain()
	}
}

// Close closes every HTTP/2 connection at once (after Shutdown's drain had its time).
func (h *H2) Close() {
	h.liveMu.Lock()
	defer h.liveMu.Unlock()
	for c := range h.live {
		c.tc.Close() //nolint:errcheck // its serving goroutine ends
	}
}

// workerIdle is how long a worker waits for another stream before it ends.
const workerIdle = 10 * time.Second

// dispatch hands s to a waiting worker, or to a new one. Workers outlive their streams: a goroutine
// whose stack grew to what the handler needs serves the next stream without growing it again.
func (h *H2) dispatch(s *h2stream) {
	select {
	case h.work <- s:
	default:
		go h.worker(s)
	}
}

func (h *H2) worker(s *h2stream) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		if !h.serveStream(s) {
			return // the handler panicked: this goroutine's state is not to be trusted
		}
		t.Reset(workerIdle)
		select {
		case s = <-h.work:
		case <-t.C:
			return
		}
	}
}

// serveStream runs the handler for s and writes its answer; false if the handler panicked.
func (h *H2) serveStream(s *h2stream) (ok bool) {
	c := s.c
	defer func() {
		if !ok {
			if e := recover(); e != nil && h.log != nil {
				h.log.Error("http2: panic serving a stream", "client", c.tc.RemoteAddr().String(), "panic", fmt.Sprint(e))
			}
			c.resetStream(s, s.id, http2.ErrCodeInternal)
		}
		if run := s.run; run != nil {
			go s.runAnswer(run) // it finishes s; run is called even after a panic, to release what it holds
			return
		}
		c.finish(s)
	}()
	if s.declLen == 0 && s.ctx.Request.IsBodyStream() {
		// content-length: 0 without END_STREAM: forwarded once the stream ends with no DATA (whole).
		switch err := s.whole(); {
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.refuseAs(fasthttp.StatusRequestTimeout, "the request body stopped arriving")
			return true
		case err != nil: // reset (the DATA did not agree with the content-length), or gone: nothing to answer
			c.mu.Lock()
			code := s.resetCode
			c.mu.Unlock()
			if code != http2.ErrCodeNo {
				c.logRefusedStream(s, 0, code, "content-length and DATA disagree")
			}
			return true
		}
	}
	h.streams.Add(1)
	h.handler(&s.ctx)
	if s.run == nil { // else a streamed answer (StreamAnswer), sent by runAnswer
		s.writeAnswer()
	}
	return true
}

// An AnswerStream is the answer of an HTTP/2 stream written as it goes, after its handler returned
// (StreamAnswer): what a hijacked HTTP/1.1 connection is to a writer of a stream that has no end of its
// own (a relay's Server-Sent Events subscriber), which an HTTP/2 stream cannot give. Its head, sent
// before run starts, is the handler's ctx.Response (status and fields; its body is ignored); each Write
// goes out at once in DATA frames as the flow-control windows allow; the stream ends with END_STREAM
// when run returns, or with RST_STREAM (CANCEL) when a write did not complete by its deadline (the
// client does not take a cut answer for a whole one). A client that stops reading holds nothing here
// past its windows: Write waits for them until the write deadline (SetWriteDeadline), or idle_timeout
// without one, then fails. The methods are for run's goroutine only, but Done.
type AnswerStream struct {
	s        *h2stream
	done     chan struct{} // closed by wakeLocked (or end): the stream is over, or must end
	deadline time.Time
	cut      bool // a write did not complete: the stream is reset
}

// StreamAnswer makes the answer to ctx, a request of an HTTP/2 stream, a streamed one: once the handler
// returns, ctx.Response's head is sent and run writes the body in a goroutine of its own (the stream's
// worker goes back to serving), until it returns. run is called exactly once, even when the stream is
// over before it starts (Done is then closed and Write fails), so that it releases what it holds; it
// must not use ctx. false (run is never called) when ctx is not an HTTP/2 stream's.
func StreamAnswer(ctx *fasthttp.RequestCtx, run func(*AnswerStream)) bool {
	c, ok := ctx.Conn().(*h2StreamConn)
	if !ok {
		return false
	}
	c.s.run = run
	return true
}

// Done is closed when the stream is over or must end: the client reset it, the connection closed, or
// the server drains (H2.Shutdown: the GOAWAY is out; the client opens its next stream elsewhere). run
// should return then.
func (a *AnswerStream) Done() <-chan struct{} { return a.done }

// RemoteAddr is the client's address.
func (a *AnswerStream) RemoteAddr() net.Addr { return a.s.c.tc.RemoteAddr() }

// SetWriteDeadline bounds the writes that follow: one that cannot complete by t (the client's windows
// stay shut) fails with os.ErrDeadlineExceeded, and the stream is reset when run returns. Zero: a write
// waits for the windows up to idle_timeout.
func (a *AnswerStream) SetWriteDeadline(t time.Time) error {
	a.deadline = t
	return nil
}

// Write sends p in DATA frames as the windows allow, and flushes it: it is on its way to the client when
// Write returns. It fails once Done is closed.
func (a *AnswerStream) Write(p []byte) (n int, err error) {
	s := a.s
	c := s.c
	if a.cut {
		return 0, os.ErrDeadlineExceeded
	}
	select {
	case <-a.done: // over, or ends: nothing more goes out
		return 0, errStreamGone
	default:
	}
	for len(p) > 0 {
		k := s.reserve(len(p), a.deadline)
		if k == 0 {
			if s.gone() {
				return n, errStreamGone
			}
			a.cut = true // the windows stayed shut: the client does not read
			return n, os.ErrDeadlineExceeded
		}
		c.lockWrite()
		c.fr.WriteData(s.id, false, p[:k]) //nolint:errcheck // c.werr
		p, n = p[k:], n+k
		if c.unlockWrite(len(p) == 0) != nil {
			return n, errStreamGone
		}
	}
	return n, nil
}

// end closes done unless wakeLocked did: run is to return.
func (a *AnswerStream) end() {
	c := a.s.c
	c.mu.Lock()
	if a.s.answer == a {
		a.s.answer = nil
		close(a.done)
	}
	c.mu.Unlock()
}

// runAnswer sends the head of the handler's streamed answer, runs run, ends the stream (END_STREAM,
// or RST_STREAM when a write was cut) and finishes it.
func (s *h2stream) runAnswer(run func(*AnswerStream)) {
	c := s.c
	a := &AnswerStream{s: s, done: make(chan struct{})}
	c.mu.Lock()
	s.answer = a
	s.wakeLocked() // a stream already over: done is closed at once
	c.mu.Unlock()
	resp := &s.ctx.Response
	resp.Header.SetNoDefaultContentType(true)
	resp.Header.SetContentLength(-1) // no length: the body is what run writes (writeHeaders leaves out Transfer-Encoding)
	headed := s.send(resp.StatusCode(), &resp.Header, nil, s.headOnly, true)
	if !headed || s.headOnly {
		a.end() // nothing more may be sent
	}
	// A stream that may last hours holds no buffer of the request's or of a streamed answer's (made again
	// when the pooled stream next needs them).
	s.br, s.copy = nil, nil
	s.rd.Reset(nil)
	s.ctx.Request.Reset()
	run(a)
	a.end()
	switch {
	case a.cut:
		c.resetStream(s, s.id, http2.ErrCodeCancel)
	case headed && !s.headOnly:
		s.send(0, nil, nil, true, true) // END_STREAM; nothing if the stream is gone
	}
	c.finish(s)
}

// h2StreamConn is the net.Conn a stream's fasthttp context sees: the connection's addresses and TLS
// state; its read deadline is the stream's body's (read_timeout), not the connection's.
type h2StreamConn struct {
	*tls.Conn
	s *h2stream
}

func (c *h2StreamConn) SetReadDeadline(t time.Time) error { c.s.setReadDeadline(t); return nil }
func (c *h2StreamConn) SetWriteDeadline(time.Time) error  { return nil } // the connection's writes: idle_timeout
func (c *h2StreamConn) SetDeadline(t time.Time) error     { return c.SetReadDeadline(t) }

// Read, Write and Close are not the stream's to use: the handler reads the body through the request
// and answers through the response.
func (c *h2StreamConn) Read([]byte) (int, error)  { return 0, errStreamConn }
func (c *h2StreamConn) Write([]byte) (int, error) { return 0, errStreamConn }
func (c *h2StreamConn) Close() error              { return nil }

var errStreamConn = errors.New("h2: a stream has no connection of its own")

// IsStream reports whether c, a request's connection as its handler sees it, is an HTTP/2 stream.
func IsStream(c net.Conn) bool {
	_, ok := c.(*h2StreamConn)
	return ok
}

// Protocol names the protocol of a request whose handler sees the connection c: "h2" or "http/1.1"
// (HTTP/1.0 included).
func Protocol(c net.Conn) string {
	if IsStream(c) {
		return "h2"
	}
	return "http/1.1"
}

// trailered is an answer's body stream that may end with trailer fields (lb/upstream's Trailered).
type trailered interface{ Trailers() []byte }

// eachTrailer calls each for the trailer fields of an answer (HTTP/1.1 field lines, read from a chunked
// answer) that an HTTP/2 message may carry in its trailers.
func eachTrailer(lines []byte, each func(name, value []byte)) {
	for len(lines) > 0 {
		var line []byte
		line, lines, _ = bytes.Cut(lines, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(": "))
		if ok && !httpfield.Of(name).ConnectionSpecific() && validTrailer(name) {
			each(name, value)
		}
	}
}

// validTrailer reports whether a field named name may be a trailer (RFC 9110 section 6.5.1: not one
// that frames, routes, authenticates or controls the message).
func validTrailer(name []byte) bool {
	return httpguts.ValidTrailerHeader(http.CanonicalHeaderKey(string(name)))
}

// statusStrings are the HTTP status codes as HPACK values, made once.
var statusStrings = func() (s [600]string) {
	for i := 100; i < len(s); i++ {
		s[i] = strconv.Itoa(i)
	}
	return
}()

func statusString(code int) string {
	if code >= 100 && code < len(statusStrings) {
		return statusStrings[code]
	}
	return strconv.Itoa(code)
}
