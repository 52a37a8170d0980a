package lb

import (
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/config"
)

// stepDownConfig is a leader pool over the cluster's platform servers with the steady intervals of a
// real deployment (15–20 s) and every other check setting at its default (fast_interval among them).
func stepDownConfig(c *sim.Cluster) map[string]string {
	conf, _, check, _ := poolConf("platform", "leader", testkit.PlatformAddrs(c)[:2], true)
	check.Set("credentials", sim.DefaultCredentials).Set("interval", 15*time.Second).Set("interval_max", 20*time.Second)
	return map[string]string{"10-platform.toml": conf.String()}
}

// answered is one request of the load loop as its client saw it.
type answered struct {
	sent time.Time
	reply
}

// loadLoop sends GETs through fairlead from a few clients until stop is closed, and returns every answer.
func loadLoop(l *LB, stop <-chan struct{}) (wait func() []answered) {
	var mu sync.Mutex
	var all []answered
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := answered{sent: time.Now()}
				a.reply = request(l, "GET", "/Thingworx/Things", "")
				mu.Lock()
				all = append(all, a)
				mu.Unlock()
			}
		})
	}
	return func() []answered {
		wg.Wait()
		return all
	}
}

// The leader steps down while it still serves ordinary requests (the simulator's Backup state: its
// LeaderCheck answers 503, everything else 200) and platform2 takes over: no live request fails, so only
// LeaderChecks can see it. Both servers' next steady probes are 15–20 s away; whichever comes first
// starts fast probing, so the switch follows within about three fast intervals. Here platform2's comes
// first, made to come now by the operator's probe action: its 200 must get platform1 probed at the fast
// pace at once rather than at platform1's next steady probe (the old behaviour: 15–20 s of traffic to a
// server that is no longer leader). The exact timing is tested on a fake clock in healthcheck.
func TestAStepDownWhileTheOldLeaderStillServesMovesTrafficWithinAFewFastIntervalsOfTheNewLeadersFirst200(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	files := stepDownConfig(c)
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if fi := cfg.Pools["platform"].Check.FastInterval.D; fi != 250*time.Millisecond {
		t.Fatalf("default fast_interval %v, want 250ms", fi)
	}
	l, _ := startLB(t, files)
	if code, by := get(t, l, "/"); code != 200 || by != p1.Name {
		t.Fatalf("got %d from %q, want 200 from %s", code, by, p1.Name)
	}

	changed := make(chan event.Event, 4)
	t.Cleanup(l.Subscribe(func(e event.Event) {
		if e.Kind == event.LeaderChanged {
			changed <- e
		}
	}))
	stop := make(chan struct{})
	wait := loadLoop(l, stop)
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wait()
		}
	}()
	time.Sleep(200 * time.Millisecond) // some traffic on platform1 first

	flip := time.Now()
	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	opMustAction(t, l, "platform", p2.Addr, "probe", "")

	var ev event.Event
	select {
	case ev = <-changed:
	case <-time.After(5 * time.Second):
		t.Fatalf("no leader change within 5s of the step-down (the steady probes are 15–20 s apart); status %+v",
			l.Status().Pools[0])
	}
	took := time.Since(flip)
	if ev.Server != p2.Addr || ev.Old != p1.Addr {
		t.Fatalf("leader changed to %q from %q, want %s from %s", ev.Server, ev.Old, p2.Addr, p1.Addr)
	}
	// Three non-200 LeaderChecks of platform1 made the switch: fast probes, not its steady one.
	if n := probesSince(p1, flip, false); n < 3 {
		t.Fatalf("switched after %d non-200 answers of platform1, want 3", n)
	}
	time.Sleep(300 * time.Millisecond) // a few more requests, all after the switch
	close(stop)
	all := wait()
	stopped = true

	var onNew, afterSwitch int
	for i, a := range all {
		if a.err != nil || a.status != 200 {
			t.Fatalf("request %d of %d failed: status %d, %v", i, len(all), a.status, a.err)
		}
		if a.by == p2.Name {
			onNew++
		}
		if a.sent.After(ev.Time) {
			afterSwitch++
			if a.by != p2.Name {
				t.Fatalf("a request sent %v after the switch was served by %q, want %s",
					a.sent.Sub(ev.Time), a.by, p2.Name)
			}
		}
	}
	if onNew == 0 || afterSwitch == 0 {
		t.Fatalf("%d of %d requests served by %s, %d sent after the switch; want some", onNew, len(all), p2.Name, afterSwitch)
	}
	if n := l.Status().Pools[0].SplitBrains; n != 0 {
		t.Fatalf("%d split brains: platform2's 200 while platform1 stepped down is none", n)
	}
	t.Logf("switched %v after the step-down; %d requests, none failed, %d served by %s", took, len(all), onNew, p2.Name)
}
