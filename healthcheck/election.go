package healthcheck

// election is the leader state machine of a ThingWorx HA pool, without clocks or sockets: it is fed one
// LeaderCheck answer at a time and says who is leader. It is not safe for concurrent use; Leader guards it.
//
// The rules, as ThingWorx prescribes for its load balancers:
//   - 200 is a leader answer; anything else (400, 401, 503, another code, timeout, refused) is not.
//   - The leader stays leader until it gives fall consecutive non-200 answers; fewer do not switch.
//   - Then the server whose latest answer was 200 becomes leader; if several, the one with the longest
//     run of 200s (ties go to the first in config order). If none, no leader is known until some server
//     answers 200.
//   - Another server answering 200 while the leader's latest answer is also 200 is split brain: the
//     leader stays and the event is reported.
type election struct {
	fall   int
	leader int   // index into the servers, -1 while no leader is known
	runs   []int // consecutive 200 answers of each server, 0 if its latest answer was not 200
	fails  []int // consecutive non-200 answers of each server
	// ready is false until the first round of probes is over; until then nobody is elected, so that the
	// initial choice sees every server's answer instead of whichever came first.
	ready bool
}

// outcome says what one answer changed.
type outcome struct {
	changed    bool // the leader changed (possibly to -1)
	old        int  // the leader before this answer
	splitBrain bool // a second server answered 200 while the leader is healthy
}

func newElection(n, fall int) *election {
	return &election{fall: fall, leader: -1, runs: make([]int, n), fails: make([]int, n)}
}

// observe records server i's answer (ok means 200).
func (e *election) observe(i int, ok bool) outcome {
	if ok {
		e.runs[i]++
		e.fails[i] = 0
	} else {
		e.runs[i] = 0
		e.fails[i]++
	}
	out := outcome{old: e.leader}
	switch {
	case !e.ready:
	case e.leader < 0:
		if ok {
			e.leader = e.best()
		}
	case i == e.leader:
		if !ok && e.fails[i] >= e.fall {
			e.leader = e.best()
		}
	case ok && e.fails[e.leader] == 0:
		out.splitBrain = true
	}
	out.changed = e.leader != out.old
	return out
}

// finishFirstRound ends the initial round and elects from the answers seen so far.
func (e *election) finishFirstRound() outcome {
	out := outcome{old: e.leader}
	if !e.ready {
		e.ready = true
		e.leader = e.best()
		n := 0
		for _, r := range e.runs {
			if r > 0 {
				n++
			}
		}
		out.splitBrain = n > 1
	}
	out.changed = e.leader != out.old
	return out
}

// best returns the server whose latest answer was 200 with the longest run of 200s, or -1.
func (e *election) best() int {
	best := -1
	for i, r := range e.runs {
		if r > 0 && (best < 0 || r > e.runs[best]) {
			best = i
		}
	}
	return best
}

// failing reports whether probing must go fast: no leader known, or the leader's latest answer was not 200.
func (e *election) failing() bool {
	return e.leader < 0 || e.fails[e.leader] > 0
}
