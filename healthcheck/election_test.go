package healthcheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestElectionFollowsTheThingWorxRules feeds answer scripts to the state machine. A script is a list of
// steps over n servers: "0+" means server 0 answered 200, "1-" means server 1 answered non-200, "|"
// ends the first round, and "x0" removes server 0 from the pool ("x01" removes servers 0 and 1 in one
// server set change). want is the leader after the last step (-1 for none); wantSplit is how many
// outcomes reported split brain (one split brain is reported once, until it ends). fb also takes the
// indices of the backup servers ("2" or "12").
func TestElectionFollowsTheThingWorxRules(t *testing.T) {
	fb := func(name string, n int, backups, script string, want, wantSplit int) {
		t.Helper()
		all := make([]*Target, n)
		for i := range all {
			all[i] = NewTarget(fmt.Sprintf("10.0.0.%d:8080", i))
			all[i].SetBackup(strings.ContainsRune(backups, rune('0'+i)))
		}
		ts := slices.Clone(all) // the pool, config order
		e := &election{fall: 3}
		split := 0
		for _, step := range strings.Fields(script) {
			var out outcome
			switch {
			case step == "|":
				out = e.finishFirstRound(ts)
			case step[0] == 'x':
				var gone []*Target
				for _, c := range step[1:] {
					gone = append(gone, all[c-'0'])
				}
				ts = slices.DeleteFunc(ts, func(t *Target) bool { return slices.Contains(gone, t) })
				out = e.removed(ts, gone)
			default:
				out = e.observe(ts, all[step[0]-'0'], step[1] == '+')
			}
			if out.splitBrain {
				split++
			}
		}
		if got := slices.Index(all, e.leader); got != want || split != wantSplit {
			t.Errorf("%s: leader %d split %d, want leader %d split %d", name, got, split, want, wantSplit)
		}
	}
	f := func(name string, n int, script string, want, wantSplit int) {
		t.Helper()
		fb(name, n, "", script, want, wantSplit)
	}
	f("first round elects the one server answering 200", 2, "0- 1+ |", 1, 0)
	f("nobody is elected before the first round ends", 2, "0+", -1, 0)
	f("no 200 in the first round means no leader", 2, "0- 1- |", -1, 0)
	f("a 200 after a leaderless start elects at once", 2, "0- 1- | 1+", 1, 0)
	f("two non-200 answers do not switch", 2, "0+ 1- | 0- 1+ 0-", 0, 0)
	f("the third non-200 answer switches", 2, "0+ 1- | 0- 1+ 0- 0-", 1, 0)
	f("a 200 between failures resets the count (and, with the other's 200, is split brain)", 2, "0+ 1- | 0- 1+ 0- 0+ 0- 0-", 0, 1)
	f("the switch goes to a server whose latest answer was 200", 3, "0+ 1- 2- | 0- 1+ 2+ 1- 0- 0-", 2, 0)
	f("among several, the longest run of 200s wins", 3, "0+ 1- 2- | 0- 2+ 1+ 2+ 0- 0-", 2, 0)
	f("nobody answering 200 leaves no leader", 2, "0+ 1- | 0- 0- 0-", -1, 0)
	f("the old leader can come back when nobody else is leader", 2, "0+ 1- | 0- 0- 0- 0+", 0, 0)
	f("split brain keeps the leader and is reported once while it lasts", 2, "0+ 1- | 1+ 0+ 1+ 0+ 1+", 0, 1)
	f("a split brain that ended is reported again when it begins again", 2, "0+ 1- | 1+ 0+ 1- 0+ 1+ 0+", 0, 2)
	f("another server's 200 is split brain only once the leader answers 200 after it", 2, "0+ 1- | 1+ 1+", 0, 0)
	f("another server's 200 while the leader steps down is not split brain", 2, "0+ 1- | 1+ 0- 0- 0-", 1, 0)
	f("a split brain is reported once through a flapping leader", 2, "0+ 1- | 1+ 0- 1+ 0+ 1+ 0- 1+ 0+ 1+", 0, 1)
	f("a leader flapping at every probe while another server answers 200 is never replaced", 2,
		"0+ 1- | 1+ 0- 0- 1+ 0+ 0- 1+ 0- 0+ 0- 0- 1+ 0+", 0, 1)
	f("a split brain with a new leader is reported anew", 3, "0+ 1- 2- | 1+ 0+ 2+ 0- 0- 0- 2+ 1+", 1, 2)
	f("split brain in the first round elects the first server", 2, "0+ 1+ |", 0, 1)
	f("a 200 from another server while the leader fails is not split brain", 2, "0+ 1- | 0- 1+", 0, 0)

	f("a removed leader is replaced at once by the longest run of 200s", 3, "0+ 1- 2- | 0- 1+ 2+ 2+ x0", 2, 0)
	f("a removed leader is replaced by the first in config order on a tie", 3, "0+ 1- 2- | 0- 2+ 1+ x0", 1, 0)
	f("a removed healthy leader is replaced too", 3, "0+ 1- 2- | 1+ 2+ 2+ x0", 2, 0)
	f("removing a non-leader changes nothing", 3, "0+ 1- 2- | 0- 1+ 2+ 2+ x2", 0, 0)
	f("removing a non-leader while the leader is failing changes nothing", 2, "0+ 1- | 0- 0- 1+ x1", 0, 0)
	f("removing the leader when nobody else answered 200 leaves no leader", 2, "0+ 1- | x0", -1, 0)
	f("removing the leader when the others' latest answers were not 200 leaves no leader", 2,
		"0+ 1- | 0- 1+ 1- x0", -1, 0)
	f("removing the leader and the runner-up together elects the next", 3, "0+ 1- 2- | 0- 1+ 1+ 2+ x01", 2, 0)
	f("after a removal left no leader, a 200 elects at once", 2, "0+ 1- | x0 1+", 1, 0)
	f("a server removed during the first round is not elected", 2, "0+ 1- x0 1+ |", 1, 0)
	f("a removal during the first round elects nobody yet", 2, "0+ 1+ x0", -1, 0)

	// Backups (server 2, or 1 and 2): chosen only when no primary's latest answer was 200.
	fb("a primary answering 200 wins the first round over a backup", 3, "2", "2+ 0+ 1- |", 0, 1)
	fb("a backup is elected when no primary answers 200", 3, "2", "0- 1- 2+ |", 2, 0)
	fb("a backup with a longer run loses to a primary", 3, "2", "0+ 1- 2- | 0- 2+ 2+ 2+ 1+ 0- 0-", 1, 0)
	fb("after the leader's fall, a backup takes over only when no primary answers 200", 3, "2",
		"0+ 1- 2- | 2+ 0- 0- 0-", 2, 0)
	fb("a primary answering 200 while a backup leads is split brain: the backup stays", 3, "2",
		"0- 1- 2+ | 0+ 2+", 2, 1)
	fb("the three-answer rule governs the change back to a primary", 3, "2",
		"0- 1- 2+ | 0+ 2- 2- 0+ 2-", 0, 0)
	fb("a removed primary leader is replaced by a primary before a backup", 3, "2",
		"0+ 1- 2- | 2+ 2+ 1+ x0", 1, 0)
	fb("the longest run wins among backups", 4, "23", "0- 1- 2+ 3+ | 3+ 2- 2- 2-", 3, 1)
}

func TestElectionIsUnsettledWhileTheLeaderIsUnknownOrFailingOrAnotherServerAnswers200(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")
	e := &election{fall: 3}
	f := func(what string, wantFailing, wantUnsettled bool) {
		t.Helper()
		if got := e.failing(); got != wantFailing {
			t.Errorf("%s: failing %v, want %v", what, got, wantFailing)
		}
		if got := e.unsettled(ts); got != wantUnsettled {
			t.Errorf("%s: unsettled %v, want %v", what, got, wantUnsettled)
		}
	}
	f("no leader known yet", true, true)
	e.observe(ts, ts[0], true)
	e.observe(ts, ts[1], false)
	e.observe(ts, ts[2], false)
	e.finishFirstRound(ts)
	f("healthy leader, the others non-200", false, false)
	e.observe(ts, ts[0], false)
	f("leader answered non-200", true, true)
	e.observe(ts, ts[0], true)
	f("leader recovered", false, false)
	e.observe(ts, ts[2], true)
	f("another server answered 200 (leadership moving, or split brain)", false, true)
	e.observe(ts, ts[0], true)
	f("the leader answered 200 again while the other's latest answer is 200", false, true)
	e.observe(ts, ts[2], false)
	f("the other server answered non-200 again", false, false)
	e.observe(ts, ts[1], true)
	for range 3 {
		e.observe(ts, ts[0], false)
	}
	if e.leader != ts[1] {
		t.Fatalf("leader %v after the leader's fall, want %s", e.leader, ts[1].Addr())
	}
	f("a new leader, the old one non-200", false, false)
	e.removed(ts[:1], ts[1:])
	f("leader removed and nobody else answers 200", true, true)
}

func TestElectionOutcomeSaysWhetherTheLeaderChanged(t *testing.T) {
	ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
	e := &election{fall: 1}
	f := func(what string, out outcome, want bool) {
		t.Helper()
		if got := e.changed(out); got != want {
			t.Errorf("%s: changed %v, want %v", what, got, want)
		}
	}
	f("an answer during the first round", e.observe(ts, ts[0], true), false)
	f("the first round electing server 0", e.finishFirstRound(ts), true)
	f("the first round ending twice", e.finishFirstRound(ts), false)
	f("the leader's 200", e.observe(ts, ts[0], true), false)
	f("another server's 200 (split brain)", e.observe(ts, ts[1], true), false)
	f("the leader's fall-th non-200", e.observe(ts, ts[0], false), true)
	f("removing a non-leader", e.removed(ts[1:], ts[:1]), false)
	f("removing the leader", e.removed(nil, ts[1:]), true)
}
