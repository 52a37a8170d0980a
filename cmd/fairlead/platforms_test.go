package main

// fairlead where its users run it (issue #35). The same smoke test (start, proxy a request, open a
// WebSocket tunnel and close it, stop) runs a fairlead built for the portable paths (Windows, macOS,
// FreeBSD: Go's own socket reads and writes, two goroutines per tunnel), which this Linux machine builds
// with -tags nbio_portable,tunnel_portable, and the linux/arm64 binary under qemu-user. The builds and
// vets for each platform are make cross.

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// smokeWait bounds each step of the smoke test: a guard against a hang, ample for an emulated binary.
const smokeWait = 20 * time.Second

// TestThePortablePathsServeARequestAndATunnel runs fairlead as it runs on Windows, macOS and FreeBSD:
// lb/nbio's portable half and the portable tunnel engine, whose two pumps carry the tunnel.
func TestThePortablePathsServeARequestAndATunnel(t *testing.T) {
	tags := []string{"nbio_portable", "tunnel_portable"}
	bin := buildFor(t, testkit.Target{Tags: tags})
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && s.Value != strings.Join(tags, ",") {
			t.Fatalf("built with -tags %s, want %v", s.Value, tags)
		}
	}
	smoke(t, []string{bin}, 2)
}

// TestTheLinuxArm64BinaryServesARequestAndATunnel runs fairlead built for linux/arm64, under
// qemu-aarch64-static (natively on an arm64 machine): nbio's Linux half (epoll_pwait, the raw system
// calls) and the epoll tunnel engine, which carries the tunnel without a goroutine of its own.
func TestTheLinuxArm64BinaryServesARequestAndATunnel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a linux/arm64 binary runs on Linux")
	}
	var command []string
	if runtime.GOARCH != "arm64" {
		qemu, err := exec.LookPath("qemu-aarch64-static")
		if err != nil {
			t.Skip("qemu-aarch64-static is not installed (Debian: apt-get install qemu-user-static; .ci/run installs it)")
		}
		command = append(command, qemu)
	}
	bin := buildFor(t, testkit.Target{GOOS: "linux", GOARCH: "arm64"})
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	machine := f.Machine
	f.Close()
	if machine != elf.EM_AARCH64 {
		t.Fatalf("the binary is for %v, want EM_AARCH64", machine)
	}
	smoke(t, append(command, bin), 0)
}

// buildFor builds cmd/fairlead for tg, failing the test if it does not build.
func buildFor(t *testing.T, tg testkit.Target) string {
	t.Helper()
	bin, err := testkit.BuildFor("cmd/fairlead", tg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// smoke runs fairlead (command: the binary, after an emulator if it needs one) in front of a simulated
// cluster of one platform and one connection server. It proxies a request to the leader, opens a
// WebSocket tunnel to the connection server and echoes a message through it, checks that pumps
// goroutines of the portable tunnel engine carry it (two per tunnel; none under the epoll engine),
// closes it and waits until fairlead and the server count it closed, then stops fairlead with SIGTERM.
func smoke(t *testing.T, command []string, pumps int) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 1, Connections: 1})
	p := testkit.StartFairleadCommand(t, command, haFiles(c))

	client := &http.Client{Timeout: smokeWait, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get("http://" + p.Addr + "/Thingworx/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Fatalf("GET: %d, X-Served-By %q, %v; want 200 from %s", resp.StatusCode, resp.Header.Get("X-Served-By"), err, c.Platforms[0].Name)
	}
	t.Logf("GET /Thingworx/: %d, %d bytes from %s", resp.StatusCode, len(body), resp.Header.Get("X-Served-By"))

	d := websocket.Dialer{HandshakeTimeout: smokeWait}
	conn, resp, err := d.Dial("ws://"+p.Addr+"/Thingworx/WS", http.Header{"X-Asset-Id": {"smoke"}})
	if err != nil {
		t.Fatalf("WebSocket: %v", err)
	}
	defer conn.Close()
	if by := resp.Header.Get("X-Served-By"); by != c.Connections[0].Name {
		t.Fatalf("tunnel to %q, want %s", by, c.Connections[0].Name)
	}
	if err := conn.SetReadDeadline(time.Now().Add(smokeWait)); err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("fairlead "), 1000)
	if err := conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		t.Fatal(err)
	}
	if typ, got, err := conn.ReadMessage(); err != nil || typ != websocket.BinaryMessage || !bytes.Equal(got, msg) {
		t.Fatalf("echo: type %d, %d bytes, %v; want the %d bytes sent", typ, len(got), err, len(msg))
	}
	if n := countPumps(t, p.Admin); n != pumps {
		t.Errorf("%d goroutines of the portable tunnel engine carry the open tunnel, want %d", n, pumps)
	}

	closeMsg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	if err := conn.WriteControl(websocket.CloseMessage, closeMsg, time.Now().Add(smokeWait)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after the close: %v, want the server's close frame", err)
	}
	conn.Close()
	testkit.Eventually(t, "the tunnel to be closed", smokeWait, func() bool {
		return p.MetricInt("fairlead_tunnels_opened_total") == 1 && p.MetricInt("fairlead_tunnels_closed_total") == 1 &&
			c.Connections[0].OpenTunnels() == 0
	})
	p.Stop(smokeWait)
}

// countPumps is the number of goroutines of fairlead (its admin listener at admin) running the portable
// tunnel engine's pump.
func countPumps(t *testing.T, admin string) int {
	t.Helper()
	client := &http.Client{Timeout: smokeWait, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get("http://" + admin + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("goroutine dump: %d, %v", resp.StatusCode, err)
	}
	return strings.Count(string(b), "/lb/tunnel.(*Engine).pump(")
}
