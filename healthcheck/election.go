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
//   - Another server answering 200 while the leader's latest answer is also 200 is split brain: the
//     leader stays and the event is reported.
//   - A leader removed from the pool (reload, discovery) is replaced at once by the same choice.
//   - Backup servers are chosen only when no primary's latest answer was 200. A primary answering 200
//     while a backup leads is split brain like any other: the backup stays until fall non-200 answers.
type election struct {
	fall   int
	leader *Target // nil while no leader is known
	// ready is false until the first round of probes is over; until then nobody is elected, so that the
	// initial choice sees every server's answer instead of whichever came first.
	ready bool
}

// outcome says what one answer changed.
type outcome struct {
	old        *Target // the leader before
	splitBrain bool    // a second server answered 200 while the leader is healthy
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
		if !ok && t.fails >= e.fall {
			e.leader = best(ts)
		}
	case ok && e.leader.fails == 0:
		out.splitBrain = true
	}
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
	return out
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

// failing reports whether probing must go fast: no leader known, or the leader's latest answer was not 200.
func (e *election) failing() bool {
	return e.leader == nil || e.leader.fails > 0
}
