package tunnel

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// Streamed tunnels: the client side is a TLS connection (as on fairlead's HTTPS listener), relayed to
// a plain upstream by two goroutines; same semantics as the epoll tunnels.

// tlsEnv makes the TLS side: the test's client end dials with TLS, the engine gets the server end.
type tlsEnv struct {
	*env
	server, client *tls.Config
	kept           bool // evented: crypto/tls keeps the sessions (tls_test.go)
}

func newTLSEnv(tb testing.TB, o Options) *tlsEnv {
	tb.Helper()
	ca, err := sim.NewCA("tunnel test CA")
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	return &tlsEnv{env: newEnv(tb, o),
		server: &tls.Config{Certificates: []tls.Certificate{leaf.TLS}},
		client: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}
}

// open returns the test's TLS client end and upstream end of a new streamed tunnel.
func (e *tlsEnv) open(group string, onClose func(Reason)) (client *tls.Conn, up *net.TCPConn, tun *Tunnel) {
	e.tb.Helper()
	c := e.conns()
	client = tls.Client(c.client, e.client)
	relayClient := tls.Server(c.relayClient, e.server)
	errc := make(chan error, 1)
	go func() { errc <- relayClient.Handshake() }()
	if err := client.Handshake(); err != nil {
		e.tb.Fatal(err)
	}
	if err := <-errc; err != nil {
		e.tb.Fatal(err)
	}
	tun, err := e.r.Add(relayClient, c.relayServer, nil, nil, group, onClose)
	if err != nil {
		e.tb.Fatal(err)
	}
	if tun.streams[clientSide] == nil { // carried by goroutines rather than epoll
		e.tb.Fatal("a TLS tunnel is not streamed")
	}
	e.tb.Cleanup(func() {
		client.Close()
		c.up.Close()
	})
	return client, c.up, tun
}

func TestStreamedTunnelRelaysLargeMessagesBothWays(t *testing.T) {
	e := newTLSEnv(t, Options{})
	client, up, tun := e.open("g", nil)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go client.Write(msg)                                   //nolint:errcheck
	if got := readN(t, up, len(msg), hang); !bytes.Equal(got, msg) {
		t.Fatal("client → server: bytes differ")
	}
	go up.Write(msg) //nolint:errcheck
	if got := readN(t, client, len(msg), hang); !bytes.Equal(got, msg) {
		t.Fatal("server → client: bytes differ")
	}
	// Counted once written: the reader may see the last bytes a moment before the count moves.
	if !testkit.Within(hang, func() bool { ts, tc := tun.Bytes(); return ts == uint64(len(msg)) && tc == uint64(len(msg)) }) {
		ts, tc := tun.Bytes()
		t.Fatalf("bytes counted %d/%d, want %d each way", ts, tc, len(msg))
	}
	if e.r.GroupLen("g") != 1 {
		t.Fatal("not in its group")
	}
}

// tlsCarriers are the two ways a TLS tunnel is carried, with the same semantics: streamed (the engine's
// TLS connection over a plain *net.TCPConn) and on the loops (over an *nbio.TCPConn, tls_test.go). The
// test's upstream end is plain.
var tlsCarriers = []struct {
	name string
	open func(e *tlsEnv, group string, onClose func(Reason)) (*tls.Conn, *net.TCPConn)
}{
	{"streamed", func(e *tlsEnv, group string, onClose func(Reason)) (*tls.Conn, *net.TCPConn) {
		client, up, _ := e.open(group, onClose)
		return client, up
	}},
	{"on the loops", func(e *tlsEnv, group string, onClose func(Reason)) (*tls.Conn, *net.TCPConn) {
		client, up, _ := e.openTLS(group, false, nil, onClose)
		return client, up.(*net.TCPConn)
	}},
}

func TestTLSTunnelHalfClosesAndEndsWithTheReasonOfWhoClosedFirst(t *testing.T) {
	for _, carrier := range tlsCarriers {
		t.Run(carrier.name, func(t *testing.T) { testTLSHalfClose(t, carrier.open) })
	}
}

func testTLSHalfClose(t *testing.T, open func(e *tlsEnv, group string, onClose func(Reason)) (*tls.Conn, *net.TCPConn)) {
	e := newTLSEnv(t, Options{})
	rs := newReasons()
	client, up := open(e, "g", rs.onClose)
	if err := up.CloseWrite(); err != nil { // the server is done sending
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(hang)) //nolint:errcheck
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client read after the server's half-close: %v, want EOF", err)
	}
	client.Write([]byte("late")) //nolint:errcheck // the client can still send
	if got := readN(t, up, 4, hang); string(got) != "late" {
		t.Fatalf("got %q after the half-close", got)
	}
	client.CloseWrite() //nolint:errcheck
	rs.wait(t, hang)
	if rs.got[0] != ClosedByServer {
		t.Fatalf("reason %v, want %v", rs.got[0], ClosedByServer)
	}
}

func TestTLSTunnelIdleTimeoutAndCloseGroup(t *testing.T) {
	for _, carrier := range tlsCarriers {
		t.Run(carrier.name, func(t *testing.T) { testTLSIdleTimeoutAndCloseGroup(t, carrier.open) })
	}
}

func testTLSIdleTimeoutAndCloseGroup(t *testing.T, open func(e *tlsEnv, group string, onClose func(Reason)) (*tls.Conn, *net.TCPConn)) {
	e := newTLSEnv(t, Options{IdleTimeout: 200 * time.Millisecond})
	rs := newReasons()
	client, _ := open(e, "idle", rs.onClose)
	rs.wait(t, hang)
	if rs.got[0] != IdleTimeout {
		t.Fatalf("reason %v, want %v", rs.got[0], IdleTimeout)
	}
	expectEOF(t, client, hang)

	e2 := newTLSEnv(t, Options{})
	rs2 := newReasons()
	c2, _ := open(e2, "down", rs2.onClose)
	if n := e2.r.CloseGroup("down"); n != 1 {
		t.Fatalf("CloseGroup closed %d", n)
	}
	rs2.wait(t, hang)
	expectEOF(t, c2, hang)
}

// An idle streamed tunnel holds no large buffer: its goroutines wait with their small ones, and a burst's
// large buffer goes back to the pool once the burst is over.
func TestStreamedTunnelGivesBackItsLargeBufferWhenIdle(t *testing.T) {
	e := newTLSEnv(t, Options{BufferSize: 1 << 20}) // large buffers of 1 MiB: easy to see in the heap
	const n = 20
	var clients []*tls.Conn
	var ups []*net.TCPConn
	for range n {
		c, up, _ := e.open("g", nil)
		clients, ups = append(clients, c), append(ups, up)
	}
	burst := bytes.Repeat([]byte("x"), 256<<10)
	for i := range n {
		go clients[i].Write(burst) //nolint:errcheck
		readN(t, ups[i], len(burst), hang)
	}
	// Idle now: whatever the pool keeps, no tunnel holds a 1 MiB buffer (20 of them would be 20 MiB).
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > 16<<20 {
		t.Fatalf("heap in use %d MiB with %d idle streamed tunnels after a burst: large buffers are held", ms.HeapInuse>>20, n)
	}
}
