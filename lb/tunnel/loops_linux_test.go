//go:build linux && !tunnel_portable && !nbio_portable

package tunnel

import (
	"bytes"
	"testing"
)

// New tunnels are given to the loops in turn, both sockets of a tunnel belong to the same loop
// (which runs every turn of it), and each loop relays its own tunnels.
func TestTunnelsAreSpreadOverTheLoopsEachOwnedByOne(t *testing.T) {
	const loops, perLoop = 3, 4
	e := newEnv(t, Options{Loops: loops})
	if got := len(e.r.sys.loops); got != loops {
		t.Fatalf("%d loops, want %d", got, loops)
	}
	count := map[*loop]int{}
	for i := range loops * perLoop {
		client, up, tun := e.open("g", nil, nil, nil)
		lp := tun.sides[clientSide].lp
		if lp == nil || tun.sides[serverSide].lp != lp {
			t.Fatalf("tunnel %d: its sides belong to loops %p and %p", i, lp, tun.sides[serverSide].lp)
		}
		count[lp]++
		go echo(up)
		msg := []byte{byte(i), 1, 2, 3}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if got := readN(t, client, len(msg), hang); !bytes.Equal(got, msg) {
			t.Fatalf("tunnel %d: echo %v, want %v", i, got, msg)
		}
	}
	for _, lp := range e.r.sys.loops {
		if count[lp] != perLoop {
			t.Fatalf("tunnels per loop %v, want %d each", count, perLoop)
		}
	}
}
