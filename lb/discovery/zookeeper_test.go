package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
	"github.com/go-zookeeper/zk"
)

// The zookeeper provider against a real ZooKeeper (discoverytest.StartZooKeeper: one standalone server
// per test), through a Watcher: instances registered and deleted as ThingWorx HA's Curator does, the
// server down, restarted, rebuilt empty and cut off, a missing path, digest ACLs. What a child znode says
// is parseInstance's, below.

func TestZooKeeperInstanceDataIsHostPortOrACuratorServiceInstance(t *testing.T) {
	f := func(name, data string, useTLS bool, want, wantErr string) {
		t.Helper()
		got, err := parseInstance(name, []byte(data), useTLS)
		switch {
		case wantErr == "" && (err != nil || got != want):
			t.Errorf("%q %q tls=%v: %q, %v; want %q", name, data, useTLS, got, err, want)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%q %q tls=%v: %q, %v; want an error with %q", name, data, useTLS, got, err, wantErr)
		}
	}
	f("x", "10.0.0.5:8080", false, "10.0.0.5:8080", "")
	f("x", " twx-a.internal:8443\n", true, "twx-a.internal:8443", "")
	f("10.0.0.6:8080", "", false, "10.0.0.6:8080", "") // no data: the name
	f("x", "", false, "", "no data, and its name is not host:port")
	f("x", "10.0.0.5", false, "", "missing port")
	f("x", "10.0.0.5:0", false, "", "port 0")
	f("x", ":8080", false, "", "no host")
	f("x", "10.0.0.5:99999", false, "", "bad port")

	curator := discoverytest.CuratorInstance("id", "10.0.0.5", 8080, 8443)
	f("x", curator, false, "10.0.0.5:8080", "")
	f("x", curator, true, "10.0.0.5:8443", "")
	f("x", discoverytest.CuratorInstance("id", "10.0.0.5", 8080, 0), true, "10.0.0.5:8080", "")
	f("x", discoverytest.CuratorInstance("id", "fd00::5", 8080, 0), false, "[fd00::5]:8080", "")
	f("x", `{"address":"10.0.0.5","port":null,"sslPort":8443}`, true, "10.0.0.5:8443", "")
	f("x", `{"address":"10.0.0.5","port":null,"sslPort":8443}`, false, "", "only an sslPort, and the pool's [tls] is not enabled")
	f("x", `{"address":"10.0.0.5"}`, false, "", "no port")
	f("x", `{"port":8080}`, false, "", "no address")
	f("x", `{"address":"10.0.0.5","port":8080,"enabled":false}`, false, "", "disabled")
	f("x", `{"address":"10.0.0.5","port":"8080"}`, false, "", "not a Curator service instance")
	f("x", `{"address":"10.0.0.5","port":70000}`, false, "", "bad port")
	f("x", `{"address":"a b","port":8080}`, false, "", "control or space character")
}

// zkTable is a zookeeper [discovery] table on addr and path: session_timeout 2s, empty_grace 30s (the
// default).
func zkTable(addr, path string) config.Discovery {
	return config.Discovery{Provider: "zookeeper", ZooKeeper: []string{addr}, Path: path,
		SessionTimeout: config.Duration{D: 2 * time.Second}, EmptyGrace: config.Duration{D: 30 * time.Second}}
}

// zkFollow bounds a change followed by a watch: milliseconds, and slack for a loaded machine.
const zkFollow = 5 * time.Second

func TestZooKeeperProviderReadsPlainAndCuratorInstancesAndLogsAChildThatIsNoneOnce(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001") // a plain host:port
	dc := zkTable(zks.Addr, "/services/thingworx")
	dc.SessionTimeout.D = time.Second
	rn := run(t, dc, false)
	rn.follows(t, zkFollow, "an instance registered as host:port", "127.0.0.1:9001")

	// A Curator service instance, and a child that is no instance: the instance joins, the other child
	// is skipped (logged once, however often the path is read again).
	discoverytest.Put(t, zc, "/services/thingworx/1c3a9d6e-0b7f-4f61-9e8a-2f4c7d2b9a10", discoverytest.CuratorInstance("1c3a9d6e", "127.0.0.1", 9002, 0))
	discoverytest.Put(t, zc, "/services/thingworx/junk", "not an address")
	rn.follows(t, zkFollow, "an instance registered by Curator", "127.0.0.1:9001", "127.0.0.1:9002")
	if s := rn.Status(); s.Provider != "zookeeper" {
		t.Fatalf("status %+v", s)
	}
	for range 2 { // two safety re-lists (every session_timeout, 1s)
		last := rn.Status().LastSuccess
		testkit.Eventually(t, "a safety re-list", 3*time.Second, func() bool { return rn.Status().LastSuccess.After(last) })
	}
	if n := strings.Count(rn.log(), `zookeeper: skipping /services/thingworx/junk: bad address "not an address"`); n != 1 {
		t.Fatalf("the junk child was logged %d times, want once:\n%s", n, rn.log())
	}
	if s := rn.Status(); s.Changes != 2 {
		t.Fatalf("re-lists of an unchanged path changed something: %+v", s)
	}
}

func TestZooKeeperProviderFollowsADeletedZNodeByItsWatch(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/twx/platform/a", "127.0.0.1:9001")
	discoverytest.Put(t, zc, "/twx/platform/b", "127.0.0.1:9002")
	rn := run(t, zkTable(zks.Addr, "/twx/platform"), false)
	rn.follows(t, zkFollow, "both instances", "127.0.0.1:9001", "127.0.0.1:9002")

	discoverytest.Delete(t, zc, "/twx/platform/a")
	rn.follows(t, zkFollow, "the deleted znode's server removed (before a safety re-list)", "127.0.0.1:9002")
	want := []string{"zookeeper: 2 servers (added 127.0.0.1:9001, 127.0.0.1:9002; removed none)",
		"zookeeper: 1 server (added none; removed 127.0.0.1:9001)"}
	if got := rn.r.got(); !slices.Equal(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
}

func TestZooKeeperProviderKeepsTheLastListWhileZooKeeperIsDownAndFollowsItAfterARestart(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	discoverytest.Put(t, zc, "/services/thingworx/p2", "127.0.0.1:9002")
	dc := zkTable(zks.Addr, "/services/thingworx")
	dc.EmptyGrace.D = 500 * time.Millisecond
	rn := run(t, dc, false)
	rn.follows(t, zkFollow, "both instances", "127.0.0.1:9001", "127.0.0.1:9002")

	// ZooKeeper down for longer than the session timeout (and empty_grace): failed reads, and the list
	// in force stays, nothing else handed to the pool.
	zks.Stop()
	time.Sleep(3 * time.Second) // the outage: 1.5 session timeouts; every change handed over is recorded
	if s := rn.Status(); s.Errors == 0 || s.LastError == "" || s.EmptyPending || !slices.Equal(s.Servers, []string{"127.0.0.1:9001", "127.0.0.1:9002"}) || len(rn.r.got()) != 1 {
		t.Fatalf("while ZooKeeper is down: %+v, changes %q", s, rn.r.got())
	}
	if !strings.Contains(rn.log(), "zookeeper: lost the session with "+zks.Addr+"; connecting anew") {
		t.Fatalf("the lost session is not logged:\n%s", rn.log())
	}

	// Restarted on its port and data: a znode added afterwards is followed.
	zks.Start()
	// The test's client reconnects by itself, with a backoff: a write before it has a session again
	// fails with "could not connect to a server".
	testkit.Eventually(t, "the test's ZooKeeper client to have a session again", 15*time.Second, func() bool {
		return zc.State() == zk.StateHasSession
	})
	discoverytest.Put(t, zc, "/services/thingworx/p3", "127.0.0.1:9003")
	rn.follows(t, 10*time.Second, "an instance added after the restart", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003")
	if s := rn.Status(); s.LastError != "" {
		t.Fatalf("after the restart: %+v", s)
	}
}

func TestZooKeeperProviderReadsAgainWithANewSessionAfterAPartitionLongerThanTheSessionTimeout(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	cut := discoverytest.StartPartition(t, zks.Addr)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	rn := run(t, zkTable(cut.Addr, "/services/thingworx"), false)
	rn.follows(t, zkFollow, "the first read", "127.0.0.1:9001")

	// Cut off from ZooKeeper (which runs on) for 1.5 session timeouts: ZooKeeper expires the session
	// and with it the watch; the path changes meanwhile. The last list stays, and the path is read again
	// with a new session once ZooKeeper is in reach.
	cut.Cut()
	discoverytest.Delete(t, zc, "/services/thingworx/p1")
	discoverytest.Put(t, zc, "/services/thingworx/p2", "127.0.0.1:9002")
	time.Sleep(3 * time.Second) // the partition: 1.5 session timeouts; every change handed over is recorded
	if l := rn.List(); !slices.Equal(l, []string{"127.0.0.1:9001"}) || len(rn.r.got()) != 1 {
		t.Fatalf("while cut off: list %v, changes %q", l, rn.r.got())
	}
	cut.Heal()
	rn.follows(t, 10*time.Second, "the change made while cut off", "127.0.0.1:9002")
	if !strings.Contains(rn.log(), "zookeeper: lost the session with "+cut.Addr) {
		t.Fatalf("no lost session logged:\n%s", rn.log())
	}
	// The new session's watch follows the path.
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	rn.follows(t, 900*time.Millisecond, "an instance back, by the new watch (before a safety re-list)", "127.0.0.1:9001", "127.0.0.1:9002")
}

func TestZooKeeperProviderFollowsAnEnsembleRebuiltWithEmptyData(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	rn := run(t, zkTable(zks.Addr, "/services/thingworx"), false)
	rn.follows(t, zkFollow, "the first read", "127.0.0.1:9001")
	// Many transactions, seen by the provider's client (a read after them): a server that has fewer
	// refuses a client that saw them; a new client gets in.
	for i := range 50 {
		discoverytest.Put(t, zc, "/counter", fmt.Sprint(i))
	}
	last := rn.Status().LastSuccess
	testkit.Eventually(t, "a read after the writes", 5*time.Second, func() bool { return rn.Status().LastSuccess.After(last) })

	zks.Stop()
	if err := os.RemoveAll(filepath.Join(zks.Dir, "data")); err != nil {
		t.Fatal(err)
	}
	zks.Start()
	// The new ensemble is read (a new client: not refused) and has no path: an error, the last list
	// stays.
	testkit.Eventually(t, "the new ensemble to be read", 10*time.Second, func() bool {
		return rn.Status().LastError == "/services/thingworx does not exist (waiting for its creation)"
	})
	if l := rn.List(); !slices.Equal(l, []string{"127.0.0.1:9001"}) {
		t.Fatalf("before the path is registered again: %v", l)
	}
	zc = discoverytest.Client(t, zks.Addr) // the old client is refused
	discoverytest.Put(t, zc, "/services/thingworx/p2", "127.0.0.1:9002")
	rn.follows(t, zkFollow, "the new ensemble's list", "127.0.0.1:9002")
	if !strings.Contains(rn.log(), "zookeeper: lost the session with "+zks.Addr+"; connecting anew") {
		t.Fatalf("no new client logged:\n%s", rn.log())
	}
}

func TestZooKeeperProviderReportsAMissingPathAndFollowsItOnceCreated(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	rn := run(t, zkTable(zks.Addr, "/services/thingworx"), false, "127.0.0.1:9009")
	testkit.Eventually(t, "the missing path to be reported", 5*time.Second, func() bool {
		return rn.Status().LastError == "/services/thingworx does not exist (waiting for its creation)"
	})
	if s := rn.Status(); s.Servers != nil || rn.r.got() != nil {
		t.Fatalf("a missing path is no list (the seed serves): %+v, changes %q", s, rn.r.got())
	}
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	rn.follows(t, zkFollow, "the path once created", "127.0.0.1:9001")
	if !strings.Contains(rn.log(), "discovery: pool p: zookeeper: /services/thingworx does not exist (waiting for its creation) (keeping the last list)") {
		t.Fatalf("log:\n%s", rn.log())
	}
}

func TestZooKeeperProviderAppliesAnEmptyChildListOnlyAfterEmptyGrace(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	dc := zkTable(zks.Addr, "/services/thingworx")
	dc.EmptyGrace.D = 1500 * time.Millisecond
	rn := run(t, dc, false)
	rn.follows(t, zkFollow, "the first read", "127.0.0.1:9001")

	start := time.Now()
	discoverytest.Delete(t, zc, "/services/thingworx/p1")
	testkit.Eventually(t, "the empty list to be pending", 2*time.Second, func() bool { return rn.Status().EmptyPending })
	if l := rn.List(); !slices.Equal(l, []string{"127.0.0.1:9001"}) {
		t.Fatalf("an empty child list applied at once: %v", l)
	}
	rn.follows(t, 10*time.Second, "the empty list", []string{}...)
	if d := time.Since(start); d < dc.EmptyGrace.D {
		t.Fatalf("the empty list applied %s after the deletion, before empty_grace", d)
	}
	discoverytest.Put(t, zc, "/services/thingworx/p1", "127.0.0.1:9001")
	rn.follows(t, zkFollow, "an instance registered again", "127.0.0.1:9001")
}

func TestZooKeeperProviderReadsAPathWithADigestACLWithTheRightPasswordAndNeverShowsIt(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	if err := zc.AddAuth("digest", []byte("fairlead:s3cret-Pw")); err != nil {
		t.Fatal(err)
	}
	discoverytest.Put(t, zc, "/secure/thingworx/p1", "127.0.0.1:9001", zk.DigestACL(zk.PermAll, "fairlead", "s3cret-Pw")...)
	dc := zkTable(zks.Addr, "/secure/thingworx")
	dc.DigestUser, dc.DigestPassword = "fairlead", "s3cret-Pw"
	right := run(t, dc, false)
	right.follows(t, zkFollow, "a read with the credentials", "127.0.0.1:9001")

	// With a wrong password nothing is readable: an error, and the seed serves on.
	dc.DigestPassword = "guessed-Pw"
	wrong := run(t, dc, false, "127.0.0.1:9002")
	testkit.Eventually(t, "the read to fail", 5*time.Second, func() bool {
		return wrong.Status().LastError == "listing /secure/thingworx: zk: not authenticated"
	})
	if l := wrong.List(); l != nil || wrong.r.got() != nil {
		t.Fatalf("with a wrong password the seed serves: list %v, changes %q", l, wrong.r.got())
	}
	for _, s := range []string{right.log(), wrong.log(), fmt.Sprint(right.Status()), fmt.Sprint(wrong.Status())} {
		if strings.Contains(s, "s3cret-Pw") || strings.Contains(s, "guessed-Pw") {
			t.Fatalf("a password is shown:\n%s", s)
		}
	}
}

func TestZooKeeperProviderUsesTheSSLPortOfACuratorInstanceInATLSPool(t *testing.T) {
	zks := discoverytest.StartZooKeeper(t)
	zc := discoverytest.Client(t, zks.Addr)
	discoverytest.Put(t, zc, "/services/thingworx/a", discoverytest.CuratorInstance("a", "127.0.0.1", 18080, 18443))
	discoverytest.Put(t, zc, "/services/thingworx/b", discoverytest.CuratorInstance("b", "127.0.0.1", 28080, 0)) // no sslPort: port
	discoverytest.Put(t, zc, "/services/thingworx/c", "127.0.0.1:38443")
	rn := run(t, zkTable(zks.Addr, "/services/thingworx"), true)
	rn.follows(t, zkFollow, "the TLS pool's servers", "127.0.0.1:18443", "127.0.0.1:28080", "127.0.0.1:38443")
}
