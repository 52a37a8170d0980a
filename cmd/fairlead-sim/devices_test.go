package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// deviceLines runs `fairlead-sim devices args...` and returns its stdout lines as they come, and a
// function that stops it with SIGTERM and fails the test unless it exits 0 within 5 s.
func deviceLines(t *testing.T, args ...string) (<-chan string, func()) {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "cmd/fairlead-sim"), append([]string{"devices"}, args...)...)
	cmd.SysProcAttr = testkit.DieWithTest()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() }) //nolint:errcheck
	stop := func() {
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		for range lines {
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("devices exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(5 * time.Second):
			t.Errorf("devices still running 5 s after SIGTERM")
		}
	}
	return lines, stop
}

// next returns the next line matching re with its submatches, failing the test after 15 s.
func next(t *testing.T, lines <-chan string, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("devices exited before a line matching %s", re)
			}
			t.Log(l)
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %s within 15 s", re)
		}
	}
}

// TestDevicesSayWhereTheyLandedAndMoveWhenTheirConnectionServerGoesDown: `fairlead-sim devices` through
// a real fairlead in front of two connection servers: each device says which server its tunnel landed
// on; when that server fails its health checks fairlead closes its tunnels, and each of its devices says
// so and lands on the other one.
func TestDevicesSayWhereTheyLandedAndMoveWhenTheirConnectionServerGoesDown(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 1, Connections: 2, Logf: func(string, ...any) {}})
	var cx testkit.Config
	cx.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c))
	cx.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id"})
	cx.Table("pools.cxserver.check").Set("path", "/health").Set("interval", 100*time.Millisecond).Set("fall", 2)
	cx.Array("routes").Set("websocket", true).Set("paths", []string{"/Thingworx/WS"}).Set("pool", "cxserver")
	f := testkit.StartFairlead(t, map[string]string{"10-cx.toml": cx.String()})

	const n = 4
	lines, stop := deviceLines(t, "-n", "4", "-retry", "100ms", "-url", "ws://"+f.Addr+"/Thingworx/WS")
	connected := regexp.MustCompile(`^\d\d:\d\d:\d\d (device-\d) connected to (cx\d)$`)
	on := map[string]string{} // device → server
	for range n {
		m := next(t, lines, connected)
		on[m[1]] = m[2]
	}
	testkit.Eventually(t, "the tunnels to be open", 10*time.Second, func() bool {
		return c.Connections[0].OpenTunnels()+c.Connections[1].OpenTunnels() == n
	})

	// The server holding device-1 fails its checks: its devices lose their tunnels and land on the other.
	down := on["device-1"]
	other := map[string]string{"cx1": "cx2", "cx2": "cx1"}[down]
	c.Connection(down).SetHealthy(false)
	moved := map[string]bool{}
	for d, s := range on {
		if s == down {
			moved[d] = true
		}
	}
	lost := regexp.MustCompile(`^\d\d:\d\d:\d\d (device-\d) lost its tunnel to (cx\d): .+; reconnecting$`)
	reconnected := regexp.MustCompile(`^\d\d:\d\d:\d\d (device-\d) reconnected to (cx\d) \(was on (cx\d)\)$`)
	either := regexp.MustCompile(lost.String() + "|" + reconnected.String())
	lostSeen, landed := map[string]bool{}, map[string]bool{}
	for len(landed) < len(moved) {
		l := next(t, lines, either)[0]
		if m := lost.FindStringSubmatch(l); m != nil {
			if !moved[m[1]] || m[2] != down {
				t.Fatalf("%q: only the devices on %s lose their tunnels", l, down)
			}
			lostSeen[m[1]] = true
			continue
		}
		m := reconnected.FindStringSubmatch(l)
		if !lostSeen[m[1]] || m[2] != other || m[3] != down {
			t.Fatalf("%q: want a device that lost its tunnel to %s reconnected to %s", l, down, other)
		}
		landed[m[1]] = true
	}
	testkit.Eventually(t, "every tunnel on "+other, 10*time.Second, func() bool {
		return c.Connection(other).OpenTunnels() == n && c.Connection(down).OpenTunnels() == 0
	})
	stop()
}

func TestDevicesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"devices", "-n", "0"}, {"devices", "-url", "http://x/"}, {"devices", "-nope"}, {"cert"}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit code %d, want 2", args, code)
		}
	}
}

// TestCertWritesACertificateAndItsKeyForLoopback: `fairlead-sim cert -dir DIR` (the demo's HTTPS
// certificate) writes a pair crypto/tls loads, for 127.0.0.1 and localhost, issued by the CA it writes.
func TestCertWritesACertificateAndItsKeyForLoopback(t *testing.T) {
	dir := t.TempDir()
	var out, errOut strings.Builder
	if code := run([]string{"cert", "-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := []string{dir + "/demo.crt", dir + "/demo.key", dir + "/demo-ca.crt"}
	if got := strings.Fields(out.String()); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("printed %q, want %q", got, want)
	}
	pair, err := tls.LoadX509KeyPair(want[0], want[1])
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(want[2])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if st, err := os.Stat(want[1]); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the key: %v %v, want mode 0600", st.Mode(), err)
	}
}
