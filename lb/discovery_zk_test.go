package lb

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
	"github.com/go-zookeeper/zk"
)

// The zookeeper discovery provider (issue #12) against a real ZooKeeper: Debian's zookeeper package,
// one standalone server per test on a free loopback port with a data dir of its own; the simulator's
// platforms are the servers registered in it.

// zkJar is Debian's ZooKeeper (its manifest names the jars it needs).
const zkJar = "/usr/share/java/zookeeper.jar"

// zkServer is a ZooKeeper server of the test, killed at its end.
type zkServer struct {
	t    *testing.T
	java string
	addr string
	dir  string // zoo.cfg, data/ and zookeeper.log
	cmd  *exec.Cmd
	done chan struct{}
}

// startZK starts a ZooKeeper server, or skips the test when ZooKeeper is not installed. Its tick is
// 100ms, so that sessions of a second or two are allowed and expire on time.
func startZK(t *testing.T) *zkServer {
	t.Helper()
	java, err := exec.LookPath("java")
	if _, serr := os.Stat(zkJar); serr != nil || err != nil {
		t.Skip("ZooKeeper is not installed (Debian: apt-get install zookeeper, as .ci/run does)")
	}
	z := &zkServer{t: t, java: java, addr: testkit.Addr(t), dir: t.TempDir()}
	_, port, _ := net.SplitHostPort(z.addr)
	cfg := fmt.Sprintf(`tickTime=100
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=%s
clientPort=%s
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok
preAllocSize=1024
`, filepath.Join(z.dir, "data"), port)
	if err := os.WriteFile(filepath.Join(z.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	z.start()
	t.Cleanup(z.stop)
	return z
}

// start runs the server (again: same port, same data) and waits until it answers "ruok".
func (z *zkServer) start() {
	t := z.t
	t.Helper()
	cp := zkJar
	if _, err := os.Stat("/usr/share/java/slf4j-nop.jar"); err == nil {
		cp += ":/usr/share/java/slf4j-nop.jar" // no "no SLF4J binding" warning
	}
	out, err := os.OpenFile(filepath.Join(z.dir, "zookeeper.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(z.java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.forceSync=no",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(z.dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = testkit.DieWithTest() // never outlives the test binary (on Linux)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck
	z.cmd, z.done = cmd, done
	for deadline := time.Now().Add(30 * time.Second); !z.ruok(); {
		select {
		case <-done:
			t.Fatalf("ZooKeeper exited:\n%s", z.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper did not answer within 30s:\n%s", z.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server (as a crash would).
func (z *zkServer) stop() {
	if z.cmd != nil {
		z.cmd.Process.Kill() //nolint:errcheck
		<-z.done
		z.cmd = nil
	}
}

func (z *zkServer) ruok() bool {
	c, err := net.DialTimeout("tcp", z.addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return string(b) == "imok"
}

func (z *zkServer) log() string {
	b, _ := os.ReadFile(filepath.Join(z.dir, "zookeeper.log"))
	return string(b)
}

// zkQuiet drops the test client's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkClient connects the test to addr (a session of 30s) and waits for its session.
func zkClient(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, 30*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-timeout:
			t.Fatal("the test's ZooKeeper client got no session within 10s")
		}
	}
}

// zkPut creates path (and its missing parents, with the same ACL; default: open to all) or sets its data.
func zkPut(t *testing.T, conn *zk.Conn, path, data string, acl ...zk.ACL) {
	t.Helper()
	if len(acl) == 0 {
		acl = zk.WorldACL(zk.PermAll)
	}
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			if _, err := conn.Create(path[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatalf("creating %s: %v", path[:i], err)
			}
		}
	}
	_, err := conn.Create(path, []byte(data), 0, acl)
	if errors.Is(err, zk.ErrNodeExists) {
		_, err = conn.Set(path, []byte(data), -1)
	}
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

func zkDelete(t *testing.T, conn *zk.Conn, path string) {
	t.Helper()
	if err := conn.Delete(path, -1); err != nil {
		t.Fatalf("deleting %s: %v", path, err)
	}
}

func zkHostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(port, &n) //nolint:errcheck
	return host, n
}

// zkConfig is a roundrobin pool "platform" without seed, checked on "/" (every platform answers it),
// with the zookeeper provider on zkAddr and path; lines are more keys of the [discovery] table
// (session_timeout defaults to "2s" here).
func zkConfig(zkAddr, path string, lines ...string) map[string]string {
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "session_timeout") }) {
		lines = append(lines, `session_timeout = "2s"`)
	}
	lines = append([]string{"provider = \"zookeeper\"", "zookeeper = " + testkit.Strings(zkAddr), "path = " + testkit.Quote(path)}, lines...)
	return map[string]string{"10-zk.toml": discoveredPoolNamed("platform", []string{}, strings.Join(lines, "\n"))}
}

// zkServed sends n requests through fairlead and counts the platforms that answered (the status for
// a failure).
func zkServed(t *testing.T, l *LB, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		code, by := get(t, l, "/Thingworx/Things/x")
		if code != 200 {
			by = fmt.Sprint(code)
		}
		got[by]++
	}
	return got
}

// zkDiscovered returns what /status says the provider of pool platform found.
func zkDiscovered(l *LB) admin.DiscoveryStatus {
	for _, p := range l.Status().Pools {
		if p.Name == "platform" && p.Discovery != nil {
			return *p.Discovery
		}
	}
	return admin.DiscoveryStatus{}
}

// zkPoolServers returns the addresses of pool platform's servers in /status that are not being removed.
func zkPoolServers(l *LB) []string {
	var addrs []string
	for _, p := range l.Status().Pools {
		if p.Name == "platform" {
			for _, s := range p.Servers {
				if s.State != "removed" {
					addrs = append(addrs, s.Addr)
				}
			}
		}
	}
	slices.Sort(addrs)
	return addrs
}

func zkSorted(s ...string) []string { slices.Sort(s); return s }

func TestZooKeeperDiscoveryServesPlainAndCuratorInstancesWithoutARestart(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr) // a plain host:port
	l, logs := startLB(t, zkConfig(zks.addr, "/services/thingworx", `session_timeout = "1s"`))

	testkit.Eventually(t, "platform1, registered as host:port, to serve", 5*time.Second, func() bool {
		return zkServed(t, l, 4)[p1.Name] == 4
	})
	// A Curator service instance, and a child that is no instance: platform2 joins, the other child is
	// skipped (logged once, however often the path is read again).
	host, port := zkHostPort(t, p2.Addr)
	zkPut(t, zc, "/services/thingworx/1c3a9d6e-0b7f-4f61-9e8a-2f4c7d2b9a10", discoverytest.CuratorInstance("1c3a9d6e", host, port, 0))
	zkPut(t, zc, "/services/thingworx/junk", "not an address")
	testkit.Eventually(t, "platform2, registered by Curator, to serve too", 5*time.Second, func() bool {
		got := zkServed(t, l, 6)
		return got[p1.Name] > 0 && got[p2.Name] > 0 && got[p1.Name]+got[p2.Name] == 6
	})
	if ds := zkDiscovered(l); !slices.Equal(ds.Servers, zkSorted(p1.Addr, p2.Addr)) || ds.Provider != "zookeeper" {
		t.Fatalf("discovery status %+v", ds)
	}
	for range 2 { // two safety re-lists (every session_timeout, 1s)
		last := zkDiscovered(l).LastSuccess
		testkit.Eventually(t, "a safety re-list", 3*time.Second, func() bool { return zkDiscovered(l).LastSuccess.After(last) })
	}
	if n := strings.Count(logs.all(), `zookeeper: skipping /services/thingworx/junk: bad address "not an address"`); n != 1 {
		t.Fatalf("the junk child was logged %d times, want once:\n%s", n, logs.all())
	}
	if ds := zkDiscovered(l); ds.Changes != 2 {
		t.Fatalf("re-lists of an unchanged path changed something: %+v", ds)
	}
}

func TestZooKeeperDiscoveryDrainsTheServerOfADeletedZNode(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/twx/platform/a", p1.Addr)
	zkPut(t, zc, "/twx/platform/b", p2.Addr)
	l, _ := startLB(t, zkConfig(zks.addr, "/twx/platform"))
	events := recordEvents(t, l)
	testkit.Eventually(t, "both platforms to serve", 5*time.Second, func() bool {
		got := zkServed(t, l, 6)
		return got[p1.Name] > 0 && got[p2.Name] > 0
	})

	start := time.Now()
	zkDelete(t, zc, "/twx/platform/a")
	testkit.Eventually(t, "a server_removed event of platform1", 5*time.Second, func() bool {
		return events.has(func(e event.Event) bool {
			return e.Kind == event.ServerRemoved && e.Pool == "platform" && e.Server == p1.Addr
		})
	})
	t.Logf("platform1 removed %s after its znode was deleted", time.Since(start).Round(time.Millisecond))
	if got := zkServed(t, l, 6); got[p2.Name] != 6 {
		t.Fatalf("after the deletion: %v, want platform2 alone", got)
	}
	testkit.Eventually(t, "/status to list platform2 alone", 5*time.Second, func() bool {
		return slices.Equal(zkPoolServers(l), []string{p2.Addr})
	})
	if !events.has(func(e event.Event) bool {
		return e.Kind == event.DiscoveryChanged && strings.Contains(e.Detail, "removed "+p1.Addr)
	}) {
		t.Fatal("no discovery_changed event naming the removed server")
	}
}

func TestZooKeeperDiscoveryKeepsTheLastListWhileZooKeeperIsDownAndFollowsItAfterARestart(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	zkPut(t, zc, "/services/thingworx/p2", p2.Addr)
	l, logs := startLB(t, zkConfig(zks.addr, "/services/thingworx", `empty_grace = "500ms"`))
	testkit.Eventually(t, "both platforms to serve", 5*time.Second, func() bool {
		got := zkServed(t, l, 6)
		return got[p1.Name] > 0 && got[p2.Name] > 0
	})

	// ZooKeeper down for longer than the session timeout: every request is served, by the last list.
	zks.stop()
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		if got := zkServed(t, l, 4); got[p1.Name]+got[p2.Name] != 4 {
			t.Fatalf("while ZooKeeper is down: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ds := zkDiscovered(l)
	if ds.Errors == 0 || ds.LastError == "" || !slices.Equal(ds.Servers, zkSorted(p1.Addr, p2.Addr)) {
		t.Fatalf("while ZooKeeper is down: %+v", ds)
	}
	if !strings.Contains(logs.all(), "zookeeper: lost the session with "+zks.addr+"; connecting anew") {
		t.Fatalf("the lost session is not logged:\n%s", logs.all())
	}

	// Restarted on its port and data: a znode added afterwards is followed.
	zks.start()
	// The test's client reconnects by itself, with a backoff: a write before it has a session again
	// fails with "could not connect to a server".
	testkit.Eventually(t, "the test's ZooKeeper client to have a session again", 15*time.Second, func() bool {
		return zc.State() == zk.StateHasSession
	})
	zkPut(t, zc, "/services/thingworx/p3", p3.Addr)
	testkit.Eventually(t, "platform3, added after the restart, to serve", 10*time.Second, func() bool {
		return zkServed(t, l, 6)[p3.Name] > 0
	})
	if ds := zkDiscovered(l); !slices.Equal(ds.Servers, zkSorted(p1.Addr, p2.Addr, p3.Addr)) || ds.LastError != "" {
		t.Fatalf("after the restart: %+v", ds)
	}
}

// zkProxy forwards connections to a server; cut closes them all and refuses new ones (accepted and
// closed at once) until heal: a network partition while the server runs on.
type zkProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func startZKProxy(t *testing.T, target string) *zkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &zkProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
	})
	return p
}

func (p *zkProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.cut {
			p.mu.Unlock()
			c.Close()
			if u != nil {
				u.Close()
			}
			continue
		}
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		go func() { io.Copy(u, c); u.Close(); c.Close() }() //nolint:errcheck
		go func() { io.Copy(c, u); c.Close(); u.Close() }() //nolint:errcheck
	}
}

func (p *zkProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

func TestZooKeeperDiscoveryReadsAgainWithANewSessionAfterAPartitionLongerThanTheSessionTimeout(t *testing.T) {
	zks := startZK(t)
	proxy := startZKProxy(t, zks.addr)
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	l, logs := startLB(t, zkConfig(proxy.ln.Addr().String(), "/services/thingworx", `session_timeout = "2s"`))
	testkit.Eventually(t, "platform1 to serve", 5*time.Second, func() bool { return zkServed(t, l, 2)[p1.Name] == 2 })

	// Cut off from ZooKeeper (which runs on) for 1.5 session timeouts: ZooKeeper expires the session
	// and with it the watch; the path changes meanwhile. fairlead serves its last list, and reads the
	// path again with a new session once ZooKeeper is in reach.
	proxy.setCut(true)
	zkDelete(t, zc, "/services/thingworx/p1")
	zkPut(t, zc, "/services/thingworx/p2", p2.Addr)
	for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(50 * time.Millisecond) {
		if got := zkServed(t, l, 2); got[p1.Name] != 2 {
			t.Fatalf("while cut off: %v", got)
		}
	}
	proxy.setCut(false)
	testkit.Eventually(t, "the change made while cut off to apply", 10*time.Second, func() bool {
		return slices.Equal(zkDiscovered(l).Servers, []string{p2.Addr})
	})
	if !strings.Contains(logs.all(), "zookeeper: lost the session with "+proxy.ln.Addr().String()) {
		t.Fatalf("no lost session logged:\n%s", logs.all())
	}
	// The new session's watch follows the path.
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	start := time.Now()
	testkit.Eventually(t, "platform1 back in the list, by the new watch (before a safety re-list)", 900*time.Millisecond, func() bool {
		return len(zkDiscovered(l).Servers) == 2
	})
	t.Logf("the new watch fired %s after the change", time.Since(start).Round(time.Millisecond))
}

func TestZooKeeperDiscoveryFollowsAnEnsembleRebuiltWithEmptyData(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	l, logs := startLB(t, zkConfig(zks.addr, "/services/thingworx"))
	testkit.Eventually(t, "platform1 to serve", 5*time.Second, func() bool { return zkServed(t, l, 2)[p1.Name] == 2 })
	// Many transactions, seen by fairlead's client (a read after them): a server that has fewer refuses
	// a client that saw them; a new client gets in.
	for i := range 50 {
		zkPut(t, zc, "/counter", fmt.Sprint(i))
	}
	last := zkDiscovered(l).LastSuccess
	testkit.Eventually(t, "a read after the writes", 5*time.Second, func() bool { return zkDiscovered(l).LastSuccess.After(last) })

	zks.stop()
	if err := os.RemoveAll(filepath.Join(zks.dir, "data")); err != nil {
		t.Fatal(err)
	}
	zks.start()
	// fairlead reads the new ensemble (a new client: not refused) and finds no path: an error, and the
	// last list serves on.
	testkit.Eventually(t, "the new ensemble to be read", 10*time.Second, func() bool {
		return zkDiscovered(l).LastError == "/services/thingworx does not exist (waiting for its creation)"
	})
	if got := zkServed(t, l, 4); got[p1.Name] != 4 {
		t.Fatalf("before the path is registered again: %v", got)
	}
	zc = zkClient(t, zks.addr) // the old client is refused
	zkPut(t, zc, "/services/thingworx/p2", p2.Addr)
	testkit.Eventually(t, "the new ensemble's list to apply", 5*time.Second, func() bool {
		return slices.Equal(zkDiscovered(l).Servers, []string{p2.Addr})
	})
	if !strings.Contains(logs.all(), "zookeeper: lost the session with "+zks.addr+"; connecting anew") {
		t.Fatalf("no new client logged:\n%s", logs.all())
	}
}

func TestZooKeeperDiscoveryReportsAMissingPathAndFollowsItOnceCreated(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 1, 0)
	p1 := c.Platforms[0]
	l, logs := startLB(t, zkConfig(zks.addr, "/services/thingworx"))
	testkit.Eventually(t, "the missing path to be reported", 5*time.Second, func() bool {
		return zkDiscovered(l).LastError == "/services/thingworx does not exist (waiting for its creation)"
	})
	if ds := zkDiscovered(l); ds.Servers != nil {
		t.Fatalf("a missing path is no list: %+v", ds)
	}
	zc := zkClient(t, zks.addr)
	start := time.Now()
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	testkit.Eventually(t, "platform1 to serve", 5*time.Second, func() bool { return zkServed(t, l, 2)[p1.Name] == 2 })
	t.Logf("served %s after the path was created", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(logs.all(), "/services/thingworx does not exist (waiting for its creation) (keeping the last list)") {
		t.Fatalf("log:\n%s", logs.all())
	}
}

func TestZooKeeperDiscoveryAppliesAnEmptyChildListOnlyAfterEmptyGrace(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 1, 0)
	p1 := c.Platforms[0]
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	l, _ := startLB(t, zkConfig(zks.addr, "/services/thingworx", `empty_grace = "1500ms"`))
	testkit.Eventually(t, "platform1 to serve", 5*time.Second, func() bool { return zkServed(t, l, 2)[p1.Name] == 2 })

	start := time.Now()
	zkDelete(t, zc, "/services/thingworx/p1")
	testkit.Eventually(t, "the empty list to be pending", 2*time.Second, func() bool { return zkDiscovered(l).EmptyPending })
	for time.Since(start) < time.Second {
		if got := zkServed(t, l, 2); got[p1.Name] != 2 {
			t.Fatalf("%s into empty_grace: %v", time.Since(start), got)
		}
	}
	testkit.Eventually(t, "the empty list to apply", 5*time.Second, func() bool { return zkServed(t, l, 1)["503"] == 1 })
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("the empty list applied %s after the deletion, before empty_grace", d)
	}
	zkPut(t, zc, "/services/thingworx/p1", p1.Addr)
	testkit.Eventually(t, "platform1 to serve again", 5*time.Second, func() bool { return zkServed(t, l, 2)[p1.Name] == 2 })
}

func TestZooKeeperDiscoveryReadsAPathWithADigestACLWithTheRightPassword(t *testing.T) {
	zks := startZK(t)
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	zc := zkClient(t, zks.addr)
	if err := zc.AddAuth("digest", []byte("fairlead:s3cret-Pw")); err != nil {
		t.Fatal(err)
	}
	zkPut(t, zc, "/secure/thingworx/p1", p1.Addr, zk.DigestACL(zk.PermAll, "fairlead", "s3cret-Pw")...)
	dir := t.TempDir()
	right, wrong := filepath.Join(dir, "zk-password"), filepath.Join(dir, "zk-wrong")
	os.WriteFile(right, []byte("s3cret-Pw\n"), 0o600)  //nolint:errcheck
	os.WriteFile(wrong, []byte("guessed-Pw\n"), 0o600) //nolint:errcheck

	l, logs := startLB(t, zkConfig(zks.addr, "/secure/thingworx", `digest_user = "fairlead"`,
		fmt.Sprintf("digest_password_file = %q", right)))
	testkit.Eventually(t, "platform1, read with the credentials, to serve", 5*time.Second, func() bool {
		return zkServed(t, l, 2)[p1.Name] == 2
	})

	// With a wrong password nothing is readable: an error, and the seed serves on.
	files := zkConfig(zks.addr, "/secure/thingworx", `digest_user = "fairlead"`, fmt.Sprintf("digest_password_file = %q", wrong))
	files["20-seed.toml"] = fmt.Sprintf("[pools.platform]\nservers = [%q]\n", p2.Addr)
	l2, logs2 := startLB(t, files)
	testkit.Eventually(t, "the read to fail", 5*time.Second, func() bool {
		return zkDiscovered(l2).LastError == "listing /secure/thingworx: zk: not authenticated"
	})
	if got := zkServed(t, l2, 2); got[p2.Name] != 2 {
		t.Fatalf("with a wrong password the seed serves: %v", got)
	}
	for _, s := range []string{logs.all(), logs2.all(), fmt.Sprint(l.Status()), fmt.Sprint(l2.Status())} {
		if strings.Contains(s, "s3cret-Pw") || strings.Contains(s, "guessed-Pw") {
			t.Fatalf("a password is shown:\n%s", s)
		}
	}

	// The password file is a file of the config: watched, and a reload after rotating it applies.
	cfgDir := testkit.WriteFiles(t, zkConfig(zks.addr, "/secure/thingworx", `digest_user = "fairlead"`,
		fmt.Sprintf("digest_password_file = %q", right)))
	before, err := config.Load(cfgDir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(before.SecretFiles(), right) {
		t.Fatalf("SecretFiles %v lacks the password file", before.SecretFiles())
	}
	os.WriteFile(right, []byte("rotated-Pw\n"), 0o600) //nolint:errcheck
	after, err := config.Load(cfgDir)
	if err != nil {
		t.Fatal(err)
	}
	if sameFiles(before, after) {
		t.Fatal("a rotated password leaves the config digest unchanged")
	}
}

func TestZooKeeperDiscoveryUsesTheSSLPortOfACuratorInstanceInATLSPool(t *testing.T) {
	zks := startZK(t)
	zc := zkClient(t, zks.addr)
	zkPut(t, zc, "/services/thingworx/a", discoverytest.CuratorInstance("a", "127.0.0.1", 18080, 18443))
	zkPut(t, zc, "/services/thingworx/b", discoverytest.CuratorInstance("b", "127.0.0.1", 28080, 0)) // no sslPort: port
	zkPut(t, zc, "/services/thingworx/c", "127.0.0.1:38443")
	files := zkConfig(zks.addr, "/services/thingworx")
	files["30-tls.toml"] = tlsTable("platform", "insecure_skip_verify = true")
	l, _ := startLB(t, files)
	want := []string{"127.0.0.1:18443", "127.0.0.1:28080", "127.0.0.1:38443"}
	testkit.Eventually(t, "the servers chosen", 5*time.Second, func() bool { return slices.Equal(zkPoolServers(l), want) })
	if ds := zkDiscovered(l); !slices.Equal(ds.Servers, want) {
		t.Fatalf("discovery status %+v", ds)
	}
}

func TestZooKeeperDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600) //nolint:errcheck
	missing := filepath.Join(dir, "missing")
	f := func(discovery, want string) {
		t.Helper()
		files := zkConfig("127.0.0.1:2181", "/services/thingworx")
		files["20-more.toml"] = "[pools.platform.discovery]\n" + discovery + "\n"
		_, err := config.Load(testkit.WriteFiles(t, files))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", discovery, err, want)
		}
	}
	k := "20-more.toml: pools.platform.discovery."
	f(`zookeeper = []`, k+"zookeeper: required")
	f(`zookeeper = ["zk1"]`, k+`zookeeper: bad address "zk1": missing port in address`)
	f(`zookeeper = ["zk1:0"]`, k+`zookeeper: bad address "zk1:0": port 0`)
	f(`path = ""`, k+"path: required")
	f(`path = "services/thingworx"`, k+`path: "services/thingworx" is not absolute`)
	f(`path = "/services/thingworx/"`, k+`path: "/services/thingworx/" ends with /`)
	f(`path = "/"`, k+`path: "/" ends with /`)
	f(`path = "/services//thingworx"`, k+"path: \"/services//thingworx\" has an empty segment")
	f(`path = "/services/../thingworx"`, k+`path: "/services/../thingworx" has a relative segment ".."`)
	f(`session_timeout = "soon"`, k+`session_timeout: bad duration "soon"`)
	f(`session_timeout = "0s"`, k+"session_timeout: must be at least 1ms")
	f(`session_timeout = "2h"`, k+"session_timeout: must be at most 1h")
	f(`digest_user = "fairlead"`, k+"digest_password_file: digest_user and digest_password_file go together")
	f(fmt.Sprintf("digest_password_file = %q", empty), k+"digest_user: digest_user and digest_password_file go together")
	f(fmt.Sprintf("digest_user = \"fairlead\"\ndigest_password_file = %q", missing), k+"digest_password_file: open "+missing+": no such file or directory")
	f(fmt.Sprintf("digest_user = \"fairlead\"\ndigest_password_file = %q", empty), k+"digest_password_file: "+empty+" is empty")
	f(fmt.Sprintf("digest_user = \"a:b\"\ndigest_password_file = %q", empty), k+"digest_user: must not contain ':'")
	f(`name = "thingworx.service.consul"`, k+"name: not a key of the zookeeper provider")
	f(`file = "/etc/fairlead/servers.toml"`, k+"file: not a key of the zookeeper provider")
	f(`resolve_interval = "5s"`, k+"resolve_interval: not a key of the zookeeper provider")

	// The defaults: session_timeout 10s (zookeeper only), empty_grace 30s.
	files := zkConfig("127.0.0.1:2181", "/services/thingworx")
	files["10-zk.toml"] = strings.Replace(files["10-zk.toml"], `session_timeout = "2s"`, "", 1)
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if dc := cfg.Pools["platform"].Discovery; dc.SessionTimeout.D != 10*time.Second || dc.EmptyGrace.D != 30*time.Second {
		t.Fatalf("defaults: session_timeout %s, empty_grace %s", dc.SessionTimeout.D, dc.EmptyGrace.D)
	}
}
