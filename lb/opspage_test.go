package lb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
	"github.com/fairlead/fairlead/lb/admin"
)

// What an operator leans on during an incident (issue #24): the alarm when a leader pool has no leader,
// the history a page opened afterwards shows, and server states that say what they mean.

func TestAPageOpenedAfterTheLeadersAreLostShowsTheAlarmAndTheLeaderChangesBeforeItAndClearsItWhenALeaderIsBack(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, "", ""))
	leaderIs := func(want string) {
		t.Helper()
		testkit.Eventually(t, "leader "+want, 10*time.Second, func() bool { return poolLeader(l, "platform") == want })
	}
	leaderIs(p1.Addr)

	// Two leader changes, then no leader at all: p2 dies, p1 steps down.
	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	leaderIs(p2.Addr)
	mustSetState(t, p2, sim.Backup)
	mustSetState(t, p1, sim.Leader)
	leaderIs(p1.Addr)
	mustSetState(t, p2, sim.Dead)
	mustSetState(t, p1, sim.Backup)
	leaderIs("")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := browser.Open(t, ctx)
	b.Do("open the status page after the incident", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.WaitFor(5*time.Second, "the alarm in the title and the header",
		`document.title.startsWith("NO LEADER: platform") && !document.getElementById("alarm").hidden && `+
			`document.getElementById("alarm").textContent === "NO LEADER: platform"`)
	// The log shows the changes that happened before the page was opened: to p2, back to p1, to none.
	changes := `Array.from(document.querySelectorAll('#log tr[data-kind="leader_changed"]')).map((r) => r.cells[3].textContent).reverse().join(" | ")`
	want := fmt.Sprintf("%s (was %s) | %s (was %s) | none (was %s)", p2.Addr, p1.Addr, p1.Addr, p2.Addr, p1.Addr)
	b.WaitFor(5*time.Second, "the leader changes before the page was opened", fmt.Sprintf(`(%s).endsWith(%s)`, changes, browser.JSString(want)))
	if got := b.Eval(`document.querySelector('[data-pool="platform"] [data-stat="changes"] dd').textContent`); got != "3" {
		t.Errorf("the page shows %q leader changes; want 3 (the first election is none)", got)
	}
	// The states say what each server is: p1 answers 503 (standby), p2 refuses connections (down).
	b.WaitFor(5*time.Second, "p1 standby and p2 down", fmt.Sprintf(
		`document.querySelector('tr[data-addr=%q]').dataset.state === "standby" && document.querySelector('tr[data-addr=%q]').dataset.state === "down"`,
		p1.Addr, p2.Addr))
	if got := b.Eval(`document.getElementById("summary").textContent`); got != "1 pool, 0 of 2 servers serving, 1 standby, 1 down" {
		t.Errorf("summary %q; want 0 of 2 serving, 1 standby, 1 down", got)
	}

	// A leader is back: the red alarm is over; p2 still dead, the pool serves without a spare (amber).
	mustSetState(t, p1, sim.Leader)
	b.WaitFor(10*time.Second, "the alarm cleared, the redundancy lost", `document.title === "REDUNDANCY LOST: platform — fairlead" && document.getElementById("alarm").hidden && !document.getElementById("warning").hidden`)
	b.WaitFor(5*time.Second, "the new leader change in the log", fmt.Sprintf(
		`document.querySelector('#log tr[data-kind="leader_changed"]').cells[3].textContent === %s`, browser.JSString(p1.Addr+" (was none)")))
}

func TestTheStatusSaysUpForTheLeaderStandbyForAHealthyNonLeaderAndDownForAServerRefusingConnections(t *testing.T) {
	c := startCluster(t, 3, 0)
	leader, standby, dead := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	mustSetState(t, dead, sim.Dead)
	l, _ := startLB(t, platformConfig(c, "", ""))

	want := map[string]string{leader.Addr: admin.StateUp, standby.Addr: admin.StateStandby, dead.Addr: admin.StateDown}
	var st admin.Status
	testkit.Eventually(t, "the three states in /api/status", 10*time.Second, func() bool {
		if st = apiStatus(t, l.AdminAddr(), ""); len(st.Pools) != 1 {
			return false
		}
		for _, s := range st.Pools[0].Servers {
			if want[s.Addr] != s.State {
				return false
			}
		}
		return true
	})
	p := st.Pools[0]
	if p.Leader != leader.Addr || p.LeaderChanges != 0 || len(st.Alarms) != 0 || p.Check != "leader" {
		t.Errorf("pool: leader %q after %d changes, alarms %+v, check %q; want %s, 0 changes (a fresh start), none, leader",
			p.Leader, p.LeaderChanges, st.Alarms, p.Check, leader.Addr)
	}
	for _, s := range p.Servers {
		if s.Since.IsZero() {
			t.Errorf("%s: no since time", s.Addr)
		}
	}
	// /metrics says the same, one series per state.
	for addr, state := range want {
		for _, other := range admin.ServerStates {
			series := fmt.Sprintf(`fairlead_server_state{pool="platform",server=%q,name=%q,state=%q}`, addr, addr, other)
			if got, wantV := opMetric(t, l.AdminAddr(), "", series), boolGauge(other == state); got != float64(wantV) {
				t.Errorf("%s = %v; want %d", series, got, wantV)
			}
		}
	}
}
