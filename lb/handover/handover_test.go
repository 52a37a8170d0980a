//go:build unix

package handover

import (
	"bytes"
	"net"
	"os"
	"testing"
	"time"
)

// A new process's whole start, both ends in one test process (SCM_RIGHTS works within a process as
// between two): the hello over the shared channel, the listeners, which accept on the same socket in
// the taker, and a state larger than many packets, whole.
func TestANewProcessTakesTheListenersAndTheStateWhole(t *testing.T) {
	shared, peer, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	state := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320 KB: ten packets
	served := make(chan error, 1)
	go Serve(shared, func(ch *Channel, h Hello) {
		defer ch.Close()
		if h.PID != 42 || h.Version != "v2" {
			t.Errorf("hello %+v", h)
		}
		if err := Give(ch, Given{Listeners: map[string]Listener{"listen": {Config: "127.0.0.1:0", Listener: ln}}, State: state}); err != nil {
			served <- err
			return
		}
		served <- Done(ch)
	})

	ch, err := Join(peer, Hello{PID: 42, Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	g, err := Take(ch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.State, state) {
		t.Fatalf("state: %d bytes, want %d", len(g.State), len(state))
	}
	if err := WaitDone(ch); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	taken := g.Listeners["listen"]
	if taken.Listener == nil || taken.Config != "127.0.0.1:0" || taken.Addr().String() != ln.Addr().String() {
		t.Fatalf("listeners %v, want listen at %s", g.Listeners, ln.Addr())
	}
	// The old listener closes: the taken one, the same socket, still accepts.
	ln.Close()
	c, err := net.DialTimeout("tcp", taken.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial after the old listener closed: %v", err)
	}
	defer c.Close()
	a, err := taken.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	taken.Close()
	shared.Close()
}

// A channel whose other end closed between messages says so; a message with more sockets than it
// may carry is refused before anything is sent.
func TestAClosedChannelAndTooManySockets(t *testing.T) {
	a, b := channels(t)
	files := make([]*os.File, maxFiles+1)
	if err := a.Send(Message{Kind: "x", Files: files}); err == nil {
		t.Error("a message of 251 sockets was sent")
	}
	a.Close()
	if _, err := b.Receive(); err != errEOF {
		t.Errorf("Receive after the other end closed: %v, want the end", err)
	}
	b.Close()
}

// channels returns the two ends of a new channel; the test's cleanup closes them.
func channels(t *testing.T) (a, b *Channel) {
	t.Helper()
	a, f, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err = FromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
