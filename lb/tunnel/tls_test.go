package tunnel

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// TLS tunnels on the event loops: the engine's side of a TLS connection is a *tls.Conn over an
// *nbio.TCPConn, as the front end's HTTPS listener and the upstream dialer make them. Its handshake
// is done before Add; then the loop reads its records only when the socket is readable, and writes
// never park it.

// evented returns the TLS end the engine gets, over tc (an nbio.TCPConn capturing its TLS session, as
// the front end and the dialer make them: Add takes the session over), once both handshakes are done
// (the test's end, over peer, is returned as well). With e.kept, tc only counts TLS records, as for a
// session the engine cannot take: crypto/tls keeps it.
func (e *tlsEnv) evented(tc, peer *net.TCPConn, engineIsServer bool) (engineEnd, testEnd *tls.Conn) {
	e.tb.Helper()
	nc, err := nbio.NewTCPConn(tc)
	if err != nil {
		e.tb.Fatal(err)
	}
	server, client := e.server, e.client
	if e.kept {
		nc.CountTLSRecords()
	} else {
		nc.CaptureTLS(engineIsServer)
		if engineIsServer {
			server = nc.TLSSession().Config(server, nil, nil)
		} else {
			client = nc.TLSSession().Config(client, nil, nil)
		}
	}
	if engineIsServer {
		engineEnd, testEnd = tls.Server(nc, server), tls.Client(peer, client)
	} else {
		engineEnd, testEnd = tls.Client(nc, client), tls.Server(peer, server)
	}
	errc := make(chan error, 1)
	go func() { errc <- engineEnd.Handshake() }()
	if err := testEnd.Handshake(); err != nil {
		e.tb.Fatal(err)
	}
	if err := <-errc; err != nil {
		e.tb.Fatal(err)
	}
	nc.HandshakeDone()
	return engineEnd, testEnd
}

// openTLS opens a tunnel whose client side is TLS on the loops, and whose server side is too when
// tlsUp; up is the test's upstream end (a *tls.Conn or a *net.TCPConn).
func (e *tlsEnv) openTLS(group string, tlsUp bool, toServer []byte, onClose func(Reason)) (client *tls.Conn, up net.Conn, tun *Tunnel) {
	e.tb.Helper()
	c := e.conns()
	relayClient, client := e.evented(c.relayClient, c.client, true)
	var relayServer net.Conn = c.relayServer
	up = c.up
	if tlsUp {
		relayServer, up = e.evented(c.relayServer, c.up, false)
	}
	tun, err := e.r.Add(relayClient, relayServer, toServer, nil, group, onClose)
	if err != nil {
		e.tb.Fatal(err)
	}
	if epollEngine && (tun.streams[clientSide] != nil || tun.tlsConns[clientSide] == nil) {
		e.tb.Fatal("a TLS connection over an nbio.TCPConn is streamed, not carried by a loop")
	}
	if _, own := tun.tlsConns[clientSide].(*tlsrecord.NetConn); epollEngine && own == e.kept {
		e.tb.Fatalf("the client side's session is fairlead's: %v, want %v", own, !e.kept)
	}
	e.tb.Cleanup(func() {
		client.Close()
		up.Close()
	})
	return client, up, tun
}

func TestTLSTunnelsOnTheLoopsRelayBothWaysByteExact(t *testing.T) {
	for _, c := range []struct {
		tlsUp, kept bool
	}{{false, false}, {true, false}, {true, true}} {
		tlsUp := c.tlsUp
		name := map[bool]string{false: "to a plain server", true: "to a TLS server"}[tlsUp] + map[bool]string{false: "", true: ", sessions kept by crypto/tls"}[c.kept]
		t.Run(name, func(t *testing.T) {
			e := newTLSEnv(t, Options{Loops: 1})
			e.kept = c.kept
			client, up, tun := e.openTLS("g", tlsUp, nil, nil)
			// Small messages, one at a time.
			for i := range 20 {
				msg := []byte{byte(i), 'a', 'b'}
				client.Write(msg) //nolint:errcheck
				if got := readN(t, up, len(msg), hang); !bytes.Equal(got, msg) {
					t.Fatalf("client → server: %q, want %q", got, msg)
				}
				up.Write(msg) //nolint:errcheck
				if got := readN(t, client, len(msg), hang); !bytes.Equal(got, msg) {
					t.Fatalf("server → client: %q, want %q", got, msg)
				}
			}
			// 1 MiB each way: many records, more than a turn reads, the sockets' buffers filled.
			msg := make([]byte, 1<<20)
			for i := range msg {
				msg[i] = byte(i * 13)
			}
			go client.Write(msg) //nolint:errcheck
			if got := readN(t, up, len(msg), hang); !bytes.Equal(got, msg) {
				t.Fatal("client → server: 1 MiB differs")
			}
			go up.Write(msg) //nolint:errcheck
			if got := readN(t, client, len(msg), hang); !bytes.Equal(got, msg) {
				t.Fatal("server → client: 1 MiB differs")
			}
			want := uint64(len(msg) + 20*3)
			if !testkit.Within(hang, func() bool { ts, tc := tun.Bytes(); return ts == want && tc == want }) {
				ts, tc := tun.Bytes()
				t.Fatalf("bytes counted %d/%d, want %d each way", ts, tc, want)
			}
		})
	}
}

// heldWrites is a connection whose writes are kept until flush writes them in one go.
type heldWrites struct {
	net.Conn
	hold bool
	buf  []byte
}

func (h *heldWrites) Write(b []byte) (int, error) {
	if h.hold {
		h.buf = append(h.buf, b...)
		return len(b), nil
	}
	return h.Conn.Write(b)
}

func (h *heldWrites) flush() error {
	h.hold = false
	_, err := h.Conn.Write(h.buf)
	return err
}

// Bytes that the engine's TLS connection read before Add (records that came with the upgrade) are
// relayed at once, though the socket announces nothing more.
func TestATLSTunnelRelaysTheRecordsItsConnectionHadAlreadyRead(t *testing.T) {
	for _, kept := range []bool{false, true} {
		e := newTLSEnv(t, Options{Loops: 1})
		c := e.conns()
		defer c.up.Close()
		nc, err := nbio.NewTCPConn(c.relayClient)
		if err != nil {
			t.Fatal(err)
		}
		server := e.server
		if kept {
			nc.CountTLSRecords()
		} else {
			nc.CaptureTLS(true)
			server = nc.TLSSession().Config(server, nil, nil)
		}
		relayClient := tls.Server(nc, server)
		held := &heldWrites{Conn: c.client}
		client := tls.Client(held, e.client)
		defer client.Close()
		errc := make(chan error, 1)
		go func() { errc <- relayClient.Handshake() }()
		if err := client.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		nc.HandshakeDone()
		// Two records in one TCP segment; the first byte is read before Add, as the upgrade's reader
		// would: the rest of the first record and all of the second are left in the TLS connection, and
		// the socket is empty. When the engine takes the session over, they come out of crypto/tls first.
		held.hold = true
		client.Write([]byte("first record")) //nolint:errcheck
		client.Write([]byte("+second"))      //nolint:errcheck
		if err := held.flush(); err != nil {
			t.Fatal(err)
		}
		one := make([]byte, 1)
		relayClient.SetReadDeadline(time.Now().Add(hang)) //nolint:errcheck
		if _, err := io.ReadFull(relayClient, one); err != nil {
			t.Fatal(err)
		}
		tun, err := e.r.Add(relayClient, c.relayServer, one, nil, "g", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, own := tun.tlsConns[clientSide].(*tlsrecord.NetConn); epollEngine && own == kept {
			t.Fatalf("session kept by crypto/tls %v, but the engine's: %v", kept, own)
		}
		if got := readN(t, c.up, len("first record+second"), hang); string(got) != "first record+second" {
			t.Fatalf("server got %q", got)
		}
		client.Write([]byte("third")) //nolint:errcheck // the next record, under the sequence number that follows
		if got := readN(t, c.up, len("third"), hang); string(got) != "third" {
			t.Fatalf("server got %q", got)
		}
		c.up.Write([]byte("back")) //nolint:errcheck
		if got := readN(t, client, 4, hang); string(got) != "back" {
			t.Fatalf("client got %q", got)
		}
	}
}

func TestIdleTLSTunnelsHoldNoGoroutine(t *testing.T) {
	skipPortable(t)
	e := newTLSEnv(t, Options{IdleTimeout: time.Minute})
	base := runtime.NumGoroutine()
	const n = 200
	for range n {
		e.openTLS("g", false, nil, nil)
	}
	got := runtime.NumGoroutine() - base
	t.Logf("%d idle TLS tunnels: %+d goroutines", n, got)
	if got >= 20 {
		t.Fatalf("%d goroutines for %d idle TLS tunnels", got, n)
	}
	client, up, _ := e.openTLS("g", false, nil, nil)
	client.Write([]byte("x")) //nolint:errcheck
	if string(readN(t, up, 1, hang)) != "x" {
		t.Fatal("relay broken")
	}
}

// The Go memory of an idle TLS tunnel (client side TLS, server side plain, as a wss:// device to a
// connection server): the engine's structures, the TLS connection's state after its handshake, and
// the two sockets. Budget: HAProxy's figure for the same tunnel in the bench (18.6 KiB, its whole
// process per tunnel), less the kernel's share, which is the same for both.
func TestMemoryPerIdleTLSTunnel(t *testing.T) {
	skipPortable(t)
	e := newTLSEnv(t, Options{IdleTimeout: time.Minute})
	const n = 300
	type ends struct {
		relay, test *tls.Conn
		c           conns
	}
	es := make([]ends, n)
	for i := range es {
		es[i].c = e.conns()
		es[i].relay, es[i].test = e.evented(es[i].c.relayClient, es[i].c.client, true)
		es[i].relay.Write([]byte("hello")) //nolint:errcheck // a first message each way, as after an upgrade
		readN(t, es[i].test, 5, hang)
	}
	m1 := heapInuse()
	for i := range es {
		if _, err := e.r.Add(es[i].relay, es[i].c.relayServer, []byte("hi"), nil, "g", nil); err != nil {
			t.Fatal(err)
		}
		readN(t, es[i].c.up, 2, hang)
		if !e.kept {
			es[i].relay = nil // the session is the engine's now: crypto/tls's connection is garbage
		}
	}
	m2 := heapInuse()
	per := float64(int64(m2)-int64(m1)) / n
	// The engine's record layer (its two AEADs and its state) replaces crypto/tls's connection, which
	// nothing holds once the tunnel is made (the front end lets it go at the hijack): less than nothing
	// is added.
	t.Logf("per idle TLS tunnel, added to the engine (crypto/tls's connection let go): %.0f B (heap+stack in use)", per)
	if per >= 2048 {
		t.Fatalf("adding an idle TLS tunnel costs %.0f B, budget 2048 (no goroutine, no buffer)", per)
	}
	runtime.KeepAlive(es)
	for _, x := range es {
		x.test.Close()
		x.c.up.Close()
	}
}

// A TLS receiver that does not read holds its loop no more than a plain one: with one loop, another
// tunnel keeps relaying, and the stalled one completes once its receiver reads.
func TestSlowTLSReceiverDoesNotBlockOthers(t *testing.T) {
	e := newTLSEnv(t, Options{Loops: 1, BufferSize: 16 << 10})
	slowC, slowUp, _ := e.openTLS("g", false, nil, nil)
	fastC, fastUp, _ := e.openTLS("g", false, nil, nil)

	const big = 8 << 20
	data := make([]byte, big)
	for i := range data {
		data[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() { // server → TLS client, which does not read yet
		_, err := slowUp.Write(data)
		wrote <- err
	}()
	waitWriteBlocked(t)

	go echo(fastUp)
	for i := range 50 {
		fastC.Write([]byte{byte(i)}) //nolint:errcheck
		if got := readN(t, fastC, 1, hang); !bytes.Equal(got, []byte{byte(i)}) {
			t.Fatal("fast tunnel corrupted")
		}
	}
	if got := readN(t, slowC, big, 2*hang); !bytes.Equal(got, data) {
		t.Fatal("slow tunnel corrupted")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// A TLS side that stops after a turn's reads for fairness, with the rest of a record already read
// from the socket into its connection, is turned again though the socket announces nothing.
func TestATLSSideThatYieldsWithARecordInHandIsTurnedAgain(t *testing.T) {
	e := newTLSEnv(t, Options{Loops: 1, BufferSize: 1024}) // a 16 KiB record takes 16 reads: 4 turns
	client, up, _ := e.openTLS("g", false, nil, nil)
	msg := make([]byte, 16<<10) // one record, the largest TLS has
	for i := range msg {
		msg[i] = byte(i * 5)
	}
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, up, len(msg), hang); !bytes.Equal(got, msg) {
		t.Fatal("the record arrived changed")
	}
}
