package healthcheck

import (
	"strings"
	"testing"
)

// TestElectionFollowsTheThingWorxRules feeds answer scripts to the state machine. A script is a list of
// "<server><answer>" steps: "0+" means server 0 answered 200, "1-" means server 1 answered non-200, and
// "|" ends the first round. want is the leader after the last step.
func TestElectionFollowsTheThingWorxRules(t *testing.T) {
	f := func(name string, n int, script string, want int, wantSplit int) {
		t.Helper()
		e := newElection(n, 3)
		split := 0
		for _, step := range strings.Fields(script) {
			var out outcome
			if step == "|" {
				out = e.finishFirstRound()
			} else {
				out = e.observe(int(step[0]-'0'), step[1] == '+')
			}
			if out.splitBrain {
				split++
			}
		}
		if e.leader != want || split != wantSplit {
			t.Errorf("%s: leader %d split %d, want leader %d split %d", name, e.leader, split, want, wantSplit)
		}
	}
	f("first round elects the one server answering 200", 2, "0- 1+ |", 1, 0)
	f("nobody is elected before the first round ends", 2, "0+", -1, 0)
	f("no 200 in the first round means no leader", 2, "0- 1- |", -1, 0)
	f("a 200 after a leaderless start elects at once", 2, "0- 1- | 1+", 1, 0)
	f("two non-200 answers do not switch", 2, "0+ 1- | 0- 1+ 0-", 0, 0)
	f("the third non-200 answer switches", 2, "0+ 1- | 0- 1+ 0- 0-", 1, 0)
	f("a 200 between failures resets the count", 2, "0+ 1- | 0- 1+ 0- 0+ 0- 0-", 0, 0)
	f("the switch goes to a server whose latest answer was 200", 3, "0+ 1- 2- | 0- 1+ 2+ 1- 0- 0-", 2, 0)
	f("among several, the longest run of 200s wins", 3, "0+ 1- 2- | 0- 2+ 1+ 2+ 0- 0-", 2, 0)
	f("nobody answering 200 leaves no leader", 2, "0+ 1- | 0- 0- 0-", -1, 0)
	f("the old leader can come back when nobody else is leader", 2, "0+ 1- | 0- 0- 0- 0+", 0, 0)
	f("split brain keeps the leader and is reported", 2, "0+ 1- | 1+ 0+ 1+", 0, 2)
	f("split brain in the first round elects the first server", 2, "0+ 1+ |", 0, 1)
	f("a 200 from another server while the leader fails is not split brain", 2, "0+ 1- | 0- 1+", 0, 0)
}

func TestElectionIsFailingWhileTheLeaderIsUnknownOrFailing(t *testing.T) {
	e := newElection(2, 3)
	if !e.failing() {
		t.Fatal("no leader known yet: want failing")
	}
	e.observe(0, true)
	e.observe(1, false)
	e.finishFirstRound()
	if e.failing() {
		t.Fatal("healthy leader: want not failing")
	}
	e.observe(0, false)
	if !e.failing() {
		t.Fatal("leader answered non-200: want failing")
	}
	e.observe(0, true)
	if e.failing() {
		t.Fatal("leader recovered: want not failing")
	}
}
