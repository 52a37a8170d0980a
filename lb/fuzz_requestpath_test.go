package lb

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fairlead/fairlead/lb/frontend"
)

// fuzzRequestPathSeeds are FuzzFramer's seeds (lb/frontend): well-formed and malformed heads, bodies
// and chunk extensions.
var fuzzRequestPathSeeds = []string{
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

// FuzzRequestPath sends arbitrary bytes to a running fairlead in front of the simulator. fairlead
// never crashes and keeps serving; and when the framer refuses the first message, the platform
// receives nothing.
func FuzzRequestPath(f *testing.F) {
	for _, s := range fuzzRequestPathSeeds {
		f.Add([]byte(s))
	}
	c := startCluster(f, 1, 0)
	l, _ := startLB(f, platformConfig(c, "", ""))
	leader := c.Platforms[0]
	f.Fuzz(func(t *testing.T, in []byte) {
		start, ferr := frontend.Check(l.front.Limits(), bytes.Clone(in)) // Check may rewrite bytes; the fuzzer's input stays as it is
		refusedFirst := ferr != nil && start <= 0
		before := leader.Requests()
		conn, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck
		conn.Write(in)                                    //nolint:errcheck // fairlead may close early
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite() //nolint:errcheck
		}
		io.Copy(io.Discard, conn) //nolint:errcheck // until fairlead closes or the deadline
		conn.Close()
		if refusedFirst {
			if n := leader.Requests() - before; n != 0 {
				t.Fatalf("the framer refuses %q (%v), yet the platform received %d requests", in, ferr, n)
			}
		}
		// fairlead still serves.
		conn, err = net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))           //nolint:errcheck
		io.WriteString(conn, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n") //nolint:errcheck
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("after %q: %v", in, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("after %q: status %d", in, resp.StatusCode)
		}
	})
}
