package lb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery"
	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
)

// Service discovery through a whole running fairlead: a discovered list put in force in its pool (added
// servers take traffic and tunnels after their first passing probe, removed ones drain and their tunnels
// close), a failed read or a bad list keeping the running set, discovery across reloads. The providers
// against their registries (DNS, files, a real ZooKeeper) are tested in lb/discovery, the [discovery]
// table in lb/config.

// fakeProviders are the test's providers, by the `file` key of their table.
var (
	fakeMu        sync.Mutex
	fakeProviders = map[string]*fakeProvider{}
)

type fakeEvent struct {
	list []string
	err  error
}

// fakeProvider reports what the test sends it; opts are the Options it was built with.
type fakeProvider struct {
	events chan fakeEvent
	opts   discovery.Options
}

func (f *fakeProvider) Watch(ctx context.Context, found func([]string), failed func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-f.events:
			if e.err != nil {
				failed(e.err)
			} else {
				found(e.list)
			}
		}
	}
}

func init() {
	config.Providers["fake"] = config.ProviderKind{Keys: []string{"file"},
		Check: func(*config.Config, *config.Discovery, func(string, string, ...any)) {}}
	discovery.Register("fake", func(dc config.Discovery, o discovery.Options) (discovery.Provider, error) {
		fakeMu.Lock()
		defer fakeMu.Unlock()
		f := fakeProviders[dc.File]
		if f == nil {
			return nil, errors.New("no fake provider " + dc.File)
		}
		f.opts = o
		return f, nil
	})
}

// newFake returns the id (the table's file key) of a new fake provider, and the provider.
func newFake(t *testing.T, name string) (string, *fakeProvider) {
	fakeMu.Lock()
	defer fakeMu.Unlock()
	id := t.Name() + "/" + name
	f := &fakeProvider{events: make(chan fakeEvent)}
	fakeProviders[id] = f
	return id, f
}

// discoveryConfig is a roundrobin pool "rr" over the simulator's platforms (every platform answers
// ordinary requests), checked on "/" every 100 ms (rise 1), with the seed servers and the fake provider
// id; extra are more lines of its [pools.rr.discovery] table.
func discoveryConfig(id string, seed []string, extra string) map[string]string {
	c, pool, check, _ := poolConf("rr", "roundrobin", seed, true)
	pool.Set("queue_timeout", 300*time.Millisecond)
	check.Set("path", "/").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 50*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("rise", 1)
	pool.Table("pools.rr.discovery").Lines(fmt.Sprintf("provider = \"fake\"\nfile = %q\n%s", id, extra))
	return map[string]string{"10-rr.toml": c.String()}
}

// servedBy sends n requests and returns the platforms that answered them (and the status for failures).
func servedBy(t *testing.T, l *LB, n int) map[string]int {
	got := map[string]int{}
	for range n {
		code, by := get(t, l, "/x")
		if code != 200 {
			by = fmt.Sprint(code)
		}
		got[by]++
	}
	return got
}

func TestADiscoveredListIsPutInForceInItsPoolAsAServerSetChange(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	id, fake := newFake(t, "a")
	l, logs := startLB(t, discoveryConfig(id, []string{p1.Addr}, ""))
	events := recordEvents(t, l)
	if got := servedBy(t, l, 6); got[p1.Name] != 6 {
		t.Fatalf("before the provider's first answer the seed serves: %v", got)
	}

	// platform3 is listed while it fails its checks (503): it takes no traffic until its first passing
	// probe.
	mustSetState(t, p3, sim.Standby)
	fake.events <- fakeEvent{list: []string{p3.Addr, p2.Addr, p1.Addr, p2.Addr}} // any order, duplicates
	testkit.Eventually(t, "a discovery_changed event", 5*time.Second, func() bool {
		return events.has(func(e event.Event) bool {
			return e.Kind == event.DiscoveryChanged && e.Pool == "rr" && strings.Contains(e.Detail, "3 servers") && strings.Contains(e.Detail, p2.Addr)
		})
	})
	testkit.Eventually(t, "platform2 to take traffic", 5*time.Second, func() bool { return servedBy(t, l, 2)[p2.Name] == 1 })
	if got := servedBy(t, l, 12); got[p1.Name] != 6 || got[p2.Name] != 6 {
		t.Fatalf("a listed server failing its checks took traffic: %v", got)
	}
	mustSetState(t, p3, sim.Backup)
	testkit.Eventually(t, "platform3 to take traffic after its first passing probe", 5*time.Second, func() bool {
		return servedBy(t, l, 6)[p3.Name] == 2
	})

	// platform1 leaves the list while a slow request is in flight on each server: it drains (its request
	// finishes) and takes no new request.
	slow := concurrentGets(t, l, "/x?delay=1s", 3)
	testkit.Eventually(t, "a slow request in flight on platform1", 5*time.Second, func() bool {
		return mustServerStatus(t, l, "rr", p1.Addr).InFlight == 1
	})
	fake.events <- fakeEvent{list: []string{p3.Addr, p2.Addr}}
	testkit.Eventually(t, "a server_removed event of platform1", 5*time.Second, func() bool {
		return events.has(func(e event.Event) bool {
			return e.Kind == event.ServerRemoved && e.Pool == "rr" && e.Server == p1.Addr
		})
	})
	if got, want := slow(), map[string]int{"200 " + p1.Name: 1, "200 " + p2.Name: 1, "200 " + p3.Name: 1}; !maps.Equal(got, want) {
		t.Fatalf("slow requests in flight during the removal were answered %v, want one 200 by each of %s, %s, %s", got, p1.Name, p2.Name, p3.Name)
	}
	if got := servedBy(t, l, 8); got[p2.Name] != 4 || got[p3.Name] != 4 {
		t.Fatalf("after platform1 left the list: %v", got)
	}
	if _, listed := serverStatus(l, "rr", p1.Addr); listed {
		t.Fatal("/status still lists the removed server")
	}
	if ds := l.Status().Pools[0].Discovery; ds == nil || ds.Changes != 2 || !slices.Equal(ds.Servers, slices.Sorted(slices.Values([]string{p2.Addr, p3.Addr}))) {
		t.Fatalf("status: %+v", ds)
	}
	if m := mustMetric(t, scrapeMetrics(t, l), `fairlead_discovery_changes_total{pool="rr",provider="fake"}`); m != 2 {
		t.Errorf("changes metric %v", m)
	}
	if logLine(logs, `msg="discovery: fake: 2 servers (added none; removed `+p1.Addr+`)"`, "pool=rr") == "" {
		t.Errorf("no log line of the change:\n%s", logs.all())
	}
}

func TestAPoolsNameAndTLSReachItsDiscoveryProvider(t *testing.T) {
	id, fake := newFake(t, "tls")
	files := discoveryConfig(id, []string{"127.0.0.1:1"}, "")
	dir := testkit.WriteFiles(t, files)
	l, _ := startLBDir(t, dir)
	opts := func() discovery.Options {
		fakeMu.Lock()
		defer fakeMu.Unlock()
		return fake.opts
	}
	if o := opts(); o.Pool != "rr" || o.TLS || o.Logf == nil {
		t.Fatalf("the provider was built with %+v, want pool rr without TLS", o)
	}
	// A reload that only turns on the pool's [tls] rebuilds the provider with it (a Curator instance's
	// sslPort is then used), though its [discovery] table is unchanged.
	mustWriteFile(t, filepath.Join(dir, "30-tls.toml"), tlsTable("rr", "insecure_skip_verify = true"))
	mustReloadDir(t, l, dir)
	testkit.Eventually(t, "the provider rebuilt with TLS", 5*time.Second, func() bool { o := opts(); return o.Pool == "rr" && o.TLS })
}

func TestABadListOrAFailedReadKeepsTheRunningSetAndItsTunnels(t *testing.T) {
	c := startCluster(t, 1, 3)
	cx1, cx2, cx3 := c.Connections[0], c.Connections[1], c.Connections[2]
	file := filepath.Join(t.TempDir(), "cx-servers.toml")
	discoverytest.WriteFile(t, file, discoverytest.TOMLServers(cx1.Addr, cx2.Addr))
	// A sticky connection-server pool behind the WebSocket route, its servers from file (no seed).
	conf, pool, check, route := poolConf("cxserver", "sticky", nil, true)
	pool.Set("queue_timeout", time.Second)
	pool.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id"})
	check.Set("path", "/health").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 50*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("rise", 1)
	pool.Table("pools.cxserver.discovery").Set("provider", "file").Set("file", file)
	route.Set("websocket", true).Set("paths", []string{"/Thingworx/WS"})
	l, logs := startLB(t, map[string]string{"10-cx.toml": conf.String()})
	discovered := func() []string { return mustPoolDiscovery(t, l, "cxserver").Servers }
	sorted := func(a ...string) []string { return slices.Sorted(slices.Values(a)) }

	testkit.Eventually(t, "cx1 and cx2 to take tunnels", 5*time.Second, func() bool {
		return serverAvailable(l, "cxserver", cx1.Addr) && serverAvailable(l, "cxserver", cx2.Addr)
	})
	toCX1 := valuesPlacedOn(t, "a-", 1, cx1.Addr, cx1.Addr, cx2.Addr)[0]
	toCX2 := valuesPlacedOn(t, "b-", 1, cx2.Addr, cx1.Addr, cx2.Addr)[0]
	on1, by1 := dialAsset(t, l, toCX1)
	on2, by2 := dialAsset(t, l, toCX2)
	if by1 != cx1.Name || by2 != cx2.Name {
		t.Fatalf("tunnels landed on %s and %s, want cx1 and cx2", by1, by2)
	}

	// An editor's save replaces cx1 by cx3: cx1 drains, its tunnel closes; cx2's stays; cx3 takes the
	// keys placed on it once it passed a probe.
	discoverytest.RenameOver(t, file, discoverytest.TOMLServers(cx2.Addr, cx3.Addr))
	testkit.Eventually(t, "the new list", 5*time.Second, func() bool { return slices.Equal(discovered(), sorted(cx2.Addr, cx3.Addr)) })
	mustClose(t, on1, "tunnel to the removed server")
	testkit.Eventually(t, "cx1's tunnels to close on its side", 5*time.Second, func() bool { return cx1.OpenTunnels() == 0 })
	mustEcho(t, on2, "cx2 tunnel")
	if _, listed := serverStatus(l, "cxserver", cx1.Addr); listed {
		t.Fatal("/status still lists the removed server")
	}
	testkit.Eventually(t, "cx3 to pass a probe", 5*time.Second, func() bool { return serverAvailable(l, "cxserver", cx3.Addr) })
	if _, by := dialAsset(t, l, valuesPlacedOn(t, "c-", 1, cx3.Addr, cx2.Addr, cx3.Addr)[0]); by != cx3.Name {
		t.Fatalf("a key placed on the added server landed on %s", by)
	}

	// A bad list: an error, counted and logged; the running set and its tunnels stay.
	discoverytest.WriteFile(t, file, "servers = [\""+cx2.Addr+"\", \n")
	testkit.Eventually(t, "the bad list's error", 5*time.Second, func() bool { return mustPoolDiscovery(t, l, "cxserver").Errors == 1 })
	if logLine(logs, "discovery: pool cxserver: file: "+file+": not a TOML server list", "keeping the last list") == "" {
		t.Errorf("no log line of the bad list:\n%s", logs.all())
	}
	if m := mustMetric(t, scrapeMetrics(t, l), `fairlead_discovery_errors_total{pool="cxserver",provider="file"}`); m != 1 {
		t.Errorf("errors metric %v", m)
	}
	if got := discovered(); !slices.Equal(got, sorted(cx2.Addr, cx3.Addr)) {
		t.Fatalf("after a bad list: %v", got)
	}
	mustEcho(t, on2, "cx2 tunnel after a bad list")
	if _, by := dialAsset(t, l, toCX2); by != cx2.Name {
		t.Fatalf("after a bad list %s landed on %s, want cx2", toCX2, by)
	}
}

func TestDiscoveryAcrossReloadsKeepsOrReplacesTheProviderAndAnEmptyListEmptiesThePool(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	id, fake := newFake(t, "a")
	l, _ := startLB(t, discoveryConfig(id, []string{p1.Addr}, ""))
	fake.events <- fakeEvent{list: []string{p2.Addr}}
	testkit.Eventually(t, "p2 to serve alone", 5*time.Second, func() bool { return servedBy(t, l, 4)[p2.Name] == 4 })

	// Failed reads keep the running set.
	fake.events <- fakeEvent{err: errors.New("registry unreachable")}
	fake.events <- fakeEvent{err: errors.New("registry unreachable")}
	if got := servedBy(t, l, 4); got[p2.Name] != 4 {
		t.Fatalf("after errors the last list serves: %v", got)
	}
	if ds := mustPoolDiscovery(t, l, "rr"); ds.Errors != 2 || ds.LastError != "registry unreachable" {
		t.Fatalf("status after errors: %+v", ds)
	}

	// A reload of a changed config that keeps the [discovery] table keeps the provider and its list
	// (not the seed).
	files := discoveryConfig(id, []string{p1.Addr}, "")
	files["10-rr.toml"] = strings.Replace(files["10-rr.toml"], `queue_timeout = "300ms"`, `queue_timeout = "400ms"`, 1)
	reloadWith(t, l, files)
	if got := servedBy(t, l, 4); got[p2.Name] != 4 {
		t.Fatalf("after a reload: %v (the seed came back?)", got)
	}
	fake.events <- fakeEvent{list: []string{p1.Addr, p2.Addr}} // the same provider still feeds it
	testkit.Eventually(t, "both to serve", 5*time.Second, func() bool {
		got := servedBy(t, l, 6)
		return got[p1.Name] > 0 && got[p2.Name] > 0
	})

	// A reload that changes the table starts a new provider; the list in force serves until its first
	// answer (not the seed, platform1 alone).
	id2, fake2 := newFake(t, "b")
	reloadWith(t, l, discoveryConfig(id2, []string{p1.Addr}, `empty_grace = "300ms"`))
	if got := servedBy(t, l, 6); got[p1.Name] != 3 || got[p2.Name] != 3 {
		t.Fatalf("after a reload changing the table, before its provider's answer: %v", got)
	}
	fake2.events <- fakeEvent{list: []string{p3.Addr}}
	testkit.Eventually(t, "the new provider's list to serve", 5*time.Second, func() bool { return servedBy(t, l, 3)[p3.Name] == 3 })

	// An empty list empties the pool at the end of empty_grace (503), a list again serves.
	start := time.Now()
	fake2.events <- fakeEvent{list: []string{}}
	testkit.Eventually(t, "the empty list to be applied", 5*time.Second, func() bool { return servedBy(t, l, 1)["503"] == 1 })
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("applied after %s, before empty_grace", d)
	}
	fake2.events <- fakeEvent{list: []string{p3.Addr}}
	testkit.Eventually(t, "the server to come back", 5*time.Second, func() bool { return servedBy(t, l, 1)[p3.Name] == 1 })
}

// mustPoolDiscovery returns pool's discovery status.
func mustPoolDiscovery(t *testing.T, l *LB, pool string) admin.DiscoveryStatus {
	t.Helper()
	d := poolStatus(t, l, pool).Discovery
	if d == nil {
		t.Fatalf("pool %s has no discovery status", pool)
	}
	return *d
}
