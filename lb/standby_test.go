package lb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fairlead/fairlead/lb/admin"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
	"github.com/fairlead/fairlead/healthcheck/event"
)

// Issue 36: the leader serves, the other platform node dies: that is said (a server_down event and a
// WARN line, and fairlead_pool_redundancy_lost is 1 while it lasts), and said again when it comes back
// (server_up, the metric 0 again); the leader stays.
func TestADeadStandbyIsADownServerEventAndAWarnLineAndItsReturnAnUp(t *testing.T) {
	for _, death := range []sim.State{sim.Dead, sim.Hung} {
		t.Run(death.String(), func(t *testing.T) {
			c := startCluster(t, 2, 0)
			p1, p2 := c.Platforms[0], c.Platforms[1]
			l, logs := startLB(t, platformConfig(c, "", ""))
			rec := recordEvents(t, l)
			lost := func(v string) func() bool {
				return func() bool {
					return strings.Contains(scrapeMetrics(t, l), `fairlead_pool_redundancy_lost{pool="platform"} `+v+"\n")
				}
			}
			testkit.Eventually(t, "redundancy at rest", 5*time.Second, lost("0"))
			if _, by := get(t, l, "/"); by != p1.Name {
				t.Fatalf("served by %q, want %s", by, p1.Name)
			}
			if rec.count(event.ServerDown, p2.Addr) != 0 {
				t.Fatal("server_down of a healthy standby")
			}

			mustSetState(t, p2, death)
			testkit.Eventually(t, "server_down of the standby", 10*time.Second, func() bool {
				return rec.count(event.ServerDown, p2.Addr) == 1
			})
			line := logLine(logs, "level=WARN", p2.Addr+": server down", "kind=server_down")
			if line == "" {
				t.Fatalf("no WARN line of the standby's loss:\n%s", logs.all())
			}
			if strings.Contains(logs.all(), "fasthttp") {
				t.Errorf("the log names the HTTP library:\n%s", logs.all())
			}
			if l.Status().Pools[0].Leader != p1.Addr || rec.count(event.ServerDown, p1.Addr) != 0 {
				t.Fatal("the leader changed or went down with its standby")
			}
			testkit.Eventually(t, "redundancy lost", 10*time.Second, lost("1"))

			mustSetState(t, p2, sim.Backup)
			testkit.Eventually(t, "server_up of the standby", 10*time.Second, func() bool {
				return rec.count(event.ServerUp, p2.Addr) == 1
			})
			if logLine(logs, p2.Addr+": server up", "kind=server_up") == "" {
				t.Fatalf("no line of the standby's return:\n%s", logs.all())
			}
			if n := rec.count(event.ServerDown, p2.Addr); n != 1 {
				t.Fatalf("%d server_down events, want 1", n)
			}
			testkit.Eventually(t, "redundancy back", 10*time.Second, lost("0"))
		})
	}
}

// Issue 36: a standby lost is an amber alarm of its own (redundancy_lost, a warning: the pool serves)
// on /api/status and the page — in the header beside the red alarms' place and in the title — from
// the server_down event to the server_up; the row says down and the header counts it down.
func TestALostStandbyIsAnAmberAlarmOnTheStatusAndThePageUntilItReturns(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, "", ""))
	rec := recordEvents(t, l)
	alarms := func() []admin.Alarm { return l.Status().Alarms }
	testkit.Eventually(t, "the standby seen", 5*time.Second, func() bool {
		return mustServerStatus(t, l, "platform", p2.Addr).State == admin.StateStandby
	})
	if a := alarms(); len(a) != 0 {
		t.Fatalf("alarms at rest: %+v", a)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := browser.Open(t, ctx)
	b.Do("open the status page", chromedp.Navigate("http://"+l.AdminAddr()+"/"))
	b.WaitFor(5*time.Second, "the live page", `document.getElementById("conn").dataset.conn === "live" && document.getElementById("summary").textContent.includes("1 standby")`)
	if got := b.Eval(`String(document.getElementById("warning").hidden) + " " + document.getElementById("alarm").hidden + " " + document.title`); got != "true true fairlead" {
		t.Fatalf("at rest the page shows (warning hidden, alarm hidden, title) %q", got)
	}

	mustSetState(t, p2, sim.Dead)
	testkit.Eventually(t, "server_down of the standby", 10*time.Second, func() bool {
		return rec.count(event.ServerDown, p2.Addr) == 1
	})
	// From the event on, the row and the alarm say it.
	if ss := mustServerStatus(t, l, "platform", p2.Addr); ss.State != admin.StateDown {
		t.Fatalf("after server_down the standby is %q", ss.State)
	}
	a := alarms()
	if len(a) != 1 || a[0].Kind != admin.AlarmRedundancyLost || a[0].Severity != admin.SeverityWarning || a[0].Pool != "platform" || a[0].Since.IsZero() {
		t.Fatalf("alarms after the standby's loss: %+v", a)
	}
	if l.Status().Pools[0].Leader != p1.Addr {
		t.Fatal("the leader changed")
	}
	b.WaitFor(5*time.Second, "the amber alarm", `!document.getElementById("warning").hidden && document.getElementById("warning").textContent === "REDUNDANCY LOST: platform"`)
	row := fmt.Sprintf(`document.querySelector('[data-pool="platform"] tr[data-addr=%q]')`, p2.Addr)
	b.WaitFor(5*time.Second, "the row and the header", row+`.dataset.state === "down" && document.getElementById("summary").textContent.endsWith("1 of 2 servers serving, 1 down")`)
	if got := b.Eval(`String(document.getElementById("alarm").hidden) + " " + document.title`); got != "true REDUNDANCY LOST: platform — fairlead" {
		t.Errorf("during the loss (red alarm hidden, title): %q", got)
	}
	// Amber, not the red of the critical alarms.
	if got := b.Eval(`getComputedStyle(document.getElementById("warning")).backgroundColor + " / " + getComputedStyle(document.getElementById("alarm")).backgroundColor`); !strings.HasPrefix(got, "rgb(245, 158, 11) / ") && !strings.HasPrefix(got, "rgb(251, 191, 36) / ") {
		t.Errorf("the warning's colour (warning / alarm): %s, want amber", got)
	}

	mustSetState(t, p2, sim.Backup)
	testkit.Eventually(t, "server_up of the standby", 10*time.Second, func() bool {
		return rec.count(event.ServerUp, p2.Addr) == 1
	})
	if a := alarms(); len(a) != 0 {
		t.Fatalf("alarms after the standby's return: %+v", a)
	}
	b.WaitFor(5*time.Second, "the alarm gone", `document.getElementById("warning").hidden && document.title === "fairlead" && document.getElementById("summary").textContent.includes("1 standby")`)
}

// A pool of any kind down to one server has lost its redundancy; down to none it is a red no_server.
func TestAConnectionPoolDownToOneServerIsARedundancyLostAlarm(t *testing.T) {
	c := startCluster(t, 2, 2)
	cx1, cx2 := c.Connections[0], c.Connections[1]
	l, _ := startLB(t, cxConfig(c, ""))
	cxAlarm := func() string {
		for _, a := range l.Status().Alarms {
			if a.Pool == "cxserver" {
				return a.Kind + "/" + a.Severity
			}
		}
		return ""
	}
	testkit.Eventually(t, "both connection servers up", 5*time.Second, func() bool {
		return mustServerStatus(t, l, "cxserver", cx1.Addr).State == admin.StateUp && mustServerStatus(t, l, "cxserver", cx2.Addr).State == admin.StateUp
	})
	if got := cxAlarm(); got != "" {
		t.Fatalf("alarm at rest: %s", got)
	}
	cx1.SetHealthy(false)
	testkit.Eventually(t, "redundancy lost", 10*time.Second, func() bool { return cxAlarm() == "redundancy_lost/warning" })
	cx2.SetHealthy(false)
	testkit.Eventually(t, "no server", 10*time.Second, func() bool { return cxAlarm() == "no_server/critical" })
	cx1.SetHealthy(true)
	cx2.SetHealthy(true)
	testkit.Eventually(t, "all well", 10*time.Second, func() bool { return cxAlarm() == "" })
}

// Issue 36: every LeaderCheck answered 401: the ERROR says the credentials are refused, not "2 down".
func TestEveryLeaderCheckAnswering401SaysTheCredentialsAreRefused(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, logs := startLB(t, platformConfig(c, `queue_timeout = "200ms"`, `credentials = "YWRtaW46d3Jvbmc="`))
	get(t, l, "/")
	testkit.Eventually(t, "the pool down line", 5*time.Second, func() bool {
		return logLine(logs, "level=ERROR", "kind=pool_down") != ""
	})
	line := logLine(logs, "level=ERROR", "kind=pool_down")
	if !strings.Contains(line, "credentials are refused") || strings.Contains(line, "2 down") {
		t.Fatalf("pool down line %q, want the credentials refused", line)
	}
	if logLine(logs, "no leader after the first round", "credentials are refused") == "" {
		t.Fatalf("the first round's line does not say the credentials are refused:\n%s", logs.all())
	}
	// Refused credentials are never logged, encoded or not.
	if all := logs.all(); strings.Contains(all, "YWRtaW46d3Jvbmc") || strings.Contains(all, "admin:wrong") {
		t.Fatalf("the log holds the credentials:\n%s", all)
	}
}
