package stickiness

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"
)

// KeyKind says where in a request a stickiness key is found.
type KeyKind uint8

// The key kinds. The zero KeyKind is invalid.
const (
	// SourceHeader takes the key from a request header ("header:NAME").
	SourceHeader KeyKind = iota + 1
	// SourceQuery takes the key from a query argument ("query:NAME").
	SourceQuery
	// SourceCookie takes the key from a request cookie ("cookie:NAME").
	SourceCookie
	// SourceIP takes the key from the client's IP address ("source").
	SourceIP
)

// String returns the kind as written in config: "header", "query",
// "cookie" or "source".
func (k KeyKind) String() string {
	switch k {
	case SourceHeader:
		return "header"
	case SourceQuery:
		return "query"
	case SourceCookie:
		return "cookie"
	case SourceIP:
		return "source"
	}
	return fmt.Sprintf("KeyKind(%d)", uint8(k))
}

// prefix is the byte that starts every key taken from a source of kind k,
// so that keys from different kinds never collide.
func (k KeyKind) prefix() byte {
	switch k {
	case SourceHeader:
		return 'h'
	case SourceQuery:
		return 'q'
	case SourceCookie:
		return 'c'
	case SourceIP:
		return 's'
	}
	return '?'
}

// KeySpec is one place a stickiness key may come from. Name is the header,
// query argument or cookie name; it is empty for SourceIP.
type KeySpec struct {
	Kind KeyKind
	Name string
}

// String returns s in the form ParseKeySpec accepts.
func (s KeySpec) String() string {
	if s.Kind == SourceIP {
		return "source"
	}
	return s.Kind.String() + ":" + s.Name
}

// ParseKeySpec parses a key spec: "header:NAME", "query:NAME",
// "cookie:NAME" or "source" (the client IP). The kind is matched without
// regard to case and surrounding spaces are ignored; the name is kept as
// written. Header and cookie names must be HTTP tokens; a query name must
// not contain spaces or control characters. "header:Cookie" is refused
// (use "cookie:NAME"), and so are the headers of the connection and the framing (Connection,
// Content-Length, Transfer-Encoding, Keep-Alive, TE, Trailer, Upgrade, Proxy-*): the HTTP layer reads
// and rewrites them (an HTTP/1.0 request has "Connection: close" without sending it).
func ParseKeySpec(spec string) (KeySpec, error) {
	if strings.TrimSpace(spec) == "" {
		return KeySpec{}, fmt.Errorf("empty source %q (want header:NAME, query:NAME, cookie:NAME or source)", spec)
	}
	spec = strings.TrimSpace(spec)
	kind, name, hasName := strings.Cut(spec, ":")
	kind = strings.TrimSpace(kind)
	name = strings.TrimSpace(name)
	var s KeySpec
	switch strings.ToLower(kind) {
	case "header":
		s.Kind = SourceHeader
	case "query":
		s.Kind = SourceQuery
	case "cookie":
		s.Kind = SourceCookie
	case "source":
		if hasName {
			return KeySpec{}, fmt.Errorf("source %q: \"source\" (the client IP) takes no name", spec)
		}
		return KeySpec{Kind: SourceIP}, nil
	default:
		return KeySpec{}, fmt.Errorf("source %q: unknown kind %q (want header, query, cookie or source)", spec, kind)
	}
	if name == "" {
		return KeySpec{}, fmt.Errorf("source %q: %s needs a name, as in %q", spec, s.Kind, s.Kind.String()+":"+exampleName(s.Kind))
	}
	switch s.Kind {
	case SourceHeader, SourceCookie:
		for i := 0; i < len(name); i++ {
			if !isTokenChar(name[i]) {
				return KeySpec{}, fmt.Errorf("source %q: invalid character %q in %s name", spec, name[i], s.Kind)
			}
		}
		if s.Kind == SourceHeader && strings.EqualFold(name, "Cookie") {
			return KeySpec{}, fmt.Errorf("source %q: use cookie:NAME to take the key from a cookie", spec)
		}
		if s.Kind == SourceHeader && connectionHeader(name) {
			return KeySpec{}, fmt.Errorf("source %q: %s describes the connection or the framing, not the client, and is rewritten on the way (take the key from another header)", spec, name)
		}
	case SourceQuery:
		for i := 0; i < len(name); i++ {
			if c := name[i]; c <= ' ' || c == 0x7f {
				return KeySpec{}, fmt.Errorf("source %q: invalid character %q in query name", spec, c)
			}
		}
	}
	s.Name = name
	return s, nil
}

func exampleName(k KeyKind) string {
	switch k {
	case SourceHeader:
		return "X-Asset-Id"
	case SourceQuery:
		return "assetId"
	}
	return "FAIRLEAD_CX"
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// maxRawValue is the longest source value used verbatim in a key. Longer
// values are replaced by their SHA-256 so that a client cannot make table
// entries arbitrarily large.
const maxRawValue = 128

// Extractor turns a request into a stickiness key by trying its sources in
// the configured order. It is immutable and safe for concurrent use.
type Extractor struct {
	sources []KeySpec
}

// NewExtractor parses specs (see ParseKeySpec) into an Extractor that tries
// them in order. It fails if specs is empty, if an entry does not parse, or
// if an entry repeats an earlier one; the error names the entry's index and
// text.
func NewExtractor(specs []string) (*Extractor, error) {
	if len(specs) == 0 {
		return nil, errors.New("stickiness: no key sources configured")
	}
	e := &Extractor{sources: make([]KeySpec, 0, len(specs))}
	for i, spec := range specs {
		s, err := ParseKeySpec(spec)
		if err != nil {
			return nil, fmt.Errorf("stickiness: key source %d: %w", i, err)
		}
		for j, prev := range e.sources {
			same := prev.Kind == s.Kind && prev.Name == s.Name
			if s.Kind == SourceHeader && prev.Kind == SourceHeader {
				same = strings.EqualFold(prev.Name, s.Name) // header names are case-insensitive
			}
			if same {
				return nil, fmt.Errorf("stickiness: key source %d (%q) repeats source %d (%q)", i, spec, j, specs[j])
			}
		}
		e.sources = append(e.sources, s)
	}
	return e, nil
}

// Len returns the number of configured sources.
func (e *Extractor) Len() int { return len(e.sources) }

// Spec returns the i-th configured key spec, as numbered by Key.
func (e *Extractor) Spec(i int) KeySpec { return e.sources[i] }

// Key appends the stickiness key for the request in ctx to dst and returns
// it, with the index of the source it came from. The first configured source
// that is present with a non-empty value wins; if none is, Key returns dst
// unchanged, -1 and false.
//
// A key is the source kind's byte ('h', 'q', 'c' or 's'), a separator, and
// the value: the header value, the decoded query argument, the cookie value,
// or the client IP formatted as net.IP.String does. Keys from different
// kinds therefore never collide. A value longer than 128 bytes is replaced
// by the unpadded base64url SHA-256 of it, with '#' as the separator instead
// of ':', which bounds the key size at 130 bytes.
//
// Key does not allocate once the request's headers, query and cookies have
// been parsed (fasthttp parses them into reusable buffers).
func (e *Extractor) Key(dst []byte, ctx *fasthttp.RequestCtx) (key []byte, source int, ok bool) {
	for i := range e.sources {
		s := &e.sources[i]
		var v []byte
		switch s.Kind {
		case SourceHeader:
			v = ctx.Request.Header.Peek(s.Name)
		case SourceQuery:
			v = ctx.QueryArgs().Peek(s.Name)
		case SourceCookie:
			v = ctx.Request.Header.Cookie(s.Name)
		case SourceIP:
			n := len(dst)
			if out, ok := AppendIP(append(dst, 's', ':'), ctx.RemoteIP()); ok {
				return out, i, true
			}
			dst = dst[:n]
			continue
		}
		if len(v) == 0 {
			continue
		}
		return appendValue(dst, s.Kind.prefix(), v), i, true
	}
	return dst, -1, false
}

// appendValue appends prefix, a separator and v (or its digest if v is too
// long) to dst.
func appendValue(dst []byte, prefix byte, v []byte) []byte {
	if len(v) <= maxRawValue {
		dst = append(dst, prefix, ':')
		return append(dst, v...)
	}
	sum := sha256.Sum256(v)
	dst = append(dst, prefix, '#')
	return base64.RawURLEncoding.AppendEncode(dst, sum[:])
}

// AppendIP appends ip to dst in the form net.IP.String uses (dotted quad for
// IPv4 and IPv4-mapped IPv6 addresses, RFC 5952 for other IPv6 addresses),
// without allocating. It reports false, leaving dst as is, for an IP that is
// neither 4 nor 16 bytes long. The proxy uses it for X-Forwarded-For too.
func AppendIP(dst []byte, ip net.IP) (b []byte, ok bool) {
	switch len(ip) {
	case net.IPv4len:
		return netip.AddrFrom4([4]byte(ip)).AppendTo(dst), true
	case net.IPv6len:
		if ip4 := ip.To4(); ip4 != nil {
			return netip.AddrFrom4([4]byte(ip4)).AppendTo(dst), true
		}
		return netip.AddrFrom16([16]byte(ip)).AppendTo(dst), true
	}
	return dst, false
}

// connectionHeader reports the headers that describe the connection or the message framing.
func connectionHeader(name string) bool {
	for _, h := range []string{"Connection", "Content-Length", "Transfer-Encoding", "Keep-Alive", "TE",
		"Trailer", "Upgrade", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"} {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}
