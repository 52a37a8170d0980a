//go:build linux

package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// demo is a run of bench/run.sh (`make run`) by a test: on the binaries this test built (through
// FAIRLEAD_DEMO_BIN, a directory of links to them) and with ports of its own.
type demo struct {
	t              *testing.T
	cmd            *exec.Cmd
	bin, tmp       string             // the binaries' directory; TMPDIR, where the run's config goes
	out            testkit.SyncBuffer // stdout and stderr
	exited         chan struct{}
	waitErr        error
	http, https    int
	admin, control int
}

// demoPorts are FAIRLEAD_DEMO_* ports no other test holds (platform, connection, config and appconfig
// servers take two each).
func demoPorts(t *testing.T) map[string]int {
	t.Helper()
	ports := map[string]int{}
	for _, v := range []string{"HTTP", "HTTPS", "ADMIN", "CONTROL", "IAM", "PLATFORM", "CONNECTION", "CONFIG", "APPCONFIG"} {
		n := 1
		if v == "PLATFORM" || v == "CONNECTION" || v == "CONFIG" || v == "APPCONFIG" {
			n = 2
		}
		p, err := testkit.FreePorts(n)
		if err != nil {
			t.Fatal(err)
		}
		ports[v] = p
	}
	return ports
}

// startDemo runs bench/run.sh with ports (FAIRLEAD_DEMO_<name>). It is killed, with all it started,
// at the end of the test if it still runs.
func startDemo(t *testing.T, ports map[string]int) *demo {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{t: t, bin: t.TempDir(), tmp: t.TempDir(), exited: make(chan struct{}),
		http: ports["HTTP"], https: ports["HTTPS"], admin: ports["ADMIN"], control: ports["CONTROL"]}
	for _, pkg := range []string{"cmd/fairlead", "cmd/fairlead-sim"} {
		if err := os.Symlink(testkit.Binary(t, pkg), filepath.Join(d.bin, filepath.Base(pkg))); err != nil {
			t.Fatal(err)
		}
	}
	d.cmd = exec.Command("bash", filepath.Join(root, "bench", "run.sh"))
	d.cmd.Env = append(os.Environ(), "FAIRLEAD_DEMO_BIN="+d.bin, "TMPDIR="+d.tmp)
	for name, p := range ports {
		d.cmd.Env = append(d.cmd.Env, fmt.Sprintf("FAIRLEAD_DEMO_%s=%d", name, p))
	}
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	// Its own process group, so that a failed test can end the script and all it started at once.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
		<-d.exited
		if t.Failed() {
			t.Logf("bench/run.sh output:\n%s", testkit.Tail(d.out.String(), 8000))
		}
	})
	return d
}

// wait waits (bounded) for the script's exit and returns its code.
func (d *demo) wait(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.exited:
	case <-time.After(timeout):
		d.t.Fatalf("bench/run.sh still running after %s", timeout)
	}
	if ee, ok := d.waitErr.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if d.waitErr != nil {
		d.t.Fatal(d.waitErr)
	}
	return 0
}

// leftovers are the processes still running one of the test's binaries, and what is left in TMPDIR.
func (d *demo) leftovers() []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), d.bin+"/") {
			left = append(left, "process "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	ents, _ := os.ReadDir(d.tmp)
	for _, e := range ents {
		left = append(left, "file "+filepath.Join(d.tmp, e.Name()))
	}
	return left
}

// TestMakeRunServesOnThePortsOfItsVariablesAndStopsEverythingOnSIGTERM: bench/run.sh with every port
// overridden starts the simulator and fairlead on them (HTTP, HTTPS with HTTP/2, the admin with the
// demo's display names), prints a guide naming them, and at SIGTERM stops all it started, exiting 0.
func TestMakeRunServesOnThePortsOfItsVariablesAndStopsEverythingOnSIGTERM(t *testing.T) {
	ports := demoPorts(t)
	d := startDemo(t, ports)
	testkit.Eventually(t, "the guide's last line", 60*time.Second, func() bool {
		select {
		case <-d.exited:
			t.Fatalf("bench/run.sh exited: %v", d.waitErr)
		default:
		}
		return strings.Contains(d.out.String(), "Ctrl-C stops everything.")
	})
	out := d.out.String()
	for _, want := range []string{
		fmt.Sprintf(" listening on 127.0.0.1:%d (HTTP) and 127.0.0.1:%d (HTTPS), admin on 127.0.0.1:%d", d.http, d.https, d.admin),
		fmt.Sprintf("Status page (live; open it in a browser first):  http://127.0.0.1:%d/", d.admin),
		fmt.Sprintf("platform2 127.0.0.1:%d (standby)", ports["PLATFORM"]+1),
		fmt.Sprintf("cx1 127.0.0.1:%d and cx2 127.0.0.1:%d", ports["CONNECTION"], ports["CONNECTION"]+1),
		fmt.Sprintf("curl -s --http2 -k -o /dev/null -w '%%{http_version} %%{http_code}\\n' https://127.0.0.1:%d/Thingworx/Things", d.https),
		fmt.Sprintf("fairlead-sim devices -n 6 -url ws://127.0.0.1:%d/Thingworx/WS", d.http),
		fmt.Sprintf("-url wss://127.0.0.1:%d/Thingworx/WS -insecure", d.https),
		fmt.Sprintf("curl -s -XPOST http://127.0.0.1:%d/connection/cx1/down", d.control),
		fmt.Sprintf("curl -s -XPOST http://127.0.0.1:%d/platform/platform1/backup", d.control),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if strings.Contains(out, "(backup)") {
		t.Errorf("the guide calls a platform a backup (fairlead's backups tier is something else)")
	}

	// The leader answers through fairlead, over HTTP and over HTTPS with HTTP/2.
	get := func(c *http.Client, url string) *http.Response {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if r := get(plain, fmt.Sprintf("http://127.0.0.1:%d/Thingworx/Things", d.http)); r.StatusCode != 200 || r.Header.Get("X-Served-By") != "platform1" {
		t.Errorf("HTTP: %s, X-Served-By %q; want 200 from platform1", r.Status, r.Header.Get("X-Served-By"))
	}
	secure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the demo's certificate is made at start (curl -k)
	if r := get(secure, fmt.Sprintf("https://127.0.0.1:%d/Thingworx/Things", d.https)); r.StatusCode != 200 || r.ProtoMajor != 2 {
		t.Errorf("HTTPS: %s over %s; want 200 over HTTP/2", r.Status, r.Proto)
	}
	// Devices connect through wss:// out of the box, each saying where it landed.
	devices := exec.Command(filepath.Join(d.bin, "fairlead-sim"), "devices", "-n", "2", "-insecure",
		"-url", fmt.Sprintf("wss://127.0.0.1:%d/Thingworx/WS", d.https))
	var landed testkit.SyncBuffer
	devices.Stdout, devices.Stderr = &landed, &landed
	devices.SysProcAttr = testkit.DieWithTest()
	if err := devices.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "two devices to land over wss://", 15*time.Second, func() bool {
		return strings.Count(landed.String(), " connected to cx") == 2
	})
	devices.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	if err := devices.Wait(); err != nil {
		t.Errorf("devices: %v\n%s", err, landed.String())
	}

	// The status page's servers have the simulator's names.
	resp, err := plain.Get(fmt.Sprintf("http://127.0.0.1:%d/api/status", d.admin))
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Pools []struct {
			Servers []struct{ Name string }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&status)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range status.Pools {
		for _, s := range p.Servers {
			names = append(names, s.Name)
		}
	}
	for _, name := range []string{"platform1", "platform2", "cx1", "cx2", "config1", "appconfig2"} {
		if !slices.Contains(names, name) {
			t.Errorf("/api/status names its servers %q, none %s", names, name)
		}
	}
	plain.CloseIdleConnections()
	secure.CloseIdleConnections()

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	if left := d.leftovers(); len(left) > 0 {
		t.Errorf("left behind after SIGTERM:\n  %s", strings.Join(left, "\n  "))
	}
	if testkit.DialOK(fmt.Sprintf("127.0.0.1:%d", d.control)) {
		t.Errorf("the simulator's control port still accepts connections")
	}
}

// TestMakeRunStopsWithTheErrorWhenAPortIsTaken: with FAIRLEAD_DEMO_HTTP (or the simulator's
// FAIRLEAD_DEMO_CONTROL) held by another listener, fairlead (the simulator) cannot start; the script says
// so under its error, prints no guide, exits 1 and leaves no simulator or fairlead running.
func TestMakeRunStopsWithTheErrorWhenAPortIsTaken(t *testing.T) {
	f := func(port, says string) {
		t.Helper()
		ports := demoPorts(t)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[port]))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		d := startDemo(t, ports)
		if code := d.wait(60 * time.Second); code != 1 {
			t.Errorf("%s taken: exit %d, want 1", port, code)
		}
		out := d.out.String()
		for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", ports[port]), says, "FAIRLEAD_DEMO_" + port} {
			if !strings.Contains(out, want) {
				t.Errorf("%s taken: the output does not say %q", port, want)
			}
		}
		if strings.Contains(out, "Status page") {
			t.Errorf("%s taken: the guide is printed although the demo did not start", port)
		}
		if left := d.leftovers(); len(left) > 0 {
			t.Errorf("%s taken: left behind:\n  %s", port, strings.Join(left, "\n  "))
		}
	}
	f("HTTP", "make run: fairlead could not start (exit 1; its error is above)")
	f("CONTROL", "make run: the simulator (fairlead-sim) could not start (exit 1; its error is above)")
}
