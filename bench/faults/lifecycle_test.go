package faults

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// Scenarios on fairlead itself: a reload and a restart under load.

// TestReloadUnderLoadFailsNothing: a config file changes (the platform pool's response_timeout and
// the connection servers' check interval, which gives each platform server a new connection pool and
// restarts the checks) and fairlead gets SIGHUP, several times under load with tunnels open: no
// request fails, no tunnel is lost, and every reload is counted (fairlead_config_reloads_total).
func TestReloadUnderLoadFailsNothing(t *testing.T) {
	const name = "reload"
	c := startCluster(t, sim.Options{})
	f := startFairlead(t, map[string]string{
		"05-cxserver.toml": cxPool(c),
		"10-platform.toml": clusterPool(c, testChecks),
	})
	ts := openTunnels(t, f.Addr, assetKeys("reload", pickN(50, 200)), false)
	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(500*time.Millisecond, 3*time.Second))

	reloads := pickN(3, 10)
	first := f.MetricInt("fairlead_config_reloads_total")
	var took time.Duration
	for i := range reloads {
		// Read before the write: the file watcher may apply the change before the SIGHUP does (which
		// then finds nothing changed); either way it is counted once at least.
		prev := f.MetricInt("fairlead_config_reloads_total")
		body := fmt.Sprintf("[pools.platform]\nresponse_timeout = \"%ds\"\n[pools.cxserver.check]\ninterval = \"%dms\"\n", 20+i%2*10, 100+i%2*50)
		if err := os.WriteFile(filepath.Join(f.Dir, "30-reload.toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := f.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, fmt.Sprintf("reload %d to be counted", i+1), 10*time.Second, func() bool {
			return f.MetricInt("fairlead_config_reloads_total") > prev
		})
		took = max(took, time.Since(t0))
		sleep(pick(500*time.Millisecond, 2*time.Second))
	}

	r := judge(name, stop(l), strict)
	lost := ts.echoAll()
	counted := f.MetricInt("fairlead_config_reloads_total") - first
	r.add("reloads=%d counted=%d slowest_reload=%s tunnels=%d tunnels_lost=%d", reloads, counted,
		took.Round(time.Millisecond), len(ts.list), lost)
	if lost > 0 {
		t.Errorf("%s: %d of %d tunnels lost across the reloads", name, lost, len(ts.list))
	}
	if ok := f.Metric("fairlead_config_last_reload_successful"); ok != "1" || f.MetricInt("fairlead_config_reload_failures_total") != 0 {
		t.Errorf("%s: last reload successful = %q, failures = %d", name, ok, f.MetricInt("fairlead_config_reload_failures_total"))
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}

// TestFastStartRestartKnowsLeaderAndPlacementsAtOnce: with [global] state_file and start = "fast",
// fairlead is stopped (SIGTERM) under load and a new process started on the same config. The gap
// (connections refused) is reported; once the new process listens, no request fails and none gets 503
// "no server available" (the leader is known at once from the state file), and the sticky placement of
// a set of assets is the same as before the restart. The assets were placed while cx1 was down, so all
// sit on cx2 where rendezvous hashing alone would put about half on cx1: only the state file keeps them.
func TestFastStartRestartKnowsLeaderAndPlacementsAtOnce(t *testing.T) {
	const name = "fast-restart"
	c := startCluster(t, sim.Options{})
	cx1 := c.Connection("cx1")
	state := filepath.Join(t.TempDir(), "fairlead.state")
	f := startFairlead(t, map[string]string{
		"01-global.toml":   fmt.Sprintf("[global]\nstate_file = %q\nstart = \"fast\"\n[frontend]\ndrain_timeout = \"5s\"\n", state),
		"05-cxserver.toml": cxPool(c),
		"10-platform.toml": clusterPool(c, testChecks),
	})

	// Place the assets while cx1 is down, then bring it back: they stay on cx2 (the sticky table).
	cx1.SetHealthy(false)
	testkit.Eventually(t, "cx1 to go down", 10*time.Second, func() bool { return !f.serverAvailable("cxserver", "cx1") })
	keys := assetKeys("fast-restart", pickN(40, 200))
	place(t, f.Addr, keys)
	cx1.SetHealthy(true)
	testkit.Eventually(t, "cx1 to come back", 10*time.Second, func() bool { return f.serverAvailable("cxserver", "cx1") })
	before := place(t, f.Addr, keys)
	if n := count(before); n["cx2"] != len(keys) {
		t.Fatalf("placement before the restart %v, want all %d on cx2", n, len(keys))
	}

	l := startLoad(t, name, f.Addr, defaultLoad)
	sleep(pick(time.Second, 5*time.Second))

	tTerm := time.Now()
	_ = f.Cmd.Process.Signal(syscall.SIGTERM)
	var tClosed time.Time
	testkit.Eventually(t, "the old process to stop listening", 10*time.Second, func() bool {
		conn, err := net.DialTimeout("tcp", f.Addr, time.Second)
		if err != nil {
			tClosed = time.Now()
			return true
		}
		conn.Close()
		return false
	})
	f.WaitExit(15 * time.Second)
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("no state file after the stop: %v", err)
	}
	g := runFairlead(t, f.Dir, f.Addr, f.Admin)
	var tListen time.Time
	testkit.Eventually(t, "the new process to listen", 10*time.Second, func() bool {
		conn, err := net.DialTimeout("tcp", g.Addr, time.Second)
		if err != nil {
			return false
		}
		tListen = time.Now()
		conn.Close()
		return true
	})
	leader := g.pool("platform").Leader
	sleep(pick(time.Second, 5*time.Second))
	samples := stop(l)
	after := place(t, g.Addr, keys)

	// Before the new process listens, requests may find no listener (or a keep-alive connection the
	// old process closed): that is the gap. From then on, nothing may fail.
	gap := func(s sample) string {
		if s.Err != nil && s.Start.Before(tListen) {
			return "refused_during_gap"
		}
		return ""
	}
	r := judge(name, samples, gap)
	same := 0
	for _, k := range keys {
		if after[k] == before[k] {
			same++
		}
	}
	noServers, refusals := 0, 0
	for _, s := range samples {
		if noServer(s) {
			noServers++
		}
		if refused(s) {
			refusals++
		}
	}
	r.add("gap=%s stop_to_listen=%s refused_dials=%d sticky_same=%d/%d no_server_503=%d", tListen.Sub(tClosed).Round(time.Millisecond),
		tListen.Sub(tTerm).Round(time.Millisecond), refusals, same, len(keys), noServers)
	if leader != c.Platforms[0].Addr {
		t.Errorf("%s: the new process's leader as it started listening: %q, want platform1 (%s) from the state file", name, leader, c.Platforms[0].Addr)
	}
	if same != len(keys) {
		t.Errorf("%s: %d of %d assets moved across the restart: before %v, after %v", name, len(keys)-same, len(keys), count(before), count(after))
	}
	if noServers > 0 {
		t.Errorf("%s: %d requests got 503 \"no server available\"", name, noServers)
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}
