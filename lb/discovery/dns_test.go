package discovery

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
	"github.com/miekg/dns"
)

// The dns provider against an in-process DNS server on a loopback port (discoverytest.Zone): each kind
// of answer, resolvers tried in turn, silent and failing resolvers, truncated answers, resolv.conf; and
// run through a Watcher: records followed within one resolve_interval, a resolver down, NXDOMAIN.

func TestDNSProviderResolvesEachKindOfAnswer(t *testing.T) {
	refused := discoverytest.StartZone(t)
	refused.SetRcode(dns.RcodeRefused)
	servfail := discoverytest.StartZone(t)
	servfail.SetRcode(dns.RcodeServerFailure)
	dead := discoverytest.StartZone(t)
	dead.Stop()
	z := discoverytest.StartZone(t)
	only := []string{z.Addr}

	// f resolves cx.test (port: the configured port) through resolvers: want the list, or an error
	// containing wantErr.
	f := func(what string, port int, resolvers []string, want []string, wantErr string) {
		t.Helper()
		pv, err := newDNSProvider(config.Discovery{Name: "cx.test", ResolveInterval: config.Duration{D: time.Second}, Port: port, Resolvers: resolvers}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := pv.(*dnsProvider).resolve(context.Background())
		switch {
		case wantErr != "":
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: got %v, %v; want the error %q", what, got, err, wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", what, err)
		default:
			slices.Sort(got)
			if got == nil || !slices.Equal(got, want) {
				t.Errorf("%s: got %#v, want %#v", what, got, want)
			}
		}
	}

	z.Set("cx.test. 5 IN SRV 0 0 9001 a.test.", "cx.test. 5 IN SRV 1 0 9002 b.test.", "a.test. 5 IN A 10.0.0.1",
		"b.test. 5 IN A 10.0.0.2", "b.test. 5 IN AAAA fd00::2")
	f("SRV with the additional section", 0, only, []string{"10.0.0.1:9001", "10.0.0.2:9002", "[fd00::2]:9002"}, "")
	if z.Queried("b.test.", "A") != 0 {
		t.Errorf("b.test. was asked for despite the additional section")
	}
	z.HideGlue("b.test.")
	f("SRV whose target is asked for", 0, only, []string{"10.0.0.1:9001", "10.0.0.2:9002", "[fd00::2]:9002"}, "")
	if z.Queried("b.test.", "A") != 1 || z.Queried("b.test.", "AAAA") != 1 || z.Queried("a.test.", "A") != 0 {
		t.Errorf("queries: b.test. A %d, AAAA %d, a.test. A %d; want 1, 1, 0",
			z.Queried("b.test.", "A"), z.Queried("b.test.", "AAAA"), z.Queried("a.test.", "A"))
	}
	z.Set("cx.test. 5 IN SRV 0 0 9001 a.test.", "cx.test. 5 IN SRV 0 0 9002 gone.test.", "a.test. 5 IN A 10.0.0.1")
	f("SRV with a target that has no address", 0, only, []string{"10.0.0.1:9001"}, "")
	z.Set("cx.test. 5 IN SRV 0 0 0 .")
	f("SRV \".\": no service", 0, only, []string{}, "")
	z.Set("cx.test. 5 IN A 10.0.0.1", "cx.test. 5 IN A 10.0.0.2", "cx.test. 5 IN AAAA fd00::1")
	f("A and AAAA with port", 8080, only, []string{"10.0.0.1:8080", "10.0.0.2:8080", "[fd00::1]:8080"}, "")
	f("A without port", 0, only, nil, "cx.test. has no SRV record and port is not set")
	z.Set("cx.test. 5 IN TXT \"no servers\"")
	f("a name without SRV, A or AAAA records", 8080, only, []string{}, "")
	z.Set()
	f("NXDOMAIN", 0, only, []string{}, "")
	f("NXDOMAIN without port", 0, only, []string{}, "")

	z.Set("cx.test. 5 IN SRV 0 0 9001 a.test.", "a.test. 5 IN A 10.0.0.1")
	f("resolvers tried in turn", 0, []string{dead.Addr, servfail.Addr, refused.Addr, z.Addr}, []string{"10.0.0.1:9001"}, "")
	f("no resolver answers", 0, []string{dead.Addr, servfail.Addr, refused.Addr}, nil,
		fmt.Sprintf("SRV cx.test.: no resolver answered (%s: ", dead.Addr))
	f("SERVFAIL and REFUSED named", 0, []string{servfail.Addr, refused.Addr}, nil,
		fmt.Sprintf("(%s: SERVFAIL; %s: REFUSED)", servfail.Addr, refused.Addr))

	// A resolver that never answers is given up after the timeout (resolve_interval, when shorter than
	// 2s) and the next one asked.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	pv, _ := newDNSProvider(config.Discovery{Name: "cx.test", ResolveInterval: config.Duration{D: 200 * time.Millisecond},
		Resolvers: []string{silent.LocalAddr().String(), z.Addr}}, Options{})
	start := time.Now()
	if got, err := pv.(*dnsProvider).resolve(context.Background()); err != nil || !slices.Equal(got, []string{"10.0.0.1:9001"}) {
		t.Errorf("a silent resolver first: %v, %v", got, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("a silent resolver was given up after %s, want about 200ms", d)
	}
	pv, _ = newDNSProvider(config.Discovery{Name: "cx.test", ResolveInterval: config.Duration{D: 200 * time.Millisecond},
		Resolvers: []string{silent.LocalAddr().String()}}, Options{})
	if _, err := pv.(*dnsProvider).resolve(context.Background()); err == nil || !strings.Contains(err.Error(), "i/o timeout") {
		t.Errorf("only a silent resolver: %v, want a timeout", err)
	}

	// Stopping the provider does not wait for a silent resolver's timeout (2s).
	pv, _ = newDNSProvider(config.Discovery{Name: "cx.test", ResolveInterval: config.Duration{D: 10 * time.Second},
		Resolvers: []string{silent.LocalAddr().String()}}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pv.Watch(ctx, func([]string) { t.Error("a list from a silent resolver") }, func(error) { t.Error("an error reported after the stop") })
	}()
	time.Sleep(100 * time.Millisecond)
	start = time.Now()
	cancel()
	select {
	case <-done:
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("stopping took %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the provider did not stop")
	}

	// A target whose address no resolver gives fails the round: never a partial list. The SRV answer
	// comes, then the resolver fails every later query (b.test.'s A).
	z.Set("cx.test. 5 IN SRV 0 0 9001 a.test.", "cx.test. 5 IN SRV 0 0 9002 b.test.", "a.test. 5 IN A 10.0.0.1",
		"b.test. 5 IN A 10.0.0.2")
	z.FailAfter(1)
	f("a target's address failing", 0, only, nil, "A b.test.: no resolver answered")
	z.FailAfter(0)

	// A truncated UDP answer is asked again over TCP.
	var many, want []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("cx.test. 5 IN SRV 0 0 %d host%d.test.", 9000+i, i), fmt.Sprintf("host%d.test. 5 IN A 10.0.1.%d", i, i))
		want = append(want, fmt.Sprintf("10.0.1.%d:%d", i, 9000+i))
	}
	slices.Sort(want)
	z.Set(many...)
	z.TruncateUDP()
	f("a truncated answer", 0, only, want, "")
}

func TestDNSProviderReadsTheSystemResolversFromResolvConf(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{
		"resolv.conf": "# comment\nsearch cluster.local\nnameserver 10.96.0.10\nnameserver fd00::10\noptions ndots:5\n",
		"empty.conf":  "search cluster.local\n",
	})
	old := resolvConf
	t.Cleanup(func() { resolvConf = old })
	pv, _ := newDNSProvider(config.Discovery{Name: "cx.test", ResolveInterval: config.Duration{D: time.Second}, Port: 80}, Options{})
	p := pv.(*dnsProvider)

	resolvConf = dir + "/resolv.conf"
	if got, err := p.servers(); err != nil || !slices.Equal(got, []string{"10.96.0.10:53", "[fd00::10]:53"}) {
		t.Fatalf("servers from resolv.conf: %v, %v", got, err)
	}
	resolvConf = dir + "/empty.conf"
	if _, err := p.resolve(context.Background()); err == nil || !strings.Contains(err.Error(), "system resolver: no nameserver in "+resolvConf) {
		t.Fatalf("a resolv.conf without nameserver: %v", err)
	}
	resolvConf = dir + "/missing.conf"
	if _, err := p.resolve(context.Background()); err == nil || !strings.Contains(err.Error(), "system resolver: open "+resolvConf) {
		t.Fatalf("a missing resolv.conf: %v", err)
	}
	// Configured resolvers are used as they are.
	p.resolvers = []string{"127.0.0.1:8600"}
	if got, _ := p.servers(); !slices.Equal(got, []string{"127.0.0.1:8600"}) {
		t.Fatalf("configured resolvers: %v", got)
	}
}

const dnsInterval = 200 * time.Millisecond

// dnsFollow is how long a change may take to be in force: one resolve_interval, and slack for a loaded
// machine (2 cores, the race detector).
const dnsFollow = dnsInterval + 400*time.Millisecond

// dnsTable is a dns [discovery] table resolving name every dnsInterval through resolver.
func dnsTable(name, resolver string) config.Discovery {
	return config.Discovery{Provider: "dns", Name: name, ResolveInterval: config.Duration{D: dnsInterval},
		Resolvers: []string{resolver}, EmptyGrace: config.Duration{D: 30 * time.Second}}
}

// srvRecords returns an SRV record of name for each port (target p<port>.fairlead.test.) and the
// target's A record (127.0.0.1).
func srvRecords(name string, ports ...int) []string {
	var rrs []string
	for _, p := range ports {
		target := fmt.Sprintf("p%d.fairlead.test.", p)
		rrs = append(rrs, fmt.Sprintf("%s 5 IN SRV 0 0 %d %s", name, p, target), target+" 5 IN A 127.0.0.1")
	}
	return rrs
}

func TestDNSProviderFollowsSRVAndARecordsWithinOneResolveInterval(t *testing.T) {
	const name = "_http._tcp.cx.fairlead.test."
	z := discoverytest.StartZone(t, srvRecords(name, 9001, 9002)...)
	rn := run(t, dnsTable(name, z.Addr), false, "127.0.0.1:9001")

	// The first answer (at start) replaces the seed. The targets' addresses came in the additional
	// section: they were not asked for.
	rn.follows(t, dnsFollow, "the first SRV answer", "127.0.0.1:9001", "127.0.0.1:9002")
	if n := z.Queried("p9001.fairlead.test.", "A"); n != 0 {
		t.Errorf("p9001's address was queried %d times despite the additional section", n)
	}
	// An added record whose address is not in the additional section: the provider asks for it.
	z.HideGlue("p9003.fairlead.test.")
	z.Set(srvRecords(name, 9001, 9002, 9003)...)
	rn.follows(t, dnsFollow, "an added SRV record", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003")
	if z.Queried("p9003.fairlead.test.", "A") == 0 || z.Queried("p9003.fairlead.test.", "AAAA") == 0 {
		t.Errorf("p9003's address was not queried (A %d, AAAA %d)", z.Queried("p9003.fairlead.test.", "A"), z.Queried("p9003.fairlead.test.", "AAAA"))
	}
	z.Set(srvRecords(name, 9002, 9003)...)
	rn.follows(t, dnsFollow, "a removed SRV record", "127.0.0.1:9002", "127.0.0.1:9003")
	if s := rn.Status(); s.Changes != 3 || s.Errors != 0 || s.LastSuccess.IsZero() {
		t.Fatalf("status %+v, want 3 changes and no error", s)
	}

	// A name without SRV records: its A records with the port.
	z.Set("cx.fairlead.test. 5 IN A 127.0.0.2", "cx.fairlead.test. 5 IN A 127.0.0.3")
	dc := dnsTable("cx.fairlead.test", z.Addr)
	dc.Port = 8080
	a := run(t, dc, false)
	a.follows(t, dnsFollow, "the A records", "127.0.0.2:8080", "127.0.0.3:8080")
	z.Set("cx.fairlead.test. 5 IN A 127.0.0.3")
	a.follows(t, dnsFollow, "a removed A record", "127.0.0.3:8080")
}

func TestDNSProviderKeepsTheLastListWhileTheResolverIsDownAndCountsTheErrors(t *testing.T) {
	const name = "cx.fairlead.test."
	z := discoverytest.StartZone(t, srvRecords(name, 9001, 9002)...)
	dc := dnsTable(name, z.Addr)
	dc.EmptyGrace.D = time.Second
	rn := run(t, dc, false)
	rn.follows(t, dnsFollow, "the first answer", "127.0.0.1:9001", "127.0.0.1:9002")

	z.Stop()
	// Failed rounds past empty_grace (every round of resolve_interval fails): the list stays, nothing
	// else is handed to the pool.
	rounds := uint64(3 + dc.EmptyGrace.D/dnsInterval)
	testkit.Eventually(t, "failed rounds past empty_grace", 10*time.Second, func() bool { return rn.Status().Errors >= rounds })
	s := rn.Status()
	if !slices.Equal(s.Servers, []string{"127.0.0.1:9001", "127.0.0.1:9002"}) || s.EmptyPending || len(rn.r.got()) != 1 ||
		!strings.Contains(s.LastError, "no resolver answered") || !strings.Contains(s.LastError, z.Addr) {
		t.Fatalf("with the resolver down: %+v, changes %q", s, rn.r.got())
	}
	if !strings.Contains(rn.log(), "discovery: pool p: dns: SRV "+name+": no resolver answered ("+z.Addr) {
		t.Errorf("no log line naming the query and the resolver:\n%s", rn.log())
	}

	// The resolver back with one server: followed at its next round.
	z.Set(srvRecords(name, 9002)...)
	z.Restart()
	rn.follows(t, dnsFollow, "the list after the resolver came back", "127.0.0.1:9002")
	if s := rn.Status(); s.LastError != "" {
		t.Fatalf("last error kept after a good answer: %q", s.LastError)
	}
}

func TestDNSProviderEmptiesTheListOnNXDOMAINOnlyAfterEmptyGrace(t *testing.T) {
	const name = "cx.fairlead.test."
	z := discoverytest.StartZone(t, srvRecords(name, 9001)...)
	dc := dnsTable(name, z.Addr)
	dc.EmptyGrace.D = time.Second
	rn := run(t, dc, false)
	rn.follows(t, dnsFollow, "the first answer", "127.0.0.1:9001")

	z.Set() // every name: NXDOMAIN
	start := time.Now()
	testkit.Eventually(t, "the empty list to be pending", 5*time.Second, func() bool { return rn.Status().EmptyPending })
	if l := rn.List(); !slices.Equal(l, []string{"127.0.0.1:9001"}) {
		t.Fatalf("NXDOMAIN applied at once: %v", l)
	}
	rn.follows(t, 5*time.Second, "the empty list", []string{}...)
	if d := time.Since(start); d < dc.EmptyGrace.D {
		t.Fatalf("emptied %s after NXDOMAIN, before empty_grace", d)
	}
	if s := rn.Status(); s.Errors != 0 {
		t.Fatalf("NXDOMAIN is an answer, not an error: %+v", s)
	}
}
