package frontend

import (
	"strconv"
	"strings"
	"testing"
)

// The framer's verdicts, independent of how the bytes are split into reads: each input is scanned
// whole, then split at every position, then byte by byte, and must get the same verdict each time.

var framingLimits = Limits{MaxHeader: 1024, MaxBody: 1024}

// frameVerdict scans the input in the given pieces and returns the error status (0: none) and the
// framer's final state.
func frameVerdict(pieces ...string) (int, uint8) {
	f := framer{lim: &framingLimits}
	for _, p := range pieces {
		if _, err := f.scan([]byte(p)); err != nil {
			return err.Status, f.state
		}
	}
	return 0, f.state
}

func checkFrame(t *testing.T, name, in string, want int) {
	t.Helper()
	got, _ := frameVerdict(in)
	if got != want {
		t.Errorf("%s: whole: got %d, want %d", name, got, want)
		return
	}
	for i := 1; i < len(in); i++ {
		if got, _ := frameVerdict(in[:i], in[i:]); got != want {
			t.Errorf("%s: split at %d: got %d, want %d", name, i, got, want)
			return
		}
	}
	bytes := make([]string, len(in))
	for i := range in {
		bytes[i] = in[i : i+1]
	}
	if got, _ := frameVerdict(bytes...); got != want {
		t.Errorf("%s: byte by byte: got %d, want %d", name, got, want)
	}
}

func TestFramerAcceptsWellFormedMessages(t *testing.T) {
	ok := map[string]string{
		"GET":                 "GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n",
		"HTTP/1.0 no host":    "GET / HTTP/1.0\r\n\r\n",
		"empty lines first":   "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"content-length":      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"content-length 0":    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"OWS around values":   "GET / HTTP/1.1\r\nHost:x\r\nContent-Length:\t3 \r\n\r\nabc",
		"chunked":             "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\nA;ext=1;q=\"a b\"\r\n0123456789\r\n0\r\nTrailer-A: 1\r\n\r\n",
		"chunked at the max":  "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + strings.Repeat("a", 1024) + "\r\n0\r\n\r\n",
		"pipelined":           "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"obs-text in a value": "GET / HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\n\r\n",
		"empty value":         "GET / HTTP/1.1\r\nHost: x\r\nX-A:\r\n\r\n",
		"long unknown name":   "GET / HTTP/1.1\r\nHost: x\r\nX-A-Very-Long-Header-Name-Beyond-Seventeen: 1\r\n\r\n",
	}
	for name, in := range ok {
		checkFrame(t, name, in, 0)
		if _, st := frameVerdict(in); st != stStart {
			t.Errorf("%s: ends in state %d, want between messages", name, st)
		}
	}
	if _, st := frameVerdict("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x00garbage"); st != stOpaque {
		t.Errorf("after an upgrade request: state %d, want opaque", st)
	}
}

func TestFramerRefusesEveryMalformedShape(t *testing.T) {
	const post = "POST / HTTP/1.1\r\nHost: x\r\n"
	const chunked = post + "Transfer-Encoding: chunked\r\n\r\n"
	bad := map[string]struct {
		in   string
		want int
	}{
		"CL with TE":                 {post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		"TE with CL":                 {post + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400},
		"two CL":                     {post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", 400},
		"CL not digits":              {post + "Content-Length: 5a\r\n\r\n", 400},
		"CL negative":                {post + "Content-Length: -1\r\n\r\n", 400},
		"CL plus":                    {post + "Content-Length: +1\r\n\r\n", 400},
		"CL two numbers":             {post + "Content-Length: 1 2\r\n\r\n", 400},
		"CL empty":                   {post + "Content-Length:\r\n\r\n", 400},
		"CL overflow":                {post + "Content-Length: 99999999999999999999999\r\n\r\n", 400},
		"TE gzip":                    {post + "Transfer-Encoding: gzip\r\n\r\n", 400},
		"TE list":                    {post + "Transfer-Encoding: gzip, chunked\r\n\r\n", 400},
		"TE chunked twice":           {post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		"TE prefix":                  {post + "Transfer-Encoding: chunk\r\n\r\n", 400},
		"TE in HTTP/1.0":             {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		"obs-fold":                   {"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400},
		"obs-fold tab":               {"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n", 400},
		"bare LF request line":       {"GET / HTTP/1.1\nHost: x\r\n\r\n", 400},
		"bare LF header":             {"GET / HTTP/1.1\r\nHost: x\n\r\n", 400},
		"bare LF end":                {"GET / HTTP/1.1\r\nHost: x\r\n\n", 400},
		"bare CR in value":           {"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
		"space before colon":         {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
		"NUL in value":               {"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00\r\n\r\n", 400},
		"NUL in target":              {"GET /a\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		"NUL in name":                {"GET / HTTP/1.1\r\nHost: x\r\nX\x00A: 1\r\n\r\n", 400},
		"name with parens":           {"GET / HTTP/1.1\r\nHost: x\r\nX(A): 1\r\n\r\n", 400},
		"empty name":                 {"GET / HTTP/1.1\r\nHost: x\r\n: 1\r\n\r\n", 400},
		"non-ASCII name":             {"GET / HTTP/1.1\r\nHost: x\r\nX\xc3\xa9: 1\r\n\r\n", 400},
		"no host":                    {"GET / HTTP/1.1\r\n\r\n", 400},
		"two hosts":                  {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		"space in target":            {"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		"HTTP/0.9":                   {"GET /\r\n", 400},
		"two spaces":                 {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		"extra after version":        {"GET / HTTP/1.1 x\r\nHost: x\r\n\r\n", 400},
		"HTTP/2.0":                   {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
		"HTTP/1.2":                   {"GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505},
		"lower-case version":         {"GET / http/1.1\r\nHost: x\r\n\r\n", 400},
		"chunk size zz":              {chunked + "zz\r\n", 400},
		"chunk size empty":           {chunked + "\r\n", 400},
		"chunk size negative":        {chunked + "-1\r\n", 400},
		"chunk size 0x":              {chunked + "0x10\r\n", 400},
		"chunk size leading space":   {chunked + " 5\r\n", 400},
		"chunk size 20 digits":       {chunked + "10000000000000000000\r\n", 400},
		"chunk ext CTL":              {chunked + "5;a\x01\r\nhello\r\n0\r\n\r\n", 400},
		"chunk ext starts with =":    {chunked + "5;=a\r\nhello\r\n0\r\n\r\n", 400},
		"chunk ext bare LF":          {chunked + "5;a\nhello\r\n0\r\n\r\n", 400},
		"chunk size trailing space":  {chunked + "5 \r\nhello\r\n0\r\n\r\n", 400},
		"chunk data without CRLF":    {chunked + "5\r\nhelloX\r\n0\r\n\r\n", 400},
		"chunk data bare LF":         {chunked + "5\r\nhello\n0\r\n\r\n", 400},
		"trailer obs-fold":           {chunked + "0\r\nA: 1\r\n 2\r\n\r\n", 400},
		"head too large":             {"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 1024) + "\r\n\r\n", 431},
		"request line too large":     {"GET /" + strings.Repeat("a", 1100) + " HTTP/1.1\r\n", 431},
		"content-length over max":    {post + "Content-Length: 1025\r\n\r\n", 413},
		"chunked body over max":      {chunked + "200\r\n" + strings.Repeat("a", 512) + "\r\n201\r\n", 413},
		"bad second request":         {"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\nHost: x\r\n\r\n", 400},
		"garbage":                    {"\x16\x03\x01\x02\x00", 400},
		"control in method":          {"G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		"DEL in target":              {"GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		"bare CR before the request": {"\rGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
	}
	for name, c := range bad {
		checkFrame(t, name, c.in, c.want)
	}
}

// Chunk extensions are checked against the whole chunk-ext grammar of RFC 9112 7.1.1 (names and token
// values of token characters, quoted strings of qdtext and quoted-pairs, whitespace only around ';' and
// '='), not only their first byte.
func TestFramerChecksTheWholeChunkExtensionGrammar(t *testing.T) {
	const chunked = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	f := func(ext string, want int) {
		t.Helper()
		checkFrame(t, strconv.Quote("5"+ext), chunked+"5"+ext+"\r\nhello\r\n0\r\n\r\n", want)
	}
	// Valid.
	f(";a", 0)
	f(";a=b", 0)
	f(";a;b=c", 0)
	f(" ; a = \"x y\"", 0)
	f("\t;\ta\t=\tb\t;\tc", 0)
	f(";a=b;c=\"d\";e", 0)
	f(";!#$%&'*+-.^_`|~09AZaz=!#$%&'*+-.^_`|~", 0) // every kind of token character
	f(";a=\"\"", 0)
	f(";a=\"semi;colon=equals,comma\"", 0)
	f(";a=\"q\\\"uote \\\\ backslash \\\t tab \\  space\"", 0) // quoted-pairs
	f(";a=\"caf\xc3\xa9\"", 0)                                 // obs-text
	f(";a=\"\\\xff\"", 0)                                      // a quoted-pair of obs-text
	f(";a=\"tab\tin\"", 0)
	// Invalid.
	f(";bad[=x", 400)
	f(";a b c", 400)
	f(";a=b c", 400)
	f(";a=[b]", 400)
	f(";a=b\"", 400)
	f(";a=caf\xc3\xa9", 400)
	f(";a=\"unterminated", 400)
	f(";a=\"bad pair \\\x01\"", 400)
	f(";a=\"pair at the end of the line \\", 400)
	f(";a=\"control \x01\"", 400)
	f(";a=\"DEL \x7f\"", 400)
	f(";a=\"x\"y", 400)
	f(";a=\"x\"\"y\"", 400)
	f(";a=\"x\nb\"", 400)
	f(";a\x00", 400)
	f(";", 400)
	f(";;a", 400)
	f("; ", 400)
	f(";=b", 400)
	f(";a=", 400)
	f(";a =", 400)
	f(";a==b", 400)
	f(";a=b=c", 400)
	f(";a ", 400) // whitespace before the CRLF
	f(";a=b ", 400)
	f(";a=\"b\" ", 400)
	f(" ", 400)
	f(";a=\""+strings.Repeat("x", maxChunkLine)+"\"", 400) // over the line-length bound
}

// fasthttp refuses the whitespace RFC 9112 allows between a chunk size and its first ';' ("5 ;a"), so
// the framer hands it on as ';' (the extensions are dropped upstream anyway); nothing else changes.
func TestFramerHandsOnWhitespaceBeforeAChunkExtensionAsSemicolons(t *testing.T) {
	const head = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	in := []byte(head + "5 \t; a = \"x y\"\r\nhello\r\n0\r\n\r\n")
	f := framer{lim: &framingLimits}
	if _, err := f.scan(in); err != nil {
		t.Fatal(err)
	}
	if want := head + "5;;; a = \"x y\"\r\nhello\r\n0\r\n\r\n"; string(in) != want {
		t.Fatalf("handed on %q, want %q", in, want)
	}
}

// A violation holds back the message it is in but not the complete messages before it.
func TestFramerReportsWhereTheRefusedMessageStarts(t *testing.T) {
	good := "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
	f := framer{lim: &framingLimits}
	start, err := f.scan([]byte(good + "GET /2 HTTP/1.1\r\nHost : x\r\n\r\n"))
	if err == nil || start != len(good) {
		t.Fatalf("got start %d err %v, want %d and an error", start, err, len(good))
	}
	f = framer{lim: &framingLimits}
	if _, err := f.scan([]byte("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")); err != nil {
		t.Fatal(err)
	}
	if start, err := f.scan([]byte("lo\r\nzz\r\n")); err == nil || start != -1 {
		t.Fatalf("a violation in a later read: start %d err %v, want -1 and an error", start, err)
	}
}

// BenchmarkFramerHead: the framer's cost per request head of a typical size (wrk's, plus a few
// browser-like fields).
func BenchmarkFramerHead(b *testing.B) {
	head := []byte("GET /Thingworx/Things/Asset42/Properties HTTP/1.1\r\nHost: thingworx.example.com:8080\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: application/json\r\nAccept-Encoding: gzip\r\n" +
		"Cookie: JSESSIONID=0123456789ABCDEF0123456789ABCDEF\r\nappKey: 0123456789abcdef0123456789abcdef\r\n\r\n")
	f := framer{lim: &framingLimits}
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.scan(head); err != nil {
			b.Fatal(err)
		}
	}
}

// A request-target holds only the bytes RFC 3986 allows (targetByte): each other byte gets 400 in the
// path, in the query and in an absolute-form target, whatever the reads; '[' ']' and a '%' that begins
// no pct-encoding pass, as HAProxy passes them.
func TestFramerRefusesTargetBytesRFC3986DoesNotAllow(t *testing.T) {
	f := func(target string, want int) {
		t.Helper()
		checkFrame(t, strconv.Quote(target), "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n", want)
	}
	for _, c := range "\"#<>\\^`{|}" {
		f("/a"+string(c)+"b", 400)
		f("/a?q="+string(c), 400)
		f("http://x/a"+string(c), 400)
	}
	f("/a\x80", 400)
	f("/caf\xc3\xa9", 400)
	f("/a?q=\xff", 400)
	f("/a\x7f", 400)
	f("/a\x1f", 400)
	f("/a\tb", 400)
	// Every byte RFC 3986 allows, in each form.
	f("/azAZ09-._~!$&'()*+,;=:@/%2F?q=/?:@", 0)
	f("/a?b[]=1&c[x]=2", 0)
	f("http://[::1]:8080/a?b", 0)
	f("http://user@x/a", 0)
	f("/a%zz?b=%", 0)
	f("*", 0)
	f("x.example:443", 0) // authority form (CONNECT's; lb answers a CONNECT 405)
	// Byte by byte: the allowed set, spelled out apart from targetByte.
	const allowed = "-._~!$&'()*+,;=:@/?%[]"
	for c := 0; c < 256; c++ {
		want := 400
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(allowed, byte(c)) >= 0 {
			want = 0
		}
		if got, _ := frameVerdict("GET /" + string([]byte{byte(c)}) + " HTTP/1.1\r\nHost: x\r\n\r\n"); got != want {
			t.Errorf("byte %#02x in the target: got %d, want %d", c, got, want)
		}
	}
}
