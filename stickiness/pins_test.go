package stickiness

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

func TestPinSendsAKeyToItsServerUntilUnpinned(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	if i, ok := tb.Lookup([]byte("upload-1"), p); ok || i != -1 {
		t.Fatalf("Lookup of an unknown key = %d, %v; want -1, false", i, ok)
	}
	tb.Pin([]byte("upload-1"), p, 2)
	for n := 0; n < 3; n++ {
		if i, ok := tb.Lookup([]byte("upload-1"), p); !ok || i != 2 {
			t.Fatalf("Lookup #%d = %d, %v; want 2, true", n, i, ok)
		}
	}
	// A pin ignores Up: the caller decides what a pinned key whose server is down means.
	p.setUp(2, false)
	if i, ok := tb.Lookup([]byte("upload-1"), p); !ok || i != 2 {
		t.Fatalf("Lookup with the server down = %d, %v; want 2, true", i, ok)
	}
	// The server found by name when the candidates change order; -1 when it is gone.
	if i, ok := tb.Lookup([]byte("upload-1"), newPool(threeServers[2], threeServers[0])); !ok || i != 0 {
		t.Fatalf("Lookup after reordering = %d, %v; want 0, true", i, ok)
	}
	if i, ok := tb.Lookup([]byte("upload-1"), newPool(threeServers[0])); !ok || i != -1 {
		t.Fatalf("Lookup with the server gone = %d, %v; want -1, true", i, ok)
	}
	// Pinning again moves the pin.
	tb.Pin([]byte("upload-1"), p, 0)
	if i, _ := tb.Lookup([]byte("upload-1"), p); i != 0 {
		t.Fatalf("Lookup after re-pinning = %d, want 0", i)
	}
	if !tb.Unpin([]byte("upload-1")) || tb.Unpin([]byte("upload-1")) {
		t.Fatal("Unpin: want true once, then false")
	}
	if _, ok := tb.Lookup([]byte("upload-1"), p); ok || tb.Len() != 0 {
		t.Fatalf("after Unpin: found %v, Len %d", ok, tb.Len())
	}
	checkInvariants(t, tb)
}

func TestPinsExpireExactlyTheirTTLAfterTheLastUse(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{IdleTimeout: 5 * time.Minute, Now: clock.Now})
	p := newPool(threeServers...)
	tb.Pin([]byte("a"), p, 1)
	clock.Advance(5*time.Minute - time.Nanosecond)
	if _, ok := tb.Lookup([]byte("a"), p); !ok {
		t.Fatal("pin gone before its TTL")
	}
	// The Lookup was a use: the TTL starts again from it.
	clock.Advance(5*time.Minute - time.Nanosecond)
	if _, ok := tb.Lookup([]byte("a"), p); !ok {
		t.Fatal("pin gone before its TTL after the last use")
	}
	// Without Expire running, Lookup itself does not return a pin past its TTL.
	clock.Advance(5 * time.Minute)
	if i, ok := tb.Lookup([]byte("a"), p); ok || i != -1 {
		t.Fatalf("Lookup past the TTL = %d, %v; want -1, false", i, ok)
	}
	if tb.Len() != 0 {
		t.Fatalf("expired pin still counted: Len %d", tb.Len())
	}
	// Expire removes unused pins too.
	tb.Pin([]byte("b"), p, 0)
	clock.Advance(5 * time.Minute)
	if n := tb.Expire(); n != 1 || tb.Len() != 0 {
		t.Fatalf("Expire removed %d, Len %d; want 1, 0", n, tb.Len())
	}
	checkInvariants(t, tb)
}

func TestPinsAreBoundedLongestUnusedFirstOut(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{MaxEntries: 3, IdleTimeout: time.Hour, Now: clock.Now})
	p := newPool(threeServers...)
	for i := 0; i < 3; i++ {
		tb.Pin(fmt.Appendf(nil, "id-%d", i), p, i)
		clock.Advance(time.Second)
	}
	tb.Lookup([]byte("id-0"), p) // used again: id-1 is now the longest unused
	clock.Advance(time.Second)
	tb.Pin([]byte("id-3"), p, 0)
	if tb.Len() != 3 {
		t.Fatalf("Len %d, want 3", tb.Len())
	}
	if _, ok := tb.Lookup([]byte("id-1"), p); ok {
		t.Fatal("id-1, the longest unused, is still pinned")
	}
	for _, k := range []string{"id-0", "id-2", "id-3"} {
		if _, ok := tb.Lookup([]byte(k), p); !ok {
			t.Fatalf("%s was evicted", k)
		}
	}
	checkInvariants(t, tb)
}

func TestCountByServerCountsThePins(t *testing.T) {
	tb := NewTable(TableOptions{})
	p := newPool(threeServers...)
	for i := 0; i < 5; i++ {
		tb.Pin(fmt.Appendf(nil, "id-%d", i), p, i%2)
	}
	got := tb.CountByServer()
	if got[threeServers[0]] != 3 || got[threeServers[1]] != 2 || got[threeServers[2]] != 0 {
		t.Fatalf("CountByServer = %v, want 3, 2, 0", got)
	}
	if n := tb.Forget(threeServers[0]); n != 3 || tb.CountByServer()[threeServers[0]] != 0 {
		t.Fatalf("Forget removed %d", n)
	}
}
