package lb

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

func TestTrafficGoesOnlyToTheLeaderAndNeverToBackupsAnswering400_401_503(t *testing.T) {
	c := startCluster(t, 4, 0)
	p1, p2, p3, p4 := c.Platforms[0], c.Platforms[1], c.Platforms[2], c.Platforms[3]
	mustSetState(t, p1, sim.Backup)
	p1.SetLeaderCheckStatus(400)
	mustSetState(t, p2, sim.Leader)
	mustSetState(t, p3, sim.Backup)
	p3.SetLeaderCheckStatus(401)
	mustSetState(t, p4, sim.Backup) // 503
	l, _ := startLB(t, platformConfig(c, "", ""))

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
}

func TestLeaderSwitchesOnTheThirdNon200AnswerNotTheSecond(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	// A slower fast_interval leaves time to look between two answers.
	l, _ := startLB(t, platformConfig(c, "", `fast_interval = "400ms"`))
	if _, by := get(t, l, "/"); by != p1.Name {
		t.Fatalf("served by %q, want %s", by, p1.Name)
	}

	// platform1 steps down (its LeaderCheck answers 503, ordinary requests still work), platform2 leads.
	flip := time.Now()
	p1.SetLeaderCheckStatus(503)
	mustSetState(t, p2, sim.Leader)

	testkit.Eventually(t, "two failed LeaderChecks", 5*time.Second, func() bool { return failedProbesSince(p1, flip) >= 2 })
	if n := failedProbesSince(p1, flip); n == 2 {
		_, by := get(t, l, "/")
		if failedProbesSince(p1, flip) == 2 && by != p1.Name {
			t.Fatalf("after two non-200 answers traffic went to %q, want the old leader %s", by, p1.Name)
		}
	}
	testkit.Eventually(t, "traffic on platform2", 5*time.Second, func() bool { _, by := get(t, l, "/"); return by == p2.Name })
	if n := failedProbesSince(p1, flip); n < 3 {
		t.Fatalf("switched after %d non-200 answers, want 3", n)
	}
}

func TestHungLeaderCountsAsNon200ByTimeout(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, logs := startLB(t, platformConfig(c, `response_timeout = "300ms"`, ""))
	mustSetState(t, p1, sim.Hung)
	mustSetState(t, p2, sim.Leader)
	testkit.Eventually(t, "platform2 to lead", 5*time.Second, func() bool { return l.Status().Pools[0].Leader == p2.Addr })
	st := l.Status().Pools[0].Servers[0].Check
	if st.Fails < 3 || !strings.Contains(st.LastError, "timed out after") || strings.Contains(st.LastError, "fasthttp") {
		t.Fatalf("hung server check state %+v, want >= 3 fails by timeout", st)
	}
	if code, by := get(t, l, "/"); code != 200 || by != p2.Name {
		t.Fatalf("got %d from %q, want 200 from platform2", code, by)
	}
	if !strings.Contains(logs.all(), "leader is now "+p2.Addr) {
		t.Errorf("no log of the leader change:\n%s", logs.all())
	}
}

func TestNoLeaderGives503AfterQueueTimeoutAndTrafficResumesWhenOneAppears(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	mustSetState(t, p1, sim.Backup)
	l, _ := startLB(t, platformConfig(c, `queue_timeout = "500ms"`, ""))

	start := time.Now()
	resp, err := testClient.Get("http://" + l.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d Retry-After=%q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if waited := time.Since(start); waited < 450*time.Millisecond {
		t.Fatalf("503 after %s, want after queue_timeout (500ms)", waited)
	}

	// A request waiting in the queue is served as soon as a leader appears.
	done := make(chan string, 1)
	go func() {
		resp, err := testClient.Get("http://" + l.Addr() + "/")
		if err != nil {
			done <- err.Error()
			return
		}
		resp.Body.Close()
		done <- resp.Status + " " + resp.Header.Get("X-Served-By")
	}()
	time.Sleep(50 * time.Millisecond)
	mustSetState(t, p2, sim.Leader)
	if got := <-done; got != "200 OK "+p2.Name {
		t.Fatalf("queued request got %q, want 200 from platform2", got)
	}
}

func TestSplitBrainKeepsTheCurrentLeaderAndIsCounted(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, logs := startLB(t, platformConfig(c, "", ""))
	mustSetState(t, p2, sim.Leader) // both answer 200 now
	since := time.Now()
	testkit.Eventually(t, "several probes of platform2", 3*time.Second, func() bool {
		n := 0
		for _, pr := range p2.Probes() {
			if pr.At.After(since) && pr.Status == 200 {
				n++
			}
		}
		return n >= 4
	})
	for i := 0; i < 20; i++ {
		if _, by := get(t, l, "/"); by != p1.Name {
			t.Fatalf("split brain moved traffic to %q", by)
		}
	}
	if p2.Requests() != 0 {
		t.Fatalf("platform2 got %d requests during split brain", p2.Requests())
	}
	if n := l.Status().Pools[0].SplitBrains; n == 0 {
		t.Fatal("split brain not counted")
	}
	if !strings.Contains(logs.all(), "split brain") {
		t.Fatal("split brain not logged")
	}
}

func TestLeaderCheckSendsTheAuthorizationHeaderExactlyAndWrongCredentialsGiveNoLeader(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, _ := startLB(t, platformConfig(c, "", ""))
	get(t, l, "/")
	for _, p := range c.Platforms {
		probes := p.Probes()
		if len(probes) == 0 {
			t.Fatalf("%s was never probed", p.Name)
		}
		for _, pr := range probes {
			if pr.Authorization != "Basic YWRtaW46YWRtaW4=" {
				t.Fatalf("%s got Authorization %q", p.Name, pr.Authorization)
			}
		}
	}

	// With other credentials every server answers 401: nobody leads, nothing is forwarded.
	c2 := startCluster(t, 2, 0)
	cfg := platformConfig(c2, `queue_timeout = "200ms"`, `credentials = "YWRtaW46d3Jvbmc="`)
	l2, logs := startLB(t, cfg)
	if code, _ := get(t, l2, "/"); code != 503 {
		t.Fatalf("got %d with wrong credentials, want 503", code)
	}
	if n := c2.Platforms[0].Requests(); n != 0 {
		t.Fatalf("leader got %d requests though fairlead could not authenticate", n)
	}
	if strings.Contains(logs.all(), "YWRtaW46d3Jvbmc=") || strings.Contains(logs.all(), "admin:wrong") {
		t.Fatal("credentials appear in the log")
	}
}

// The exact pace (every wait within [interval, interval_max], jittered) is tested on a fake clock in
// healthcheck; here, over real sockets, probes keep coming, never closer together than interval (a busy
// machine can only delay them), and not all equally spaced.
func TestProbeSpacingStaysWithinIntervalAndIntervalMax(t *testing.T) {
	c := startCluster(t, 2, 0)
	startLB(t, platformConfig(c, "", `interval = "100ms"`+"\n"+`interval_max = "200ms"`))
	for _, p := range c.Platforms {
		testkit.Eventually(t, p.Name+" to get 10 probes", 20*time.Second, func() bool { return len(p.Probes()) >= 10 })
	}
	for _, p := range c.Platforms {
		probes := p.Probes()
		// Skip the first round: the first probe goes at once and the next ones follow the pace.
		var lo, hi time.Duration = time.Hour, 0
		for i := 2; i < len(probes); i++ {
			d := probes[i].At.Sub(probes[i-1].At)
			lo, hi = min(lo, d), max(hi, d)
			// 100ms less 15ms for timestamps taken in the server handler rather than at the send.
			if d < 85*time.Millisecond {
				t.Errorf("%s: probes %d and %d are %s apart, want at least interval (100ms)", p.Name, i-1, i, d)
			}
		}
		if hi-lo < 10*time.Millisecond {
			t.Errorf("%s: spacing %s..%s has no jitter", p.Name, lo, hi)
		}
	}
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
			l, _ := startLB(t, platformConfig(c, "", ""))

			var ok, failed atomic.Int64
			var firstFail atomic.Value
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						resp, err := testClient.Get("http://" + l.Addr() + "/Thingworx/Things")
						if err != nil {
							failed.Add(1)
							firstFail.CompareAndSwap(nil, err.Error())
							continue
						}
						io.Copy(io.Discard, resp.Body) //nolint:errcheck
						resp.Body.Close()
						if resp.StatusCode != 200 {
							failed.Add(1)
							firstFail.CompareAndSwap(nil, resp.Status)
						} else {
							ok.Add(1)
						}
					}
				}()
			}
			time.Sleep(200 * time.Millisecond)
			mustSetState(t, p1, tc.old)
			mustSetState(t, p2, sim.Leader)
			testkit.Eventually(t, "platform2 to serve", 5*time.Second, func() bool { return p2.Requests() > 50 })
			close(stop)
			wg.Wait()
			if failed.Load() != 0 {
				t.Fatalf("%d of %d requests failed (first: %v)", failed.Load(), failed.Load()+ok.Load(), firstFail.Load())
			}
			if r := l.Status().Pools[0].Retries; r == 0 {
				t.Fatal("no request was held and retried: the failover was not exercised")
			}
		})
	}
}

func TestNonIdempotentRequestGets502WhenItReachedTheServerAnd504OnTimeout(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1 := c.Platforms[0]
	l, _ := startLB(t, platformConfig(c, `response_timeout = "1s"`, ""))

	// The POST reaches platform1, which dies before answering: it must not be replayed.
	done := make(chan int, 1)
	go func() {
		resp, err := testClient.Post("http://"+l.Addr()+"/slow?delay=2s", "text/plain", strings.NewReader("x"))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	testkit.Eventually(t, "the POST to reach platform1", 2*time.Second, func() bool { return p1.Requests() == 1 })
	mustSetState(t, p1, sim.Dead)
	if code := <-done; code != 502 {
		t.Fatalf("POST cut by the server got %d, want 502", code)
	}
	if n := p1.Requests(); n != 1 {
		t.Fatalf("POST reached the server %d times, want once", n)
	}
	mustSetState(t, p1, sim.Leader)

	if code, _ := get(t, l, "/slow?delay=3s"); code != 504 {
		t.Fatalf("silent server: got %d, want 504", code)
	}
}

func TestA503ToANonIdempotentRequestIsRelayedNotRetriedButTriggersProbes(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	// Slow checks: only the live 503 can make fairlead probe before a second has passed.
	l, _ := startLB(t, platformConfig(c, "", `interval = "5s"`+"\n"+`interval_max = "5s"`+"\n"+`fast_interval = "5s"`))
	mustSetState(t, p1, sim.Standby)
	mustSetState(t, p2, sim.Leader)
	before := len(p2.Probes())
	resp, err := testClient.Post("http://"+l.Addr()+"/Thingworx/Things/x/Services/Do", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("X-Served-By") != p1.Name {
		t.Fatalf("POST got %d from %q, want the leader's own 503", resp.StatusCode, resp.Header.Get("X-Served-By"))
	}
	if p2.Requests() != 0 {
		t.Fatal("the POST was replayed on another server")
	}
	testkit.Eventually(t, "an immediate probe of every server", time.Second, func() bool { return len(p2.Probes()) > before })
}
