package faults

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// Scenarios on the leader pool: the leader dies, hangs, slows down, flaps, both platforms go down, and
// the leader steps down. Each runs the steady load of defaultLoad (GETs and one POST in five) through
// a real fairlead process.

// leaderChanges is fairlead's counter of leader changes of the platform pool (the first election
// included).
const leaderChanges = `fairlead_leader_changes_total{pool="platform"}`

// sleep holds a load phase: the scenario's load runs for d (a duration of the scenario, never an
// assertion).
func sleep(d time.Duration) { time.Sleep(d) }

// TestLeaderKilledWithSIGKILLFailsNoGET: the leader's process (a cmd/fairlead-sim process of its own)
// dies with SIGKILL under load; right after, the survivor (a backup answering 503 on LeaderCheck) is
// made leader, as ThingWorx would. No GET fails; POSTs in flight to the dead process may fail, none is
// delivered twice (the delivery logs outlive the process).
func TestLeaderKilledWithSIGKILLFailsNoGET(t *testing.T) {
	const name = "leader-killed"
	p1 := startSimProc(t, "platform1", sim.Leader)
	p2 := startSimProc(t, "platform2", sim.Backup)
	f := startFairlead(t, map[string]string{
		"10-platform.toml": platformPool([]string{p1.addr, p2.addr}, []string{"platform1", "platform2"}, testChecks),
	})
	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(time.Second, 5*time.Second))

	t0 := time.Now()
	if err := syscall.Kill(p1.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p1.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("platform1 still running 5s after SIGKILL")
	}
	if err := p2.setState(sim.Leader); err != nil {
		t.Fatal(err)
	}
	switched := waitOK(t, l, "platform2", t0, 10*time.Second)
	sleep(pick(time.Second, 10*time.Second))

	r := judge(name, stop(l), postLost)
	r.add("switch=%s", switched.Sub(t0).Round(time.Millisecond))
	delivered := p1.deliveries(t)
	for id, n := range p2.deliveries(t) {
		delivered[id] += n
	}
	r.checkDeliveries(t, delivered)
	if by := servedBy(r.samples, func(s sample) bool { return s.End.Before(t0) }); by["platform1"] == 0 || by["platform2"] != 0 {
		t.Errorf("before the kill, answers came from %v; want platform1 only", by)
	}
	if got := f.pool("platform").Leader; got != p2.addr {
		t.Errorf("fairlead's leader after the kill: %q, want platform2 (%s)", got, p2.addr)
	}
	r.finish(t)
}

// TestLeaderHungFailsNoGETWithinResponseTimeout: the leader accepts connections but never answers (sim
// Hung) while the backup becomes leader. With response_timeout 1s and queue_timeout 5s, no GET fails:
// a GET silent for response_timeout on the hung leader is held and resent to the new leader. POSTs
// that reached the hung leader may fail (504); none is delivered twice.
func TestLeaderHungFailsNoGETWithinResponseTimeout(t *testing.T) {
	const name = "leader-hung"
	c := startCluster(t, sim.Options{})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	f := startFairlead(t, map[string]string{
		"10-platform.toml": clusterPool(c, testChecks),
		"20-scenario.toml": "[pools.platform]\nresponse_timeout = \"1s\"\nqueue_timeout = \"5s\"\n",
	})
	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(time.Second, 5*time.Second))

	t0 := time.Now()
	if err := p1.SetState(sim.Hung); err != nil {
		t.Fatal(err)
	}
	if err := p2.SetState(sim.Leader); err != nil {
		t.Fatal(err)
	}
	switched := waitOK(t, l, "platform2", t0, 10*time.Second)
	sleep(pick(1500*time.Millisecond, 10*time.Second))

	r := judge(name, stop(l), postLost)
	var slowest time.Duration
	for _, s := range r.samples {
		if !isPost(s) && s.OK() {
			slowest = max(slowest, s.End.Sub(s.Start))
		}
	}
	r.add("response_timeout=1s queue_timeout=5s switch=%s slowest_get=%s",
		switched.Sub(t0).Round(time.Millisecond), slowest.Round(time.Millisecond))
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}

// TestSlowLeaderIsKeptAndEveryRequestSucceeds: every answer of the leader, LeaderCheck included, is
// delayed 2 s (Platform.SetDelay), below response_timeout (4s) and the check timeout (4s): requests
// succeed slowly, none fails, and the leader is not switched. (response_timeout bounds silence with a
// socket deadline moved only once it is a quarter behind, so the limit met can be 3/4 of it: 3 s.)
func TestSlowLeaderIsKeptAndEveryRequestSucceeds(t *testing.T) {
	const name, delay = "leader-slow", 2 * time.Second
	c := startCluster(t, sim.Options{})
	p1 := c.Platforms[0]
	f := startFairlead(t, map[string]string{
		"10-platform.toml": clusterPool(c, testChecks),
		"20-scenario.toml": "[pools.platform]\nresponse_timeout = \"4s\"\n[pools.platform.check]\ntimeout = \"4s\"\n",
	})
	changes := f.MetricInt(leaderChanges)
	o := defaultLoad
	o.workers = 32 // each waits 2 s per answer: about 16 req/s while the leader is slow
	l := startLoad(t, name, f.Addr, o)
	sleep(pick(time.Second, 3*time.Second))

	t0 := time.Now()
	p1.SetDelay(delay)
	want := pickN(2*o.workers, 8*o.workers)
	slow := func(s sample) bool { return s.OK() && !s.Start.Before(t0) && s.End.Sub(s.Start) >= delay }
	testkit.Eventually(t, fmt.Sprintf("%d slow answers", want), pick(30*time.Second, 60*time.Second), func() bool {
		return l.Count(slow) >= want
	})

	r := judge(name, stop(l), strict)
	p1.SetDelay(0)
	fast := 0 // requests sent after the delay was on that came back quicker: must be none
	for _, s := range r.samples {
		if s.OK() && s.Start.After(t0.Add(10*time.Millisecond)) && s.End.Sub(s.Start) < delay {
			fast++
		}
	}
	after := f.MetricInt(leaderChanges)
	r.add("delay=%s response_timeout=4s slow=%d leader_changes=%d", delay, l.Count(slow), after-changes)
	if by := servedBy(r.samples, func(sample) bool { return true }); len(by) != 1 || by["platform1"] == 0 {
		t.Errorf("answers by %v, want platform1 only", by)
	}
	if after != changes || f.pool("platform").Leader != p1.Addr {
		t.Errorf("the slow leader was switched: %s %d → %d, leader %q", leaderChanges, changes, after, f.pool("platform").Leader)
	}
	if fast > 0 {
		t.Errorf("%d requests sent after the delay was set were answered in less than %s", fast, delay)
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}

// TestFlappingLeaderCheckSwitchesNothing: the leader's LeaderCheck alternates 503 and 200 at every
// probe (Platform.SetLeaderCheckFlap) while the backup answers 503: never three non-200 answers in a
// row, so no leader change at all, and no request fails.
func TestFlappingLeaderCheckSwitchesNothing(t *testing.T) {
	const name = "leader-flapping"
	c := startCluster(t, sim.Options{})
	p1 := c.Platforms[0]
	f := startFairlead(t, map[string]string{"10-platform.toml": clusterPool(c, testChecks)})
	changes := f.MetricInt(leaderChanges)
	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(time.Second, 3*time.Second))

	t0 := time.Now()
	p1.SetLeaderCheckFlap(true)
	want := pickN(20, 150)
	probes := func() int {
		n := 0
		for _, pr := range p1.Probes() {
			if pr.At.After(t0) && pr.Status != 0 {
				n++
			}
		}
		return n
	}
	testkit.Eventually(t, fmt.Sprintf("%d flapping probes", want), pick(20*time.Second, 90*time.Second), func() bool { return probes() >= want })

	r := judge(name, stop(l), strict)
	p1.SetLeaderCheckFlap(false)
	after := f.MetricInt(leaderChanges)
	r.add("probes=%d leader_changes=%d", probes(), after-changes)
	if after != changes || f.pool("platform").Leader != p1.Addr {
		t.Errorf("the flapping leader was switched: %s %d → %d, leader %q", leaderChanges, changes, after, f.pool("platform").Leader)
	}
	if by := servedBy(r.samples, func(sample) bool { return true }); len(by) != 1 || by["platform1"] == 0 {
		t.Errorf("answers by %v, want platform1 only", by)
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}

// TestBothPlatformsDown: both platform servers die (Dead: refused connections).
//
//   - One comes back as leader within queue_timeout (5s): the requests are held and no GET fails.
//   - Nobody comes back for longer than queue_timeout (1s here): the requests that waited queue_timeout
//     get 503 "no server available" (the expected answer, counted as expected_503), and once a leader
//     is back everything succeeds again.
//
// POSTs in flight to a platform as it dies may fail; none is delivered twice.
func TestBothPlatformsDown(t *testing.T) {
	t.Run("leader back within queue_timeout", func(t *testing.T) {
		bothDown(t, "both-down", 5*time.Second, pick(time.Second, 3*time.Second))
	})
	t.Run("nobody back for longer than queue_timeout", func(t *testing.T) {
		bothDown(t, "both-down-beyond-queue", time.Second, pick(2500*time.Millisecond, 5*time.Second))
	})
}

func bothDown(t *testing.T, name string, queueTimeout, outage time.Duration) {
	c := startCluster(t, sim.Options{})
	p2 := c.Platforms[1]
	f := startFairlead(t, map[string]string{
		"10-platform.toml": clusterPool(c, testChecks),
		"20-scenario.toml": fmt.Sprintf("[pools.platform]\nqueue_timeout = %q\n", queueTimeout),
	})
	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(time.Second, 3*time.Second))

	for _, p := range c.Platforms {
		if err := p.SetState(sim.Dead); err != nil {
			t.Fatal(err)
		}
	}
	sleep(outage) // the outage itself
	back := time.Now()
	if err := p2.SetState(sim.Leader); err != nil {
		t.Fatal(err)
	}
	waitOK(t, l, "platform2", back, 10*time.Second)
	sleep(pick(time.Second, 5*time.Second))
	samples := stop(l)

	// The first success once the leader is back; a request still waiting then is served, so a 503
	// "no server available" is expected only before it (with 250 ms for the client to read it on busy
	// cores).
	var recovered time.Time
	for _, s := range samples {
		if s.OK() && s.End.After(back) && (recovered.IsZero() || s.End.Before(recovered)) {
			recovered = s.End
		}
	}
	expected := func(s sample) string {
		if queueTimeout < outage && noServer(s) && s.End.Before(recovered.Add(250*time.Millisecond)) {
			return "expected_503"
		}
		return postLost(s)
	}
	r := judge(name, samples, expected)
	r.add("queue_timeout=%s outage=%s recovered=%s", queueTimeout, outage.Round(time.Millisecond),
		recovered.Sub(back).Round(time.Millisecond))
	if queueTimeout < outage && r.excused["expected_503"] == 0 {
		t.Errorf("%s: no request waited out queue_timeout during a %s outage", name, outage)
	}
	if by := servedBy(samples, func(s sample) bool { return s.Start.After(recovered) }); len(by) != 1 || by["platform2"] == 0 {
		t.Errorf("after recovery, answers by %v; want platform2 only", by)
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}

// stepDownWithin is the promise of a leader step-down (issue: "the switch completes within about three
// fast_intervals of the new leader's first 200"): with the default fast_interval of 250ms, traffic
// reaches the new leader within about 1 s of the new leader's first 200 LeaderCheck. Nothing reveals the
// step-down before a LeaderCheck does (the old leader still serves), and the first one may be up to
// interval_max away.
const stepDownWithin = 1200 * time.Millisecond

// TestLeaderStepDownMovesTrafficWithinAboutThreeFastIntervalsOfTheNewLeaders200: the leader goes Backup
// (LeaderCheck 503, ordinary requests still 200) while the other platform becomes Leader, with the
// steady-state interval 15s and the default fast_interval: traffic reaches the new leader within
// stepDownWithin of the new leader's first 200 LeaderCheck (not at the old leader's next steady probe),
// nothing fails, and every request sent after the switch goes to the new leader.
func TestLeaderStepDownMovesTrafficWithinAboutThreeFastIntervalsOfTheNewLeaders200(t *testing.T) {
	const name = "leader-step-down"
	c := startCluster(t, sim.Options{})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	f := startFairlead(t, map[string]string{"10-platform.toml": clusterPool(c, `interval = "15s"`)})
	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(time.Second, 5*time.Second))

	t0 := time.Now()
	if err := p1.SetState(sim.Backup); err != nil {
		t.Fatal(err)
	}
	if err := p2.SetState(sim.Leader); err != nil {
		t.Fatal(err)
	}
	// Bounded beyond interval_max, so that a miss reports the real time.
	var switched time.Time
	ok := testkit.Within(30*time.Second, func() bool {
		var ok bool
		switched, ok = l.FirstOK("platform2", t0)
		return ok
	})
	if ok {
		sleep(pick(time.Second, 5*time.Second))
	}
	r := judge(name, stop(l), strict)
	if !ok {
		r.add("switch=none_within_30s")
		t.Errorf("%s: no answer from the new leader within 30s", name)
	} else {
		// The new leader's first 200 LeaderCheck after the step-down.
		var first time.Time
		for _, pr := range p2.Probes() {
			if pr.Status == 200 && pr.At.After(t0) {
				first = pr.At
				break
			}
		}
		took := switched.Sub(first)
		r.add("interval=15s fast_interval=default step_down_to_first_200=%s first_200_to_switch=%s",
			first.Sub(t0).Round(time.Millisecond), took.Round(time.Millisecond))
		if first.IsZero() || took > stepDownWithin {
			t.Errorf("%s: traffic reached the new leader %s after its first 200 LeaderCheck; promise: within %s", name, took.Round(time.Millisecond), stepDownWithin)
		}
		late := servedBy(r.samples, func(s sample) bool { return s.Start.After(switched) })
		delete(late, "platform2")
		if len(late) > 0 {
			t.Errorf("%s: requests sent after the switch were answered by %v", name, late)
		}
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}
