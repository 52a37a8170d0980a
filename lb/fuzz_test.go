package lb

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// The whole request path under arbitrary bytes (make fuzz): fairlead never crashes and serves on, a
// message the framer refuses reaches no server, and a client's fault is never a server's failure.

// FuzzRequestPath sends arbitrary bytes to a running fairlead in front of the simulator. fairlead
// never crashes and keeps serving; and when the framer refuses the first message, the platform
// receives nothing.
func FuzzRequestPath(f *testing.F) {
	for _, s := range testkit.FramingSeeds {
		f.Add([]byte(s))
	}
	c := startCluster(f, 1, 0)
	l, _ := startLB(f, platformConfig(c, "", ""))
	leader := c.Platforms[0]
	f.Fuzz(func(t *testing.T, in []byte) {
		start, ferr := frontend.Check(l.px.front.Limits(), bytes.Clone(in)) // Check may rewrite bytes; the fuzzer's input stays as it is
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
		if r := frontendtest.AnswerTo(t, l.Addr(), "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", 5*time.Second); r.Status != 200 {
			t.Fatalf("after %q: %s", in, r)
		}
	})
}

// clientFaultSeeds are requests whose end is the client's doing: no Host, an empty one, a body cut or
// shorter than announced, a chunked body cut mid-chunk or broken, a body over max_body_size, CONNECT.
var clientFaultSeeds = []string{
	"GET /x HTTP/1.0\r\n\r\n",
	"GET /x HTTP/1.0\r\nHost:\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost:\r\n\r\n",
	"POST /x HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello",
	"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789",
	"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789",
	"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n01234",
	"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;bad[=x\r\nhello\r\n0\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2000\r\n" + fmt.Sprintf("%08192d", 0) + "\r\n0\r\n\r\n",
	"PUT /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
	"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	"GET http:///x HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: x\r\nConnection: Host, X-Forwarded-For\r\n\r\n",
	"DELETE /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /y HTTP/1.0\r\n\r\n",
}

// FuzzClientFaultIsNoServerFailure sends arbitrary requests to fairlead in front of a roundrobin pool of
// two healthy servers (fall = 1), cut where the fuzzer says and with the client then closing or only
// half-closing its connection. Whatever the bytes, the servers did nothing wrong: none may be counted
// failing, reported down or retried away from.
func FuzzClientFaultIsNoServerFailure(f *testing.F) {
	for _, s := range clientFaultSeeds {
		f.Add([]byte(s), uint16(len(s)), false)
		f.Add([]byte(s), uint16(len(s)/2), true)
	}
	c := startCluster(f, 2, 0)
	conf, pool, check, _ := poolConf("rr", "roundrobin", testkit.PlatformAddrs(c)[:2], false)
	conf.Table("frontend").Set("listen", "127.0.0.1:0").Set("read_timeout", 300*time.Millisecond).
		Set("header_timeout", 300*time.Millisecond).Set("max_body_size", 65536)
	conf.Table("admin").Set("listen", "")
	pool.Set("queue_timeout", time.Second).Set("response_timeout", 2*time.Second)
	check.Set("path", "/Thingworx/ready").Set("interval", 30*time.Second).Set("fall", 1)
	l, _ := startLB(f, map[string]string{"10-rr.toml": conf.String()})
	p := l.px.gen.Load().pools["rr"]
	f.Fuzz(func(t *testing.T, in []byte, cut uint16, close bool) {
		conn, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(3 * time.Second)) //nolint:errcheck
		conn.Write(in[:int(cut)%(len(in)+1)])             //nolint:errcheck // fairlead may close early
		if close {
			conn.Close()
		} else {
			conn.(*net.TCPConn).CloseWrite() //nolint:errcheck
			var buf [4096]byte
			for {
				if _, err := conn.Read(buf[:]); err != nil {
					break
				}
			}
			conn.Close()
		}
		// Settled once fairlead closed its side: its handler has returned, every attempt is over.
		testkit.Eventually(t, "fairlead to close the connection", 5*time.Second, func() bool {
			return l.frontServer.GetOpenConnectionsCount() == 0
		})
		st := p.view.Load()
		for _, s := range st.servers {
			if n := s.failures.Load(); n != 0 {
				t.Fatalf("%s counted %d failures for a client's request %q", s.Addr, n, in)
			}
			if !s.Available() {
				t.Fatalf("%s is down after a client's request %q", s.Addr, in)
			}
		}
		if n := p.retries.Load(); n != 0 {
			t.Fatalf("%d retries for a client's request %q", n, in)
		}
	})
}
