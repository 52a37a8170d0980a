package lb

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/fasthttp/websocket"
)

// cxConfig is a config with the platform leader pool and a sticky connection-server pool behind a
// websocket route, as conf.d ships it, with test-sized intervals. extra is merged over it.
func cxConfig(c *sim.Cluster, extra string) map[string]string {
	files := platformConfig(c, "", "")
	var cx testkit.Config
	cx.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c)).
		Set("queue_timeout", time.Second)
	cx.Table("pools.cxserver.sticky").
		Set("keys", []string{"header:X-Asset-Id", "query:assetId", "cookie:FAIRLEAD_CX", "source"}).
		Set("cookie", "FAIRLEAD_CX").Set("idle_timeout", 10*time.Minute)
	cx.Table("pools.cxserver.check").Set("path", "/health").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("fall", 2).Set("rise", 2)
	cx.Array("routes").Set("websocket", true).
		Set("paths", []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"}).
		Set("pool", "cxserver")
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

func TestSameAssetLandsOnTheSameConnectionServerAcross100Reconnects(t *testing.T) {
	c := startCluster(t, 2, 3)
	l, _ := startLB(t, cxConfig(c, ""))
	for _, asset := range []string{"pump-1", "pump-2", "valve-7"} {
		first := ""
		for i := 0; i < 100; i++ {
			conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(asset))
			conn.Close()
			if first == "" {
				first = by
			} else if by != first {
				t.Fatalf("%s: reconnect %d went to %s, first went to %s", asset, i, by, first)
			}
		}
	}
}

// candidates lets the tests predict rendezvous placement as fairlead computes it.
type testCandidates []string

func (c testCandidates) Len() int          { return len(c) }
func (c testCandidates) Name(i int) string { return c[i] }
func (c testCandidates) Up(int) bool       { return true }

func TestStickyKeySourcesAreTriedInOrder(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	cand := testCandidates{c.Connections[0].Addr, c.Connections[1].Addr}
	place := func(key string) string {
		return c.Connections[stickiness.NewTable(stickiness.TableOptions{}).Place([]byte(key), cand)].Name
	}
	// Values whose placement differs, so that the winner is visible.
	valueOn := func(prefix, server string) string {
		for i := 0; ; i++ {
			v := fmt.Sprintf("v%d", i)
			if place(prefix+v) == server {
				return v
			}
		}
	}
	cx1, cx2 := c.Connections[0].Name, c.Connections[1].Name
	srcOn := place("s:127.0.0.1")
	other := map[string]string{cx1: cx2, cx2: cx1}
	cookieFor := map[string]string{cx1: serverCookie(c.Connections[0].Addr), cx2: serverCookie(c.Connections[1].Addr)}

	f := func(name string, h http.Header, query string, want string) {
		t.Helper()
		conn, by, _ := dialWS(t, l, "/Thingworx/WS"+query, h)
		conn.Close()
		if by != want {
			t.Errorf("%s: landed on %s, want %s", name, by, want)
		}
	}
	hv := valueOn("h:", other[srcOn])
	qv := valueOn("q:", srcOn)
	f("header beats query", http.Header{"X-Asset-Id": {hv}}, "?assetId="+qv, other[srcOn])
	qv2 := valueOn("q:", other[srcOn])
	f("query beats cookie", http.Header{"Cookie": {"FAIRLEAD_CX=" + cookieFor[srcOn]}}, "?assetId="+qv2, other[srcOn])
	f("cookie beats source", http.Header{"Cookie": {"FAIRLEAD_CX=" + cookieFor[other[srcOn]]}}, "", other[srcOn])
	f("source alone", nil, "", srcOn)
}

func TestStickyCookieIsSetOn101AndHonoured(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	conn, by, resp := dialWS(t, l, "/Thingworx/WSTunnelServer", assetHeader("edge-42"))
	conn.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "FAIRLEAD_CX" {
			cookie = ck
		}
	}
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
}

func TestOrdinaryRequestsNeverReachAConnectionServer(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	for _, path := range []string{"/Thingworx/WS", "/Thingworx/VWS/x", "/Thingworx/Things"} {
		if code, by := get(t, l, path); code != 200 || !strings.HasPrefix(by, "platform") {
			t.Errorf("GET %s: %d from %q, want 200 from a platform server", path, code, by)
		}
	}
	for _, s := range c.Connections {
		if n := s.Upgrades(); n != 0 {
			t.Errorf("%s got %d upgrades", s.Name, n)
		}
	}
}

func TestOneMiBBinaryAndTextMessagesPassIntactBothWays(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	conn, _, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("big"))
	defer conn.Close()
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
}

func TestADialFailureIsInvisibleToTheClient(t *testing.T) {
	c := startCluster(t, 2, 2)
	// A long check interval: only the failed dial can tell fairlead the server is gone.
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver.check]\ninterval = \"1h\"\n"))
	// Find an asset placed on cx1, then kill cx1 before it connects.
	asset := ""
	for i := 0; asset == ""; i++ {
		conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(fmt.Sprint("a", i)))
		conn.Close()
		if by == c.Connections[0].Name {
			asset = fmt.Sprint("a", i)
		}
	}
	if err := c.Connections[0].Kill(); err != nil {
		t.Fatal(err)
	}
	conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(asset))
	defer conn.Close()
	if by != c.Connections[1].Name {
		t.Fatalf("after the dial failure the asset landed on %q, want %s", by, c.Connections[1].Name)
	}
	if err := conn.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conn.ReadMessage(); err != nil || string(msg) != "hi" {
		t.Fatalf("echo: %q %v", msg, err)
	}
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
			warm, _, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("warm-up"))
			warm.Close()
			testkit.Eventually(t, "the warm-up tunnel to close", 5*time.Second, func() bool {
				return c.Connections[0].OpenTunnels()+c.Connections[1].OpenTunnels() == 0
			})
			baseG, baseFD := runtime.NumGoroutine(), openFDs(t)

			victim, survivor := c.Connections[0], c.Connections[1]
			var conns []*websocket.Conn
			var assets []string
			for i := 0; len(conns) < 200; i++ {
				a := fmt.Sprint("asset-", i)
				conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(a))
				if by != victim.Name {
					conn.Close()
					continue
				}
				conns = append(conns, conn)
				assets = append(assets, a)
			}
			if how == "killed" {
				victim.Kill() //nolint:errcheck
			} else {
				victim.SetHealthy(false) // alive, but its health check fails: fairlead must close the tunnels
			}
			// Every tunnel ends (the read fails with a close or EOF, not with the deadline, which only
			// guards against a hang): killing closes the sockets; a failing health check takes the server
			// down after fall (2) probes and fairlead closes its tunnels.
			var wg sync.WaitGroup
			for _, conn := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn.SetReadDeadline(time.Now().Add(20 * time.Second)) //nolint:errcheck
					_, _, err := conn.ReadMessage()
					if err == nil {
						t.Error("tunnel still delivers messages")
					} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Error("tunnel still open: the read timed out")
					}
					conn.Close()
				}()
			}
			wg.Wait()
			testkit.Eventually(t, "fairlead to see the server down", 3*time.Second, func() bool { return !serverAvailable(l, "cxserver", victim.Addr) })
			for _, a := range assets[:20] {
				conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(a))
				conn.Close()
				if by != survivor.Name {
					t.Fatalf("%s reconnected to %s, want the survivor %s", a, by, survivor.Name)
				}
			}
			testkit.Eventually(t, "goroutines and file descriptors back to baseline", 5*time.Second, func() bool {
				return runtime.NumGoroutine() <= baseG+5 && openFDs(t) <= baseFD+5
			})
		})
	}
}

func TestIdleStickyKeyIsForgottenAndCanBePlacedAnew(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver.sticky]\nidle_timeout = \"300ms\"\n"))
	p := l.px.gen.Load().pools["cxserver"]
	conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("sleepy"))
	// Take the asset's server down: the key is re-placed on the other server while it is down.
	idx := map[string]int{c.Connections[0].Name: 0, c.Connections[1].Name: 1}[by]
	conn.Close()
	c.Connections[idx].SetHealthy(false)
	testkit.Eventually(t, "server down", 3*time.Second, func() bool { return !serverAvailable(l, "cxserver", c.Connections[idx].Addr) })
	conn, by2, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("sleepy"))
	conn.Close()
	if by2 == by {
		t.Fatalf("placed on the down server %s", by)
	}
	c.Connections[idx].SetHealthy(true)
	testkit.Eventually(t, "server up", 3*time.Second, func() bool { return serverAvailable(l, "cxserver", c.Connections[idx].Addr) })
	// While the key is remembered it stays on the server it moved to.
	conn, by3, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("sleepy"))
	conn.Close()
	if by3 != by2 {
		t.Fatalf("remembered key moved from %s to %s", by2, by3)
	}
	// Idle past idle_timeout, it is forgotten and placed anew by hashing: back on its first server.
	time.Sleep(400 * time.Millisecond)
	p.stickyTable().Expire()
	conn, by4, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("sleepy"))
	conn.Close()
	if by4 != by {
		t.Fatalf("after idle expiry placed on %s, want the hashing choice %s", by4, by)
	}
}

func TestTunnelIdleTimeoutClosesASilentTunnel(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver]\ntunnel_idle_timeout = \"300ms\"\n"))
	busy, _, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("busy"))
	defer busy.Close()
	quiet, _, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("quiet"))
	defer quiet.Close()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if err := busy.WriteMessage(websocket.TextMessage, []byte("ping")); err != nil {
			t.Fatalf("an active tunnel was closed: %v", err)
		}
		if _, _, err := busy.ReadMessage(); err != nil {
			t.Fatalf("an active tunnel was closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	quiet.SetReadDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck
	if _, _, err := quiet.ReadMessage(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("silent tunnel: %v, want it closed by fairlead", err)
	}
}

func TestNon101AnswerIsRelayedAsItIs(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, ""))
	// The connection servers answer 400 to a request that is not a valid WebSocket handshake.
	req, _ := http.NewRequest("GET", "http://"+l.Addr()+"/Thingworx/WS", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("got %d, want the connection server's own 400", resp.StatusCode)
	}
	if n := c.Connections[0].Upgrades() + c.Connections[1].Upgrades(); n != 0 {
		t.Fatalf("%d upgrades", n)
	}
}

func TestReloadKeepsOpenTunnels(t *testing.T) {
	c := startCluster(t, 2, 2)
	files := cxConfig(c, "")
	l, _ := startLB(t, files)
	conn, _, _ := dialWS(t, l, "/Thingworx/WS", assetHeader("survivor"))
	defer conn.Close()

	files["40-reload.toml"] = "[pools.platform]\nqueue_timeout = \"3s\"\n[pools.cxserver.check]\ninterval = \"150ms\"\n"
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if err := conn.WriteMessage(websocket.TextMessage, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conn.ReadMessage(); err != nil || string(msg) != "still here" {
		t.Fatalf("after reload: %q %v", msg, err)
	}
	if code, _ := get(t, l, "/"); code != 200 {
		t.Fatalf("GET after reload: %d", code)
	}
}

func TestStickyBalanceWorksForPlainHTTPPoolsWithACookie(t *testing.T) {
	c := startCluster(t, 3, 0)
	for _, p := range c.Platforms {
		mustSetState(t, p, sim.Backup) // all serve ordinary requests
	}
	var conf testkit.Config
	conf.Table("frontend").Set("listen", "127.0.0.1:0")
	conf.Table("admin").Set("listen", "")
	conf.Table("pools.app").Set("balance", "sticky").Set("servers", testkit.PlatformAddrs(c))
	conf.Table("pools.app.sticky").Set("keys", []string{"cookie:SESSION_LB", "header:X-User"}).Set("cookie", "SESSION_LB")
	conf.Array("routes").Set("pool", "app")
	l, _ := startLB(t, map[string]string{"a.toml": conf.String()})

	// A user identified by a header always lands on one server.
	first := ""
	for i := 0; i < 20; i++ {
		req, _ := http.NewRequest("GET", "http://"+l.Addr()+"/app", nil)
		req.Header.Set("X-User", "alice")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		by := resp.Header.Get("X-Served-By")
		if first == "" {
			first = by
		} else if by != first {
			t.Fatalf("request %d for alice went to %s, first to %s", i, by, first)
		}
	}
	// A cookie-keeping client without the header gets the cookie and sticks by it.
	resp, err := testClient.Get("http://" + l.Addr() + "/app")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var ck *http.Cookie
	for _, x := range resp.Cookies() {
		if x.Name == "SESSION_LB" {
			ck = x
		}
	}
	if ck == nil {
		t.Fatalf("no SESSION_LB cookie: %v", resp.Header)
	}
	by := resp.Header.Get("X-Served-By")
	for i := 0; i < 20; i++ {
		req, _ := http.NewRequest("GET", "http://"+l.Addr()+"/app", nil)
		req.AddCookie(ck)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Served-By"); got != by {
			t.Fatalf("cookie request %d went to %s, want %s", i, got, by)
		}
	}
}
