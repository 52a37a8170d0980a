//go:build unix

package handover

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Idle connections pass with their sockets, in batches under the kernel's limit, beside tunnels and
// before done: each one received is the same socket (what its client sends is read at the other end,
// and the other way), named by its listener and client (and marked a proxy_protocol sender's own
// where it was), and an HTTPS one with its TLS session as it was (a plain one with none).
func TestIdleConnectionsPassWithTheirSockets(t *testing.T) {
	a, b := channels(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = maxFiles + 3 // two messages
	clients := make([]net.Conn, n)
	var cs []Conn
	for i := range n {
		if clients[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer clients[i].Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		sf, err := s.(*net.TCPConn).File()
		s.Close() // the file keeps the socket open
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, Conn{Listener: "listen", Client: clients[i].LocalAddr().String(), ProxyLocal: i%3 == 0, File: sf})
		if i%2 == 1 {
			cs[i].Listener, cs[i].TLS = "tls_listen", sessionOf(i)
		}
	}
	sent := make(chan error, 1)
	go func() {
		err := SendConns(a, cs)
		for _, c := range cs {
			c.File.Close()
		}
		if err == nil {
			err = Done(a)
		}
		sent <- err
	}()
	var got []Conn
	err = Receive(b, Adopter{Tunnel: func(tn Tunnel) { t.Errorf("a tunnel: %+v", tn) }, Conn: func(c Conn) { got = append(got, c) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d connections received, want %d", len(got), n)
	}
	for i, c := range got {
		if c.Listener != cs[i].Listener || c.Client != clients[i].LocalAddr().String() || c.ProxyLocal != cs[i].ProxyLocal {
			t.Fatalf("connection %d: %s, %s, LOCAL %v; want %s, %s, %v", i, c.Listener, c.Client, c.ProxyLocal, cs[i].Listener, clients[i].LocalAddr(), cs[i].ProxyLocal)
		}
		if !reflect.DeepEqual(c.TLS, cs[i].TLS) {
			t.Fatalf("connection %d: its TLS session is not the one sent", i) // keys: not printed
		}
		sc, err := net.FileConn(c.File)
		c.File.Close()
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, clients[i], sc)
		sc.Close()
	}
}

// sessionOf is a TLS session's state told apart by i.
func sessionOf(i int) *tlsrecord.State {
	secret := func(b byte) []byte { s := make([]byte, 32); s[0], s[1] = b, byte(i); return s }
	return &tlsrecord.State{Version: tls.VersionTLS13, Suite: tls.TLS_AES_128_GCM_SHA256,
		Read:    tlsrecord.Direction{Secret: secret(1), Seq: uint64(i)},
		Write:   tlsrecord.Direction{Secret: secret(2), Seq: uint64(i) + 3},
		Pending: []byte{23, 3, 3, 0, byte(i)}, ServerName: "fairlead.example", ALPN: "http/1.1"}
}

// roundTrip checks that a and b are the two ends of one connection.
func roundTrip(t *testing.T, a, b net.Conn) {
	t.Helper()
	for _, p := range [][2]net.Conn{{a, b}, {b, a}} {
		p[1].SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if _, err := p[0].Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(p[1], buf); err != nil || string(buf) != "ping" {
			t.Fatalf("read %q, %v", buf, err)
		}
	}
}

// A connections message whose body does not name its sockets is refused, and its files are closed.
func TestAConnectionsMessageThatDoesNotNameItsSocketsIsRefused(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = decodeConns(Message{Kind: kindConns, Body: []byte(`[]`), Files: []*os.File{r}}, func(Conn) { t.Error("adopted") })
	if err == nil {
		t.Fatal("no error")
	}
	if err := r.Close(); err == nil {
		t.Error("the message's file was left open")
	}
}
