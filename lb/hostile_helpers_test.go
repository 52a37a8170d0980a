package lb

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// Helpers of the whole-path tests of what a client sends and a server answers (hostile_test.go,
// proxy_test.go, h2_test.go): the raw clients are lb/frontend/frontendtest's; here, a raw upstream server
// that records exactly what fairlead forwards, fairlead in front of it, and what fairlead shows.

// hostilePath is the path of the hostile requests sent to the platform pool.
const hostilePath = "/Thingworx/hostile"

// hostileRawPool is the config of a leader pool named name over the one server addr (a
// hostileUpstream) with a route of paths to it; extraPool and extraCheck are merged over its
// [pools.NAME] and [pools.NAME.check] tables from a second file. Its file names sort before
// platformConfig's, so its route is tried first.
func hostileRawPool(name, addr string, paths []string, extraPool, extraCheck string) map[string]string {
	conf, pool, check, route := poolConf(name, "leader", []string{addr}, false)
	pool.Set("queue_timeout", 2*time.Second).Set("response_timeout", 3*time.Second)
	fastChecks(check.Set("credentials", sim.DefaultCredentials))
	route.Set("paths", paths)
	return map[string]string{
		"05-" + name + ".toml":          conf.String(),
		"06-" + name + "-override.toml": fmt.Sprintf("[pools.%[1]s]\n%[2]s\n[pools.%[1]s.check]\n%[3]s\n", name, extraPool, extraCheck),
	}
}

// hostileUpstream is a raw TCP server standing in for a ThingWorx node: it answers the LeaderCheck with
// 200 (so that it is elected in a leader pool) and hands every other request to its handler with the
// raw head, so that a test sees exactly what fairlead forwards and can answer anything. It runs on a
// testkit.RawServer, which counts only accepted connections: the requests and the bodies are this one's.
type hostileUpstream struct {
	addr     string
	handler  func(u *hostileUpstream, c net.Conn, br *bufio.Reader, head string) (keep bool)
	requests atomic.Int64      // non-LeaderCheck requests whose head arrived
	bodies   chan upstreamBody // what the body recorder saw of each request body
}

// upstreamBody is what a hostileUpstream read of one request body.
type upstreamBody struct {
	head     string
	n        int64 // body bytes read (decoded, for a chunked body)
	complete bool  // the whole body arrived (Content-Length bytes, or the last chunk)
	err      error // why it did not
}

func startHostileUpstream(t testing.TB, handler func(u *hostileUpstream, c net.Conn, br *bufio.Reader, head string) bool) *hostileUpstream {
	t.Helper()
	u := &hostileUpstream{handler: handler, bodies: make(chan upstreamBody, 64)}
	u.addr = testkit.StartRawServer(t, u.serve).Addr
	return u
}

func (u *hostileUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		head, err := testkit.ReadHead(br)
		if err != nil {
			return
		}
		if strings.Contains(strings.SplitN(head, "\r\n", 2)[0], sim.DefaultLeaderCheckPath) {
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\nleader\n"); err != nil {
				return
			}
			continue
		}
		u.requests.Add(1)
		if !u.handler(u, c, br, head) {
			return
		}
	}
}

// hostileHeadValue returns the value of the first header called name in a raw head ("" if none).
func hostileHeadValue(head, name string) string {
	for _, line := range strings.Split(head, "\r\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// hostileRecordBody is a hostileUpstream handler that reads the request body as its head frames it
// (Content-Length or chunked), reports the head and what it read on u.bodies, and answers 204 (no body,
// so that a HEAD is answered right too) with X-Body-Bytes only once the whole body arrived.
func hostileRecordBody(u *hostileUpstream, c net.Conn, br *bufio.Reader, head string) bool {
	b := upstreamBody{head: head}
	switch {
	case strings.EqualFold(hostileHeadValue(head, "Transfer-Encoding"), "chunked"):
		b.n, b.err = io.Copy(io.Discard, httputil.NewChunkedReader(br))
		for b.err == nil { // the last chunk was read: the trailer section ends with an empty line
			var line string
			if line, b.err = br.ReadString('\n'); line == "\r\n" {
				break
			}
		}
		b.complete = b.err == nil
	default:
		cl, _ := strconv.ParseInt(hostileHeadValue(head, "Content-Length"), 10, 64)
		b.n, b.err = io.CopyN(io.Discard, br, cl)
		b.complete = b.err == nil && b.n == cl
	}
	u.bodies <- b
	if !b.complete {
		return false
	}
	_, err := fmt.Fprintf(c, "HTTP/1.1 204 No Content\r\nX-Body-Bytes: %d\r\n\r\n", b.n)
	return err == nil
}

// hostileAnswerWith is a hostileUpstream handler that answers every request with the raw answer resp; with
// hold it then keeps the connection open, reading and discarding, until fairlead closes it.
func hostileAnswerWith(resp string, hold bool) func(*hostileUpstream, net.Conn, *bufio.Reader, string) bool {
	return func(_ *hostileUpstream, c net.Conn, br *bufio.Reader, _ string) bool {
		if _, err := io.WriteString(c, resp); err != nil {
			return false
		}
		if hold {
			io.Copy(io.Discard, br) //nolint:errcheck
			return false
		}
		return true
	}
}

// rawFront is fairlead, with a TLS listener and the access log, in front of the platform cluster c and
// of the raw server u, the leader of pool "raw", which gets every request under /raw.
type rawFront struct {
	c       *sim.Cluster
	u       *hostileUpstream
	l       *LB
	env     *tlsEnv
	tlsAddr string
	logs    *logSink
}

// startRawFront starts a rawFront whose raw server answers with handler; more holds further [frontend]
// keys, extra further config files.
func startRawFront(t testing.TB, handler func(*hostileUpstream, net.Conn, *bufio.Reader, string) bool, more string, extra ...map[string]string) *rawFront {
	t.Helper()
	f := &rawFront{env: newTLSEnv(t, "fairlead test CA"), u: startHostileUpstream(t, handler), c: startCluster(t, 2, 0)}
	files := mergeFiles(platformConfig(f.c, "", ""), append(extra, hostileRawPool("raw", f.u.addr, []string{"/raw"}, "", ""),
		map[string]string{"30-access.toml": "[global]\naccess_log = true\n"})...)
	f.l, f.logs, f.tlsAddr, _ = startTLSLB(t, files, f.env.issue(t, "frontend", tlsName, "127.0.0.1"), more)
	return f
}

// h2 opens a raw HTTP/2 connection to the TLS listener.
func (f *rawFront) h2(t testing.TB) *frontendtest.H2Conn {
	t.Helper()
	return frontendtest.DialH2(t, f.tlsAddr, f.env.clientConfig(tlsName))
}

// nextHead is the next request the raw server recorded (it fails the test if none comes).
func nextHead(t testing.TB, u *hostileUpstream) upstreamBody {
	t.Helper()
	select {
	case b := <-u.bodies:
		return b
	case <-time.After(frontendtest.AnswerWait):
		t.Fatal("the server received no request")
		return upstreamBody{}
	}
}
