package lb

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/fasthttp/websocket"
)

// Black-box tests of the server model over real sockets: servers are keyed by address and survive
// reloads with their health, sticky keys, tunnels and tunnel counts; removed servers drain; live
// failures reach the health check, which alone takes a server down; a leader change ends the old
// leader's tunnels; in_flight_since.

// hang is the deadline of the waits below: long enough to fail only on a hang.
const hang = 20 * time.Second

// tryReload loads files as a new config (they must load) and applies it, as SIGHUP does, returning
// Reload's error.
func tryReload(t *testing.T, l *LB, files map[string]string) error {
	t.Helper()
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	return l.Reload(cfg)
}

// reloadWith is tryReload for a reload that must succeed.
func reloadWith(t *testing.T, l *LB, files map[string]string) {
	t.Helper()
	if err := tryReload(t, l, files); err != nil {
		t.Fatal(err)
	}
}

// placedOn is the server that sticky placement gives the X-Asset-Id (or X-User) value among addrs, all
// available: the rendezvous choice of a fresh sticky table, computed as fairlead computes it.
func placedOn(value string, addrs ...string) string {
	return addrs[stickiness.NewTable(stickiness.TableOptions{}).Place([]byte("h:"+value), testCandidates(addrs))]
}

// valuesPlacedOn returns n values "<prefix><i>" that placement among addrs puts on want.
func valuesPlacedOn(t *testing.T, prefix string, n int, want string, addrs ...string) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i == 100000 {
			t.Fatalf("no %d values placed on %s among %v", n, want, addrs)
		}
		if v := fmt.Sprint(prefix, i); placedOn(v, addrs...) == want {
			out = append(out, v)
		}
	}
	return out
}

// mustEcho fails the test unless msg comes back through the tunnel.
func mustEcho(t *testing.T, conn *websocket.Conn, msg string) {
	t.Helper()
	conn.SetWriteDeadline(time.Now().Add(hang)) //nolint:errcheck
	conn.SetReadDeadline(time.Now().Add(hang))  //nolint:errcheck
	if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("tunnel closed: writing %q: %v", msg, err)
	}
	_, got, err := conn.ReadMessage()
	if err != nil || string(got) != msg {
		t.Fatalf("tunnel: sent %q, read %q, %v", msg, got, err)
	}
	conn.SetWriteDeadline(time.Time{}) //nolint:errcheck
	conn.SetReadDeadline(time.Time{})  //nolint:errcheck
}

// mustClose waits until the tunnel ends: a read fails with a close or EOF, not with the deadline,
// which only guards against a hang.
func mustClose(t *testing.T, conn *websocket.Conn, what string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(hang)) //nolint:errcheck
	_, msg, err := conn.ReadMessage()
	if err == nil {
		t.Fatalf("%s: tunnel still delivers messages (%q)", what, msg)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: tunnel still open: the read timed out", what)
	}
}

// dialAsset opens a tunnel for X-Asset-Id asset, closed at the end of the test, and returns it with the
// name of the server that answered.
func dialAsset(t *testing.T, l *LB, asset string) (*websocket.Conn, string) {
	t.Helper()
	conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(asset))
	t.Cleanup(func() { conn.Close() })
	return conn, by
}

// landsOn opens a tunnel for asset, closes it, and returns the name of the server that answered.
func landsOn(t *testing.T, l *LB, asset string) string {
	t.Helper()
	conn, by, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(asset))
	conn.Close()
	return by
}

// dialOn is dialAsset for a tunnel that must land on the server named want.
func dialOn(t *testing.T, l *LB, asset, want string) *websocket.Conn {
	t.Helper()
	conn, by := dialAsset(t, l, asset)
	if by != want {
		t.Fatalf("%s landed on %s, want %s", asset, by, want)
	}
	return conn
}

// mustLand fails the test unless a tunnel for asset (opened and closed, as landsOn does) lands on the
// server named want; what says when.
func mustLand(t *testing.T, l *LB, what, asset, want string) {
	t.Helper()
	if by := landsOn(t, l, asset); by != want {
		t.Fatalf("%s: %s landed on %s, want %s", what, asset, by, want)
	}
}

// settles waits until check returns "" and fails with its last answer if that never happens.
func settles(t *testing.T, what string, check func() string) {
	t.Helper()
	var msg string
	if !testkit.Within(hang, func() bool { msg = check(); return msg == "" }) {
		t.Fatalf("timed out after %s waiting for %s: %s", hang, what, msg)
	}
}

func TestAReloadAddingAServerKeepsTunnelsStickyKeysHealthAndTunnelCountsAndFeedsTheNewServerOnlyAfterAPassingProbe(t *testing.T) {
	c := startCluster(t, 2, 3)
	cx1, cx2, cx3 := c.Connections[0], c.Connections[1], c.Connections[2]
	name := map[string]string{cx1.Addr: cx1.Name, cx2.Addr: cx2.Name, cx3.Addr: cx3.Name}
	l, _ := startLB(t, cxConfig(c, fmt.Sprintf("[pools.cxserver]\nservers = [%q, %q]\n", cx1.Addr, cx2.Addr)))

	// 40 assets, ten of each kind: on cx1 or cx2 now, and on cx3 or not by hashing over three servers.
	// Half of them (movable) would go to cx3 once it is up if a reload forgot their keys; they are
	// first reconnected only then, so that no reconnect while cx3 is down places them anew unseen.
	var assets, movable []string
	for _, pair := range [][2]*sim.ConnServer{{cx1, cx3}, {cx2, cx3}, {cx1, cx1}, {cx2, cx2}} {
		n := 0
		for i := 0; n < 10; i++ {
			a := fmt.Sprintf("keep-%s-%s-%d", pair[0].Name, pair[1].Name, i)
			if placedOn(a, cx1.Addr, cx2.Addr) == pair[0].Addr && placedOn(a, cx1.Addr, cx2.Addr, cx3.Addr) == pair[1].Addr {
				assets = append(assets, a)
				if pair[1] == cx3 {
					movable = append(movable, a)
				}
				n++
			}
		}
	}
	conns := map[string]*websocket.Conn{}
	home := map[string]string{} // asset → server name
	for _, a := range assets {
		home[a] = name[placedOn(a, cx1.Addr, cx2.Addr)]
		conns[a] = dialOn(t, l, a, home[a])
	}
	// /status and the servers agree on each server's tunnels: those of conns still open.
	countsAgree := func(when string) {
		t.Helper()
		settles(t, "tunnel counts "+when, func() string {
			want := map[string]int{}
			for a, conn := range conns {
				if conn != nil {
					want[home[a]]++
				}
			}
			var bad []string
			for _, s := range c.Connections {
				ss, _ := serverStatus(l, "cxserver", s.Addr) // before the reload cx3 is not listed: 0
				if ss.Tunnels != int64(want[s.Name]) || s.OpenTunnels() != want[s.Name] {
					bad = append(bad, fmt.Sprintf("%s: /status %d, open on the server %d, want %d", s.Name, ss.Tunnels, s.OpenTunnels(), want[s.Name]))
				}
			}
			return strings.Join(bad, "; ")
		})
	}
	countsAgree("before the reload")

	// Health before the reload: both up, a few probes answered.
	// see returns a server's probe count in /status, failing the test if it ever goes down (its health
	// was reset).
	last := map[string]uint64{}
	see := func(addr string) uint64 {
		t.Helper()
		ss := mustServerStatus(t, l, "cxserver", addr)
		if ss.Check == nil || ss.Check.Probes < last[addr] {
			t.Fatalf("%s: /status shows check %+v, want one with at least the %d probes seen before", addr, ss.Check, last[addr])
		}
		last[addr] = ss.Check.Probes
		return last[addr]
	}
	testkit.Eventually(t, "a few probes of each server", hang, func() bool { return see(cx1.Addr) >= 3 && see(cx2.Addr) >= 3 })
	before := map[string]uint64{cx1.Addr: see(cx1.Addr), cx2.Addr: see(cx2.Addr)}
	stayUp := func(when string) {
		t.Helper()
		for _, s := range []*sim.ConnServer{cx1, cx2} {
			if ss := mustServerStatus(t, l, "cxserver", s.Addr); ss.State != "up" || !ss.Available {
				t.Fatalf("%s: %s is %q (available %v), want up", when, s.Name, ss.State, ss.Available)
			}
			see(s.Addr)
		}
	}
	stayUp("before the reload")

	// The third server fails its health check when the reload adds it. The reload changes queue_timeout
	// too, which gives every server a new upstream connection pool.
	cx3.SetHealthy(false)
	reloadWith(t, l, cxConfig(c, "[pools.cxserver]\nqueue_timeout = \"2s\"\n"))
	stayUp("just after the reload")
	countsAgree("after the reload")
	if !slices.Contains(listedServers(l, "cxserver"), cx3.Addr) {
		t.Fatalf("/status does not list the added server: %v", listedServers(l, "cxserver"))
	}

	for _, a := range assets {
		mustEcho(t, conns[a], "after the reload: "+a)
	}
	for _, a := range assets {
		if !slices.Contains(movable, a) {
			mustLand(t, l, "reconnected after the reload", a, home[a])
		}
	}

	// The new server's probe answered and failed: it takes no new key.
	testkit.Eventually(t, "the first probe of the added server", hang, func() bool {
		ss := mustServerStatus(t, l, "cxserver", cx3.Addr)
		return ss.Check != nil && ss.Check.Answered
	})
	placedWhileDown := valuesPlacedOn(t, "new-", 40, cx3.Addr, cx1.Addr, cx2.Addr, cx3.Addr)
	homeWhileDown := map[string]string{}
	for _, a := range placedWhileDown {
		by := landsOn(t, l, a)
		if by == cx3.Name {
			t.Fatalf("new key %s landed on %s, which never passed a probe", a, by)
		}
		homeWhileDown[a] = by
	}
	if ss := mustServerStatus(t, l, "cxserver", cx3.Addr); ss.State != "down" || ss.Available {
		t.Fatalf("unhealthy added server is %q (available %v), want down", ss.State, ss.Available)
	}
	if n := cx3.Upgrades(); n != 0 {
		t.Fatalf("the unhealthy added server got %d upgrades", n)
	}
	stayUp("while the added server is down")

	// Once it passes its probes, new keys that hash to it go there, and only new keys.
	cx3.SetHealthy(true)
	testkit.Eventually(t, "the added server to pass its probes", hang, func() bool { return serverAvailable(l, "cxserver", cx3.Addr) })
	for _, a := range valuesPlacedOn(t, "fresh-", 20, cx3.Addr, cx1.Addr, cx2.Addr, cx3.Addr) {
		conns[a], home[a] = dialOn(t, l, a, cx3.Name), cx3.Name
	}
	countsAgree("with tunnels opened after the reload")
	for _, a := range placedWhileDown {
		mustLand(t, l, "placed while the added server was down", a, homeWhileDown[a])
	}
	for _, a := range assets { // the movable ones for the first time since the reload
		mustLand(t, l, "once the added server is up", a, home[a])
		mustEcho(t, conns[a], "at the end: "+a)
	}

	// The kept servers' checks went on from where they were.
	testkit.Eventually(t, "more probes of the kept servers", hang, func() bool {
		return see(cx1.Addr) > before[cx1.Addr]+2 && see(cx2.Addr) > before[cx2.Addr]+2
	})
	stayUp("at the end")

	// The counts follow the tunnels as they close: a third of them, then all.
	for _, every := range []int{3, 1} {
		i := 0
		for a, conn := range conns {
			if i++; conn != nil && i%every == 0 {
				conn.Close()
				conns[a] = nil
			}
		}
		countsAgree(fmt.Sprintf("after 1 in %d of the tunnels closed", every))
	}
}

// withApp adds to files a sticky plain-HTTP pool "app" over the given platform servers, keyed by X-User,
// for paths under /app, and returns files. Its file sorts first, so that its route comes before the
// catch-all platform route.
func withApp(files map[string]string, servers ...*sim.Platform) map[string]string {
	conf, pool, _, route := poolConf("app", "sticky", addrsOf(servers), false)
	pool.Set("queue_timeout", time.Second).Table("pools.app.sticky").Set("keys", []string{"header:X-User"})
	route.Set("paths", []string{"/app"})
	files["01-app.toml"] = conf.String()
	return files
}

func TestAReloadRemovingAServerClosesItsTunnelsReplacesItsKeysAndLetsItsInFlightRequestFinish(t *testing.T) {
	c := startCluster(t, 3, 3)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	cx1, cx2, cx3 := c.Connections[0], c.Connections[1], c.Connections[2]
	files := withApp(cxConfig(c, ""), p1, p2, p3)
	l, _ := startLB(t, files)

	// Ten tunnels to each connection server.
	cxAddrs := []string{cx1.Addr, cx2.Addr, cx3.Addr}
	conns := map[*sim.ConnServer][]*websocket.Conn{}
	var removedAssets []string
	for _, s := range []*sim.ConnServer{cx1, cx2, cx3} {
		for _, a := range valuesPlacedOn(t, "asset-"+s.Name+"-", 10, s.Addr, cxAddrs...) {
			conns[s] = append(conns[s], dialOn(t, l, a, s.Name))
			if s == cx2 {
				removedAssets = append(removedAssets, a)
			}
		}
	}

	// A user of platform2, whose slow request is in flight during the reload.
	user := valuesPlacedOn(t, "user-", 1, p2.Addr, p1.Addr, p2.Addr, p3.Addr)[0]
	mustServe(t, "GET as "+user, request(l, "GET", "/app/x", "", "X-User", user), p2.Name)
	slow := inBackground(l, "GET", "/app/slow?delay=1s", "", "X-User", user)
	testkit.Eventually(t, "the slow request to be in flight on platform2", hang, func() bool {
		return mustServerStatus(t, l, "app", p2.Addr).InFlight == 1
	})
	if replied(slow) {
		t.Fatalf("the slow request was answered before the reload: %s", <-slow)
	}

	files = withApp(maps.Clone(files), p1, p3)
	files["30-extra.toml"] = fmt.Sprintf("[pools.cxserver]\nservers = [%q, %q]\n", cx1.Addr, cx3.Addr)
	reloadWith(t, l, files)

	mustServe(t, "in-flight request to the removed server", awaitReply(t, slow), p2.Name)
	if got := listedServers(l, "app"); slices.Contains(got, p2.Addr) || len(got) != 2 {
		t.Fatalf("/status lists %v in pool app, want platform1 and platform3 only", got)
	}
	if got := listedServers(l, "cxserver"); slices.Contains(got, cx2.Addr) || len(got) != 2 {
		t.Fatalf("/status lists %v in pool cxserver, want cx1 and cx3 only", got)
	}

	// The removed server's tunnels close; the others stay.
	for _, conn := range conns[cx2] {
		mustClose(t, conn, "tunnel to the removed server")
	}
	testkit.Eventually(t, "the removed server's tunnels to close on its side", hang, func() bool { return cx2.OpenTunnels() == 0 })
	for _, s := range []*sim.ConnServer{cx1, cx3} {
		for i, conn := range conns[s] {
			mustEcho(t, conn, fmt.Sprintf("%s tunnel %d", s.Name, i))
		}
	}

	// Its keys are placed anew among the servers that stay.
	for _, a := range removedAssets {
		mustLand(t, l, "a key of the removed server", a, map[string]string{cx1.Addr: cx1.Name, cx3.Addr: cx3.Name}[placedOn(a, cx1.Addr, cx3.Addr)])
	}
	want := map[string]string{p1.Addr: p1.Name, p3.Addr: p3.Name}[placedOn(user, p1.Addr, p3.Addr)]
	mustServe(t, "GET as "+user+" after the reload", request(l, "GET", "/app/x", "", "X-User", user), want)
}

// slowChecks makes the connection servers' probes wait 10s: only live failures can change their health
// during the test.
const slowChecks = `
[pools.cxserver.check]
interval = "10s"
interval_max = "10s"
fast_interval = "10s"
fall = 3
`

func TestOneRefusedDialIsInvisibleAndClosesNoTunnelButFallRefusedDialsInARowTakeTheServerDown(t *testing.T) {
	c := startCluster(t, 2, 2)
	a, b := c.Connections[0], c.Connections[1]
	l, _ := startLB(t, cxConfig(c, slowChecks))

	var open []*websocket.Conn
	for _, asset := range valuesPlacedOn(t, "open-", 5, a.Addr, a.Addr, b.Addr) {
		open = append(open, dialOn(t, l, asset, a.Name))
	}
	// Assets known to be on A, disconnected for now.
	later := valuesPlacedOn(t, "later-", 3, a.Addr, a.Addr, b.Addr)
	for _, asset := range later {
		mustLand(t, l, "before the listener pauses", asset, a.Name)
	}
	testkit.Eventually(t, "A to hold only the open tunnels", hang, func() bool { return a.OpenTunnels() == len(open) })

	if err := a.PauseListener(); err != nil {
		t.Fatal(err)
	}
	for i, asset := range later {
		// Each dial to A is refused; the client gets its 101 from B without seeing an error.
		conn := dialOn(t, l, asset, b.Name)
		mustEcho(t, conn, "redirected "+asset)
		conn.Close()
		if i+1 == len(later) {
			break
		}
		// Fewer than fall refused dials: A stays up and keeps its tunnels.
		ss := mustServerStatus(t, l, "cxserver", a.Addr)
		if ss.State != "up" || !ss.Available {
			t.Fatalf("after %d refused dial(s) A is %q (available %v), want up", i+1, ss.State, ss.Available)
		}
		if ss.Check == nil || ss.Check.Passive != i+1 {
			t.Fatalf("after %d refused dial(s) /status shows check %+v, want %d live failures in a row", i+1, ss.Check, i+1)
		}
		for j, conn := range open {
			mustEcho(t, conn, fmt.Sprintf("tunnel %d after %d refused dial(s)", j, i+1))
		}
	}

	// The third refused dial in a row (fall = 3) takes A down and closes its tunnels.
	testkit.Eventually(t, "A down", hang, func() bool { return !serverAvailable(l, "cxserver", a.Addr) })
	if ss := mustServerStatus(t, l, "cxserver", a.Addr); ss.State != "down" {
		t.Fatalf("A is %q, want down", ss.State)
	}
	for _, conn := range open {
		mustClose(t, conn, "tunnel to a server taken down by live failures")
	}
	testkit.Eventually(t, "A's tunnels to close on its side", hang, func() bool { return a.OpenTunnels() == 0 })
}

func TestALeaderChangeClosesTheTunnelsToTheOldLeaderAndNewTunnelsGoToTheNewLeader(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	files := platformConfig(c, "", "")
	files["05-ws.toml"] = "[[routes]]\nwebsocket = true\npaths = [\"/Thingworx/WS\"]\npool = \"platform\"\n"
	l, _ := startLB(t, files)

	var conns []*websocket.Conn
	for i := 0; i < 5; i++ {
		conn := dialOn(t, l, fmt.Sprint("edge-", i), p1.Name)
		mustEcho(t, conn, fmt.Sprint("to the leader ", i))
		conns = append(conns, conn)
	}
	testkit.Eventually(t, "five tunnels on platform1", hang, func() bool {
		return p1.OpenTunnels() == 5 && mustServerStatus(t, l, "platform", p1.Addr).Tunnels == 5
	})

	// platform1 steps down (it still serves, and would keep its tunnels), platform2 leads.
	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	for _, conn := range conns {
		mustClose(t, conn, "tunnel to the old leader")
	}
	testkit.Eventually(t, "the old leader's tunnels to close on its side", hang, func() bool { return p1.OpenTunnels() == 0 })
	if leader := poolLeader(l, "platform"); leader != p2.Addr {
		t.Fatalf("tunnels closed, but /status shows leader %q, want %s", leader, p2.Addr)
	}
	mustEcho(t, dialOn(t, l, "edge-new", p2.Name), "to the new leader")
	testkit.Eventually(t, "the new tunnel counted on platform2", hang, func() bool {
		return mustServerStatus(t, l, "platform", p2.Addr).Tunnels == 1 && mustServerStatus(t, l, "platform", p1.Addr).Tunnels == 0
	})
}

// Issue 36: a hung server's requests in flight say since when they wait; a server that answers,
// however busy, shows a recent time (in_flight_since: since when none of its requests in flight ended).
func TestInFlightSinceIsWhenNoneOfTheServersRequestsInFlightHasEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Server{}
		t0 := time.Now()
		f := func(step string, want time.Time) {
			t.Helper()
			if got := s.inFlightSince(); !got.Equal(want) {
				t.Fatalf("%s: in flight since %v, want %v", step, got, want)
			}
		}
		f("nothing in flight", time.Time{})
		s.begin(0)
		f("one request", t0)
		time.Sleep(time.Second)
		s.begin(10)
		f("a second request waits too", t0)
		time.Sleep(time.Second)
		s.end(10)
		f("one ended, one still waits", t0.Add(2*time.Second))
		time.Sleep(20 * time.Second)
		f("hung", t0.Add(2*time.Second))
		s.end(0)
		f("all ended", time.Time{})

		// Busy and answering: requests overlap all the time, each answered within 100 ms.
		s.begin(0)
		for range 100 {
			time.Sleep(50 * time.Millisecond)
			s.begin(0)
			time.Sleep(50 * time.Millisecond)
			s.end(0)
		}
		f("busy and answering", time.Now())
		s.end(0)
		if s.inflight.Load() != 0 || s.inflightBytes.Load() != 0 {
			t.Fatalf("in flight %d, %d bytes after every end", s.inflight.Load(), s.inflightBytes.Load())
		}
	})
}
