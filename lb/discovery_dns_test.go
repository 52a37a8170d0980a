package lb

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
)

// The dns provider against an in-process DNS server on a loopback port, serving records the tests
// change: SRV (with and without the targets' addresses in the additional section), A/AAAA with the
// configured port, a resolver that stops, SERVFAIL and REFUSED, NXDOMAIN, truncated answers.

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// srvRecords returns an SRV record of name for each platform (target <platform name>.fairlead.test.) and
// the target's A record (127.0.0.1).
func srvRecords(t *testing.T, name string, ps ...*sim.Platform) []string {
	var rrs []string
	for _, p := range ps {
		target := p.Name + ".fairlead.test."
		rrs = append(rrs, fmt.Sprintf("%s 5 IN SRV 0 0 %d %s", name, portOf(t, p.Addr), target), target+" 5 IN A 127.0.0.1")
	}
	return rrs
}

// discoveryConfigError returns a check that base with table merged over its [pools.rr.discovery] (from
// a second file, 20-discovery.toml) fails to load with want in the error.
func discoveryConfigError(t *testing.T, base map[string]string) func(table, want string) {
	return func(table, want string) {
		t.Helper()
		files := map[string]string{"10-rr.toml": base["10-rr.toml"], "20-discovery.toml": "[pools.rr.discovery]\n" + table}
		_, err := config.Load(testkit.WriteFiles(t, files))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", table, err, want)
		}
	}
}

// discoveredPool is a roundrobin pool "rr" over the simulator's platforms (every platform answers
// ordinary requests), checked on "/" every 100 ms (rise 1), with the seed servers and the given
// [pools.rr.discovery] table.
func discoveredPool(seed []string, discovery string) map[string]string {
	return map[string]string{"10-rr.toml": discoveredPoolNamed("rr", seed, discovery)}
}

// discoveredPoolNamed is a config of one roundrobin pool over seed, probed on "/" with short intervals,
// with discovery (the lines of its [pools.NAME.discovery] table), behind a catch-all route.
func discoveredPoolNamed(pool string, seed []string, discovery string) string {
	var c testkit.Config
	listenAnywhere(&c)
	c.Table("pools."+pool).Set("balance", "roundrobin").Set("servers", seed).Set("queue_timeout", 300*time.Millisecond)
	c.Table("pools."+pool+".check").Set("path", "/").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 50*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("rise", 1)
	c.Table("pools." + pool + ".discovery").Lines(discovery)
	c.Array("routes").Set("pool", pool)
	return c.String()
}

// discoveryOf returns pool rr's discovery status.
func discoveryOf(t *testing.T, l *LB) admin.DiscoveryStatus {
	t.Helper()
	for _, p := range l.Status().Pools {
		if p.Name == "rr" && p.Discovery != nil {
			return *p.Discovery
		}
	}
	t.Fatal("pool rr has no discovery status")
	return admin.DiscoveryStatus{}
}

// listIs reports whether the discovered list is exactly addrs (any order).
func listIs(ds admin.DiscoveryStatus, addrs ...string) bool {
	a, b := slices.Clone(ds.Servers), slices.Clone(addrs)
	slices.Sort(a)
	slices.Sort(b)
	return ds.Servers != nil && slices.Equal(a, b)
}

// followsWithin waits until pool rr's discovered list is addrs and fails if that took longer than
// within; it returns how long it took.
func followsWithin(t *testing.T, l *LB, within time.Duration, what string, addrs ...string) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, what, 10*time.Second, func() bool { return listIs(discoveryOf(t, l), addrs...) })
	took := time.Since(start)
	if took > within {
		t.Fatalf("%s took %s, want at most %s", what, took.Round(time.Millisecond), within)
	}
	t.Logf("%s: %s", what, took.Round(time.Millisecond))
	return took
}

// slowGets sends n GET /x?delay=d concurrently and returns a channel of their X-Served-By ("" and the
// status for a failure), closed when all answered.
func slowGets(l *LB, n int, d time.Duration) <-chan string {
	out := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := testClient.Get(fmt.Sprintf("http://%s/x?delay=%s", l.Addr(), d))
			if err != nil {
				out <- "error: " + err.Error()
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				out <- fmt.Sprint("status ", resp.StatusCode)
				return
			}
			out <- resp.Header.Get("X-Served-By")
		}()
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

const dnsInterval = 200 * time.Millisecond

// dnsFollow is how long a change may take to be in force: one resolve_interval, and slack for a loaded
// machine (2 cores, the race detector).
const dnsFollow = dnsInterval + 400*time.Millisecond

func TestDNSDiscoveryFollowsSRVRecordsWithinOneResolveInterval(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	const name = "_http._tcp.cx.fairlead.test."
	z := discoverytest.StartZone(t, srvRecords(t, name, p1, p2)...)
	l, _ := startLB(t, discoveredPool([]string{p1.Addr}, fmt.Sprintf(`provider = "dns"
name = %q
resolve_interval = "200ms"
resolvers = [%q]
`, name, z.Addr)))

	// The first answer (at start) replaces the seed: both serve. The targets' addresses came in the
	// additional section: they were not asked for.
	followsWithin(t, l, dnsFollow, "the first SRV answer", p1.Addr, p2.Addr)
	testkit.Eventually(t, "platform1 and platform2 to serve", 5*time.Second, func() bool {
		got := servedBy(t, l, 6)
		return got[p1.Name] == 3 && got[p2.Name] == 3
	})
	if n := z.Queried(p1.Name+".fairlead.test.", "A"); n != 0 {
		t.Errorf("platform1's address was queried %d times despite the additional section", n)
	}

	// platform3 is added while it fails its checks (503): it takes no traffic until its first passing
	// probe. Its address is not in the additional section: the provider asks for it.
	mustSetState(t, p3, sim.Standby)
	z.HideGlue(p3.Name + ".fairlead.test.")
	z.Set(srvRecords(t, name, p1, p2, p3)...)
	followsWithin(t, l, dnsFollow, "an added SRV record", p1.Addr, p2.Addr, p3.Addr)
	if z.Queried(p3.Name+".fairlead.test.", "A") == 0 || z.Queried(p3.Name+".fairlead.test.", "AAAA") == 0 {
		t.Errorf("platform3's address was not queried (A %d, AAAA %d)",
			z.Queried(p3.Name+".fairlead.test.", "A"), z.Queried(p3.Name+".fairlead.test.", "AAAA"))
	}
	if got := servedBy(t, l, 12); got[p1.Name] != 6 || got[p2.Name] != 6 {
		t.Fatalf("a listed server failing its checks took traffic: %v", got)
	}
	mustSetState(t, p3, sim.Backup)
	testkit.Eventually(t, "platform3 to take traffic after its first passing probe", 5*time.Second, func() bool {
		return servedBy(t, l, 6)[p3.Name] == 2
	})

	// platform1 leaves the SRV set while a slow request is in flight on each server: it drains (its
	// request finishes) and takes no new request.
	slow := slowGets(l, 3, time.Second)
	testkit.Eventually(t, "a slow request in flight on platform1", 5*time.Second, func() bool {
		return mustServerStatus(t, l, "rr", p1.Addr).InFlight == 1
	})
	z.Set(srvRecords(t, name, p2, p3)...)
	followsWithin(t, l, dnsFollow, "a removed SRV record", p2.Addr, p3.Addr)
	var answered []string
	for by := range slow {
		answered = append(answered, by)
	}
	slices.Sort(answered)
	if want := []string{p1.Name, p2.Name, p3.Name}; !slices.Equal(answered, want) {
		t.Fatalf("slow requests in flight during the removal were answered by %v, want %v", answered, want)
	}
	if got := servedBy(t, l, 8); got[p2.Name] != 4 || got[p3.Name] != 4 {
		t.Fatalf("after platform1 left the SRV set: %v", got)
	}
	if _, listed := serverStatus(l, "rr", p1.Addr); listed {
		t.Fatal("/status still lists the removed server")
	}
	if ds := discoveryOf(t, l); ds.Changes != 3 || ds.Errors != 0 || ds.LastSuccess.IsZero() {
		t.Fatalf("discovery status %+v, want 3 changes and no error", ds)
	}
}

// sameNewPort returns a port free on every host, as host:port addresses (for A/AAAA records sharing
// one port).
func sameNewPort(t *testing.T, hosts ...string) []string {
	t.Helper()
	for range 50 {
		first, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			t.Skipf("cannot listen on %s: %v", hosts[0], err)
		}
		p := strconv.Itoa(portOf(t, first.Addr().String()))
		lns := []net.Listener{first}
		for _, h := range hosts[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, p))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == len(hosts) {
			var addrs []string
			for _, h := range hosts {
				addrs = append(addrs, net.JoinHostPort(h, p))
			}
			return addrs
		}
	}
	t.Skipf("no port free on all of %v", hosts)
	return nil
}

// AAAA answers are covered by TestDNSProviderResolvesEachKindOfAnswer (and IPv6 servers end to end by
// TestAnIPv6ServerIsProbedAndServes in proxy_test.go).
func TestDNSDiscoveryUsesARecordsWithThePortWhenTheNameHasNoSRV(t *testing.T) {
	addrs := sameNewPort(t, "127.0.0.2", "127.0.0.3")
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, NoConnections: true, PlatformAddrs: addrs, Logf: func(string, ...any) {}})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	const name = "cx.fairlead.test."
	z := discoverytest.StartZone(t, name+" 5 IN A 127.0.0.2", name+" 5 IN A 127.0.0.3")
	l, _ := startLB(t, discoveredPool(nil, fmt.Sprintf(`provider = "dns"
name = "cx.fairlead.test"
resolve_interval = "200ms"
port = %d
resolvers = [%q]
`, portOf(t, addrs[0]), z.Addr)))

	followsWithin(t, l, dnsFollow, "the A records", addrs[0], addrs[1]) // 127.0.0.2:P, 127.0.0.3:P
	testkit.Eventually(t, "both to serve", 5*time.Second, func() bool {
		got := servedBy(t, l, 4)
		return got[p1.Name] == 2 && got[p2.Name] == 2
	})
	z.Set(name + " 5 IN A 127.0.0.3")
	followsWithin(t, l, dnsFollow, "a removed A record", addrs[1])
	if got := servedBy(t, l, 4); got[p2.Name] != 4 {
		t.Fatalf("after an A record left: %v", got)
	}
}

func TestDNSDiscoveryKeepsTheLastListWhileTheResolverIsDownAndCountsTheErrors(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	const name = "cx.fairlead.test."
	z := discoverytest.StartZone(t, srvRecords(t, name, p1, p2)...)
	l, logs := startLB(t, discoveredPool(nil, fmt.Sprintf(`provider = "dns"
name = %q
resolve_interval = "200ms"
resolvers = [%q]
empty_grace = "1s"
`, name, z.Addr)))
	followsWithin(t, l, dnsFollow, "the first answer", p1.Addr, p2.Addr)
	testkit.Eventually(t, "both to serve", 5*time.Second, func() bool {
		got := servedBy(t, l, 4)
		return got[p1.Name] == 2 && got[p2.Name] == 2
	})

	z.Stop()
	testkit.Eventually(t, "three failed rounds", 5*time.Second, func() bool { return discoveryOf(t, l).Errors >= 3 })
	// Past several rounds and past empty_grace, every request still succeeds on both servers.
	deadline := time.Now().Add(1500 * time.Millisecond)
	got := map[string]int{}
	for time.Now().Before(deadline) {
		for by, n := range servedBy(t, l, 2) {
			got[by] += n
		}
	}
	if len(got) != 2 || got[p1.Name] == 0 || got[p2.Name] == 0 {
		t.Fatalf("with the resolver down: %v, want every request answered by platform1 and platform2", got)
	}
	ds := discoveryOf(t, l)
	if !listIs(ds, p1.Addr, p2.Addr) || ds.EmptyPending || !strings.Contains(ds.LastError, "no resolver answered") ||
		!strings.Contains(ds.LastError, z.Addr) {
		t.Fatalf("discovery status with the resolver down: %+v", ds)
	}
	if m := mustMetric(t, scrapeMetrics(t, l), `fairlead_discovery_errors_total{pool="rr",provider="dns"}`); m < 3 {
		t.Errorf("errors metric %v, want at least 3", m)
	}
	if !strings.Contains(logs.all(), "discovery: pool rr: dns: SRV "+name+": no resolver answered ("+z.Addr) {
		t.Errorf("no log line naming the query and the resolver:\n%s", logs.all())
	}

	// The resolver back with platform2 only: followed at its next round.
	z.Set(srvRecords(t, name, p2)...)
	z.Restart()
	followsWithin(t, l, dnsFollow, "the list after the resolver came back", p2.Addr)
	if ds := discoveryOf(t, l); ds.LastError != "" {
		t.Fatalf("last error kept after a good answer: %q", ds.LastError)
	}
}

func TestDNSDiscoveryEmptiesThePoolOnNXDOMAINOnlyAfterEmptyGrace(t *testing.T) {
	c := startCluster(t, 1, 0)
	p1 := c.Platforms[0]
	const name = "cx.fairlead.test."
	z := discoverytest.StartZone(t, srvRecords(t, name, p1)...)
	l, _ := startLB(t, discoveredPool(nil, fmt.Sprintf(`provider = "dns"
name = %q
resolve_interval = "200ms"
resolvers = [%q]
empty_grace = "1s"
`, name, z.Addr)))
	followsWithin(t, l, dnsFollow, "the first answer", p1.Addr)
	testkit.Eventually(t, "platform1 to serve", 5*time.Second, func() bool { code, _ := get(t, l, "/x"); return code == 200 })

	z.Set() // every name: NXDOMAIN
	start := time.Now()
	testkit.Eventually(t, "the empty list to be pending", 5*time.Second, func() bool { return discoveryOf(t, l).EmptyPending })
	for time.Since(start) < 700*time.Millisecond {
		if code, _ := get(t, l, "/x"); code != 200 {
			t.Fatalf("within empty_grace (%s after NXDOMAIN): %d", time.Since(start), code)
		}
	}
	testkit.Eventually(t, "the pool to be emptied", 5*time.Second, func() bool { code, _ := get(t, l, "/x"); return code == 503 })
	if d := time.Since(start); d < time.Second {
		t.Fatalf("emptied %s after NXDOMAIN, before empty_grace", d)
	}
	if ds := discoveryOf(t, l); ds.Errors != 0 || ds.Servers == nil || len(ds.Servers) != 0 {
		t.Fatalf("NXDOMAIN is an answer, not an error: %+v", ds)
	}
}

func TestDNSDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	base := discoveredPool([]string{"127.0.0.1:1"}, `provider = "dns"
name = "cx.fairlead.test"`)
	f := discoveryConfigError(t, base)
	f(`name = ""`, "20-discovery.toml: pools.rr.discovery.name: required")
	f(`name = "cx..test"`, `20-discovery.toml: pools.rr.discovery.name: bad DNS name "cx..test"`)
	f(`name = "cx test"`, `pools.rr.discovery.name: bad DNS name "cx test"`)
	f(`port = 70000`, "20-discovery.toml: pools.rr.discovery.port: port 70000 out of range (1 to 65535)")
	f(`port = 0`, "20-discovery.toml: pools.rr.discovery.port: port 0 out of range")
	f(`port = -1`, "pools.rr.discovery.port: port -1 out of range")
	f(`resolve_interval = "0s"`, "20-discovery.toml: pools.rr.discovery.resolve_interval: must be positive")
	f(`resolve_interval = "often"`, `20-discovery.toml: pools.rr.discovery.resolve_interval: bad duration "often"`)
	f(`resolvers = ["10.0.0.2"]`, `20-discovery.toml: pools.rr.discovery.resolvers.0: bad resolver address "10.0.0.2"`)
	f(`resolvers = ["10.0.0.2:53", ":53"]`, `pools.rr.discovery.resolvers.1: bad resolver address ":53"`)
	f(`path = "/services/cx"`, "20-discovery.toml: pools.rr.discovery.path: not a key of the dns provider")
	f(`file = "/etc/fairlead/cx.toml"`, "pools.rr.discovery.file: not a key of the dns provider")
	// A name in 10-rr.toml and no key in 20: the error names the file that set the table.
	files := discoveredPool(nil, `provider = "dns"`)
	if _, err := config.Load(testkit.WriteFiles(t, files)); err == nil || !strings.Contains(err.Error(), "10-rr.toml: pools.rr.discovery.name: required") {
		t.Errorf("missing name: %v", err)
	}

	// Defaults: resolve_interval 10s (only for dns), the system resolver.
	cfg, err := config.Load(testkit.WriteFiles(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Pools["rr"].Discovery; d.ResolveInterval.D != 10*time.Second || d.Port != 0 || d.Resolvers != nil {
		t.Fatalf("defaults: %+v", d)
	}
	cfg, err = config.Load(testkit.WriteFiles(t, discoveredPool(nil, `provider = "file"
file = "/nonexistent/cx.toml"`)))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Pools["rr"].Discovery.ResolveInterval.D; d != 0 {
		t.Fatalf("resolve_interval of a file provider: %s", d)
	}
}
