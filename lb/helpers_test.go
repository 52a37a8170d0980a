package lb

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
)

// startCluster starts a simulated cluster of n platform servers (platform1 leader) and m connection
// servers, closed at the end of the test.
func startCluster(t testing.TB, n, m int) *sim.Cluster {
	t.Helper()
	return testkit.StartCluster(t, sim.Options{Platforms: n, Connections: m, Logf: func(string, ...any) {}})
}

// fastChecks sets leader-check settings short enough for tests in the check table: a switch takes three
// fast intervals.
func fastChecks(check *testkit.Table) *testkit.Table {
	return check.Set("interval", 150*time.Millisecond).Set("interval_max", 200*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("fall", 3)
}

// listenAnywhere sets the front end and the admin listeners of conf to ports of the kernel's choosing.
func listenAnywhere(conf *testkit.Config) {
	conf.Table("frontend").Set("listen", "127.0.0.1:0")
	conf.Table("admin").Set("listen", "127.0.0.1:0")
}

// platformConfig is a config with one leader pool over the cluster's platform servers. extraPool and
// extraCheck override keys of the [pools.platform] and [pools.platform.check] tables: they go into a
// second file, merged over the first as conf.d files are.
func platformConfig(c *sim.Cluster, extraPool, extraCheck string) map[string]string {
	var base testkit.Config
	listenAnywhere(&base)
	base.Table("pools.platform").Set("balance", "leader").Set("servers", testkit.PlatformAddrs(c)).
		Set("queue_timeout", 2*time.Second)
	fastChecks(base.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials))
	base.Array("routes").Set("pool", "platform")
	override := fmt.Sprintf("[pools.platform]\n%s\n[pools.platform.check]\n%s\n", extraPool, extraCheck)
	return map[string]string{"10-base.toml": base.String(), "20-override.toml": override}
}

// minimalConfig is the smallest valid config (as lb/config's tests have it).
const minimalConfig = `
[pools.platform]
servers = ["127.0.0.1:9081", "127.0.0.1:9082"]
[[routes]]
pool = "platform"
`

// logSink collects log lines so tests can assert on them (and keep the output quiet).
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// startLB loads the config files and starts fairlead on them, stopped at the end of the test.
func startLB(t testing.TB, files map[string]string) (*LB, *logSink) {
	t.Helper()
	return startLBDir(t, testkit.WriteFiles(t, files))
}

// startLBDir is startLB on a config directory the test keeps (to edit it and reload).
func startLBDir(t testing.TB, dir string) (*LB, *logSink) {
	t.Helper()
	return startLBOpts(t, dir, Options{})
}

// startLBOpts is startLBDir with options (the log is the test's).
func startLBOpts(t testing.TB, dir string, o Options) (*LB, *logSink) {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	o.Logf = logs.logf
	l := New(cfg, o)
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if t.Failed() {
			t.Logf("fairlead log:\n%s", logs.all())
		}
	})
	return l, logs
}

var testClient = &http.Client{Timeout: 10 * time.Second}

// get sends GET path to fairlead and returns the status and the X-Served-By header.
func get(t *testing.T, l *LB, path string) (int, string) {
	t.Helper()
	resp, err := testClient.Get("http://" + l.Addr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	return resp.StatusCode, resp.Header.Get("X-Served-By")
}

// failedProbesSince counts the LeaderCheck answers other than 200 that p gave after since.
func failedProbesSince(p *sim.Platform, since time.Time) int {
	n := 0
	for _, pr := range p.Probes() {
		if pr.At.After(since) && pr.Status != 200 {
			n++
		}
	}
	return n
}

func mustSetState(t *testing.T, p *sim.Platform, s sim.State) {
	t.Helper()
	if err := p.SetState(s); err != nil {
		t.Fatal(err)
	}
}

// serverAvailable reports whether /status shows the server at addr of pool as available.
func serverAvailable(l *LB, pool, addr string) bool {
	for _, p := range l.Status().Pools {
		if p.Name != pool {
			continue
		}
		for _, s := range p.Servers {
			if s.Addr == addr {
				return s.Available
			}
		}
	}
	return false
}

// logLine returns the first log line containing every part, or "".
func logLine(logs *logSink, parts ...string) string {
	for _, line := range strings.Split(logs.all(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line
		}
	}
	return ""
}
