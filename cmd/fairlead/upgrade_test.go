//go:build linux

package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// upgradeProc is a fairlead started from a copy of the binary that a test may replace, as an operator
// installs a new version over the old, with its PID file and its log in files (a pipe would keep the
// old process's Wait waiting for the new process, which inherits it).
type upgradeProc struct {
	t                testing.TB
	exe, pidFile     string
	addr, admin, log string
	conf             string // the config directory
	env              []string
	cmd              *exec.Cmd
	done             chan error
}

func startUpgradable(t *testing.T, c *sim.Cluster, files ...string) *upgradeProc {
	t.Helper()
	return startUpgradableEnv(t, c, nil, files...)
}

// startUpgradableEnv is startUpgradable with more environment variables.
func startUpgradableEnv(t *testing.T, c *sim.Cluster, env []string, files ...string) *upgradeProc {
	t.Helper()
	dir := t.TempDir()
	p := &upgradeProc{t: t, env: env, exe: filepath.Join(dir, "fairlead"), pidFile: filepath.Join(dir, "fairlead.pid"),
		addr: testkit.Addr(t), admin: testkit.Addr(t), log: filepath.Join(dir, "fairlead.log"), done: make(chan error, 1)}
	copyFile(t, testkit.Binary(t, "cmd/fairlead"), p.exe)
	all := map[string]string{"10-base.toml": baseConfig(p.addr, p.admin, c)}
	for i := 0; i+1 < len(files); i += 2 {
		all[files[i]] = files[i+1]
	}
	conf := testkit.WriteFiles(t, all)
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.conf = conf
	p.cmd = exec.Command(p.exe, "-pidfile", p.pidFile, "-upgrade-timeout", "3s", "-config", conf)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.SysProcAttr = testkit.DieWithTest()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill() //nolint:errcheck
		if pid := p.pid(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // the new process of an upgrade
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("log:\n%s", testkit.Tail(string(b), 6000))
		}
	})
	testkit.Eventually(t, "fairlead to serve", 15*time.Second, func() bool { return p.pid() == p.cmd.Process.Pid && getOK(p.addr) })
	return p
}

// pid is the PID the PID file names, 0 without one.
func (p *upgradeProc) pid() int {
	b, _ := os.ReadFile(p.pidFile)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func (p *upgradeProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	tmp := to + ".new"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if err := os.Rename(tmp, to); err != nil { // as an install does: the running file stays whole
		t.Fatal(err)
	}
}

func getOK(addr string) bool {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// connLoad opens a new connection for each GET, from two goroutines, until stop; it counts the
// attempts and those refused, reset or answered other than 200.
func connLoad(addr string, stop <-chan struct{}) (sofar func() int64, wait func() (tries, failed int64, first string)) {
	var tries, failed atomic.Int64
	var mu sync.Mutex
	var firstErr string
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				tries.Add(1)
				resp, err := c.Get("http://" + addr + "/")
				if err == nil {
					io.Copy(io.Discard, resp.Body) //nolint:errcheck
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = &net.AddrError{Err: "status " + resp.Status}
					}
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
				}
			}
		}()
	}
	return tries.Load, func() (int64, int64, string) { wg.Wait(); return tries.Load(), failed.Load(), firstErr }
}

// Issue 38: SIGUSR2 starts the binary now at the path fairlead was started from and hands the
// listeners over: connection attempts during the switch are never refused or reset, the new process
// (a new PID in the PID file) serves from the old one's state, and the old one exits 0. Twice in a row.
func TestSIGUSR2HandsTheListenersToTheNewProcessWithoutRefusingAConnection(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startUpgradable(t, c)
	for round := 1; round <= 2; round++ {
		old := p.pid()
		stop := make(chan struct{})
		sofar, wait := connLoad(p.addr, stop)
		testkit.Eventually(t, "load before the switch", 10*time.Second, func() bool { return sofar() >= 20 })
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "a new process in the PID file", 30*time.Second, func() bool { return p.pid() != old && p.pid() != 0 })
		testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return gone(old) })
		after := sofar()
		testkit.Eventually(t, "load after the switch", 10*time.Second, func() bool { return sofar() >= after+20 })
		close(stop)
		tries, failed, first := wait()
		if failed != 0 || tries < 10 {
			t.Errorf("round %d: %d of %d connection attempts failed during the switch (first: %s)", round, failed, tries, first)
		}
		if round == 1 {
			if err := <-p.done; err != nil {
				t.Errorf("the old process exited %v, want 0", err)
			}
		}
		if !strings.Contains(p.logText(), "binary upgrade: the new process serves") {
			t.Errorf("round %d: no line saying the new process serves", round)
		}
		// The new process counts on from the old one's count, and says whom it took over from.
		testkit.Eventually(t, "the upgrades counted", 10*time.Second, func() bool {
			return testkit.Metric(p.admin, `fairlead_upgrades_total{result="ok"}`) == strconv.Itoa(round)
		})
		if !strings.Contains(p.logText(), "took over from PID "+strconv.Itoa(old)) {
			t.Errorf("round %d: no upgraded event naming the old process %d", round, old)
		}
		// The status document (and the page's footer) names the process that serves and its predecessor.
		var st struct {
			Process struct {
				PID          int `json:"pid"`
				UpgradedFrom struct {
					PID int `json:"pid"`
				} `json:"upgraded_from"`
			} `json:"process"`
		}
		resp, err := http.Get("http://" + p.admin + "/api/status")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st) //nolint:errcheck // checked below
		resp.Body.Close()
		if st.Process.PID != p.pid() || st.Process.UpgradedFrom.PID != old {
			t.Errorf("round %d: /api/status process %+v, want PID %d upgraded from %d", round, st.Process, p.pid(), old)
		}
	}
}

// A new executable that exits at once: the old process keeps serving, says why at WARN, and a later
// SIGUSR2 with a good executable upgrades.
func TestABrokenNewExecutableLeavesTheOldProcessServing(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startUpgradable(t, c)
	good := p.exe + ".good"
	copyFile(t, p.exe, good)
	if err := os.WriteFile(p.exe+".bad", []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p.exe+".bad", p.exe); err != nil {
		t.Fatal(err)
	}
	old := p.pid()
	stop := make(chan struct{})
	_, wait := connLoad(p.addr, stop)
	syscall.Kill(old, syscall.SIGUSR2) //nolint:errcheck
	testkit.Eventually(t, "the failure to be logged", 30*time.Second, func() bool {
		return strings.Contains(p.logText(), "binary upgrade failed; this process keeps serving")
	})
	close(stop)
	if tries, failed, first := wait(); failed != 0 {
		t.Errorf("%d of %d requests failed while the upgrade failed (first: %s)", failed, tries, first)
	}
	if p.pid() != old || gone(old) || !getOK(p.addr) {
		t.Fatalf("after the failed upgrade: PID file %d (was %d), serving %v", p.pid(), old, getOK(p.addr))
	}
	if err := os.Rename(good, p.exe); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(old, syscall.SIGUSR2) //nolint:errcheck
	testkit.Eventually(t, "a new process", 30*time.Second, func() bool { return p.pid() != old && gone(old) && getOK(p.addr) })
}

// gone reports whether the process pid has exited (a zombie not yet waited for counts as exited).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// Issue 38: every plain WebSocket tunnel survives a binary upgrade: messages flowing both ways through
// it during the switch arrive whole, once and in order, neither end sees anything, and the connection
// servers see no new upgrade.
func TestSIGUSR2KeepsEveryTunnelOpenWithItsMessagesWholeAndInOrder(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	tf := newTLSFront(t)
	ca, tlsAddr := tf.ca, tf.addr
	// A connection server that speaks TLS only: a tunnel to it is TLS on both sides.
	sleaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tc := testkit.StartCluster(t, sim.Options{Platforms: 1, Connections: 1, TLS: &tls.Config{Certificates: []tls.Certificate{sleaf.TLS}},
		Logf: func(string, ...any) {}})
	caFile, err := ca.WriteCA(t.TempDir(), "upgrade-ca")
	if err != nil {
		t.Fatal(err)
	}
	var cxtls testkit.Config
	cxtls.Table("pools.cxtls").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(tc))
	cxtls.Table("pools.cxtls.sticky").Set("keys", []string{"header:X-Asset-Id"})
	cxtls.Table("pools.cxtls.check").Set("path", "/health").Set("interval", "200ms")
	cxtls.Table("pools.cxtls.tls").Set("enabled", true).Set("ca_file", caFile)
	cxtls.Array("routes").Set("websocket", true).Set("paths", []string{"/Thingworx/WSTunnelServer"}).Set("pool", "cxtls")
	p := startUpgradable(t, c, "05-cx.toml", cxPool(c), "04-cxtls.toml", cxtls.String(), "20-tls.toml", tf.conf)
	// A quarter each: ws://, wss:// to a plain server, ws:// to the TLS server, wss:// to it (TLS both
	// sides); every TLS session moves with its tunnel.
	const n = 20
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: tf.client.Clone()}
		url := [4]string{"ws://" + p.addr, "wss://" + tlsAddr, "ws://" + p.addr, "wss://" + tlsAddr}[i%4] +
			[4]string{"/Thingworx/WS", "/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelServer"}[i%4]
		ws, _, err := d.Dial(url, http.Header{"X-Asset-Id": {"asset-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		conns[i] = ws
	}
	upgrades := func() (sum int64) {
		for _, cs := range append(c.Connections, tc.Connections...) {
			sum += cs.Upgrades()
		}
		return sum
	}
	before := upgrades()
	var echoed atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				msg := strconv.Itoa(i) + ":" + strconv.Itoa(k)
				ws.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
				if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					errs <- err
					return
				}
				_, got, err := ws.ReadMessage()
				if err != nil {
					errs <- err
					return
				}
				if string(got) != msg {
					errs <- &net.AddrError{Err: "echo " + string(got) + ", want " + msg}
					return
				}
				echoed.Add(1)
			}
		}()
	}
	testkit.Eventually(t, "messages before the switch", 10*time.Second, func() bool { return echoed.Load() >= 200 })
	old := p.pid()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return p.pid() != old && gone(old) })
	after := echoed.Load()
	testkit.Eventually(t, "messages after the switch", 10*time.Second, func() bool { return echoed.Load() >= after+200 })
	close(stop)
	wg.Wait()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a tunnel's messages: %v", err)
		}
	}
	if got := upgrades(); got != before {
		t.Errorf("the connection servers saw %d new upgrades, want none", got-before)
	}
	testkit.Eventually(t, fmt.Sprintf("the log to say %d tunnels moved", n), 10*time.Second, func() bool { // the new process's line may come last
		return strings.Contains(p.logText(), strconv.Itoa(n)+" tunnels handed over") && strings.Contains(p.logText(), strconv.Itoa(n)+" tunnels taken over")
	})
}

// A new process that cannot start (a bad config: it exits 2) or never becomes ready (killed after
// -upgrade-timeout): the old process keeps serving, with nothing dropped, and says why.
func TestAnUpgradeToABadConfigOrAHungProcessLeavesTheOldOneServing(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startUpgradable(t, c)
	old := p.pid()
	try := func(what, want string) {
		t.Helper()
		stop := make(chan struct{})
		_, wait := connLoad(p.addr, stop)
		before := strings.Count(p.logText(), "binary upgrade failed")
		syscall.Kill(old, syscall.SIGUSR2) //nolint:errcheck
		testkit.Eventually(t, what+": the failure logged", 30*time.Second, func() bool {
			return strings.Count(p.logText(), "binary upgrade failed") > before
		})
		close(stop)
		if tries, failed, first := wait(); failed != 0 {
			t.Errorf("%s: %d of %d requests failed (first: %s)", what, failed, tries, first)
		}
		if p.pid() != old || gone(old) || !getOK(p.addr) {
			t.Errorf("%s: the old process does not serve on", what)
		}
		if !strings.Contains(p.logText(), want) {
			t.Errorf("%s: the log does not say %q", what, want)
		}
	}
	bad := filepath.Join(p.conf, "30-bad.toml")
	if err := os.WriteFile(bad, []byte("[pools.platform]\nbalance = \"nope\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	try("a bad config", "exited")
	os.Remove(bad) //nolint:errcheck
	if err := os.WriteFile(p.exe+".hang", []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := p.exe + ".good"
	copyFile(t, p.exe, good)
	if err := os.Rename(p.exe+".hang", p.exe); err != nil {
		t.Fatal(err)
	}
	try("a new process that never becomes ready", "timed out")
	os.Rename(good, p.exe) //nolint:errcheck
	if got := testkit.Metric(p.admin, `fairlead_upgrades_total{result="failed"}`); got != "2" {
		t.Errorf(`fairlead_upgrades_total{result="failed"} = %q, want 2`, got)
	}
	if n := strings.Count(p.logText(), "kind=upgrade_failed"); n != 2 {
		t.Errorf("%d upgrade_failed events logged, want 2", n)
	}
}

// systemd (Type=notify, NotifyAccess=all): fairlead says READY=1 with its PID when it serves, and the
// new process of a binary upgrade says MAINPID= its own, so that systemd follows it as the service's
// main process when the old one exits (and systemctl stop stops it). The test is systemd's notify
// socket: a datagram socket as systemd makes it, named by NOTIFY_SOCKET.
func TestSystemdIsToldTheNewMainPIDAfterABinaryUpgrade(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan string, 16)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := nc.Read(b)
			if err != nil {
				return
			}
			got <- string(b[:n])
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("no notification %s", what)
			return ""
		}
	}
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startUpgradableEnv(t, c, []string{"NOTIFY_SOCKET=" + sock})
	old := p.pid()
	if m := next("at start"); m != "MAINPID="+strconv.Itoa(old)+"\nREADY=1" {
		t.Fatalf("at start: %q", m)
	}
	syscall.Kill(old, syscall.SIGUSR2) //nolint:errcheck
	m := next("after the upgrade")
	testkit.Eventually(t, "a new process", 30*time.Second, func() bool { return p.pid() != old })
	if want := "MAINPID=" + strconv.Itoa(p.pid()) + "\nREADY=1"; m != want {
		t.Fatalf("after the upgrade: %q, want %q", m, want)
	}
}
