//go:build linux && !tunnel_portable && !nbio_portable

package tunnel

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Issue 38: a tunnel detached from one engine and added to another — as a binary upgrade moves it from
// the old process to the new — loses, repeats and reorders nothing while bytes flow both ways, and
// neither end sees the move. The client writes a counted stream that the server echoes; the tunnel
// moves five times in the middle of it.
func TestADetachedTunnelAddedToAnotherEngineRelaysEveryByteOnceInOrder(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }() //nolint:errcheck
		}
	}()
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	client, err := net.Dial("tcp", front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	accepted, err := front.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server, err := net.Dial("tcp", echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	engines := make([]*Engine, 2)
	for i := range engines {
		if engines[i], err = NewEngine(Options{Loops: 1}); err != nil {
			t.Fatal(err)
		}
		defer engines[i].Close()
	}
	reasons := make(chan Reason, 16)
	onClose := func(r Reason) { reasons <- r }
	tun, err := engines[0].Add(accepted, server, nil, nil, "g", onClose)
	if err != nil {
		t.Fatal(err)
	}

	const words = 400_000 // 3.2 MB each way
	progress, wrote, read := countedEcho(client, words, 20_000)

	for move := range 5 {
		<-progress // bytes are flowing
		d, err := tun.Detach(5 * time.Second)
		if err != nil {
			t.Fatalf("move %d: %v", move, err)
		}
		if r := <-reasons; r != HandedOver {
			t.Fatalf("move %d: the old tunnel ended %v, want handed over", move, r)
		}
		if d.ClientTLS != nil || d.ServerTLS != nil {
			t.Fatalf("move %d: a plain tunnel detached with a TLS session", move)
		}
		cc, err1 := Resume(d.Client, nil)
		sc, err2 := Resume(d.Server, nil)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if tun, err = engines[(move+1)%2].Add(cc, sc, nil, nil, "g", onClose); err != nil {
			t.Fatalf("move %d: Add: %v", move, err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatalf("the echoed stream: %v", err)
	}
	if n := engines[0].Len() + engines[1].Len(); n != 1 {
		t.Errorf("%d tunnels in the two engines, want the one moved", n)
	}
}

// Issue 38: a TLS tunnel moves the same way, with its sessions: each TLS side's record layer state
// (keys, sequence numbers, the part of a record read) passes through JSON, as a binary upgrade sends
// it, and the engine it is added to relays on with it. Both sides are TLS (a wss:// client, a TLS
// upstream), for each protocol version and AEAD suite the record layer has; the tunnel moves five
// times while a counted stream is echoed, and neither TLS peer sees anything.
func TestADetachedTLSTunnelMovesWithItsSessions(t *testing.T) {
	for _, c := range []struct {
		name  string
		max   uint16
		suite uint16
	}{
		{"TLS 1.3", tls.VersionTLS13, 0},
		{"TLS 1.2 AES-128-GCM", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		{"TLS 1.2 AES-256-GCM", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384},
		{"TLS 1.2 ChaCha20-Poly1305", tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTLSEnv(t, Options{Loops: 1})
			e.server.MaxVersion = c.max
			if c.suite != 0 {
				e.server.CipherSuites = []uint16{c.suite}
			}
			client, up, tun := e.openTLS("g", true, nil, nil)
			go io.Copy(up, up) //nolint:errcheck // the TLS upstream echoes
			other, err := NewEngine(Options{Loops: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			engines := []*Engine{e.r, other}

			progress, wrote, read := countedEcho(client, 100_000, 5_000)
			for move := range 5 {
				<-progress
				d, err := tun.Detach(5 * time.Second)
				if err != nil {
					t.Fatalf("move %d: %v", move, err)
				}
				if d.ClientTLS == nil || d.ServerTLS == nil {
					t.Fatalf("move %d: the sessions did not come with the sockets", move)
				}
				var states [2]tlsrecord.State
				for i, st := range []*tlsrecord.State{d.ClientTLS, d.ServerTLS} {
					b, err := json.Marshal(st)
					if err != nil {
						t.Fatal(err)
					}
					if err := json.Unmarshal(b, &states[i]); err != nil {
						t.Fatal(err)
					}
				}
				cc, err1 := Resume(d.Client, &states[0])
				sc, err2 := Resume(d.Server, &states[1])
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if tun, err = engines[(move+1)%2].Add(cc, sc, nil, nil, "g", nil); err != nil {
					t.Fatalf("move %d: Add: %v", move, err)
				}
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			if err := <-read; err != nil {
				t.Fatalf("the echoed stream: %v", err)
			}
		})
	}
}

// countedEcho writes words counted 8-byte words to c, whose other end echoes them, and reads them back
// checking that each comes once and in order: progress says every every-th word read (or drops it),
// wrote and read end with the writer's and the reader's error, nil when all went and came back.
func countedEcho(c io.ReadWriter, words, every uint64) (progress chan uint64, wrote, read chan error) {
	wrote, read, progress = make(chan error, 1), make(chan error, 1), make(chan uint64, 1024)
	go func() {
		var b [8]byte
		for i := range words {
			binary.BigEndian.PutUint64(b[:], i)
			if _, err := c.Write(b[:]); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	go func() {
		var b [8]byte
		for i := range words {
			if _, err := io.ReadFull(c, b[:]); err != nil {
				read <- err
				return
			}
			if got := binary.BigEndian.Uint64(b[:]); got != i {
				read <- fmt.Errorf("word %d where %d was due", got, i)
				return
			}
			if i%every == 0 {
				select {
				case progress <- i:
				default:
				}
			}
		}
		read <- nil
	}()
	return progress, wrote, read
}
