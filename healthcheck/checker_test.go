package healthcheck

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// events records OnChange calls.
type events struct {
	mu  sync.Mutex
	log []bool
}

func (e *events) add(_ int, up bool) { e.mu.Lock(); e.log = append(e.log, up); e.mu.Unlock() }
func (e *events) len() int           { e.mu.Lock(); defer e.mu.Unlock(); return len(e.log) }

func startChecker(t *testing.T, s *sim.ConnServer, fall, rise int, ev *events) *Checker {
	t.Helper()
	c := NewChecker(CheckerOptions{
		Probe: Probe{
			Servers: []string{s.Addr}, Path: "/health",
			Interval: 50 * time.Millisecond, IntervalMax: 60 * time.Millisecond, FastInterval: 50 * time.Millisecond,
			Timeout: 200 * time.Millisecond, Fall: fall, Logf: func(string, ...any) {},
		},
		Rise: rise, OnChange: ev.add,
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)
	<-c.Ready()
	return c
}

// startSim starts a simulated cluster, closed at the end of the test.
func startSim(t *testing.T, o sim.Options) *sim.Cluster {
	t.Helper()
	o.Logf = func(string, ...any) {}
	cl, err := sim.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCheckerTakesAServerDownAfterFallFailuresAndBackAfterRisePasses(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	s := cl.Connections[0]
	var ev events
	c := startChecker(t, s, 3, 2, &ev)
	if !c.Up(0) {
		t.Fatal("healthy server not up after the first round")
	}

	s.SetHealthy(false)
	waitFor(t, "the server to go down", func() bool { return !c.Up(0) })
	if st := c.Status()[0]; st.Fails < 3 {
		t.Fatalf("down after %d failures, want fall = 3", st.Fails)
	}
	s.SetHealthy(true)
	waitFor(t, "the server to come back", func() bool { return c.Up(0) })
	if st := c.Status()[0]; st.Run < 2 {
		t.Fatalf("up after %d passes, want rise = 2", st.Run)
	}
	if ev.len() != 2 {
		t.Fatalf("OnChange called %d times, want 2 (down, up)", ev.len())
	}
}

func TestCheckerIgnoresFewerFailuresThanFall(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	s := cl.Connections[0]
	var ev events
	c := startChecker(t, s, 1000, 2, &ev) // never enough failures in this test
	s.SetHealthy(false)
	waitFor(t, "a few failed probes", func() bool { return c.Status()[0].Fails >= 3 })
	if !c.Up(0) || ev.len() != 0 {
		t.Fatal("server went down before fall failures")
	}
}

func TestMarkDownTakesAServerDownAtOnceAndProbesBringItBack(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	var ev events
	c := startChecker(t, cl.Connections[0], 2, 2, &ev)
	c.MarkDown(0)
	if c.Up(0) {
		t.Fatal("MarkDown did not take the server down")
	}
	waitFor(t, "rise passes to bring it back", func() bool { return c.Up(0) })
}

func TestCheckerProbesTheConfiguredPort(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1, ConnectionHealthAddrs: []string{"127.0.0.1:0"}})
	s := cl.Connections[0]
	if s.HealthAddr == s.Addr {
		t.Skip("simulator did not give a separate health port")
	}
	_, port, _ := splitPort(s.HealthAddr)
	var ev events
	c := NewChecker(CheckerOptions{
		Probe: Probe{Servers: []string{s.Addr}, Path: "/health", Interval: time.Second, IntervalMax: time.Second,
			FastInterval: time.Second, Timeout: 200 * time.Millisecond, Fall: 1, Logf: func(string, ...any) {}},
		Port: port, Rise: 1, OnChange: ev.add,
	})
	if got := c.servers[0].probe.addr; got != s.HealthAddr {
		t.Fatalf("probes go to %s, want %s", got, s.HealthAddr)
	}
}

func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	return host, n, err
}
