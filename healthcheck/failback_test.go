package healthcheck

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// Failback: while traffic is on backups, primaries are probed at least every FailbackInterval, so that
// traffic returns to one as soon as its checks pass. These tests read the pace the probe loops follow.

func TestCheckerProbesADownPrimaryAtLeastEveryFailbackInterval(t *testing.T) {
	o := fastChecks(event.NewBus(), "/ready")
	o.Interval, o.IntervalMax, o.FastInterval = 30*time.Second, 40*time.Second, 10*time.Second
	o.FailbackInterval = time.Second
	primary, backup := NewTarget("10.0.0.1:80"), NewTarget("10.0.0.2:80")
	backup.SetBackup(true)
	c := NewChecker(o, []*Target{primary, backup})
	// Both unknown (down): the primary is probed at the failback pace, the backup at the fast pace.
	if got := c.pace(primary); got != time.Second {
		t.Errorf("down primary: pace %v, want FailbackInterval 1s", got)
	}
	if got := c.pace(backup); got != 10*time.Second {
		t.Errorf("down backup: pace %v, want FastInterval 10s", got)
	}
	// A healthy primary keeps the steady pace.
	primary.up.Store(true)
	if got := c.pace(primary); got < o.Interval || got > o.IntervalMax {
		t.Errorf("healthy primary: pace %v, want the steady [%v, %v]", got, o.Interval, o.IntervalMax)
	}
	// FailbackInterval never slows probing down: a fast pace below it is kept.
	o.FastInterval = 100 * time.Millisecond
	c.Update(o)
	primary.up.Store(false)
	if got := c.pace(primary); got != 100*time.Millisecond {
		t.Errorf("down primary, FastInterval below FailbackInterval: pace %v, want 100ms", got)
	}
}

func TestCheckerWithoutActiveChecksRetriesAPrimaryAfterFailbackInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := fastChecks(event.NewBus(), "")
		o.Interval, o.IntervalMax = 10*time.Second, 20*time.Second
		o.FailbackInterval = 2 * time.Second
		primary, backup := NewTarget("10.0.0.1:80"), NewTarget("10.0.0.2:80")
		backup.SetBackup(true)
		c := NewChecker(o, []*Target{primary, backup})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c.Start(ctx)
		synctest.Wait()
		for range o.Fall {
			c.Report(primary, errRefused)
			c.Report(backup, errRefused)
		}
		if primary.Up() || backup.Up() {
			t.Fatal("still up after fall live failures")
		}
		time.Sleep(o.FailbackInterval)
		synctest.Wait()
		if !primary.Up() {
			t.Fatal("primary not tried again after FailbackInterval")
		}
		if backup.Up() {
			t.Fatal("backup tried again before Interval: FailbackInterval is for primaries")
		}
		time.Sleep(o.Interval - o.FailbackInterval)
		synctest.Wait()
		if !backup.Up() {
			t.Fatal("backup not tried again after Interval")
		}
	})
}

func TestLeaderProbesPrimariesAtLeastEveryFailbackIntervalWhileABackupLeads(t *testing.T) {
	o := fastChecks(event.NewBus(), "/Thingworx/Admin/HA/LeaderCheck")
	o.Interval, o.IntervalMax, o.FastInterval = 15*time.Second, 20*time.Second, 2*time.Second
	o.FailbackInterval = 5 * time.Second
	p1, p2, b := NewTarget("10.0.0.1:80"), NewTarget("10.0.0.2:80"), NewTarget("10.0.0.3:80")
	b.SetBackup(true)
	l := NewLeader(o, []*Target{p1, p2, b})
	steady := func(d time.Duration) bool { return d >= o.Interval && d <= o.IntervalMax }

	// A primary leads, healthy: everybody at the steady pace.
	l.el.observe(l.targets, p1, true)
	l.el.finishFirstRound(l.targets)
	for _, tg := range []*Target{p1, p2, b} {
		if got := l.pace(tg); !steady(got) {
			t.Errorf("primary leads: pace of %s %v, want steady", tg.Addr(), got)
		}
	}
	// The backup leads, healthy, the primaries answering non-200: primaries every FailbackInterval, the
	// backup steady.
	l.el.leader = b
	p1.run, p1.fails, b.run = 0, 3, 1
	if got := l.pace(p2); got != o.FailbackInterval {
		t.Errorf("backup leads: pace of a primary %v, want FailbackInterval %v", got, o.FailbackInterval)
	}
	if got := l.pace(b); !steady(got) {
		t.Errorf("backup leads: pace of the backup %v, want steady", got)
	}
	// A primary answers 200 while the backup leads (leadership moving back, or split brain): everybody fast.
	p2.run = 1
	if got := l.pace(b); got != o.FastInterval {
		t.Errorf("a primary answers 200 while a backup leads: pace %v, want FastInterval", got)
	}
	p2.run = 0
	// The leader failing: everybody fast, as always.
	b.run, b.fails = 0, 1
	if got := l.pace(p1); got != o.FastInterval {
		t.Errorf("backup leader failing: pace %v, want FastInterval", got)
	}
}
