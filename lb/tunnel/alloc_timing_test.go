package tunnel

import (
	"io"
	"testing"
)

// TestRelayDoesNotAllocatePerMessage counts the allocations of the whole process per 64-byte round trip
// (two relayed messages) through one tunnel: the test's own ends use fixed buffers, so every allocation
// would be the engine's. make test runs it without -race (the race detector allocates on its own).
func TestRelayDoesNotAllocatePerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	e := newEnv(t, Options{})
	client, up, _ := e.open("g", nil, nil, nil)
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
	for i := 0; i < 100; i++ { // warm the buffer pools
		roundTrip()
	}
	// A stray allocation from the runtime (a timer, a goroutine stack) is allowed over 1000 round trips;
	// one per message is not.
	if n := testing.AllocsPerRun(1000, roundTrip); n > 0.05 {
		t.Fatalf("%.3f allocations per round trip through the engine, want 0", n)
	}
}

// The same through a TLS tunnel on the loops (the client side TLS, as a wss:// device). crypto/tls
// allocates once per read of its socket (readFromUntil's atLeastReader escapes, Go 1.26): one read per
// message is all the engine makes (it knows from the record count when the socket is drained, without
// reading it again), and the test's own TLS end makes one per answer: two per round trip, nothing else.
func TestTLSRelayDoesNotAllocatePerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	skipPortable(t)
	e := newTLSEnv(t, Options{})
	client, up, _ := e.openTLS("g", false, nil, nil)
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
	for i := 0; i < 100; i++ {
		roundTrip()
	}
	if n := testing.AllocsPerRun(1000, roundTrip); n > 2.05 {
		t.Fatalf("%.3f allocations per round trip through a TLS tunnel, want 2 (crypto/tls's, one per read)", n)
	}
}
