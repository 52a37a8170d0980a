package lb

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
)

// The status page end to end, in a headless Chromium: it follows a leader change without a reload, and
// its Drain button drains a server (with the admin token, which it sends as a bearer token).

// findChromium returns the browser to drive, or skips the test when the machine has none (CI installs
// the Debian chromium package, so there the test runs).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium binary (/usr/bin/chromium): install the chromium package to run the status page test")
	return ""
}

// page drives one browser tab; what it finds wrong in the page's console (an exception, a Content
// Security Policy violation) fails the test at its end.
type page struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

func openBrowser(t *testing.T, ctx context.Context, more ...chromedp.ExecAllocatorOption) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findChromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(opts, more...)...)
	bctx, cancelTab := chromedp.NewContext(actx)
	p := &page{t: t, ctx: bctx}
	// Console starts the browser: here, before any other call on bctx.
	messages := chromedp.Console(bctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pr := range p.problems {
			t.Errorf("page console: %s", pr)
		}
	})
	return p
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls the JavaScript expression cond until it is true.
func (p *page) waitFor(timeout time.Duration, what, cond string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		p.t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
	}
}

func (p *page) eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func TestTheStatusPageFollowsALeaderChangeWithoutReloadingAndItsDrainButtonDrainsAServer(t *testing.T) {
	c := startCluster(t, 2, 2)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	cx1 := c.Connections[0]
	const token = "s3cret-token"
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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
	b := openBrowser(t, ctx)
	platform := `document.querySelector('[data-pool="platform"]')`
	b.do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.waitFor(5*time.Second, "platform1 shown as the leader", fmt.Sprintf(
		`%s?.dataset.leader === %q && %s.querySelector('[data-stat="leader"] dd').textContent === %q`,
		platform, p1.Addr, platform, "platform1 ("+p1.Addr+")"))
	b.waitFor(time.Second, "the live stream", `document.getElementById("conn").dataset.conn === "live"`)
	b.eval(`window.sameDocument = "yes"`)

	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	b.waitFor(5*time.Second, "platform2 shown as the leader", fmt.Sprintf(
		`%s.dataset.leader === %q && %s.querySelector('tr[data-addr=%q] .badge.leader').hidden === false`,
		platform, p2.Addr, platform, p2.Addr))
	b.waitFor(time.Second, "the leader change in the event log", `document.querySelector('#log tr[data-kind="leader_changed"]') !== null`)

	cx1Row := fmt.Sprintf(`[data-pool="cxserver"] tr[data-addr=%q]`, cx1.Addr)
	if got := b.eval(`document.querySelector(` + jsString(cx1Row+" strong") + `).textContent`); got != evilName {
		t.Errorf("cx1's name shows as %q; want the text %q", got, evilName)
	}
	if got := b.eval(`String(document.querySelectorAll("#pools img").length) + " " + document.title`); got != "0 fairlead" {
		t.Errorf("a server's name became markup (img elements, title): %q", got)
	}

	// Without the token, the action is refused and the page says why.
	drain := chromedp.CSS(cx1Row + ` button[data-action="drain"]`)
	b.do("click Drain without the token", chromedp.Click(drain))
	b.waitFor(5*time.Second, "the refusal shown", `document.getElementById("msg").textContent.includes("401")`)
	if ss := mustServerStatus(t, l, "cxserver", cx1.Addr); ss.AdminState != "ready" {
		t.Fatalf("without the token cx1 is %q; want ready", ss.AdminState)
	}

	// With it (the page then reads the stream with fetch, to send it there too), Drain drains.
	b.do("save the token", chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("saveToken")))
	b.waitFor(5*time.Second, "the stream read with the token",
		`document.getElementById("conn").dataset.transport === "fetch" && document.getElementById("conn").dataset.conn === "live"`)
	b.do("click Drain", chromedp.Click(drain))
	testkit.Eventually(t, "cx1 drained", 5*time.Second, func() bool {
		ss := mustServerStatus(t, l, "cxserver", cx1.Addr)
		return ss.AdminState == "drain" && !ss.Available
	})
	b.waitFor(5*time.Second, "cx1 shown draining", fmt.Sprintf(
		`document.querySelector(%s).dataset.state === "drain" && document.querySelector('#log tr[data-kind="admin_action"]') !== null`,
		jsString(cx1Row)))

	// The stream read with fetch follows the next leader change too, still without a reload.
	mustSetState(t, p2, sim.Backup)
	mustSetState(t, p1, sim.Leader)
	b.waitFor(5*time.Second, "platform1 shown as the leader again", fmt.Sprintf(`%s.dataset.leader === %q`, platform, p1.Addr))
	if got := b.eval(`String(window.sameDocument)`); got != "yes" {
		t.Fatalf("the page was reloaded (marker %q)", got)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string { return fmt.Sprintf("%q", s) }

// Without a browser: the page is one document that loads nothing from elsewhere, and only its own
// script may run.
func TestTheStatusPageIsOneDocumentThatLoadsNothingFromElsewhere(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	resp, err := testClient.Get("http://" + l.AdminAddr() + "/")
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

// The page shows each relay route: its upstream server and sessions, and its topics, and follows a
// failover to the backup without reloading.
func TestTheStatusPageShowsARelayAndFollowsItsFailover(t *testing.T) {
	c := testkit.StartRelaySim(t, 2)
	primary, backup := c.Configs[0], c.Configs[1]
	l, _ := startLB(t, openRelayFiles(t, testkit.ConfigAddrs(c), []string{"inventory/dev", "payments/prod"}, ""))

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := openBrowser(t, ctx)
	relay := `document.querySelector('[data-relay="appconfig"]')`
	b.do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.waitFor(5*time.Second, "the relay on its primary with two sessions", fmt.Sprintf(
		`%s?.dataset.upstream === %q && %s.dataset.sessions === "2" && %s.querySelectorAll('tbody tr[data-topic]').length === 2`,
		relay, primary.Addr, relay, relay))
	primary.Stop()
	b.waitFor(5*time.Second, "the relay on its backup", fmt.Sprintf(
		`%s?.dataset.upstream === %q && %s.textContent.includes("serving backup")`, relay, backup.Addr, relay))
}

// An App Configuration relay shows its instance and its IAM tokens.
func TestTheStatusPageShowsAnAppConfigurationRelaysInstanceAndTokens(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := openBrowser(t, ctx)
	relay := `document.querySelector('[data-relay="ibm"]')`
	b.do("open the status page", chromedp.Navigate("http://"+e.l.AdminAddr()+"/"))
	b.waitFor(5*time.Second, "the relay's instance and its token", fmt.Sprintf(
		`%s?.textContent.includes("App Configuration %s") && %s.querySelector('[data-stat="iam"] dd')?.textContent === "1"`,
		relay, acGUID, relay))
}

// A pool with new_tunnels_per_second shows its admission rate; a server back under slow_start shows
// its ramp.
func TestTheStatusPageShowsAPoolsAdmissionRateAndAServerRampingUp(t *testing.T) {
	c := startCluster(t, 1, 2)
	cx1 := c.Connections[0]
	l, _ := startLB(t, cxConfig(c, "[pools.cxserver]\nnew_tunnels_per_second = 5\nslow_start = \"30s\"\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := openBrowser(t, ctx)
	pool := `document.querySelector('[data-pool="cxserver"]')`
	b.do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.waitFor(5*time.Second, "the pool's admission rate", fmt.Sprintf(
		`%s?.querySelector('[data-stat="admission"] dd')?.textContent.startsWith("5/s per server")`, pool))
	if err := cx1.Kill(); err != nil {
		t.Fatal(err)
	}
	row := fmt.Sprintf(`%s?.querySelector('tr[data-addr=%q]')`, pool, cx1.Addr)
	b.waitFor(10*time.Second, "cx1 down", row+`?.dataset.state === "down"`)
	if err := cx1.Restart(); err != nil {
		t.Fatal(err)
	}
	b.waitFor(10*time.Second, "cx1 up and ramping", row+`?.dataset.state === "up" && `+row+`.textContent.includes("(ramping ")`)
}

// Issue 36: a hung leader stayed green ("up", "200 2.6 s ago") for ~20 s while requests waited on it.
// While it is still the leader, its row says what is known, in amber: its requests in flight and how
// long none of them has ended, and its check's probe without an answer; /api/status carries both.
func TestAHungLeadersRowSaysItsRequestsWaitAndItsProbeIsOverdueWhileItIsStillTheLeader(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1 := c.Platforms[0]
	// A 3 s check timeout with fall 3: the hung leader keeps its term for 9 s or more, time enough to
	// see it; response_timeout ends the request that waits on it before the test's end.
	l, _ := startLB(t, platformConfig(c, `response_timeout = "8s"`, `timeout = "3s"`))

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := openBrowser(t, ctx)
	row := fmt.Sprintf(`document.querySelector('[data-pool="platform"] tr[data-addr=%q]')`, p1.Addr)
	b.do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.waitFor(5*time.Second, "platform1 the leader, nothing waiting", row+`?.dataset.leader === "true" && `+row+`.dataset.waiting === "false"`)

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

	b.waitFor(5*time.Second, "the row's requests waiting and its probe overdue, in amber, the leader still up", row+`.dataset.state === "up" && `+
		row+`.dataset.leader === "true" && `+row+`.dataset.waiting === "true" && `+
		row+`.querySelector(".waited").textContent.startsWith(" · waiting ") && `+row+`.querySelector("td.sev-warn .waited") !== null && `+
		row+`.querySelector("span.sev-warn")?.textContent === "no answer to the probe sent"`)
}

// Issue 36: "pool down" and "leader changed → none" had grey and blue badges while a routine "server
// down" was red. Each event carries its severity (/events, /api/status) and the page colours its badge
// by it: an outage red, a loss that still serves amber, a recovery green.
func TestTheEventLogColoursEachEventBySeverity(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, "", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := openBrowser(t, ctx)
	b.do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.waitFor(5*time.Second, "the live stream", `document.getElementById("conn").dataset.conn === "live"`)

	// The standby dies (a loss that still serves), then the leader steps down (an outage), then it
	// leads again (a recovery).
	mustSetState(t, p2, sim.Dead)
	testkit.Eventually(t, "platform2 down", 10*time.Second, func() bool { return mustServerStatus(t, l, "platform", p2.Addr).State == "down" })
	mustSetState(t, p1, sim.Backup)
	testkit.Eventually(t, "no leader", 10*time.Second, func() bool { return poolLeader(l, "platform") == "" })
	mustSetState(t, p1, sim.Leader)
	testkit.Eventually(t, "platform1 leads again", 10*time.Second, func() bool { return poolLeader(l, "platform") == p1.Addr })

	// row finds a line of the log: its kind, its server, its severity and its badge's class.
	row := func(kind, server, severity string) string {
		return fmt.Sprintf(`Array.from(document.querySelectorAll('#log tr[data-kind=%q]')).some((r) => r.dataset.severity === %q && `+
			`r.querySelector(".badge").classList.contains(%q) && r.cells[3].textContent.startsWith(%q))`, kind, severity, "sev-"+severity, server)
	}
	for _, w := range []struct{ kind, server, severity string }{
		{"server_down", p2.Addr, "warn"},
		{"leader_changed", "none (was " + p1.Addr + ")", "outage"},
		{"pool_down", "", "outage"},
		{"leader_changed", p1.Addr + " (was none)", "ok"},
		{"pool_up", "", "ok"},
	} {
		b.waitFor(5*time.Second, w.kind+" "+w.server+" coloured "+w.severity, row(w.kind, w.server, w.severity))
	}
	// The colours differ: an outage is not a loss that still serves, nor a recovery.
	colour := func(sev string) string {
		return b.eval(fmt.Sprintf(`getComputedStyle(document.querySelector('#log tr[data-severity=%q] .badge')).color`, sev))
	}
	if outage, warn, ok := colour("outage"), colour("warn"), colour("ok"); outage == warn || warn == ok || outage == ok {
		t.Errorf("badge colours: outage %s, warn %s, ok %s; want three colours", outage, warn, ok)
	}
	// /api/status carries the severity as /events does.
	var downs []string
	for _, e := range l.Status().Events {
		if e.Kind == "pool_down" || e.Kind == "server_down" {
			downs = append(downs, e.Kind+" "+e.Severity)
		}
	}
	if got := strings.Join(downs, ", "); got != "server_down warn, pool_down outage" {
		t.Errorf("/api/status events: %s; want server_down warn, pool_down outage", got)
	}
}

// Issue 36: Requests/s read 0.00 for the first 2 s of a page (until it had two snapshots to compare),
// and the chart's legend said "no errors" while Errors/s showed errors (the legend looked only at the
// complete steps of the hour). The first paint draws both rates from the history the snapshot carries,
// and the legend names the errors whenever Errors/s has some.
func TestTheStatusPagesFirstPaintShowsTheRatesOfTheHistoryAndItsLegendAgreesWithErrorsPerSecond(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, `queue_timeout = "200ms"`, ""))
	for range 20 {
		if code, _ := get(t, l, "/"); code != 200 {
			t.Fatalf("got %d, want 200 from the leader", code)
		}
	}
	// No leader: three requests get unavailable_status, fairlead's own errors.
	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Backup)
	testkit.Eventually(t, "no leader", 10*time.Second, func() bool { return poolLeader(l, "platform") == "" })
	// The errors fall early in a rate step (admin.RateStep, aligned on the clock), so that the page most
	// likely opens while that step is still the current one, where the legend missed them.
	if left := time.Until(time.Now().Truncate(admin.RateStep).Add(admin.RateStep)); left < 7*time.Second {
		time.Sleep(left)
	}
	for range 3 {
		if code, _ := get(t, l, "/"); code != 503 {
			t.Fatalf("got %d without a leader, want 503", code)
		}
	}
	testkit.Eventually(t, "the 23 requests and 3 errors in the rate history", 5*time.Second, func() bool {
		var req, errs uint64
		for _, p := range l.Status().Pools {
			if p.Name == "platform" && p.Rates != nil {
				for i := range p.Rates.Requests {
					req, errs = req+p.Rates.Requests[i], errs+p.Rates.Errors[i]
				}
			}
		}
		return req == 23 && errs == 3
	})

	// Nothing more is sent: a page that waited for a second snapshot would show 0.00 for good.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	b := openBrowser(t, ctx)
	b.do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	pool := `document.querySelector('[data-pool="platform"]')`
	stat := func(k string) string {
		return fmt.Sprintf(`%s?.querySelector('[data-stat=%q] dd')?.textContent`, pool, k)
	}
	b.waitFor(5*time.Second, "the first snapshot with its rates and a legend naming the errors", fmt.Sprintf(
		`%s === "23" && %s !== "0.00" && %s !== "0.00" && %s.querySelector(".legend").textContent.includes("errors/s") && !%s.querySelector(".legend").textContent.includes("no errors")`,
		stat("requests"), stat("rps"), stat("eps"), pool, pool))
}
