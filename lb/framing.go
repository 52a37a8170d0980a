package lb

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The front end checks every byte a client sends before fasthttp parses it. fasthttp is lenient (it
// accepts obs-fold, bare LF line ends and chunk sizes it then fails to read only once the request has
// gone upstream), and an ingress must not forward what the servers behind it might read differently:
// that is how requests are smuggled. So each accepted connection is a frontConn whose Read runs the bytes
// through a framer, a byte-level HTTP/1.1 state machine (RFC 9112) that knows where every message
// starts and ends:
//
//	head     request line and header fields: token method, visible-ASCII target, HTTP/1.0 or 1.1, CRLF
//	         line ends only, header names of token characters right before the colon, values without
//	         control bytes, no obs-fold, at most max_header_size bytes (431), received within
//	         header_timeout of its first byte (408)
//	framing  one Content-Length of digits, or Transfer-Encoding exactly "chunked" (HTTP/1.1 only), never
//	         both; HTTP/1.1 has exactly one Host; a Content-Length over max_body_size is refused (413)
//	body     Content-Length bytes are skipped; a chunked body is checked as it streams: hex sizes, chunk
//	         extensions (the whole chunk-ext grammar: token names, token or quoted-string values,
//	         whitespace only around ';' and '='), CRLF after each chunk's data, the trailer fields like
//	         header fields, and the sum of the chunk sizes against max_body_size (413)
//	upgrade  after a request with an Upgrade header the connection is opaque: if the request becomes a
//	         tunnel the bytes are WebSocket frames; if it does not, the connection is closed after the
//	         answer (proxy.go), so no unchecked byte is ever read as a request
//
// A violation holds back the whole message it is found in: Read returns the complete messages before it
// (pipelined requests are served), then the error. A message that arrived whole in one read, such as a
// head with its first chunk header, is therefore refused before any of it reaches fasthttp, let alone a
// server. A violation found in a later read of a streamed body fails the body stream: the upstream
// request is aborted before its end, and the client gets the answer (proxy.go). The answer (400, 408,
// 413, 431 or 505, with Connection: close) is written by fasthttp's error handler (frontendError), or by
// Close when fasthttp closed the connection without one; either way the connection then closes.

// frameError is a request the front end refuses. It is the error Read returns.
type frameError struct {
	status int
	reason string
}

func (e *frameError) Error() string { return strconv.Itoa(e.status) + " " + e.reason }

func badRequest(reason string) *frameError { return &frameError{400, reason} }

// frameLimits are the [frontend] limits the framer enforces, fixed at start.
type frameLimits struct {
	maxHeader     int   // request line + header fields (and a chunked body's trailer section), bytes
	maxBody       int64 // 0 = none
	headerTimeout time.Duration
}

// framer states.
const (
	stStart              = iota // between messages (empty lines allowed)
	stStartCR                   // CR of an empty line before a request
	stMethod                    // in the method token
	stTarget0                   // the first byte of the request target
	stTarget                    // in the request target
	stVersion                   // in "HTTP/1.x"
	stVersionCR                 // CR after the version
	stLineStart                 // at the start of a header (or trailer) line
	stName                      // in a field name
	stValueOWS                  // whitespace before a field value
	stValue                     // in a field value
	stValueCR                   // CR after a field value
	stHeadCR                    // CR of the blank line that ends the head (or the trailers)
	stBody                      // Content-Length bytes left: remain
	stChunkSize                 // in a chunk size
	stChunkBWS                  // whitespace after a chunk size, before ';'
	stChunkExt0                 // after ';': whitespace, then an extension's name
	stChunkExtName              // in an extension's name
	stChunkExtNameBWS           // whitespace after a name: '=' or ';' must follow
	stChunkExtEq                // after '=': whitespace, then the value
	stChunkExtToken             // in a token value
	stChunkExtQuoted            // in a quoted-string value
	stChunkExtQuotedPair        // after '\' in a quoted string
	stChunkExtValEnd            // right after a quoted string's closing '"'
	stChunkExtValBWS            // whitespace after a value: ';' must follow
	stChunkSizeCR               // CR after a chunk-size line
	stChunkData                 // chunk data bytes left: remain
	stChunkDataCR               // CR after chunk data
	stChunkDataLF               // LF after chunk data
	stOpaque                    // after an upgrade request: not HTTP any more
)

// The header fields the framer reads.
const (
	fOther = iota
	fContentLength
	fTransferEncoding
	fHost
	fUpgrade
	fDupContentLength // a second Content-Length
)

// tchar marks the token characters of RFC 9110 5.6.2.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// fieldByte marks the bytes allowed in a field value: visible ASCII, space, tab and obs-text.
var fieldByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] = true
	}
	t['\t'] = true
	return t
}()

// framer is the state machine of one client connection.
type framer struct {
	lim   *frameLimits
	state uint8
	field uint8 // the header field being read (fOther, fContentLength, ...)
	// request line and head
	base      int64 // bytes of the connection scanned before the current read
	headStart int64 // where the current head (or trailer section) starts, counted like base
	vpos      int   // position in "HTTP/1.x"
	http10    bool  // the request is HTTP/1.0
	trailer   bool  // the head being read is a chunked body's trailer section
	// fields seen in the head
	hasCL, hasTE, upgrade bool
	hosts                 int
	emptyHost             bool  // a Host field without a value
	cl                    int64 // the Content-Length
	// the field being read
	name    [17]byte // its name, lower case, up to len("transfer-encoding")
	nameLen int
	valLen  int  // value bytes so far (after leading whitespace)
	valEnd  bool // trailing whitespace seen: any further value byte is an error for the fields read here
	te      [7]byte
	// body
	remain   int64 // bytes left in a Content-Length body or the current chunk
	body     int64 // chunked body bytes so far
	chunkLen int   // bytes of the current chunk-size line
	digits   int   // hex digits of the current chunk size
}

// inHead reports whether the framer is inside a head or a trailer section, where header_timeout runs.
func (f *framer) inHead() bool {
	return f.state >= stMethod && f.state <= stHeadCR
}

// inRequest reports whether the framer is inside a request: its head or its body begun and not ended.
func (f *framer) inRequest() bool {
	return f.state != stStart && f.state != stStartCR && f.state != stOpaque
}

// scan checks p, the next bytes of the connection, and hands them on unchanged but for one byte
// (whitespace after a chunk size, see stChunkBWS). On a violation it returns the error and the index in
// p where the message it is in started (-1 if it started in an earlier read). The bytes of a field
// value, a request target or a field name are checked in runs; only the bytes that change the state
// go through the switch one by one.
func (f *framer) scan(p []byte) (start int, err *frameError) {
	start = -1
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch f.state {
		case stStart:
			switch {
			case c == '\r':
				f.state = stStartCR
			case tchar[c]:
				start = i
				f.beginMessage(f.base + int64(i))
				f.state = stMethod
			default:
				return start, badRequest("invalid request line")
			}
		case stStartCR:
			if c != '\n' {
				return start, badRequest("bare CR")
			}
			f.state = stStart
		case stMethod:
			if c == ' ' {
				f.state = stTarget0
			} else if !tchar[c] {
				return start, badRequest("invalid method")
			}
		case stTarget0, stTarget:
			j := i
			for j < len(p) && p[j] > ' ' && p[j] < 0x7f {
				j++
			}
			if j > i {
				f.state, i = stTarget, j-1
				continue
			}
			if c == ' ' && f.state == stTarget {
				f.state, f.vpos = stVersion, 0
			} else {
				return start, badRequest("invalid request target")
			}
		case stVersion:
			if err := f.version(c); err != nil {
				return start, err
			}
		case stVersionCR, stValueCR, stChunkSizeCR:
			if c != '\n' {
				return start, badRequest("bare CR")
			}
			switch f.state {
			case stVersionCR:
				f.state = stLineStart
			case stValueCR:
				if err := f.endField(); err != nil {
					return start, err
				}
				f.state = stLineStart
			default:
				if err := f.endChunkSize(f.base + int64(i) + 1); err != nil {
					return start, err
				}
				continue
			}
			if f.base+int64(i)+1-f.headStart > int64(f.lim.maxHeader) {
				return start, errHeadTooLarge
			}
		case stLineStart:
			switch {
			case c == '\r':
				f.state = stHeadCR
			case c == ' ' || c == '\t':
				return start, badRequest("obsolete line folding")
			case tchar[c]:
				f.state, f.nameLen, f.valLen, f.valEnd = stName, 0, 0, false
				i--
			case c == '\n':
				return start, badRequest("bare LF")
			default:
				return start, badRequest("invalid header name")
			}
		case stName:
			j := i
			for j < len(p) && tchar[p[j]] {
				if f.nameLen < len(f.name) {
					f.name[f.nameLen] = p[j] | 0x20 // lower case (the names compared are letters and '-')
				}
				f.nameLen++
				j++
			}
			if j > i {
				i = j - 1
				continue
			}
			switch {
			case c == ':':
				f.field = f.classify()
				f.state = stValueOWS
			case c == ' ' || c == '\t':
				return start, badRequest("whitespace before the colon of a header field")
			default:
				return start, badRequest("invalid header name")
			}
		case stValueOWS, stValue:
			if f.field == fOther && c != '\r' {
				// A value that is not read for framing: one run over its bytes.
				j := i
				for j < len(p) && fieldByte[p[j]] {
					j++
				}
				if j > i {
					f.state, i = stValue, j-1
					continue
				}
			}
			switch {
			case c == '\r':
				f.state = stValueCR
			case c == ' ' || c == '\t':
				if f.state == stValue {
					f.valEnd = true
				}
			case fieldByte[c]:
				f.state = stValue
				if err := f.valueByte(c); err != nil {
					return start, err
				}
			case c == '\n':
				return start, badRequest("bare LF")
			default:
				return start, badRequest("control byte in a header field")
			}
		case stHeadCR:
			if c != '\n' {
				return start, badRequest("bare CR")
			}
			if f.base+int64(i)+1-f.headStart > int64(f.lim.maxHeader) {
				return start, errHeadTooLarge
			}
			if err := f.endHead(); err != nil {
				return start, err
			}
		case stBody, stChunkData:
			n := int64(len(p) - i)
			if n > f.remain {
				n = f.remain
			}
			f.remain -= n
			i += int(n) - 1
			if f.remain == 0 {
				if f.state == stBody {
					f.endMessage()
				} else {
					f.state = stChunkDataCR
				}
			}
		case stChunkSize:
			if err := f.chunkSizeByte(c); err != nil {
				return start, err
			}
			if f.state == stChunkBWS {
				p[i] = ';' // see below
			}
		case stChunkBWS, stChunkExt0, stChunkExtName, stChunkExtNameBWS, stChunkExtEq, stChunkExtToken,
			stChunkExtQuoted, stChunkExtQuotedPair, stChunkExtValEnd, stChunkExtValBWS:
			if err := f.chunkExtByte(c); err != nil {
				return start, err
			}
			if f.state == stChunkBWS {
				// Whitespace between a chunk size and its first ';' is bad whitespace that RFC 9112
				// 7.1.1 allows and fasthttp refuses ("5 ;a"): fasthttp reads it as ';', the start of
				// an extension it skips. The line was checked as sent; its extensions are dropped when
				// the body is re-encoded upstream, so the server sees the same either way. (A line
				// that ends after the whitespace is refused above.)
				p[i] = ';'
			}
		case stChunkDataCR:
			if c != '\r' {
				return start, badRequest("chunk data not followed by CRLF")
			}
			f.state = stChunkDataLF
		case stChunkDataLF:
			if c != '\n' {
				return start, badRequest("chunk data not followed by CRLF")
			}
			f.state, f.remain, f.digits, f.chunkLen = stChunkSize, 0, 0, 0
		case stOpaque:
			f.base += int64(len(p))
			return start, nil
		}
	}
	f.base += int64(len(p))
	if f.inHead() && f.base-f.headStart > int64(f.lim.maxHeader) {
		return start, errHeadTooLarge
	}
	return start, nil
}

var errHeadTooLarge = &frameError{431, "request header fields too large"}

func (f *framer) beginMessage(at int64) {
	f.headStart, f.http10, f.trailer = at, false, false
	f.hasCL, f.hasTE, f.upgrade, f.hosts, f.cl, f.emptyHost = false, false, false, 0, 0, false
}

var httpVersion = []byte("HTTP/1.")

// version reads the byte at f.vpos of "HTTP/1.x".
func (f *framer) version(c byte) *frameError {
	switch {
	case f.vpos < len(httpVersion):
		if c != httpVersion[f.vpos] {
			if f.vpos == 5 && c >= '0' && c <= '9' {
				return &frameError{505, "HTTP version not supported"}
			}
			return badRequest("invalid HTTP version")
		}
	case f.vpos == len(httpVersion):
		switch c {
		case '0':
			f.http10 = true
		case '1':
		default:
			if c >= '2' && c <= '9' {
				return &frameError{505, "HTTP version not supported"}
			}
			return badRequest("invalid HTTP version")
		}
	default:
		if c == '\r' {
			f.state = stVersionCR
			return nil
		}
		if c == '\n' {
			return badRequest("bare LF")
		}
		return badRequest("invalid request line")
	}
	f.vpos++
	return nil
}

// classify names the field just read.
func (f *framer) classify() uint8 {
	if f.trailer || f.nameLen > len(f.name) {
		return fOther
	}
	switch string(f.name[:f.nameLen]) {
	case "content-length":
		if f.hasCL {
			return fDupContentLength // a second one, refused in endField
		}
		return fContentLength
	case "transfer-encoding":
		return fTransferEncoding
	case "host":
		return fHost
	case "upgrade":
		return fUpgrade
	}
	return fOther
}

// valueByte reads a byte of a field value (whitespace excluded; it ended any value byte run).
func (f *framer) valueByte(c byte) *frameError {
	switch f.field {
	case fOther, fUpgrade:
		return nil
	case fHost:
		f.valLen++ // only whether it has a value is read
		return nil
	case fContentLength:
		if c < '0' || c > '9' || f.valEnd {
			return badRequest("invalid Content-Length")
		}
		if f.cl > (1<<62)/10 {
			return badRequest("invalid Content-Length")
		}
		f.cl = f.cl*10 + int64(c-'0')
	case fTransferEncoding:
		if f.valEnd || f.valLen >= len(f.te) {
			return badRequest("unsupported Transfer-Encoding (only chunked)")
		}
		f.te[f.valLen] = c | 0x20
	}
	f.valLen++
	return nil
}

// endField is called at the end of a field line.
func (f *framer) endField() *frameError {
	switch f.field {
	case fContentLength:
		if f.valLen == 0 {
			return badRequest("invalid Content-Length")
		}
		f.hasCL = true
	case fDupContentLength:
		return badRequest("more than one Content-Length")
	case fTransferEncoding:
		if f.hasTE {
			return badRequest("more than one Transfer-Encoding")
		}
		if f.valLen != len(f.te) || string(f.te[:]) != "chunked" {
			return badRequest("unsupported Transfer-Encoding (only chunked)")
		}
		f.hasTE = true
	case fHost:
		f.hosts++
		f.emptyHost = f.emptyHost || f.valLen == 0
	case fUpgrade:
		f.upgrade = true
	}
	f.field = fOther
	return nil
}

// endHead is called at the end of a head or a trailer section.
func (f *framer) endHead() *frameError {
	if f.trailer {
		f.endMessage()
		return nil
	}
	switch {
	case f.hasCL && f.hasTE:
		return badRequest("Content-Length with Transfer-Encoding")
	case f.hasTE && f.http10:
		return badRequest("Transfer-Encoding in an HTTP/1.0 request")
	case f.hosts > 1 || (f.hosts == 0 && !f.http10):
		return badRequest("missing or repeated Host")
	case f.emptyHost && !f.http10:
		// An "http" URI with an empty host is invalid (RFC 9110 section 4.2.1), and an HTTP/1.1 request
		// must name its host (RFC 9112 section 3.2). An HTTP/1.0 request may omit it: it goes upstream
		// with the address the client connected to (headers.go).
		return badRequest("empty Host")
	}
	switch {
	case f.hasTE:
		f.state, f.body, f.remain, f.digits, f.chunkLen = stChunkSize, 0, 0, 0, 0
	case f.hasCL && f.cl > 0:
		if f.lim.maxBody > 0 && f.cl > f.lim.maxBody {
			return &frameError{413, "request body too large"}
		}
		f.state, f.remain = stBody, f.cl
	default:
		f.endMessage()
	}
	return nil
}

func (f *framer) endMessage() {
	if f.upgrade {
		f.state = stOpaque
	} else {
		f.state = stStart
	}
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// maxChunkLine bounds a chunk-size line with its extensions.
const maxChunkLine = 4096

func (f *framer) chunkSizeByte(c byte) *frameError {
	if d := unhex(c); d >= 0 {
		if f.digits++; f.digits > 15 {
			return badRequest("invalid chunk size")
		}
		f.remain = f.remain<<4 | int64(d)
		f.chunkLen++
		return nil
	}
	if f.digits == 0 {
		return badRequest("invalid chunk size")
	}
	return f.chunkExtByte(c)
}

// qdtext marks the bytes of a quoted string that stand for themselves (RFC 9110 5.6.4): HTAB, SP,
// visible ASCII but '"' and '\\', and obs-text.
var qdtext = func() (t [256]bool) {
	t['\t'], t[' '] = true, true
	for c := 0x21; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	for c := 0x80; c < 0x100; c++ {
		t[c] = true
	}
	return t
}()

// chunkExtByte reads a byte after a chunk size's digits, checking the chunk-ext grammar of RFC 9112
// 7.1.1 to the end of the line:
//
//	chunk-ext     = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//	chunk-ext-val = token / quoted-string
//
// so whitespace is allowed around ';' and '=' but not before the CRLF, names and token values are
// tokens, and a quoted string holds qdtext and quoted-pairs ("\\" and HTAB, SP, a visible byte or
// obs-text) and is closed before the line ends.
func (f *framer) chunkExtByte(c byte) *frameError {
	if f.chunkLen++; f.chunkLen > maxChunkLine {
		return badRequest("chunk extension too long")
	}
	ws := c == ' ' || c == '\t'
	switch f.state {
	case stChunkSize, stChunkBWS: // after the digits
		switch {
		case c == ';':
			f.state = stChunkExt0
		case ws:
			f.state = stChunkBWS
		case c == '\r' && f.state == stChunkSize:
			f.state = stChunkSizeCR
		case c == '\n':
			return badRequest("bare LF")
		case c == '\r':
			return badRequest("invalid chunk extension") // whitespace before the CRLF
		default:
			return badRequest("invalid chunk size")
		}
	case stChunkExt0, stChunkExtNameBWS, stChunkExtEq, stChunkExtValBWS:
		// Whitespace, then what may come there: a name (after ';'), '=' or ';' (after a name), a
		// value (after '='), ';' (after a value).
		switch {
		case ws:
		case f.state == stChunkExt0 && tchar[c]:
			f.state = stChunkExtName
		case f.state == stChunkExtNameBWS && c == '=':
			f.state = stChunkExtEq
		case (f.state == stChunkExtNameBWS || f.state == stChunkExtValBWS) && c == ';':
			f.state = stChunkExt0
		case f.state == stChunkExtEq && tchar[c]:
			f.state = stChunkExtToken
		case f.state == stChunkExtEq && c == '"':
			f.state = stChunkExtQuoted
		case c == '\n':
			return badRequest("bare LF")
		default:
			return badRequest("invalid chunk extension")
		}
	case stChunkExtName, stChunkExtToken, stChunkExtValEnd:
		// In a name or a token value, or after a quoted value: the token goes on, or it ends.
		switch {
		case tchar[c] && f.state != stChunkExtValEnd:
		case c == '\r':
			f.state = stChunkSizeCR
		case c == ';':
			f.state = stChunkExt0
		case c == '=' && f.state == stChunkExtName:
			f.state = stChunkExtEq
		case ws && f.state == stChunkExtName:
			f.state = stChunkExtNameBWS
		case ws:
			f.state = stChunkExtValBWS
		case c == '\n':
			return badRequest("bare LF")
		default:
			return badRequest("invalid chunk extension")
		}
	case stChunkExtQuoted:
		switch {
		case qdtext[c]:
		case c == '"':
			f.state = stChunkExtValEnd
		case c == '\\':
			f.state = stChunkExtQuotedPair
		case c == '\n':
			return badRequest("bare LF")
		default: // a control byte, DEL, or the line's end before the closing quote
			return badRequest("invalid chunk extension")
		}
	case stChunkExtQuotedPair:
		if c != '\t' && c < ' ' || c == 0x7f {
			return badRequest("invalid chunk extension")
		}
		f.state = stChunkExtQuoted
	}
	return nil
}

// endChunkSize is called at the end of a chunk-size line; at is where the next line starts.
func (f *framer) endChunkSize(at int64) *frameError {
	if f.remain == 0 { // the last chunk: the trailer section follows
		f.state, f.trailer, f.headStart = stLineStart, true, at
		return nil
	}
	f.body += f.remain
	if f.lim.maxBody > 0 && f.body > f.lim.maxBody {
		return &frameError{413, "request body too large"}
	}
	f.state = stChunkData
	return nil
}

// frontListener wraps the front end's listener: every connection it accepts is a frontConn.
type frontListener struct {
	net.Listener
	lb  *LB
	tls *tls.Config // the HTTPS listener's (tls.go), nil for the plain one
}

func (lb *LB) frontListener(ln net.Listener) net.Listener {
	return &frontListener{Listener: ln, lb: lb}
}

func (l *frontListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		fc := &frontConn{Conn: tc, lb: l.lb, tc: tc}
		fc.f.lim = l.lb.limits
		return tlsFrontConn{fc}, nil
	}
	fc := &frontConn{Conn: c, lb: l.lb}
	fc.f.lim = l.lb.limits
	return fc, nil
}

// refusedCodes are the answers of the front end to requests it refuses, counted in
// fairlead_bad_requests_total{code}.
var refusedCodes = [...]int{400, 405, 408, 413, 431, 505}

// refused counts a request the front end refused with status.
func (lb *LB) refused(status int) {
	for i, c := range refusedCodes {
		if c == status {
			lb.badRequests[i].Add(1)
			return
		}
	}
	lb.badRequests[0].Add(1)
}

// frontendError is fasthttp's error handler: it answers a request that could not be read. A framing
// violation (the connection's frameError) is answered with its status; fasthttp's own errors with 431
// (head over its buffer), 413, 408 (a read timeout) or 400. Either way the connection closes after the
// answer with a lingering close (frontConn.Close), so that the client's unread bytes do not turn the
// close into a reset that loses the answer.
func (lb *LB) frontendError(ctx *fasthttp.RequestCtx, err error) {
	status, reason := fasthttp.StatusBadRequest, "malformed request"
	fc := frontOf(ctx.Conn())
	if fc != nil && fc.failed.Load() != nil {
		fc.answered.Store(true)
		e := fc.failed.Load()
		status, reason = e.status, e.reason
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
			fc.failed.CompareAndSwap(nil, &frameError{status, reason})
		}
	}
	lb.refused(status)
	if fc := frontOf(ctx.Conn()); fc != nil {
		// fasthttp answers and closes: a connection error, of the error's kind when it is the
		// connection's own (the read that failed was noted first, see Read), else refused.
		k, ok := connKindOf(err)
		if !ok || k == connOther {
			k = connRefused
		}
		fc.noteError(k)
	}
	ctx.Error(refusalBody(status, reason), status)
	lb.logUnrouted(ctx, lb.gen.Load())
}

// frontConn is an accepted client connection whose bytes are checked by a framer as fasthttp reads them.
// fasthttp uses it from the connection's serving goroutine only (Close may also come from Shutdown).
type frontConn struct {
	net.Conn
	lb      *LB
	tc      *tls.Conn // the TLS connection under an HTTPS client's (Conn), nil for a plain one
	shook   bool      // its handshake ran (tls.go), with this result:
	hsErr   error
	f       framer
	pending *frameError // found, returned by the next Read
	// failed is the error Read returned; answered is set once its answer was written or claimed.
	failed   atomic.Pointer[frameError]
	answered atomic.Bool
	// The read deadline fasthttp asked for, and the header_timeout deadline of a head that did not
	// arrive in one read (zero when none): the socket's deadline is the earlier of the two.
	deadline, headDeadline time.Time
	sockDeadline           time.Time // the read deadline set on the socket (armRead)
	// errNoted is set once the connection's error was counted (noteError), or once it was handed to
	// a tunnel or a relay stream (HandOver), whose ends are theirs to account for.
	errNoted atomic.Bool
}

func (c *frontConn) Read(p []byte) (int, error) {
	if c.tc != nil && c.handshake() != nil {
		return 0, io.EOF
	}
	if c.pending != nil {
		return 0, c.fail(c.pending)
	}
	n, err := c.Conn.Read(p)
	for n == 0 && err != nil && c.tc == nil && isTimeout(err) {
		// The socket's deadline may be earlier than the one in force (armRead).
		t := c.wanted()
		if !t.IsZero() && !time.Now().Before(t) {
			break // the one in force passed
		}
		c.sockDeadline = t
		if c.Conn.SetReadDeadline(t) != nil {
			break
		}
		n, err = c.Conn.Read(p)
	}
	if n > 0 && c.f.state != stOpaque {
		start, ferr := c.f.scan(p[:n])
		if ferr != nil {
			if start > 0 { // the complete messages before it first
				c.pending = ferr
				return start, nil
			}
			return 0, c.fail(ferr)
		}
		c.headTimer()
	}
	if err != nil && !c.headDeadline.IsZero() && isTimeout(err) && !time.Now().Before(c.headDeadline) {
		return n, c.fail(&frameError{408, "request header timeout"})
	}
	if err != nil && c.f.inRequest() {
		// The client closed, reset or stalled in the middle of a request. Between requests (and
		// before the first) that is how connections end.
		if k, ok := connKindOf(err); ok {
			c.noteError(k)
		}
	}
	return n, err
}

func (c *frontConn) fail(e *frameError) error {
	c.failed.Store(e)
	k, _ := connKindOf(e)
	c.noteError(k)
	return e
}

// Write notes a failed write (the client went away while its answer was written) as the
// connection's error.
func (c *frontConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		if k, ok := connKindOf(err); ok {
			c.noteError(k)
		}
	}
	return n, err
}

// noteError counts the connection's error of kind k (connerrors.go), the first one only.
func (c *frontConn) noteError(k connKind) {
	if c.errNoted.CompareAndSwap(false, true) {
		c.lb.connErrs.note(k, c.Conn.RemoteAddr())
	}
}

// HandOver is called when the connection goes to a tunnel or a relay stream (relay.UnwrapHijacked):
// from then on its errors are not the front end's to count.
func (c *frontConn) HandOver() { c.errNoted.Store(true) }

// headTimer starts header_timeout when a head did not arrive whole in one read, and stops it when
// the head is complete. A head that arrives in one read (nearly all) costs nothing.
func (c *frontConn) headTimer() {
	switch in := c.f.inHead(); {
	case in && c.headDeadline.IsZero() && c.f.lim.headerTimeout > 0:
		c.headDeadline = time.Now().Add(c.f.lim.headerTimeout)
		c.armRead() //nolint:errcheck // a failed read reports it
	case !in && !c.headDeadline.IsZero():
		c.headDeadline = time.Time{}
		c.armRead() //nolint:errcheck
	}
}

func (c *frontConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.armRead()
}

// wanted is the read deadline in force: the earlier of fasthttp's and header_timeout's (zero: none).
func (c *frontConn) wanted() time.Time {
	t := c.deadline
	if !c.headDeadline.IsZero() && (t.IsZero() || c.headDeadline.Before(t)) {
		t = c.headDeadline
	}
	return t
}

// armRead gives the socket the read deadline in force, lazily on a plain TCP connection: a deadline
// later than the socket's is not set, the socket keeps its earlier one, and a read that times out
// before the deadline in force sets it then and reads again (Read). fasthttp moves the deadline later
// twice per request (idle_timeout while a keep-alive connection waits, read_timeout once a request
// starts), and each move is a runtime timer update; this way a busy connection pays one every
// read_timeout instead. An earlier deadline, or none, is set at once.
func (c *frontConn) armRead() error {
	t := c.wanted()
	if c.tc == nil && !t.IsZero() && !c.sockDeadline.IsZero() && !t.Before(c.sockDeadline) {
		return nil
	}
	c.sockDeadline = t
	return c.Conn.SetReadDeadline(t)
}

func (c *frontConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// claim returns the error to answer if nobody answered it yet, and marks it answered.
func (c *frontConn) claim() *frameError {
	e := c.failed.Load()
	if e == nil || !c.answered.CompareAndSwap(false, true) {
		return nil
	}
	return e
}

// Close answers a refused request that fasthttp closed without answering (it answers errors of a
// connection's first request only), then closes. Either way the client's unread bytes are drained for
// a moment after the answer (a lingering close), so that closing does not reset the connection before
// the client read the answer.
func (c *frontConn) Close() error {
	if e := c.claim(); e != nil {
		c.lb.refused(e.status)
		c.Conn.SetWriteDeadline(time.Now().Add(time.Second)) //nolint:errcheck
		c.Conn.Write(errorAnswer(e))                         //nolint:errcheck // closing anyway
	}
	if c.failed.Load() != nil {
		linger(c.Conn)
	}
	return c.Conn.Close()
}

// refusalBody is the body of the front end's answer to a request it refuses: "413 Request Entity Too
// Large: request body too large".
func refusalBody(status int, reason string) string {
	return strconv.Itoa(status) + " " + fasthttp.StatusMessage(status) + ": " + reason + "\n"
}

// errorAnswer is the raw answer to a request refused before fasthttp read it.
func errorAnswer(e *frameError) []byte {
	body := refusalBody(e.status, e.reason)
	return []byte("HTTP/1.1 " + strconv.Itoa(e.status) + " " + fasthttp.StatusMessage(e.status) + "\r\n" +
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
