package lb

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
)

// Black-box tests of the operations features over real sockets: the admin config's secrets and their
// reload, the reload-failed banner, admin actions (drain, maint, ready, probe) and what they do to a
// server, listen address rebinding on reload, tunnel_close_spread, and the drain at Close. Who may read
// and act on the admin listener is package admin's test (lb/admin/access_test.go).

// opSecret writes a secret file (with a trailing newline, as editors leave it) and returns its path.
func opSecret(t *testing.T, value string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// opAction posts ACTION for the server at addr of pool and returns the status and the body.
func opAction(t *testing.T, l *LB, pool, addr, action, auth string) (int, []byte) {
	t.Helper()
	code, _, body := opAdmin(t, l.AdminAddr(), http.MethodPost, "/api/servers/"+pool+"/"+addr+"/"+action, auth)
	return code, body
}

// opMustAction posts ACTION and fails the test unless it answers 200 with the server's status, which
// it returns.
func opMustAction(t *testing.T, l *LB, pool, addr, action, auth string) admin.ServerStatus {
	t.Helper()
	code, body := opAction(t, l, pool, addr, action, auth)
	if code != 200 {
		t.Fatalf("POST %s on %s: %d %s", action, addr, code, body)
	}
	var ss admin.ServerStatus
	if err := json.Unmarshal(body, &ss); err != nil {
		t.Fatalf("POST %s on %s: the answer is not a server status: %v: %s", action, addr, err, body)
	}
	if ss.Addr != addr {
		t.Fatalf("POST %s on %s: the answer describes %q", action, addr, ss.Addr)
	}
	return ss
}

const adminActionSeries = `fairlead_events_total{kind="admin_action"}`

// opWantState fails the test unless /api/status (read as JSON over the admin listener, as an operator
// reads it) shows the server with these state, admin_state and available.
func opWantState(t *testing.T, l *LB, auth, pool, addr, state, adminState string, available bool) {
	t.Helper()
	for _, p := range apiStatus(t, l.AdminAddr(), auth).Pools {
		for _, s := range p.Servers {
			if p.Name == pool && s.Addr == addr {
				if s.State != state || s.AdminState != adminState || s.Available != available {
					t.Fatalf("/api/status: %s: state %q, admin_state %q, available %v; want %q, %q, %v",
						addr, s.State, s.AdminState, s.Available, state, adminState, available)
				}
				return
			}
		}
	}
	t.Fatalf("/api/status does not list %s in pool %s", addr, pool)
}

func TestAdminActionsDrainMaintReadyOnAStickyWebSocketPool(t *testing.T) {
	c := startCluster(t, 2, 2)
	files := cxConfig(c, "")
	l, _ := startLB(t, files)
	cx1, cx2 := c.Connections[0], c.Connections[1]
	both := []string{cx1.Addr, cx2.Addr}
	wantActions := func(want int) { t.Helper(); wantMetrics(t, l, fmt.Sprint(adminActionSeries, " ", want)) }
	// Fresh asset names placed on cx1 by hashing over both servers, handed out one at a time.
	fresh := valuesPlacedOn(t, "op-fresh-", 20, cx1.Addr, both...)
	next := func() string { a := fresh[0]; fresh = fresh[1:]; return a }

	assets := valuesPlacedOn(t, "op-held-", 3, cx1.Addr, both...)
	var conns []*websocket.Conn
	for _, a := range assets {
		conns = append(conns, dialOn(t, l, a, cx1.Name))
	}
	testkit.Eventually(t, "3 tunnels open on cx1", 5*time.Second, func() bool { return cx1.OpenTunnels() == 3 })

	// drain: no new traffic, not even for the keys of its open tunnels; the tunnels stay.
	ss := opMustAction(t, l, "cxserver", cx1.Addr, "drain", "")
	if ss.State != "drain" || ss.AdminState != "drain" || ss.Available {
		t.Errorf("the answer to drain: %+v", ss)
	}
	wantActions(1)
	opWantState(t, l, "", "cxserver", cx1.Addr, "drain", "drain", false)
	for i, conn := range conns {
		mustEcho(t, conn, fmt.Sprint("drained but open ", i))
	}
	for _, a := range assets {
		mustLand(t, l, "a held key while cx1 drains", a, cx2.Name)
	}
	for i := 0; i < 3; i++ {
		mustLand(t, l, "a new key while cx1 drains", next(), cx2.Name)
	}
	if n := cx1.OpenTunnels(); n != 3 {
		t.Errorf("cx1 has %d open tunnels while it drains, want its 3", n)
	}

	// ready: it takes new traffic again.
	opMustAction(t, l, "cxserver", cx1.Addr, "ready", "")
	wantActions(2)
	opWantState(t, l, "", "cxserver", cx1.Addr, "up", "ready", true)
	for i := 0; i < 3; i++ {
		mustLand(t, l, "a new key placed on cx1 after ready", next(), cx1.Name)
	}
	for i, conn := range conns {
		mustEcho(t, conn, fmt.Sprint("ready ", i))
	}

	// The operator's state survives a reload that keeps the server.
	opMustAction(t, l, "cxserver", cx1.Addr, "drain", "")
	files["40-reload.toml"] = "[pools.cxserver]\nqueue_timeout = \"2s\"\n"
	reloadWith(t, l, files)
	opWantState(t, l, "", "cxserver", cx1.Addr, "drain", "drain", false)
	mustLand(t, l, "a new key after a reload, cx1 drained before it", next(), cx2.Name)

	// maint: its tunnels are closed and it takes nothing.
	opMustAction(t, l, "cxserver", cx1.Addr, "maint", "")
	wantActions(4)
	opWantState(t, l, "", "cxserver", cx1.Addr, "maint", "maint", false)
	for i, conn := range conns {
		mustClose(t, conn, fmt.Sprint("tunnel ", i, " to cx1 in maintenance"))
	}
	testkit.Eventually(t, "cx1's tunnels to end", 5*time.Second, func() bool { return cx1.OpenTunnels() == 0 })
	for i := 0; i < 3; i++ {
		mustLand(t, l, "a new key while cx1 is in maintenance", next(), cx2.Name)
	}
	if n := cx1.OpenTunnels(); n != 0 {
		t.Errorf("cx1 in maintenance has %d open tunnels", n)
	}

	opMustAction(t, l, "cxserver", cx1.Addr, "ready", "")
	wantActions(5)
	opWantState(t, l, "", "cxserver", cx1.Addr, "up", "ready", true)
	mustLand(t, l, "a new key placed on cx1 after maint and ready", next(), cx1.Name)

	// Wrong requests: nothing done, nothing published.
	for _, x := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/api/servers/cxserver/" + cx1.Addr + "/reboot", 400},
		{"POST", "/api/servers/cxserver/" + cx1.Addr + "/", 400},
		{"POST", "/api/servers/cxserver/127.0.0.1:1/drain", 404},
		{"POST", "/api/servers/nopool/" + cx1.Addr + "/drain", 404},
		{"POST", "/api/servers/cxserver/" + cx1.Addr, 404},
		{"POST", "/api/servers/platform/" + cx1.Addr + "/drain", 404},
		{"GET", "/api/servers/cxserver/" + cx1.Addr + "/drain", 405},
		{"PUT", "/api/servers/cxserver/" + cx1.Addr + "/drain", 405},
	} {
		code, h, body := opAdmin(t, l.AdminAddr(), x.method, x.path, "")
		if code != x.want {
			t.Errorf("%s %s: %d %s, want %d", x.method, x.path, code, body, x.want)
		}
		if code == 405 && !strings.Contains(h.Get("Allow"), "POST") {
			t.Errorf("%s %s: 405 with Allow %q, want POST", x.method, x.path, h.Get("Allow"))
		}
	}
	wantActions(5)
	opWantState(t, l, "", "cxserver", cx1.Addr, "up", "ready", true)
}

// opQuietCount waits until count stays the same for 500ms (no probe is due for a long while) and
// returns it.
func opQuietCount(t *testing.T, what string, count func() int) int {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	n, since := count(), time.Now()
	for time.Since(since) < 500*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("%s never stopped changing (long check interval not in force?)", what)
		}
		time.Sleep(20 * time.Millisecond)
		if m := count(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

func TestAdminProbeActionProbesTheServerAtOnce(t *testing.T) {
	c := startCluster(t, 2, 2)
	const slow = "interval = \"30s\"\ninterval_max = \"40s\"\nfast_interval = \"30s\"\n"
	l, _ := startLB(t, cxConfig(c, "[pools.platform.check]\n"+slow+"[pools.cxserver.check]\n"+slow))
	p1, p2, cx2 := c.Platforms[0], c.Platforms[1], c.Connections[1]
	poolOf := map[string]string{p1.Addr: "platform", p2.Addr: "platform", cx2.Addr: "cxserver"}
	probes := func(addr string) func() int {
		return func() int {
			ss, ok := serverStatus(l, poolOf[addr], addr)
			if !ok || ss.Check == nil {
				return -1
			}
			return int(ss.Check.Probes)
		}
	}

	// A platform server of the leader pool: the simulator records the LeaderCheck.
	for _, p := range []struct {
		name, addr string
		sim        func() int
	}{
		{"platform1 (leader)", p1.Addr, func() int { return len(p1.Probes()) }},
		{"platform2", p2.Addr, func() int { return len(p2.Probes()) }},
	} {
		before := opQuietCount(t, p.name+"'s probes", p.sim)
		st := opQuietCount(t, p.name+"'s probe count in /status", probes(p.addr))
		opMustAction(t, l, "platform", p.addr, "probe", "")
		testkit.Eventually(t, p.name+" to get a probe", 3*time.Second, func() bool { return p.sim() > before })
		testkit.Eventually(t, p.name+"'s probe count in /status to move", 3*time.Second, func() bool { return probes(p.addr)() > st })
	}
	// A connection server of the sticky pool: /status counts its probes.
	before := opQuietCount(t, "cx2's probe count", probes(cx2.Addr))
	opMustAction(t, l, "cxserver", cx2.Addr, "probe", "")
	testkit.Eventually(t, "cx2 to get a probe", 3*time.Second, func() bool { return probes(cx2.Addr)() > before })
	opWantState(t, l, "", "cxserver", cx2.Addr, "up", "ready", true)
	wantMetrics(t, l, adminActionSeries+" 3") // one per probe
}

// opKeepAlive is a client connection that sends HTTP/1.1 requests one after the other on one socket.
type opKeepAlive struct {
	conn net.Conn
	br   *bufio.Reader
}

func opDialKeepAlive(t *testing.T, addr string) *opKeepAlive {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &opKeepAlive{conn: conn, br: bufio.NewReader(conn)}
}

// get sends GET path on the connection and returns the status, the X-Served-By header, and whether
// the server announced that it closes the connection.
func (k *opKeepAlive) get(t *testing.T, path string) (status int, servedBy string, closing bool) {
	t.Helper()
	k.conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	defer k.conn.SetDeadline(time.Time{})                //nolint:errcheck
	if _, err := fmt.Fprintf(k.conn, "GET %s HTTP/1.1\r\nHost: fairlead.test\r\n\r\n", path); err != nil {
		t.Fatalf("keep-alive connection: writing GET %s: %v", path, err)
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		t.Fatalf("keep-alive connection: GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("keep-alive connection: GET %s: body: %v", path, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Served-By"), resp.Close
}

// opRefused reports whether a new connection to addr is refused.
func opRefused(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	conn.Close()
	return false
}

// opCopy returns a copy of files with name → body added.
func opCopy(files map[string]string, name, body string) map[string]string {
	out := map[string]string{name: body}
	for k, v := range files {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func TestReloadMovesTheListenersWithoutCuttingKeepAliveConnections(t *testing.T) {
	c := startCluster(t, 2, 2)
	files := platformConfig(c, "", "")
	l, logs := startLB(t, files)
	oldAddr, oldAdmin := l.Addr(), l.AdminAddr()
	ka := opDialKeepAlive(t, oldAddr)
	if code, by, closing := ka.get(t, "/Thingworx/one"); code != 200 || by != "platform1" || closing {
		t.Fatalf("first request on the keep-alive connection: %d from %q (closing %v)", code, by, closing)
	}

	// Free addresses, closed again: a test running in parallel may take one meanwhile, and the
	// reload then fails whole (nothing moves); pick others and try again.
	var newAddr, newAdmin string
	for try := 1; ; try++ {
		newAddr, newAdmin = testkit.Addr(t), testkit.Addr(t)
		err := tryReload(t, l, opCopy(files, "50-listen.toml", fmt.Sprintf("[frontend]\nlisten = %q\n[admin]\nlisten = %q\n", newAddr, newAdmin)))
		if err == nil {
			break
		}
		if try == 5 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("reload to a new listen address: %v", err)
		}
	}
	if got := l.Addr(); got != newAddr {
		t.Fatalf("Addr() = %s after the reload, want %s", got, newAddr)
	}
	if got := l.AdminAddr(); got != newAdmin {
		t.Fatalf("AdminAddr() = %s after the reload, want %s", got, newAdmin)
	}
	// The connection accepted on the old listener goes on being served.
	for i := 0; i < 2; i++ {
		if code, by, _ := ka.get(t, fmt.Sprint("/Thingworx/again", i)); code != 200 || by != "platform1" {
			t.Fatalf("request %d on the old keep-alive connection after the move: %d from %q", i+2, code, by)
		}
	}
	// The new addresses serve; the old ones refuse new connections.
	if code, by := get(t, l, "/Thingworx/new"); code != 200 || by != "platform1" {
		t.Fatalf("GET on the new address: %d from %q", code, by)
	}
	if code, _, body := opAdmin(t, newAdmin, http.MethodGet, "/healthz", ""); code != 200 {
		t.Fatalf("admin on the new address: %d %s", code, body)
	}
	testkit.Eventually(t, "the old frontend and admin addresses to refuse connections", 5*time.Second, func() bool {
		return opRefused(oldAddr) && opRefused(oldAdmin)
	})
	wantMetrics(t, l, "fairlead_config_reloads_total 1") // on newAdmin, now l.AdminAddr()
	if !strings.Contains(logs.all(), "frontend: now listening on "+newAddr) {
		t.Errorf("no log line about the frontend's new address")
	}
}

func TestAReloadToAnAddressThatCannotBeBoundAppliesNothing(t *testing.T) {
	c := startCluster(t, 2, 2)
	files := platformConfig(c, "", "")
	l, _ := startLB(t, files)
	oldAddr := l.Addr()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	extraPool := fmt.Sprintf("[pools.extra]\nbalance = \"roundrobin\"\nservers = [%q]\n", c.Platforms[1].Addr)
	hasExtra := func() bool { _, ok := findPool(l, "extra"); return ok }

	// A reload to a taken address fails whole: the error names the file and the key, the new pool is
	// not there, the old frontend address serves, and /metrics counts the n-th failure.
	f := func(n int, listen, key string) {
		t.Helper()
		err := tryReload(t, l, opCopy(files, "50-bad.toml", listen+extraPool))
		if err == nil {
			t.Fatalf("a reload to a taken %s address succeeded", key)
		}
		if !strings.Contains(err.Error(), "50-bad.toml") || !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name the file and %s", err, key)
		}
		if hasExtra() {
			t.Errorf("the failed reload's new pool is in /status")
		}
		if got := l.Addr(); got != oldAddr {
			t.Errorf("Addr() = %s after the failed reload, want %s", got, oldAddr)
		}
		if code, by := get(t, l, "/Thingworx/still"); code != 200 || by != "platform1" {
			t.Errorf("the old address after the failed reload: %d from %q", code, by)
		}
		wantMetrics(t, l, fmt.Sprint("fairlead_config_reload_failures_total ", n),
			"fairlead_config_last_reload_successful 0", "fairlead_config_reloads_total 0")
	}
	f(1, fmt.Sprintf("[frontend]\nlisten = %q\n", held.Addr()), "frontend.listen")
	// The frontend's new address is free but the admin's is taken: the frontend does not move either.
	free := testkit.Addr(t)
	f(2, fmt.Sprintf("[frontend]\nlisten = %q\n[admin]\nlisten = %q\n", free, held.Addr()), "admin.listen")
	if !opRefused(free) {
		t.Errorf("the failed reload left a listener on the frontend's new address %s", free)
	}

	// A good reload after them applies.
	reloadWith(t, l, opCopy(files, "50-good.toml", extraPool))
	if !hasExtra() {
		t.Errorf("the good reload's new pool is not in /status")
	}
	wantMetrics(t, l, "fairlead_config_reloads_total 1", "fairlead_config_last_reload_successful 1")
}

// opCloseTimes waits until every tunnel of conns ends and returns when each client saw it end.
func opCloseTimes(t *testing.T, conns []*websocket.Conn) []time.Time {
	t.Helper()
	times := make([]time.Time, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn.SetReadDeadline(time.Now().Add(hang)) //nolint:errcheck
			_, _, errs[i] = conn.ReadMessage()
			times[i] = time.Now()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var ne net.Error
		switch {
		case err == nil:
			t.Fatalf("tunnel %d still delivers messages", i)
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("tunnel %d still open: the read timed out", i)
		}
	}
	return times
}

// timeSpan is the time between the earliest and the latest of times.
func timeSpan(times []time.Time) time.Duration {
	first, last := times[0], times[0]
	for _, at := range times {
		if at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(first)
}

func TestTunnelCloseSpreadSpreadsTheClosesOfADownServersTunnels(t *testing.T) {
	for _, spread := range []string{"600ms", ""} {
		t.Run("tunnel_close_spread="+cmp.Or(spread, "default 0s"), func(t *testing.T) {
			c := startCluster(t, 2, 2)
			extra := ""
			if spread != "" {
				extra = fmt.Sprintf("[pools.cxserver]\ntunnel_close_spread = %q\n", spread)
			}
			l, logs := startLB(t, cxConfig(c, extra))
			cx1, cx2 := c.Connections[0], c.Connections[1]
			var conns []*websocket.Conn
			for _, a := range valuesPlacedOn(t, "spread-", 6, cx1.Addr, cx1.Addr, cx2.Addr) {
				conns = append(conns, dialOn(t, l, a, cx1.Name))
				mustEcho(t, conns[len(conns)-1], "before "+a)
			}
			// The health check fails; the server stays alive, so only fairlead closes the tunnels.
			cx1.SetHealthy(false)
			span := opCloseTimes(t, conns)
			d := timeSpan(span)
			if spread != "" {
				if d < 300*time.Millisecond {
					t.Errorf("with tunnel_close_spread %s the 6 closes took %s from first to last, want at least 300ms", spread, d)
				}
				if !strings.Contains(logs.all(), "closing 6 tunnels to "+cx1.Addr+" over 600ms") {
					t.Errorf("no log line about closing the 6 tunnels over 600ms")
				}
			} else if d >= 250*time.Millisecond {
				t.Errorf("without tunnel_close_spread the 6 closes took %s from first to last, want them at once", d)
			}
			if serverAvailable(l, "cxserver", cx1.Addr) {
				t.Errorf("cx1 is still available")
			}
			testkit.Eventually(t, "cx1's tunnels to end on its side", 5*time.Second, func() bool { return cx1.OpenTunnels() == 0 })
		})
	}
}

func TestCloseDrainsInFlightRequestsRefusesNewConnectionsAndClosesTunnels(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, _ := startLB(t, cxConfig(c, "[frontend]\ndrain_timeout = \"3s\"\n"))
	addr := l.Addr()
	leader := c.Platforms[0]
	tunnel, by := dialAsset(t, l, "at-close")
	mustEcho(t, tunnel, "before close")
	cx := c.Connection(by)
	idle := opDialKeepAlive(t, addr)
	if code, _, _ := idle.get(t, "/Thingworx/idle"); code != 200 {
		t.Fatalf("idle keep-alive connection: %d", code)
	}

	before := leader.Requests()
	slow := inBackground(l, "GET", "/Thingworx/slow?delay=1s", "")
	testkit.Eventually(t, "the slow request to reach the leader", 5*time.Second, func() bool { return leader.Requests() > before })
	arrived := time.Now()

	closed := make(chan time.Time, 1)
	go func() {
		l.Close()
		closed <- time.Now()
	}()
	testkit.Eventually(t, "new connections to be refused once Close began", 2*time.Second, func() bool { return opRefused(addr) })

	if r := awaitReply(t, slow); r.err != nil || r.status != 200 || r.body != "hello from platform1\n" {
		t.Fatalf("the slow request in flight at Close: %s, want 200 from platform1", r)
	}
	var done time.Time
	select {
	case done = <-closed:
	case <-time.After(hang):
		t.Fatal("Close never returned")
	}
	if done.Before(arrived.Add(900 * time.Millisecond)) {
		t.Errorf("Close returned %s after the slow request arrived, before it could have finished", done.Sub(arrived))
	}
	if !opRefused(addr) {
		t.Errorf("the frontend accepts connections after Close")
	}
	mustClose(t, tunnel, "the tunnel open at Close")
	testkit.Eventually(t, "the tunnel to end on the connection server", 5*time.Second, func() bool { return cx.OpenTunnels() == 0 })
	idle.conn.SetReadDeadline(time.Now().Add(hang)) //nolint:errcheck
	if _, err := idle.br.ReadByte(); err == nil {
		t.Errorf("the idle keep-alive connection got a byte after Close")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the idle keep-alive connection is still open after Close")
	}
}

func TestAReloadReadsTheAdminTokenAgainAndABadEditPutBackClearsTheReloadFailedBannerWithTheMetric(t *testing.T) {
	c := startCluster(t, 2, 2)
	tokenFile := opSecret(t, "first-T0ken")
	files := cxConfig(c, fmt.Sprintf("[admin]\ntoken_file = %q\n", tokenFile))
	// One config directory for the whole test, as a running fairlead has (startLB writes a new one).
	dir := testkit.WriteFiles(t, files)
	l, logs := startLBDir(t, dir)
	cx1 := c.Connections[0]
	action := func(token string) int {
		t.Helper()
		code, _ := opAction(t, l, "cxserver", cx1.Addr, "ready", "Bearer "+token)
		return code
	}
	if code := action("first-T0ken"); code != 200 {
		t.Fatalf("the configured token: %d", code)
	}

	// The token is rotated in its file, the config files stay as they are, and fairlead reloads (SIGHUP):
	// "the files are read at start and at every reload".
	if err := os.WriteFile(tokenFile, []byte("second-T0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustReloadDir(t, l, dir)
	if code := action("first-T0ken"); code != 401 {
		t.Errorf("after the token was rotated in its file and fairlead reloaded, the old token still gets %d, want 401", code)
	}
	if code := action("second-T0ken"); code != 200 {
		t.Errorf("after the token was rotated in its file and fairlead reloaded, the new token gets %d, want 200", code)
	}

	// The token moves to another file named in the config: the reload applies it at once.
	newFile := opSecret(t, "third-T0ken")
	if err := os.WriteFile(filepath.Join(dir, "30-extra.toml"), []byte(fmt.Sprintf("[admin]\ntoken_file = %q\n", newFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	mustReloadDir(t, l, dir)
	for _, old := range []string{"first-T0ken", "second-T0ken"} {
		if code := action(old); code != 401 {
			t.Errorf("after a reload to another token file, the old token %s gets %d, want 401", old, code)
		}
	}
	if code := action("third-T0ken"); code != 200 {
		t.Errorf("after a reload to another token file, its token gets %d, want 200", code)
	}

	// A bad edit put back as it was: the reload that follows finds the files unchanged (the running
	// config's), and the page's "Reload failed" banner (/api/status last_reload_failed) goes with the
	// metric back to 1: the three agree.
	const auth = "Bearer third-T0ken"
	path := filepath.Join(dir, "20-override.toml")
	reloads := opMetric(t, l.AdminAddr(), auth, "fairlead_config_reloads_total")
	for _, edit := range []struct {
		text   string
		failed bool
	}{{files["20-override.toml"] + "nonsense = \n", true}, {files["20-override.toml"], false}} {
		if err := os.WriteFile(path, []byte(edit.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if cfg, err := config.Load(dir); err != nil {
			l.ReloadFailed(err) // as fairlead's reload loop does
		} else if err := l.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		f, n := apiStatus(t, l.AdminAddr(), auth).LastReloadFailed, opMetric(t, l.AdminAddr(), auth, "fairlead_config_last_reload_successful")
		if (f != nil) != edit.failed || (n == 0) != edit.failed || n < 0 {
			t.Fatalf("after the edit (failed %v): last_reload_failed %+v, fairlead_config_last_reload_successful %v; want a failure and 0, or none and 1", edit.failed, f, n)
		}
	}
	if n := opMetric(t, l.AdminAddr(), auth, "fairlead_config_reloads_total"); n != reloads {
		t.Errorf("fairlead_config_reloads_total = %v, want %v (nothing new was applied)", n, reloads)
	}
	if !strings.Contains(logs.all(), "config unchanged") {
		t.Errorf("the log does not say the config is unchanged:\n%s", logs.all())
	}
	// The admin listener's refusals (package admin counts them) reach /metrics: one per 401 above.
	wantMetrics(t, l, "fairlead_admin_unauthorized_total 3")
	for _, secret := range []string{"first-T0ken", "second-T0ken", "third-T0ken"} {
		if strings.Contains(logs.all(), secret) {
			t.Errorf("the log shows the token %s", secret)
		}
	}
}
