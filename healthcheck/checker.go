package healthcheck

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// Checker is the rise/fall health check of an ordinary pool (connection servers, sticky HTTP pools):
// 2xx and 3xx answers pass. A server's first answer decides whether it starts up; afterwards Fall
// failures in a row take it down and Rise passes bring it back. Live-traffic failures reported with
// Report count too: Fall of them in a row take a server down, fewer only hasten its next probe.
//
// With an empty Path there is no active probing: servers start up, Fall live failures in a row take one
// down, and it is tried again after Interval. With Connect instead, a probe is a connection opened:
// accepted passes, refused or timed out fails, by the same rise and fall.
type Checker struct{ group }

// NewChecker returns a Checker over targets (config order). Start begins probing.
func NewChecker(o Options, targets []*Target) *Checker {
	c := &Checker{}
	c.init(c, o, targets)
	if !c.o.probes() {
		for _, t := range targets {
			c.passiveOnlyUp(t)
		}
	}
	return c
}

func (c *Checker) passiveOnlyUp(t *Target) {
	t.first = false
	t.passive.Store(0)
	t.up.Store(true)
}

// Set applies a server set change: kept targets keep their state, new ones start unknown (not up)
// and are probed at once, so they take traffic only after a passing probe; removed ones stop being
// probed. Without active probing new servers are up at once.
func (c *Checker) Set(targets []*Target) {
	c.mu.Lock()
	for _, t := range targets {
		if !c.o.probes() && t.first {
			c.passiveOnlyUp(t)
		}
	}
	_, roundDone := c.setLocked(targets)
	c.mu.Unlock()
	if roundDone {
		c.firstRoundOver()
	}
}

func (c *Checker) firstRoundOver() { c.markReady() }

// Restore brings up the servers in up at once, as remembered from an earlier run (fairlead's fast
// start), publishing ServerUp (Detail "restored") for each, and ends the first round: Ready is closed.
// A restored server is then confirmed or taken down by the usual rules: Fall failed probes (or live
// failures) in a row take it down. Targets not in up, and targets of up that are not the checker's or
// that a probe answered already, stay as they are (a server never probed is unknown until its first
// answer). It returns how many servers it brought up.
//
// Call it before Start. Called later, it applies only while the first round is not over; it returns 0
// and changes nothing once the first round is over (the probes have decided).
func (c *Checker) Restore(up []*Target) int {
	c.mu.Lock()
	if c.firstRoundOverLocked() {
		c.mu.Unlock()
		return 0
	}
	var restored []*Target
	for _, t := range up {
		if t.first && slices.Contains(c.targets, t) && !slices.Contains(restored, t) {
			t.first = false
			t.passive.Store(0)
			t.up.Store(true)
			restored = append(restored, t)
		}
	}
	c.skipFirstRoundLocked()
	c.mu.Unlock()
	for _, t := range restored {
		c.publish(event.Event{Kind: event.ServerUp, Server: t.addr, Detail: "restored"})
	}
	c.markReady()
	return len(restored)
}

// firstRoundOverLocked reports whether the first round is over: Ready is closed, or every first-round
// target has answered since Start.
func (g *group) firstRoundOverLocked() bool {
	select {
	case <-g.ready:
		return true
	default:
	}
	return g.ctx != nil && len(g.pending) == 0
}

// skipFirstRoundLocked ends the first round without waiting for its answers (a restore): no target is
// pending any more, so no later answer or server set change ends it again. The caller closes Ready
// once it released the lock; a Start after it closes Ready at once.
func (g *group) skipFirstRoundLocked() { clear(g.pending) }

// Update applies new check options (path, port, intervals, timeout, fall, rise): probing restarts with
// them and every server keeps its state. Without active probing from now on, servers that are down
// come back up (nothing else would bring them back).
func (c *Checker) Update(o Options) {
	c.mu.Lock()
	c.updateLocked(o)
	var back []*Target
	if !c.o.probes() {
		for _, t := range c.targets {
			if !t.up.Load() {
				c.passiveOnlyUp(t)
				back = append(back, t)
			}
		}
	}
	c.mu.Unlock()
	for _, t := range back {
		c.publish(event.Event{Kind: event.ServerUp, Server: t.addr, Detail: "active checks disabled"})
	}
}

func (c *Checker) pace(t *Target) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.up.Load() && t.fails == 0 && t.passive.Load() == 0 {
		return c.o.steady()
	}
	if !t.up.Load() {
		return c.o.failback(t, c.o.FastInterval)
	}
	return c.o.FastInterval
}

func (c *Checker) answer(t *Target, start time.Time, status int, err error) {
	pass := err == nil && (status == 0 || status >= 200 && status < 400) // status 0 without an error: a connect probe connected
	t.record(start, status, err, pass)

	c.mu.Lock()
	if !slices.Contains(c.targets, t) {
		c.mu.Unlock() // removed while its probe was out
		return
	}
	first := t.first
	t.first = false
	if pass {
		t.run++
		t.fails = 0
	} else {
		t.run = 0
		t.fails++
	}
	up := t.up.Load()
	next := up
	switch {
	case first:
		next = pass
	case up && t.fails >= c.o.Fall:
		next = false
	case !up && t.run >= c.o.Rise:
		next = true
	}
	if next != up {
		t.up.Store(next)
		if next {
			t.passive.Store(0)
		}
	}
	roundDone := c.answeredFirstLocked(t)
	c.mu.Unlock()

	if next != up {
		why := "status " + strconv.Itoa(status)
		switch {
		case err != nil:
			why = err.Error()
		case status == 0:
			why = "connected"
		}
		kind := event.ServerDown
		if next {
			kind = event.ServerUp
		}
		c.publish(event.Event{Kind: kind, Server: t.addr, Detail: why})
	}
	if roundDone {
		c.markReady()
	}
}

// Report tells the checker how a live request to t ended: err nil for an answer, otherwise the
// transport failure (refused, reset, timed out). Fall failures in a row take t down (its tunnels close
// with it); fewer only make its next probe come sooner. A success costs one atomic load.
func (c *Checker) Report(t *Target, err error) {
	if err == nil {
		if t.passive.Load() != 0 {
			t.passive.Store(0)
		}
		return
	}
	n := t.passive.Add(1)
	signal(t.wake) // probe at the fast pace now
	c.mu.Lock()
	if int(n) < c.o.Fall || !t.up.Load() {
		c.mu.Unlock()
		return
	}
	t.up.Store(false)
	t.run, t.first = 0, false
	if !c.o.probes() {
		// No probe will bring it back: try it again after Interval (a primary at least every
		// FailbackInterval).
		t.retry = time.AfterFunc(c.o.failback(t, c.o.Interval), func() { c.retryPassive(t) })
	}
	c.mu.Unlock()
	failures := "failures"
	if n == 1 {
		failures = "failure"
	}
	c.publish(event.Event{Kind: event.ServerDown, Server: t.addr, Detail: fmt.Sprintf("%d live %s in a row: %v", n, failures, probeError(err, 0))})
}

// Probe asks for an immediate probe of t; without active probing, a server that live failures took
// down is tried again now.
func (c *Checker) Probe(t *Target) {
	c.mu.Lock()
	passive := !c.o.probes()
	if passive && t.retry != nil {
		t.retry.Stop()
		t.retry = nil
	}
	c.mu.Unlock()
	if passive {
		c.retryPassive(t)
		return
	}
	c.group.Probe(t)
}

func (c *Checker) retryPassive(t *Target) {
	c.mu.Lock()
	t.retry = nil
	if t.up.Load() || !slices.Contains(c.targets, t) || c.ctx != nil && c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	t.passive.Store(0)
	t.up.Store(true)
	c.mu.Unlock()
	c.publish(event.Event{Kind: event.ServerUp, Server: t.addr, Detail: "retry after live failures"})
}
