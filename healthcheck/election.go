package healthcheck

// election is the leader state machine of a ThingWorx HA pool, without clocks or sockets: it is fed one
// LeaderCheck answer at a time and says who is leader. It is not safe for concurrent use; Leader guards
// it (and the run and fails counts of its targets) with its mutex.
//
// The rules, as ThingWorx prescribes for its load balancers:
//   - 200 is a leader answer; anything else (400, 401, 503, another code, timeout, refused) is not.
//   - The leader stays leader until it gives fall consecutive non-200 answers; fewer do not switch.
//   - Then the server whose latest answer was 200 becomes leader; if several, the one with the longest
//     run of 200s (ties go to the first in config order). If none, no leader is known until some server
//     answers 200.
//   - Another server answering 200 is not a reason to switch: the leader stays while it answers 200.
//     It may be the sign that leadership is moving (the new leader answers 200 as the old one steps
//     down), so the pool is probed fast until it settles (see unsettled). If the leader then answers
//     200 while the other's latest answer is still 200, both claim leadership: that is split brain,
//     reported once; it lasts, unreported again, until no other server's latest answer is 200 or the
//     leader changes. (Reporting every answer would report one split brain four times a second at the
//     fast pace, and a leader stepping down behind a faster new leader would look like one.)
//   - A leader removed from the pool (reload, discovery) is replaced at once by the same choice.
//   - Backup servers are chosen only when no primary's latest answer was 200. A primary answering 200
//     while a backup leads is like any other server's 200: the backup stays until fall non-200 answers.
//
// Beside the leader it says whether the pool is settled (see unsettled): one leader answering 200, every
// other server's latest answer non-200. Until it is, every server is probed at the fast pace.
type election struct {
	fall   int
	leader *Target // nil while no leader is known
	// ready is false until the first round of probes is over; until then nobody is elected, so that the
	// initial choice sees every server's answer instead of whichever came first.
	ready bool
	// split is true from a split brain's report until it ends (no other server's latest answer is 200,
	// or the leader changed): one split brain is reported once, however often it is probed.
	split bool
}

// outcome says what one answer changed.
type outcome struct {
	old        *Target // the leader before
	splitBrain bool    // a split brain began: the leader answered 200 while another server's latest answer was 200
}

func (e *election) changed(o outcome) bool { return e.leader != o.old }

// observe records t's answer (ok means 200); ts are the pool's targets in config order.
func (e *election) observe(ts []*Target, t *Target, ok bool) outcome {
	if ok {
		t.run++
		t.fails = 0
	} else {
		t.run = 0
		t.fails++
	}
	out := outcome{old: e.leader}
	switch {
	case !e.ready:
	case e.leader == nil:
		if ok {
			e.leader = best(ts)
		}
	case t == e.leader:
		switch {
		case !ok && t.fails >= e.fall:
			e.leader = best(ts)
		case ok && !e.split && e.contested(ts):
			// The leader confirms its claim after another server made one. (A leader restored by
			// Leader.Restore that has not answered yet is not in split brain: its claim is not known.)
			e.split, out.splitBrain = true, true
		}
	}
	e.settle(ts, out.old)
	return out
}

// finishFirstRound ends the initial round and elects from the answers seen so far.
func (e *election) finishFirstRound(ts []*Target) outcome {
	out := outcome{old: e.leader}
	if !e.ready {
		e.ready = true
		e.leader = best(ts)
		n := 0
		for _, t := range ts {
			if t.run > 0 {
				n++
			}
		}
		out.splitBrain = n > 1
		e.split = out.splitBrain
	}
	return out
}

// removed re-elects when the leader left the pool; ts are the targets that stay.
func (e *election) removed(ts []*Target, gone []*Target) outcome {
	out := outcome{old: e.leader}
	for _, t := range gone {
		if t == e.leader {
			e.leader = nil
			if e.ready {
				e.leader = best(ts)
			}
		}
	}
	e.settle(ts, out.old)
	return out
}

// settle ends the reported split brain once it is over: the leader changed from old, or no other server
// of ts answers 200 any more. A later one is reported again.
func (e *election) settle(ts []*Target, old *Target) {
	if e.leader != old || !e.contested(ts) {
		e.split = false
	}
}

// best returns the target whose latest answer was 200 with the longest run of 200s, primaries before
// backups, or nil.
func best(ts []*Target) *Target {
	for _, backup := range [2]bool{false, true} {
		var b *Target
		for _, t := range ts {
			if t.run > 0 && t.backup.Load() == backup && (b == nil || t.run > b.run) {
				b = t
			}
		}
		if b != nil {
			return b
		}
	}
	return nil
}

// failing reports whether no leader is known or the leader's latest answer was not 200.
func (e *election) failing() bool {
	return e.leader == nil || e.leader.fails > 0
}

// contested reports whether a leader is known and another server of ts answered 200 last: leadership
// may be moving (a new leader answers 200 as the old one steps down), or two servers claim it (split
// brain).
func (e *election) contested(ts []*Target) bool {
	if e.leader == nil {
		return false
	}
	for _, t := range ts {
		if t != e.leader && t.run > 0 {
			return true
		}
	}
	return false
}

// unsettled reports whether every server of ts must be probed at the fast pace: the leader is failing
// or unknown, or another server answers 200. A leader stepping down while a backup takes over (its
// LeaderCheck answers 503, the backup's 200) is then followed within about fall fast intervals of
// whichever answer is seen first, instead of waiting for the leader's next steady probe. Fast probing
// ends when the pool settles: one leader answering 200, the others not.
func (e *election) unsettled(ts []*Target) bool {
	return e.failing() || e.contested(ts)
}
