package lb

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// rawExchange writes a raw request on a new connection and returns the status line and whether the
// connection was closed after the response.
func rawExchange(t *testing.T, addr, raw string) (status string, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	_, err = br.ReadByte()
	return resp.Status, err == io.EOF
}

func TestAmbiguousFramingGets400ClosesTheConnectionAndForwardsNothing(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	f := func(name, raw string) {
		t.Helper()
		status, closed := rawExchange(t, l.Addr(), raw)
		if !strings.HasPrefix(status, "400") || !closed {
			t.Errorf("%s: got %q closed=%v, want 400 and a closed connection", name, status, closed)
		}
	}
	f("Content-Length with Transfer-Encoding",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n")
	f("Transfer-Encoding before Content-Length",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n")
	f("two different Content-Lengths",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
	if n := c.Platforms[0].Requests(); n != 0 {
		t.Fatalf("leader received %d requests, want none", n)
	}
	// The front end still serves well-formed requests.
	if code, _ := get(t, l, "/"); code != 200 {
		t.Fatalf("got %d after the bad requests", code)
	}
}

func TestForwardingRemovesHopByHopHeadersSetsXForwardedAndPreservesHost(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	req, _ := http.NewRequest("GET", "http://"+l.Addr()+"/echo-headers", nil)
	req.Host = "thingworx.example.com"
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("Connection", "keep-alive, X-Private")
	req.Header.Set("X-Private", "secret")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Proxy-Authorization", "Basic Zm9vOmJhcg==")
	req.Header.Set("TE", "trailers")
	req.Header.Set("X-Keep", "yes")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			got[strings.ToLower(k)] = v
		}
	}
	want := map[string]string{
		"host":              "thingworx.example.com",
		"x-forwarded-for":   "127.0.0.1", // the client is not in trusted_proxies: its own is replaced
		"x-forwarded-proto": "http",
		"x-forwarded-host":  "thingworx.example.com",
		"x-keep":            "yes",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("upstream got %s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"x-private", "keep-alive", "proxy-authorization", "te", "connection"} {
		if v, ok := got[k]; ok {
			t.Errorf("hop-by-hop header %s = %q reached the upstream", k, v)
		}
	}
	if resp.Header.Get("X-Served-By") == "" {
		t.Error("upstream response headers were not relayed")
	}
}

func TestUpstreamStatusAndHeadersAreRelayedUnchanged(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	for _, code := range []int{200, 201, 204, 301, 404, 418, 500} {
		resp, err := testClient.Get("http://" + l.Addr() + "/x?status=" + strconv.Itoa(code))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("status %d relayed as %d", code, resp.StatusCode)
		}
	}
}

// An IPv6 server (discovery's AAAA answers find them) is probed and serves: the upstream and check
// dialers are dual-stack.
func TestAnIPv6ServerIsProbedAndServes(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := testkit.StartCluster(t, sim.Options{Platforms: 1, NoConnections: true, PlatformAddrs: []string{addr}, Logf: func(string, ...any) {}})
	l, _ := startLB(t, platformConfig(c, "", ""))
	if code, by := get(t, l, "/x"); code != 200 || by != c.Platforms[0].Name {
		t.Fatalf("GET through an IPv6 leader: %d from %q", code, by)
	}
}
