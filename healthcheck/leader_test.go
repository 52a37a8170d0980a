package healthcheck

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// leaderChecks are fast LeaderCheck options for the simulator's platforms (fall 3).
func leaderChecks(bus *event.Bus) Options {
	o := fastChecks(bus, sim.DefaultLeaderCheckPath)
	o.Credentials = sim.DefaultCredentials
	return o
}

// startLeaderSim starts n platforms, the ones in leaders in state Leader and the others Backup.
func startLeaderSim(t *testing.T, n int, leaders ...int) (*sim.Cluster, []*Target) {
	t.Helper()
	cl := startSim(t, sim.Options{Platforms: n, Connections: 1})
	ts := make([]*Target, n)
	for i, p := range cl.Platforms {
		setState(t, p, sim.Backup)
		ts[i] = NewTarget(p.Addr)
	}
	for _, i := range leaders {
		setState(t, cl.Platforms[i], sim.Leader)
	}
	return cl, ts
}

func setState(t *testing.T, p *sim.Platform, s sim.State) {
	t.Helper()
	if err := p.SetState(s); err != nil {
		t.Fatal(err)
	}
}

// startLeader starts l and waits for its first round and, if that elected a leader, for its
// LeaderChanged event: Ready may close just before that event is published.
func startLeader(t *testing.T, l *Leader, bus *event.Bus) {
	t.Helper()
	r := &recorder{}
	cancel := bus.Subscribe(r.add)
	defer cancel()
	start(t, l)
	if l.Current() != nil {
		testkit.Eventually(t, "the LeaderChanged of the first round", 5*time.Second, func() bool { return len(r.of("", event.LeaderChanged)) > 0 })
	}
}

// leaderChange is a LeaderChanged event as (new, old) addresses.
type leaderChange struct{ server, old string }

func leaderChanges(r *recorder) []leaderChange {
	var out []leaderChange
	for _, e := range r.of("", event.LeaderChanged) {
		out = append(out, leaderChange{e.Server, e.Old})
	}
	return out
}

func TestLeaderFirstRoundElectsTheServerAnswering200(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 1) // the second platform is the leader: not a config-order default
	bus := event.NewBus()
	r := record(t, bus)
	l := NewLeader(leaderChecks(bus), ts)
	start(t, l)
	// Current and the Up flags are set when Ready closes; the event follows.
	if l.Current() != ts[1] || !ts[1].Up() || ts[0].Up() {
		t.Fatalf("after the first round: current %v, up %v %v; want %s", l.Current(), ts[0].Up(), ts[1].Up(), ts[1].Addr())
	}
	testkit.Eventually(t, "LeaderChanged", 5*time.Second, func() bool { return len(r.of("", event.LeaderChanged)) > 0 })
	evs := r.of("", event.LeaderChanged)
	if len(evs) != 1 || evs[0].Server != ts[1].Addr() || evs[0].Old != "" || evs[0].Pool != "test" {
		t.Fatalf("LeaderChanged events %+v, want one to %s from \"\"", evs, ts[1].Addr())
	}
	if n := len(r.of("", event.SplitBrain)); n != 0 || l.SplitBrains() != 0 || l.Changes() != 0 {
		t.Fatalf("%d SplitBrain events, %d split brains and %d changes counted; want 0, 0, 0 (the first election is no change)", n, l.SplitBrains(), l.Changes())
	}
	for _, p := range cl.Platforms {
		if pr := p.Probes(); len(pr) == 0 || pr[0].Authorization != "Basic "+sim.DefaultCredentials {
			t.Fatalf("%s got probes %+v, want the Basic credentials", p.Name, pr)
		}
	}
}

func TestLeaderMovesToTheServerAnswering200AfterFallNon200AnswersOfTheLeader(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 0)
	bus := event.NewBus()
	o := leaderChecks(bus)
	l := NewLeader(o, ts)
	startLeader(t, l, bus)
	if l.Current() != ts[0] {
		t.Fatalf("first round elected %v, want %s", l.Current(), ts[0].Addr())
	}
	r := record(t, bus)
	// The old leader's failures when the leader changed, read in the subscriber: it runs in the loop of
	// the server whose answer changed the leader.
	var mu sync.Mutex
	var failsAtChange []int
	t.Cleanup(bus.Subscribe(func(e event.Event) {
		if e.Kind == event.LeaderChanged {
			st, _ := findStatus(l.Status(), ts[0].Addr())
			mu.Lock()
			failsAtChange = append(failsAtChange, st.Fails)
			mu.Unlock()
		}
	}))

	// The second server answers 200 too, and the leader again (split brain: the leader stays); then the
	// leader steps down.
	setState(t, cl.Platforms[1], sim.Leader)
	testkit.Eventually(t, "split brain", 5*time.Second, func() bool { return len(r.of("", event.SplitBrain)) > 0 })
	if l.Current() != ts[0] {
		t.Fatal("split brain changed the leader")
	}
	setState(t, cl.Platforms[0], sim.Backup)
	testkit.Eventually(t, "the leader to change", 5*time.Second, func() bool { return l.Current() != ts[0] })

	if got := leaderChanges(r); len(got) != 1 || got[0] != (leaderChange{ts[1].Addr(), ts[0].Addr()}) {
		t.Fatalf("leader changes %+v, want one from %s to %s", got, ts[0].Addr(), ts[1].Addr())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failsAtChange) != 1 || failsAtChange[0] != o.Fall {
		t.Fatalf("the leader changed after %v non-200 answers, want fall = %d", failsAtChange, o.Fall)
	}
	if !ts[1].Up() || ts[0].Up() || l.Current() != ts[1] {
		t.Fatalf("up %v %v, want only the new leader up", ts[0].Up(), ts[1].Up())
	}
	if len(r.of(ts[0].Addr(), event.SplitBrain)) == 0 || l.SplitBrains() == 0 {
		t.Fatal("no SplitBrain reported while both servers answered 200")
	}
}

func TestLeaderSetRemovingTheLeaderElectsAServerThatAnswered200AtOnce(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 0)
	bus := event.NewBus()
	l := NewLeader(leaderChecks(bus), ts)
	startLeader(t, l, bus)
	setState(t, cl.Platforms[1], sim.Leader)
	testkit.Eventually(t, "a 200 from the second server", 5*time.Second, func() bool { return l.Status()[1].Run > 0 })
	r := record(t, bus)

	l.Set(ts[1:])
	// Set publishes before it returns: no probe is needed.
	if got := leaderChanges(r); len(got) != 1 || got[0] != (leaderChange{ts[1].Addr(), ts[0].Addr()}) {
		t.Fatalf("leader changes %+v, want one from %s to %s", got, ts[0].Addr(), ts[1].Addr())
	}
	if l.Current() != ts[1] || !ts[1].Up() || ts[0].Up() {
		t.Fatalf("current %v, up %v %v; want the second server alone up", l.Current(), ts[0].Up(), ts[1].Up())
	}
	if sts := l.Status(); len(sts) != 1 || sts[0].Addr != ts[1].Addr() {
		t.Fatalf("status %+v, want only %s", sts, ts[1].Addr())
	}
}

func TestLeaderSetRemovingTheLeaderLeavesNoLeaderUntilAnotherServerAnswers200(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 0)
	bus := event.NewBus()
	l := NewLeader(leaderChecks(bus), ts)
	startLeader(t, l, bus)
	r := record(t, bus)

	l.Set(ts[1:])
	if got := leaderChanges(r); len(got) != 1 || got[0] != (leaderChange{"", ts[0].Addr()}) {
		t.Fatalf("leader changes %+v, want one from %s to none", got, ts[0].Addr())
	}
	if l.Current() != nil || ts[0].Up() || ts[1].Up() {
		t.Fatalf("current %v, up %v %v; want no leader", l.Current(), ts[0].Up(), ts[1].Up())
	}
	setState(t, cl.Platforms[1], sim.Leader)
	testkit.Eventually(t, "the second server to be elected", 5*time.Second, func() bool { return l.Current() == ts[1] })
	if got := leaderChanges(r); len(got) != 2 || got[1] != (leaderChange{ts[1].Addr(), ""}) {
		t.Fatalf("leader changes %+v, want the second from none to %s", got, ts[1].Addr())
	}
}

func TestLeaderSetKeepsTheLeaderAndProbesANewServer(t *testing.T) {
	cl, ts := startLeaderSim(t, 3, 0)
	bus := event.NewBus()
	l := NewLeader(leaderChecks(bus), ts[:2])
	startLeader(t, l, bus)
	r := record(t, bus)
	l.Set(ts)
	testkit.Eventually(t, "a probe of the new server", 5*time.Second, func() bool { return len(r.of(ts[2].Addr(), event.CheckAnswered)) > 0 })
	if l.Current() != ts[0] || len(r.of("", event.LeaderChanged)) != 0 {
		t.Fatalf("current %v, events %+v; want the leader kept", l.Current(), r.of(""))
	}
	// A new server answering 200 while the leader is healthy is split brain, not a new leader.
	setState(t, cl.Platforms[2], sim.Leader)
	testkit.Eventually(t, "split brain", 5*time.Second, func() bool { return len(r.of("", event.SplitBrain)) > 0 })
	if l.Current() != ts[0] || ts[2].Up() {
		t.Fatal("a new server answering 200 took over from a healthy leader")
	}
}

func TestLeaderReportOfALiveFailureProbesEveryServerAtOnce(t *testing.T) {
	_, ts := startLeaderSim(t, 2, 0)
	bus := event.NewBus()
	o := leaderChecks(bus)
	o.Interval, o.IntervalMax = time.Hour, time.Hour // no steady probe during the test
	l := NewLeader(o, ts)
	startLeader(t, l, bus)
	before := l.Status()
	l.Report(ts[0], nil) // a success probes nothing
	l.Report(ts[0], errRefused)
	testkit.Eventually(t, "a probe of every server", 5*time.Second, func() bool {
		after := l.Status()
		return after[0].Probes > before[0].Probes && after[1].Probes > before[1].Probes
	})
	if l.Current() != ts[0] {
		t.Fatal("a live failure changed the leader")
	}
}

func TestLeaderMergesTriggersCloserThanAQuarterOfFastIntervalIntoOneRoundAtTheEndOfTheGap(t *testing.T) {
	f := func(fast, wantGap time.Duration) {
		t.Helper()
		synctest.Test(t, func(t *testing.T) {
			o := leaderChecks(nil)
			o.FastInterval = fast
			ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
			l := NewLeader(o, ts)
			kicks := func() int {
				n := 0
				for _, tg := range ts {
					select {
					case <-tg.kick:
						n++
					default:
					}
				}
				return n
			}
			g := func(what string, want int) {
				t.Helper()
				if n := kicks(); n != want {
					t.Errorf("fast interval %v: %s kicked %d probes, want %d", fast, what, n, want)
				}
			}
			l.Trigger()
			g("the first trigger", 2)
			time.Sleep(wantGap - time.Nanosecond)
			l.Trigger()
			l.Report(ts[0], errRefused)
			g("triggers within the gap", 0)
			// The merged triggers are not dropped: one round at the end of the gap, so that a request
			// held after its failure sees a probe that started after it.
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			g("the end of the gap", 2)
			l.Report(ts[1], nil)
			g("a live success", 0)
			time.Sleep(wantGap)
			synctest.Wait()
			g("a quiet gap", 0)
			l.Report(ts[1], errRefused)
			g("a live failure after the gap", 2)
		})
	}
	f(400*time.Millisecond, 100*time.Millisecond)
	f(100*time.Millisecond, 50*time.Millisecond) // at least 50ms
	f(10*time.Second, 500*time.Millisecond)      // at most 500ms
}

func TestLeaderProbesFastWhileTheLeaderIsUnknownOrFailingOrAnotherServerAnswers200(t *testing.T) {
	o := leaderChecks(nil)
	o.Interval, o.IntervalMax = time.Second, 2*time.Second
	o.Rand = func() float64 { return 0.5 }
	steady := 1500 * time.Millisecond
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
	l := NewLeader(o, ts)
	f := func(what string, want time.Duration) {
		t.Helper()
		for _, tg := range ts {
			if got := l.pace(tg); got != want {
				t.Errorf("%s: pace of %s %v, want %v", what, tg.Addr(), got, want)
			}
		}
	}
	f("before the first round", o.FastInterval)
	l.answer(ts[0], time.Now(), 200, nil)
	l.answer(ts[1], time.Now(), 503, nil) // completes the first round
	if l.Current() != ts[0] {
		t.Fatalf("current %v, want %s", l.Current(), ts[0].Addr())
	}
	f("healthy leader", steady)
	l.answer(ts[0], time.Now(), 503, nil)
	f("leader answered 503", o.FastInterval)
	l.answer(ts[0], time.Now(), 200, nil)
	f("leader answered 200 again", steady)
	l.answer(ts[1], time.Now(), 200, nil)
	f("another server answered 200", o.FastInterval)
	l.answer(ts[0], time.Now(), 200, nil)
	f("the leader answered 200 too (split brain)", o.FastInterval)
	l.answer(ts[1], time.Now(), 503, nil)
	f("the other server answered 503 again", steady)
	if l.Current() != ts[0] {
		t.Fatalf("current %v, want %s: a second 200 alone does not switch", l.Current(), ts[0].Addr())
	}
	l.answer(ts[0], time.Now(), 0, errRefused)
	l.answer(ts[0], time.Now(), 0, errRefused)
	l.answer(ts[0], time.Now(), 0, errRefused)
	if l.Current() != nil {
		t.Fatalf("current %v after fall failures and no other 200, want none", l.Current())
	}
	f("no leader", o.FastInterval)
}

func TestLeaderUpdateKeepsTheLeaderAndAppliesTheNewFall(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
	bus := event.NewBus()
	l := NewLeader(leaderChecks(bus), ts)
	l.answer(ts[0], time.Now(), 200, nil)
	l.answer(ts[1], time.Now(), 200, nil)
	r := record(t, bus)
	o := leaderChecks(event.NewBus())
	o.Fall = 5
	l.Update(o)
	if l.Current() != ts[0] {
		t.Fatal("Update changed the leader")
	}
	for i := range 4 {
		l.answer(ts[0], time.Now(), 503, nil)
		if l.Current() != ts[0] {
			t.Fatalf("leader changed after %d non-200 answers, want fall 5", i+1)
		}
	}
	l.answer(ts[0], time.Now(), 503, nil)
	if got := leaderChanges(r); l.Current() != ts[1] || len(got) != 1 || got[0] != (leaderChange{ts[1].Addr(), ts[0].Addr()}) {
		t.Fatalf("current %v, leader changes %+v after 5 non-200 answers; want %s", l.Current(), got, ts[1].Addr())
	}
}

func TestLeaderIgnoresAnswersOfARemovedServer(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
	bus := event.NewBus()
	l := NewLeader(leaderChecks(bus), ts)
	l.answer(ts[0], time.Now(), 200, nil)
	l.answer(ts[1], time.Now(), 503, nil)
	l.Set(ts[:1])
	r := record(t, bus)
	// A probe of the removed server that was in flight during Set answers 200.
	l.answer(ts[1], time.Now(), 200, nil)
	if evs := r.of(""); len(evs) != 0 || l.SplitBrains() != 0 {
		t.Fatalf("events %+v, %d split brains after an answer of a removed server; want none", evs, l.SplitBrains())
	}
	for range 3 {
		l.answer(ts[0], time.Now(), 503, nil)
	}
	if l.Current() != nil || ts[1].Up() {
		t.Fatalf("current %v after the leader's fall: a removed server was elected", l.Current())
	}
}

func TestLeaderWhoseChecksHangIsReplacedAfterFallTimeoutsSaidInPlainWords(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 0)
	bus := event.NewBus()
	o := leaderChecks(bus)
	o.Timeout = 300 * time.Millisecond
	l := NewLeader(o, ts)
	startLeader(t, l, bus)
	if l.Current() != ts[0] {
		t.Fatalf("first round elected %v, want %s", l.Current(), ts[0].Addr())
	}
	r := record(t, bus)
	var mu sync.Mutex
	var atChange []ServerStatus // the hung leader's status when the leader changed
	t.Cleanup(bus.Subscribe(func(e event.Event) {
		if e.Kind == event.LeaderChanged {
			st, _ := findStatus(l.Status(), ts[0].Addr())
			mu.Lock()
			atChange = append(atChange, st)
			mu.Unlock()
		}
	}))

	// The leader's process hangs (it takes connections and never answers); the second server leads.
	setState(t, cl.Platforms[0], sim.Hung)
	setState(t, cl.Platforms[1], sim.Leader)
	testkit.Eventually(t, "the leader to change", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(atChange) > 0 && len(r.of("", event.LeaderChanged)) > 0
	})

	if got := leaderChanges(r); len(got) != 1 || got[0] != (leaderChange{ts[1].Addr(), ts[0].Addr()}) {
		t.Fatalf("leader changes %+v, want one from %s to %s", got, ts[0].Addr(), ts[1].Addr())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(atChange) != 1 || atChange[0].Fails != o.Fall || atChange[0].LastStatus != 0 ||
		atChange[0].LastError != "no answer: timed out after 300ms" {
		t.Fatalf("the hung leader when the leader changed: %+v, want fall = %d timeouts, \"no answer: timed out after 300ms\"", atChange, o.Fall)
	}
	if !ts[1].Up() || ts[0].Up() {
		t.Fatalf("up %v %v, want only the new leader up", ts[0].Up(), ts[1].Up())
	}
}

func TestLeaderCheckSendsTheAuthorizationHeaderExactlyAndWrongCredentialsElectNobody(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 0)
	bus := event.NewBus()
	o := leaderChecks(bus) // sim.DefaultCredentials, admin:admin
	l := NewLeader(o, ts)
	startLeader(t, l, bus)
	testkit.Eventually(t, "three probes of each server", 5*time.Second, func() bool {
		sts := l.Status()
		return sts[0].Probes >= 3 && sts[1].Probes >= 3
	})
	for _, p := range cl.Platforms {
		for _, pr := range p.Probes() {
			if pr.Authorization != "Basic YWRtaW46YWRtaW4=" {
				t.Fatalf("%s got Authorization %q, want exactly \"Basic YWRtaW46YWRtaW4=\"", p.Name, pr.Authorization)
			}
		}
	}
	if l.Current() != ts[0] {
		t.Fatalf("current %v with the right credentials, want %s", l.Current(), ts[0].Addr())
	}

	// With other credentials (admin:wrong) every server answers 401: nobody leads, and the credentials
	// appear neither in the log nor in an event.
	cl2, ts2 := startLeaderSim(t, 2, 0)
	bus2 := event.NewBus()
	r := record(t, bus2)
	logs := &logLines{}
	o2 := leaderChecks(bus2)
	o2.Credentials, o2.Logf = "YWRtaW46d3Jvbmc=", logs.logf
	l2 := NewLeader(o2, ts2)
	startLeader(t, l2, bus2)
	testkit.Eventually(t, "three probes of each server", 5*time.Second, func() bool {
		sts := l2.Status()
		return sts[0].Probes >= 3 && sts[1].Probes >= 3
	})
	if l2.Current() != nil || ts2[0].Up() || ts2[1].Up() {
		t.Fatalf("current %v, up %v %v with wrong credentials; want no leader", l2.Current(), ts2[0].Up(), ts2[1].Up())
	}
	for _, st := range l2.Status() {
		if st.LastStatus != 401 {
			t.Errorf("%s: last status %d, want 401", st.Addr, st.LastStatus)
		}
	}
	for _, p := range cl2.Platforms {
		if pr := p.Probes(); len(pr) == 0 || pr[0].Authorization != "Basic YWRtaW46d3Jvbmc=" {
			t.Fatalf("%s got probes %+v, want the configured credentials", p.Name, pr)
		}
	}
	secret := func(s string) bool {
		return strings.Contains(s, "YWRtaW46d3Jvbmc=") || strings.Contains(s, "admin:wrong")
	}
	if secret(logs.all()) {
		t.Errorf("credentials in the log:\n%s", logs.all())
	}
	for _, e := range r.of("") {
		if secret(e.Detail) {
			t.Errorf("credentials in an event: %+v", e)
		}
	}
}
