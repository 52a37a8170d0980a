package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"fmt"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// failover: a steady ~400 req/s of GETs while the cluster's leader changes, in two separate runs per peer:
//
//   - flip: the leader steps down (sim state Standby: 503 to everything) and the backup becomes leader;
//   - kill: the leader process dies (state Dead: refused connections) and the backup becomes leader.
//
// Counted: failed requests (an error after the one retry an ordinary client makes on a stale keep-alive
// connection, or any status but 200) and the time from the change until the new leader's first 200.
// Realistic check intervals: fairlead with its defaults (interval 15s, fast_interval 250ms, fall 3) and
// tuned (fast_interval 250ms); HAProxy plain (inter 15s fall 3) and tuned (inter 15s fastinter 1s
// downinter 1s fall 3 rise 1, observe layer7, retry-on 503 conn-failure, option redispatch). The run
// waits until the new leader has served alone for a second, bounded by the plan's window.

func failoverScenario() *scenario {
	return &scenario{
		name:    "failover",
		summary: "~400 req/s of GETs while the leader steps down (Standby: 503 everywhere) and, in a second run, dies (Dead); the backup becomes leader: failed requests and time until the new leader serves",
		metrics: []metric{
			{key: "flip_failed", label: "step-down: failed", better: "lower"},
			{key: "flip_new_leader_s", label: "step-down: new leader serving s", better: "lower", chart: true, format: "%.2f", needs: "flip_served"},
			{key: "flip_failing_s", label: "step-down: last failure at s", format: "%.2f"},
			{key: "kill_failed", label: "kill: failed", better: "lower"},
			{key: "kill_new_leader_s", label: "kill: new leader serving s", better: "lower", chart: true, format: "%.2f", needs: "kill_served"},
			{key: "kill_failing_s", label: "kill: last failure at s", format: "%.2f"},
			{key: "flip_converged", label: "step-down converged (1 = yes)"},
			{key: "kill_converged", label: "kill converged (1 = yes)"},
			{key: "requests", label: "requests sent"},
			{key: "stale_retries", label: "client stale-connection retries"},
			{key: "unfinished", label: "unanswered at the end"},
		},
		variants: func(base []string) []string {
			var out []string
			for _, b := range base {
				out = append(out, b)
				if b == "fairlead" || b == "haproxy" {
					out = append(out, b+"-tuned")
				}
			}
			return out
		},
		run: runFailover,
	}
}

func runFailover(rc *runCtx) (*Result, error) {
	res := &Result{Metrics: map[string]float64{}}
	for _, ev := range []struct {
		name  string
		state sim.State
	}{{"flip", sim.Standby}, {"kill", sim.Dead}} {
		if err := failoverEvent(rc, ev.name, ev.state, res); err != nil {
			return nil, fmt.Errorf("%s: %v", ev.name, err)
		}
	}
	return res, nil
}

// failoverEvent runs one leader change against a fresh cluster and proxy.
func failoverEvent(rc *runCtx, name string, oldState sim.State, res *Result) error {
	sub := *rc
	sub.cleanup = nil
	defer func() {
		for i := len(sub.cleanup) - 1; i >= 0; i-- {
			sub.cleanup[i]()
		}
		rc.notes = sub.notes
	}()
	p := rc.plan
	c, err := sub.startCluster(nil)
	if err != nil {
		return err
	}
	in, err := sub.startPeer(c, leaderOnly, nil)
	if err != nil {
		return err
	}
	old, next := c.Platforms[0], c.Platforms[1]
	load := startPaced(in.Addr(), p.FailoverWorkers, p.FailoverRate, p.FailoverSteady+p.FailoverWindow+10*time.Second,
		"/Thingworx/Things/FailoverThing/Properties")
	time.Sleep(p.FailoverSteady)

	t0 := time.Now()
	grace := min(p.FailoverWindow, 10*time.Second)
	if err := old.SetState(oldState); err != nil {
		load.Stop(0)
		return err
	}
	if err := next.SetState(sim.Leader); err != nil {
		load.Stop(0)
		return err
	}

	// Converged: the new leader has answered, and for the last second every answer was its 200.
	converged := false
	var firstNew time.Time
	deadline := t0.Add(p.FailoverWindow)
	for time.Now().Before(deadline) && rc.ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		ss := load.Samples()
		firstNew = firstServedBy(ss, next.Name, t0)
		if firstNew.IsZero() || time.Since(firstNew) < time.Second {
			continue
		}
		clean, recent := true, 0
		for _, s := range ss {
			if s.End.After(time.Now().Add(-time.Second)) {
				recent++
				if !s.OK() || s.ServedBy != next.Name {
					clean = false
				}
			}
		}
		if clean && recent > 0 {
			converged = true
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	// Requests still held (a proxy waiting for a leader) get up to grace to finish.
	ss, unfinished := load.Stop(grace)
	sum := summarize(ss)
	firstNew = firstServedBy(ss, next.Name, t0)

	res.Metrics[name+"_failed"] = float64(sum.Failed)
	if firstNew.IsZero() {
		res.Metrics[name+"_new_leader_s"] = p.FailoverWindow.Seconds()
	} else {
		res.Metrics[name+"_new_leader_s"] = firstNew.Sub(t0).Seconds()
	}
	var lastFail time.Time
	for _, smp := range ss {
		if !smp.OK() && smp.End.After(lastFail) {
			lastFail = smp.End
		}
	}
	if !lastFail.IsZero() {
		res.Metrics[name+"_failing_s"] = lastFail.Sub(t0).Seconds()
	} else {
		res.Metrics[name+"_failing_s"] = 0
	}
	res.Metrics[name+"_converged"] = b2f(converged)
	res.Metrics[name+"_served"] = b2f(!firstNew.IsZero())
	res.Metrics["unfinished"] += float64(unfinished)
	res.Metrics["requests"] += float64(sum.Sent)
	res.Metrics["stale_retries"] += float64(sum.Retried)
	if !converged {
		sub.note("%s: not converged within the %s window", name, p.FailoverWindow)
	}
	if unfinished > 0 {
		sub.note("%s: %d requests still unanswered %s after the window (not counted)", name, unfinished, grace)
	}
	if sum.Failed > 0 {
		sub.note("%s: %d of %d requests failed (first: %s)", name, sum.Failed, sum.Sent, sum.FirstErr)
	}
	return nil
}

// firstServedBy returns when the first 200 from server name that started after t0 finished; zero if none.
func firstServedBy(ss []testkit.Sample, name string, t0 time.Time) time.Time {
	var first time.Time
	for _, s := range ss {
		if s.OK() && s.ServedBy == name && s.End.After(t0) && (first.IsZero() || s.End.Before(first)) {
			first = s.End
		}
	}
	return first
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
