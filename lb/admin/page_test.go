package admin

// The status page renders the documents the Backend returns and the events it publishes: a Handler
// over a testBackend, in a headless Chromium (bench/testkit/browser). The documents are fixed here;
// that a running fairlead builds them (states, alarms, the hung leader's fields) and that its page
// follows a real leader change or the loss of a standby are package lb's tests.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fairlead/fairlead/bench/testkit/browser"
	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/healthcheck/event"
)

// Without a browser: the page is one document that loads nothing from elsewhere, and only its own
// script may run.
func TestTheStatusPageIsOneDocumentThatLoadsNothingFromElsewhere(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{})
	resp, err := e.client.Get("http://" + e.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		!strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("GET /: %s, Content-Type %q, Content-Security-Policy %q", resp.Status, resp.Header.Get("Content-Type"), csp)
	}
	page := string(body)
	for _, bad := range []string{"http://", "https://", "<link", "src=", "innerHTML", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q: it must be self-contained and build its content as text", bad)
		}
	}
	if strings.Count(page, "<script>") != 1 || !strings.Contains(page, `new EventSource("/events")`) {
		t.Errorf("the page should have one inline script that reads /events")
	}
}

// openPage opens the status page of e in a browser.
func openPage(t *testing.T, e *adminEnv) *browser.Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	t.Cleanup(cancel)
	b := browser.Open(t, ctx)
	b.Do("open the status page", chromedp.Navigate("http://"+e.addr+"/"))
	return b
}

// relayDoc is a status with relay "appconfig" over pool "appconfig", its sessions on upstream.
func relayDoc(upstream string, backup bool) Status {
	return Status{Alarms: []Alarm{}, Relays: []RelayStatus{{Name: "appconfig", Protocol: "generic",
		Path: "/relay/{collection}/{environment}", Pool: "appconfig", Start: "normal", Upstream: upstream, ServingBackup: backup,
		Sessions: 2, Requests: map[string]uint64{}, Refused: map[string]uint64{},
		Topics: []TopicStatus{{Topic: "inventory/dev", Listed: true, Watched: true, Version: 1},
			{Topic: "payments/prod", Listed: true, Watched: true, Version: 1}}}}}
}

// The page shows each relay route: its upstream server and sessions, and its topics, and follows a
// failover to the backup without reloading.
func TestTheStatusPageShowsARelayAndFollowsItsFailover(t *testing.T) {
	const primary, backup = "127.0.0.1:9101", "127.0.0.1:9102"
	be := newTestBackend(nil)
	be.setStatus(relayDoc(primary, false))
	e := startAdmin(t, be, Options{SnapshotEvery: 100 * time.Millisecond})
	b := openPage(t, e)
	relay := `document.querySelector('[data-relay="appconfig"]')`
	b.WaitFor(5*time.Second, "the relay on its primary with two sessions", fmt.Sprintf(
		`%s?.dataset.upstream === %q && %s.dataset.sessions === "2" && %s.querySelectorAll('tbody tr[data-topic]').length === 2`,
		relay, primary, relay, relay))
	b.Eval(`window.sameDocument = "yes"`)
	be.setStatus(relayDoc(backup, true))
	b.WaitFor(5*time.Second, "the relay on its backup", fmt.Sprintf(
		`%s?.dataset.upstream === %q && %s.textContent.includes("serving backup")`, relay, backup, relay))
	if got := b.Eval(`String(window.sameDocument)`); got != "yes" {
		t.Fatalf("the page was reloaded (marker %q)", got)
	}
}

// An App Configuration relay shows its instance and its IAM tokens.
func TestTheStatusPageShowsAnAppConfigurationRelaysInstanceAndTokens(t *testing.T) {
	be := newTestBackend(nil)
	be.setStatus(Status{Alarms: []Alarm{}, Relays: []RelayStatus{{Name: "ibm", Protocol: "appconfiguration", GUID: "guid-primary",
		Pool: "ibm", Start: "normal", Upstream: "127.0.0.1:9201", Sessions: 2, Requests: map[string]uint64{}, Refused: map[string]uint64{},
		IAM: &IAMStatus{URL: "http://127.0.0.1:9300", TokenExpires: time.Now().Add(time.Hour), Tokens: 1}}}})
	e := startAdmin(t, be, Options{})
	b := openPage(t, e)
	relay := `document.querySelector('[data-relay="ibm"]')`
	b.WaitFor(5*time.Second, "the relay's instance and its token", fmt.Sprintf(
		`%s?.textContent.includes("App Configuration %s") && %s.querySelector('[data-stat="iam"] dd')?.textContent === "1"`,
		relay, "guid-primary", relay))
}

// cxDoc is a status with sticky pool "cxserver" admitting 5 new tunnels per second per server, its
// first server in state (with ramp, its share under slow_start).
func cxDoc(state string, ramp float64) Status {
	return Status{Alarms: []Alarm{}, Pools: []PoolStatus{{Name: "cxserver", Balance: "sticky", Serving: "primaries",
		NewTunnelsPerSecond: 5, Check: "http", Servers: []ServerStatus{
			{Addr: cx1, Name: cx1, Tier: "primary", State: state, AdminState: "ready", Available: state == "up", Writable: true, Ramp: ramp,
				Check: &healthcheck.ServerStatus{Addr: cx1, Up: state == "up", Answered: true, LastStatus: 200}},
			{Addr: cx2, Name: cx2, Tier: "primary", State: "up", AdminState: "ready", Available: true, Writable: true,
				Check: &healthcheck.ServerStatus{Addr: cx2, Up: true, Answered: true, LastStatus: 200}}}}}}
}

// A pool with new_tunnels_per_second shows its admission rate; a server back under slow_start shows
// its ramp.
func TestTheStatusPageShowsAPoolsAdmissionRateAndAServerRampingUp(t *testing.T) {
	be := newTestBackend(nil)
	be.setStatus(cxDoc("up", 0))
	e := startAdmin(t, be, Options{SnapshotEvery: 100 * time.Millisecond})
	b := openPage(t, e)
	pool := `document.querySelector('[data-pool="cxserver"]')`
	b.WaitFor(5*time.Second, "the pool's admission rate", fmt.Sprintf(
		`%s?.querySelector('[data-stat="admission"] dd')?.textContent.startsWith("5/s per server")`, pool))
	be.setStatus(cxDoc("down", 0))
	row := fmt.Sprintf(`%s?.querySelector('tr[data-addr=%q]')`, pool, cx1)
	b.WaitFor(10*time.Second, "cx1 down", row+`?.dataset.state === "down"`)
	be.setStatus(cxDoc("up", 0.25))
	b.WaitFor(10*time.Second, "cx1 up and ramping", row+`?.dataset.state === "up" && `+row+`.textContent.includes("(ramping 25%)")`)
}

// Issue 36: a hung leader stayed green ("up", "200 2.6 s ago") for ~20 s while requests waited on it.
// While it is still the leader, its row says what is known, in amber: its requests in flight and how
// long none of them has ended, and its check's probe without an answer.
func TestAHungLeadersRowSaysItsRequestsWaitAndItsProbeIsOverdueWhileItIsStillTheLeader(t *testing.T) {
	be := newTestBackend(nil)
	p1 := "127.0.0.1:9001"
	e := startAdmin(t, be, Options{SnapshotEvery: 100 * time.Millisecond})
	b := openPage(t, e)
	row := fmt.Sprintf(`document.querySelector('[data-pool="platform"] tr[data-addr=%q]')`, p1)
	b.WaitFor(5*time.Second, "platform1 the leader, nothing waiting", row+`?.dataset.leader === "true" && `+row+`.dataset.waiting === "false"`)

	// The document of a hung leader (lb's TestAHungLeadersStatusSaysItsRequestsWaitAndItsProbeIsOverdue):
	// up, a request in flight for 3 s, its probe pending as long and overdue.
	st := be.Status()
	pending := time.Now().Add(-3 * time.Second)
	hung := &st.Pools[0].Servers[0]
	hung.InFlight, hung.InFlightSince = 1, pending
	check := *hung.Check
	check.LastProbe, check.PendingSince, check.Overdue = pending, pending, true
	hung.Check = &check
	be.setStatus(st)
	b.WaitFor(5*time.Second, "the row's requests waiting and its probe overdue, in amber, the leader still up", row+`.dataset.state === "up" && `+
		row+`.dataset.leader === "true" && `+row+`.dataset.waiting === "true" && `+
		row+`.querySelector(".waited").textContent.startsWith(" · waiting ") && `+row+`.querySelector("td.sev-warn .waited") !== null && `+
		row+`.querySelector("span.sev-warn")?.textContent === "no answer to the probe sent"`)
}

// Issue 36: "pool down" and "leader changed → none" had grey and blue badges while a routine "server
// down" was red. Each event carries its severity and the page colours its badge by it: an outage red,
// a loss that still serves amber, a recovery green.
func TestTheEventLogColoursEachEventBySeverity(t *testing.T) {
	be := newTestBackend(nil)
	p1, p2 := "127.0.0.1:9001", "127.0.0.1:9002"
	st := be.Status() // servers without display names: the log names them by address
	for i := range st.Pools[0].Servers {
		st.Pools[0].Servers[i].Name = st.Pools[0].Servers[i].Addr
	}
	be.setStatus(st)
	e := startAdmin(t, be, Options{})
	b := openPage(t, e)
	b.WaitFor(5*time.Second, "the live stream", `document.getElementById("conn").dataset.conn === "live"`)

	// The standby dies (a loss that still serves), then the leader steps down (an outage), then it
	// leads again (a recovery): the events a running fairlead publishes then.
	for _, ev := range []event.Event{
		{Kind: event.ServerDown, Pool: "platform", Server: p2, Detail: "connection refused"},
		{Kind: event.LeaderChanged, Pool: "platform", Old: p1},
		{Kind: event.PoolDown, Pool: "platform"},
		{Kind: event.LeaderChanged, Pool: "platform", Server: p1},
		{Kind: event.PoolUp, Pool: "platform"},
	} {
		be.Publish(ev)
	}

	// row finds a line of the log: its kind, its server, its severity and its badge's class.
	row := func(kind, server, severity string) string {
		return fmt.Sprintf(`Array.from(document.querySelectorAll('#log tr[data-kind=%q]')).some((r) => r.dataset.severity === %q && `+
			`r.querySelector(".badge").classList.contains(%q) && r.cells[3].textContent.startsWith(%q))`, kind, severity, "sev-"+severity, server)
	}
	for _, w := range []struct{ kind, server, severity string }{
		{"server_down", p2, "warn"},
		{"leader_changed", "none (was " + p1 + ")", "outage"},
		{"pool_down", "", "outage"},
		{"leader_changed", p1 + " (was none)", "ok"},
		{"pool_up", "", "ok"},
	} {
		b.WaitFor(5*time.Second, w.kind+" "+w.server+" coloured "+w.severity, row(w.kind, w.server, w.severity))
	}
	// The colours differ: an outage is not a loss that still serves, nor a recovery.
	colour := func(sev string) string {
		return b.Eval(fmt.Sprintf(`getComputedStyle(document.querySelector('#log tr[data-severity=%q] .badge')).color`, sev))
	}
	if outage, warn, ok := colour("outage"), colour("warn"), colour("ok"); outage == warn || warn == ok || outage == ok {
		t.Errorf("badge colours: outage %s, warn %s, ok %s; want three colours", outage, warn, ok)
	}
}

// Issue 36: Requests/s read 0.00 for the first 2 s of a page (until it had two snapshots to compare),
// and the chart's legend said "no errors" while Errors/s showed errors (the legend looked only at the
// complete steps of the hour). The first paint draws both rates from the history the snapshot carries,
// and the legend names the errors whenever Errors/s has some: here 20 requests in the last complete
// step, then 3 requests, all errors, in the current one (what lb's
// TestTheStatusRateHistoryHoldsAPoolsRequestsAndItsOwnErrors has fairlead count).
func TestTheStatusPagesFirstPaintShowsTheRatesOfTheHistoryAndItsLegendAgreesWithErrorsPerSecond(t *testing.T) {
	be := newTestBackend(nil)
	st := be.Status()
	now := time.Now()
	step := now.Truncate(RateStep)
	p := &st.Pools[0]
	p.Requests, p.Errors = 23, 3
	p.Rates = &RateHistory{StepSeconds: int(RateStep / time.Second), Start: step.Add(-RateStep), Through: now,
		Requests: []uint64{20, 3}, Errors: []uint64{0, 3}}
	be.setStatus(st)
	// Nothing more is sent: a page that waited for a second snapshot would show 0.00 for good.
	e := startAdmin(t, be, Options{SnapshotEvery: time.Hour})
	b := openPage(t, e)
	pool := `document.querySelector('[data-pool="platform"]')`
	stat := func(k string) string {
		return fmt.Sprintf(`%s?.querySelector('[data-stat=%q] dd')?.textContent`, pool, k)
	}
	b.WaitFor(5*time.Second, "the first snapshot with its rates and a legend naming the errors", fmt.Sprintf(
		`%s === "23" && %s !== "0.00" && %s !== "0.00" && %s.querySelector(".legend").textContent.includes("errors/s") && !%s.querySelector(".legend").textContent.includes("no errors")`,
		stat("requests"), stat("rps"), stat("eps"), pool, pool))
}
