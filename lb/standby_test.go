package lb

import (
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
)

// count counts the events of kind about server.
func (el *eventLog) count(kind event.Kind, server string) int {
	el.mu.Lock()
	defer el.mu.Unlock()
	n := 0
	for _, e := range el.ev {
		if e.Kind == kind && e.Server == server {
			n++
		}
	}
	return n
}

// Issue 36: the leader serves, the other platform node dies: that is said (a server_down event and a
// WARN line), and said again when it comes back (server_up); the leader stays.
func TestADeadStandbyIsADownServerEventAndAWarnLineAndItsReturnAnUp(t *testing.T) {
	for _, death := range []sim.State{sim.Dead, sim.Hung} {
		t.Run(death.String(), func(t *testing.T) {
			c := startCluster(t, 2, 0)
			p1, p2 := c.Platforms[0], c.Platforms[1]
			l, logs := startLB(t, platformConfig(c, "", ""))
			rec := recordEvents(t, l)
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
		})
	}
}

// Standbys answering 400, 401 or 503 are there to take over: no server_down.
func TestStandbysAnswering400_401_503AreNotDown(t *testing.T) {
	c := startCluster(t, 4, 0)
	p1, p3, p4 := c.Platforms[0], c.Platforms[2], c.Platforms[3]
	mustSetState(t, p1, sim.Backup)
	p1.SetLeaderCheckStatus(400)
	mustSetState(t, c.Platforms[1], sim.Leader)
	mustSetState(t, p3, sim.Backup)
	p3.SetLeaderCheckStatus(401)
	mustSetState(t, p4, sim.Backup)
	l, logs := startLB(t, platformConfig(c, "", ""))
	rec := recordEvents(t, l)
	since := time.Now()
	testkit.Eventually(t, "four probes of every server", 10*time.Second, func() bool {
		for _, p := range c.Platforms {
			n := 0
			for _, pr := range p.Probes() {
				if pr.At.After(since) {
					n++
				}
			}
			if n < 4 {
				return false
			}
		}
		return true
	})
	for _, p := range c.Platforms {
		if rec.count(event.ServerDown, p.Addr) != 0 {
			t.Fatalf("server_down of %s:\n%s", p.Name, logs.all())
		}
	}
	if strings.Contains(logs.all(), "server down") {
		t.Fatalf("a server down line:\n%s", logs.all())
	}
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
}

// Issue 36: a leader pool whose standby died has lost its redundancy: fairlead_pool_redundancy_lost is
// 1 while it lasts and 0 again once the standby is back.
func TestALostStandbyIsARedundancyLostMetricUntilItReturns(t *testing.T) {
	c := startCluster(t, 2, 0)
	p2 := c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, "", ""))
	lost := func(v string) func() bool {
		return func() bool {
			return strings.Contains(scrapeMetrics(t, l), `fairlead_pool_redundancy_lost{pool="platform"} `+v+"\n")
		}
	}
	testkit.Eventually(t, "redundancy at rest", 5*time.Second, lost("0"))
	mustSetState(t, p2, sim.Dead)
	testkit.Eventually(t, "redundancy lost", 10*time.Second, lost("1"))
	mustSetState(t, p2, sim.Backup)
	testkit.Eventually(t, "redundancy back", 10*time.Second, lost("0"))
}
