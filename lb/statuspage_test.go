package lb

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
	"github.com/fairlead/fairlead/lb/admin"
)

// The status page and the status document through a running fairlead. In a headless Chromium: the page
// follows a real leader change without a reload, and its Drain button drains a server (with the admin
// token, which it sends as a bearer token). Without a browser: what fairlead puts in the document for
// the page (a hung leader's fields, a ramp, the severity of each event, the rate history). How the page
// renders a given document is lb/admin's test.

func TestTheStatusPageFollowsALeaderChangeWithoutReloadingAndItsDrainButtonDrainsAServer(t *testing.T) {
	c := startCluster(t, 2, 2)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	cx1 := c.Connections[0]
	const token = "s3cret-token"
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	mustWriteFile(t, tokenFile, token+"\n")
	// cx1's display name is markup: the page must show it as text.
	const evilName = `<img src=x onerror=document.title=1>cx1`
	l, _ := startLB(t, cxConfig(c, fmt.Sprintf(`
[admin]
token_file = %q
[pools.platform.names]
%q = "platform1"
%q = "platform2"
[pools.cxserver.names]
%q = %q
`, tokenFile, p1.Addr, p2.Addr, cx1.Addr, evilName)))

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := browser.Open(t, ctx)
	platform := `document.querySelector('[data-pool="platform"]')`
	b.Do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.WaitFor(5*time.Second, "platform1 shown as the leader", fmt.Sprintf(
		`%s?.dataset.leader === %q && %s.querySelector('[data-stat="leader"] dd').textContent === %q`,
		platform, p1.Addr, platform, "platform1 ("+p1.Addr+")"))
	b.WaitFor(time.Second, "the live stream", `document.getElementById("conn").dataset.conn === "live"`)
	b.Eval(`window.sameDocument = "yes"`)

	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	b.WaitFor(5*time.Second, "platform2 shown as the leader", fmt.Sprintf(
		`%s.dataset.leader === %q && %s.querySelector('tr[data-addr=%q] .badge.leader').hidden === false`,
		platform, p2.Addr, platform, p2.Addr))
	b.WaitFor(time.Second, "the leader change in the event log", `document.querySelector('#log tr[data-kind="leader_changed"]') !== null`)

	cx1Row := fmt.Sprintf(`[data-pool="cxserver"] tr[data-addr=%q]`, cx1.Addr)
	if got := b.Eval(`document.querySelector(` + browser.JSString(cx1Row+" strong") + `).textContent`); got != evilName {
		t.Errorf("cx1's name shows as %q; want the text %q", got, evilName)
	}
	if got := b.Eval(`String(document.querySelectorAll("#pools img").length) + " " + document.title`); got != "0 fairlead" {
		t.Errorf("a server's name became markup (img elements, title): %q", got)
	}

	// Without the token, the action is refused and the page says why.
	drain := chromedp.CSS(cx1Row + ` button[data-action="drain"]`)
	b.Do("click Drain without the token", chromedp.Click(drain))
	b.WaitFor(5*time.Second, "the refusal shown", `document.getElementById("msg").textContent.includes("401")`)
	if ss := mustServerStatus(t, l, "cxserver", cx1.Addr); ss.AdminState != "ready" {
		t.Fatalf("without the token cx1 is %q; want ready", ss.AdminState)
	}

	// With it (the page then reads the stream with fetch, to send it there too), Drain drains.
	b.Do("save the token", chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("saveToken")))
	b.WaitFor(5*time.Second, "the stream read with the token",
		`document.getElementById("conn").dataset.transport === "fetch" && document.getElementById("conn").dataset.conn === "live"`)
	b.Do("click Drain", chromedp.Click(drain))
	testkit.Eventually(t, "cx1 drained", 5*time.Second, func() bool {
		ss := mustServerStatus(t, l, "cxserver", cx1.Addr)
		return ss.AdminState == "drain" && !ss.Available
	})
	b.WaitFor(5*time.Second, "cx1 shown draining", fmt.Sprintf(
		`document.querySelector(%s).dataset.state === "drain" && document.querySelector('#log tr[data-kind="admin_action"]') !== null`,
		browser.JSString(cx1Row)))

	// The stream read with fetch follows the next leader change too, still without a reload.
	mustSetState(t, p2, sim.Backup)
	mustSetState(t, p1, sim.Leader)
	b.WaitFor(5*time.Second, "platform1 shown as the leader again", fmt.Sprintf(`%s.dataset.leader === %q`, platform, p1.Addr))
	if got := b.Eval(`String(window.sameDocument)`); got != "yes" {
		t.Fatalf("the page was reloaded (marker %q)", got)
	}
}

// A pool with new_tunnels_per_second has its admission rate in the status; a server back under
// slow_start its ramp (the page shows both: lb/admin's TestTheStatusPageShowsAPoolsAdmissionRateAndAServerRampingUp).
func TestTheStatusHasAPoolsAdmissionRateAndTheRampOfAServerBackUnderSlowStart(t *testing.T) {
	c := startCluster(t, 1, 2)
	cx1 := c.Connections[0]
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver]\nnew_tunnels_per_second = 5\nslow_start = \"30s\"\n"))
	if p := poolStatus(t, l, "cxserver"); p.NewTunnelsPerSecond != 5 {
		t.Errorf("new_tunnels_per_second in the status: %d, want 5", p.NewTunnelsPerSecond)
	}
	if err := cx1.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "cx1 down", 10*time.Second, func() bool { return mustServerStatus(t, l, "cxserver", cx1.Addr).State == "down" })
	if err := cx1.Restart(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "cx1 up and ramping", 10*time.Second, func() bool {
		ss := mustServerStatus(t, l, "cxserver", cx1.Addr)
		return ss.State == "up" && ss.Ramp > 0 && ss.Ramp < 1
	})
}

// Issue 36: a hung leader stayed green ("up", "200 2.6 s ago") for ~20 s while requests waited on it.
// While it is still the leader, /api/status says what is known: its requests in flight and since when
// none of them has ended, and its check's probe without an answer (the page shows them in amber:
// lb/admin's TestAHungLeadersRowSaysItsRequestsWaitAndItsProbeIsOverdueWhileItIsStillTheLeader).
func TestAHungLeadersStatusSaysItsRequestsWaitAndItsProbeIsOverdueWhileItIsStillTheLeader(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1 := c.Platforms[0]
	// A 3 s check timeout with fall 3: the hung leader keeps its term for 9 s or more, time enough to
	// see it; response_timeout ends the request that waits on it before the test's end.
	l, _ := startLB(t, platformConfig(c, `response_timeout = "8s"`, `timeout = "3s"`))

	testkit.Eventually(t, "platform1 the leader, nothing waiting", 5*time.Second, func() bool {
		ss := mustServerStatus(t, l, "platform", p1.Addr)
		return poolLeader(l, "platform") == p1.Addr && ss.InFlight == 0
	})

	mustSetState(t, p1, sim.Hung)
	sent := time.Now()
	go func() {
		if resp, err := testClient.Get("http://" + l.Addr() + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	var ss admin.ServerStatus
	testkit.Eventually(t, "a request in flight to the hung leader and its probe overdue", 8*time.Second, func() bool {
		ss = mustServerStatus(t, l, "platform", p1.Addr)
		return ss.InFlight > 0 && ss.Check != nil && ss.Check.Overdue
	})
	if ss.State != "up" || ss.InFlightSince.Before(sent) || ss.Check.PendingSince.IsZero() || !ss.Check.PendingSince.Equal(ss.Check.LastProbe) {
		t.Fatalf("hung leader: %+v, check %+v; want up, in flight since the request (after %v), a probe pending", ss, *ss.Check, sent)
	}

}

// Issue 36: "pool down" and "leader changed → none" had grey and blue badges while a routine "server
// down" was red. Each event a running fairlead publishes carries its severity, which /api/status's
// history keeps (the page colours each badge by it: lb/admin's TestTheEventLogColoursEachEventBySeverity).
// And the rate history fairlead keeps for the page's first paint (lb/admin's
// TestTheStatusPagesFirstPaintShowsTheRatesOfTheHistoryAndItsLegendAgreesWithErrorsPerSecond): a pool's
// requests and the errors it answered itself (unavailable_status without a leader) are counted in it.
func TestTheStatusEventsCarryTheirSeverityAndTheRateHistoryAPoolsRequestsAndItsOwnErrors(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, `queue_timeout = "200ms"`, ""))
	// The history's first sample only sets its counters (what came before is not known to fall in its
	// step): the requests counted are those after it.
	testkit.Eventually(t, "the rate history's first sample", 5*time.Second, func() bool { return poolStatus(t, l, "platform").Rates != nil })
	for range 20 {
		if code, _ := get(t, l, "/"); code != 200 {
			t.Fatalf("got %d, want 200 from the leader", code)
		}
	}
	// The standby dies (a loss that still serves), then the leader steps down (an outage): three
	// requests get unavailable_status, fairlead's own errors; then it leads again (a recovery).
	mustSetState(t, p2, sim.Dead)
	testkit.Eventually(t, "platform2 down", 10*time.Second, func() bool { return mustServerStatus(t, l, "platform", p2.Addr).State == "down" })
	mustSetState(t, p1, sim.Backup)
	testkit.Eventually(t, "no leader", 10*time.Second, func() bool { return poolLeader(l, "platform") == "" })
	for range 3 {
		if code, _ := get(t, l, "/"); code != 503 {
			t.Fatalf("got %d without a leader, want 503", code)
		}
	}
	mustSetState(t, p1, sim.Leader)
	testkit.Eventually(t, "platform1 leads again", 10*time.Second, func() bool { return poolLeader(l, "platform") == p1.Addr })
	// pool_up is published after the leader_changed that brings it (on a loaded machine, a moment after).
	testkit.Eventually(t, "the pool_up event in the status", 5*time.Second, func() bool {
		evs := l.Status().Events
		return len(evs) > 0 && slices.ContainsFunc(evs, func(e admin.StreamEvent) bool { return e.Kind == "pool_up" })
	})

	// /api/status carries the severity as /events does.
	var downs, leaders []string
	for _, e := range l.Status().Events {
		switch e.Kind {
		case "pool_down", "server_down", "pool_up":
			downs = append(downs, e.Kind+" "+e.Severity)
		case "leader_changed":
			leaders = append(leaders, e.Server+" "+e.Severity)
		}
	}
	if got := strings.Join(downs, ", "); !strings.HasSuffix(got, "server_down warn, pool_down outage, pool_up ok") {
		t.Errorf("/api/status events: %s; want server_down warn, pool_down outage, pool_up ok", got)
	}
	if got := strings.Join(leaders, ", "); !strings.HasSuffix(got, " outage, "+p1.Addr+" ok") {
		t.Errorf("/api/status leader changes: %s; want to none (outage), then to %s (ok)", got, p1.Addr)
	}
	var req, errs uint64
	defer func() {
		if t.Failed() {
			t.Logf("the rate history holds %d requests and %d errors", req, errs)
		}
	}()
	testkit.Eventually(t, "the 23 requests and 3 errors in the rate history", 5*time.Second, func() bool {
		req, errs = 0, 0
		if p := poolStatus(t, l, "platform"); p.Rates != nil {
			for i := range p.Rates.Requests {
				req, errs = req+p.Rates.Requests[i], errs+p.Rates.Errors[i]
			}
		}
		return req == 23 && errs == 3
	})
}
