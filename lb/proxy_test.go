package lb

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

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
