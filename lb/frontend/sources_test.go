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

// A binary upgrade hands the buckets over: an address that spent its rate in the old process has spent
// it in the new one, refilled by the rate for the time between the export and the import and no more;
// a full bucket is not handed over; the export keeps the emptiest buckets when it must choose.
func TestSourcesBucketsPassToAnotherTable(t *testing.T) {
	clock := &testkit.Clock{}
	lim := SourceLimits{Rate: 10, Burst: 20, Now: clock.Now}
	old := NewSources(lim)
	spent, half, idle := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("192.0.2.3")
	for range 20 {
		old.Admit(spent)
	}
	if ok, _ := old.Admit(spent); ok {
		t.Fatal("the 21st request of a burst of 20 passed")
	}
	for range 10 {
		old.Admit(half)
	}
	old.Admit(idle)
	clock.Advance(100 * time.Millisecond) // idle's bucket is full again (1 token at 10/s), spent has 1
	at, buckets := old.Export(100)
	if !at.Equal(clock.Now()) || len(buckets) != 2 {
		t.Fatalf("export at %v: %v, want the two buckets not full at %v", at, buckets, clock.Now())
	}

	clock.Advance(50 * time.Millisecond) // the gap of the switch
	nu := NewSources(lim)
	if n := nu.Import(at, buckets); n != 2 {
		t.Fatalf("%d buckets imported, want 2", n)
	}
	admitted := func(s *Sources, a netip.Addr, n int) (got int) {
		for range n {
			if ok, _ := s.Admit(a); ok {
				got++
			}
		}
		return got
	}
	// spent: 1 token at the export, 0.5 refilled since: one request, then refused with the old Retry-After.
	if got := admitted(nu, spent, 5); got != 1 {
		t.Fatalf("the address that spent its burst: %d of 5 admitted after the import, want 1", got)
	}
	if ok, retry := nu.Admit(spent); ok || retry != 1 {
		t.Fatalf("over the rate after the import: ok %v, Retry-After %d; want refused, 1", ok, retry)
	}
	// half: 10 left + 1 at the export, 0.5 since.
	if got := admitted(nu, half, 20); got != 11 {
		t.Fatalf("the address that spent half: %d of 20 admitted, want 11", got)
	}
	if got := admitted(nu, idle, 30); got != 20 {
		t.Fatalf("an address with a full bucket: %d of 30 admitted, want its burst of 20", got)
	}

	// A long gap refills: nothing to take. The rate off: nothing exported, nothing imported.
	if n := NewSources(lim).Import(at.Add(-time.Hour), buckets); n != 0 {
		t.Errorf("buckets exported an hour ago: %d imported, want 0 (full by now)", n)
	}
	if _, b := NewSources(SourceLimits{Now: clock.Now}).Export(100); b != nil {
		t.Errorf("rate_per_source off: exported %v", b)
	}

	// At most n: the emptiest.
	many := NewSources(lim)
	for i := range 50 {
		a := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		for range i % 20 {
			many.Admit(a)
		}
	}
	_, top := many.Export(5)
	if len(top) != 5 {
		t.Fatalf("export of at most 5: %d buckets", len(top))
	}
	// Left: 1 token at .19 and .39, 2 at .18 and .38, 3 at .17 and .37, more at the others.
	for _, b := range top {
		if b.Tokens > 3 {
			t.Errorf("export of at most 5: %v is not among the 5 emptiest (3 tokens left or fewer)", b)
		}
	}
}
