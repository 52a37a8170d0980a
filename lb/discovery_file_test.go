package lb

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
	"github.com/fasthttp/websocket"
)

// The file provider: edits of a real file (in place, renamed over by an editor, a Kubernetes ConfigMap's
// symlink swap) followed through fsnotify, TOML and JSON forms, invalid contents and a missing file
// keeping the last list.

// fileFollow is how long an edit may take to be in force: the debounce, and slack for a loaded machine.
const fileFollow = discovery.FileDebounce + 600*time.Millisecond

// cxFilePool is a sticky connection-server pool "cxserver" behind the WebSocket route, checked on
// /health every 100 ms, whose servers come from file (no seed).
func cxFilePool(file string) map[string]string {
	var conf testkit.Config
	listenAnywhere(&conf)
	conf.Table("pools.cxserver").Set("balance", "sticky").Set("queue_timeout", time.Second)
	conf.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id"})
	conf.Table("pools.cxserver.check").Set("path", "/health").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 50*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("rise", 1)
	conf.Table("pools.cxserver.discovery").Set("provider", "file").Set("file", file)
	conf.Array("routes").Set("websocket", true).Set("paths", []string{"/Thingworx/WS"}).Set("pool", "cxserver")
	return map[string]string{"10-cx.toml": conf.String()}
}

// discoveredIn returns pool's discovery status.
func discoveredIn(t *testing.T, l *LB, pool string) admin.DiscoveryStatus {
	t.Helper()
	for _, p := range l.Status().Pools {
		if p.Name == pool && p.Discovery != nil {
			return *p.Discovery
		}
	}
	t.Fatalf("pool %s has no discovery status", pool)
	return admin.DiscoveryStatus{}
}

// fileFollows waits until pool's discovered list is addrs, and fails if that took longer than fileFollow.
func fileFollows(t *testing.T, l *LB, pool, what string, addrs ...string) {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, what, 10*time.Second, func() bool { return listIs(discoveredIn(t, l, pool), addrs...) })
	if took := time.Since(start); took > fileFollow {
		t.Fatalf("%s took %s, want at most %s", what, took.Round(time.Millisecond), fileFollow)
	} else {
		t.Logf("%s: %s", what, took.Round(time.Millisecond))
	}
}

// logLine returns the first log line containing every part, or "".
func logLine(logs *logSink, parts ...string) string {
	for _, line := range strings.Split(logs.all(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line
		}
	}
	return ""
}

func TestFileDiscoveryFollowsEditsAddedServersTakeTunnelsRemovedOnesDrainAndInvalidEditsAreIgnored(t *testing.T) {
	c := startCluster(t, 1, 3)
	cx1, cx2, cx3 := c.Connections[0], c.Connections[1], c.Connections[2]
	file := filepath.Join(t.TempDir(), "cx-servers.toml")
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers(cx1.Addr))
	l, logs := startLB(t, cxFilePool(file))
	fileFollows(t, l, "cxserver", "the file read at start", cx1.Addr)
	var on1 []*websocket.Conn
	for i := range 3 {
		testkit.Eventually(t, "cx1 to take tunnels", 5*time.Second, func() bool { return serverAvailable(l, "cxserver", cx1.Addr) })
		conn, by := dialAsset(t, l, fmt.Sprint("asset-", i))
		if by != cx1.Name {
			t.Fatalf("tunnel %d landed on %s, want cx1", i, by)
		}
		on1 = append(on1, conn)
	}

	// An edit in place adds cx2: its keys go there once it passed a probe.
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers(cx1.Addr, cx2.Addr))
	fileFollows(t, l, "cxserver", "an added server", cx1.Addr, cx2.Addr)
	toCX2 := valuesPlacedOn(t, "new-", 3, cx2.Addr, cx1.Addr, cx2.Addr)
	testkit.Eventually(t, "cx2 to pass a probe", 5*time.Second, func() bool { return serverAvailable(l, "cxserver", cx2.Addr) })
	var on2 []*websocket.Conn
	for _, a := range toCX2 {
		conn, by := dialAsset(t, l, a)
		if by != cx2.Name {
			t.Fatalf("%s landed on %s, want cx2 (the added server)", a, by)
		}
		on2 = append(on2, conn)
	}

	// An editor's save (a temporary file renamed over the file) replaces cx1 by cx3: cx1 drains, its
	// tunnels close; cx2's stay.
	discoverytest.RenameOver(t, file, discoverytest.TOMLServers(cx2.Addr, cx3.Addr))
	fileFollows(t, l, "cxserver", "a rename over the file", cx2.Addr, cx3.Addr)
	for _, conn := range on1 {
		mustClose(t, conn, "tunnel to the removed server")
	}
	testkit.Eventually(t, "cx1's tunnels to close on its side", 5*time.Second, func() bool { return cx1.OpenTunnels() == 0 })
	for i, conn := range on2 {
		mustEcho(t, conn, fmt.Sprint("cx2 tunnel ", i))
	}
	if _, listed := serverStatus(l, "cxserver", cx1.Addr); listed {
		t.Fatal("/status still lists the removed server")
	}

	// Invalid edits are ignored with a logged error naming the file; the list and the tunnels stay.
	for i, bad := range []struct{ body, why string }{
		{"servers = [\"" + cx2.Addr + "\", \n", "not a TOML server list"},
		{discoverytest.TOMLServers(cx2.Addr, "cx3-without-port"), `servers[1]: bad address "cx3-without-port"`},
		{"server = [\"" + cx2.Addr + "\"]\n", "unknown key server"},
		{"", "no servers key"},
	} {
		discoverytest.WriteFile(t, file, bad.body)
		testkit.Eventually(t, "the error of invalid edit "+fmt.Sprint(i), 5*time.Second, func() bool { return discoveredIn(t, l, "cxserver").Errors == uint64(i+1) })
		if line := logLine(logs, "discovery: pool cxserver: file: "+file+": ", bad.why, "keeping the last list"); line == "" {
			t.Errorf("invalid edit %d: no log line naming %s and %q:\n%s", i, file, bad.why, logs.all())
		}
		if ds := discoveredIn(t, l, "cxserver"); !listIs(ds, cx2.Addr, cx3.Addr) || !strings.Contains(ds.LastError, file) {
			t.Fatalf("after invalid edit %d: %+v", i, ds)
		}
	}
	for i, conn := range on2 {
		mustEcho(t, conn, fmt.Sprint("cx2 tunnel after invalid edits ", i))
	}
	conn, by := dialAsset(t, l, toCX2[0])
	if by != cx2.Name {
		t.Fatalf("after invalid edits %s landed on %s, want cx2", toCX2[0], by)
	}
	conn.Close()

	// Fixed: followed again, the error cleared.
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers(cx3.Addr))
	fileFollows(t, l, "cxserver", "a valid edit after invalid ones", cx3.Addr)
	if ds := discoveredIn(t, l, "cxserver"); ds.LastError != "" || ds.Changes != 4 {
		t.Fatalf("after the fix: %+v, want 4 changes and no error", ds)
	}
}

func TestFileDiscoveryReadsJSONObjectsAndArraysAndTOML(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	dir := t.TempDir()
	file := filepath.Join(dir, "servers.json")
	discoverytest.WriteFile(t, file, fmt.Sprintf(`{"servers": [%q]}`, p1.Addr))
	l, logs := startLB(t, discoveredPool(nil, fmt.Sprintf("provider = \"file\"\nfile = %q\n", file)))
	fileFollows(t, l, "rr", "a JSON object", p1.Addr)
	testkit.Eventually(t, "platform1 to serve", 5*time.Second, func() bool { return servedBy(t, l, 2)[p1.Name] == 2 })

	discoverytest.RenameOver(t, file, fmt.Sprintf("[\n  %q,\n  %q\n]\n", p1.Addr, p2.Addr))
	fileFollows(t, l, "rr", "a JSON array", p1.Addr, p2.Addr)
	testkit.Eventually(t, "both to serve", 5*time.Second, func() bool {
		got := servedBy(t, l, 4)
		return got[p1.Name] == 2 && got[p2.Name] == 2
	})

	discoverytest.WriteFile(t, file, fmt.Sprintf(`{"servers": [%q], "weights": [1]}`, p3.Addr))
	testkit.Eventually(t, "the error", 5*time.Second, func() bool { return discoveredIn(t, l, "rr").Errors == 1 })
	if logLine(logs, file+": not a JSON server list: json: unknown field \"weights\"") == "" {
		t.Errorf("no log line naming the file and the field:\n%s", logs.all())
	}
	if got := servedBy(t, l, 4); got[p1.Name] != 2 || got[p2.Name] != 2 {
		t.Fatalf("after an invalid JSON edit: %v", got)
	}

	// The same provider on a TOML file (a reload changing the [discovery] table starts a new provider).
	toml := filepath.Join(dir, "servers.toml")
	discoverytest.WriteFile(t, toml, discoverytest.TOMLServers(p3.Addr))
	reloadWith(t, l, discoveredPool(nil, fmt.Sprintf("provider = \"file\"\nfile = %q\n", toml)))
	fileFollows(t, l, "rr", "a TOML file", p3.Addr)
	testkit.Eventually(t, "platform3 to serve alone", 5*time.Second, func() bool { return servedBy(t, l, 3)[p3.Name] == 3 })
}

func TestFileDiscoveryKeepsTheSeedWhileTheFileIsMissingAndTheLastListWhenItIsDeleted(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	file := filepath.Join(t.TempDir(), "cx-servers.toml")
	l, logs := startLB(t, discoveredPool([]string{p1.Addr}, fmt.Sprintf("provider = \"file\"\nfile = %q\n", file)))

	testkit.Eventually(t, "the missing file's error", 5*time.Second, func() bool { return discoveredIn(t, l, "rr").Errors == 1 })
	if got := servedBy(t, l, 4); got[p1.Name] != 4 {
		t.Fatalf("with the file missing the seed serves: %v", got)
	}
	ds := discoveredIn(t, l, "rr")
	if ds.Servers != nil || !strings.Contains(ds.LastError, file) || !strings.Contains(ds.LastError, "no such file") {
		t.Fatalf("status with the file missing: %+v", ds)
	}
	if logLine(logs, "discovery: pool rr: file: open "+file+": no such file or directory (keeping the last list)") == "" {
		t.Errorf("no log line naming the missing file:\n%s", logs.all())
	}

	// Written later: followed (platform1, the seed, drains).
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers(p2.Addr))
	fileFollows(t, l, "rr", "the file once written", p2.Addr)
	testkit.Eventually(t, "platform2 to serve alone", 5*time.Second, func() bool { return servedBy(t, l, 4)[p2.Name] == 4 })

	// Deleted: an error, the last list stays (only `servers = []` empties a pool).
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the deleted file's error", 5*time.Second, func() bool { return discoveredIn(t, l, "rr").Errors == 2 })
	if got := servedBy(t, l, 4); got[p2.Name] != 4 {
		t.Fatalf("after the file was deleted: %v", got)
	}
	if ds := discoveredIn(t, l, "rr"); !listIs(ds, p2.Addr) {
		t.Fatalf("after the file was deleted: %+v", ds)
	}
}

func TestFileDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	base := discoveredPool([]string{"127.0.0.1:1"}, `provider = "file"
file = "/etc/fairlead/cx-servers.toml"`)
	f := discoveryConfigError(t, base)
	f(`file = ""`, "20-discovery.toml: pools.rr.discovery.file: required")
	f(`file = "  "`, "20-discovery.toml: pools.rr.discovery.file: required")
	f(`name = "cx.fairlead.test"`, "20-discovery.toml: pools.rr.discovery.name: not a key of the file provider")
	f(`resolve_interval = "10s"`, "pools.rr.discovery.resolve_interval: not a key of the file provider")
	f(`zookeeper = ["127.0.0.1:2181"]`, "pools.rr.discovery.zookeeper: not a key of the file provider")
	if _, err := config.Load(testkit.WriteFiles(t, discoveredPool(nil, `provider = "file"`))); err == nil ||
		!strings.Contains(err.Error(), "10-rr.toml: pools.rr.discovery.file: required") {
		t.Errorf("missing file: %v", err)
	}
	// The file need not exist when the config is loaded.
	if _, err := config.Load(testkit.WriteFiles(t, base)); err != nil {
		t.Fatalf("a file that does not exist yet: %v", err)
	}
}
