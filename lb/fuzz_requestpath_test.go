package lb

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend"
)

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
