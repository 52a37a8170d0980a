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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fasthttp/websocket"
)

// binary is the fairlead executable built once for these black-box tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fairlead-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "fairlead")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fairlead: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runFairlead(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
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

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestShippedConfDPassesCheck(t *testing.T) {
	out, errOut, code := runFairlead(t, "-check", "-config", "../../conf.d")
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

func TestEveryConfigErrorExits2NamingFileAndKey(t *testing.T) {
	base := "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\n"
	f := func(name, bad string, want string) {
		t.Helper()
		dir := writeFiles(t, map[string]string{"10-base.toml": base, "20-bad.toml": bad})
		for _, args := range [][]string{{"-check", "-config", dir}, {"-config", dir}} {
			_, errOut, code := runFairlead(t, args...)
			if code != 2 || !strings.Contains(errOut, filepath.Join(dir, "20-bad.toml")+": "+want) {
				t.Errorf("%s (%v): exit %d, stderr %q; want exit 2 naming 20-bad.toml and %q", name, args, code, errOut, want)
			}
		}
	}
	f("unknown key", "[frontend]\nlisten_addr = \"127.0.0.1:1\"\n", "frontend.listen_addr: unknown key")
	f("undefined pool", "[[routes]]\npool = \"missing\"\n", "routes.1.pool: pool \"missing\" is not defined")
	f("empty server list", "[pools.cx]\nservers = []\n", "pools.cx.servers: empty server list")
	f("bad duration", "[pools.platform.check]\ntimeout = \"five seconds\"\n", "pools.platform.check.timeout: bad duration")
	f("bad address", "[admin]\nlisten = \"127.0.0.1\"\n", "admin.listen: bad address")

	// Every error is listed, not only the first.
	dir := writeFiles(t, map[string]string{"a.toml": "[frontend]\nlisen = 1\n[pools.p]\nservers = []\n[[routes]]\npool = \"q\"\n"})
	_, errOut, code := runFairlead(t, "-check", "-config", dir)
	if code != 2 || strings.Count(errOut, "a.toml: ") != 3 {
		t.Fatalf("exit %d, want 3 errors listed:\n%s", code, errOut)
	}
}

// startProcess runs fairlead on a config written for the cluster and waits until it serves.
func startProcess(t *testing.T, c *sim.Cluster) (*exec.Cmd, string) {
	t.Helper()
	return startProcessWith(t, c, "")
}

// startProcessWith is startProcess with more config in a file that sorts first (its routes come first).
func startProcessWith(t *testing.T, c *sim.Cluster, first string) (*exec.Cmd, string) {
	t.Helper()
	addr, admin := freeAddr(t), freeAddr(t)
	var servers []string
	for _, p := range c.Platforms {
		servers = append(servers, strconv.Quote(p.Addr))
	}
	dir := writeFiles(t, map[string]string{"00-first.toml": first, "fairlead.toml": fmt.Sprintf(`
[frontend]
listen = %q
[admin]
listen = %q
[pools.platform]
servers = [%s]
[pools.platform.check]
credentials = "YWRtaW46YWRtaW4="
interval = "200ms"
fast_interval = "100ms"
timeout = "300ms"
[[routes]]
pool = "platform"
`, addr, admin, strings.Join(servers, ", "))})
	cmd := exec.Command(binary, "-config", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) //nolint:errcheck
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fairlead did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, addr
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestSIGTERMStopsCleanly(t *testing.T) {
	c, err := sim.Start(sim.Options{Platforms: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd, addr := startProcess(t, c)
	resp, err := http.Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v %v", resp, err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}
}

// TestLargeBodiesStreamWithBoundedRSS sends a 256 MiB upload and a 256 MiB download through a real
// fairlead process and checks that its peak resident memory stays far below the body size.
func TestLargeBodiesStreamWithBoundedRSS(t *testing.T) {
	c, err := sim.Start(sim.Options{Platforms: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd, addr := startProcess(t, c)
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

	hwm := peakRSS(t, cmd.Process.Pid)
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
	c, err := sim.Start(sim.Options{Platforms: 2, Connections: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var addrs [2]string
	for k := range addrs {
		_, addrs[k] = startProcessWith(t, c, cxPool(c))
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
	var cx []string
	for _, s := range c.Connections {
		cx = append(cx, strconv.Quote(s.Addr))
	}
	return fmt.Sprintf(`
[pools.cxserver]
balance = "sticky"
servers = [%s]
[pools.cxserver.sticky]
keys = ["header:X-Asset-Id", "source"]
[pools.cxserver.check]
path = "/health"
interval = "200ms"
[[routes]]
websocket = true
paths = ["/Thingworx/WS"]
pool = "cxserver"
`, strings.Join(cx, ", "))
}

// syncBuffer is a bytes.Buffer safe for the process's stderr copier and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestSIGHUPReloadsAndABadConfigKeepsTheRunningOne(t *testing.T) {
	c, err := sim.Start(sim.Options{Platforms: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr, admin := freeAddr(t), freeAddr(t)
	dir := writeFiles(t, map[string]string{"10-base.toml": fmt.Sprintf(`
[frontend]
listen = %q
[admin]
listen = %q
[pools.platform]
servers = [%q, %q]
[pools.platform.check]
credentials = "YWRtaW46YWRtaW4="
interval = "200ms"
[[routes]]
pool = "platform"
`, addr, admin, c.Platforms[0].Addr, c.Platforms[1].Addr)})
	var stderr syncBuffer
	cmd := exec.Command(binary, "-config", dir)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }() //nolint:errcheck
	metric := func(name string) string {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		return ""
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; stderr:\n%s", what, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUntil("fairlead to serve", func() bool { return metric("fairlead_config_last_reload_successful") == "1" })

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
