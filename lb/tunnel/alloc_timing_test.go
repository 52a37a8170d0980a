package tunnel

import (
	"io"
	"net"
	"testing"
)

// TestRelayDoesNotAllocatePerMessage counts the allocations of the whole process per 64-byte round trip
// (two relayed messages) through one tunnel: the test's own ends use fixed buffers, so every allocation
// would be the engine's. make test runs it without -race (the race detector allocates on its own).
func TestRelayDoesNotAllocatePerMessage(t *testing.T) {
	e := newEnv(t, Options{})
	client, up, _ := e.open("g", nil, nil, nil)
	// A stray allocation from the runtime (a timer, a goroutine stack) is allowed over 1000 round trips;
	// one per message is not.
	if n := allocsPerRoundTrip(t, client, up); n > 0.05 {
		t.Fatalf("%.3f allocations per round trip through the engine, want 0", n)
	}
}

// The same through a TLS tunnel on the loops (the client side TLS, as a wss:// device). The engine
// relays its session with fairlead's record layer (session.go), which allocates nothing: the one
// allocation per round trip is the test's own TLS end's (crypto/tls allocates once per read of its
// socket: readFromUntil's atLeastReader escapes, Go 1.26). A session crypto/tls keeps costs one more,
// the engine's read of it.
func TestTLSRelayDoesNotAllocatePerMessage(t *testing.T) {
	skipPortable(t)
	for _, c := range []struct {
		kept bool
		want float64
	}{{false, 1}, {true, 2}} {
		e := newTLSEnv(t, Options{})
		e.kept = c.kept
		client, up, _ := e.openTLS("g", false, nil, nil)
		if n := allocsPerRoundTrip(t, client, up); n > c.want+0.05 {
			t.Fatalf("session kept by crypto/tls %v: %.3f allocations per round trip through a TLS tunnel, want %.0f (crypto/tls's, one per read)", c.kept, n, c.want)
		}
	}
}

// allocsPerRoundTrip echoes up and measures the allocations per 64-byte round trip from client, over
// 1000 after 100 to warm the buffer pools.
func allocsPerRoundTrip(t *testing.T, client, up net.Conn) float64 {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	go echo(up)
	var msg, got [64]byte
	roundTrip := func() {
		if _, err := client.Write(msg[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, got[:]); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		roundTrip()
	}
	return testing.AllocsPerRun(1000, roundTrip)
}
