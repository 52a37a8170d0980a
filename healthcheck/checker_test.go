package healthcheck

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// change is a ServerUp or ServerDown event with the server's counts when it was published.
type change struct {
	kind        event.Kind
	run, fails  int
	detail      string
	server, pol string
}

// recordChanges records c's ServerUp and ServerDown events with the counts of their server, read in the
// subscriber: it runs in the probe loop of that server, so no later answer of it can come in between.
func recordChanges(t *testing.T, c *Checker, bus *event.Bus) func() []change {
	var mu sync.Mutex
	var out []change
	t.Cleanup(bus.Subscribe(func(e event.Event) {
		if e.Kind != event.ServerUp && e.Kind != event.ServerDown {
			return
		}
		st, ok := findStatus(c.Status(), e.Server)
		if !ok {
			st.Run, st.Fails = -1, -1 // a server no longer in the pool: fails the comparisons
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, change{e.Kind, st.Run, st.Fails, e.Detail, e.Server, e.Pool})
	}))
	return func() []change {
		mu.Lock()
		defer mu.Unlock()
		return append([]change(nil), out...)
	}
}

func TestCheckerTakesAServerDownAfterFallFailuresAndBackAfterRisePasses(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	s := cl.Connections[0]
	bus := event.NewBus()
	tg := NewTarget(s.Addr)
	c := NewChecker(fastChecks(bus, "/health"), []*Target{tg}) // fall 3, rise 2
	changes := recordChanges(t, c, bus)
	start(t, c)
	if !tg.Up() {
		t.Fatal("healthy server not up after the first round")
	}

	s.SetHealthy(false)
	testkit.Eventually(t, "the server to go down", 5*time.Second, func() bool { return !tg.Up() })
	s.SetHealthy(true)
	testkit.Eventually(t, "the server to come back", 5*time.Second, tg.Up)

	// The first answer decides the initial state (up, on one pass); then exactly one ServerDown, on the
	// third failure in a row, and one ServerUp, on the second pass in a row.
	want := []change{
		{event.ServerUp, 1, 0, "status 200", s.Addr, "test"},
		{event.ServerDown, 0, 3, "status 503", s.Addr, "test"},
		{event.ServerUp, 2, 0, "status 200", s.Addr, "test"},
	}
	if got := changes(); !slices.Equal(got, want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
}

func TestCheckerKeepsAServerUpThroughFewerFailuresThanFall(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	s := cl.Connections[0]
	bus := event.NewBus()
	tg := NewTarget(s.Addr)
	o := fastChecks(bus, "/health")
	c := NewChecker(o, []*Target{tg})
	start(t, c)
	r := record(t, bus)
	// Heal the server in the subscriber of the (fall-1)-th failure: the probe loop that published it
	// sends its next probe only after the subscriber returned, so exactly fall-1 probes in a row fail.
	var healedAt atomic.Int32
	t.Cleanup(bus.Subscribe(func(e event.Event) {
		if e.Kind == event.CheckAnswered && e.Status == 503 && c.Status()[0].Fails == o.Fall-1 {
			healedAt.Store(int32(o.Fall - 1))
			s.SetHealthy(true)
		}
	}))

	s.SetHealthy(false)
	testkit.Eventually(t, "a pass after fall-1 failures", 5*time.Second, func() bool { return healedAt.Load() > 0 && c.Status()[0].Run > 0 })
	if evs := r.of("", event.ServerDown, event.ServerUp); !tg.Up() || len(evs) != 0 {
		t.Fatalf("up %v, events %+v after %d failures; want up and no event (fall %d)", tg.Up(), evs, o.Fall-1, o.Fall)
	}
	if st := c.Status()[0]; st.Fails != 0 {
		t.Fatalf("%d failures counted after a pass, want 0", st.Fails)
	}
}

func TestCheckerProbesTheConfiguredPort(t *testing.T) {
	// The target's own address is a platform in Standby, which answers 503 to everything: only probes
	// that go to the connection server's separate health port pass.
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1, ConnectionHealthAddrs: []string{"127.0.0.1:0"}})
	s, p := cl.Connections[0], cl.Platforms[0]
	if s.HealthAddr == s.Addr {
		t.Fatal("the simulator did not give a separate health port")
	}
	if err := p.SetState(sim.Standby); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(s.HealthAddr)
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus()
	o := fastChecks(bus, "/health")
	o.Port, _ = strconv.Atoi(port)
	tg := NewTarget(p.Addr)
	c := NewChecker(o, []*Target{tg})
	start(t, c)
	if st := c.Status()[0]; !tg.Up() || st.LastStatus != 200 || st.Addr != p.Addr {
		t.Fatalf("after the first round: up %v, status %+v; want up on a 200 from %s", tg.Up(), st, s.HealthAddr)
	}
	s.SetHealthy(false)
	testkit.Eventually(t, "the server to go down with its health port", 5*time.Second, func() bool { return !tg.Up() })
	if p.Requests() != 0 {
		t.Fatalf("the target's own address got %d requests, want none", p.Requests())
	}
}

func TestProbeAddrReplacesOnlyThePort(t *testing.T) {
	f := func(addr string, port int, want string) {
		t.Helper()
		if got := probeAddr(addr, port); got != want {
			t.Errorf("probeAddr(%q, %d) = %q, want %q", addr, port, got, want)
		}
	}
	f("10.0.0.1:8443", 0, "10.0.0.1:8443")
	f("10.0.0.1:8443", 9000, "10.0.0.1:9000")
	f("cx1.example:8443", 9000, "cx1.example:9000")
	f("[::1]:8443", 9000, "[::1]:9000")
	f("no-port", 9000, "no-port")
}

func TestCheckerCountsLiveFailuresInARow(t *testing.T) {
	// Script steps: "e" reports a live failure, "n" a live success. Without active probing and without
	// Start, nothing but the reports changes the target.
	f := func(script string, wantUp bool, wantDetail string) {
		t.Helper()
		bus := event.NewBus()
		r := record(t, bus)
		tg := NewTarget("10.0.0.1:8443")
		c := NewChecker(fastChecks(bus, ""), []*Target{tg})
		for _, step := range strings.Fields(script) {
			if step == "e" {
				c.Report(tg, errRefused)
			} else {
				c.Report(tg, nil)
			}
		}
		wantDowns := 0
		if !wantUp {
			wantDowns = 1
		}
		downs := r.of("", event.ServerDown)
		switch {
		case tg.Up() != wantUp || len(downs) != wantDowns:
			t.Errorf("%q: up %v with ServerDown events %+v, want up %v and %d", script, tg.Up(), downs, wantUp, wantDowns)
		case !wantUp && (downs[0].Detail != wantDetail || downs[0].Server != tg.Addr() || downs[0].Pool != "test"):
			t.Errorf("%q: ServerDown %+v, want Detail %q", script, downs[0], wantDetail)
		}
		if ups := r.of("", event.ServerUp); len(ups) != 0 {
			t.Errorf("%q: ServerUp events %+v, want none", script, ups)
		}
	}
	// fall is 3.
	f("", true, "")
	f("e", true, "")
	f("e e", true, "")
	f("e e e", false, "3 live failures in a row: connection refused")
	f("e e e e e", false, "3 live failures in a row: connection refused")
	f("e e n e e", true, "")
	f("e n e n e n e", true, "")
	f("e e n e e e", false, "3 live failures in a row: connection refused")
	f("n n e e e", false, "3 live failures in a row: connection refused")
}

func TestCheckerWithoutActiveChecksTriesADownServerAgainAfterInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := event.NewBus()
		r := record(t, bus)
		o := fastChecks(bus, "")
		o.Interval, o.IntervalMax = 10*time.Second, 20*time.Second
		tg := NewTarget("10.0.0.1:8443")
		c := NewChecker(o, []*Target{tg})
		if !tg.Up() {
			t.Fatal("without active checks a server is up from the start")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		t0 := time.Now()
		c.Start(ctx)
		synctest.Wait()
		select {
		case <-c.Ready():
		default:
			t.Fatal("without active checks there is no first round to wait for: want Ready at once")
		}

		for range o.Fall {
			c.Report(tg, errRefused)
		}
		if tg.Up() {
			t.Fatal("still up after fall live failures")
		}
		time.Sleep(o.Interval - time.Nanosecond)
		synctest.Wait()
		if tg.Up() {
			t.Fatalf("back up after %v, before Interval %v", time.Since(t0), o.Interval)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !tg.Up() {
			t.Fatalf("not back up after Interval %v", o.Interval)
		}
		evs := r.of(tg.Addr(), event.ServerDown, event.ServerUp)
		if len(evs) != 2 || evs[0].Kind != event.ServerDown || !evs[0].Time.Equal(t0) ||
			evs[1].Kind != event.ServerUp || !evs[1].Time.Equal(t0.Add(o.Interval)) || evs[1].Detail != "retry after live failures" {
			t.Fatalf("events %+v, want ServerDown at %v and ServerUp at +%v", evs, t0, o.Interval)
		}
		if st := c.Status()[0]; st.Passive != 0 {
			t.Fatalf("back up with %d live failures counted, want 0", st.Passive)
		}
		// It starts counting afresh: fall-1 failures keep it up.
		for range o.Fall - 1 {
			c.Report(tg, errRefused)
		}
		if !tg.Up() {
			t.Fatal("down again after fall-1 live failures")
		}
	})
}

func TestCheckerWithoutActiveChecksDoesNotRetryARemovedServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := event.NewBus()
		r := record(t, bus)
		o := fastChecks(bus, "")
		ts := targets("10.0.0.1:8443", "10.0.0.2:8443")
		c := NewChecker(o, ts)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c.Start(ctx)
		<-c.Ready()
		for range o.Fall {
			c.Report(ts[1], errRefused)
		}
		c.Set(ts[:1])
		time.Sleep(2 * o.Interval)
		synctest.Wait()
		c.retryPassive(ts[1]) // as if its retry had fired while Set ran
		if ts[1].Up() || len(r.of(ts[1].Addr(), event.ServerUp)) != 0 {
			t.Fatalf("a removed server came back up: %+v", r.of(""))
		}
	})
}

func TestCheckerWithoutActiveChecksTakesNewServersUpAtOnce(t *testing.T) {
	bus := event.NewBus()
	ts := targets("10.0.0.1:8443", "10.0.0.2:8443")
	c := NewChecker(fastChecks(bus, ""), ts[:1])
	c.Set(ts)
	if !ts[1].Up() {
		t.Fatal("a new server of a checker without active checks is not up")
	}
	if sts := c.Status(); len(sts) != 2 || sts[1].Addr != ts[1].Addr() || !sts[1].Up {
		t.Fatalf("status %+v, want both servers up in config order", sts)
	}
}

func TestCheckerUpdateWithoutActiveChecksBringsDownServersBackAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := event.NewBus()
		r := record(t, bus)
		o := fastChecks(bus, "")
		o.Interval, o.IntervalMax = 10*time.Second, 20*time.Second
		ts := targets("10.0.0.1:8443", "10.0.0.2:8443")
		c := NewChecker(o, ts)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c.Start(ctx)
		<-c.Ready()
		for range o.Fall {
			c.Report(ts[1], errRefused)
		}
		o.Fall++
		c.Update(o)
		if !ts[0].Up() || !ts[1].Up() {
			t.Fatalf("after Update: up %v %v, want both up", ts[0].Up(), ts[1].Up())
		}
		ups := r.of("", event.ServerUp)
		if len(ups) != 1 || ups[0].Server != ts[1].Addr() || ups[0].Detail != "active checks disabled" {
			t.Fatalf("ServerUp events %+v, want one for %s", ups, ts[1].Addr())
		}
		// The pending retry was cancelled: no second ServerUp at Interval.
		time.Sleep(2 * o.Interval)
		synctest.Wait()
		if n := len(r.of("", event.ServerUp)); n != 1 {
			t.Fatalf("%d ServerUp events, want 1", n)
		}
	})
}

func TestCheckerProbesAtTheFastPaceAfterALiveFailure(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	bus := event.NewBus()
	o := fastChecks(bus, "/health")
	o.Interval, o.IntervalMax = time.Hour, time.Hour // no steady probe during the test
	tg := NewTarget(cl.Connections[0].Addr)
	c := NewChecker(o, []*Target{tg})
	start(t, c)
	before := c.Status()[0].Probes
	c.Report(tg, errRefused)
	testkit.Eventually(t, "a probe at the fast pace", 5*time.Second, func() bool { return c.Status()[0].Probes > before })
	if !tg.Up() {
		t.Fatal("one live failure took the server down")
	}
}

func TestCheckerLiveFailuresTakeAServerDownAndPassingProbesBringItBack(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	bus := event.NewBus()
	o := fastChecks(bus, "/health")
	tg := NewTarget(cl.Connections[0].Addr)
	c := NewChecker(o, []*Target{tg})
	start(t, c)
	// A run of passes longer than rise: going down must restart it.
	testkit.Eventually(t, "a run of passes", 5*time.Second, func() bool { return c.Status()[0].Run > o.Rise })
	changes := recordChanges(t, c, bus)
	for range o.Fall {
		c.Report(tg, errRefused)
	}
	if tg.Up() {
		t.Fatal("still up after fall live failures")
	}
	testkit.Eventually(t, "passing probes to bring the server back", 5*time.Second, tg.Up)
	got := changes()
	if len(got) != 2 || got[0].kind != event.ServerDown || got[0].detail != "3 live failures in a row: connection refused" ||
		got[1].kind != event.ServerUp || got[1].run != o.Rise {
		t.Fatalf("changes %+v, want ServerDown for the live failures, then ServerUp after rise %d passes", got, o.Rise)
	}
	if st := c.Status()[0]; st.Passive != 0 {
		t.Fatalf("back up with %d live failures counted, want 0", st.Passive)
	}
}

func TestCheckerSetKeepsTheStateOfKeptServers(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 3})
	ok, bad := cl.Connections[0], cl.Connections[1]
	bad.SetHealthy(false)
	bus := event.NewBus()
	o := fastChecks(bus, "/health")
	ts := targets(ok.Addr, bad.Addr)
	c := NewChecker(o, ts)
	changes := recordChanges(t, c, bus)
	start(t, c)
	testkit.Eventually(t, "a run of passes and failures", 5*time.Second, func() bool {
		sts := c.Status()
		return sts[0].Run >= 3 && sts[1].Fails >= 2
	})
	before := c.Status()
	from := len(changes())

	added := NewTarget(cl.Connections[2].Addr)
	c.Set([]*Target{ts[1], added, ts[0]})
	after := c.Status()
	if len(after) != 3 || after[0].Addr != bad.Addr || after[1].Addr != added.Addr() || after[2].Addr != ok.Addr {
		t.Fatalf("status %+v, want the new config order", after)
	}
	if !ts[0].Up() || ts[1].Up() {
		t.Fatalf("up %v %v after Set, want the kept states (true false)", ts[0].Up(), ts[1].Up())
	}
	if a, b := statusOf(t, after, ok.Addr), before[0]; a.Run < b.Run || a.Probes < b.Probes {
		t.Fatalf("kept healthy server: %+v after Set, %+v before: counts were reset", a, b)
	}
	if a, b := statusOf(t, after, bad.Addr), before[1]; a.Fails < b.Fails || a.Probes < b.Probes {
		t.Fatalf("kept failing server: %+v after Set, %+v before: counts were reset", a, b)
	}

	// The kept down server is still judged by rise: a first answer would bring it up on one pass.
	bad.SetHealthy(true)
	testkit.Eventually(t, "the kept down server to come back", 5*time.Second, ts[1].Up)
	var gotUp []change
	for _, ch := range changes()[from:] {
		if ch.server != added.Addr() {
			gotUp = append(gotUp, ch)
		}
	}
	if len(gotUp) != 1 || gotUp[0].server != bad.Addr || gotUp[0].kind != event.ServerUp || gotUp[0].run != o.Rise {
		t.Fatalf("changes of kept servers after Set: %+v, want only ServerUp of %s after rise %d passes", gotUp, bad.Addr, o.Rise)
	}
}

func TestCheckerSetTakesANewServerUpOnlyOnAPassingProbe(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 3})
	bus := event.NewBus()
	o := fastChecks(bus, "/health")
	old := NewTarget(cl.Connections[0].Addr)
	c := NewChecker(o, []*Target{old})
	start(t, c)
	r := record(t, bus)
	changes := recordChanges(t, c, bus)

	healthy, sick := NewTarget(cl.Connections[1].Addr), NewTarget(cl.Connections[2].Addr)
	cl.Connections[2].SetHealthy(false)
	c.Set([]*Target{old, healthy, sick})
	if sick.Up() {
		t.Fatal("a new server is up before any probe")
	}
	testkit.Eventually(t, "the new healthy server to come up", 5*time.Second, healthy.Up)
	// Set does not make a new server up: it becomes up by its first passing probe, which publishes
	// ServerUp (an answer that finds the server already up publishes nothing). The ServerUp comes before
	// any other event of the server, with one probe and one pass.
	evs := r.of(healthy.Addr())
	if len(evs) == 0 || evs[0].Kind != event.ServerUp {
		t.Fatalf("events of the new server %+v, want ServerUp first", evs)
	}
	var ups []change
	for _, ch := range changes() {
		if ch.server == healthy.Addr() {
			ups = append(ups, ch)
		}
	}
	if len(ups) != 1 || ups[0].kind != event.ServerUp || ups[0].run != 1 || ups[0].fails != 0 {
		t.Fatalf("changes of the new server %+v, want one ServerUp on its first pass", ups)
	}

	// A new server whose first probe fails does not take traffic; afterwards rise passes bring it up.
	testkit.Eventually(t, "the new failing server's first probe", 5*time.Second, func() bool { return len(r.of(sick.Addr(), event.CheckAnswered)) > 0 })
	if first := r.of(sick.Addr())[0]; first.Kind != event.CheckAnswered || first.Status != 503 || sick.Up() {
		t.Fatalf("first event of the failing new server %+v, up %v; want a 503 answer and not up", first, sick.Up())
	}
	cl.Connections[2].SetHealthy(true)
	testkit.Eventually(t, "the new server to come up after its failure", 5*time.Second, sick.Up)
	for _, ch := range changes() {
		if ch.server == sick.Addr() && (ch.kind != event.ServerUp || ch.run != o.Rise) {
			t.Fatalf("change %+v of the failing new server, want ServerUp after rise %d passes", ch, o.Rise)
		}
	}
	if !old.Up() {
		t.Fatal("the kept server went down")
	}
}

func TestCheckerSetStopsProbingARemovedServer(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 2})
	bus := event.NewBus()
	ts := targets(cl.Connections[0].Addr, cl.Connections[1].Addr)
	c := NewChecker(fastChecks(bus, "/health"), ts)
	start(t, c)
	kept, gone := ts[0], ts[1]
	c.Set([]*Target{kept})
	if sts := c.Status(); len(sts) != 1 || sts[0].Addr != kept.Addr() {
		t.Fatalf("status %+v, want only %s", sts, kept.Addr())
	}
	base, keptBase := gone.probes.Load(), kept.probes.Load()
	const rounds = 5
	testkit.Eventually(t, "more probes of the kept server", 5*time.Second, func() bool { return kept.probes.Load() >= keptBase+rounds })
	// A probe in flight when Set ran may still land; no new one starts.
	if n := gone.probes.Load(); n > base+1 {
		t.Fatalf("removed server probed %d more times while the kept one was probed %d times", n-base, rounds)
	}
}

func TestCheckerUpdateKeepsStateAndItsPoolAndBus(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	bus := event.NewBus()
	o := fastChecks(bus, "/health")
	tg := NewTarget(cl.Connections[0].Addr)
	c := NewChecker(o, []*Target{tg})
	start(t, c)
	r := record(t, bus)
	other := event.NewBus()
	lost := record(t, other)

	o2 := o
	o2.Pool, o2.Bus, o2.Logf = "renamed", other, nil
	o2.Interval, o2.IntervalMax = 40*time.Millisecond, 45*time.Millisecond
	o2.Fall, o2.Rise = 5, 1
	c.Update(o2)
	if !tg.Up() {
		t.Fatal("Update took the server down")
	}
	from := r.mark()
	base := c.Status()[0].Probes
	testkit.Eventually(t, "probes with the new options", 5*time.Second, func() bool { return c.Status()[0].Probes >= base+3 })
	for _, e := range r.since(from, "") {
		if e.Pool != "test" || e.Kind != event.CheckAnswered {
			t.Fatalf("event %+v after Update, want only CheckAnswered of pool test", e)
		}
	}
	if n := len(lost.of("")); n != 0 {
		t.Fatalf("%d events on the Bus of the new options, want them on the original Bus", n)
	}
	// The new fall and rise apply.
	changes := recordChanges(t, c, bus)
	cl.Connections[0].SetHealthy(false)
	testkit.Eventually(t, "the server to go down", 5*time.Second, func() bool { return !tg.Up() })
	cl.Connections[0].SetHealthy(true)
	testkit.Eventually(t, "the server to come back", 5*time.Second, tg.Up)
	want := []change{
		{event.ServerDown, 0, 5, "status 503", tg.Addr(), "test"},
		{event.ServerUp, 1, 0, "status 200", tg.Addr(), "test"},
	}
	if got := changes(); !slices.Equal(got, want) {
		t.Fatalf("changes %+v, want %+v (fall 5, rise 1)", got, want)
	}
}

func TestCheckerDiscardsAProbeAnsweredAfterItsServerWasRemoved(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 2, Connections: 1})
	keptP, hungP := cl.Platforms[0], cl.Platforms[1]
	setState(t, hungP, sim.Leader) // both answer 200 until the second hangs
	bus := event.NewBus()
	o := fastChecks(bus, sim.DefaultLeaderCheckPath) // the path platforms record probes of
	o.Credentials = sim.DefaultCredentials
	o.Timeout = 300 * time.Millisecond // how long the hung probe lasts
	kept, gone := NewTarget(keptP.Addr), NewTarget(hungP.Addr)
	c := NewChecker(o, []*Target{kept, gone})
	start(t, c)
	r := record(t, bus)

	setState(t, hungP, sim.Hung)
	hung := func() bool {
		return slices.ContainsFunc(hungP.Probes(), func(p sim.Probe) bool { return p.Status == 0 })
	}
	testkit.Eventually(t, "a probe to hang", 5*time.Second, hung)
	base, from := gone.probes.Load(), r.mark()
	c.Set([]*Target{kept})
	// The hung probe times out after Timeout; the kept server's probes, at least Interval apart, pace
	// the wait past it.
	keptBase := kept.probes.Load()
	testkit.Eventually(t, "probes of the kept server for longer than Timeout", 5*time.Second, func() bool {
		return kept.probes.Load() >= keptBase+uint64(o.Timeout/o.Interval)+2
	})
	if n, evs := gone.probes.Load(), r.since(from, gone.Addr()); n != base || len(evs) != 0 {
		t.Fatalf("the removed server's hung probe was counted (%d more) with events %+v, want it discarded", n-base, evs)
	}
	if !gone.Up() {
		t.Fatal("the removed server's discarded probe took it down")
	}
}

func TestCheckerWithConnectProbesTakesAServerDownWhenItRefusesConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	bus := event.NewBus()
	o := fastChecks(bus, "")
	o.Connect = true
	tg := NewTarget(ln.Addr().String())
	c := NewChecker(o, []*Target{tg})
	changes := recordChanges(t, c, bus)
	start(t, c)
	if !tg.Up() || !c.Status()[0].Answered {
		t.Fatalf("a server that accepts connections: up %v, status %+v", tg.Up(), c.Status()[0])
	}
	ln.Close()
	testkit.Eventually(t, "the server to go down", 5*time.Second, func() bool { return !tg.Up() })
	got := changes()
	if len(got) != 2 || got[0].kind != event.ServerUp || got[1].kind != event.ServerDown || got[1].fails != 3 {
		t.Fatalf("changes %+v, want up on the first connection, down on the third refused one", got)
	}
}

func TestAPassingProbeWakesItsPoolOnlyWhileARequestAwaitsIt(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 1})
	bus := event.NewBus()
	tg := NewTarget(cl.Connections[0].Addr)
	c := NewChecker(fastChecks(bus, "/health"), []*Target{tg})
	start(t, c)
	answers := make(chan struct{}, 100)
	t.Cleanup(bus.Subscribe(func(e event.Event) {
		if e.Kind == event.CheckAnswered {
			answers <- struct{}{}
		}
	}))
	woken := bus.Changed("test")
	for range 3 {
		<-answers
	}
	select {
	case <-woken:
		t.Fatal("passing probes of a server nobody awaits woke the pool")
	default:
	}
	tg.AwaitPass()
	defer tg.EndAwaitPass()
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a passing probe of an awaited server did not wake its pool within 5s")
	}
}
