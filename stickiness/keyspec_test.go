package stickiness

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestParseKeySpecAcceptsEveryKind(t *testing.T) {
	f := func(spec string, want KeySpec) {
		t.Helper()
		got, err := ParseKeySpec(spec)
		if err != nil {
			t.Fatalf("ParseKeySpec(%q): %v", spec, err)
		}
		if got != want {
			t.Fatalf("ParseKeySpec(%q) = %+v, want %+v", spec, got, want)
		}
		if again, err := ParseKeySpec(got.String()); err != nil || again != got {
			t.Fatalf("ParseKeySpec(%q.String() = %q) = %+v, %v; want a round trip", spec, got.String(), again, err)
		}
	}
	f("header:X-Asset-Id", KeySpec{SourceHeader, "X-Asset-Id"})
	f("query:assetId", KeySpec{SourceQuery, "assetId"})
	f("cookie:FAIRLEAD_CX", KeySpec{SourceCookie, "FAIRLEAD_CX"})
	f("source", KeySpec{Kind: SourceIP})
	f("  Header : X-Asset-Id ", KeySpec{SourceHeader, "X-Asset-Id"})
	f("SOURCE", KeySpec{Kind: SourceIP})
	f("query:thing[id]", KeySpec{SourceQuery, "thing[id]"})
}

func TestParseKeySpecRejectsBadSpecsClearly(t *testing.T) {
	f := func(spec, wantInErr string) {
		t.Helper()
		got, err := ParseKeySpec(spec)
		if err == nil {
			t.Fatalf("ParseKeySpec(%q) = %+v, want an error", spec, got)
		}
		if !strings.Contains(err.Error(), wantInErr) {
			t.Fatalf("ParseKeySpec(%q) error %q does not mention %q", spec, err, wantInErr)
		}
	}
	f("", "empty source")
	f("   ", "empty source")
	f("header", "header needs a name")
	f("header:", "header needs a name")
	f("query: ", "query needs a name")
	f("cookie:", "cookie needs a name")
	f("source:1.2.3.4", "takes no name")
	f("source:", "takes no name")
	f("heder:X-Asset-Id", `unknown kind "heder"`)
	f(":X-Asset-Id", `unknown kind ""`)
	f("header:X Asset", "invalid character ' ' in header name")
	f("header:X-Asset:Id", "invalid character ':' in header name")
	f("cookie:a=b", "invalid character '=' in cookie name")
	f("query:a b", "invalid character ' ' in query name")
	f("header:cookie", "use cookie:NAME")
}

func TestNewExtractorNamesTheBadEntry(t *testing.T) {
	f := func(specs []string, wantInErr ...string) {
		t.Helper()
		e, err := NewExtractor(specs)
		if len(wantInErr) == 0 {
			if err != nil {
				t.Fatalf("NewExtractor(%q): %v", specs, err)
			}
			if e.Len() != len(specs) {
				t.Fatalf("NewExtractor(%q).Len() = %d", specs, e.Len())
			}
			return
		}
		if err == nil {
			t.Fatalf("NewExtractor(%q) succeeded, want an error", specs)
		}
		for _, w := range wantInErr {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("NewExtractor(%q) error %q does not mention %q", specs, err, w)
			}
		}
	}
	f([]string{"header:X-Asset-Id", "query:assetId", "cookie:FAIRLEAD_CX", "source"})
	f([]string{"source"})
	f([]string{"header:X-Asset-Id", "header:X-Thing-Id"})
	f(nil, "no key sources")
	f([]string{"header:X-Asset-Id", "qurey:assetId"}, "key source 1", `"qurey:assetId"`, "unknown kind")
	f([]string{"source", "source"}, "key source 1", "repeats source 0")
	f([]string{"header:X-Asset-Id", "query:x", "header:x-asset-id"}, "key source 2", `"header:x-asset-id"`, "repeats source 0")
	f([]string{"query:a", "", "source"}, "key source 1", "empty source")
}

// newCtx builds a request context as a fasthttp server would hand it to a
// handler, with remote as the client address.
func newCtx(uri string, headers map[string]string, cookies map[string]string, remote net.IP) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI(uri)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	for k, v := range cookies {
		req.Header.SetCookie(k, v)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: remote, Port: 40000}, nil)
	return &ctx
}

var allSources = []string{"header:X-Asset-Id", "query:assetId", "cookie:FAIRLEAD_CX", "source"}

func TestKeyTakesTheFirstSourcePresent(t *testing.T) {
	e, err := NewExtractor(allSources)
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP("192.0.2.7")
	f := func(uri string, headers, cookies map[string]string, wantKey string, wantSource int) {
		t.Helper()
		ctx := newCtx(uri, headers, cookies, ip)
		key, src, ok := e.Key([]byte("old"), ctx)
		if !ok {
			t.Fatalf("Key(%s, %v, %v) found nothing", uri, headers, cookies)
		}
		if string(key) != "old"+wantKey || src != wantSource {
			t.Fatalf("Key(%s, %v, %v) = %q, %d; want %q, %d", uri, headers, cookies, key, src, "old"+wantKey, wantSource)
		}
	}
	hdr := map[string]string{"X-Asset-Id": "pump-7"}
	ck := map[string]string{"FAIRLEAD_CX": "cx-3"}
	f("http://lb/ws?assetId=valve-2", hdr, ck, "h:pump-7", 0)
	f("http://lb/ws?assetId=valve-2", nil, ck, "q:valve-2", 1)
	f("http://lb/ws", nil, ck, "c:cx-3", 2)
	f("http://lb/ws", nil, nil, "s:192.0.2.7", 3)
	// Header names are case-insensitive; query values are decoded.
	f("http://lb/ws", map[string]string{"x-asset-id": "pump-8"}, nil, "h:pump-8", 0)
	f("http://lb/ws?assetId=a%20b%2Fc", nil, nil, "q:a b/c", 1)
	// Absent and empty values fall through to the next source.
	f("http://lb/ws?assetId=&other=1", map[string]string{"X-Asset-Id": ""}, map[string]string{"FAIRLEAD_CX": ""}, "s:192.0.2.7", 3)
	f("http://lb/ws?assetId", map[string]string{"X-Other": "x"}, map[string]string{"OTHER": "y"}, "s:192.0.2.7", 3)
	f("http://lb/ws?assetid=wrong-case&assetId=right", nil, nil, "q:right", 1)
}

func TestKeyReportsNothingWhenNoSourceIsPresent(t *testing.T) {
	e, err := NewExtractor([]string{"header:X-Asset-Id", "query:assetId", "cookie:FAIRLEAD_CX"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := newCtx("http://lb/ws?x=1", map[string]string{"X-Other": "1"}, nil, net.ParseIP("192.0.2.7"))
	key, src, ok := e.Key([]byte("keep"), ctx)
	if ok || src != -1 || string(key) != "keep" {
		t.Fatalf("Key = %q, %d, %v; want \"keep\", -1, false", key, src, ok)
	}

	// A connection without a usable IP has no source key either.
	e, err = NewExtractor([]string{"header:X-Asset-Id", "source"})
	if err != nil {
		t.Fatal(err)
	}
	ctx = newCtx("http://lb/ws", nil, nil, nil)
	key, src, ok = e.Key(make([]byte, 4, 64)[:4], ctx)
	if ok || src != -1 || len(key) != 4 {
		t.Fatalf("Key without a client IP = %q, %d, %v; want the 4 bytes passed in, -1, false", key, src, ok)
	}
}

func TestKeysFromDifferentKindsDoNotCollide(t *testing.T) {
	e, err := NewExtractor(allSources)
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP("10.0.0.1")
	seen := map[string]string{}
	f := func(what string, ctx *fasthttp.RequestCtx) {
		t.Helper()
		key, _, ok := e.Key(nil, ctx)
		if !ok {
			t.Fatalf("%s: no key", what)
		}
		if prev, dup := seen[string(key)]; dup {
			t.Fatalf("%s and %s both give key %q", what, prev, key)
		}
		seen[string(key)] = what
	}
	f("header", newCtx("http://lb/", map[string]string{"X-Asset-Id": "10.0.0.1"}, nil, ip))
	f("query", newCtx("http://lb/?assetId=10.0.0.1", nil, nil, ip))
	f("cookie", newCtx("http://lb/", nil, map[string]string{"FAIRLEAD_CX": "10.0.0.1"}, ip))
	f("source", newCtx("http://lb/", nil, nil, ip))
}

func TestKeyDigestsLongValues(t *testing.T) {
	e, err := NewExtractor([]string{"header:X-Asset-Id"})
	if err != nil {
		t.Fatal(err)
	}
	f := func(value string, wantLen int, wantPrefix string) {
		t.Helper()
		ctx := newCtx("http://lb/", map[string]string{"X-Asset-Id": value}, nil, nil)
		key, _, ok := e.Key(nil, ctx)
		if !ok || len(key) != wantLen || !strings.HasPrefix(string(key), wantPrefix) {
			t.Fatalf("Key for a %d-byte value = %q (%d bytes), %v; want %d bytes starting %q", len(value), key, len(key), ok, wantLen, wantPrefix)
		}
	}
	f(strings.Repeat("a", 128), 130, "h:aaa")
	f(strings.Repeat("a", 129), 2+43, "h#")
	f(strings.Repeat("a", 4000), 2+43, "h#")

	long := func(v string) string {
		key, _, _ := e.Key(nil, newCtx("http://lb/", map[string]string{"X-Asset-Id": v}, nil, nil))
		return string(key)
	}
	a, b := strings.Repeat("x", 200)+"1", strings.Repeat("x", 200)+"2"
	if long(a) == long(b) || long(a) != long(a) {
		t.Fatalf("digested keys are not a function of the value: %q, %q", long(a), long(b))
	}
}

func TestSourceKeyFormatsIPsLikeNetIPString(t *testing.T) {
	e, err := NewExtractor([]string{"source"})
	if err != nil {
		t.Fatal(err)
	}
	f := func(ip net.IP) {
		t.Helper()
		key, src, ok := e.Key(nil, newCtx("http://lb/", nil, nil, ip))
		if want := "s:" + ip.String(); !ok || src != 0 || string(key) != want {
			t.Fatalf("Key for %#v = %q, %d, %v; want %q, 0, true", ip, key, src, ok, want)
		}
	}
	f(net.IPv4(192, 0, 2, 1))     // 16-byte IPv4-mapped form
	f(net.IP{203, 0, 113, 255})   // 4-byte form
	f(net.IPv4(0, 0, 0, 0))       // unspecified
	f(net.ParseIP("::1"))         // loopback
	f(net.ParseIP("::"))          // unspecified
	f(net.ParseIP("2001:db8::1")) // compressed run
	f(net.ParseIP("2001:db8:0:0:1:0:0:1"))
	f(net.ParseIP("2001:db8:85a3:8d3:1319:8a2e:370:7348"))
	f(net.ParseIP("fe80::1:0:0:0"))
	f(net.ParseIP("::ffff:0:0"))          // IPv4-mapped 0.0.0.0
	f(net.ParseIP("64:ff9b::192.0.2.33")) // NAT64, printed in hex
}

func TestAppendIPRefusesMalformedIPs(t *testing.T) {
	f := func(ip net.IP) {
		t.Helper()
		got, ok := AppendIP([]byte("x"), ip)
		if ok || string(got) != "x" {
			t.Fatalf("AppendIP(%#v) = %q, %v; want \"x\", false", ip, got, ok)
		}
	}
	f(nil)
	f(net.IP{1, 2, 3})
	f(make(net.IP, 15))
}

// TestSourceKeyUsesTheRealClientAddress runs a real fasthttp server on the
// loopback interface and checks the key a real client's request gets.
func TestSourceKeyUsesTheRealClientAddress(t *testing.T) {
	e, err := NewExtractor([]string{"header:X-Asset-Id", "source"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback: %v", err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		key, src, ok := e.Key(nil, ctx)
		if !ok {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			return
		}
		ctx.Response.Header.Set("X-Source", e.Spec(src).String())
		ctx.SetBody(key)
	}}
	go srv.Serve(ln) //nolint:errcheck // Serve returns when the listener closes.
	defer srv.Shutdown()

	c := &fasthttp.Client{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	f := func(header, wantKey, wantSource string) {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + ln.Addr().String() + "/ws")
		if header != "" {
			req.Header.Set("X-Asset-Id", header)
		}
		if err := c.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if got, src := string(resp.Body()), string(resp.Header.Peek("X-Source")); got != wantKey || src != wantSource {
			t.Fatalf("key over a real connection = %q from %q; want %q from %q", got, src, wantKey, wantSource)
		}
	}
	f("pump-7", "h:pump-7", "header:X-Asset-Id")
	f("", "s:127.0.0.1", "source")
}
