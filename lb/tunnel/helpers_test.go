package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// hang is the deadline for something that must happen: generous, so that it is missed only
// when the engine hangs, never because the machine is slow (-race, a loaded CI runner). No test
// bounds how fast the engine is.
const hang = 5 * time.Second

// env is an engine between two loopback listeners: the test dials front as the client (the
// engine gets the accepted conn) and the engine's server conn is dialed to back (the test gets
// the accepted conn as the upstream).
type env struct {
	tb    testing.TB
	r     *Engine
	front net.Listener
	back  net.Listener
}

func newEnv(tb testing.TB, o Options) *env {
	tb.Helper()
	if o.Logf == nil {
		o.Logf = tb.Logf
	}
	r, err := NewEngine(o)
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{tb: tb, r: r, front: listen(tb), back: listen(tb)}
	tb.Cleanup(func() {
		r.Close()
		e.front.Close()
		e.back.Close()
	})
	return e
}

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// pair returns a connected pair: the end that dialed ln and the end ln accepted.
func pair(tb testing.TB, ln net.Listener) (dialed, accepted *net.TCPConn) {
	tb.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	return c.(*net.TCPConn), a.(*net.TCPConn)
}

// conns are the four sockets of one test tunnel: the test's client and upstream ends, and the
// two the engine gets.
type conns struct {
	client, relayClient, relayServer, up *net.TCPConn
}

func (e *env) conns() conns {
	var c conns
	c.client, c.relayClient = pair(e.tb, e.front)
	c.relayServer, c.up = pair(e.tb, e.back)
	return c
}

// open makes the sockets of a tunnel and Adds them; the test's ends are closed at cleanup.
func (e *env) open(group string, toServer, toClient []byte, onClose func(Reason)) (client, up *net.TCPConn, tun *Tunnel) {
	e.tb.Helper()
	c := e.conns()
	tun, err := e.r.Add(c.relayClient, c.relayServer, toServer, toClient, group, onClose)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(func() {
		c.client.Close()
		c.up.Close()
	})
	return c.client, c.up, tun
}

// reasons records onClose calls.
type reasons struct {
	mu   sync.Mutex
	got  []Reason
	done chan struct{}
}

func newReasons() *reasons { return &reasons{done: make(chan struct{}, 1000)} }

func (rs *reasons) onClose(r Reason) {
	rs.mu.Lock()
	rs.got = append(rs.got, r)
	rs.mu.Unlock()
	rs.done <- struct{}{}
}

func (rs *reasons) wait(tb testing.TB, d time.Duration) {
	tb.Helper()
	select {
	case <-rs.done:
	case <-time.After(d):
		tb.Fatal("onClose not called in time")
	}
}

func (rs *reasons) list() []Reason {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]Reason(nil), rs.got...)
}

// expectEOF reads c until EOF (or a reset/close error) within d, returning what it read. It
// reports a timeout with Errorf, so that it may run on any goroutine; the caller's checks of
// what it read stop the test.
func expectEOF(tb testing.TB, c net.Conn, d time.Duration) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		tb.Errorf("no EOF within %v (read %d bytes)", d, len(b))
	}
	return b
}

// readN reads exactly n bytes within d; a failure is reported with Errorf (see expectEOF) and
// returns what was read.
func readN(tb testing.TB, c net.Conn, n int, d time.Duration) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, n)
	m, err := io.ReadFull(c, b)
	if err != nil {
		tb.Errorf("read %d bytes: %v", n, err)
	}
	return b[:m]
}

func countFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

func waitGoroutines(tb testing.TB, want int, d time.Duration) {
	tb.Helper()
	if !testkit.Within(d, func() bool { return runtime.NumGoroutine() <= want }) {
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		tb.Fatalf("goroutines: %d, want <= %d\n%s", runtime.NumGoroutine(), want, buf[:n])
	}
}

// writeBlocked reports whether an engine goroutine is parked in the netpoller writing to a
// receiver whose socket buffers are full: with the epoll engine the goroutine that a blocked
// write is handed to (finishWrite, or finishFlush for a TLS receiver), with the portable one a tunnel's pump stuck in its Write.
// It reads the goroutines' stacks, as the engine has no hook for it.
func writeBlocked() bool {
	for _, g := range testkit.Goroutines() {
		header, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(header, "[IO wait") {
			continue
		}
		if strings.Contains(g, "tunnel.(*Engine).finishWrite(") || strings.Contains(g, "tunnel.(*Engine).finishFlush(") ||
			strings.Contains(g, "tunnel.(*Engine).pump(") && strings.Contains(g, "net.(*conn).Write(") {
			return true
		}
	}
	return false
}

// waitWriteBlocked waits until an engine write is blocked on a receiver that does not read (see
// writeBlocked), so that a test goes on only once the engine is really stalled on it.
func waitWriteBlocked(tb testing.TB) {
	tb.Helper()
	if !testkit.Within(hang, writeBlocked) {
		tb.Fatal("no engine write blocked on the receiver that does not read")
	}
}

// echo copies everything up reads back to it, until EOF or error, with a fixed buffer.
func echo(up net.Conn) {
	var buf [64 << 10]byte
	for {
		n, err := up.Read(buf[:])
		if n > 0 {
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stopIfFailed ends the test if a helper reported an error.
func stopIfFailed(tb testing.TB) {
	tb.Helper()
	if tb.Failed() {
		tb.FailNow()
	}
}

// skipPortable skips tests of properties only the epoll engine has.
func skipPortable(tb testing.TB) {
	if !epollEngine {
		tb.Skip("the portable engine has a goroutine and a buffer per direction")
	}
}
