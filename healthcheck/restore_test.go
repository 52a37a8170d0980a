package healthcheck

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestLeaderRestoreElectsTheRememberedLeaderAtOnceAndEndsTheFirstRound(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")
	bus := event.NewBus()
	r := record(t, bus)
	l := NewLeader(leaderChecks(bus), ts)
	if !l.Restore(ts[1]) {
		t.Fatal("Restore before Start refused")
	}
	if l.Current() != ts[1] || !ts[1].Up() || ts[0].Up() || ts[2].Up() || !isClosed(l.Ready()) {
		t.Fatalf("after Restore: current %v, up %v %v %v, ready %v; want %s up alone and ready",
			l.Current(), ts[0].Up(), ts[1].Up(), ts[2].Up(), isClosed(l.Ready()), ts[1].Addr())
	}
	evs := r.of("", event.LeaderChanged)
	if len(evs) != 1 || evs[0].Server != ts[1].Addr() || evs[0].Old != "" || evs[0].Detail != "restored" || evs[0].Pool != "test" {
		t.Fatalf("LeaderChanged events %+v, want one to %s, restored", evs, ts[1].Addr())
	}
	if l.Changes() != 0 {
		t.Fatalf("Changes() = %d, want 0 (the first election is no change)", l.Changes())
	}
	if l.Restore(ts[0]) || l.Current() != ts[1] {
		t.Fatal("a second Restore changed the leader")
	}
	// The first answers are ordinary answers: they do not end the first round again.
	for _, tg := range ts {
		l.answer(tg, time.Now(), 503, nil)
	}
	if l.Current() != ts[1] || len(r.of("", event.LeaderChanged)) != 1 {
		t.Fatalf("current %v after one non-200 answer each, want the restored leader still", l.Current())
	}
}

func TestLeaderRestoreRefusesAServerOutsideThePoolAndAFinishedFirstRound(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
	l := NewLeader(leaderChecks(nil), ts)
	if l.Restore(NewTarget("10.0.0.9:8080")) || l.Restore(nil) {
		t.Fatal("Restore of a server outside the pool accepted")
	}
	if l.Current() != nil || isClosed(l.Ready()) {
		t.Fatal("a refused Restore changed the leader or ended the first round")
	}
	l.answer(ts[0], time.Now(), 503, nil)
	l.answer(ts[1], time.Now(), 200, nil) // ends the first round
	if l.Restore(ts[0]) || l.Current() != ts[1] || ts[0].Up() {
		t.Fatalf("Restore after the first round changed the leader to %v", l.Current())
	}
}

func TestLeaderRestoredLeaderIsReplacedAfterFallNon200AnswersAndIsNoSplitBrainUntilItAnswers200(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
	bus := event.NewBus()
	r := record(t, bus)
	l := NewLeader(leaderChecks(bus), ts) // fall 3
	l.Restore(ts[0])

	// Another server answers 200 before the restored leader answered: its latest answer is unknown.
	l.answer(ts[1], time.Now(), 200, nil)
	if l.SplitBrains() != 0 || l.Current() != ts[0] {
		t.Fatalf("a 200 before the restored leader answered: %d split brains, current %v; want none and %s",
			l.SplitBrains(), l.Current(), ts[0].Addr())
	}
	// Once it answered 200, a second 200 is split brain as usual.
	l.answer(ts[0], time.Now(), 200, nil)
	l.answer(ts[1], time.Now(), 200, nil)
	if l.SplitBrains() != 1 || l.Current() != ts[0] {
		t.Fatalf("%d split brains, current %v; want 1, %s", l.SplitBrains(), l.Current(), ts[0].Addr())
	}
	for i := range 2 {
		l.answer(ts[0], time.Now(), 503, nil)
		if l.Current() != ts[0] {
			t.Fatalf("restored leader replaced after %d non-200 answers, want 3", i+1)
		}
	}
	l.answer(ts[0], time.Now(), 503, nil)
	if got := leaderChanges(r); l.Current() != ts[1] || !ts[1].Up() || ts[0].Up() ||
		!slices.Equal(got, []leaderChange{{ts[0].Addr(), ""}, {ts[1].Addr(), ts[0].Addr()}}) {
		t.Fatalf("current %v, leader changes %+v after 3 non-200 answers; want %s", l.Current(), got, ts[1].Addr())
	}
}

func TestLeaderRestoredLeaderWhoseChecksHangIsReplacedByTimeouts(t *testing.T) {
	cl, ts := startLeaderSim(t, 2, 1) // the second platform leads now; the first is remembered
	cl.Platforms[0].SetLeaderCheckHung(true)
	bus := event.NewBus()
	r := record(t, bus)
	o := leaderChecks(bus)
	o.Timeout = 200 * time.Millisecond
	l := NewLeader(o, ts)
	l.Restore(ts[0])
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.Start(ctx)
	if l.Current() != ts[0] || !isClosed(l.Ready()) {
		t.Fatalf("after Restore and Start: current %v, ready %v", l.Current(), isClosed(l.Ready()))
	}
	testkit.Eventually(t, "the second platform to lead", 5*time.Second, func() bool { return l.Current() == ts[1] })
	if n := len(cl.Platforms[0].Probes()); n < 3 {
		t.Fatalf("restored leader replaced after %d probes, want 3 timeouts", n)
	}
	if got := leaderChanges(r); !slices.Equal(got, []leaderChange{{ts[0].Addr(), ""}, {ts[1].Addr(), ts[0].Addr()}}) {
		t.Fatalf("leader changes %+v", got)
	}
	if l.SplitBrains() != 0 {
		t.Fatalf("%d split brains while the restored leader never answered", l.SplitBrains())
	}
}

func TestCheckerRestoreBringsTheRememberedServersUpAndEndsTheFirstRound(t *testing.T) {
	ts := targets("10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443")
	bus := event.NewBus()
	r := record(t, bus)
	c := NewChecker(fastChecks(bus, "/health"), ts) // fall 3
	other := NewTarget("10.0.0.9:8443")
	if n := c.Restore([]*Target{ts[0], ts[2], ts[2], other}); n != 2 {
		t.Fatalf("Restore brought %d servers up, want 2", n)
	}
	if !ts[0].Up() || ts[1].Up() || !ts[2].Up() || other.Up() || !isClosed(c.Ready()) {
		t.Fatalf("after Restore: up %v %v %v (outside %v), ready %v; want the first and third, ready",
			ts[0].Up(), ts[1].Up(), ts[2].Up(), other.Up(), isClosed(c.Ready()))
	}
	evs := r.of("", event.ServerUp)
	if len(evs) != 2 || evs[0].Server != ts[0].Addr() || evs[1].Server != ts[2].Addr() || evs[0].Detail != "restored" {
		t.Fatalf("ServerUp events %+v, want the two restored servers", evs)
	}

	// A restored server is taken down by fall failures, not by its first answer as a new one would be.
	for i := range 2 {
		c.answer(ts[0], time.Now(), 503, nil)
		if !ts[0].Up() {
			t.Fatalf("restored server down after %d failures, want fall 3", i+1)
		}
	}
	c.answer(ts[0], time.Now(), 503, nil)
	if ts[0].Up() {
		t.Fatal("restored server still up after fall failures")
	}
	// A server that was not restored is unknown: its first answer decides.
	c.answer(ts[1], time.Now(), 200, nil)
	if !ts[1].Up() {
		t.Fatal("a server that was not restored is not up after its first passing answer")
	}
	if c.Restore([]*Target{ts[0]}) != 0 || ts[0].Up() {
		t.Fatal("a second Restore after the first round brought a server up")
	}
}

func TestCheckerRestoreAfterTheFirstRoundChangesNothing(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 2})
	cl.Connections[1].SetHealthy(false)
	ts := targets(cl.Connections[0].Addr, cl.Connections[1].Addr)
	bus := event.NewBus()
	c := NewChecker(fastChecks(bus, "/health"), ts)
	start(t, c)
	if n := c.Restore(ts); n != 0 || ts[1].Up() {
		t.Fatalf("Restore after the first round brought %d servers up, want none", n)
	}
}

func TestCheckerRestoredServersAreConfirmedOrTakenDownByTheirProbes(t *testing.T) {
	cl := startSim(t, sim.Options{Platforms: 1, Connections: 2})
	cx1, cx2 := cl.Connections[0], cl.Connections[1]
	cx2.SetHealthy(false)
	ts := targets(cx1.Addr, cx2.Addr)
	bus := event.NewBus()
	r := record(t, bus)
	c := NewChecker(fastChecks(bus, "/health"), ts)
	c.Restore(ts)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)
	testkit.Eventually(t, "the unhealthy restored server to go down", 5*time.Second, func() bool { return !ts[1].Up() })
	testkit.Eventually(t, "more passing probes of the healthy one", 5*time.Second, func() bool {
		return len(r.of(cx1.Addr, event.CheckAnswered)) >= 5
	})
	if !ts[0].Up() || len(r.of(cx1.Addr, event.ServerDown)) != 0 {
		t.Fatal("the healthy restored server went down")
	}
	if downs := r.of(cx2.Addr, event.ServerDown); len(downs) != 1 || statusOf(t, c.Status(), cx2.Addr).Fails < 3 {
		t.Fatalf("ServerDown events %+v of the unhealthy server, want one after fall (3) failures", downs)
	}
}
