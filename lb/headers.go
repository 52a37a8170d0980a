package lb

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"sync"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/httpfield"
	"github.com/fairlead/fairlead/lb/upstream"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// Messages pass as they were sent, but for what the RFCs require of a proxy.
//
// A request goes upstream as the client wrote it: the head sent is built from the client's raw header
// lines (appendUpstreamHead), so field names keep their case, fields their order and values their bytes,
// and nothing is invented (no Content-Type, no Content-Length on a bodiless request). What changes:
//
//   - the version is HTTP/1.1 (fairlead speaks 1.1 upstream, RFC 9110 section 2.5);
//   - hop-by-hop fields are removed (RFC 9110 section 7.6.1): Connection and every field it names,
//     Keep-Alive, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization, TE, Trailer, Upgrade (kept
//     on a WebSocket upgrade, which is sent with "Connection: Upgrade"), and Expect (fasthttp already
//     answered "100 Continue"; the body follows at once). Content-Length and Transfer-Encoding stay
//     even when Connection names them (a client must not, RFC 9110 section 7.6.1; HAProxy keeps them
//     too): they frame the body that is sent, and without them the server would read the body as the
//     next request;
//   - X-Forwarded-For, -Proto and -Host are set (see appendForwarded);
//   - [routes.auth]: the client's key field is removed, the upstream credential added (routeauth.go);
//   - Host: a request in absolute form ("GET http://host/path") goes in origin form with Host set to the
//     target's authority (RFC 9112 section 3.2.2); an HTTP/1.0 request without Host, or with an empty
//     one, gets the address the client connected to (RFC 9112 section 3.3: an empty authority is
//     replaced by a default consistent with the connection). An HTTP/1.1 request must carry a non-empty
//     Host: without one it was refused with 400 before it got here (lb/frontend);
//   - Content-Length goes as one decimal number, without whitespace or leading zeros (appendLength);
//   - the body keeps the client's framing: Content-Length bytes as they came, a chunked body re-chunked
//     (its chunk extensions and trailer fields are dropped).
//
// An answer is relayed as the server wrote it but for its hop-by-hop fields (prepareResponse) and a Date
// when it had none (RFC 9110 section 6.6.1). Field names keep their case, except the few fields fasthttp
// writes itself in their usual spelling (Content-Type, Content-Length, Content-Encoding,
// Transfer-Encoding, Server, Set-Cookie, Connection); no Server or Content-Type is added. The framing may
// change (an answer that ends with its connection is relayed chunked to an HTTP/1.1 client).
// fairlead's own answers (its 4xx and 5xx) are its own.

// nextField splits the first field line off a raw header block: its name, its value without the
// whitespace around it, and the whole line with its CRLF. ok is false at the end of the block (the
// blank line, or nothing left). The framer has checked every line: token name, colon, CRLF end.
func nextField(raw []byte) (name, value, line, rest []byte, ok bool) {
	i := bytes.IndexByte(raw, '\n')
	if i < 0 {
		return nil, nil, nil, nil, false
	}
	line, rest = raw[:i+1], raw[i+1:]
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, nil, nil, nil, false // the blank line ends the block
	}
	return line[:colon], bytes.TrimSpace(line[colon+1:]), line, rest, true
}

// headFacts is what appendUpstreamHead learns of the client's fields before it writes any.
type headFacts struct {
	host        []byte // the Host value (nil if none)
	namesFields bool   // a Connection field names fields (beyond close and keep-alive)
	xfProto     bool   // X-Forwarded-Proto was sent
	xfHost      bool   // X-Forwarded-Host was sent
	framing     upstream.Framing
}

func readFacts(raw []byte) (f headFacts) {
	for {
		name, value, _, rest, ok := nextField(raw)
		if !ok {
			return f
		}
		raw = rest
		switch httpfield.Of(name) {
		case httpfield.Host:
			f.host = value
		case httpfield.Connection:
			f.namesFields = f.namesFields || namesFields(value)
		case httpfield.XForwardedProto:
			f.xfProto = true
		case httpfield.XForwardedHost:
			f.xfHost = true
		case httpfield.ContentLength:
			f.framing = upstream.BodyLength
		case httpfield.TransferEncoding:
			f.framing = upstream.BodyChunked
		}
	}
}

// forwardSpec is what a request's route and connection add to the head sent upstream.
type forwardSpec struct {
	trusted []netip.Prefix // trusted_proxies
	auth    *config.Auth   // the route's [routes.auth], nil if none
	upgrade bool           // a WebSocket upgrade
}

// appendUpstreamHead appends to dst the head of the request sent upstream for the client's request in
// ctx (see the comment at the top of this file), and returns the body framing to send it with. It
// allocates nothing but for the rare requests without a usable Host (the connection's local address is
// formatted then).
func appendUpstreamHead(dst []byte, ctx *fasthttp.RequestCtx, fs forwardSpec) ([]byte, upstream.Framing) {
	h := &ctx.Request.Header
	raw := h.RawHeaders()
	f := readFacts(raw)

	// The request line, in origin form.
	target, authority := originForm(h.RequestURI())
	dst = append(dst, h.Method()...)
	dst = append(dst, ' ')
	dst = append(dst, target...)
	dst = append(dst, " HTTP/1.1\r\n"...)

	host, sentHost := f.host, len(f.host) > 0
	switch {
	case authority != nil: // absolute form: its authority is the Host (RFC 9112 section 3.2.2)
		host, sentHost = authority, true
		dst = appendField(dst, "Host", host)
	case len(host) == 0: // HTTP/1.0 without Host, or with an empty one
		dst = appendField(dst, "Host", []byte(ctx.LocalAddr().String()))
	}

	proxy := isTrusted(ctx.RemoteIP(), fs.trusted)
	for {
		name, value, line, rest, ok := nextField(raw)
		if !ok {
			break
		}
		raw = rest
		kind := httpfield.Of(name)
		switch {
		case kind == httpfield.Upgrade:
			if fs.upgrade {
				dst = append(dst, line...) // with "Connection: Upgrade", below
			}
			continue
		case kind.HopByHop(), kind == httpfield.XForwardedFor:
			continue // X-Forwarded-For is written below, a trusted proxy's value first
		case kind == httpfield.Host:
			if authority != nil || len(f.host) == 0 {
				continue // replaced above
			}
		case kind == httpfield.XForwardedProto, kind == httpfield.XForwardedHost, kind == httpfield.Forwarded:
			if !proxy {
				continue // only a trusted proxy may tell another address or scheme
			}
		}
		if f.namesFields && kind != httpfield.ContentLength && kind != httpfield.TransferEncoding && namedByConnection(h.RawHeaders(), name) {
			continue // but the body's framing stays: see the comment at the top of this file
		}
		if fs.auth != nil && (eqFoldString(name, fs.auth.Header) || eqFoldString(name, fs.auth.UpstreamHeader)) {
			continue // the client's key ends here; an upstream credential it sent is not passed on
		}
		if kind == httpfield.ContentLength {
			dst = appendLength(dst, name, value)
			continue
		}
		dst = append(dst, line...)
	}

	dst = appendForwarded(dst, ctx, h.RawHeaders(), proxy, f, host, sentHost)
	if fs.auth != nil && fs.auth.UpstreamHeader != "" {
		dst = append(dst, fs.auth.UpstreamHeader...)
		dst = append(dst, ':', ' ')
		dst = append(dst, fs.auth.UpstreamValue...)
		dst = append(dst, '\r', '\n')
	}
	if fs.upgrade {
		dst = append(dst, "Connection: Upgrade\r\n"...)
	}
	return append(dst, '\r', '\n'), f.framing
}

// appendForwarded appends X-Forwarded-For, -Proto and -Host. From a client in trusted (the
// trusted_proxies CIDRs), a proxy in front of fairlead, the X-Forwarded-For values it sent come first
// and its X-Forwarded-Proto, -Host and Forwarded are kept (-Proto and -Host set only when it sent none).
// From any other client, every X-Forwarded-* and Forwarded field it sent was dropped: it cannot pass for
// another address or scheme. X-Forwarded-Host is the Host the client asked for (none if it sent none).
func appendForwarded(dst []byte, ctx *fasthttp.RequestCtx, raw []byte, proxy bool, f headFacts, host []byte, sentHost bool) []byte {
	dst = append(dst, "X-Forwarded-For: "...)
	if proxy {
		first := true
		for {
			name, value, _, rest, ok := nextField(raw)
			if !ok {
				break
			}
			raw = rest
			if len(value) > 0 && httpfield.Of(name) == httpfield.XForwardedFor {
				if !first {
					dst = append(dst, ", "...)
				}
				dst, first = append(dst, value...), false
			}
		}
		if !first {
			dst = append(dst, ", "...)
		}
	}
	if b, ok := stickiness.AppendIP(dst, ctx.RemoteIP()); ok {
		dst = b
	} else {
		dst = append(dst, "unknown"...)
	}
	dst = append(dst, '\r', '\n')
	if !proxy || !f.xfProto {
		if ctx.IsTLS() {
			dst = append(dst, "X-Forwarded-Proto: https\r\n"...)
		} else {
			dst = append(dst, "X-Forwarded-Proto: http\r\n"...)
		}
	}
	if sentHost && (!proxy || !f.xfHost) {
		dst = appendField(dst, "X-Forwarded-Host", host)
	}
	return dst
}

// appendLength appends a Content-Length field line: the name as the client spelled it, and the value
// as one decimal number (RFC 9110 section 8.6), without the whitespace around it or leading zeros: the
// value " 005\t" goes as "5", "00" as "0". The framer let through only digits between optional
// whitespace, in one Content-Length field (two, even equal, are refused): the server gets the number
// the framer read, whatever it would make of whitespace or of a leading zero ("0200" read as octal is
// 128). It allocates nothing: value is a slice of the client's header block.
func appendLength(dst, name, value []byte) []byte {
	for len(value) > 1 && value[0] == '0' {
		value = value[1:]
	}
	dst = append(dst, name...)
	dst = append(dst, ':', ' ')
	dst = append(dst, value...)
	return append(dst, '\r', '\n')
}

func appendField(dst []byte, name string, value []byte) []byte {
	dst = append(dst, name...)
	dst = append(dst, ':', ' ')
	dst = append(dst, value...)
	return append(dst, '\r', '\n')
}

// originForm returns the request target to send: the target itself, or for an absolute-form target
// (scheme "://" authority path-abempty ["?" query]) its path and query, with the authority (without any
// userinfo). authority is nil for any other form. "*" and origin-form targets go as they came.
func originForm(target []byte) (out, authority []byte) {
	if len(target) == 0 || target[0] == '/' || target[0] == '*' {
		return target, nil
	}
	i := bytes.Index(target, []byte("://"))
	if i <= 0 {
		return target, nil // not a URI fairlead can put in origin form: the server judges it
	}
	rest := target[i+3:]
	end := bytes.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, out = rest[:end], rest[end:]
	if at := bytes.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	if len(out) == 0 || out[0] != '/' {
		// "http://host" or "http://host?q": the path is "/" (RFC 9112 section 3.2.1). Rare: allocates.
		out = append([]byte{'/'}, out...)
	}
	if len(authority) == 0 {
		authority = nil
	}
	return out, authority
}

// namesFields reports whether a Connection value names a field: any option but close and keep-alive.
func namesFields(v []byte) bool {
	found := false
	connectionOptions(v, func(tok []byte) { found = true })
	return found
}

// namedByConnection reports whether a Connection field of the raw header block names the field name.
func namedByConnection(raw, name []byte) bool {
	found := false
	for {
		n, value, _, rest, ok := nextField(raw)
		if !ok {
			return found
		}
		raw = rest
		if httpfield.Of(n) == httpfield.Connection {
			connectionOptions(value, func(tok []byte) { found = found || bytes.EqualFold(tok, name) })
		}
	}
}

// connectionOptions calls fn with every option of a Connection value that names a field: all but the
// connection options close and keep-alive (RFC 9110 section 7.6.1).
func connectionOptions(v []byte, fn func(tok []byte)) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) == 0 || eqFold(tok, "close") || eqFold(tok, "keep-alive") {
			continue
		}
		fn(tok)
	}
}

// isTrusted reports whether remote is in one of the trusted prefixes.
func isTrusted(remote net.IP, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	a, ok := netip.AddrFromSlice(remote)
	return ok && inTrusted(a.Unmap(), trusted)
}

// eqFold reports whether b equals lower, an ASCII lower-case string, in any case.
func eqFold(b []byte, lower string) bool {
	return len(b) == len(lower) && hasPrefixFold(b, lower)
}

// eqFoldString reports whether b equals s in any ASCII case.
func eqFoldString(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lowerASCII(b[i]) != lowerASCII(s[i]) {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether b starts with prefix, an ASCII lower-case string, in any case.
func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if lowerASCII(b[i]) != prefix[i] {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// prepareResponse readies a server's answer to be relayed: its hop-by-hop fields and the fields its
// Connection names go (whatever their case: the answer's field names were read as sent), the server's
// wish to close its connection does not close the client's, and a Date is added if it had none (RFC
// 9110 section 6.6.1). It allocates nothing.
func prepareResponse(resp *fasthttp.Response) {
	h := &resp.Header
	h.ResetConnectionClose()
	// One pass tells what there is to do: most answers have a Date, few a hop-by-hop field.
	date, named, hop, conn := false, false, false, false
	for name, value := range h.All() {
		switch {
		case eqFold(name, "date"):
			date = true
		case eqFold(name, "connection"):
			conn = true
			named = named || namesFields(value)
		case responseHopByHop(h, name, false, false):
			hop = true
		}
	}
	// The fields to drop are collected (as the answer spells them) and then deleted, a batch at a time;
	// the Connection fields go last, since they tell which other fields go.
	for _, round := range [2]struct{ conn, needed bool }{{false, hop || named}, {true, conn}} {
		for i := 0; round.needed && i < 16; i++ { // bounded, should a field refuse to go
			var drop [8][]byte
			n := 0
			for name := range h.All() {
				if n < len(drop) && responseHopByHop(h, name, named, round.conn) {
					drop[n], n = name, n+1
				}
			}
			for _, name := range drop[:n] {
				h.DelBytes(name)
			}
			if n < len(drop) {
				break
			}
		}
	}
	if !date {
		addDate(h)
	}
}

// addDate makes fasthttp write a Date on an answer that has none (RFC 9110 section 6.6.1). fasthttp
// manages Date itself: the field cannot be set, and an answer read for relaying keeps the front end's
// setting "no Date of fasthttp's own" (so that a server's Date passes unchanged). Only a reset header lets
// fasthttp add its Date: the head is written out, the header reset and read back from it. Rare (servers
// send Date); no allocation once the scratch buffers are warm.
func addDate(h *fasthttp.ResponseHeader) {
	sc := dateScratch.Get().(*scratchHead)
	sc.b = append(sc.b[:0], h.Header()...)
	h.Reset()
	h.DisableNormalizing()
	h.SetNoDefaultContentType(true)
	sc.r.Reset(sc.b)
	sc.br.Reset(&sc.r)
	h.Read(sc.br) //nolint:errcheck // fasthttp reads back the head it wrote
	sc.br.Reset(nil)
	dateScratch.Put(sc)
}

type scratchHead struct {
	b  []byte
	r  bytes.Reader
	br *bufio.Reader
}

var dateScratch = sync.Pool{New: func() any {
	sc := &scratchHead{}
	sc.br = bufio.NewReaderSize(&sc.r, upstream.BufferSize) // any head an upstream reader holds
	return sc
}}

// responseHopByHop reports whether the answer's field name is hop-by-hop (RFC 9110 section 7.6.1):
// Connection itself when conn is set, otherwise the other hop-by-hop fields and, when named is set,
// those its Connection fields name.
func responseHopByHop(h *fasthttp.ResponseHeader, name []byte, named, conn bool) bool {
	if eqFold(name, "connection") {
		return conn
	}
	if conn {
		return false
	}
	if f := httpfield.Of(name); f.HopByHop() && f != httpfield.Expect {
		return true
	}
	return named && namedByResponseConnection(h, name)
}

// namedByResponseConnection reports whether a Connection field of h names name.
func namedByResponseConnection(h *fasthttp.ResponseHeader, name []byte) bool {
	found := false
	for k, v := range h.All() {
		if eqFold(k, "connection") {
			connectionOptions(v, func(tok []byte) { found = found || bytes.EqualFold(tok, name) })
		}
	}
	return found
}
