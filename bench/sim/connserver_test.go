package sim_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

func dialWS(t *testing.T, addr, path string, hdr http.Header) (*websocket.Conn, *http.Response) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second}
	conn, resp, err := d.Dial("ws://"+addr+path, hdr)
	if err != nil {
		t.Fatalf("dial ws://%s%s: %s", addr, path, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, resp
}

func echo(t *testing.T, conn *websocket.Conn, mt int, msg []byte) {
	t.Helper()
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := conn.WriteMessage(mt, msg); err != nil {
		t.Fatalf("write: %s", err)
	}
	gotType, got, err := conn.ReadMessage()
	if err != nil {
		t.Fatalf("read: %s", err)
	}
	if gotType != mt || !bytes.Equal(got, msg) {
		t.Fatalf("echo: type %d len %d, want type %d len %d", gotType, len(got), mt, len(msg))
	}
}

func TestWebSocketEcho(t *testing.T) {
	c := startCluster(t, Options{Connections: 2})
	cx := c.Connections[1]
	hdr := http.Header{"X-Forwarded-For": {"10.9.8.7"}, "Cookie": {"JSESSIONID=1"}}
	conn, resp := dialWS(t, cx.Addr, "/Thingworx/WS", hdr)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Served-By") != "cx2" {
		t.Fatalf("upgrade: status %d, X-Served-By %q", resp.StatusCode, resp.Header.Get("X-Served-By"))
	}
	if cx.Upgrades() != 1 {
		t.Fatalf("Upgrades = %d", cx.Upgrades())
	}
	got := cx.LastUpgradeHeaders()
	if got.Get("X-Forwarded-For") != "10.9.8.7" || got.Get("Cookie") != "JSESSIONID=1" || got.Get("Host") != cx.Addr {
		t.Fatalf("LastUpgradeHeaders = %v", got)
	}

	bin := make([]byte, 1<<20)
	_, _ = rand.Read(bin)
	echo(t, conn, websocket.BinaryMessage, bin)
	text := []byte(strings.Repeat("ThingWorx é ", (1<<20)/13))
	echo(t, conn, websocket.TextMessage, text)
	big := make([]byte, 2<<20+1)
	_, _ = rand.Read(big)
	echo(t, conn, websocket.BinaryMessage, big)
	echo(t, conn, websocket.TextMessage, []byte("small"))
	if cx.OpenTunnels() != 1 {
		t.Fatalf("OpenTunnels = %d", cx.OpenTunnels())
	}

	// Any path upgrades.
	conn2, _ := dialWS(t, cx.Addr, "/", nil)
	echo(t, conn2, websocket.TextMessage, []byte("hi"))
	if cx.Upgrades() != 2 || cx.OpenTunnels() != 2 {
		t.Fatalf("Upgrades %d, OpenTunnels %d", cx.Upgrades(), cx.OpenTunnels())
	}
	_ = conn2.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	conn2.Close()
	testkit.Eventually(t, "tunnel to close", 5*time.Second, func() bool { return cx.OpenTunnels() == 1 })
	if other := c.Connections[0]; other.Upgrades() != 0 || other.LastUpgradeHeaders() != nil {
		t.Fatal("cx1 saw upgrades")
	}
}

func TestConnServerHealth(t *testing.T) {
	c := startCluster(t, Options{Connections: 2, ConnectionHealthAddrs: []string{"", "127.0.0.1:0"}})
	cl := newClient(t, 2*time.Second)
	shared, separate := c.Connections[0], c.Connections[1]

	check := func(addr, path string, want int) {
		t.Helper()
		resp, body := get(t, cl, "http://"+addr+path)
		if resp.StatusCode != want {
			t.Fatalf("GET %s%s: status %d, want %d (%q)", addr, path, resp.StatusCode, want, body)
		}
	}
	for _, s := range c.Connections {
		check(s.Addr, "/health", 200)
		check(s.HealthAddr, "/health", 200)
		check(s.Addr, "/", 400)
		check(s.Addr, "/Thingworx/WS", 400)
		s.SetHealthy(false)
		check(s.Addr, "/health", 503)
		check(s.HealthAddr, "/health", 503)
		if s.Healthy() {
			t.Fatal("Healthy() after SetHealthy(false)")
		}
		// WebSocket traffic is not affected.
		conn, _ := dialWS(t, s.Addr, "/ws", nil)
		echo(t, conn, websocket.TextMessage, []byte("still here"))
		s.SetHealthy(true)
		check(s.HealthAddr, "/health", 200)
	}
	check(separate.HealthAddr, "/", 404)
	if shared.HealthAddr != shared.Addr {
		t.Fatal("cx1 should serve health on its main port")
	}
}

func TestConnServerKillRestart(t *testing.T) {
	c := startCluster(t, Options{Connections: 1, ConnectionHealthAddrs: []string{"127.0.0.1:0"}})
	cx := c.Connections[0]
	conn, _ := dialWS(t, cx.Addr, "/ws", nil)
	echo(t, conn, websocket.BinaryMessage, []byte{1, 2, 3})
	// A plain keep-alive connection too.
	hc := dialRaw(t, cx.HealthAddr)
	if resp, _, err := hc.roundTrip("/health", time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}

	if err := cx.Kill(); err != nil {
		t.Fatal(err)
	}
	if cx.Alive() {
		t.Fatal("Alive after Kill")
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _, err := conn.ReadMessage()
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read on killed tunnel: want a connection error, got %v", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("killed tunnel noticed after %s", d)
	}
	if _, _, err := hc.roundTrip("/health", time.Second); err == nil || isTimeout(err) {
		t.Fatalf("health on killed server's connection: %v", err)
	}
	for _, addr := range []string{cx.Addr, cx.HealthAddr} {
		if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			t.Fatalf("dial %s succeeded after Kill", addr)
		}
	}
	testkit.Eventually(t, "tunnels to close", 5*time.Second, func() bool { return cx.OpenTunnels() == 0 })
	if err := cx.Kill(); err != nil {
		t.Fatal("second Kill:", err)
	}

	if err := cx.Restart(); err != nil {
		t.Fatal(err)
	}
	if !cx.Alive() {
		t.Fatal("not Alive after Restart")
	}
	if err := cx.Restart(); err != nil {
		t.Fatal("second Restart:", err)
	}
	conn2, _ := dialWS(t, cx.Addr, "/ws", nil)
	echo(t, conn2, websocket.TextMessage, []byte("back"))
	if resp, _, err := dialRaw(t, cx.HealthAddr).roundTrip("/health", time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("health after restart: %v %v", resp, err)
	}
	if cx.Upgrades() != 2 {
		t.Fatalf("Upgrades = %d", cx.Upgrades())
	}

	c.Close()
	if err := cx.Restart(); err == nil {
		t.Fatal("Restart after Close: want error")
	}
	_ = conn2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := conn2.ReadMessage(); err == nil {
		t.Fatal("tunnel survived Close")
	}
}

func TestConnServerPauseListenerKeepsOpenTunnels(t *testing.T) {
	c := startCluster(t, Options{Connections: 1})
	cx := c.Connections[0]
	conn, _ := dialWS(t, cx.Addr, "/ws", nil)
	echo(t, conn, websocket.TextMessage, []byte("before"))
	// A plain keep-alive connection, opened before the pause, is served too.
	hc := dialRaw(t, cx.Addr)
	if resp, _, err := hc.roundTrip("/health", time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}

	if err := cx.PauseListener(); err != nil {
		t.Fatal(err)
	}
	if err := cx.PauseListener(); err != nil {
		t.Fatal("second PauseListener:", err)
	}
	if !cx.Alive() || cx.Listening() {
		t.Fatalf("paused: Alive %v Listening %v, want true false", cx.Alive(), cx.Listening())
	}
	if nc, err := net.DialTimeout("tcp", cx.Addr, time.Second); err == nil {
		nc.Close()
		t.Fatal("dial succeeded while the listener is paused")
	}
	echo(t, conn, websocket.TextMessage, []byte("while paused"))
	if resp, _, err := hc.roundTrip("/health", time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive health while paused: %v %v", resp, err)
	}
	if cx.OpenTunnels() != 1 {
		t.Fatalf("OpenTunnels = %d while paused", cx.OpenTunnels())
	}

	if err := cx.ResumeListener(); err != nil {
		t.Fatal(err)
	}
	if err := cx.ResumeListener(); err != nil {
		t.Fatal("second ResumeListener:", err)
	}
	if !cx.Listening() {
		t.Fatal("not Listening after ResumeListener")
	}
	conn2, _ := dialWS(t, cx.Addr, "/ws", nil)
	echo(t, conn2, websocket.TextMessage, []byte("after"))
	echo(t, conn, websocket.TextMessage, []byte("first still here"))
	if cx.OpenTunnels() != 2 || cx.Upgrades() != 2 {
		t.Fatalf("OpenTunnels %d, Upgrades %d, want 2 and 2", cx.OpenTunnels(), cx.Upgrades())
	}

	// Kill closes the tunnels of every listen, paused or not; Restart listens again.
	if err := cx.PauseListener(); err != nil {
		t.Fatal(err)
	}
	if err := cx.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := conn.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("read on the tunnel of a killed paused server: %v, want a connection error", err)
	}
	testkit.Eventually(t, "tunnels to close", 5*time.Second, func() bool { return cx.OpenTunnels() == 0 })
	if err := cx.PauseListener(); err == nil {
		t.Fatal("PauseListener on a killed server: want an error")
	}
	if err := cx.ResumeListener(); err == nil {
		t.Fatal("ResumeListener on a killed server: want an error")
	}
	if err := cx.Restart(); err != nil {
		t.Fatal(err)
	}
	conn3, _ := dialWS(t, cx.Addr, "/ws", nil)
	echo(t, conn3, websocket.TextMessage, []byte("restarted"))
}

func TestConnServerHealthAnswersSlowOrLargeOnRequest(t *testing.T) {
	c := startCluster(t, Options{Connections: 1})
	cl := newClient(t, 5*time.Second)
	addr := c.Connections[0].Addr

	resp, body := get(t, cl, "http://"+addr+"/health?bytes=100000")
	if resp.StatusCode != 200 || len(body) != 100000 || body[:3] != "abc" || body[26:29] != "abc" {
		t.Fatalf("bytes=100000: status %d, %d bytes starting %q", resp.StatusCode, len(body), body[:min(len(body), 30)])
	}
	start := time.Now()
	if resp, body := get(t, cl, "http://"+addr+"/health?delay=300ms"); resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("delay=300ms: status %d %q", resp.StatusCode, body)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("delay=300ms answered after %s", took)
	}
	for _, bad := range []string{"delay=soon", "bytes=-1", "bytes=x"} {
		if resp, _ := get(t, cl, "http://"+addr+"/health?"+bad); resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400", bad, resp.StatusCode)
		}
	}
}
