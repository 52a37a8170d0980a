package lb

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
)

// The election's rules (the third non-200 answer switches, a hung leader counts by timeout, split brain
// keeps the leader, the credentials sent exactly, the steady pace) are tested in healthcheck; here, that
// traffic follows the elected leader and nothing else, through a split brain too. Standbys answering
// 400, 401 or 503 are there to take over: no server_down, and the status says standby.
func TestTrafficGoesOnlyToTheLeaderNeverToStandbysAnswering400_401_503WhichAreNotDownAndStaysThroughASplitBrain(t *testing.T) {
	c := startCluster(t, 4, 0)
	p1, p2, p3, p4 := c.Platforms[0], c.Platforms[1], c.Platforms[2], c.Platforms[3]
	mustSetState(t, p1, sim.Backup)
	p1.SetLeaderCheckStatus(400)
	mustSetState(t, p2, sim.Leader)
	mustSetState(t, p3, sim.Backup)
	p3.SetLeaderCheckStatus(401)
	mustSetState(t, p4, sim.Backup) // 503
	l, logs := startLB(t, platformConfig(c, "", ""))
	rec := recordEvents(t, l)
	since := time.Now()

	for i := 0; i < 50; i++ {
		if code, by := get(t, l, "/Thingworx/Things"); code != 200 || by != p2.Name {
			t.Fatalf("request %d: got %d from %q, want 200 from %s", i, code, by, p2.Name)
		}
	}
	for _, b := range []*sim.Platform{p1, p3, p4} {
		if n := b.Requests(); n != 0 {
			t.Errorf("backup %s got %d requests, want 0", b.Name, n)
		}
	}
	testkit.Eventually(t, "four probes of every server", 10*time.Second, func() bool {
		for _, p := range c.Platforms {
			if probesSince(p, since, true)+probesSince(p, since, false) < 4 {
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
	// The row, the metrics and the alarms say the same: standbys (before, 400 and 401 showed down).
	st := l.Status()
	for _, ss := range st.Pools[0].Servers {
		if want := map[bool]string{true: admin.StateUp, false: admin.StateStandby}[ss.Addr == p2.Addr]; ss.State != want {
			t.Errorf("%s (LeaderCheck answers %d) is %q, want %q", ss.Addr, ss.Check.LastStatus, ss.State, want)
		}
	}
	if len(st.Alarms) != 0 {
		t.Errorf("alarms %+v with three standbys", st.Alarms)
	}
	if m := scrapeMetrics(t, l); !strings.Contains(m, `fairlead_pool_redundancy_lost{pool="platform"} 0`) {
		t.Error("fairlead_pool_redundancy_lost is not 0 with three standbys")
	}

	// platform4 answers 200 too: split brain, counted and logged; the current leader keeps the traffic.
	mustSetState(t, p4, sim.Leader)
	testkit.Eventually(t, "the split brain counted", 5*time.Second, func() bool { return l.Status().Pools[0].SplitBrains > 0 })
	for i := 0; i < 20; i++ {
		if code, by := get(t, l, "/Thingworx/Things"); code != 200 || by != p2.Name {
			t.Fatalf("split brain, request %d: got %d from %q, want 200 from %s", i, code, by, p2.Name)
		}
	}
	if n := p4.Requests(); n != 0 {
		t.Fatalf("%s got %d requests during the split brain", p4.Name, n)
	}
	if !strings.Contains(logs.all(), "split brain") {
		t.Fatal("split brain not logged")
	}
}

func TestNoLeaderGives503AfterQueueTimeoutAndTrafficResumesWhenOneAppears(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	mustSetState(t, p1, sim.Backup)
	l, _ := startLB(t, platformConfig(c, `queue_timeout = "500ms"`, ""))

	start := time.Now()
	if r := request(l, "GET", "/", ""); r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %s Retry-After=%q, want 503 with Retry-After", r, r.header.Get("Retry-After"))
	}
	if waited := time.Since(start); waited < 450*time.Millisecond {
		t.Fatalf("503 after %s, want after queue_timeout (500ms)", waited)
	}

	// A request waiting in the queue is served as soon as a leader appears.
	done := inBackground(l, "GET", "/", "")
	testkit.Eventually(t, "the request to wait in the queue", hang, func() bool { return poolStatus(t, l, "platform").Waiting == 1 })
	mustSetState(t, p2, sim.Leader)
	mustServe(t, "queued request", awaitReply(t, done), p2.Name)
}

func TestA64MiBUploadAndDownloadStreamThroughWithoutBeingHeld(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))

	const size = 64 << 20
	body := io.LimitReader(patternReader{}, size)
	req, _ := http.NewRequest("POST", "http://"+l.Addr()+"/Thingworx/FileRepositories/upload", body)
	req.ContentLength = size
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Body-Bytes") != "67108864" {
		t.Fatalf("upload: %d, X-Body-Bytes %q", resp.StatusCode, resp.Header.Get("X-Body-Bytes"))
	}

	resp, err = testClient.Get("http://" + l.Addr() + "/download?bytes=67108864")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	// Memory is measured on a real process in cmd/fairlead (TestLargeBodiesStreamWithBoundedRSS).
}

// patternReader yields an endless repeating pattern without allocating.
type patternReader struct{}

func (patternReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return len(b), nil
}

func TestFailoverLosesNoIdempotentRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  sim.State
	}{
		{"leader becomes a standby answering 503", sim.Standby},
		{"leader process dies", sim.Dead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 2, 0)
			p1, p2 := c.Platforms[0], c.Platforms[1]
			l, logs := startLB(t, platformConfig(c, "", ""))

			stop := make(chan struct{})
			wait := loadLoop(l, stop)
			time.Sleep(200 * time.Millisecond)
			mustSetState(t, p1, tc.old)
			mustSetState(t, p2, sim.Leader)
			testkit.Eventually(t, "platform2 to serve", 5*time.Second, func() bool { return p2.Requests() > 50 })
			close(stop)
			all := wait()
			for i, a := range all {
				if a.err != nil || a.status != 200 {
					t.Fatalf("request %d of %d failed: %s", i, len(all), a.reply)
				}
			}
			if r := l.Status().Pools[0].Retries; r == 0 {
				t.Fatal("no request was held and retried: the failover was not exercised")
			}
			if !strings.Contains(logs.all(), "leader is now "+p2.Addr) {
				t.Errorf("no log of the leader change:\n%s", logs.all())
			}
		})
	}
}

func TestNonIdempotentRequestGets502WhenItReachedTheServer(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1 := c.Platforms[0]
	l, _ := startLB(t, platformConfig(c, `response_timeout = "1s"`, ""))

	// The POST reaches platform1, which dies before answering: it must not be replayed.
	done := inBackground(l, "POST", "/slow?delay=2s", "x")
	testkit.Eventually(t, "the POST to reach platform1", 2*time.Second, func() bool { return p1.Requests() == 1 })
	mustSetState(t, p1, sim.Dead)
	if r := awaitReply(t, done); r.status != 502 {
		t.Fatalf("POST cut by the server got %s, want 502", r)
	}
	if n := p1.Requests(); n != 1 {
		t.Fatalf("POST reached the server %d times, want once", n)
	}
	// (A silent server's 504, the request sent once: proxy_test.go's TestProxyRelaysAServersAnswerAsAProxyMust.)
}

func TestA503ToANonIdempotentRequestIsRelayedNotRetriedButTriggersProbes(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	// Slow checks: only the live 503 can make fairlead probe before a second has passed.
	l, _ := startLB(t, platformConfig(c, "", `interval = "5s"`+"\n"+`interval_max = "5s"`+"\n"+`fast_interval = "5s"`))
	mustSetState(t, p1, sim.Standby)
	mustSetState(t, p2, sim.Leader)
	before := len(p2.Probes())
	if r := request(l, "POST", "/Thingworx/Things/x/Services/Do", "{}"); r.status != 503 || r.by != p1.Name {
		t.Fatalf("POST got %s, want the leader's own 503", r)
	}
	if p2.Requests() != 0 {
		t.Fatal("the POST was replayed on another server")
	}
	testkit.Eventually(t, "an immediate probe of every server", time.Second, func() bool { return len(p2.Probes()) > before })
}
