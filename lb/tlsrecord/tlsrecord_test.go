package tlsrecord

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// exchange sends messages of several sizes both ways between ours and the peer, reading ours with
// buffers of bufSize, then closes both ways with close_notify.
func exchange(t *testing.T, ours *Conn, peer io.ReadWriter, bufSize int) {
	t.Helper()
	errc := make(chan error, 1)
	for i, n := range []int{1, 1024, maxPlaintext, 40000} {
		msg := payload(n, byte(i))
		go func() { _, err := ours.Write(msg); errc <- err }()
		if got, _ := readN(t, peer, n, 4096); !bytes.Equal(got, msg) {
			t.Fatalf("the peer read %d bytes that differ", n)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		msg = payload(n, byte(100+i))
		go func() { _, err := peer.Write(msg); errc <- err }()
		if got, _ := readN(t, ours, n, bufSize); !bytes.Equal(got, msg) {
			t.Fatalf("ours read %d bytes that differ", n)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	closeBoth(t, ours, peer, bufSize)
}

type closeWriter interface{ CloseWrite() error }

// closeBoth sends close_notify from ours, then from the peer: each reads io.EOF.
func closeBoth(t *testing.T, ours *Conn, peer io.ReadWriter, bufSize int) {
	t.Helper()
	if err := ours.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := peer.Read(make([]byte, 100)); n != 0 || err != io.EOF {
		t.Fatalf("the peer read %d, %v after our close_notify", n, err)
	}
	if _, err := ours.Write([]byte("late")); err == nil {
		t.Fatal("a write after close_notify")
	}
	if err := peer.(closeWriter).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, bufSize)
	for range 2 { // and it stays so
		if n, err := ours.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("ours read %d, %v after the peer's close_notify", n, err)
		}
	}
}

type interopCase struct {
	version, suite uint16
	rsa            bool
}

var interop12 = []interopCase{
	{tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, false},
	{tls.VersionTLS12, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, true},
	{tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, false},
	{tls.VersionTLS12, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, true},
	{tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, false},
	{tls.VersionTLS12, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, true},
}

// runInterop replaces either end of a crypto/tls session by a Conn, fresh or after records went
// through crypto/tls, and exchanges data with the crypto/tls peer; it returns the suite of TLS 1.3.
func runInterop(t *testing.T, tc interopCase) uint16 {
	var suite uint16
	for _, v := range []struct {
		client  bool
		pre     int
		bufSize int
	}{{true, 0, MaxRecord}, {true, 3, 1000}, {false, 0, 1000}, {false, 3, MaxRecord + 100}} {
		t.Run(fmt.Sprintf("client=%v/pre=%d/buf=%d", v.client, v.pre, v.bufSize), func(t *testing.T) {
			s := handshake(t, tc.version, tc.suite, tc.rsa)
			suite = s.suite
			s.pingPong(t, v.pre)
			ours, peer := s.ours(t, v.client)
			exchange(t, ours, peer, v.bufSize)
		})
	}
	return suite
}

func TestInteropTLS12(t *testing.T) {
	for _, tc := range interop12 {
		t.Run(tls.CipherSuiteName(tc.suite), func(t *testing.T) { runInterop(t, tc) })
	}
}

// TestInteropTLS13 runs with the suite crypto/tls picks: AES-128-GCM on a CPU with AES
// instructions (TestInteropTLS13NoAES has it pick ChaCha20-Poly1305).
func TestInteropTLS13(t *testing.T) {
	suite := runInterop(t, interopCase{tls.VersionTLS13, 0, false})
	t.Logf("negotiated %s", tls.CipherSuiteName(suite))
}

// TestInteropTLS13NoAES runs TestInteropTLS13 in a process of its own with GODEBUG=cpu.aes=off,
// under which crypto/tls prefers TLS_CHACHA20_POLY1305_SHA256. (No crypto/tls end ever picks
// TLS 1.3's AES-256-GCM when the other is crypto/tls: TestOpenSSLAES256 covers it.)
func TestInteropTLS13NoAES(t *testing.T) {
	if os.Getenv("TLSRECORD_CHILD") != "" {
		suite := runInterop(t, interopCase{tls.VersionTLS13, 0, false})
		if suite != tls.TLS_CHACHA20_POLY1305_SHA256 {
			t.Fatalf("negotiated %s", tls.CipherSuiteName(suite))
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInteropTLS13NoAES$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=cpu.aes=off", "TLSRECORD_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestInteropTLS13NoAES/client=false/pre=3") {
		t.Fatalf("the child did not run the subtests:\n%s", out)
	}
}

// states returns the States of a client and a server of version and suite, from random secrets.
func states(t testing.TB, version, suite uint16) (cs, ss State) {
	t.Helper()
	var err1, err2 error
	if version == tls.VersionTLS13 {
		s, _ := lookup(version, suite)
		a, b := make([]byte, s.hash().Size()), make([]byte, s.hash().Size())
		rand.Read(a)
		rand.Read(b)
		cs, err1 = TLS13(suite, true, b, a, 0, 0)
		ss, err2 = TLS13(suite, false, a, b, 0, 0)
	} else {
		m, cr, sr := make([]byte, 48), make([]byte, 32), make([]byte, 32)
		rand.Read(m)
		rand.Read(cr)
		rand.Read(sr)
		cs, err1 = TLS12(suite, true, m, cr, sr, 1, 1)
		ss, err2 = TLS12(suite, false, m, cr, sr, 1, 1)
	}
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return cs, ss
}

// pair returns two Conns, client and server, of version and suite over a TCP connection, from
// random secrets.
func pair(t testing.TB, version, suite uint16) (cli, srv *Conn, cliRaw, srvRaw *net.TCPConn) {
	t.Helper()
	cliRaw, srvRaw = tcpPair(t)
	cs, ss := states(t, version, suite)
	var err error
	if cli, err = New(cliRaw, cs); err != nil {
		t.Fatal(err)
	}
	if srv, err = New(srvRaw, ss); err != nil {
		t.Fatal(err)
	}
	return cli, srv, cliRaw, srvRaw
}

var allSuites = []struct{ version, suite uint16 }{
	{tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256},
	{tls.VersionTLS13, tls.TLS_AES_256_GCM_SHA384},
	{tls.VersionTLS13, tls.TLS_CHACHA20_POLY1305_SHA256},
	{tls.VersionTLS12, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
	{tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384},
	{tls.VersionTLS12, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256},
}

// TestPairs runs two Conns against each other, with KeyUpdates both ways in TLS 1.3.
func TestPairs(t *testing.T) {
	for _, sc := range allSuites {
		t.Run(tls.CipherSuiteName(sc.suite), func(t *testing.T) {
			cli, srv, _, _ := pair(t, sc.version, sc.suite)
			if sc.version == tls.VersionTLS13 {
				for _, a := range []*Conn{cli, srv} {
					b := cli
					if a == cli {
						b = srv
					}
					before := b.State().Read.Secret
					if err := a.KeyUpdate(true); err != nil {
						t.Fatal(err)
					}
					roundTrip(t, a, b, 3000)
					roundTrip(t, b, a, 3000) // b's answer to the request, then data under its new key
					if b.keyUpdateHandled != 1 || a.keyUpdateHandled != 1 {
						t.Fatalf("KeyUpdates handled: %d, %d", a.keyUpdateHandled, b.keyUpdateHandled)
					}
					if bytes.Equal(before, b.State().Read.Secret) {
						t.Fatal("the read secret did not change")
					}
					a.keyUpdateHandled, b.keyUpdateHandled = 0, 0
				}
			} else if err := cli.KeyUpdate(false); err == nil {
				t.Fatal("a KeyUpdate in TLS 1.2")
			}
			exchange(t, cli, srv, MaxRecord)
		})
	}
}

// roundTrip writes n bytes from a and reads them from b.
func roundTrip(t *testing.T, a, b *Conn, n int) {
	t.Helper()
	msg := payload(n, byte(n))
	errc := make(chan error, 1)
	go func() { _, err := a.Write(msg); errc <- err }()
	if got, _ := readN(t, b, n, MaxRecord); !bytes.Equal(got, msg) {
		t.Fatal("the data differ")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestKeyUpdateInterop: a Conn asks its crypto/tls peer for a KeyUpdate; crypto/tls takes ours and
// answers with its own, which the Conn takes.
func TestKeyUpdateInterop(t *testing.T) {
	for _, client := range []bool{true, false} {
		t.Run(fmt.Sprint("client=", client), func(t *testing.T) {
			s := handshake(t, tls.VersionTLS13, 0, false)
			ours, peer := s.ours(t, client)
			before := ours.State()
			for i := range 3 {
				if err := ours.KeyUpdate(i == 0); err != nil {
					t.Fatal(err)
				}
				msg := payload(5000, byte(i))
				if _, err := ours.Write(msg); err != nil {
					t.Fatal(err)
				}
				if got, _ := readN(t, peer, len(msg), 1000); !bytes.Equal(got, msg) {
					t.Fatal("the peer read other data")
				}
				if _, err := peer.Write(msg); err != nil {
					t.Fatal(err)
				}
				if got, _ := readN(t, ours, len(msg), MaxRecord); !bytes.Equal(got, msg) {
					t.Fatal("ours read other data")
				}
			}
			if ours.keyUpdateHandled != 1 {
				t.Fatalf("%d KeyUpdates from crypto/tls, want 1", ours.keyUpdateHandled)
			}
			after := ours.State()
			if bytes.Equal(before.Read.Secret, after.Read.Secret) || bytes.Equal(before.Write.Secret, after.Write.Secret) {
				t.Fatal("a secret did not change")
			}
			closeBoth(t, ours, peer, MaxRecord)
		})
	}
}

// TestSplitReads: records come one byte per read, between temporary errors, which Read returns
// keeping the partial record.
func TestSplitReads(t *testing.T) {
	for _, tc := range []interopCase{{tls.VersionTLS13, 0, false}, interop12[4]} {
		for _, bufSize := range []int{MaxRecord, 700} {
			t.Run(fmt.Sprintf("%s/buf=%d", tls.VersionName(tc.version), bufSize), func(t *testing.T) {
				s := handshake(t, tc.version, tc.suite, tc.rsa)
				c, err := New(&trickle{Conn: s.srvRaw}, s.state(t, false))
				if err != nil {
					t.Fatal(err)
				}
				msg := payload(3000, 9)
				for _, part := range [][]byte{msg[:1], msg[1:2000], msg[2000:]} {
					if _, err := s.cli.Write(part); err != nil {
						t.Fatal(err)
					}
				}
				got, temps := readN(t, c, len(msg), bufSize)
				if !bytes.Equal(got, msg) {
					t.Fatal("the data differ")
				}
				if temps < len(msg) {
					t.Fatalf("%d temporary errors, want one per byte at least", temps)
				}
				if c.Buffered() != 0 || c.HasRecord() {
					t.Fatalf("%d bytes left", c.Buffered())
				}
			})
		}
	}
}

// TestHandover: a Conn's State in the middle of a stream, holding plaintext, whole records and a
// partial record, resumed by a new Conn on a dup of the socket and on the same socket, loses
// nothing.
func TestHandover(t *testing.T) {
	for _, tc := range []interopCase{{tls.VersionTLS13, 0, false}, interop12[2]} {
		t.Run(tls.VersionName(tc.version), func(t *testing.T) {
			s := handshake(t, tc.version, tc.suite, tc.rsa)
			s.pingPong(t, 2)
			c, err := New(&atLeast{Conn: s.srvRaw, n: 3 * (1000 + 22)}, s.state(t, false))
			if err != nil {
				t.Fatal(err)
			}
			peer := s.cli
			msg := payload(3000, 1)
			for i := range 3 { // three records
				if _, err := peer.Write(msg[i*1000 : (i+1)*1000]); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := readN(t, c, 600, 600) // 400 bytes of plaintext are left, and two records
			st := c.State()
			if len(st.Plain) != 400 || len(st.Pending) < 2000 {
				t.Fatalf("state holds %d bytes of plaintext and %d raw", len(st.Plain), len(st.Pending))
			}
			f, err := s.srvRaw.File()
			if err != nil {
				t.Fatal(err)
			}
			dup, err := net.FileConn(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer dup.Close()
			c2, err := New(dup, st)
			if err != nil {
				t.Fatal(err)
			}
			if !c2.HasRecord() {
				t.Fatal("the new Conn holds no record")
			}
			rest, _ := readN(t, c2, 2400, MaxRecord)
			if got = append(got, rest...); !bytes.Equal(got, msg) {
				t.Fatal("the data differ")
			}
			roundTripPeer(t, c2, peer, 2000)

			// A partial record: resumed on the same socket.
			tr := &trickle{Conn: dup}
			c3, err := New(tr, c2.State())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := peer.Write(msg); err != nil {
				t.Fatal(err)
			}
			for c3.Buffered() < 100 {
				if n, err := c3.Read(make([]byte, MaxRecord)); n != 0 || !isTemporary(err) {
					t.Fatalf("read %d, %v", n, err)
				}
			}
			st = c3.State()
			if len(st.Pending) < 100 || c3.HasRecord() {
				t.Fatalf("%d bytes held", len(st.Pending))
			}
			c4, err := New(dup, st)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := readN(t, c4, len(msg), 1000); !bytes.Equal(got, msg) {
				t.Fatal("the data differ after the partial record")
			}
			roundTripPeer(t, c4, peer, 20000)
			closeBoth(t, c4, peer, MaxRecord)
		})
	}
}

// atLeast reads at least n bytes of its connection (fewer if b is shorter).
type atLeast struct {
	net.Conn
	n int
}

func (r *atLeast) Read(b []byte) (int, error) { return io.ReadAtLeast(r.Conn, b, min(r.n, len(b))) }

func isTemporary(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Temporary() //nolint:staticcheck // as the engine
}

// roundTripPeer sends n bytes each way between a Conn and a crypto/tls peer.
func roundTripPeer(t *testing.T, c *Conn, peer *tls.Conn, n int) {
	t.Helper()
	msg := payload(n, 3)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	if got, _ := readN(t, peer, n, 4096); !bytes.Equal(got, msg) {
		t.Fatal("the peer read other data")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	go func() { _, err := peer.Write(msg); errc <- err }()
	if got, _ := readN(t, c, n, MaxRecord); !bytes.Equal(got, msg) {
		t.Fatal("ours read other data")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestBadRecords: a corrupted record, a record too long, a change_cipher_spec and a fatal alert
// fail the connection, for good.
func TestBadRecords(t *testing.T) {
	for _, tc := range []interopCase{{tls.VersionTLS13, 0, false}, interop12[0], interop12[4]} {
		t.Run(tls.CipherSuiteName(tc.suite), func(t *testing.T) {
			bad := map[string][]byte{
				"too long":           {typeApplicationData, 3, 3, (maxBody + 1) >> 8, (maxBody + 1) & 0xff},
				"change_cipher_spec": {typeChangeCipherSpec, 3, 3, 0, 1, 1},
				"version":            {typeApplicationData, 3, 1, 0, 20},
			}
			for name, rec := range bad {
				s := handshake(t, tc.version, tc.suite, tc.rsa)
				c, _ := s.ours(t, true)
				if _, err := s.srvRaw.Write(rec); err != nil {
					t.Fatal(err)
				}
				if n, err := c.Read(make([]byte, MaxRecord)); n != 0 || err == nil || isTemporary(err) {
					t.Fatalf("%s: read %d, %v", name, n, err)
				}
				if _, err := s.srv.Read(make([]byte, 10)); err == nil || !strings.Contains(err.Error(), "remote error") {
					t.Fatalf("%s: the peer read %v", name, err)
				}
			}
			s := handshake(t, tc.version, tc.suite, tc.rsa)
			c, peer := s.ours(t, true)
			roundTripPeer(t, c, peer, 100)
			s.srvWrap.mu.Lock()
			s.srvWrap.armed = true
			s.srvWrap.mu.Unlock()
			if _, err := peer.Write(payload(100, 0)); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if n, err := c.Read(make([]byte, MaxRecord)); n != 0 || err != errBadRecordMAC {
					t.Fatalf("read %d, %v", n, err)
				}
			}
			// Ours told crypto/tls, with an alert.
			if _, err := peer.Read(make([]byte, 10)); err == nil || !strings.Contains(err.Error(), "remote error: tls: bad record MAC") {
				t.Fatalf("the peer read %v", err)
			}
			if _, err := c.Write([]byte("x")); err != errBadRecordMAC {
				t.Fatalf("a write after a failure: %v", err)
			}
			// A fatal alert: crypto/tls sends one for our corrupted record.
			s = handshake(t, tc.version, tc.suite, tc.rsa)
			c, err := New(&corrupter{Conn: s.srvRaw, armed: true}, s.state(t, false))
			if err != nil {
				t.Fatal(err)
			}
			peer = s.cli
			if _, err := c.Write(payload(100, 0)); err != nil {
				t.Fatal(err)
			}
			if _, err := peer.Read(make([]byte, 100)); err == nil {
				t.Fatal("crypto/tls took a corrupted record")
			}
			var ae AlertError
			if _, err := c.Read(make([]byte, 100)); !errors.As(err, &ae) || ae != 20 { // bad_record_mac
				t.Fatalf("read %v, want alert 20", err)
			}
		})
	}
}

// TestPostHandshakeMessages: a client ignores a NewSessionTicket; a server fails on one; TLS 1.2
// fails on any handshake message (renegotiation); a record of padding only fails.
func TestPostHandshakeMessages(t *testing.T) {
	ticket := []byte{msgNewSessionTicket, 0, 0, 3, 1, 2, 3}
	cli, srv, _, _ := pair(t, tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256)
	srv.wmu.Lock()
	_, err := srv.writeRecords(typeHandshake, ticket)
	srv.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, srv, cli, 500)
	roundTrip(t, cli, srv, 500)
	cli.wmu.Lock()
	_, err = cli.writeRecords(typeHandshake, ticket)
	cli.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Read(make([]byte, MaxRecord)); err == nil {
		t.Fatal("a server took a NewSessionTicket")
	}

	cli, srv, _, _ = pair(t, tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256)
	cli.wmu.Lock()
	_, err = cli.writeRecords(0, []byte{0, 0, 0}) // inner type 0 with padding: no content type
	cli.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Read(make([]byte, 100)); err == nil {
		t.Fatal("a record with no content type")
	}

	cli, srv, _, _ = pair(t, tls.VersionTLS12, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
	srv.wmu.Lock()
	_, err = srv.writeRecords(typeHandshake, []byte{0, 0, 0, 0}) // HelloRequest
	srv.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Read(make([]byte, MaxRecord)); err == nil || !strings.Contains(err.Error(), "renegotiation") {
		t.Fatalf("read %v", err)
	}
}

// TestHandoverClosed: a State carries the ends that close_notify closed.
func TestHandoverClosed(t *testing.T) {
	cli, srv, cliRaw, srvRaw := pair(t, tls.VersionTLS13, tls.TLS_CHACHA20_POLY1305_SHA256)
	if err := srv.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Read(make([]byte, MaxRecord)); err != io.EOF {
		t.Fatalf("read %v", err)
	}
	cst, sst := cli.State(), srv.State()
	if !cst.ReadClosed || cst.WriteClosed || sst.ReadClosed || !sst.WriteClosed {
		t.Fatalf("closed: client %v/%v, server %v/%v", cst.ReadClosed, cst.WriteClosed, sst.ReadClosed, sst.WriteClosed)
	}
	cli2, err := New(cliRaw, cst)
	if err != nil {
		t.Fatal(err)
	}
	srv2, err := New(srvRaw, sst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli2.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("read %v after the handover", err)
	}
	if _, err := srv2.Write([]byte("x")); err == nil {
		t.Fatal("a write after close_notify, after the handover")
	}
	roundTrip(t, cli2, srv2, 5000)
}

// TestRefused: suites and versions outside the supported ones, secrets of the wrong length, and
// bytes that are not a ServerHello are refused.
func TestRefused(t *testing.T) {
	k32, k48 := make([]byte, 32), make([]byte, 48)
	for name, err := range map[string]error{
		"1.3 CBC suite":  second(TLS13(tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, true, k32, k32, 0, 0)),
		"1.3 short":      second(TLS13(tls.TLS_AES_256_GCM_SHA384, true, k32, k32, 0, 0)),
		"1.2 1.3 suite":  second(TLS12(tls.TLS_AES_128_GCM_SHA256, true, k48, k32, k32, 0, 0)),
		"1.2 RSA kex":    second(TLS12(tls.TLS_RSA_WITH_AES_128_GCM_SHA256, true, k48, k32, k32, 0, 0)),
		"1.2 short":      second(TLS12(tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, true, k32, k32, k32, 0, 0)),
		"TLS 1.1":        second(New(nil, State{Version: tls.VersionTLS11, Suite: tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256})),
		"no ServerHello": second(serverRandom([]byte{21, 3, 3, 0, 2, 2, 40})),
		"short hello":    second(serverRandom(make([]byte, 42))),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func second[T any](_ T, err error) error { return err }
