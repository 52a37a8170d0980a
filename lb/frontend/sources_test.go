package frontend

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// A bucket of burst_per_source requests per address, refilled at rate_per_source: the burst passes at
// once, the next is refused with the seconds until one is back, and the rate comes back with the clock.
func TestSourcesAdmitABurstThenTheRate(t *testing.T) {
	clock := &testkit.Clock{}
	s := NewSources(SourceLimits{Rate: 50, Now: clock.Now})
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	admitted := func(addr netip.Addr, n int) (got, retry int) {
		for range n {
			ok, r := s.Admit(addr)
			if ok {
				got++
			} else {
				retry = r
			}
		}
		return got, retry
	}
	if got, retry := admitted(a, 200); got != 50 || retry != 1 {
		t.Fatalf("200 at once: %d admitted (Retry-After %d), want the 50 of the burst and Retry-After 1", got, retry)
	}
	if got, _ := admitted(b, 10); got != 10 {
		t.Fatalf("another address: %d of 10 admitted, want all: each address has its own bucket", got)
	}
	clock.Advance(100 * time.Millisecond)
	if got, _ := admitted(a, 10); got != 5 {
		t.Fatalf("100 ms later: %d admitted, want 5 (50 per second)", got)
	}
	clock.Advance(2 * time.Second)
	if got, _ := admitted(a, 200); got != 50 {
		t.Fatalf("2 s later: %d admitted, want a full burst of 50, no more", got)
	}
	if s.RateLimited.Load() != 150+5+150 {
		t.Errorf("%d counted limited, want %d", s.RateLimited.Load(), 150+5+150)
	}

	// A slower rate with a burst of its own: Retry-After is the whole seconds until a request is back.
	s.SetLimits(SourceLimits{Rate: 1, Burst: 3, Now: clock.Now})
	c := netip.MustParseAddr("2001:db8::1")
	if got, retry := admitted(c, 4); got != 3 || retry != 1 {
		t.Fatalf("rate 1, burst 3: %d admitted, Retry-After %d; want 3 and 1", got, retry)
	}
	// Off: everything passes.
	s.SetLimits(SourceLimits{Now: clock.Now})
	if got, _ := admitted(c, 100); got != 100 {
		t.Fatalf("rate_per_source 0: %d of 100 admitted", got)
	}
}

// Connections per address are counted from accept to their release; over max_conns_per_source a new one
// is refused; a trusted proxy is exempt; a release runs once.
func TestSourcesCountConnectionsPerAddress(t *testing.T) {
	s := NewSources(SourceLimits{MaxConns: 2, Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	conn := func(addr string) net.Conn { return fakeRemote{addr: addr} }
	r1, ok1 := s.accept(conn("192.0.2.1:1000"))
	r2, ok2 := s.accept(conn("192.0.2.1:1001"))
	_, ok3 := s.accept(conn("192.0.2.1:1002"))
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("three connections with a limit of two: %v %v %v", ok1, ok2, ok3)
	}
	if _, ok := s.accept(conn("192.0.2.9:1000")); !ok {
		t.Fatal("another address was refused")
	}
	for i := range 5 {
		if _, ok := s.accept(conn("10.1.2.3:" + string(rune('0'+i)))); !ok {
			t.Fatal("a trusted proxy's connection was refused")
		}
	}
	r1()
	r1() // once
	if n := s.Conns(netip.MustParseAddr("192.0.2.1")); n != 1 {
		t.Fatalf("%d connections counted after one release (twice), want 1", n)
	}
	if _, ok := s.accept(conn("192.0.2.1:1003")); !ok {
		t.Fatal("a connection after a release was refused")
	}
	r2()
	if s.ConnLimited.Load() != 1 {
		t.Errorf("%d counted limited, want 1", s.ConnLimited.Load())
	}
}

type fakeRemote struct {
	net.Conn
	addr string
}

func (f fakeRemote) RemoteAddr() net.Addr {
	ap := netip.MustParseAddrPort(f.addr)
	return net.TCPAddrFromAddrPort(ap)
}

// The table is bounded: addresses past it pass untracked (a new address has a full bucket anyway), and
// those whose bucket refilled make room again.
func TestSourcesTableIsBounded(t *testing.T) {
	clock := &testkit.Clock{}
	s := NewSources(SourceLimits{Rate: 1, Burst: 1, Now: clock.Now})
	size := func() (n int) {
		for i := range s.shards {
			n += len(s.shards[i].m)
		}
		return n
	}
	const n = 300_000
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if ok, _ := s.Admit(a); !ok {
			t.Fatalf("address %d, new, refused", i)
		}
	}
	if got, limit := size(), len(s.shards)*sourceShardMax; got > limit {
		t.Fatalf("%d addresses kept, over the bound of %d", got, limit)
	}
	clock.Advance(2 * time.Second) // every bucket is full again: the next new address sweeps its shard
	s.Admit(netip.MustParseAddr("192.0.2.200"))
	if got := size(); got > sourceShardMax*len(s.shards)-sourceShardMax+1 {
		t.Fatalf("%d addresses kept after their buckets refilled, want one shard swept", got)
	}
}
