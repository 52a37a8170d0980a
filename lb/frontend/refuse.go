package frontend

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// RefusedCodes are the statuses of the front end's answers to requests it refuses, counted in
// fairlead_bad_requests_total{code}: the framer's (400, 408, 413, 431, 505), fasthttp's own refusals
// of what it could not read, and the handler's (405 for CONNECT, 400 for a bad WebSocket handshake).
var RefusedCodes = [...]int{400, 405, 408, 413, 431, 505}

// Refused counts a request the front end refused with status (a status not in RefusedCodes counts as
// 400).
func (f *Front) Refused(status int) {
	for i, c := range RefusedCodes {
		if c == status {
			f.refused[i].Add(1)
			return
		}
	}
	f.refused[0].Add(1)
}

// RefusedTotal is the number of requests refused with code, one of RefusedCodes.
func (f *Front) RefusedTotal(code int) uint64 {
	for i, c := range RefusedCodes {
		if c == code {
			return f.refused[i].Load()
		}
	}
	return 0
}

// ErrorHandler is the front end's fasthttp.Server.ErrorHandler: it answers a request that could not be
// read, and counts it. A framing violation (the connection's Refusal) is answered with its status;
// fasthttp's own errors with 431 (head over its buffer), 413, 408 (a read timeout) or 400. Either way
// the connection closes after the answer with a lingering close (frontConn.Close), so that the
// client's unread bytes do not turn the close into a reset that loses the answer.
func (f *Front) ErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	status, reason := fasthttp.StatusBadRequest, "malformed request"
	fc := frontOf(ctx.Conn())
	if fc != nil && fc.failed.Load() != nil {
		fc.answered.Store(true)
		e := fc.failed.Load()
		status, reason = e.Status, e.Reason
	} else {
		var small *fasthttp.ErrSmallBuffer
		switch {
		case errors.As(err, &small):
			status, reason = fasthttp.StatusRequestHeaderFieldsTooLarge, "request header fields too large"
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			status, reason = fasthttp.StatusRequestEntityTooLarge, "request body too large"
		case isTimeout(err):
			status, reason = fasthttp.StatusRequestTimeout, "request timeout"
		}
		if fc != nil { // answered here, and lingered on at the close like a framing violation
			fc.answered.Store(true)
			fc.failed.CompareAndSwap(nil, &Refusal{status, reason})
		}
	}
	f.Refused(status)
	if fc != nil {
		fc.logRefusal(status, reason)
		// fasthttp answers and closes: a connection error, of the error's kind when it is the
		// connection's own (the read that failed was noted first, see Read), else refused.
		k, ok := connKindOf(err)
		if !ok || k == ConnOther {
			k = ConnRefused
		}
		fc.noteError(k)
	}
	ctx.Error(RefusalBody(status, reason), status)
}

// BodyRefusal is the answer to a request whose body could not be read (err, on connection c): the
// framer's refusal when it cut the body (claimed here), else 413 past max_body_size, 408 when the body
// stopped arriving, else 400. The client is at fault, never a server.
func BodyRefusal(c net.Conn, err error) (status int, reason string) {
	switch fe := Claim(c); {
	case fe != nil:
		return fe.Status, fe.Reason
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, "request body too large"
	case isTimeout(err):
		return fasthttp.StatusRequestTimeout, "the request body stopped arriving"
	}
	return fasthttp.StatusBadRequest, "the request body could not be read"
}

// Claim returns the refusal the framer found on c, a connection fasthttp handed to the handler (a
// violation in a streamed body, failing the body's read), if nobody answered it yet, and marks it
// answered: the caller answers it (with RefusalBody and Connection: close) and counts it (Refused).
// It returns nil when there is none to answer.
func Claim(c net.Conn) *Refusal {
	if fc := frontOf(c); fc != nil {
		return fc.claim()
	}
	return nil
}

// RefusalBody is the body of the front end's answer to a request it refuses: "413 Request Entity Too
// Large: request body too large".
func RefusalBody(status int, reason string) string {
	return strconv.Itoa(status) + " " + fasthttp.StatusMessage(status) + ": " + reason + "\n"
}

// errorAnswer is the raw answer to a request refused before fasthttp read it.
func errorAnswer(e *Refusal) []byte {
	body := RefusalBody(e.Status, e.Reason)
	return []byte("HTTP/1.1 " + strconv.Itoa(e.Status) + " " + fasthttp.StatusMessage(e.Status) + "\r\n" +
		"Connection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// linger half-closes c and discards what the client still sends for up to half a second (256 KiB at
// most), so that the answer is not lost to a reset.
func linger(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.(closeWriter); ok {
		cw.CloseWrite() //nolint:errcheck
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)) //nolint:errcheck
	var buf [4096]byte
	for range 64 {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// RefusedRequest is the access log's account of a request the front end refused before any handler
// read it (nothing of it reached a server): what the client sent, as far as it was readable, and how
// the front end answered.
type RefusedRequest struct {
	Client net.Addr
	Proto  string // "http/1.1" or "h2"
	// Method and Path are the request's as the client sent them, Path without the query string (nor a
	// scheme and authority, for an absolute-form target); "" when the request line (or HTTP/2's
	// pseudo-header fields) could not be read that far.
	Method, Path string
	Status       int    // the answer's status; 0 for an HTTP/2 stream reset without an answer
	Reset        string // an HTTP/2 stream's reset error code ("PROTOCOL_ERROR"); "" otherwise
	Reason       string // why it was refused
	// Took runs from the request's first byte read (an HTTP/2 stream's HEADERS) to the refusal: about
	// nothing for a request refused in the read that brought it, header_timeout for a 408.
	Took time.Duration
}

// refusedLog hands r to OnRefused, if set. A refused request's "method" and "path" are whatever bytes
// stood there: a method that is no token is not logged (a client that sends "Cookie: secret" as its
// request line must not have its cookie logged), nor a path that is in no target form (LoggedPath).
func (f *Front) refusedLog(r *RefusedRequest) {
	if f.OnRefused == nil {
		return
	}
	for i := 0; i < len(r.Method); i++ {
		if !tchar[r.Method[i]] {
			r.Method = ""
			break
		}
	}
	f.OnRefused(r)
}

// maxLoggedLine bounds the bytes of a request line kept for the log of its refusal.
const maxLoggedLine = 256

// keepLine keeps the request line of the message the framer is in (up to maxLoggedLine bytes), and
// when its first byte was read, for the log of its refusal: from p, the bytes of one read whose
// first is the connection's byte base, if the message began in it, or if its line began in an earlier
// one and goes on here. Read calls it at a refusal and when a request goes on past a read (a request
// line read whole with its head costs nothing; fasthttp reads a keep-alive request's first byte alone,
// which costs a clock reading and one byte kept).
func (c *frontConn) keepLine(p []byte, base int64) {
	switch {
	case c.f.trailer:
		return
	case c.f.headStart >= base && c.f.headStart-base < int64(len(p)): // the message began in this read
		p = p[c.f.headStart-base:]
		c.line, c.lineAt, c.lineOf, c.lineDone = c.line[:0], time.Now(), c.f.headStart, false
	case c.lineOf != c.f.headStart || c.lineDone:
		return
	}
	if i := bytes.IndexAny(p, "\r\n"); i >= 0 {
		p, c.lineDone = p[:i], true
	}
	c.line = append(c.line, p[:min(len(p), maxLoggedLine-len(c.line))]...)
	c.lineDone = c.lineDone || len(c.line) == maxLoggedLine
}

// logRefusal logs the refusal of the connection's current request with status.
func (c *frontConn) logRefusal(status int, reason string) {
	if c.front.OnRefused == nil {
		return
	}
	r := &RefusedRequest{Client: c.Conn.RemoteAddr(), Proto: "http/1.1", Status: status, Reason: reason}
	if c.lineOf == c.f.headStart && !c.lineAt.IsZero() { // the line kept is the refused request's
		method, target, _ := bytes.Cut(c.line, []byte{' '})
		target, _, _ = bytes.Cut(target, []byte{' '})
		r.Method, r.Path, r.Took = string(method), LoggedPath(target), time.Since(c.lineAt)
	}
	c.front.refusedLog(r)
}

// LoggedPath is the path of a request target as the access log shows it: without the query string or
// fragment (ThingWorx accepts an appKey there), of an absolute-form target only the path (its
// authority may hold userinfo), and nothing of a target in no form ("" : it may be any bytes).
func LoggedPath[T string | []byte](target T) string {
	t := []byte(target)
	if len(t) > 0 && t[0] != '/' && t[0] != '*' {
		_, rest, ok := bytes.Cut(t, []byte("://"))
		t = nil
		if i := bytes.IndexByte(rest, '/'); ok && i >= 0 {
			t = rest[i:]
		}
	}
	if i := bytes.IndexAny(t, "?#"); i >= 0 {
		t = t[:i]
	}
	return string(t)
}
