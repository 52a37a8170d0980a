package ha

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// exampleFile is the shipped keepalived configuration; the test runs it (see keepalivedConfig).
const exampleFile = "../../conf.d/keepalived.conf.example"

// exampleCheck is the example's health check command, replaced when curl is missing here.
const exampleCheck = `"/usr/bin/curl -fsS -o /dev/null --max-time 1 http://127.0.0.1:8404/healthz"`

// The load of the test: GETs per second to the virtual address, and tunnels held (one per asset).
const (
	rate    = 200
	tunnels = 50
)

// TestKeepalivedMovesTheVirtualAddressWhenTheActiveFairleadDies runs fairlead's own HA pair: two
// fairlead processes on one config directory, one per load balancer namespace, behind a virtual
// address that keepalived (the shipped example config) keeps on one of them. A client sends 200 GETs/s
// to the address and holds 50 tunnels; the active fairlead is killed (SIGKILL); keepalived's check of
// /healthz fails twice, the host goes to FAULT and gives the address up, the other takes it. Then the
// dead fairlead is started again: with nopreempt the address stays where it is.
//
// It asserts that the address moves, that answers resume within 10 s, that no GET failed before the
// kill nor any sent after the switch, that every tunnel reopens, and on the same connection server as
// before (both fairleads place by rendezvous hashing over the same healthy servers). It prints one line
// of figures.
func TestKeepalivedMovesTheVirtualAddressWhenTheActiveFairleadDies(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	began := time.Now()
	tp := buildTopology(t)

	// The simulated ThingWorx cluster on the backend's address: platform1 (leader) and platform2 on
	// 9081-9082, connection servers cx1-cx3 on 9181-9183.
	backend := hosts[2].addr
	start(t, tp.ns("backend"), "fairlead-sim", nil, simBin, "-host", backend, "-platforms", "2",
		"-connections", "3", "-platform-port", "9081", "-connection-port", "9181", "-control", "")
	testkit.Eventually(t, "the simulator to listen", 10*time.Second, func() bool {
		_, ok := tp.probe("backend", "http://"+backend+":9183/health")
		return ok
	})

	conf := fairleadConfig(t, backend)
	lbs := map[string]*child{}
	for _, node := range []string{"lb1", "lb2"} {
		lbs[node] = startFairlead(t, tp, node, conf)
	}
	leaders := [2]string{leaderOf(t, tp, "lb1"), leaderOf(t, tp, "lb2")}
	if leaders[0] != leaders[1] || leaders[0] == "" {
		t.Fatalf("the two fairleads name different leaders: %q and %q", leaders[0], leaders[1])
	}

	kconf, check := keepalivedConfig(t)
	kaStart := time.Now()
	ka := map[string]*child{}
	for _, node := range []string{"lb1", "lb2"} {
		ka[node] = startKeepalived(t, tp, node, kconf)
	}
	testkit.Eventually(t, "keepalived to put the virtual address on one fairlead", 15*time.Second, func() bool {
		return tp.holdsVIP("lb1") != tp.holdsVIP("lb2")
	})
	elected := time.Since(kaStart)
	active, standby := "lb1", "lb2"
	if tp.holdsVIP("lb2") {
		active, standby = standby, active
	}

	client := startLines(t, tp.ns("client"), "client", clientBin, "-url", "http://"+vip+":8080",
		"-rate", strconv.Itoa(rate), "-tunnels", strconv.Itoa(tunnels), "-max", "45s")
	client.expect("ready", 15*time.Second)
	time.Sleep(3 * time.Second) // steady state through the active fairlead

	// The mark comes first, and the GETs sent before it have 100 ms to finish: a GET counted as sent
	// before the kill was answered before it.
	mark := func(name string) {
		client.send("mark " + name)
		client.expect("marked "+name, 5*time.Second)
	}
	mark("kill")
	time.Sleep(100 * time.Millisecond)
	if err := lbs[active].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	mark("killed")
	testkit.Eventually(t, "the virtual address to move to "+standby, 10*time.Second, func() bool { return tp.holdsVIP(standby) })
	moved := time.Since(killed)
	mark("switch")
	if tp.holdsVIP(active) {
		t.Errorf("both hosts hold the virtual address after the switch")
	}

	// The dead fairlead comes back; its keepalived leaves FAULT for BACKUP and, with nopreempt, does not
	// take the address back.
	<-lbs[active].exited
	kaLogAt := len(ka[active].log.String())
	restarted := time.Now()
	lbs[active] = startFairlead(t, tp, active, conf)
	testkit.Eventually(t, active+"'s keepalived to go back to BACKUP", 10*time.Second, func() bool {
		return strings.Contains(ka[active].log.String()[kaLogAt:], "Entering BACKUP STATE")
	})
	backup := time.Since(restarted)
	testkit.Eventually(t, "every tunnel to reopen", 10*time.Second, func() bool {
		client.send("open")
		n, _ := strconv.Atoi(client.expect("open ", 5*time.Second))
		return n == tunnels
	})
	time.Sleep(time.Second) // more load after the last tunnel reopened
	kept := tp.holdsVIP(standby) && !tp.holdsVIP(active)

	client.send("stop")
	var r Report
	if err := json.Unmarshal([]byte(client.expect("report ", 15*time.Second)), &r); err != nil {
		t.Fatal(err)
	}
	// kill is set just before the SIGKILL (failures and tunnel closes are counted from it), killed just
	// after (times are measured from it).
	kill, killedAt, sw := markOf(r, "kill"), markOf(r, "killed"), markOf(r, "switch")
	reopened := -1.0
	if kill.AllOpen >= 0 {
		reopened = kill.AllOpen - (killedAt.At - kill.At)
	}
	same := 0
	for _, p := range r.Placement {
		if p[0] != "" && p[0] == p[1] {
			same++
		}
	}
	fmt.Printf("keepalived-failover: check=%s elected=%s killed=%s vip_moved=%s "+
		"sent=%d ok=%d failed=%d%s failed_after_kill=%d/%d failed_after_switch=%d/%d "+
		"longest_gap=%.2fs first_ok_after_kill=%.2fs "+
		"tunnels=%d closed=%d reopened=%d all_reopened_after_kill=%.2fs dial_retries=%d same_server=%d/%d "+
		"placement=%s leader=%s/%s back_to_backup=%s vip_stayed=%t run=%s\n",
		check, elected.Round(10*time.Millisecond), active, moved.Round(10*time.Millisecond),
		r.Sent, r.OK, r.Failed, kinds(r.Errors), killedAt.Failed, killedAt.Sent, sw.Failed, sw.Sent,
		r.LongestGap, killedAt.FirstOK,
		r.Tunnels, r.Closed, r.Reopened, reopened, r.DialFails, same, r.Tunnels,
		spread(r), leaders[0], leaders[1], backup.Round(10*time.Millisecond), kept,
		time.Since(began).Round(100*time.Millisecond))

	if r.Failed != kill.Failed {
		t.Errorf("%d GETs failed before the kill", r.Failed-kill.Failed)
	}
	if r.LongestGap >= 10 {
		t.Errorf("no answer for %.2fs (from %.2fs to %.2fs), want under 10s", r.LongestGap, r.GapFrom, r.GapTo)
	}
	if sw.Sent == 0 || sw.Failed != 0 {
		t.Errorf("GETs sent after the switch: %d of %d failed (%v)", sw.Failed, sw.Sent, r.Errors)
	}
	if kill.Closed != tunnels || kill.AllOpen < 0 || r.Open != tunnels {
		t.Errorf("tunnels: %d closed after the kill (want %d), all reopened after %.2fs (-1: not all), %d open at the end",
			kill.Closed, tunnels, kill.AllOpen, r.Open)
	}
	if len(r.Moved) > 0 || same != tunnels {
		t.Errorf("assets on another connection server after the switch: %v (same server: %d of %d)", r.Moved, same, tunnels)
	}
	if !kept {
		t.Errorf("the virtual address did not stay on %s once %s's fairlead was back (nopreempt)", standby, active)
	}
}

// TestShippedKeepalivedExamplePassesKeepalivedsCheck: keepalived -t finds nothing wrong with the
// example, as either host (-i lb1, -i lb2). keepalived 2.2's exit code says nothing; its output does.
func TestShippedKeepalivedExamplePassesKeepalivedsCheck(t *testing.T) {
	bin, err := exec.LookPath("keepalived")
	if err != nil {
		t.Skip("keepalived is not installed (Debian: apt-get install keepalived; .ci/run does)")
	}
	abs, err := filepath.Abs(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"lb1", "lb2"} {
		out, _ := exec.Command(bin, "--config-test", "--use-file", abs, "--config-id", id).CombinedOutput()
		if len(out) > 0 {
			t.Errorf("keepalived -t -i %s:\n%s", id, out)
		}
	}
}

// fairleadConfig writes the one config directory both fairleads run: the front end on every address
// (so on the virtual address wherever it is), the admin listener on loopback where keepalived's check
// reaches it, a leader pool over the platforms and a sticky pool over the connection servers.
func fairleadConfig(t *testing.T, backend string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"00-listen.toml": `
[frontend]
listen = "0.0.0.0:8080"
[admin]
listen = "127.0.0.1:8404"
`,
		// Sorts before the platform route, which takes every path.
		"10-cxserver.toml": fmt.Sprintf(`
[pools.cxserver]
balance = "sticky"
servers = ["%[1]s:9181", "%[1]s:9182", "%[1]s:9183"]
[pools.cxserver.names]
"%[1]s:9181" = "cx1"
"%[1]s:9182" = "cx2"
"%[1]s:9183" = "cx3"
[pools.cxserver.sticky]
keys = ["header:X-Asset-Id"]
[pools.cxserver.check]
path = "/health"
interval = "500ms"
fast_interval = "250ms"
timeout = "500ms"
[[routes]]
websocket = true
paths = ["/Thingworx/WS"]
pool = "cxserver"
`, backend),
		"20-platform.toml": fmt.Sprintf(`
[pools.platform]
servers = ["%[1]s:9081", "%[1]s:9082"]
[pools.platform.names]
"%[1]s:9081" = "platform1"
"%[1]s:9082" = "platform2"
[pools.platform.check]
credentials = "YWRtaW46YWRtaW4="
interval = "1s"
timeout = "1s"
[[routes]]
pool = "platform"
`, backend),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startFairlead runs fairlead on conf in the node's namespace and waits until a GET through it reaches
// the leader.
func startFairlead(t *testing.T, tp *topology, node, conf string) *child {
	t.Helper()
	c := start(t, tp.ns(node), "fairlead "+node, nil, fairleadBin, "-config", conf)
	testkit.Eventually(t, "fairlead on "+node+" to serve", 15*time.Second, func() bool {
		if !c.alive() {
			t.Fatalf("fairlead on %s exited:\n%s", node, testkit.Tail(c.log.String(), 4000))
		}
		_, ok := tp.probe(node, "http://127.0.0.1:8080/")
		return ok
	})
	// ip netns exec has exec'd fairlead itself: a signal to this pid reaches fairlead.
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.cmd.Process.Pid)); strings.TrimSpace(string(comm)) != "fairlead" {
		t.Fatalf("pid %d is %q, not fairlead", c.cmd.Process.Pid, comm)
	}
	return c
}

// leaderOf returns the platform pool's leader as the node's fairlead sees it (admin /api/status).
func leaderOf(t *testing.T, tp *topology, node string) string {
	t.Helper()
	body, ok := tp.probe(node, "http://127.0.0.1:8404/api/status")
	if !ok {
		t.Fatalf("/api/status on %s: %s", node, body)
	}
	var st struct {
		Pools []struct {
			Name   string `json:"name"`
			Leader string `json:"leader"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/api/status on %s: %v", node, err)
	}
	for _, p := range st.Pools {
		if p.Name == "platform" {
			return p.Leader
		}
	}
	return ""
}

// keepalivedConfig is the shipped example with the test's addresses (192.0.2.x → 10.213.0.x, the same
// host numbers) and, when curl is missing, the same check by wget or by bash alone. It returns the
// config and the check used.
func keepalivedConfig(t *testing.T) (string, string) {
	t.Helper()
	b, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, want := range []string{exampleCheck, "interface eth0", "192.0.2.100/24 dev eth0",
		"@lb1 unicast_src_ip 192.0.2.11", "@lb2 unicast_src_ip 192.0.2.12"} {
		if !strings.Contains(conf, want) {
			t.Fatalf("%s no longer has %q: update keepalivedConfig to the example", exampleFile, want)
		}
	}
	conf = strings.ReplaceAll(conf, "192.0.2.", subnet)
	check := "curl"
	if p, err := exec.LookPath("curl"); err != nil {
		if p, err := exec.LookPath("wget"); err == nil {
			check = "wget"
			conf = strings.Replace(conf, exampleCheck, `"`+p+` -q -O /dev/null -T 1 http://127.0.0.1:8404/healthz"`, 1)
		} else {
			// bash's /dev/tcp: an HTTP/1.0 GET of /healthz; a 200 status line passes. keepalived unquotes
			// \" and turns \\r\\n into CR LF.
			check = "bash"
			conf = strings.Replace(conf, exampleCheck, `"/bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/8404 && `+
				`printf \"GET /healthz HTTP/1.0\\r\\n\\r\\n\" >&3 && read -t 1 s <&3 && [[ $s == *\" 200 \"* ]]'"`, 1)
		}
	} else if p != "/usr/bin/curl" {
		conf = strings.Replace(conf, `"/usr/bin/curl `, `"`+p+` `, 1)
	}
	path := filepath.Join(t.TempDir(), "keepalived.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, check
}

// startKeepalived runs keepalived (VRRP only, in the foreground, logging to its stderr) in the node's
// namespace as the config id node (the example's @lb1 / @lb2 lines). At cleanup it gets SIGTERM (it
// stops its VRRP child and gives the address up), and its VRRP child is killed if it outlived it.
func startKeepalived(t *testing.T, tp *topology, node, conf string) *child {
	t.Helper()
	bin, _ := exec.LookPath("keepalived")
	dir := t.TempDir()
	pid, vrrpPid := filepath.Join(dir, "keepalived.pid"), filepath.Join(dir, "vrrp.pid")
	stop := func(c *child) {
		c.terminate(5 * time.Second)
		if b, err := os.ReadFile(vrrpPid); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) == "keepalived" {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
	}
	return start(t, tp.ns(node), "keepalived "+node, stop, bin, "--dont-fork", "--vrrp", "--log-console",
		"--log-detail", "--no-syslog", "--use-file", conf, "--config-id", node, "--pid", pid, "--vrrp_pid", vrrpPid)
}

func markOf(r Report, name string) MarkReport {
	for _, m := range r.Marks {
		if m.Name == name {
			return m
		}
	}
	return MarkReport{Name: name, FirstOK: -1, AllOpen: -1}
}

// kinds formats failure counts by kind: " (refused=12 eof=3)", or "".
func kinds(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return " (" + strings.Join(parts, " ") + ")"
}

// spread formats the assets per connection server (first placement): "cx1:17,cx2:16,cx3:17".
func spread(r Report) string {
	n := map[string]int{}
	for _, p := range r.Placement {
		n[p[0]]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, n[k]))
	}
	return strings.Join(parts, ",")
}
