package frontend

import "testing"

var fuzzFramingSeeds = []string{
	"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\nHost: x\n\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
	// Chunk extensions, valid and not (RFC 9112 7.1.1).
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5 ; a = \"x \\\" y\" ;b;c=d\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;bad[=x\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a b c\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"open\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"\\\x01\"\r\nhello\r\n0\r\n\r\n",
}

// FuzzFramer: the framer never panics, and its verdict does not depend on how the bytes are split into
// reads.
func FuzzFramer(f *testing.F) {
	for _, s := range fuzzFramingSeeds {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		whole, wholeState := frameVerdict(string(in))
		i := int(cut) % (len(in) + 1)
		split, splitState := frameVerdict(string(in[:i]), string(in[i:]))
		if whole != split || (whole == 0 && wholeState != splitState) {
			t.Fatalf("whole: %d (state %d), split at %d: %d (state %d)", whole, wholeState, i, split, splitState)
		}
	})
}
