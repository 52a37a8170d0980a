package lb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery"
)

// The discovery framework with a provider the test drives: seed servers until the first answer, lists
// applied as server set changes, errors keeping the last list, empty_grace, reloads keeping the list.

// fakeProviders are the test's providers, by the `file` key of their table.
var (
	fakeMu        sync.Mutex
	fakeProviders = map[string]*fakeProvider{}
)

type fakeEvent struct {
	list []string
	err  error
}

type fakeProvider struct{ events chan fakeEvent }

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
	discovery.Register("fake", func(dc config.Discovery, _ discovery.Options) (discovery.Provider, error) {
		fakeMu.Lock()
		defer fakeMu.Unlock()
		f := fakeProviders[dc.File]
		if f == nil {
			return nil, errors.New("no fake provider " + dc.File)
		}
		return f, nil
	})
}

func newFake(t *testing.T) (string, *fakeProvider) {
	fakeMu.Lock()
	defer fakeMu.Unlock()
	id := t.Name()
	f := &fakeProvider{events: make(chan fakeEvent)}
	fakeProviders[id] = f
	return id, f
}

// discoveryConfig is discoveredPool (discovery_dns_test.go) with the fake provider id.
func discoveryConfig(id string, seed []string, extra string) map[string]string {
	return discoveredPool(seed, fmt.Sprintf("provider = \"fake\"\nfile = %q\n%s", id, extra))
}

// servedBy sends n requests and returns the platforms that answered them (and 0 for failures).
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

func TestDiscoveryAppliesEachListAsAServerSetChangeAfterTheSeed(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	id, fake := newFake(t)
	l, logs := startLB(t, discoveryConfig(id, []string{p1.Addr}, ""))
	events := make(chan event.Event, 100)
	cancel := l.Events().Subscribe(func(e event.Event) {
		if e.Kind == event.DiscoveryChanged {
			events <- e
		}
	})
	defer cancel()

	if got := servedBy(t, l, 6); got[p1.Name] != 6 {
		t.Fatalf("before the provider's first answer the seed serves: %v", got)
	}
	fake.events <- fakeEvent{list: []string{p3.Addr, p2.Addr, p1.Addr, p2.Addr}} // any order, duplicates
	select {
	case e := <-events:
		if e.Pool != "rr" || !strings.Contains(e.Detail, "3 servers") || !strings.Contains(e.Detail, p2.Addr) {
			t.Errorf("event %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no discovery_changed event")
	}
	testkit.Eventually(t, "the discovered servers to take traffic", 5*time.Second, func() bool {
		got := servedBy(t, l, 9)
		return got[p1.Name] > 0 && got[p2.Name] > 0 && got[p3.Name] > 0
	})

	// A list without p1 and p2: they drain; p3 serves alone.
	fake.events <- fakeEvent{list: []string{p3.Addr}}
	<-events
	if got := servedBy(t, l, 6); got[p3.Name] != 6 {
		t.Fatalf("after the list shrank to p3: %v", got)
	}
	st := l.Status().Pools[0]
	if st.Discovery == nil || st.Discovery.Changes != 2 || len(st.Discovery.Servers) != 1 || st.Discovery.Servers[0] != p3.Addr {
		t.Fatalf("status: %+v", st.Discovery)
	}
	if m := mustMetric(t, scrapeMetrics(t, l), `fairlead_discovery_changes_total{pool="rr",provider="fake"}`); m != 2 {
		t.Errorf("changes metric %v", m)
	}
	found := false
	for _, line := range strings.Split(logs.all(), "\n") {
		if strings.Contains(line, `msg="discovery: fake: 1 server (added none; removed `) && strings.Contains(line, "pool=rr") &&
			strings.Contains(line, p1.Addr) && strings.Contains(line, p2.Addr) {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line of the change:\n%s", logs.all())
	}
}

func TestDiscoveryErrorsKeepTheLastListAndAReloadKeepsIt(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	id, fake := newFake(t)
	dir := testkit.WriteFiles(t, discoveryConfig(id, []string{p1.Addr}, ""))
	l, _ := startLBDir(t, dir)
	fake.events <- fakeEvent{list: []string{p2.Addr}}
	testkit.Eventually(t, "p2 to serve alone", 5*time.Second, func() bool { return servedBy(t, l, 4)[p2.Name] == 4 })

	fake.events <- fakeEvent{err: errors.New("registry unreachable")}
	fake.events <- fakeEvent{err: errors.New("registry unreachable")}
	if got := servedBy(t, l, 4); got[p2.Name] != 4 {
		t.Fatalf("after errors the last list serves: %v", got)
	}
	ds := l.Status().Pools[0].Discovery
	if ds.Errors != 2 || ds.LastError != "registry unreachable" {
		t.Fatalf("status after errors: %+v", ds)
	}

	// A reload of a changed config that keeps the [discovery] table keeps the provider and its list
	// (not the seed).
	cfgs := discoveryConfig(id, []string{p1.Addr}, "")
	cfgs["10-rr.toml"] = strings.Replace(cfgs["10-rr.toml"], `queue_timeout = "300ms"`, `queue_timeout = "400ms"`, 1)
	cfg, err := config.Load(testkit.WriteFiles(t, cfgs))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := servedBy(t, l, 4); got[p2.Name] != 4 {
		t.Fatalf("after a reload: %v (the seed came back?)", got)
	}
	fake.events <- fakeEvent{list: []string{p1.Addr, p2.Addr}} // the same provider still feeds it
	testkit.Eventually(t, "both to serve", 5*time.Second, func() bool {
		got := servedBy(t, l, 6)
		return got[p1.Name] > 0 && got[p2.Name] > 0
	})
}

func TestDiscoveryAppliesAnEmptyListOnlyAfterEmptyGrace(t *testing.T) {
	c := startCluster(t, 1, 0)
	p1 := c.Platforms[0]
	id, fake := newFake(t)
	l, _ := startLB(t, discoveryConfig(id, []string{p1.Addr}, `empty_grace = "1s"`))
	fake.events <- fakeEvent{list: []string{p1.Addr}}
	start := time.Now()
	fake.events <- fakeEvent{list: nil}
	testkit.Eventually(t, "the empty list to be pending", 5*time.Second, func() bool { return l.Status().Pools[0].Discovery.EmptyPending })
	// Within the grace the pool still serves.
	for time.Since(start) < 500*time.Millisecond {
		if code, _ := get(t, l, "/x"); code != 200 {
			t.Fatalf("within empty_grace: %d", code)
		}
	}
	testkit.Eventually(t, "the empty list to be applied", 5*time.Second, func() bool {
		code, _ := get(t, l, "/x")
		return code == 503
	})
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("applied after %s, before empty_grace", d)
	}
	// A list again: served again.
	fake.events <- fakeEvent{list: []string{p1.Addr}}
	testkit.Eventually(t, "the server to come back", 5*time.Second, func() bool { code, _ := get(t, l, "/x"); return code == 200 })

	// An empty list followed by servers within the grace is never applied.
	fake.events <- fakeEvent{list: []string{}}
	testkit.Eventually(t, "the empty list to be pending", 5*time.Second, func() bool { return l.Status().Pools[0].Discovery.EmptyPending })
	fake.events <- fakeEvent{list: []string{p1.Addr}}
	testkit.Eventually(t, "the pending empty list to be dropped", 5*time.Second, func() bool { return !l.Status().Pools[0].Discovery.EmptyPending })
	if ds := l.Status().Pools[0].Discovery; len(ds.Servers) != 1 {
		t.Fatalf("after servers came back within the grace: %+v", ds)
	}
	time.Sleep(1200 * time.Millisecond) // past the grace of the dropped empty list: nothing may apply it
	if code, _ := get(t, l, "/x"); code != 200 {
		t.Fatalf("a dropped empty list was applied: %d", code)
	}
}

func TestDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	f := func(extra, want string) {
		t.Helper()
		files := discoveryConfig("x", []string{"127.0.0.1:1"}, "")
		files["20-more.toml"] = extra
		_, err := config.Load(testkit.WriteFiles(t, files))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", extra, err, want)
		}
	}
	f("[pools.rr.discovery]\nprovider = \"consul\"\n", "20-more.toml: pools.rr.discovery.provider: unknown provider \"consul\"")
	f("[pools.rr.discovery]\nname = \"x\"\n", "pools.rr.discovery.name: not a key of the fake provider")
	f("[pools.rr.discovery]\nempty_grace = \"soon\"\n", "pools.rr.discovery.empty_grace: bad duration")
	f("[pools.other]\nservers = [\"127.0.0.1:2\"]\n[pools.other.discovery]\npath = \"/x\"\n", "pools.other.discovery.path: needs provider")
	f("[pools.other]\nbalance = \"roundrobin\"\n", "pools.other.servers: empty server list")

	// With a provider, servers may be empty (no seed).
	files := discoveryConfig("x", nil, "")
	if _, err := config.Load(testkit.WriteFiles(t, files)); err != nil {
		t.Fatalf("no seed: %v", err)
	}
}

var _ = sim.Leader // the simulator is the servers' side of these tests
