package frontend

// HTTP/2 on the TLS listener (RFC 9113). A connection whose handshake chose ALPN "h2" is served by
// golang.org/x/net/http2 (framing, HPACK, flow control, stream states, and the checks RFC 9113 section
// 8 asks of a server: no connection-specific fields, TE only "trailers", pseudo-header fields once each
// and first, lowercase names, no CR, LF or NUL, content-length equal to the DATA received; a stream
// that breaks one is reset, and its handler never runs). Each stream that passes becomes one
// HTTP/1.1 request for the front end's handler, the same as a request read from an HTTP/1.1
// connection: its head is written from the validated fields only (request line in origin form, Host
// from :authority, then the fields in a fixed order, Content-Length or chunked framing for a body),
// run through this package's framer like any request, and parsed by fasthttp; its body streams from
// the stream's DATA. The answer goes back as the stream's HEADERS and DATA, less the HTTP/1.1
// connection-specific fields.
//
// Trailers pass both ways. A request's trailer fields (those it declared in a trailer field: x/net
// keeps no others) follow its body upstream, which then goes chunked, the only HTTP/1.1 framing that
// carries them; a chunked answer's trailer section (lb/upstream keeps its well-formed fields) goes to
// the client as the stream's trailers, but for the fields a trailer may not carry.
//
// Limits: concurrent streams per connection (MaxStreams), the header list size (max_header_size,
// advertised as SETTINGS_MAX_HEADER_LIST_SIZE; x/net closes a connection whose CONTINUATION frames go
// past it), the flow-control windows (x/net's 1 MiB per stream and per connection: what a client may
// send ahead is bounded), read_timeout and idle_timeout as for HTTP/1.1, and rapid reset
// (CVE-2023-44487): a connection whose client has reset at least rapidResetMin streams, more than half
// of those it opened, is closed. Refusals are counted (H2Counts) from the frames x/net sends (a stream
// reset or a GOAWAY with an error code, and the answers x/net makes itself: the 400 to a request with a
// connection-specific field and the 431 to a header list over the limit, told by their bodies), plus
// rapid resets and the framer's refusals.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// H2Config are the limits of the HTTP/2 connections, read at each connection's start (a reload applies
// to new connections).
type H2Config struct {
	MaxStreams  uint32        // concurrent streams per connection
	MaxHeader   int           // max_header_size: the header list size
	ReadTimeout time.Duration // read_timeout: a request body's silence
	IdleTimeout time.Duration // idle_timeout: a connection without streams
}

// rapidResetMin is the number of streams a client must have reset before its connection may be closed
// for rapid reset: a browser cancels some requests (a page left, a fetch aborted), never most.
const rapidResetMin = 100

// H2 serves the front end's HTTP/2 connections: Serve is fasthttp's NextProto handler for "h2".
type H2 struct {
	front   *Front
	handler fasthttp.RequestHandler
	config  func() H2Config
	srv     atomic.Pointer[h2Server] // the x/net server of the latest limits

	ctxs   sync.Pool   // *h2Stream
	errLog *log.Logger // x/net's log (h2Log)

	streams     atomic.Uint64 // streams handed to the handler
	conns       atomic.Uint64 // connections served
	rapidResets atomic.Uint64 // connections closed for rapid reset
	badHeads    atomic.Uint64 // streams whose request the framer refused with a 400
	bigHeads    atomic.Uint64 // and with a 431 (head over max_header_size)
	errMu       sync.Mutex
	errs        map[string]uint64 // refusals sent by x/net, by kind (sentFrames)
}

// NewH2 returns the HTTP/2 server of the front end f, handing each stream to handler.
func (f *Front) NewH2(handler fasthttp.RequestHandler, config func() H2Config) *H2 {
	h := &H2{front: f, handler: handler, config: config, errs: map[string]uint64{}}
	h.ctxs.New = func() any { return new(h2Stream) }
	h.errLog = log.New(h2Log{f.Errors.log}, "", 0)
	return h
}

// h2Log takes x/net's own log lines: a panic of a stream's handler goes to the front end's log, as an
// error; the others are dropped. They are the client's doing (protocol errors, counted in H2Counts), and
// one of them (a GOAWAY received) quotes bytes the client chose.
type h2Log struct{ log *slog.Logger }

func (l h2Log) Write(p []byte) (int, error) {
	if l.log != nil && bytes.HasPrefix(p, []byte("http2: panic serving ")) {
		l.log.Error(string(bytes.TrimSpace(p)))
	}
	return len(p), nil
}

// h2Server is an x/net server and the limits it was made with.
type h2Server struct {
	conf H2Config
	srv  *http2.Server
}

// server returns the x/net server for the limits conf: the one made for them last, or a new one (after
// a reload changed them; connections served already keep theirs).
func (h *H2) server(conf H2Config) *http2.Server {
	if s := h.srv.Load(); s != nil && s.conf == conf {
		return s.srv
	}
	s := &h2Server{conf: conf, srv: &http2.Server{MaxConcurrentStreams: conf.MaxStreams, IdleTimeout: conf.IdleTimeout}}
	h.srv.Store(s)
	return s.srv
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
	// (streams answered 400 by the framer), "connection_field" (400: a connection-specific field, or TE
	// other than trailers), "header_too_large" (431: a header list over max_header_size),
	// "stream_CODE" (streams x/net reset with the error CODE, a malformed request's PROTOCOL_ERROR, a
	// stream over the limit's REFUSED_STREAM…) and "conn_CODE" (connections x/net closed with a GOAWAY
	// of error CODE).
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
	c.Refused["header_too_large"] += h.bigHeads.Load()
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
	conf := h.config()
	tc := fc.tc
	tc.SetDeadline(time.Time{}) //nolint:errcheck // x/net sets its own
	rc := newResetCounter(tc, h)
	h.server(conf).ServeConn(rc, &http2.ServeConnOpts{
		BaseConfig: &http.Server{MaxHeaderBytes: conf.MaxHeader, ReadTimeout: conf.ReadTimeout, IdleTimeout: conf.IdleTimeout,
			ErrorLog: h.errLog},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveStream(tc, conf, w, r) }),
	})
	return nil
}

// resetCounter reads the client's side of an HTTP/2 connection for x/net and counts, from the frames
// going by, the streams the client opened (HEADERS of a new stream) and reset (RST_STREAM): a client
// that resets most of what it opens, past rapidResetMin, has its connection closed. From the frames x/net
// writes it counts the refusals: a RST_STREAM or a GOAWAY with an error code (not NO_ERROR, nor CANCEL,
// which ends a stream the client gave up), and the answers x/net makes without asking the handler — a
// 400 for a connection-specific field, a 431 for a header list too large — each one DATA frame that
// ends its stream with a body of x/net's own (xnet400, xnet431; nothing else starts so: fairlead's own
// answers do not, and an upstream's would have to start with the same words).
type resetCounter struct {
	net.Conn
	h *H2

	preface  int // bytes of the client preface still to skip
	in, out  frameWalker
	inFrame  func(*frameWalker) // rc.clientFrame and rc.serverFrame, made once
	outFrame func(*frameWalker)

	opened, resets uint64
	lastStream     uint32
	closed         bool
}

func newResetCounter(c net.Conn, h *H2) *resetCounter {
	rc := &resetCounter{Conn: c, h: h}
	rc.inFrame, rc.outFrame = rc.clientFrame, rc.serverFrame
	return rc
}

var errRapidReset = errors.New("h2: closed for rapid reset (CVE-2023-44487)")

func (rc *resetCounter) Read(p []byte) (int, error) {
	if rc.closed {
		return 0, errRapidReset
	}
	n, err := rc.Conn.Read(p)
	b := p[:n]
	if skip := min(len(http2.ClientPreface)-rc.preface, len(b)); skip > 0 {
		rc.preface += skip
		b = b[skip:]
	}
	rc.in.walk(b, rc.inFrame)
	if rc.resets >= rapidResetMin && 2*rc.resets > rc.opened {
		rc.closed = true
		rc.h.rapidResets.Add(1)
		return 0, errRapidReset
	}
	return n, err
}

func (rc *resetCounter) Write(p []byte) (int, error) {
	rc.out.walk(p, rc.outFrame)
	return rc.Conn.Write(p)
}

func (rc *resetCounter) clientFrame(f *frameWalker) {
	switch f.typ() {
	case http2.FrameHeaders:
		if s := f.stream(); s > rc.lastStream {
			rc.lastStream = s
			rc.opened++
		}
	case http2.FrameRSTStream:
		rc.resets++
	}
}

func (rc *resetCounter) serverFrame(f *frameWalker) {
	var code http2.ErrCode
	var kind string
	switch {
	case f.typ() == http2.FrameRSTStream && f.size >= 4:
		code, kind = http2.ErrCode(binary.BigEndian.Uint32(f.head[:4])), "stream_"
	case f.typ() == http2.FrameGoAway && f.size >= 8:
		code, kind = http2.ErrCode(binary.BigEndian.Uint32(f.head[4:8])), "conn_"
	}
	if kind != "" && code != http2.ErrCodeNo && code != http2.ErrCodeCancel {
		rc.h.countError(kind + code.String())
	}
	if f.typ() == http2.FrameData && f.hdr[4]&byte(http2.FlagDataEndStream) != 0 {
		switch head := f.head[:min(f.size, len(f.head))]; {
		case bytes.HasPrefix(head, xnet400):
			rc.h.countError("connection_field")
		case bytes.HasPrefix(head, xnet431):
			rc.h.countError("header_too_large")
		}
	}
}

// The beginnings of the bodies of x/net's own answers (golang.org/x/net/http2 server.go: new400Handler
// via checkValidHTTP2RequestHeaders, whose errors all start so; handleHeaderListTooLong).
var (
	xnet400 = []byte(`request header "`)
	xnet431 = []byte("<h1>HTTP Error 431</h1>")
)

// frameWalker follows HTTP/2 frames (RFC 9113 section 4.1: a 9-byte header whose first 3 bytes are the
// payload's length) through the bytes of one direction, and keeps each payload's first 24 bytes (a
// RST_STREAM's error code, a GOAWAY's last stream and error code, the beginning of a DATA frame).
type frameWalker struct {
	hdr  [9]byte
	hn   int // header bytes seen of the frame under way
	size int // its payload's length
	got  int // payload bytes seen
	head [24]byte
}

func (f *frameWalker) typ() http2.FrameType { return http2.FrameType(f.hdr[3]) }
func (f *frameWalker) stream() uint32       { return binary.BigEndian.Uint32(f.hdr[5:9]) & (1<<31 - 1) }

// walk goes through b, calling done for each frame whose last byte it holds.
func (f *frameWalker) walk(b []byte, done func(*frameWalker)) {
	for len(b) > 0 {
		if f.hn < len(f.hdr) {
			k := copy(f.hdr[f.hn:], b)
			f.hn += k
			b = b[k:]
			if f.hn < len(f.hdr) {
				return
			}
			f.size, f.got = int(f.hdr[0])<<16|int(f.hdr[1])<<8|int(f.hdr[2]), 0
		} else {
			k := min(f.size-f.got, len(b))
			if f.got < len(f.head) {
				copy(f.head[f.got:], b[:k])
			}
			f.got += k
			b = b[k:]
		}
		if f.got == f.size {
			done(f)
			f.hn = 0
		}
	}
}

// h2Stream is what a stream's handling reuses: the fasthttp context, the head written for the framer
// and fasthttp, and its reader.
type h2Stream struct {
	ctx  fasthttp.RequestCtx
	conn streamConn
	head []byte
	br   *bufio.Reader
	rd   bytes.Reader
	keys []string
	buf  []byte
	body onlyReader
}

// onlyReader is a stream's request body: an io.Reader without Close, and its trailer fields.
type onlyReader struct {
	req      *http.Request
	trailers []byte
	keys     []string
}

func (o *onlyReader) Read(p []byte) (int, error) { return o.req.Body.Read(p) }

// Trailers returns the request's trailer fields as HTTP/1.1 field lines, once its body was read to the
// end: those it declared in a trailer field and sent (x/net keeps only those, with names a trailer may
// have), in name order.
func (o *onlyReader) Trailers() []byte {
	o.trailers = appendFields(o.trailers[:0], &o.keys, o.req.Trailer, nil)
	return o.trailers
}

// appendFields appends the fields of h with a value, in name order, as HTTP/1.1 field lines, but for
// those skip names (nil: none); keys is the scratch space for the sorted names.
func appendFields(dst []byte, keys *[]string, h http.Header, skip func(string) bool) []byte {
	*keys = (*keys)[:0]
	for k, vv := range h {
		if len(vv) > 0 && (skip == nil || !skip(k)) {
			*keys = append(*keys, k)
		}
	}
	slices.Sort(*keys)
	for _, k := range *keys {
		for _, v := range h[k] {
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	return dst
}

// streamConn is the net.Conn a stream's fasthttp context sees: the connection's addresses and TLS
// state; its deadlines are the stream's (http.ResponseController), not the connection's.
type streamConn struct {
	*tls.Conn
	rc *http.ResponseController
}

func (c *streamConn) SetReadDeadline(t time.Time) error  { return c.rc.SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return c.rc.SetWriteDeadline(t) }
func (c *streamConn) SetDeadline(t time.Time) error {
	if err := c.rc.SetReadDeadline(t); err != nil {
		return err
	}
	return c.rc.SetWriteDeadline(t)
}

// Read, Write and Close are not the stream's to use: the handler reads the body through the request
// and answers through the response.
func (c *streamConn) Read([]byte) (int, error)  { return 0, errStreamConn }
func (c *streamConn) Write([]byte) (int, error) { return 0, errStreamConn }
func (c *streamConn) Close() error              { return nil }

var errStreamConn = errors.New("h2: a stream has no connection of its own")

// IsStream reports whether c, a request's connection as its handler sees it, is an HTTP/2 stream.
func IsStream(c net.Conn) bool {
	_, ok := c.(*streamConn)
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

// serveStream hands one stream to the handler as an HTTP/1.1 request and writes its answer.
func (h *H2) serveStream(tc *tls.Conn, conf H2Config, w http.ResponseWriter, r *http.Request) {
	st := h.ctxs.Get().(*h2Stream)
	defer h.ctxs.Put(st)
	st.conn = streamConn{Conn: tc, rc: http.NewResponseController(w)}
	ctx := &st.ctx
	ctx.Init2(&st.conn, h.front.Errors.Logger(), true)
	defer func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		st.body.req = nil
	}()

	body := r.Body != nil && r.Body != http.NoBody
	st.head = st.appendHead(st.head[:0], r, body)
	lim := h.front.lim
	lim.MaxHeader = max(lim.MaxHeader, conf.MaxHeader)
	if _, err := Check(lim, st.head); err != nil {
		status := http.StatusBadRequest
		if r, ok := err.(*Refusal); ok {
			status = r.Status // 431 for a head over max_header_size
		}
		if status == http.StatusRequestHeaderFieldsTooLarge {
			h.bigHeads.Add(1)
		} else {
			h.badHeads.Add(1)
		}
		refuse(w, status)
		return
	}
	if st.br == nil {
		st.br = bufio.NewReaderSize(nil, 4096)
	}
	st.rd.Reset(st.head)
	st.br.Reset(&st.rd)
	if err := ctx.Request.Header.Read(st.br); err != nil {
		h.badHeads.Add(1)
		refuse(w, http.StatusBadRequest)
		return
	}
	if body {
		// Not r.Body itself: fasthttp closes the stream it replaces (SetBodyStream), and x/net's body
		// once closed reads no more; x/net closes it when the stream ends.
		st.body.req = r
		ctx.Request.SetBodyStream(&st.body, int(bodySize(r)))
	}
	h.streams.Add(1)
	h.handler(ctx)
	h.writeAnswer(st, w, r)
}

// refuse answers a stream whose request cannot be forwarded.
func refuse(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, http.StatusText(code)+"\n") //nolint:errcheck // the client went away
}

// headFieldsOwn reports the fields appendHead writes itself, from what x/net decoded (x/net refuses
// the last two).
func headFieldsOwn(k string) bool {
	switch k {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection":
		return true
	}
	return false
}

// bodySize is the length of r's body as it goes upstream: its content-length, or -1 (chunked) when it
// has none or declares trailer fields, which HTTP/1.1 carries only after a chunked body.
func bodySize(r *http.Request) int64 {
	if len(r.Trailer) > 0 {
		return -1
	}
	return r.ContentLength
}

// appendHead writes the HTTP/1.1 head of r from its validated fields: the request line, Host from
// :authority, the fields in the order of their names (a name's values in the order sent), and the body's
// framing.
func (st *h2Stream) appendHead(dst []byte, r *http.Request, body bool) []byte {
	dst = append(dst, r.Method...)
	dst = append(dst, ' ')
	dst = append(dst, r.RequestURI...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	if r.Host != "" {
		dst = append(dst, "Host: "...)
		dst = append(dst, r.Host...)
		dst = append(dst, "\r\n"...)
	}
	dst = appendFields(dst, &st.keys, r.Header, headFieldsOwn)
	switch size := bodySize(r); {
	case body && size >= 0:
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, size, 10)
		dst = append(dst, "\r\n"...)
	case body:
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	case r.ContentLength == 0 && r.Header["Content-Length"] != nil:
		dst = append(dst, "Content-Length: 0\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// writeAnswer writes the handler's answer to the stream: its status and fields less the HTTP/1.1
// connection-specific ones, and its body, streamed as it comes when it is a stream.
func (h *H2) writeAnswer(st *h2Stream, w http.ResponseWriter, r *http.Request) {
	resp := &st.ctx.Response
	defer resp.CloseBodyStream() //nolint:errcheck // gives back the upstream connection it holds
	hdr := w.Header()
	for k, v := range resp.Header.All() {
		if connectionSpecific(k) {
			continue
		}
		key := http.CanonicalHeaderKey(string(k))
		hdr[key] = append(hdr[key], string(v))
	}
	w.WriteHeader(resp.StatusCode())
	if r.Method == http.MethodHead {
		return
	}
	if !resp.IsBodyStream() {
		w.Write(resp.Body()) //nolint:errcheck // the client went away
		return
	}
	if st.buf == nil {
		st.buf = make([]byte, 32<<10)
	}
	// Each part goes out as it comes (a flush), but for the last: a body whose length is known ends with
	// the handler's return, in the same frame as its last bytes (HEADERS, DATA and END_STREAM at once
	// for a small answer, instead of a record and a system call each).
	fl, _ := w.(http.Flusher)
	src, size, sent := resp.BodyStream(), resp.Header.ContentLength(), 0
	for {
		n, err := src.Read(st.buf)
		if n > 0 {
			if _, werr := w.Write(st.buf[:n]); werr != nil {
				return
			}
			sent += n
		}
		if err == io.EOF {
			if t, ok := src.(trailered); ok {
				addTrailers(hdr, t.Trailers())
			}
		}
		if err != nil || size >= 0 && sent >= size {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

// trailered is an answer's body stream that may end with trailer fields (lb/upstream's Trailered).
type trailered interface{ Trailers() []byte }

// addTrailers sets the trailer fields of an answer (HTTP/1.1 field lines, read from a chunked answer)
// for x/net to send after its body: those an HTTP/2 message may carry in its trailers.
func addTrailers(hdr http.Header, lines []byte) {
	for len(lines) > 0 {
		var line []byte
		line, lines, _ = bytes.Cut(lines, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(": "))
		if !ok || connectionSpecific(name) {
			continue
		}
		key := http.CanonicalHeaderKey(string(name))
		if httpguts.ValidTrailerHeader(key) {
			hdr[http.TrailerPrefix+key] = append(hdr[http.TrailerPrefix+key], string(value))
		}
	}
}

// connectionSpecific reports the fields an HTTP/2 message must not carry (RFC 9113 section 8.2.2).
func connectionSpecific(k []byte) bool {
	for _, name := range connectionFields {
		if len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
			return true
		}
	}
	return false
}

var connectionFields = [...]string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
