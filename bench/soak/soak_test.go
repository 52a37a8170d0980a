package soak

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

var soakDuration = flag.Duration("soak.duration", 0,
	"run the soak for this long (e.g. 5m); without it the soak is skipped")

// What "back to baseline" allows, after the load has stopped and idle connections have timed out
// (frontend idle_timeout 5s, upstream connections idle 10s): fairlead's resident memory within +20 MiB
// of the baseline, at most 10 more goroutines and 5 more open file descriptors. The baseline is taken
// the same way, idle after a warm-up under the same load, so that the heap has already grown to what
// the load needs.
const (
	rssTolerance       = 20 << 20
	goroutineTolerance = 10
	fdTolerance        = 5

	sampleEvery = 10 * time.Second
	// idleWait is the least wait after the load stops before measuring: fasthttp closes upstream
	// connections idle for 10 s, checked every few seconds.
	idleWait = 15 * time.Second
	// settleMax bounds the wait for the figures to come back after the soak.
	settleMax = 2 * time.Minute
)

// TestSoakReturnsToBaseline runs mixed traffic through a real fairlead process for -soak.duration and
// checks that its RSS, goroutines and open fds return to the baseline after the load stops:
//
//   - keep-alive GETs with answers of 0 B to 1 MiB (some chunked);
//   - POSTs with bodies of 0 B to 1 MiB, half with a Content-Length, half chunked;
//   - a few hundred WebSocket tunnels at a time, each opened with its device's X-Asset-Id, echoing a
//     few messages and closed (most with a close frame, some by dropping the connection), over and over;
//   - at 40% of the run the leader switches (platform1 steps down, platform2 takes over), at 60% a
//     connection server dies and restarts 3 s later.
//
// Every 10 s it prints fairlead's RSS, goroutines (admin /metrics go_goroutines), open fds
// (/proc/PID/fd), requests/s and tunnel figures; at the end a verdict.
func TestSoakReturnsToBaseline(t *testing.T) {
	if *soakDuration <= 0 {
		t.Skip("soak not requested: run it with go test ./bench/soak -run Soak -soak.duration 5m -v -timeout 0 (or make soak SOAK=5m)")
	}
	dur := *soakDuration
	if dur < 30*time.Second {
		t.Fatalf("-soak.duration %s: a soak needs at least 30s (its events come at 40%% and 60%% of it)", dur)
	}
	warmup := min(max(dur/10, 15*time.Second), time.Minute)
	if dl, ok := t.Deadline(); ok && time.Until(dl) < warmup+dur+2*idleWait+settleMax+time.Minute {
		t.Fatalf("the test deadline (%s away) is too short for a %s soak: run it with -timeout 0", time.Until(dl).Round(time.Second), dur)
	}

	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	fl := startFairlead(t, c)

	t.Logf("warm-up: %s of the same load", warmup)
	ld := startLoad(fl.addr, warmup)
	<-ld.Done()
	ld.Stop(time.Minute)
	base := fl.settle(t, idleWait, nil)
	t.Logf("baseline (idle after the warm-up): %s", base)

	t.Logf("soak: %s; leader switch at %s, connection server restart at %s", dur, dur*4/10, dur*6/10)
	ld = startLoad(fl.addr, dur)
	defer ld.Stop(time.Minute)
	done := ld.Done()
	events := time.AfterFunc(dur*4/10, func() {
		t.Logf("event: leader switch: platform1 → standby, platform2 → leader")
		ld.Mark("leader switch")
		_ = c.Platforms[0].SetState(sim.Standby)
		_ = c.Platforms[1].SetState(sim.Leader)
	})
	defer events.Stop()
	restarted := make(chan struct{})
	restart := time.AfterFunc(dur*6/10, func() {
		defer close(restarted)
		t.Logf("event: connection server cx1 killed (its tunnels drop), restarting in 3s")
		ld.Mark("cx1 killed")
		_ = c.Connections[0].Kill()
		time.Sleep(3 * time.Second)
		if err := c.Connections[0].Restart(); err != nil {
			t.Errorf("restarting cx1: %v", err)
		}
	})
	defer restart.Stop()

	start := time.Now()
	tick := time.NewTicker(sampleEvery)
	var peak sample
	last, lastAt := ld.Snapshot(), start
sampling:
	for {
		select {
		case <-done:
			break sampling
		case now := <-tick.C:
			s := fl.sample()
			peak = peak.max(s)
			cur := ld.Snapshot()
			rate := func(a, b uint64) float64 { return float64(b-a) / now.Sub(lastAt).Seconds() }
			t.Logf("%6s  %s  req/s %6.0f  tunnels open %3d, opened/s %5.1f, echoes/s %6.0f  errors %d",
				now.Sub(start).Round(time.Second), s, rate(last.OK, cur.OK), cur.Open,
				rate(last.Tunnels, cur.Tunnels), rate(last.Echoes, cur.Echoes), cur.Errors())
			last, lastAt = cur, now
			if fl.exited() {
				t.Fatalf("fairlead exited during the soak:\n%s", fl.logTail())
			}
		}
	}
	tick.Stop()
	<-restarted
	ld.Stop(time.Minute) // closes every connection it holds
	tot := ld.Snapshot()
	elapsed := time.Since(start)
	t.Logf("load stopped after %s: %d requests (%.0f/s; %d GETs, %d POSTs), %d tunnels, %d echoes",
		elapsed.Round(time.Second), tot.OK, float64(tot.OK)/elapsed.Seconds(), tot.OKByMethod["GET"], tot.OKByMethod["POST"], tot.Tunnels, tot.Echoes)
	t.Logf("errors: %d HTTP, %d tunnel dials, %d tunnels broken (%d of them within %s of an event)",
		tot.Failed, tot.DialFails, tot.Broken, tot.NearMark, nearEvent)
	for _, line := range ld.Errors() {
		t.Logf("  %s", line)
	}
	t.Logf("peak during the soak: %s", peak)

	final := fl.settle(t, idleWait, &base)
	ok := true
	check := func(what string, base, after, tolerance int64, format func(int64) string) {
		word := "ok"
		if after-base > tolerance {
			word, ok = "OVER", false
		}
		t.Logf("verdict: %-10s baseline %s, after %s: %s (tolerance +%s): %s",
			what, format(base), format(after), plus(format(after-base)), format(tolerance), word)
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	count := func(n int64) string { return strconv.FormatInt(n, 10) }
	check("RSS", base.rss, final.rss, rssTolerance, mib)
	check("goroutines", base.goroutines, final.goroutines, goroutineTolerance, count)
	check("open fds", base.fds, final.fds, fdTolerance, count)
	switch {
	case tot.OK == 0 || tot.Tunnels == 0:
		t.Fatalf("verdict: FAIL: no traffic went through (requests %d, tunnels %d)", tot.OK, tot.Tunnels)
	case !ok:
		t.Fatalf("verdict: FAIL: fairlead did not return to its baseline\n%s", fl.logTail())
	}
	t.Logf("verdict: PASS: RSS, goroutines and open fds back to baseline after %s of soak", elapsed.Round(time.Second))
}

// fairlead is the process under test.
type fairlead struct {
	cmd         *exec.Cmd
	addr, admin string
	log         string
	done        chan struct{}
	admClient   *http.Client
}

// startFairlead builds ./cmd/fairlead, starts it in front of c with short idle timeouts and checks, and
// waits until it serves HTTP and tunnels.
func startFairlead(t *testing.T, c *sim.Cluster) *fairlead {
	t.Helper()
	dir := t.TempDir()
	bin := testkit.Binary(t, "cmd/fairlead")
	fl := &fairlead{addr: testkit.Addr(t), admin: testkit.Addr(t), log: filepath.Join(dir, "fairlead.log"), done: make(chan struct{}),
		admClient: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	var conf testkit.Config
	conf.Table("frontend").Set("listen", fl.addr).Set("idle_timeout", 5*time.Second).Set("read_timeout", 10*time.Second).
		Set("drain_timeout", 5*time.Second)
	conf.Table("admin").Set("listen", fl.admin)
	conf.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c)[:2]).
		Set("tunnel_idle_timeout", 30*time.Second)
	conf.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id", "source"}).Set("idle_timeout", 30*time.Second)
	conf.Table("pools.cxserver.check").Set("path", "/health").Set("interval", time.Second).
		Set("fast_interval", 250*time.Millisecond).Set("timeout", time.Second)
	conf.Array("routes").Set("websocket", true).
		Set("paths", []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"}).
		Set("pool", "cxserver")
	conf.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c)[:2]).Set("queue_timeout", 10*time.Second).
		Set("response_timeout", 20*time.Second)
	conf.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials).Set("interval", time.Second).
		Set("fast_interval", 250*time.Millisecond).Set("timeout", time.Second)
	conf.Array("routes").Set("pool", "platform")
	if err := os.WriteFile(filepath.Join(dir, "fairlead.toml"), []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(fl.log)
	if err != nil {
		t.Fatal(err)
	}
	fl.cmd = exec.Command(bin, "-config", dir)
	fl.cmd.Stdout, fl.cmd.Stderr = logf, logf
	if err := fl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { fl.cmd.Wait(); logf.Close(); close(fl.done) }() //nolint:errcheck // exit status: see exited
	t.Cleanup(func() {
		_ = fl.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-fl.done:
		case <-time.After(15 * time.Second):
			_ = fl.cmd.Process.Kill()
			<-fl.done
		}
	})

	var perr error
	if !testkit.Within(20*time.Second, func() bool { perr = probe(fl.addr); return perr == nil || fl.exited() }) || perr != nil {
		t.Fatalf("fairlead does not serve: %v\n%s", perr, fl.logTail())
	}
	t.Logf("fairlead (pid %d) on %s, admin %s, in front of platforms %s and connection servers %s",
		fl.cmd.Process.Pid, fl.addr, fl.admin, testkit.PlatformAddrs(c)[:2], testkit.ConnectionAddrs(c)[:2])
	return fl
}

// probe checks that a GET and a tunnel go through fairlead at addr.
func probe(addr string) error {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + addr + "/Thingworx/ready")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET: %s", resp.Status)
	}
	ws, _, err := testkit.DialTunnel(addr, wsPaths[0], "ready-check", 10*time.Second)
	if err != nil {
		return err
	}
	return ws.Close()
}

func (fl *fairlead) exited() bool {
	select {
	case <-fl.done:
		return true
	default:
		return false
	}
}

func (fl *fairlead) logTail() string {
	b, _ := os.ReadFile(fl.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return "fairlead log (tail):\n" + string(b)
}

// sample is one measurement of the fairlead process.
type sample struct {
	rss, goroutines, fds int64
}

func (s sample) String() string {
	return fmt.Sprintf("RSS %6.1f MiB  goroutines %4d  fds %4d", float64(s.rss)/(1<<20), s.goroutines, s.fds)
}

func (s sample) max(o sample) sample {
	return sample{max(s.rss, o.rss), max(s.goroutines, o.goroutines), max(s.fds, o.fds)}
}

func (s sample) within(base sample) bool {
	return s.rss-base.rss <= rssTolerance && s.goroutines-base.goroutines <= goroutineTolerance && s.fds-base.fds <= fdTolerance
}

// sample measures fairlead: fds first and goroutines last, so that the admin connection of the scrape
// is not counted among the fds (its goroutine is, in the baseline as after).
func (fl *fairlead) sample() sample {
	pid := fl.cmd.Process.Pid
	var s sample
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.fds = int64(len(ents))
	}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				s.rss = kb << 10
			}
		}
		f.Close()
	}
	if resp, err := fl.admClient.Get("http://" + fl.admin + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				s.goroutines, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		resp.Body.Close()
	}
	return s
}

// settle waits at least least after the load stopped, then measures every 2 s: the baseline once the
// fds stopped falling; the figures after the soak once within the tolerances of base (or after
// settleMax, when they did not come back).
func (fl *fairlead) settle(t *testing.T, least time.Duration, base *sample) sample {
	t.Helper()
	start := time.Now()
	time.Sleep(least)
	prev := fl.sample()
	for {
		time.Sleep(2 * time.Second)
		s := fl.sample()
		waited := time.Since(start).Round(time.Second)
		switch {
		case base == nil && s.fds >= prev.fds && s.goroutines >= prev.goroutines:
			t.Logf("idle after %s: %s", waited, s)
			return s
		case base != nil && s.within(*base):
			t.Logf("idle after %s: %s", waited, s)
			return s
		case time.Since(start) > settleMax:
			t.Logf("still not back after %s: %s", waited, s)
			return s
		}
		prev = s
	}
}

// plus writes a difference with its sign.
func plus(s string) string {
	if strings.HasPrefix(s, "-") {
		return s
	}
	return "+" + s
}
