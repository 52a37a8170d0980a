package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// runFairlead runs fairlead (built once for the test run: testkit.Binary) with args to its end.
func runFairlead(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "cmd/fairlead"), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

func TestShippedConfDPassesCheck(t *testing.T) {
	t.Chdir("../..") // conf.d names its demo files relative to the repository's root, as `make run` runs fairlead
	out, errOut, code := runFairlead(t, "-check", "-config", "conf.d")
	if code != 0 || !strings.Contains(out, "config ok") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func TestVersionPrintsAndExitsZero(t *testing.T) {
	out, _, code := runFairlead(t, "-version")
	if code != 0 || !strings.HasPrefix(out, "fairlead ") {
		t.Fatalf("exit %d, output %q", code, out)
	}
}

// expectConfigError checks that base with bad merged over it (files 10-base.toml and 20-bad.toml)
// makes both `fairlead -check` and a start exit 2 with an error naming 20-bad.toml and want.
func expectConfigError(t *testing.T, base, name, bad, want string) {
	t.Helper()
	dir := testkit.WriteFiles(t, map[string]string{"10-base.toml": base, "20-bad.toml": bad})
	for _, args := range [][]string{{"-check", "-config", dir}, {"-config", dir}} {
		_, errOut, code := runFairlead(t, args...)
		if code != 2 || !strings.Contains(errOut, filepath.Join(dir, "20-bad.toml")+": "+want) {
			t.Errorf("%s (%v): exit %d, stderr %q; want exit 2 naming 20-bad.toml and %q", name, args, code, errOut, want)
		}
	}
}

func TestEveryConfigErrorExits2NamingFileAndKey(t *testing.T) {
	base := "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\n"
	f := func(name, bad string, want string) {
		t.Helper()
		expectConfigError(t, base, name, bad, want)
	}
	f("unknown key", "[frontend]\nlisten_addr = \"127.0.0.1:1\"\n", "frontend.listen_addr: unknown key")
	f("undefined pool", "[[routes]]\npool = \"missing\"\n", "routes.1.pool: pool \"missing\" is not defined")
	f("empty server list", "[pools.cx]\nservers = []\n", "pools.cx.servers: empty server list")
	f("bad duration", "[pools.platform.check]\ntimeout = \"five seconds\"\n", "pools.platform.check.timeout: bad duration")
	f("bad address", "[admin]\nlisten = \"127.0.0.1\"\n", "admin.listen: bad address")
	f("bad host pattern", "[[routes]]\npool = \"platform\"\nhosts = [\"twx.example.com:443\"]\n", `routes.1.hosts.0: bad host pattern "twx.example.com:443": has a port`)
	relay := func(name, hosts string) string {
		return fmt.Sprintf("[relays.%s]\npool = \"cfg\"\npath = \"/relay/{t}\"\nsnapshot = \"/s/{t}\"\nevents = \"/e/{t}\"\nhosts = %s\n", name, hosts)
	}
	f("two relays on one path and host", "[pools.cfg]\nservers = [\"127.0.0.1:9281\"]\n"+relay("prod", `["*.example.com"]`)+relay("test", `["twx.example.com"]`),
		`relays.test.path: "/relay/{t}" on hosts "twx.example.com" overlaps relays.prod.path "/relay/{t}" on hosts "*.example.com" (in `)

	// Every error is listed, not only the first.
	dir := testkit.WriteFiles(t, map[string]string{"a.toml": "[frontend]\nlisen = 1\n[pools.p]\nservers = []\n[[routes]]\npool = \"q\"\n"})
	_, errOut, code := runFairlead(t, "-check", "-config", dir)
	if code != 2 || strings.Count(errOut, "a.toml: ") != 3 {
		t.Fatalf("exit %d, want 3 errors listed:\n%s", code, errOut)
	}
}

// TestAWebSocketRouteAfterTheCatchAllExits2NamingBothRoutes: a route that an earlier one shadows can never
// match (here devices would silently reach the platform instead of a connection server): -check and a
// start exit 2 naming it and the route that takes its requests, each with its file.
func TestAWebSocketRouteAfterTheCatchAllExits2NamingBothRoutes(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{
		"10-platform.toml": "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\n",
		"20-cxserver.toml": "[pools.cxserver]\nbalance = \"sticky\"\nservers = [\"127.0.0.1:9181\"]\n" +
			"[[routes]]\nwebsocket = true\npaths = [\"/Thingworx/WS\"]\npool = \"cxserver\"\n",
	})
	want := filepath.Join(dir, "20-cxserver.toml") + `: routes.1: never matches (paths "/Thingworx/WS", websocket only): ` +
		"routes.0 (every path, in " + filepath.Join(dir, "10-platform.toml") + ") comes before it and matches every request it could"
	for _, args := range [][]string{{"-check", "-config", dir}, {"-config", dir}} {
		_, errOut, code := runFairlead(t, args...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, code, errOut, want)
		}
	}
}

// startProcess runs fairlead on a config written for the cluster and waits until it serves.
func startProcess(t *testing.T, c *sim.Cluster) *proc {
	t.Helper()
	return startProcessWith(t, c, "")
}

// startProcessWith is startProcess with more config in a file that sorts first (its routes come first).
func startProcessWith(t *testing.T, c *sim.Cluster, first string) *proc {
	t.Helper()
	var conf testkit.Config
	conf.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c))
	conf.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials).
		Set("interval", "200ms").Set("fast_interval", "100ms").Set("timeout", "300ms")
	conf.Array("routes").Set("pool", "platform")
	return &proc{testkit.StartFairlead(t, map[string]string{"00-first.toml": first, "fairlead.toml": conf.String()})}
}

func TestSIGTERMStopsCleanly(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProcess(t, c)
	resp, err := http.Get("http://" + p.Addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v %v", resp, err)
	}
	resp.Body.Close()
	p.Stop(15 * time.Second)
}

// TestLargeBodiesStreamWithBoundedRSS sends a 256 MiB upload and a 256 MiB download through a real
// fairlead process and checks that its peak resident memory stays far below the body size.
func TestLargeBodiesStreamWithBoundedRSS(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProcess(t, c)
	addr := p.Addr
	const size = 256 << 20

	req, _ := http.NewRequest("PUT", "http://"+addr+"/Thingworx/FileRepositories/big", io.LimitReader(pattern{}, size))
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	if got := resp.Header.Get("X-Body-Bytes"); resp.StatusCode != 200 || got != strconv.Itoa(size) {
		t.Fatalf("upload: %d, X-Body-Bytes %q", resp.StatusCode, got)
	}

	resp, err = http.Get("http://" + addr + "/big?bytes=" + strconv.Itoa(size))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}

	hwm := peakRSS(t, p.Cmd.Process.Pid)
	t.Logf("fairlead peak RSS after 256 MiB up and down: %d KiB", hwm>>10)
	if hwm > 96<<20 {
		t.Fatalf("peak RSS %d MiB: bodies were held in memory", hwm>>20)
	}
}

type pattern struct{}

func (pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return len(b), nil
}

// peakRSS reads VmHWM (peak resident set) of a process, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestTwoProcessesWithTheSameConfigPlaceAssetsIdentically starts two fairlead processes with one config
// (apart from their listen addresses) and checks that 1,000 assets land on the same connection server
// through either: rendezvous hashing needs no shared state.
func TestTwoProcessesWithTheSameConfigPlaceAssetsIdentically(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 3})
	var addrs [2]string
	for k := range addrs {
		addrs[k] = startProcessWith(t, c, cxPool(c)).Addr
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	counts := map[string]int{}
	for i := 0; i < 1000; i++ {
		asset := fmt.Sprintf("asset-%04d", i)
		var by [2]string
		for k, addr := range addrs {
			conn, resp, err := d.Dial("ws://"+addr+"/Thingworx/WS", http.Header{"X-Asset-Id": {asset}})
			if err != nil {
				t.Fatalf("%s via %s: %v", asset, addr, err)
			}
			conn.Close()
			by[k] = resp.Header.Get("X-Served-By")
		}
		if by[0] != by[1] || by[0] == "" {
			t.Fatalf("%s: placed on %q by one fairlead and %q by the other", asset, by[0], by[1])
		}
		counts[by[0]]++
	}
	for _, s := range c.Connections {
		if counts[s.Name] < 200 {
			t.Errorf("placement is lopsided: %v", counts)
		}
	}
}

func cxPool(c *sim.Cluster) string {
	var conf testkit.Config
	conf.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c))
	conf.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id", "source"})
	conf.Table("pools.cxserver.check").Set("path", "/health").Set("interval", "200ms")
	conf.Array("routes").Set("websocket", true).Set("paths", []string{"/Thingworx/WS"}).Set("pool", "cxserver")
	return conf.String()
}

// proc is a fairlead process started on a config directory of its own (testkit.Fairlead), with what
// these tests read of it.
type proc struct{ *testkit.Fairlead }

// startProc runs fairlead on a config directory holding 10-base.toml (a leader pool over the cluster's
// platforms) and 20-extra.toml (extra), and waits until it serves.
func startProc(t *testing.T, c *sim.Cluster, extra string) *proc {
	t.Helper()
	return startProcFiles(t, c, map[string]string{"20-extra.toml": extra})
}

// baseConfig is a config listening on listen and admin with a leader pool over c's two platforms and
// one catch-all route to it.
func baseConfig(listen, admin string, c *sim.Cluster) string {
	var conf testkit.Config
	conf.Table("frontend").Set("listen", listen)
	conf.Table("admin").Set("listen", admin)
	conf.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c)[:2])
	conf.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials).Set("interval", "200ms")
	conf.Array("routes").Set("pool", "platform")
	return conf.String()
}

// startProcFiles is startProc with the config files files beside 10-base.toml: a file whose name sorts
// before it has its routes tried first, one whose name sorts after it merges over its tables.
func startProcFiles(t *testing.T, c *sim.Cluster, files map[string]string) *proc {
	t.Helper()
	addr, admin := testkit.Addr(t), testkit.Addr(t)
	files["10-base.toml"] = baseConfig(addr, admin, c)
	p := &proc{testkit.RunFairlead(t, testkit.WriteFiles(t, files), addr, admin)}
	p.WaitServing()
	return p
}

func TestSIGHUPReloadsAndABadConfigKeepsTheRunningOne(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProc(t, c, "")
	cmd, addr, metric, waitUntil, stderr := p.Cmd, p.Addr, p.Metric, p.Eventually, p.Log
	dir := p.Dir

	bad := filepath.Join(dir, "30-bad.toml")
	if err := os.WriteFile(bad, []byte("[frontend]\nlisen = \"x\"\n[pools.platform]\nqueue_timeout = \"soon\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP) //nolint:errcheck
	waitUntil("the failed reload to show", func() bool { return metric("fairlead_config_last_reload_successful") == "0" })
	for _, want := range []string{bad + ": frontend.lisen: unknown key", bad + ": pools.platform.queue_timeout: bad duration"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log does not name %q:\n%s", want, stderr.String())
		}
	}
	if resp, err := http.Get("http://" + addr + "/"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a bad reload: %v %v", resp, err)
	}

	// Fixed: the next SIGHUP applies it.
	if err := os.WriteFile(bad, []byte("[pools.platform]\nqueue_timeout = \"3s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP) //nolint:errcheck
	waitUntil("the reload to apply", func() bool {
		return metric("fairlead_config_last_reload_successful") == "1" && metric("fairlead_config_reloads_total") == "1"
	})
	if resp, err := http.Get("http://" + addr + "/"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the reload: %v %v", resp, err)
	}
}

// TestAConfigFileEditIsPickedUpWithoutASignal: a change to a file of the config directory reloads
// (debounced), a bad edit keeps the running config and says why with the file and key, and fixing it
// applies it — all without SIGHUP.
func TestAConfigFileEditIsPickedUpWithoutASignal(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProc(t, c, "")
	p.Write("30-more.toml", "[pools.platform]\nqueue_timeout = \"3s\"\n")
	p.Eventually("the edit to be applied", func() bool { return p.Metric("fairlead_config_reloads_total") == "1" })

	bad := p.Write("30-more.toml", "[pools.platform]\nqueue_timeout = \"soon\"\n")
	p.Eventually("the bad edit to be refused", func() bool { return p.Metric("fairlead_config_last_reload_successful") == "0" })
	if want := bad + ": pools.platform.queue_timeout: bad duration"; !strings.Contains(p.Log.String(), want) {
		t.Errorf("log does not name %q:\n%s", want, p.Log.String())
	}
	if p.Metric(`fairlead_events_total{kind="reload_failed"}`) != "1" {
		t.Errorf("the failed reload is not an event: reload_failed = %q", p.Metric(`fairlead_events_total{kind="reload_failed"}`))
	}
	for i := 0; i < 5; i++ {
		resp, err := http.Get("http://" + p.Addr + "/")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("serving after a bad edit: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	p.Write("30-more.toml", "[pools.platform]\nqueue_timeout = \"4s\"\n")
	p.Eventually("the fixed edit to be applied", func() bool {
		return p.Metric("fairlead_config_last_reload_successful") == "1" && p.Metric("fairlead_config_reloads_total") == "2"
	})
}

// TestABadEditPutBackAsItWasMakesTheLastReloadSuccessfulAgain: after a bad edit (gauge 0) is undone, the
// files are those of the running config again; the reload finds nothing to apply, and the last reload
// attempt succeeded (gauge 1), or the alert on it would fire until the next real change. The failed
// reload is logged once, on one WARN line naming the file and the key.
func TestABadEditPutBackAsItWasMakesTheLastReloadSuccessfulAgain(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProc(t, c, "")
	const good = "[pools.platform]\nqueue_timeout = \"3s\"\n"
	// The watch is set up a moment after fairlead serves: an edit made before is not seen, so the first
	// one is made again (well apart from the 300 ms debounce) until it applies.
	var wrote time.Time
	p.Eventually("the edit to be applied", func() bool {
		if time.Since(wrote) > time.Second {
			p.Write("30-more.toml", good)
			wrote = time.Now()
		}
		return p.Metric("fairlead_config_reloads_total") == "1"
	})

	bad := p.Write("30-more.toml", "[pools.platform]\nqueue_timeout = \"soon\"\n")
	p.Eventually("the bad edit to be refused", func() bool { return p.Metric("fairlead_config_last_reload_successful") == "0" })
	p.Write("30-more.toml", good) // put back as it was: the running config's bytes
	p.Eventually("the last reload to be successful again", func() bool { return p.Metric("fairlead_config_last_reload_successful") == "1" })
	p.Eventually("the reload to find the files unchanged", func() bool { return strings.Contains(p.Log.String(), "config unchanged") })
	if got := p.Metric("fairlead_config_reloads_total"); got != "1" {
		t.Errorf("reloads applied = %s, want 1: the files put back are the running config", got)
	}
	if got := p.Metric("fairlead_config_reload_failures_total"); got != "1" {
		t.Errorf("reload failures = %s, want 1", got)
	}

	// Removing the file the first edit added is a change back to the start's config: applied.
	if err := os.Remove(filepath.Join(p.Dir, "30-more.toml")); err != nil {
		t.Fatal(err)
	}
	p.Eventually("the removal to be applied", func() bool { return p.Metric("fairlead_config_reloads_total") == "2" })

	logged := linesWith(p.Log.String(), bad+": pools.platform.queue_timeout: bad duration")
	if len(logged) != 1 || !strings.Contains(logged[0], "level=WARN") || !strings.Contains(logged[0], "kind=reload_failed") {
		t.Errorf("the failed reload is logged on %d lines, want one WARN reload_failed line:\n%s", len(logged), strings.Join(logged, "\n"))
	}
}

// linesWith returns the lines of log that contain s.
func linesWith(log, s string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestOutagesAreLoggedAsErrors: a leader pool without a leader and a pool with no server available at
// all are ERROR lines (once per outage, not per probe), a server down a WARN line, and the end of an
// outage an INFO line.
func TestOutagesAreLoggedAsErrors(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	var cx testkit.Config
	cx.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c)[:2])
	cx.Table("pools.cxserver.check").Set("path", "/health").Set("interval", 100*time.Millisecond).Set("fall", 2)
	p := startProc(t, c, cx.String())
	logged := func(level, msg, pool string) []string {
		var out []string
		for _, line := range linesWith(p.Log.String(), "msg=\""+msg) {
			if strings.Contains(line, "level="+level+" ") && strings.Contains(line, " pool="+pool) {
				out = append(out, line)
			}
		}
		return out
	}

	// The leader stops answering 200 and no other server does: no leader.
	c.Platforms[0].SetLeaderCheckStatus(503)
	p.Eventually("the leader to be lost", func() bool { return len(logged("ERROR", "leader is now none", "platform")) == 1 })
	p.Eventually("the platform pool down line", func() bool {
		return len(logged("ERROR", "pool down: no server is available", "platform")) == 1
	})
	// Every server of the sticky pool fails its checks.
	for _, s := range c.Connections {
		s.SetHealthy(false)
	}
	p.Eventually("the cxserver pool down line", func() bool {
		return len(logged("ERROR", "pool down: no server is available", "cxserver")) == 1
	})
	for _, s := range c.Connections {
		p.Eventually("the server down line of "+s.Name, func() bool { return len(logged("WARN", s.Addr+": server down", "cxserver")) == 1 })
	}
	// Probes go on failing (every 100 ms): the outage is not logged again.
	probes := func() int {
		n, _ := strconv.Atoi(p.Metric(`fairlead_events_total{kind="check_answered"}`))
		return n
	}
	before := probes()
	p.Eventually("more failing probes", func() bool { return probes() >= before+6 })
	if n := len(logged("ERROR", "pool down: no server is available", "cxserver")); n != 1 {
		t.Errorf("the outage is logged %d times, want once", n)
	}

	c.Platforms[0].SetLeaderCheckStatus(0)
	c.Connections[1].SetHealthy(true)
	for _, pool := range []string{"platform", "cxserver"} {
		p.Eventually("the "+pool+" pool up line", func() bool {
			return len(logged("INFO", "pool up: a server is available again", pool)) == 1
		})
	}
	if got := p.Metric(`fairlead_events_total{kind="pool_down"}`); got != "2" {
		t.Errorf("pool_down events = %s, want 2", got)
	}
}

// TestAListenAddressInUseIsAnErrorAndExits1: a fatal start error is an ERROR line, and the exit is 1.
func TestAListenAddressInUseIsAnErrorAndExits1(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := testkit.WriteFiles(t, map[string]string{"fairlead.toml": baseConfig(ln.Addr().String(), testkit.Addr(t), c)})
	_, errOut, code := runFairlead(t, "-config", dir)
	lines := linesWith(errOut, "address already in use")
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "level=ERROR") {
		t.Fatalf("exit %d, want 1 with one ERROR line naming the address in use; stderr:\n%s", code, errOut)
	}
}

// TestSIGTERMCompletesSlowInFlightRequests: at SIGTERM fairlead stops accepting but lets a request in
// flight finish (within drain_timeout), then exits 0.
func TestSIGTERMCompletesSlowInFlightRequests(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProc(t, c, "[frontend]\ndrain_timeout = \"5s\"\n")
	leader := c.Platforms[0]
	before := leader.Requests()
	type result struct {
		status int
		body   string
		err    error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + p.Addr + "/slow?delay=1500ms")
		if err != nil {
			slow <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- result{status: resp.StatusCode, body: string(b)}
	}()
	p.Eventually("the slow request to reach the leader", func() bool { return leader.Requests() > before })
	p.Cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	// No new connection is accepted once draining.
	p.Eventually("the listener to close", func() bool {
		conn, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	r := <-slow
	if r.err != nil || r.status != 200 || !strings.Contains(r.body, "hello from platform1") {
		t.Fatalf("the slow request in flight at SIGTERM: %d %q %v, want 200 from platform1", r.status, r.body, r.err)
	}
	p.WaitExit(15 * time.Second)
}

// TestAKeysFileEditIsPickedUpWithoutASignal: the files a config reads besides its *.toml files (here a
// [routes.auth] keys file in another directory) are watched too: editing one reloads.
func TestAKeysFileEditIsPickedUpWithoutASignal(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	keys := filepath.Join(t.TempDir(), "client-keys")
	if err := os.WriteFile(keys, []byte("old-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, c, "")
	// Before the catch-all route of 10-base.toml.
	p.Write("05-auth.toml", fmt.Sprintf("[[routes]]\npool = \"platform\"\npaths = [\"/Thingworx/Things\"]\n[routes.auth]\nkeys_file = %q\nheader = \"appKey\"\n", keys))
	p.Eventually("the auth route to be applied", func() bool { return p.Metric("fairlead_config_reloads_total") == "1" })
	status := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+p.Addr+"/Thingworx/Things/x", nil)
		req.Header.Set("appKey", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("old-key"); got != 200 {
		t.Fatalf("the old key before the edit: %d, want 200", got)
	}
	if got := status("new-key"); got != 401 {
		t.Fatalf("the new key before the edit: %d, want 401", got)
	}
	// The watch follows the new config's secret files once the reload's event reached it, a moment
	// after the reload counter moved: an edit made before that is not seen, so the edit is made again
	// (well apart from the 300 ms debounce) until it applies.
	var wrote time.Time
	p.Eventually("the keys file edit to be applied", func() bool {
		if time.Since(wrote) > time.Second {
			if err := os.WriteFile(keys, []byte("new-key\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			wrote = time.Now()
		}
		return status("new-key") == 200
	})
	if got := status("old-key"); got != 401 {
		t.Errorf("the old key after the edit: %d, want 401", got)
	}
}
