package lb

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// burst fires n GETs of path at once (one connection each), with the X-Forwarded-For value xff if not
// "", and returns how many were answered 200 and 429, and the largest Retry-After of the 429s.
func burst(t *testing.T, addr, path, xff string, n int) (ok, limited, retryAfter int) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: n, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
			if xff != "" {
				req.Header.Set("X-Forwarded-For", xff)
			}
			r := replyOf(client.Do(req))
			if r.err != nil {
				t.Error(r.err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch r.status {
			case 200:
				ok++
			case 429:
				limited++
				ra, err := strconv.Atoi(r.header.Get("Retry-After"))
				if err != nil || ra < 1 {
					t.Errorf("429 with Retry-After %q, want whole seconds ≥ 1", r.header.Get("Retry-After"))
				}
				retryAfter = max(retryAfter, ra)
			default:
				t.Errorf("answered %d", r.status)
			}
		})
	}
	wg.Wait()
	return ok, limited, retryAfter
}

// startLBClock starts fairlead on files with clock as the limits' clock.
func startLBClock(t *testing.T, files map[string]string, clock *testkit.Clock) *LB {
	t.Helper()
	l, _ := startLBOpts(t, testkit.WriteFiles(t, files), Options{Now: clock.Now})
	return l
}

// rate_per_source = 50: 200 requests at once from one address (the clock stopped), 50 served, the rest
// 429 with Retry-After and never forwarded; served again once Retry-After has passed. A WebSocket
// upgrade counts as a request.
func TestRatePerSourceAnswers429WithRetryAfterAndForwardsNothing(t *testing.T) {
	c := startCluster(t, 2, 2)
	clock := &testkit.Clock{}
	l := startLBClock(t, cxConfig(c, "[frontend]\nrate_per_source = 50\n"), clock)
	leader := c.Platforms[0]
	before := leader.Requests()
	ok, limited, retry := burst(t, l.Addr(), "/Thingworx/Things", "", 200)
	if ok != 50 || limited != 150 || retry != 1 {
		t.Fatalf("200 at once: %d served, %d answered 429 (Retry-After %d); want 50 served, 150 429 with Retry-After 1", ok, limited, retry)
	}
	if n := leader.Requests() - before; n != int64(ok) {
		t.Errorf("the leader got %d requests, want only the %d served", n, ok)
	}
	// An upgrade while the bucket is empty: 429 too, and its connection closes.
	if r := frontendtest.Request(t, l.Addr(), "GET /Thingworx/WS HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Asset-Id: a1\r\n\r\n"); r.Status != 429 || !r.Closed {
		t.Errorf("an upgrade over the rate: %s, want 429 and the connection closed", r)
	}
	if n := l.px.front.Sources().RateLimited.Load(); n != uint64(limited+1) {
		t.Errorf("%d counted in fairlead_frontend_limited_total{reason=\"rate_per_source\"}, want %d", n, limited+1)
	}
	clock.Advance(time.Duration(retry) * time.Second) // a client honouring Retry-After comes back then
	if code, _ := get(t, l, "/Thingworx/Things"); code != 200 {
		t.Errorf("after Retry-After (%d s): %d, want 200", retry, code)
	}
}

// From a proxy in trusted_proxies, the limit is per address it forwards for (the last untrusted
// X-Forwarded-For address), not per proxy.
func TestRatePerSourceBehindATrustedProxyIsPerForwardedAddress(t *testing.T) {
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	files["30-extra.toml"] = "[frontend]\nrate_per_source = 5\nburst_per_source = 20\ntrusted_proxies = [\"127.0.0.1/32\"]\n"
	l := startLBClock(t, files, &testkit.Clock{})
	if ok, limited, retry := burst(t, l.Addr(), "/x", "198.51.100.7, 192.0.2.1", 30); ok != 20 || limited != 10 || retry != 1 {
		t.Fatalf("30 for 192.0.2.1: %d served, %d 429 (Retry-After %d), want 20 (the burst) and 10 with Retry-After 1", ok, limited, retry)
	}
	if ok, _, _ := burst(t, l.Addr(), "/x", "192.0.2.2", 20); ok != 20 {
		t.Fatalf("20 for 192.0.2.2: %d served, want all 20: each forwarded address has its own bucket", ok)
	}
}

// max_conns_per_source = 3 counts a client address's connections, tunnels included: a fourth is closed
// at accept, before any byte; once a tunnel ends its connection no longer counts.
func TestMaxConnsPerSourceClosesTheConnectionsOverItAtAcceptTunnelsIncluded(t *testing.T) {
	c := startCluster(t, 1, 2)
	l, _ := startLB(t, cxConfig(c, "[frontend]\nmax_conns_per_source = 3\n"))
	t1, _ := dialAsset(t, l, "mc-1")
	mustEcho(t, t1, "one")
	t2, _ := dialAsset(t, l, "mc-2")
	mustEcho(t, t2, "two")
	k := opDialKeepAlive(t, l.Addr())
	if code, _, _ := k.get(t, "/Thingworx/Things"); code != 200 {
		t.Fatalf("the third connection: %d", code)
	}
	refused := func() bool {
		conn, err := net.Dial("tcp", l.Addr())
		if err != nil {
			return true
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))          //nolint:errcheck
		io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n") //nolint:errcheck
		b, _ := io.ReadAll(conn)
		return len(b) == 0
	}
	if !refused() {
		t.Fatal("a fourth connection was served")
	}
	if n := l.px.front.Sources().ConnLimited.Load(); n < 1 {
		t.Errorf("%d counted in fairlead_frontend_limited_total{reason=\"max_conns_per_source\"}", n)
	}
	t1.Close() // the client ends a tunnel
	testkit.Eventually(t, "a connection to be served once a tunnel ended", 5*time.Second, func() bool { return !refused() })
}

// The limits apply at once on a reload (per source, and new_tunnels_per_second), and the reload drops
// no tunnel.
func TestLimitsPerSourceApplyOnReloadWithoutDroppingTunnels(t *testing.T) {
	c := startCluster(t, 1, 2)
	files := cxConfig(c, "")
	clock := &testkit.Clock{}
	l := startLBClock(t, files, clock)
	tun, _ := dialAsset(t, l, "reload-1")
	mustEcho(t, tun, "before")
	if ok, _, _ := burst(t, l.Addr(), "/x", "", 30); ok != 30 {
		t.Fatalf("without limits: %d of 30 served", ok)
	}
	reloadWith(t, l, opCopy(files, "50-limits.toml", "[frontend]\nrate_per_source = 10\n[pools.cxserver]\nnew_tunnels_per_second = 1\nslow_start = \"10s\"\n"))
	if ok, limited, _ := burst(t, l.Addr(), "/x", "", 30); ok != 10 || limited != 20 {
		t.Fatalf("after the reload: %d of 30 served, %d 429; want 10 and 20", ok, limited)
	}
	mustEcho(t, tun, "after")
	// new_tunnels_per_second applies at once too: two more tunnels to the same server, the second waits.
	clock.Advance(10 * time.Second)      // rate_per_source's bucket full again
	_, by := dialAsset(t, l, "reload-1") // the same asset, the same server
	dialAsset(t, l, "reload-1")
	var delayed uint64
	for _, s := range l.px.gen.Load().pools["cxserver"].view.Load().servers {
		if s.Addr == c.Connection(by).Addr {
			delayed = s.tunnelsDelayed.Load()
		}
	}
	if delayed == 0 {
		t.Errorf("after the reload set new_tunnels_per_second = 1, no upgrade to %s waited", by)
	}
	mustEcho(t, tun, "still")
}
