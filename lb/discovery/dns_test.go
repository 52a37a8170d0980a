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
// of answer, resolvers tried in turn, silent and failing resolvers, truncated answers, resolv.conf. lb's
// tests run it behind a whole load balancer.

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
