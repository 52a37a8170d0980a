package testkit

// FramingSeeds is the seed corpus of the fuzz targets that feed raw request bytes to fairlead: the
// framer's (lb/frontend FuzzFramer) and the whole request path's (lb FuzzRequestPath). Well-formed and
// malformed heads, bodies and chunk extensions; one list, so the two targets start from the same inputs.
var FramingSeeds = []string{
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
