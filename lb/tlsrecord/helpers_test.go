package tlsrecord

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// certs are a self-signed ECDSA and RSA certificate, made once.
var certs = sync.OnceValue(func() [2]tls.Certificate {
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	var out [2]tls.Certificate
	for i, k := range []any{ek, rk} {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: "localhost"},
			DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		var pub any
		switch k := k.(type) {
		case *ecdsa.PrivateKey:
			pub = &k.PublicKey
		case *rsa.PrivateKey:
			pub = &k.PublicKey
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, k)
		if err != nil {
			panic(err)
		}
		out[i] = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	return out
})

// keyLog collects what a KeyLogWriter writes: label → secret, and the client random.
type keyLog struct {
	mu           sync.Mutex
	secrets      map[string][]byte
	clientRandom []byte
}

func (k *keyLog) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.secrets == nil {
		k.secrets = map[string][]byte{}
	}
	for line := range strings.Lines(string(p)) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		r, err1 := hex.DecodeString(f[1])
		s, err2 := hex.DecodeString(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		k.clientRandom, k.secrets[f[0]] = r, s
	}
	return len(p), nil
}

// firstBytes records the first bytes written to a connection (the server's: its ServerHello).
type firstBytes struct {
	net.Conn
	mu  sync.Mutex
	buf []byte
}

func (f *firstBytes) Write(p []byte) (int, error) {
	f.mu.Lock()
	if len(f.buf) < 64 {
		f.buf = append(f.buf, p...)
	}
	f.mu.Unlock()
	return f.Conn.Write(p)
}

// corrupter flips a bit of what is written to its connection once armed; with mem, it reads and
// writes that buffer instead of its connection (a benchmark's).
type corrupter struct {
	net.Conn
	mu    sync.Mutex
	armed bool
	mem   *bytes.Buffer
}

func (c *corrupter) Read(p []byte) (int, error) {
	if c.mem != nil {
		return c.mem.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *corrupter) Write(p []byte) (int, error) {
	if c.mem != nil {
		return c.mem.Write(p)
	}
	c.mu.Lock()
	if c.armed && len(p) > headerLen+4 {
		q := append([]byte(nil), p...)
		q[headerLen+3] ^= 0x10
		p, c.armed = q, false
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// session is a TLS connection between two crypto/tls ends over a real TCP socket on 127.0.0.1.
type session struct {
	cli, srv       *tls.Conn
	cliRaw, srvRaw *net.TCPConn
	cliWrap        *corrupter
	srvWrap        *corrupter
	log            *keyLog
	hello          *firstBytes
	version, suite uint16
	// records each end has written and read through crypto/tls since the handshake
	cliSent, srvSent uint64
}

// tcpPair returns the two ends of a TCP connection on 127.0.0.1.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { cc.Close(); r.c.Close() })
	return cc.(*net.TCPConn), r.c.(*net.TCPConn)
}

// handshake runs a crypto/tls handshake of version (and, for TLS 1.2, suite; TLS 1.3's is Go's
// choice) with the server's certificate of kind rsa or not.
func handshake(t testing.TB, version, suite uint16, rsaCert bool) *session {
	t.Helper()
	cr, sr := tcpPair(t)
	s := &session{cliRaw: cr, srvRaw: sr, log: &keyLog{}, version: version}
	s.hello = &firstBytes{Conn: sr}
	s.cliWrap = &corrupter{Conn: cr}
	s.srvWrap = &corrupter{Conn: s.hello}
	cert := certs()[0]
	if rsaCert {
		cert = certs()[1]
	}
	scfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: version, MaxVersion: version,
		SessionTicketsDisabled: true, KeyLogWriter: s.log}
	ccfg := &tls.Config{InsecureSkipVerify: true, MinVersion: version, MaxVersion: version} //nolint:gosec // a test's own certificate
	if version == tls.VersionTLS12 {
		scfg.CipherSuites, ccfg.CipherSuites = []uint16{suite}, []uint16{suite}
	}
	s.cli, s.srv = tls.Client(s.cliWrap, ccfg), tls.Server(s.srvWrap, scfg)
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Handshake() }()
	if err := s.cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s.suite = s.cli.ConnectionState().CipherSuite
	if version == tls.VersionTLS12 && s.suite != suite {
		t.Fatalf("negotiated %s", tls.CipherSuiteName(s.suite))
	}
	return s
}

// pingPong exchanges n messages each way through crypto/tls (one record each, one at a time, so
// neither tls.Conn reads ahead).
func (s *session) pingPong(t testing.TB, n int) {
	t.Helper()
	buf := make([]byte, 64)
	for i := range n {
		msg := []byte{'p', byte(i)}
		if _, err := s.cli.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s.srv, buf[:2]); err != nil || !bytes.Equal(buf[:2], msg) {
			t.Fatalf("ping %d: %q %v", i, buf[:2], err)
		}
		if _, err := s.srv.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s.cli, buf[:2]); err != nil || !bytes.Equal(buf[:2], msg) {
			t.Fatalf("pong %d: %q %v", i, buf[:2], err)
		}
	}
	s.cliSent += uint64(n)
	s.srvSent += uint64(n)
}

// state returns the State of the client (or server) end, after the records pingPong counted.
func (s *session) state(t testing.TB, client bool) State {
	t.Helper()
	var st State
	var err error
	if s.version == tls.VersionTLS13 {
		cs, ss := s.log.secrets["CLIENT_TRAFFIC_SECRET_0"], s.log.secrets["SERVER_TRAFFIC_SECRET_0"]
		if client {
			st, err = TLS13(s.suite, true, ss, cs, s.srvSent, s.cliSent)
		} else {
			st, err = TLS13(s.suite, false, cs, ss, s.cliSent, s.srvSent)
		}
	} else {
		// The Finished messages took sequence number 0 of each direction.
		sr, err := serverRandom(s.hello.buf)
		if err != nil {
			t.Fatal(err)
		}
		master, cr := s.log.secrets["CLIENT_RANDOM"], s.log.clientRandom
		if client {
			st, err = TLS12(s.suite, true, master, cr, sr, 1+s.srvSent, 1+s.cliSent)
		} else {
			st, err = TLS12(s.suite, false, master, cr, sr, 1+s.cliSent, 1+s.srvSent)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// ours replaces the client (or server) end by a Conn; it returns it and the crypto/tls peer.
func (s *session) ours(t testing.TB, client bool) (*Conn, *tls.Conn) {
	t.Helper()
	raw, peer := s.srvRaw, s.cli
	if client {
		raw, peer = s.cliRaw, s.srv
	}
	c, err := New(raw, s.state(t, client))
	if err != nil {
		t.Fatal(err)
	}
	return c, peer
}

// tempErr is a temporary net.Error, as nbio.ErrWouldBlock.
type tempErr struct{}

func (tempErr) Error() string   { return "would block" }
func (tempErr) Timeout() bool   { return true }
func (tempErr) Temporary() bool { return true }

// trickle reads its connection one byte at a time, answering tempErr every other call.
type trickle struct {
	net.Conn
	turn int
}

func (r *trickle) Read(b []byte) (int, error) {
	r.turn++
	if r.turn%2 == 1 {
		return 0, tempErr{}
	}
	return r.Conn.Read(b[:1])
}

// readN reads exactly n bytes of plaintext from c with buffers of size bufSize, retrying on
// temporary errors (counted).
func readN(t testing.TB, c io.Reader, n, bufSize int) ([]byte, int) {
	t.Helper()
	out := make([]byte, 0, n)
	buf := make([]byte, bufSize)
	temps := 0
	for len(out) < n {
		m, err := c.Read(buf)
		out = append(out, buf[:m]...)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Temporary() { //nolint:staticcheck // as the engine
				temps++
				continue
			}
			t.Fatalf("after %d of %d bytes: %v", len(out), n, err)
		}
	}
	if len(out) != n {
		t.Fatalf("read %d bytes, want %d", len(out), n)
	}
	return out, temps
}

// payload returns n bytes of a pattern that depends on seed.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// serverRandom returns the server random of a TLS 1.2 handshake from the first bytes the server
// wrote (read by the client, written by the server): its ServerHello's record. crypto/tls does not
// tell it, and TLS12 needs it (fairlead takes it from nbio's capture; the tests from the bytes). b may hold more than the ServerHello; an error if it holds less.
func serverRandom(b []byte) ([]byte, error) {
	// record header (5), handshake header (4), server_version (2), random (32)
	if len(b) < 5+4+2+32 || b[0] != typeHandshake || b[5] != 2 {
		return nil, errors.New("tlsrecord: no ServerHello")
	}
	return clone(b[11:43]), nil
}
