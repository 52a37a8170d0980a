package lb

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/fasthttp/websocket"
)

// cxConfig is a config with the platform leader pool and a sticky connection-server pool behind a
// websocket route, as conf.d ships it, with test-sized intervals. extra is merged over it.
func cxConfig(c *sim.Cluster, extra string) map[string]string {
	files := platformConfig(c, "", "")
	cx, pool, check, route := poolConf("cxserver", "sticky", testkit.ConnectionAddrs(c), false)
	pool.Set("queue_timeout", time.Second).Table("pools.cxserver.sticky").
		Set("keys", []string{"header:X-Asset-Id", "query:assetId", "cookie:FAIRLEAD_CX", "source"}).
		Set("cookie", "FAIRLEAD_CX").Set("idle_timeout", 10*time.Minute)
	check.Set("path", "/health").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("fall", 2).Set("rise", 2)
	route.Set("websocket", true).Set("paths", []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"})
	files["05-cxserver.toml"] = cx.String()
	if extra != "" {
		files["30-extra.toml"] = extra
	}
	return files
}

// dialWS opens a WebSocket through fairlead and returns it with the name of the connection server.
func dialWS(t testing.TB, l *LB, path string, h http.Header) (*websocket.Conn, string, *http.Response) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial("ws://"+l.Addr()+path, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", path, err, status)
	}
	return conn, resp.Header.Get("X-Served-By"), resp
}

func assetHeader(id string) http.Header { return http.Header{"X-Asset-Id": {id}} }

// setCookie returns the cookie named name that an answer with header h sets, or nil.
func setCookie(h http.Header, name string) *http.Cookie {
	for _, ck := range (&http.Response{Header: h}).Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// candidates lets the tests predict rendezvous placement as fairlead computes it.
type testCandidates []string

func (c testCandidates) Len() int          { return len(c) }
func (c testCandidates) Name(i int) string { return c[i] }
func (c testCandidates) Up(int) bool       { return true }

// One fairlead in front of three connection servers, as conf.d ships it. (A refused dial is invisible to
// the client: TestOneRefusedDialIsInvisibleAndClosesNoTunnelButFallRefusedDialsInARowTakeTheServerDown.)
func TestAStickyWebSocketRouteKeepsEachKeyOnOneServerAndCarriesTunnelsIntactAcrossAReload(t *testing.T) {
	c := startCluster(t, 2, 3)
	files := cxConfig(c, "")
	l, _ := startLB(t, files)
	upgrades := func() (n int64) {
		for _, s := range c.Connections {
			n += s.Upgrades()
		}
		return n
	}

	t.Run("the same asset lands on the same connection server across 100 reconnects", func(t *testing.T) {
		for _, asset := range []string{"pump-1", "pump-2", "valve-7"} {
			first := landsOn(t, l, asset)
			for i := 1; i < 100; i++ {
				if by := landsOn(t, l, asset); by != first {
					t.Fatalf("%s: reconnect %d went to %s, first went to %s", asset, i, by, first)
				}
			}
		}
	})

	t.Run("sticky key sources are tried in order", func(t *testing.T) {
		cand := testCandidates(testkit.ConnectionAddrs(c))
		place := func(key string) string {
			return c.Connections[stickiness.NewTable(stickiness.TableOptions{}).Place([]byte(key), cand)].Name
		}
		// Values whose placement differs, so that the winner is visible.
		valueOn := func(prefix, server string) string {
			for i := 0; ; i++ {
				if v := fmt.Sprintf("v%d", i); place(prefix+v) == server {
					return v
				}
			}
		}
		srcOn, other := place("s:127.0.0.1"), c.Connections[0].Name
		if other == srcOn {
			other = c.Connections[1].Name
		}
		cookieFor := map[string]string{}
		for _, s := range c.Connections {
			cookieFor[s.Name] = serverCookie(s.Addr)
		}
		f := func(name string, h http.Header, query string, want string) {
			t.Helper()
			conn, by, _ := dialWS(t, l, "/Thingworx/WS"+query, h)
			conn.Close()
			if by != want {
				t.Errorf("%s: landed on %s, want %s", name, by, want)
			}
		}
		f("header beats query", http.Header{"X-Asset-Id": {valueOn("h:", other)}}, "?assetId="+valueOn("q:", srcOn), other)
		f("query beats cookie", http.Header{"Cookie": {"FAIRLEAD_CX=" + cookieFor[srcOn]}}, "?assetId="+valueOn("q:", other), other)
		f("cookie beats source", http.Header{"Cookie": {"FAIRLEAD_CX=" + cookieFor[other]}}, "", other)
		f("source alone", nil, "", srcOn)
	})

	t.Run("the sticky cookie is set on the 101 and honoured", func(t *testing.T) {
		conn, by, resp := dialWS(t, l, "/Thingworx/WSTunnelServer", assetHeader("edge-42"))
		conn.Close()
		cookie := setCookie(resp.Header, "FAIRLEAD_CX")
		if cookie == nil {
			t.Fatalf("no FAIRLEAD_CX cookie on the 101: %v", resp.Header)
		}
		// Without the asset header, the cookie alone brings the client back to the same server, every time.
		for i := 0; i < 20; i++ {
			conn, by2, resp2 := dialWS(t, l, "/Thingworx/WSTunnelServer", http.Header{"Cookie": {"FAIRLEAD_CX=" + cookie.Value}})
			conn.Close()
			if by2 != by {
				t.Fatalf("cookie sent back: landed on %s, want %s", by2, by)
			}
			if len(resp2.Cookies()) != 0 {
				t.Fatalf("cookie set again though the client sent it: %v", resp2.Cookies())
			}
		}
	})

	t.Run("ordinary requests never reach a connection server and a non-101 answer is relayed as it is", func(t *testing.T) {
		before := upgrades()
		for _, path := range []string{"/Thingworx/WS", "/Thingworx/VWS/x", "/Thingworx/Things"} {
			if code, by := get(t, l, path); code != 200 || !strings.HasPrefix(by, "platform") {
				t.Errorf("GET %s: %d from %q, want 200 from a platform server", path, code, by)
			}
		}
		// The connection servers answer 400 to a request that is not a valid WebSocket handshake.
		if r := request(l, "GET", "/Thingworx/WS", "", "Connection", "Upgrade", "Upgrade", "websocket"); r.status != 400 {
			t.Errorf("a bad handshake got %s, want the connection server's own 400", r)
		}
		if n := upgrades() - before; n != 0 {
			t.Errorf("the connection servers got %d upgrades", n)
		}
	})

	t.Run("1 MiB binary and text messages pass intact both ways", func(t *testing.T) {
		conn, _ := dialAsset(t, l, "big")
		bin := make([]byte, 1<<20)
		rand.Read(bin) //nolint:errcheck
		text := bytes.Repeat([]byte("ThingWorx edge ✓ "), (1<<20)/19)
		for _, m := range []struct {
			kind int
			data []byte
		}{{websocket.BinaryMessage, bin}, {websocket.TextMessage, text}} {
			if err := conn.WriteMessage(m.kind, m.data); err != nil {
				t.Fatal(err)
			}
			kind, got, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if kind != m.kind || !bytes.Equal(got, m.data) {
				t.Fatalf("message of type %d and %d bytes came back as type %d with %d bytes", m.kind, len(m.data), kind, len(got))
			}
		}
	})

	t.Run("a reload keeps open tunnels", func(t *testing.T) {
		conn, _ := dialAsset(t, l, "survivor")
		files["40-reload.toml"] = "[pools.platform]\nqueue_timeout = \"3s\"\n[pools.cxserver.check]\ninterval = \"150ms\"\n"
		reloadWith(t, l, files)
		mustEcho(t, conn, "still here")
		if code, _ := get(t, l, "/"); code != 200 {
			t.Fatalf("GET after reload: %d", code)
		}
	})
}

func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestServerDownClosesItsTunnelsAndReconnectsLandOnSurvivors(t *testing.T) {
	for _, how := range []string{"killed", "health check fails"} {
		t.Run(how, func(t *testing.T) {
			c := startCluster(t, 2, 2)
			l, _ := startLB(t, cxConfig(c, ""))
			// The tunnel engine (its poller and workers) starts with the first tunnel: start it before
			// taking the baseline.
			landsOn(t, l, "warm-up")
			testkit.Eventually(t, "the warm-up tunnel to close", 5*time.Second, func() bool {
				return c.Connections[0].OpenTunnels()+c.Connections[1].OpenTunnels() == 0
			})
			baseG, baseFD := runtime.NumGoroutine(), openFDs(t)

			victim, survivor := c.Connections[0], c.Connections[1]
			var conns []*websocket.Conn
			assets := valuesPlacedOn(t, "asset-", 200, victim.Addr, victim.Addr, survivor.Addr)
			for _, a := range assets {
				conns = append(conns, dialOn(t, l, a, victim.Name))
			}
			if how == "killed" {
				victim.Kill() //nolint:errcheck
			} else {
				victim.SetHealthy(false) // alive, but its health check fails: fairlead must close the tunnels
			}
			// Every tunnel ends: killing closes the sockets; a failing health check takes the server down
			// after fall (2) probes and fairlead closes its tunnels.
			opCloseTimes(t, conns)
			for _, conn := range conns {
				conn.Close()
			}
			testkit.Eventually(t, "fairlead to see the server down", 3*time.Second, func() bool { return !serverAvailable(l, "cxserver", victim.Addr) })
			for _, a := range assets[:20] {
				if by := landsOn(t, l, a); by != survivor.Name {
					t.Fatalf("%s reconnected to %s, want the survivor %s", a, by, survivor.Name)
				}
			}
			testkit.Eventually(t, "goroutines and file descriptors back to baseline", 5*time.Second, func() bool {
				return runtime.NumGoroutine() <= baseG+5 && openFDs(t) <= baseFD+5
			})
		})
	}
}

func TestTunnelIdleTimeoutClosesASilentTunnelAndAnIdleStickyKeyIsForgottenAndPlacedAnew(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver]\ntunnel_idle_timeout = \"300ms\"\n[pools.cxserver.sticky]\nidle_timeout = \"300ms\"\n"))
	busy, _ := dialAsset(t, l, "busy")
	quiet, _ := dialAsset(t, l, "quiet")
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mustEcho(t, busy, "ping") // an active tunnel stays open
	}
	quiet.SetReadDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck
	if _, _, err := quiet.ReadMessage(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("silent tunnel: %v, want it closed by fairlead", err)
	}
	busy.Close()

	p := l.px.gen.Load().pools["cxserver"]
	by := landsOn(t, l, "sleepy")
	// Take the asset's server down: the key is re-placed on the other server while it is down.
	s := c.Connection(by)
	s.SetHealthy(false)
	testkit.Eventually(t, "server down", 3*time.Second, func() bool { return !serverAvailable(l, "cxserver", s.Addr) })
	by2 := landsOn(t, l, "sleepy")
	if by2 == by {
		t.Fatalf("placed on the down server %s", by)
	}
	s.SetHealthy(true)
	testkit.Eventually(t, "server up", 3*time.Second, func() bool { return serverAvailable(l, "cxserver", s.Addr) })
	// While the key is remembered it stays on the server it moved to.
	mustLand(t, l, "the remembered key", "sleepy", by2)
	// Idle past idle_timeout, it is forgotten and placed anew by hashing: back on its first server.
	time.Sleep(400 * time.Millisecond)
	p.stickyTable().Expire()
	mustLand(t, l, "after idle expiry, the hashing choice", "sleepy", by)
}

func TestStickyBalanceWorksForPlainHTTPPoolsWithACookie(t *testing.T) {
	c := startCluster(t, 3, 0)
	for _, p := range c.Platforms {
		mustSetState(t, p, sim.Backup) // all serve ordinary requests
	}
	conf, pool, _, _ := poolConf("app", "sticky", testkit.PlatformAddrs(c), true)
	pool.Table("pools.app.sticky").Set("keys", []string{"cookie:SESSION_LB", "header:X-User"}).Set("cookie", "SESSION_LB")
	l, _ := startLB(t, map[string]string{"a.toml": conf.String()})

	// A user identified by a header always lands on one server.
	first := mustServe(t, "request 1 for alice", request(l, "GET", "/app", "", "X-User", "alice"), "")
	for i := 2; i <= 20; i++ {
		mustServe(t, fmt.Sprint("request ", i, " for alice"), request(l, "GET", "/app", "", "X-User", "alice"), first)
	}
	// A cookie-keeping client without the header gets the cookie and sticks by it.
	r := request(l, "GET", "/app", "")
	mustServe(t, "a request without the header", r, "")
	ck := setCookie(r.header, "SESSION_LB")
	if ck == nil {
		t.Fatalf("no SESSION_LB cookie: %v", r.header)
	}
	for i := 1; i <= 20; i++ {
		mustServe(t, fmt.Sprint("cookie request ", i), request(l, "GET", "/app", "", "Cookie", ck.Name+"="+ck.Value), r.by)
	}
}
