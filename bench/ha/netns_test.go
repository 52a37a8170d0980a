package ha

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test network: one private subnet, 10.213.0.0/24, that exists only inside namespaces this test
// creates (named flha-<pid>-<node>, so that runs never collide) and deletes, also when it fails. The
// root namespace's interfaces and routes are never touched: every link is created inside a test
// namespace (`ip -n`), its peer end moved straight into another.
//
//	namespace "sw": bridge br0, one veth port per node
//	   │                 │                 │                 │
//	"lb1" eth0        "lb2" eth0        "backend" eth0    "client" eth0
//	10.213.0.11       10.213.0.12       10.213.0.20       10.213.0.30
//	fairlead          fairlead          fairlead-sim      the load (./client)
//	keepalived        keepalived
//	10.213.0.100, the virtual address: on lb1 or lb2 (keepalived)
const (
	subnet = "10.213.0."
	vip    = subnet + "100"
)

// hosts are the nodes on the bridge and their addresses.
var hosts = []struct{ node, addr string }{
	{"lb1", subnet + "11"},
	{"lb2", subnet + "12"},
	{"backend", subnet + "20"},
	{"client", subnet + "30"},
}

// topology is the test network of one test.
type topology struct {
	t      *testing.T
	prefix string
}

// ns is the namespace of a node.
func (tp *topology) ns(node string) string { return tp.prefix + node }

// buildTopology creates the namespaces, the bridge and the links. Each namespace is deleted at cleanup
// (after the processes in it, which are started later and so cleaned up first). It skips the test if
// this machine does not let it create namespaces (a container without CAP_SYS_ADMIN).
func buildTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{t: t, prefix: fmt.Sprintf("flha-%d-", os.Getpid())}
	removeStale(t)
	for i, node := range []string{"sw", "lb1", "lb2", "backend", "client"} {
		ns := tp.ns(node)
		out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
		if err != nil && i == 0 && (strings.Contains(string(out), "not permitted") || strings.Contains(string(out), "denied")) {
			t.Skipf("cannot create network namespaces here: %s", strings.TrimSpace(string(out)))
		}
		if err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		tp.ip("-n", ns, "link", "set", "lo", "up")
	}
	sw := tp.ns("sw")
	tp.ip("-n", sw, "link", "add", "br0", "type", "bridge")
	tp.ip("-n", sw, "link", "set", "br0", "up")
	for _, h := range hosts {
		// The veth's switch end is named after the node; its other end is the node's eth0.
		tp.ip("-n", sw, "link", "add", h.node, "type", "veth", "peer", "name", "eth0", "netns", tp.ns(h.node))
		tp.ip("-n", sw, "link", "set", h.node, "master", "br0")
		tp.ip("-n", sw, "link", "set", h.node, "up")
		tp.ip("-n", tp.ns(h.node), "addr", "add", h.addr+"/24", "dev", "eth0")
		tp.ip("-n", tp.ns(h.node), "link", "set", "eth0", "up")
	}
	return tp
}

// removeStale deletes the namespaces left by an earlier run of this test whose process is gone (killed
// before its cleanup ran): flha-<pid>-* with no process <pid>.
func removeStale(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, "flha-")
		pid, _, ok2 := strings.Cut(rest, "-")
		if !ok || !ok2 || pid == "" || strings.Trim(pid, "0123456789") != "" {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // a run still going on
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("removing the stale namespace %s: %v: %s", name, err, out)
		} else {
			t.Logf("removed the stale namespace %s (its test run is gone)", name)
		}
	}
}

// ip runs the ip command and fails the test if it fails.
func (tp *topology) ip(args ...string) string {
	tp.t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		tp.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// holdsVIP reports whether the node's eth0 carries the virtual address.
func (tp *topology) holdsVIP(node string) bool {
	out, err := exec.Command("ip", "-n", tp.ns(node), "-o", "-4", "addr", "show", "dev", "eth0").Output()
	return err == nil && strings.Contains(string(out), " "+vip+"/")
}

// probe GETs url from inside the node's namespace (with the client binary): true on a 200; the body
// is returned.
func (tp *topology) probe(node, url string) (string, bool) {
	out, err := exec.Command("ip", "netns", "exec", tp.ns(node), clientBin, "-probe", url, "-print").Output()
	return string(out), err == nil
}
