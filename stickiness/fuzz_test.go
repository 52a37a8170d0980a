package stickiness

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// FuzzStickyKey sends arbitrary requests through a fasthttp server configured as fairlead's front end
// (lb.Start) and extracts their sticky keys in the handler the way the sticky policy does (lb/policy.go:
// Key into a 160-byte stack buffer, once to pick and once more to hold the key while the request or
// tunnel lasts). The sources are the shipped ones (conf.d/10-cxserver.toml) and, when they parse,
// the fuzzed specs (one per line). Each input is served three times on fresh connections of one server:
// the request (plus a plain request pipelined after it), the plain request alone (whose keys must owe
// nothing to the request before it, whose RequestCtx fasthttp reuses), and the request again (which must
// give the same keys).
//
// What Key and ParseSource document, checked for every key:
//   - the first configured source present with a non-empty value wins; no key: dst unchanged, -1, false;
//   - the key is appended to dst: the kind's byte ('h', 'q', 'c', 's'), ':' and the value (the header
//     value, the decoded query argument, the cookie value, the client IP as net.IP.String formats it),
//     or '#' and the unpadded base64url SHA-256 of a value longer than 128 bytes; at most 130 bytes;
//   - the value comes from the request: its bytes are in the request as received (query arguments
//     percent-decoded, folded header lines joined), those of the request the key was taken for;
//   - the same request gives the same key (the same RequestCtx twice, the same bytes on another connection);
//   - Key does not allocate once the request is parsed (not checked under the race detector, which does);
//   - ParseSource(s.String()) gives s back.
func FuzzStickyKey(f *testing.F) {
	shipped := "header:X-Asset-Id\nquery:assetId\ncookie:FAIRLEAD_CX\nsource"
	v4, v6, mapped := []byte{192, 0, 2, 7}, []byte(net.ParseIP("2001:db8::1")), []byte(net.ParseIP("198.51.100.3"))
	f.Add(shipped, "/Thingworx/WS", "X-Asset-Id: pump-7\r\n", "", v4)
	f.Add(shipped, "/Thingworx/WS?assetId=valve-2&x=1", "", "FAIRLEAD_CX=cx-3", v4)
	f.Add(shipped, "/Thingworx/WS?assetId=a%20b%2Fc+d%zz", "", "", v6)
	f.Add(shipped, "/Thingworx/WS", "", "a=1; FAIRLEAD_CX=\" cx-9 \"; b", mapped)
	f.Add(shipped, "/Thingworx/WS", "X-Asset-Id: \r\nX-Other: 1\r\n", "FAIRLEAD_CX=", []byte{1, 2, 3})
	f.Add(shipped, "/Thingworx/WS", "X-Asset-Id: "+strings.Repeat("a", 129)+"\r\n", "", v4)
	f.Add(shipped, "/Thingworx/WS?assetId="+strings.Repeat("%41", 200), "", "", v4)
	f.Add(shipped, "/", "X-Asset-Id: folded\r\n  over\r\n\tlines\r\n", "", v4)
	f.Add(shipped, "http://lb.example/Thingworx/WS?assetId=x", "Connection: close\r\n", "", v4)
	f.Add(shipped, "/a HTTP/1.1\r\nHost: lb\r\n\r\nGET /b?assetId=second", "X-Asset-Id: second\r\n", "", v4)
	f.Add("header:X-Thing\nquery:thing[id]\ncookie:JSESSIONID", "/?thing%5Bid%5D=t1", "x-thing: T\r\n", "JSESSIONID=abc", v4)
	f.Add("  Header : X-Asset-Id \nSOURCE", "/", "X-ASSET-ID: upper\r\n", "", v6)
	f.Add("query:a:b\ncookie:c", "/?a:b=1", "", "c=1; c=2", v4)
	f.Add("header:X-Asset-Id\nheader:x-asset-id", "/", "", "", v4)
	f.Add("header:Host\nheader:User-Agent\nheader:Content-Type", "/", "User-Agent: ua\r\nContent-Type: t\r\n", "", v4)
	f.Add("source:1.2.3.4\nheder:x", "/", "", "", []byte(nil))

	raceEnabled := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			raceEnabled = raceEnabled || s.Key == "-race" && s.Value == "true"
		}
	}
	shippedEx, err := NewExtractor(strings.Split(shipped, "\n"))
	if err != nil {
		f.Fatal(err)
	}
	plain := []byte("GET /fairlead-fuzz-plain HTTP/1.1\r\nHost: plain.invalid\r\n\r\n")

	f.Fuzz(func(t *testing.T, specs, target, header, cookie string, remote []byte) {
		extractors := []*Extractor{shippedEx}
		if ex := parseSpecs(t, specs); ex != nil {
			extractors = append(extractors, ex)
		}
		req := []byte("GET " + target + " HTTP/1.1\r\nHost: lb\r\n")
		req = append(req, header...)
		if cookie != "" {
			req = append(req, "Cookie: "+cookie+"\r\n"...)
		}
		req = append(req, "\r\n"...)
		in := append(append([]byte(nil), req...), plain...)

		ip := net.IP(bytes.Clone(remote))
		var keys [][]byte // keys of the current connection, one per request and extractor
		var input []byte  // bytes of the current connection
		srv := &fasthttp.Server{
			// As lb.Start configures the front end.
			Handler: func(ctx *fasthttp.RequestCtx) {
				for _, ex := range extractors {
					keys = append(keys, checkKey(t, ex, ctx, input, ip, raceEnabled))
				}
			},
			NoDefaultServerHeader:        true,
			NoDefaultDate:                true,
			NoDefaultContentType:         true,
			DisablePreParseMultipartForm: true,
			StreamRequestBody:            true,
			ReduceMemoryUsage:            true,
			ReadTimeout:                  time.Second,
			Logger:                       quietLogger{},
		}
		serve := func(b []byte) [][]byte {
			keys, input = nil, b
			_ = srv.ServeConn(&fuzzConn{r: bytes.NewReader(b), remote: &net.TCPAddr{IP: ip, Port: 40000}})
			return keys
		}
		first := serve(in)
		serve(plain) // checkKey: its keys come from its own bytes, none from the request served before
		again := serve(in)
		if len(first) != len(again) {
			t.Fatalf("the same bytes gave %d keys, then %d", len(first), len(again))
		}
		for i := range first {
			if !bytes.Equal(first[i], again[i]) {
				t.Fatalf("the same request gave key %q, then %q", first[i], again[i])
			}
		}
	})
}

// parseSpecs builds an Extractor from specs (one per line), checking what ParseSource and NewExtractor
// document on the way; nil when they do not parse.
func parseSpecs(t *testing.T, specs string) *Extractor {
	lines := strings.Split(specs, "\n")
	for _, l := range lines {
		s, err := ParseKeySpec(l)
		if err != nil {
			if s != (KeySpec{}) {
				t.Fatalf("ParseSource(%q) = %+v with error %v; want the zero Source", l, s, err)
			}
			continue
		}
		if again, err := ParseKeySpec(s.String()); err != nil || again != s {
			t.Fatalf("ParseSource(%q) = %+v; ParseSource(%q) = %+v, %v: not a round trip", l, s, s.String(), again, err)
		}
		if s.Kind < SourceHeader || s.Kind > SourceIP || (s.Kind == SourceIP) != (s.Name == "") {
			t.Fatalf("ParseSource(%q) = %+v", l, s)
		}
	}
	ex, err := NewExtractor(lines)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "stickiness: ") {
			t.Fatalf("NewExtractor(%q) error %q", lines, err)
		}
		return nil
	}
	if ex.Len() != len(lines) {
		t.Fatalf("NewExtractor(%q) has %d sources", lines, ex.Len())
	}
	return ex
}

// checkKey extracts the key of the request in ctx as the sticky policy does and checks it (see
// FuzzStickyKey). input is every byte the connection carried; ip the client's address.
func checkKey(t *testing.T, ex *Extractor, ctx *fasthttp.RequestCtx, input []byte, ip net.IP, raceEnabled bool) []byte {
	t.Helper()
	var buf [160]byte // as stickyPolicy.pick and hold
	dst := append(buf[:0], "pre"...)
	key, src, ok := ex.Key(dst, ctx)
	if again, src2, ok2 := ex.Key(nil, ctx); !bytes.Equal(again, key[len(dst):]) || src2 != src || ok2 != ok {
		t.Fatalf("Key twice on one request: %q, %d, %v; then %q, %d, %v", key[len(dst):], src, ok, again, src2, ok2)
	}
	if !raceEnabled {
		var scratch [160]byte
		if n := testing.AllocsPerRun(3, func() { ex.Key(scratch[:0], ctx) }); n != 0 {
			t.Fatalf("Key allocates %v times per request once the request is parsed", n)
		}
	}
	if len(key) < len(dst) || string(key[:len(dst)]) != "pre" {
		t.Fatalf("Key(%q, …) = %q: dst not kept", dst, key)
	}
	if !ok {
		if src != -1 || len(key) != len(dst) {
			t.Fatalf("Key found nothing but returned %q, source %d", key, src)
		}
		for i := range ex.Len() {
			if v, present := sourceValue(ex.Spec(i), ctx); present {
				t.Fatalf("Key found nothing, but source %d (%s) has %q", i, ex.Spec(i), v)
			}
		}
		return []byte("-")
	}
	if src < 0 || src >= ex.Len() {
		t.Fatalf("Key = %q from source %d of %d", key, src, ex.Len())
	}
	for i := range src {
		if v, present := sourceValue(ex.Spec(i), ctx); present {
			t.Fatalf("Key took source %d (%s), but the earlier source %d (%s) has %q", src, ex.Spec(src), i, ex.Spec(i), v)
		}
	}
	s := ex.Spec(src)
	k := key[len(dst):]
	if len(k) > 130 || len(k) < 3 || k[0] != s.Kind.prefix() || k[1] != ':' && k[1] != '#' {
		t.Fatalf("key %q from %s: want %c, ':' or '#', and at most 130 bytes", k, s, s.Kind.prefix())
	}
	want, _ := sourceValue(s, ctx)
	if s.Kind == SourceIP {
		if len(ip) != net.IPv4len && len(ip) != net.IPv6len || string(k) != "s:"+ip.String() {
			t.Fatalf("key %q for the client IP %#v; want %q", k, ip, "s:"+ip.String())
		}
		return bytes.Clone(k)
	}
	if len(want) > maxRawValue {
		sum := sha256.Sum256(want)
		if string(k) != string(s.Kind.prefix())+"#"+base64.RawURLEncoding.EncodeToString(sum[:]) {
			t.Fatalf("key %q for a %d-byte value; want its digest", k, len(want))
		}
	} else if string(k[2:]) != string(want) || k[1] != ':' {
		t.Fatalf("key %q from %s; the request's value is %q", k, s, want)
	}
	// The value owes nothing to anything but this request: its bytes are in what the connection carried,
	// and in this request's own target and header lines as fasthttp received them.
	own := append(bytes.Clone(ctx.Request.Header.RequestURI()), ctx.Request.Header.RawHeaders()...)
	for _, where := range [][]byte{input, own} {
		if !fromRequest(want, where, s.Kind == SourceQuery) {
			t.Fatalf("key %q from %s: value %q is not in the request %q", k, s, want, where)
		}
	}
	return bytes.Clone(k)
}

// sourceValue looks the source up in the request directly, as the documentation of Key describes it.
func sourceValue(s KeySpec, ctx *fasthttp.RequestCtx) ([]byte, bool) {
	var v []byte
	switch s.Kind {
	case SourceHeader:
		v = ctx.Request.Header.Peek(s.Name)
	case SourceQuery:
		v = ctx.QueryArgs().Peek(s.Name)
	case SourceCookie:
		v = ctx.Request.Header.Cookie(s.Name)
	case SourceIP:
		ip := ctx.RemoteIP()
		return []byte(ip.String()), len(ip) == net.IPv4len || len(ip) == net.IPv6len
	}
	return v, len(v) > 0
}

// fromRequest reports whether v is a run of the request's bytes, comparing runs of spaces, tabs, CRs and
// LFs as one space (a folded header line is joined with a space). A query value is decoded (%XX, '+').
func fromRequest(v, request []byte, query bool) bool {
	if query {
		request = queryUnescape(request)
	}
	return bytes.Contains(squeeze(request), squeeze(v))
}

func squeeze(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		space := c == ' ' || c == '\t' || c == '\r' || c == '\n'
		if space && len(out) > 0 && out[len(out)-1] == ' ' {
			continue
		}
		if space {
			c = ' '
		}
		out = append(out, c)
	}
	return out
}

// queryUnescape decodes %XX and '+' leniently: a '%' not followed by two hex digits stays as it is.
func queryUnescape(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '+':
			out = append(out, ' ')
		case c == '%' && i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2]):
			out = append(out, unhex(b[i+1])<<4|unhex(b[i+2]))
			i += 2
		default:
			out = append(out, c)
		}
	}
	return out
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// fuzzConn is a client connection that sends its bytes and then closes; answers are discarded.
type fuzzConn struct {
	r      io.Reader
	remote net.Addr
}

func (c *fuzzConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *fuzzConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return c.remote }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
