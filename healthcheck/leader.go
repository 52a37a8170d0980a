// Package healthcheck probes upstream servers and decides who may take traffic. It is the only writer of
// server health and of "who is the leader": each server's state is a Target, read by the load balancer
// through Target.Up (one atomic load) and never probed from the request path. Live-traffic failures are
// reported here (Checker.Report, Leader.Report), and this package decides what they mean. Every change
// is published as an Event on a Bus.
//
// Leader implements the ThingWorx HA rules: every platform server is polled with
// GET /Thingworx/Admin/HA/LeaderCheck and Basic credentials; 200 means leader, and the leader is replaced
// only after fall consecutive non-200 answers (see election). Checker is the rise/fall check of other
// pools.
package healthcheck

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"

	"github.com/valyala/fasthttp"
)

// Leader polls every server of a leader pool and tracks the current leader. The leader's Target is Up;
// every other Target of the pool is not.
type Leader struct {
	group
	el          election
	current     atomic.Pointer[Target]
	splitBrains atomic.Uint64
	changes     atomic.Uint64
	elected     bool         // a leader was known once (guarded by mu): the first election is not a change
	lastTrigger atomic.Int64 // unix nanos of the last round of probes a Trigger started
	deferred    bool         // a round is due at the end of the current gap (guarded by mu)
}

// NewLeader returns a Leader over targets (config order). Start begins probing.
func NewLeader(o Options, targets []*Target) *Leader {
	l := &Leader{}
	l.init(l, o, targets)
	l.el.fall = l.o.Fall
	return l
}

// Current returns the leader's Target, or nil if none is known. Lock-free: it is on every request's path.
func (l *Leader) Current() *Target { return l.current.Load() }

// Trigger asks for an immediate probe of every server, because live traffic to the leader was refused,
// reset or answered 503. It does not itself count as an answer. Triggers closer together than a quarter
// of FastInterval (at least 50ms, at most 500ms) are merged, so an error storm cannot become a probe
// storm: with the default FastInterval of 250ms, each server is probed at most 16 times a second, and
// only while live traffic fails. A request held until the leader confirms itself waits for a probe that
// started after its failure, so a merged trigger is not dropped: one more round of probes starts at the
// end of the gap (however many triggers were merged into it).
func (l *Leader) Trigger() {
	l.mu.Lock()
	defer l.mu.Unlock()
	gap := int64(min(max(l.o.FastInterval/4, 50*time.Millisecond), 500*time.Millisecond))
	now := time.Now().UnixNano()
	last := l.lastTrigger.Load()
	if now-last < gap {
		if !l.deferred {
			l.deferred = true
			time.AfterFunc(time.Duration(last+gap-now), l.deferredTrigger)
		}
		return
	}
	l.lastTrigger.Store(now)
	l.kickAll()
}

// deferredTrigger is the round of probes of the triggers merged into a gap.
func (l *Leader) deferredTrigger() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deferred = false
	l.lastTrigger.Store(time.Now().UnixNano())
	l.kickAll()
}

// kickAll asks every server for a probe now. The caller holds l.mu.
func (l *Leader) kickAll() {
	for _, t := range l.targets {
		signal(t.kick)
	}
}

// Report tells the leader check how a live request to t ended. Any failure (err non-nil: refused,
// reset, timed out, or a 503 that may mean the leader is stepping down) probes every server now; only
// the LeaderCheck answers change the leader.
func (l *Leader) Report(t *Target, err error) {
	if err != nil {
		l.Trigger()
	}
}

// Set applies a server set change: kept servers keep their runs of answers (and the leader its term),
// new ones are probed at once and may be elected by the usual rules, and a removed leader is replaced at
// once by the server with the longest run of 200s.
func (l *Leader) Set(targets []*Target) {
	l.mu.Lock()
	wasFast := l.el.unsettled(l.targets)
	removed, roundDone := l.setLocked(targets)
	out := l.el.removed(l.targets, removed)
	for _, t := range removed {
		t.up.Store(false)
	}
	ev := l.applyLocked(out)
	nowFast := l.el.unsettled(l.targets)
	l.mu.Unlock()
	l.publishAll(ev)
	if roundDone {
		l.firstRoundOver()
	} else if wasFast != nowFast {
		l.wakeAll()
	}
}

// Update applies new check options (path, credentials, intervals, timeout, fall): probing restarts with
// them; the leader, and every server's run of answers, stay.
func (l *Leader) Update(o Options) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updateLocked(o)
	l.el.fall = l.o.Fall
}

// Restore makes leader the elected leader at once, as remembered from an earlier run (fairlead's fast
// start): its Target is Up, Current returns it, LeaderChanged is published (Detail "restored"), and the
// first round counts as over, so Ready is closed. From then on the usual rules apply: the probes still
// go to every server at once, and fall non-200 answers in a row replace the restored leader like any
// other. Until it has answered 200 itself, another server's 200 is not split brain (the leader's
// latest answer is not known to be 200).
//
// Call it before Start. Called later, it applies only while the first round is not over; it returns
// false and changes nothing when the first round is over (the probes have decided) or when leader is
// not one of the pool's targets.
func (l *Leader) Restore(leader *Target) bool {
	l.mu.Lock()
	if l.el.ready || leader == nil || !slices.Contains(l.targets, leader) {
		l.mu.Unlock()
		return false
	}
	out := outcome{old: l.el.leader}
	l.el.ready, l.el.leader = true, leader
	l.skipFirstRoundLocked()
	ev := l.applyLocked(out)
	for i := range ev {
		ev[i].Detail = "restored"
	}
	l.mu.Unlock()
	l.publishAll(ev)
	l.markReady()
	l.wakeAll()
	return true
}

// SplitBrains returns how many split brains began: the leader answering 200 while another server's
// latest answer was 200 too. One split brain counts once, however many probes see it, until no other
// server answers 200 or the leader changes.
func (l *Leader) SplitBrains() uint64 { return l.splitBrains.Load() }

// Changes returns how many times the leader changed (including to and from "none"), not counting the
// first election: a freshly started pool that found its leader has seen no change.
func (l *Leader) Changes() uint64 { return l.changes.Load() }

// pace is FastInterval while the pool is unsettled (the leader failing or unknown, or another server
// answering 200) or t is on its way down (its last probes without a serving answer), else the steady
// random wait (bounded by FailbackInterval for primaries while a backup
// leads).
func (l *Leader) pace(t *Target) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock() // Update rewrites the options under it
	fast := l.el.unsettled(l.targets)
	onBackup := l.el.leader != nil && l.el.leader.backup.Load()
	// A server whose last LeaderCheck got no serving answer, not yet down, is probed at the fast pace
	// too (HAProxy's fastinter): a dead standby is said fall fast intervals after the first probe that
	// sees it, not fall steady waits (up to a minute) later.
	if fast || t.misses > 0 && !t.lost {
		return l.o.FastInterval
	}
	if onBackup {
		// A backup leads: primaries are probed at least every FailbackInterval, so that one answering
		// 200 again is seen (it takes over once the backup steps down, by the usual rules).
		return l.o.failback(t, l.o.steady())
	}
	return l.o.steady()
}

func (l *Leader) answer(t *Target, start time.Time, status int, err error) {
	ok := err == nil && status == fasthttp.StatusOK
	t.record(start, status, err, ok)

	l.mu.Lock()
	if !slices.Contains(l.targets, t) {
		l.mu.Unlock()
		return
	}
	wasFast := l.el.unsettled(l.targets)
	if !ok && t == l.el.leader {
		if err != nil {
			l.logf("healthcheck: pool %s: leader %s did not answer its LeaderCheck: %v", l.pool, t.addr, err)
		} else {
			l.logf("healthcheck: pool %s: leader %s answered its LeaderCheck with status %d", l.pool, t.addr, status)
		}
	}
	out := l.el.observe(l.targets, t, ok)
	ev := l.reachLocked(t, status, err)
	t.first = false
	ev = append(ev, l.applyLocked(out)...)
	roundDone := l.answeredFirstLocked(t)
	if roundDone {
		ev = append(ev, l.finishFirstRoundLocked()...)
	}
	nowFast := l.el.unsettled(l.targets)
	l.mu.Unlock()

	l.publishAll(ev)
	if roundDone {
		l.markReady() // after the first round's events: a waiter of Ready sees them published
	}
	if wasFast != nowFast {
		// Every prober takes the new pace now: a second server's first 200 gets the leader probed within
		// a fast interval (at once if its latest probe is older), not at the end of its steady wait.
		l.wakeAll()
	}
}

// serving reports whether a LeaderCheck answer shows a server able to serve: 200 (the leader, or a
// candidate), 503 (a standby), 400 or 401 (a standby that refuses the check's request or credentials:
// it answers, so it is there to take over). No answer (refused, timed out) or another status is not.
func serving(status int, err error) bool {
	return err == nil && (status == 200 || status == 400 || status == 401 || status == 503)
}

// reachLocked follows whether t is there to serve, beside the election: fall probes in a row without a
// serving answer take it down (ServerDown: a standby lost is the pool's redundancy lost, the next
// leader failure an outage), and its next serving answer brings it back (ServerUp). Its first answer
// decides at once: a server that does not answer the first round is down from the start. The caller
// holds l.mu and publishes the events.
func (l *Leader) reachLocked(t *Target, status int, err error) []event.Event {
	if serving(status, err) {
		t.misses = 0
		if !t.lost {
			return nil
		}
		t.lost = false
		return []event.Event{{Kind: event.ServerUp, Server: t.addr, Detail: fmt.Sprintf("LeaderCheck answered status %d", status)}}
	}
	t.misses++
	if t.lost || !t.first && t.misses < l.o.Fall {
		return nil
	}
	t.lost = true
	why := fmt.Sprintf("LeaderCheck answered status %d", status)
	if err != nil {
		why = "LeaderCheck: " + err.Error()
	}
	if t.misses > 1 {
		why = fmt.Sprintf("%d LeaderChecks in a row failed, the last: %s", t.misses, why)
	}
	return []event.Event{{Kind: event.ServerDown, Server: t.addr, Detail: why}}
}

func (l *Leader) firstRoundOver() {
	l.mu.Lock()
	ev := l.finishFirstRoundLocked()
	l.mu.Unlock()
	l.publishAll(ev)
	l.markReady()
	l.wakeAll()
}

// finishFirstRoundLocked elects from the first round's answers; the caller publishes the events and
// then marks the Leader ready.
func (l *Leader) finishFirstRoundLocked() []event.Event {
	if l.el.ready {
		return nil
	}
	out := l.el.finishFirstRound(l.targets)
	ev := l.applyLocked(out)
	if l.el.leader == nil {
		why := ""
		if l.credentialsRefusedLocked() {
			why = ": every server answers 401, the LeaderCheck credentials are refused"
		}
		l.logf("healthcheck: pool %s: no leader after the first round of probes%s", l.pool, why)
	}
	return ev
}

// credentialsRefusedLocked reports whether every server's latest LeaderCheck answer was 401.
func (l *Leader) credentialsRefusedLocked() bool {
	for _, t := range l.targets {
		if !t.answered.Load() || t.lastErr.Load() != nil || t.lastStatus.Load() != 401 {
			return false
		}
	}
	return len(l.targets) > 0
}

// applyLocked makes an outcome visible (the Up flags and Current) and returns its events, published by
// the caller once the lock is released.
func (l *Leader) applyLocked(out outcome) []event.Event {
	var ev []event.Event
	if out.splitBrain {
		l.splitBrains.Add(1)
		ev = append(ev, event.Event{Kind: event.SplitBrain, Server: addrOf(l.el.leader),
			Detail: "more than one server answers 200; keeping the leader"})
	}
	if l.el.changed(out) {
		if l.elected {
			l.changes.Add(1)
		}
		l.elected = l.elected || l.el.leader != nil
		if out.old != nil {
			out.old.up.Store(false)
		}
		if l.el.leader != nil {
			l.el.leader.up.Store(true)
		}
		l.current.Store(l.el.leader)
		ev = append(ev, event.Event{Kind: event.LeaderChanged, Server: addrOf(l.el.leader), Old: addrOf(out.old)})
	}
	return ev
}

func (l *Leader) publishAll(ev []event.Event) {
	for _, e := range ev {
		l.publish(e)
	}
}

// wakeAll switches every prober between the steady and the fast pace now, not after its current wait.
func (l *Leader) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.targets {
		signal(t.wake)
	}
}

func addrOf(t *Target) string {
	if t == nil {
		return ""
	}
	return t.addr
}
