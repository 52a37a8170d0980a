//go:build linux && !tunnel_portable && !nbio_portable

package tunnel

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
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
	wrote := make(chan error, 1)
	go func() {
		var b [8]byte
		for i := range uint64(words) {
			binary.BigEndian.PutUint64(b[:], i)
			if _, err := client.Write(b[:]); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	read := make(chan error, 1)
	progress := make(chan uint64, 1024)
	go func() {
		var b [8]byte
		for i := range uint64(words) {
			if _, err := io.ReadFull(client, b[:]); err != nil {
				read <- err
				return
			}
			if got := binary.BigEndian.Uint64(b[:]); got != i {
				read <- &net.AddrError{Err: "word out of order", Addr: string(rune(got))}
				return
			}
			if i%20_000 == 0 {
				select {
				case progress <- i:
				default:
				}
			}
		}
		read <- nil
	}()

	for move := range 5 {
		<-progress // bytes are flowing
		cf, sf, err := tun.Detach(5 * time.Second)
		if err != nil {
			t.Fatalf("move %d: %v", move, err)
		}
		if r := <-reasons; r != HandedOver {
			t.Fatalf("move %d: the old tunnel ended %v, want handed over", move, r)
		}
		cc, err1 := net.FileConn(cf)
		sc, err2 := net.FileConn(sf)
		cf.Close()
		sf.Close()
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
