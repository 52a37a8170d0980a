package upstream

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// bufferedBody is the largest answer read whole instead of streamed: the size of the read buffer.
const bufferedBody = BufferSize

// BufferSize is the size of the pooled readers and writers of the connections: large enough
// that a 16 KiB answer or a 32 KiB slice of an upload is one system call.
const BufferSize = 32 << 10

// maxInterim bounds the 1xx interim answers (100 Continue, 103 Early Hints) skipped before the final one.
const maxInterim = 10

// errUpstreamClosed is the error of an exchange whose connection closed before the first byte of the
// answer.
var errUpstreamClosed = errors.New("the server closed the connection before answering")

var (
	upReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, BufferSize) }}
	upWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, BufferSize) }}
	upBodies  = sync.Pool{New: func() any { return new(upBody) }}
)

// Options bound a Client's connections.
type Options struct {
	MaxConns        int           // connections open or being dialled at most
	QueueTimeout    time.Duration // how long a request waits for a free connection (0: it does not)
	ResponseTimeout time.Duration // a read or write without progress for this long fails (idleConn)
	NoDelay         bool          // TCP_NODELAY on the connections; else Nagle's algorithm stays on
}

// IdleTimeout is how long a connection stays open unused.
const IdleTimeout = 10 * time.Second

// New returns the client of the server d dials.
func New(d Dialer, o Options) *Client {
	return &Client{
		addr:         d.Addr,
		dialer:       d,
		maxConns:     o.MaxConns,
		queueTimeout: o.QueueTimeout,
		idleTimeout:  IdleTimeout,
		dialFn: func() (net.Conn, error) {
			ic := &idleConn{} // no deadlines of its own during a TLS handshake
			c, err := d.DialUnder(func(sock net.Conn, nb *nbio.TCPConn) net.Conn {
				ic.Conn, ic.nb = sock, nb
				return ic
			}, o.NoDelay)
			if err != nil {
				return nil, err
			}
			ic.timeout = o.ResponseTimeout // before the connection is handed over: nobody uses it yet
			return c, nil
		},
	}
}

// Dial returns a connection to the server outside the pool, made by the client's dialer (Dialer.Dial):
// an upgrade's, which becomes a tunnel.
func (u *Client) Dial() (net.Conn, error) { return u.dialer.Dial() }

// Client is the client of one server. It is safe for concurrent use.
type Client struct {
	addr         string
	dialer       Dialer                   // upgrades dial through it too (Dial)
	dialFn       func() (net.Conn, error) // the dialer's connection under an idleConn
	maxConns     int
	queueTimeout time.Duration
	idleTimeout  time.Duration

	mu       sync.Mutex
	idle     []*upConn   // most recently used last
	open     int         // connections open or being dialled, against maxConns
	waiters  []*upWaiter // first come first served
	retired  bool        // replaced or removed: connections are closed once released
	cleaner  *time.Timer // closes connections idle for idleTimeout
	cleaning bool        // cleaner is armed

	// The exchanges of a leader pool's requests waiting for their answer's head (Request.Watch), for
	// the in-flight failover (Abandon) and the hung-leader watch (Unanswered). See watch.go.
	waitMu   sync.Mutex
	awaiting []*upConn
	lastHead int64 // unix nanos: the latest answer head to a watched request
}

// upConn is one connection to the server.
type upConn struct {
	net.Conn
	ic      *idleConn // the socket's deadline keeper, under TLS too
	lastUse time.Time // when it was last put back idle
	reused  bool      // it carried an exchange before: the server may have closed it meanwhile

	// Guarded by the upstream's waitMu: its place in awaiting (-1: none), when the request began, whether
	// the request may go to another server if this one is abandoned, and whether it was.
	waitIdx   int
	waitSince int64
	mayLeave  bool
	abandoned bool
}

// upWaiter is a request waiting for a connection: it receives one, or nil for a free slot to dial.
type upWaiter struct{ ch chan *upConn }

// Request is a request as it goes to the server: the head the proxy built from its client's request
// (the request line and fields, through the blank line) and the client's body (in Req: in memory, or
// its stream), sent with the client's framing.
type Request struct {
	Req     *fasthttp.Request
	Head    []byte
	Framing Framing

	// For a leader pool's request (watch.go): Watch registers its wait for the answer's head (Since:
	// when the request began, unix nanos), and MayLeave lets Abandon cut that wait short if the leader
	// changes before any byte of the answer came (an idempotent request, its body in memory).
	Watch, MayLeave bool
	Since           int64
}

// Framing is how a request's body is sent: as the client framed it.
type Framing uint8

const (
	BodyNone    Framing = iota
	BodyLength          // Content-Length bytes
	BodyChunked         // chunked
)

// ClientError is an exchange that failed because the client's body could not be read: the client went
// away, stopped sending, sent too much or broke the framing. It is the client's fault, never the
// server's.
type ClientError struct{ err error }

func (e *ClientError) Error() string { return "reading the client's body: " + e.err.Error() }
func (e *ClientError) Unwrap() error { return e.err }

// Do sends out and reads the answer's head into resp; the body is in resp, or streams from the
// connection until the response is written to the client (see above).
func (u *Client) Do(out *Request, resp *fasthttp.Response) error {
	again := Idempotent(&out.Req.Header) && !out.Req.IsBodyStream()
	for attempt := 0; ; attempt++ {
		c, err := u.acquire(attempt > 0)
		if err != nil {
			return err
		}
		err = u.exchange(c, out, resp)
		if err == nil {
			return nil
		}
		// A reused connection the server had closed: nothing of the request was taken. Once more on a
		// fresh connection when that cannot duplicate a side effect and the body can be sent again.
		if err != errUpstreamClosed || !c.reused || attempt > 0 || !again {
			return err
		}
	}
}

// exchange writes out on c and reads the answer into resp. It gives c back (release or discard) unless
// the answer's body streams from it; then the body's Close does.
//
// resp keeps what fasthttp's server set on it for the client (no default Content-Type, no Date of its
// own): only its body is reset here, and reading the head resets the rest. Its field names are read as
// the server spelled them (the proxy relays them so).
func (u *Client) exchange(c *upConn, out *Request, resp *fasthttp.Response) error {
	req := out.Req
	resp.ResetBody()
	resp.SkipBody = false
	resp.Header.DisableNormalizing()

	var err error
	if out.Framing == BodyNone && c.ic != nil && c.ic.nb != nil && c.Conn == c.ic {
		// The head alone, on a plain socket: written by the first read of the answer (idleConn).
		c.ic.writeFirst(out.Head)
	} else {
		bw := upWriters.Get().(*bufio.Writer)
		bw.Reset(c)
		_, err = bw.Write(out.Head)
		if err == nil {
			err = writeBody(bw, out)
		}
		if err == nil {
			err = bw.Flush()
		}
		bw.Reset(nil)
		upWriters.Put(bw)
	}
	if err != nil {
		return u.writeFailed(c, err)
	}

	br := upReaders.Get().(*bufio.Reader)
	br.Reset(c)
	if req.Header.IsHead() {
		resp.SkipBody = true
	}
	if out.Watch {
		u.awaitHead(c, out)
	}
	err = readAnswerHead(br, resp)
	if out.Watch && !u.headCame(c) {
		// Abandoned: the leader changed while this request waited (Abandon), and its read was cut
		// short. With no byte of the answer come, the request may go to the new leader; otherwise
		// the answer has begun: it is read on.
		if err != nil && br.Buffered() == 0 {
			putReader(br)
			u.discard(c)
			return ErrAbandoned
		}
		c.resume()
		if err != nil {
			err = readAnswerHead(br, resp)
		}
	}
	if err != nil && c.ic != nil && c.ic.firstErr != nil { // the head's write failed
		putReader(br)
		return u.writeFailed(c, c.ic.firstErr)
	}
	if err != nil {
		putReader(br)
		u.discard(c)
		if err == io.EOF { // fasthttp: the connection ended before the first byte of the answer
			return errUpstreamClosed
		}
		return err
	}

	status := resp.StatusCode()
	keep := !resp.ConnectionClose() && status != fasthttp.StatusSwitchingProtocols
	if resp.SkipBody || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified {
		putReader(br)
		u.done(c, keep)
		return nil
	}
	size := resp.Header.ContentLength()
	if size >= 0 && size <= bufferedBody {
		if size == 0 {
			putReader(br)
			u.done(c, keep)
			return nil
		}
		// The body stays in the reader's buffer (it fits: bufferedBody is its size), which the body
		// stream keeps until fasthttp has written it; the connection goes back now, and its next
		// exchange takes another reader. Not copied into the response's body buffer: those come from a
		// pool that calibrates itself to the sizes it sees most and drops larger buffers, so a 16 KiB
		// answer among mostly small ones would allocate its buffer anew each time.
		data, err := br.Peek(size)
		if err != nil {
			putReader(br)
			u.discard(c)
			return unexpected(err)
		}
		u.done(c, keep)
		b := upBodies.Get().(*upBody)
		*b = upBody{held: br, data: data, done: true}
		resp.SetBodyStream(b, size)
		return nil
	}
	b := upBodies.Get().(*upBody)
	*b = upBody{u: u, c: c, br: br, keep: keep, left: int64(size), chunked: size == -1, toClose: size == -2}
	resp.SetBodyStream(b, size)
	return nil
}

// writeFailed discards c, whose request could not be written: errUpstreamClosed if it was a reused
// connection the server had closed (nothing of the request was taken), else err.
func (u *Client) writeFailed(c *upConn, err error) error {
	u.discard(c)
	var ce *ClientError
	if !errors.As(err, &ce) && c.reused && isClosedConn(err) {
		return errUpstreamClosed
	}
	return err
}

// readAnswerHead reads the head of an answer into resp, skipping interim (1xx) answers but 101.
func readAnswerHead(br *bufio.Reader, resp *fasthttp.Response) error {
	err := resp.Header.Read(br)
	for n := 0; err == nil && resp.StatusCode() < 200 && resp.StatusCode() != fasthttp.StatusSwitchingProtocols; n++ {
		if n == maxInterim {
			return fmt.Errorf("more than %d interim (1xx) answers", maxInterim)
		}
		err = resp.Header.Read(br)
	}
	return err
}

// writeBody writes out's body with the client's framing: Content-Length bytes as they are, or chunked.
// An error reading the client's body (a short body too) is a *ClientError; any other error is the
// server connection's.
func writeBody(bw *bufio.Writer, out *Request) error {
	req := out.Req
	if out.Framing == BodyNone {
		return nil
	}
	chunked := out.Framing == BodyChunked
	if !req.IsBodyStream() {
		body := req.Body()
		if chunked {
			return writeChunks(bw, body, true)
		}
		_, err := bw.Write(body)
		return err
	}
	// A streamed body goes on as it arrives: each piece read is sent at once (the server sees an upload
	// progress, and high_watermark_bytes counts what is in flight to it).
	r := req.BodyStream()
	bp := CopyBuffers.Get().(*[]byte)
	defer CopyBuffers.Put(bp)
	buf := *bp
	var sent int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			sent += int64(n)
			var werr error
			if chunked {
				werr = writeChunks(bw, buf[:n], false)
			} else {
				_, werr = bw.Write(buf[:n])
			}
			if werr == nil {
				werr = bw.Flush()
			}
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return &ClientError{rerr}
		}
	}
	if chunked {
		if t, ok := r.(Trailered); ok {
			return writeLastChunk(bw, t.Trailers())
		}
		return writeChunks(bw, nil, true)
	}
	if want := int64(req.Header.ContentLength()); sent != want {
		return &ClientError{io.ErrUnexpectedEOF} // fewer bytes than the Content-Length the server waits for
	}
	return nil
}

// writeChunks writes p as one chunk (none if p is empty), then the last chunk if last. A
// bufio.Writer's error sticks, so the last write reports any earlier one.
func writeChunks(bw *bufio.Writer, p []byte, last bool) (err error) {
	if len(p) > 0 {
		var size [16]byte
		bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16)) //nolint:errcheck // see above
		bw.WriteString("\r\n")                                   //nolint:errcheck
		bw.Write(p)                                              //nolint:errcheck
		_, err = bw.WriteString("\r\n")
	}
	if last {
		err = writeLastChunk(bw, nil)
	}
	return err
}

// Trailered is a body stream that may end with trailer fields (an HTTP/2 request's, an answer's chunked
// trailer section): Trailers returns them once the body was read to its end, as HTTP/1.1 field lines
// ("Name: value\r\n" each), or nothing.
type Trailered interface{ Trailers() []byte }

// writeLastChunk ends a chunked body: the last chunk, the trailer fields, the empty line.
func writeLastChunk(bw *bufio.Writer, trailers []byte) error {
	bw.WriteString("0\r\n") //nolint:errcheck // a bufio.Writer's error sticks
	bw.Write(trailers)      //nolint:errcheck
	_, err := bw.WriteString("\r\n")
	return err
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	upReaders.Put(br)
}

// isClosedConn reports whether a write failed because the server had closed the connection.
func isClosedConn(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// done gives back a connection whose exchange is complete: to the pool when both sides keep it alive.
func (u *Client) done(c *upConn, keep bool) {
	if keep {
		u.release(c)
	} else {
		u.discard(c)
	}
}

// acquire returns an idle connection (unless fresh), dials one within maxConns, or waits up to
// queueTimeout for one.
func (u *Client) acquire(fresh bool) (*upConn, error) {
	u.mu.Lock()
	var stale []*upConn
	if fresh {
		// The connection just tried was closed by the server while idle: the older idle ones may be
		// too. Make room to dial.
		if len(u.idle) > 0 && u.open >= u.maxConns {
			stale, u.idle = append(stale, u.idle[0]), slices.Delete(u.idle, 0, 1)
			u.open--
		}
	} else {
		for len(u.idle) > 0 {
			c := u.idle[len(u.idle)-1]
			u.idle[len(u.idle)-1] = nil
			u.idle = u.idle[:len(u.idle)-1]
			if time.Since(c.lastUse) < u.idleTimeout {
				u.mu.Unlock()
				closeAll(stale)
				return c, nil
			}
			stale = append(stale, c) // the cleaner has not run yet
			u.open--
		}
	}
	if u.open < u.maxConns {
		u.open++
		u.mu.Unlock()
		closeAll(stale)
		return u.dial()
	}
	if u.queueTimeout <= 0 {
		u.mu.Unlock()
		return nil, fasthttp.ErrNoFreeConns
	}
	w := &upWaiter{ch: make(chan *upConn, 1)}
	u.waiters = append(u.waiters, w)
	u.mu.Unlock()
	closeAll(stale)

	t := time.NewTimer(u.queueTimeout)
	defer t.Stop()
	var c *upConn
	select {
	case c = <-w.ch:
	case <-t.C:
		u.mu.Lock()
		i := slices.Index(u.waiters, w)
		if i >= 0 {
			u.waiters = slices.Delete(u.waiters, i, i+1)
		}
		u.mu.Unlock()
		if i >= 0 {
			return nil, fasthttp.ErrNoFreeConns
		}
		c = <-w.ch // handed over just as the wait ended
	}
	switch c {
	case nil:
		return u.dial() // a slot freed by a closed connection
	case abandonedWait:
		return nil, ErrAbandoned // the server was replaced as leader while this request queued
	}
	return c, nil
}

func closeAll(cs []*upConn) {
	for _, c := range cs {
		c.Close()
	}
}

// dial opens a connection in a slot already counted in open.
func (u *Client) dial() (*upConn, error) {
	nc, err := u.dialFn()
	if err != nil {
		u.mu.Lock()
		u.freeSlotLocked()
		u.mu.Unlock()
		return nil, err
	}
	c := &upConn{Conn: nc, waitIdx: -1}
	switch t := nc.(type) {
	case *idleConn:
		c.ic = t
	case *tls.Conn:
		c.ic, _ = t.NetConn().(*idleConn)
	}
	return c, nil
}

// freeSlotLocked gives up one slot of open: to the first waiter, who dials in it, or for good.
func (u *Client) freeSlotLocked() {
	if w := u.popWaiterLocked(); w != nil {
		w.ch <- nil
		return
	}
	u.open--
}

func (u *Client) popWaiterLocked() *upWaiter {
	if len(u.waiters) == 0 {
		return nil
	}
	w := u.waiters[0]
	u.waiters = slices.Delete(u.waiters, 0, 1)
	return w
}

// release puts a connection whose exchange is complete back: to the first waiter, or idle.
func (u *Client) release(c *upConn) {
	c.reused = true
	u.mu.Lock()
	if w := u.popWaiterLocked(); w != nil {
		u.mu.Unlock()
		w.ch <- c
		return
	}
	if u.retired {
		u.open--
		u.mu.Unlock()
		c.Close()
		return
	}
	c.lastUse = time.Now()
	u.idle = append(u.idle, c)
	if !u.cleaning {
		u.cleaning = true
		if u.cleaner == nil {
			u.cleaner = time.AfterFunc(u.idleTimeout, u.clean)
		} else {
			u.cleaner.Reset(u.idleTimeout)
		}
	}
	u.mu.Unlock()
}

// discard closes a connection that cannot carry another exchange.
func (u *Client) discard(c *upConn) {
	c.Close()
	u.mu.Lock()
	u.freeSlotLocked()
	u.mu.Unlock()
}

// clean closes the connections idle for idleTimeout and runs again when the oldest left would be.
func (u *Client) clean() {
	now := time.Now()
	u.mu.Lock()
	var stale []*upConn
	i := 0
	for i < len(u.idle) && now.Sub(u.idle[i].lastUse) >= u.idleTimeout {
		i++
	}
	if i > 0 {
		stale = append(stale, u.idle[:i]...)
		u.idle = slices.Delete(u.idle, 0, i)
		u.open -= i
	}
	if len(u.idle) > 0 {
		u.cleaner.Reset(u.idleTimeout - now.Sub(u.idle[0].lastUse))
	} else {
		u.cleaning = false
	}
	u.mu.Unlock()
	closeAll(stale)
}

// retire closes the idle connections of a client that was replaced or whose server was removed; the
// connections of exchanges still running are closed when they end.
func (u *Client) Retire() {
	u.mu.Lock()
	u.retired = true
	stale := u.idle
	u.open -= len(stale)
	u.idle = nil
	u.mu.Unlock()
	closeAll(stale)
}

// ConnsCount is the number of connections open (or being dialled) to the server.
func (u *Client) ConnsCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.open
}

// upBody is an answer's body given to the response as its body stream: read whole (data is what is left
// of it, in held's buffer; the connection is already back), or streamed from the connection:
// Content-Length bytes, chunked, or up to the end of the connection.
type upBody struct {
	held    *bufio.Reader // the reader whose buffer holds a body read whole (data); its connection is back
	data    []byte
	u       *Client
	c       *upConn
	br      *bufio.Reader
	keep    bool  // the connection may carry another exchange once the body is read
	left    int64 // bytes left: of the body (Content-Length) or of the current chunk
	chunked bool
	toClose bool // the body ends when the server closes the connection
	inChunk bool // chunked: inside a chunk's data (left counts it); its CRLF follows
	done    bool // read to its end
	err     error

	trailers []byte // a chunked answer's trailer fields, once read (Trailers)
}

// Trailers returns the trailer fields of a chunked answer read to its end (well-formed lines only).
func (b *upBody) Trailers() []byte { return b.trailers }

func (b *upBody) Read(p []byte) (int, error) {
	if b.held != nil {
		if len(b.data) == 0 {
			return 0, io.EOF
		}
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	var n int
	var err error
	switch {
	case b.toClose:
		n, err = b.br.Read(p)
		if err == io.EOF {
			b.done, b.keep = true, false
		}
	case b.chunked:
		n, err = b.readChunked(p)
	default:
		if b.left == 0 {
			b.done = true
			return 0, io.EOF
		}
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err = b.br.Read(p)
		b.left -= int64(n)
		if err == io.EOF && b.left > 0 {
			err = io.ErrUnexpectedEOF
		}
		if err == nil && b.left == 0 {
			b.done = true
			err = io.EOF
		}
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// readChunked returns data of the current chunk, first reading the chunk-size line (and the CRLF that
// ends the chunk before it) when none is left; at the last chunk it reads the trailer section.
func (b *upBody) readChunked(p []byte) (int, error) {
	for !b.inChunk {
		size, err := b.chunkSize()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := b.readTrailers(); err != nil {
				return 0, err
			}
			b.done = true
			return 0, io.EOF
		}
		b.left, b.inChunk = size, true
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if b.left == 0 {
		b.inChunk = false
		if line, lerr := b.br.ReadSlice('\n'); lerr != nil {
			err = unexpected(lerr)
		} else if string(line) != "\r\n" {
			err = errors.New("malformed chunked answer: no CRLF after a chunk")
		}
	}
	return n, err
}

// chunkSize reads a chunk-size line: hex digits, optional extensions after ';', CRLF.
func (b *upBody) chunkSize() (int64, error) {
	line, err := b.br.ReadSlice('\n')
	if err != nil {
		return 0, unexpected(err)
	}
	var size int64
	digits := 0
	for _, c := range line {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			if digits == 0 || (c != ';' && c != '\r' && c != '\n' && c != ' ' && c != '\t') {
				return 0, errors.New("malformed chunked answer: bad chunk size")
			}
			return size, nil
		}
		if digits++; digits > 15 {
			return 0, errors.New("malformed chunked answer: chunk size too large")
		}
		size = size<<4 | int64(d)
	}
	return 0, errors.New("malformed chunked answer: bad chunk size")
}

// readTrailers reads the trailer fields after the last chunk, up to the empty line, and keeps those
// that are well formed (a token, a colon, a value without control bytes but tab), ended by CRLF; the
// others are dropped. They reach an HTTP/2 client (Trailers); an HTTP/1.1 client gets none.
func (b *upBody) readTrailers() error {
	for range 100 {
		line, err := b.br.ReadSlice('\n')
		if err != nil {
			return unexpected(err)
		}
		if string(line) == "\r\n" || string(line) == "\n" {
			return nil
		}
		if name, value, ok := fieldLine(line); ok {
			b.trailers = append(b.trailers, name...)
			b.trailers = append(b.trailers, ": "...)
			b.trailers = append(b.trailers, value...)
			b.trailers = append(b.trailers, "\r\n"...)
		}
	}
	return errors.New("malformed chunked answer: too many trailer fields")
}

// fieldLine splits a header field line (its CRLF or LF included) into a token name and its value,
// without the whitespace around it; ok is false for a line that is not one.
func fieldLine(line []byte) (name, value []byte, ok bool) {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	name, value, ok = bytes.Cut(line, []byte(":"))
	if !ok || len(name) == 0 {
		return nil, nil, false
	}
	for _, c := range name {
		if !httpguts.IsTokenRune(rune(c)) {
			return nil, nil, false
		}
	}
	value = bytes.Trim(value, " \t")
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, false
		}
	}
	return name, value, true
}

func unexpected(err error) error {
	switch err {
	case io.EOF:
		return io.ErrUnexpectedEOF
	case bufio.ErrBufferFull:
		return errors.New("malformed chunked answer: line too long")
	}
	return err
}

// WriteTo implements io.WriterTo, which fasthttp prefers when it writes a body stream to the client: a
// body read whole goes in one Write (with the head, one system call when it fits the client's write
// buffer), a streamed one in CopyBuffers steps.
func (b *upBody) WriteTo(w io.Writer) (int64, error) {
	if b.held != nil {
		n, err := w.Write(b.data)
		b.data = b.data[n:]
		return int64(n), err
	}
	return CopyThrough(w, b)
}

// Close gives back what the body holds: the reader of a body read whole; the connection of a streamed
// one, to the pool if the body was read to its end and the connection is kept alive, else closed.
// fasthttp calls it once the body is written to the client (or dropped).
func (b *upBody) Close() error {
	switch {
	case b.held != nil:
		putReader(b.held)
	case b.u != nil:
		putReader(b.br)
		b.u.done(b.c, b.done && b.keep)
	default:
		return nil // closed already
	}
	*b = upBody{}
	upBodies.Put(b)
	return nil
}

// Idempotent reports the methods whose request may be sent twice without a second side effect (RFC
// 9110 9.2.2): GET, HEAD, OPTIONS, PUT, DELETE.
func Idempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete()
}

// CopyBuffers are the buffers (*[]byte of 64 KiB) large bodies are copied through, both ways: fasthttp
// copies in 4 KiB steps, which costs a read and a write system call every 4 KiB; 64 KiB steps cost 16
// times fewer.
var CopyBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// CopyThrough copies r to w in CopyBuffers steps until r's EOF: the WriteTo of a reader (io.Copy would
// call that WriteTo again).
func CopyThrough(w io.Writer, r io.Reader) (int64, error) {
	bp := CopyBuffers.Get().(*[]byte)
	defer CopyBuffers.Put(bp)
	buf := *bp
	var written int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, werr
			}
		}
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}
