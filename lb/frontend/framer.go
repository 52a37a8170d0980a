package frontend

import (
	"strconv"
	"time"
)

// The front end checks every byte a client sends before fasthttp parses it. fasthttp is lenient (it
// accepts obs-fold, bare LF line ends and chunk sizes it then fails to read only once the request has
// gone upstream), and an ingress must not forward what the servers behind it might read differently:
// that is how requests are smuggled. So each accepted connection is a frontConn (conn.go) whose Read
// runs the bytes through a framer, a byte-level HTTP/1.1 state machine (RFC 9112) that knows where
// every message starts and ends:
//
//	head     request line and header fields: token method, a target of the bytes RFC 3986 allows (see
//	         targetByte), HTTP/1.0 or 1.1, CRLF
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
//	         answer (lb's handler), so no unchecked byte is ever read as a request
//
// A violation holds back the whole message it is found in: Read returns the complete messages before it
// (pipelined requests are served), then the error. A message that arrived whole in one read, such as a
// head with its first chunk header, is therefore refused before any of it reaches fasthttp, let alone a
// server. A violation found in a later read of a streamed body fails the body stream: the upstream
// request is aborted before its end, and the client gets the answer (lb's forwarding, through Claim).
// The answer (400, 408, 413, 431 or 505, with Connection: close) is written by fasthttp's error handler
// (Front.ErrorHandler), or by Close when fasthttp closed the connection without one; either way the
// connection then closes (refuse.go).

// Refusal is a request the front end refuses, with the status of its answer and the reason the answer
// gives. It is the error a front end connection's Read returns.
type Refusal struct {
	Status int
	Reason string
}

func (e *Refusal) Error() string { return strconv.Itoa(e.Status) + " " + e.Reason }

func badRequest(reason string) *Refusal { return &Refusal{400, reason} }

// Limits are the [frontend] limits the framer enforces.
type Limits struct {
	MaxHeader     int           // max_header_size: request line + header fields (and a chunked body's trailer section), bytes
	MaxBody       int64         // max_body_size: 0 = none
	HeaderTimeout time.Duration // header_timeout: 0 = none
}

// Check runs p, the first bytes of a client connection, through a new framer with the limits lim, as
// one read of the connection would. It returns nil if the framer lets them through (whole messages or
// the beginning of one); else the refusal and the index in p where the refused message starts (-1 when
// the first byte is refused before any message began): the complete messages before that index are
// the ones a connection would still serve. Like a connection's Read, Check may rewrite bytes of p
// (whitespace after a chunk size, see scan).
func Check(lim Limits, p []byte) (start int, err error) {
	f := framer{lim: &lim}
	start, r := f.scan(p)
	if r == nil {
		return start, nil
	}
	return start, r
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

// alnumAnd returns the set of the ASCII letters and digits and the bytes of extra.
func alnumAnd(extra string) (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for i := 0; i < len(extra); i++ {
		t[extra[i]] = true
	}
	return t
}

// tchar marks the token characters of RFC 9110 5.6.2.
var tchar = alnumAnd("!#$%&'*+-.^_`|~")

// targetByte marks the bytes a request-target may hold: those RFC 3986 allows in the four forms of RFC
// 9112 section 3.2 (origin, absolute, authority, asterisk), that is unreserved (ALPHA DIGIT - . _ ~),
// sub-delims (! $ & ' ( ) * + , ; =), ':', '@', '/', '?', '%' of a pct-encoding, and '[' ']' of an
// IP-literal. Refused with 400: control bytes, space (it ends the target), DEL, bytes over 0x7e, and
// the visible bytes RFC 3986 has no place for: '"', '#', '<', '>', '\', '^', '`', '{', '|', '}'.
//
// '#' starts a fragment, which a client never sends (RFC 9112 section 3.2): a server that cuts the
// target there reads another path than a proxy that does not (HAProxy refuses it, CVE-2023-45539). The
// others have no place in a URI and servers differ on them: some refuse them, IIS reads '\' as '/',
// others pass them unescaped into pages and logs. The set is exactly the one Tomcat, on which ThingWorx
// runs, refuses by default (its HttpParser, unless relaxedPathChars or relaxedQueryChars allow them): a
// default ThingWorx answers them 400 itself. HAProxy is more lenient: its HTTP/1 parser (2.6 to 3.x)
// refuses only '#', control bytes and bytes over 0x7e in a target, and forwards '"' '<' '>' '\' '^' '`'
// '{' '|' '}' as sent.
//
// Kept, as HAProxy keeps them: '[' ']' (browsers send them unencoded in queries, "a[]=1"; Tomcat
// refuses them in a query unless relaxedQueryChars allows them), and a '%' that begins no pct-encoding
// ("%zz", a trailing '%'), which HAProxy forwards and fasthttp and Tomcat leave to the decoding of the
// path or the query.
var targetByte = alnumAnd("-._~!$&'()*+,;=:@/?%[]")

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
	lim   *Limits
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
func (f *framer) scan(p []byte) (start int, err *Refusal) {
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
			for j < len(p) && targetByte[p[j]] {
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
			if f.base+int64(i)+1-f.headStart > int64(f.lim.MaxHeader) {
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
			if f.base+int64(i)+1-f.headStart > int64(f.lim.MaxHeader) {
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
	if f.inHead() && f.base-f.headStart > int64(f.lim.MaxHeader) {
		return start, errHeadTooLarge
	}
	return start, nil
}

var errHeadTooLarge = &Refusal{431, "request header fields too large"}

func (f *framer) beginMessage(at int64) {
	f.headStart, f.http10, f.trailer = at, false, false
	f.hasCL, f.hasTE, f.upgrade, f.hosts, f.cl, f.emptyHost = false, false, false, 0, 0, false
}

var httpVersion = []byte("HTTP/1.")

// version reads the byte at f.vpos of "HTTP/1.x".
func (f *framer) version(c byte) *Refusal {
	switch {
	case f.vpos < len(httpVersion):
		if c != httpVersion[f.vpos] {
			if f.vpos == 5 && c >= '0' && c <= '9' {
				return &Refusal{505, "HTTP version not supported"}
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
				return &Refusal{505, "HTTP version not supported"}
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
func (f *framer) valueByte(c byte) *Refusal {
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
func (f *framer) endField() *Refusal {
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
func (f *framer) endHead() *Refusal {
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
		if f.lim.MaxBody > 0 && f.cl > f.lim.MaxBody {
			return &Refusal{413, "request body too large"}
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

func (f *framer) chunkSizeByte(c byte) *Refusal {
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
func (f *framer) chunkExtByte(c byte) *Refusal {
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
func (f *framer) endChunkSize(at int64) *Refusal {
	if f.remain == 0 { // the last chunk: the trailer section follows
		f.state, f.trailer, f.headStart = stLineStart, true, at
		return nil
	}
	f.body += f.remain
	if f.lim.MaxBody > 0 && f.body > f.lim.MaxBody {
		return &Refusal{413, "request body too large"}
	}
	f.state = stChunkData
	return nil
}
