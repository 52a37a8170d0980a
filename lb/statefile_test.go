package lb

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/handover"
	"github.com/fasthttp/websocket"
)

// withState adds a [global] table to files: state_file = path, start, and extra keys.
func withState(files map[string]string, path, start, extra string) map[string]string {
	files["30-state.toml"] = fmt.Sprintf("[global]\nstate_file = %q\nstart = %q\n%s\n", path, start, extra)
	return files
}

// stateJSON is a state file written at written with the given pools (JSON members "name": {...}).
func stateJSON(written time.Time, pools ...string) string {
	return fmt.Sprintf(`{"version": 1, "written": %q, "pools": {%s}}`, written.Format(time.RFC3339Nano), strings.Join(pools, ","))
}

// parseState reads and parses the state file at path.
func parseState(path string) (st savedState, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

// readState is parseState for a state file that must be there and parse.
func readState(t *testing.T, path string) *savedState {
	t.Helper()
	st, err := parseState(path)
	if err != nil {
		t.Fatalf("state file %s: %v", path, err)
	}
	return &st
}

// setStateWriteInterval sets how often the state file is written, for the rest of the test.
func setStateWriteInterval(t *testing.T, d time.Duration) {
	old := stateWriteInterval
	stateWriteInterval = d
	t.Cleanup(func() { stateWriteInterval = old })
}

// hangLeaderChecks makes every platform's LeaderCheck hang; ordinary requests are still served.
func hangLeaderChecks(c *sim.Cluster) {
	for _, p := range c.Platforms {
		p.SetLeaderCheckHung(true)
	}
}

func TestFastStartServesTheRememberedLeaderWithin100msWhileEveryLeaderCheckHangs(t *testing.T) {
	c := startCluster(t, 3, 0)
	p2 := c.Platforms[1]
	hangLeaderChecks(c)
	path := filepath.Join(t.TempDir(), "state.json")
	mustWriteFile(t, path, stateJSON(time.Now().Add(-time.Minute),
		fmt.Sprintf(`"platform": {"balance": "leader", "leader": %q, "servers": [{"addr": %q, "up": true}]}`, p2.Addr, p2.Addr)))
	cfg, err := config.Load(testkit.WriteFiles(t, withState(platformConfig(c, "", ""), path, "fast", "")))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	l := New(cfg, Options{Logf: logs.logf})

	start := time.Now()
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	code, by := get(t, l, "/Thingworx/Things")
	if took := time.Since(start); code != 200 || by != p2.Name || took > 100*time.Millisecond {
		t.Fatalf("first request: %d from %q %s after Start; want 200 from %s within 100ms\n%s", code, by, took, p2.Name, logs.all())
	}
	if !strings.Contains(logs.all(), "state: pool platform: fast start with leader "+p2.Addr) {
		t.Errorf("no log of the fast start:\n%s", logs.all())
	}
}

func TestAStateWrittenAtCloseByOneRunIsReadByTheNext(t *testing.T) {
	setStateWriteInterval(t, time.Hour) // the only write is the one at Close
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	path := filepath.Join(t.TempDir(), "state.json")

	// A user whose server among all three is platform1 is placed, in the first run, where platform1
	// is not in the pool: in the second run only the remembered placement keeps it off platform1.
	user := valuesPlacedOn(t, "user-", 1, p1.Addr, p1.Addr, p2.Addr, p3.Addr)[0]
	placed := map[string]*sim.Platform{p2.Addr: p2, p3.Addr: p3}[placedOn(user, p2.Addr, p3.Addr)]

	files := withApp(withState(platformConfig(c, "", ""), path, "normal", ""), p2, p3)
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	first := New(cfg, Options{Logf: (&logSink{}).logf})
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			first.Close()
		}
	})
	if _, by := get(t, first, "/"); by != p2.Name {
		t.Fatalf("first run: served by %q, want the leader %s", by, p2.Name)
	}
	if a := request(first, "GET", "/app/x", "", "X-User", user); a.err != nil || a.by != placed.Name {
		t.Fatalf("first run: %s served by %q (%v), want %s", user, a.by, a.err, placed.Name)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("state file written before Close, with a write interval of an hour")
	}
	first.Close()
	closed = true

	st := readState(t, path)
	pl, app := st.Pools["platform"], st.Pools["app"]
	if st.Version != 1 || time.Since(st.Written) > time.Minute || pl == nil || pl.Leader != p2.Addr || app == nil {
		t.Fatalf("state written at Close: %+v, want version 1, now, leader %s and pool app", st, p2.Addr)
	}
	if len(app.Sticky) != 1 || app.Sticky[0].Key != "h:"+user || app.Sticky[0].Server != placed.Addr {
		t.Fatalf("sticky keys %+v, want h:%s on %s", app.Sticky, user, placed.Addr)
	}

	// The second run: every LeaderCheck hangs, platform1 is in the app pool again.
	hangLeaderChecks(c)
	files = withApp(withState(platformConfig(c, "", ""), path, "fast", ""), p1, p2, p3)
	second, logs := startLB(t, files)
	if code, by := get(t, second, "/"); code != 200 || by != p2.Name {
		t.Fatalf("second run: %d from %q, want 200 from the remembered leader %s\n%s", code, by, p2.Name, logs.all())
	}
	if a := request(second, "GET", "/app/x", "", "X-User", user); a.err != nil || a.by != placed.Name {
		t.Fatalf("second run: %s served by %q (%v), want its remembered server %s, not platform1", user, a.by, a.err, placed.Name)
	}
	if !strings.Contains(logs.all(), "state: pool app: fast start with 3 of 3 servers up, sticky keys: 1 restored") {
		t.Errorf("no log of the app pool's fast start:\n%s", logs.all())
	}
}

func TestFastStartIgnoresThePoolsWhoseStateNoLongerFitsAndDropsKeysOfServersNotInThePool(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	// app's state names platform1, which left the pool; platform's state is of a sticky pool.
	onP3 := valuesPlacedOn(t, "user-", 1, p2.Addr, p2.Addr, p3.Addr)[0] // remembered on platform3
	onP1 := valuesPlacedOn(t, "other-", 1, p2.Addr, p2.Addr, p3.Addr)[0]
	path := filepath.Join(t.TempDir(), "state.json")
	mustWriteFile(t, path, stateJSON(time.Now(),
		fmt.Sprintf(`"platform": {"balance": "sticky", "servers": [{"addr": %q, "up": true}]}`, p3.Addr),
		fmt.Sprintf(`"app": {"balance": "sticky", "servers": [{"addr": %q, "up": true}, {"addr": %q, "up": false}],
			"sticky": [{"key": "h:%s", "server": %q, "idle_ms": 1000}, {"key": "h:%s", "server": %q, "idle_ms": 0}]}`,
			p1.Addr, p3.Addr, onP3, p3.Addr, onP1, p1.Addr)))
	files := withApp(withState(platformConfig(c, "", ""), path, "fast", ""), p2, p3)
	l, logs := startLB(t, files)

	if _, by := get(t, l, "/"); by != p1.Name {
		t.Fatalf("platform pool served by %q, want the elected leader %s", by, p1.Name)
	}
	for _, want := range []string{
		`state: pool platform: remembered health not used (its balance was "sticky", now "leader"); waiting for its first round of probes`,
		"state: pool app: remembered health not used (none of its servers was up), sticky keys: 1 restored (1 dropped: their server left the pool)",
	} {
		if !strings.Contains(logs.all(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.all())
		}
	}
	if a := request(l, "GET", "/app/x", "", "X-User", onP3); a.by != p3.Name {
		t.Fatalf("%s served by %q, want its remembered server %s", onP3, a.by, p3.Name)
	}
	if a := request(l, "GET", "/app/x", "", "X-User", onP1); a.by != p2.Name {
		t.Fatalf("%s, remembered on a server that left, served by %q; want placement anew on %s", onP1, a.by, p2.Name)
	}
}

// A state file that cannot be used (with a WARN line) or whose remembered leader is no longer in the
// pool: a normal start, which waits for the first round.
func TestFastStartWithAnUnusableStateFileOrALeaderNoLongerInThePoolStartsNormally(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	remembered := fmt.Sprintf(`"platform": {"balance": "leader", "leader": %q, "servers": []}`, p2.Addr)
	f := func(name, content, maxAge, why string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "state.json")
		if content != "" {
			mustWriteFile(t, path, content)
		}
		extra := ""
		if maxAge != "" {
			extra = fmt.Sprintf("state_max_age = %q", maxAge)
		}
		start := time.Now()
		l, logs := startLB(t, withState(platformConfig(c, "", ""), path, "fast", extra))
		// A normal start: Start returned after the first round, which elected the real leader.
		if st := l.Status().Pools[0]; st.Leader != p1.Addr || probesSince(p2, start, false) == 0 {
			t.Fatalf("%s: leader %q when Start returned (platform2 probed %d times); want %s after a first round",
				name, st.Leader, probesSince(p2, start, false), p1.Addr)
		}
		if _, by := get(t, l, "/"); by != p1.Name {
			t.Fatalf("%s: served by %q, want %s", name, by, p1.Name)
		}
		want := `level=WARN msg="state: start = \"fast\", but the state file is not usable; normal start: waiting for the first round of probes" file=` +
			path + ` reason=`
		if strings.HasPrefix(why, "remembered health not used") {
			want = why // the file is usable: no warning, the pool's own line
		}
		if !strings.Contains(logs.all(), want) || !strings.Contains(logs.all(), why) {
			t.Fatalf("%s: log lacks %q with reason %q:\n%s", name, want, why, logs.all())
		}
		l.Close()
	}
	f("missing", "", "", "missing")
	f("garbage", "\x00\x17garbage\xff{", "", "corrupt: invalid character")
	f("truncated", stateJSON(time.Now(), remembered)[:40], "", "corrupt: unexpected end of JSON input")
	f("empty", " ", "", "corrupt: unexpected end of JSON input")
	f("stale", stateJSON(time.Now().Add(-3*time.Second), remembered), "1s", "stale: written 3s ago, more than state_max_age (1s)")
	f("another version", strings.Replace(stateJSON(time.Now(), remembered), `"version": 1`, `"version": 7`, 1), "",
		"format version 7; this fairlead reads version 1")
	f("no write time", `{"version": 1, "pools": {}}`, "", "corrupt: no write time")
	f("a remembered leader no longer in the pool", stateJSON(time.Now(), `"platform": {"balance": "leader", "leader": "127.0.0.1:1", "servers": []}`), "",
		"remembered health not used (its remembered leader 127.0.0.1:1 is no longer in the pool)")
}

func TestARememberedLeaderIsReplacedAfterThreeNon200AnswersLikeAnyLeader(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	// platform1 is remembered as the leader but steps down: its LeaderCheck answers 503 (ordinary
	// requests still work); platform2 leads now.
	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	path := filepath.Join(t.TempDir(), "state.json")
	mustWriteFile(t, path, stateJSON(time.Now(), fmt.Sprintf(`"platform": {"balance": "leader", "leader": %q, "servers": []}`, p1.Addr)))
	start := time.Now()
	// A slower fast_interval leaves time to look between two answers.
	l, _ := startLB(t, withState(platformConfig(c, "", `fast_interval = "400ms"`), path, "fast", ""))
	if _, by := get(t, l, "/"); by != p1.Name {
		t.Fatalf("served by %q at once, want the remembered leader %s", by, p1.Name)
	}
	testkit.Eventually(t, "two failed LeaderChecks", 5*time.Second, func() bool { return probesSince(p1, start, false) >= 2 })
	if n := probesSince(p1, start, false); n == 2 {
		_, by := get(t, l, "/")
		if probesSince(p1, start, false) == 2 && by != p1.Name {
			t.Fatalf("after two non-200 answers traffic went to %q, want the remembered leader %s", by, p1.Name)
		}
	}
	testkit.Eventually(t, "traffic on platform2", 5*time.Second, func() bool { _, by := get(t, l, "/"); return by == p2.Name })
	if n := probesSince(p1, start, false); n < 3 {
		t.Fatalf("switched after %d non-200 answers, want 3", n)
	}
	if n := l.Status().Pools[0].SplitBrains; n != 0 {
		t.Fatalf("%d split brains: platform2's 200 before the remembered leader answered is none", n)
	}
}

func TestTheStateFileIsReplacedAtomicallyAndAlwaysParsesWhileItIsWritten(t *testing.T) {
	setStateWriteInterval(t, 2*time.Millisecond)
	c := startCluster(t, 3, 0)
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	files := withApp(withState(platformConfig(c, "", ""), path, "normal", ""), c.Platforms...)
	l, _ := startLB(t, files)
	for i := range 200 { // a few kilobytes of sticky keys per write
		if a := request(l, "GET", "/app/x", "", "X-User", fmt.Sprint("user-", i)); a.err != nil || a.status != 200 {
			t.Fatalf("GET as user-%d: %+v", i, a)
		}
	}
	testkit.Eventually(t, "a state file with the 200 keys", 5*time.Second, func() bool {
		st, err := parseState(path)
		return err == nil && st.Pools["app"] != nil && len(st.Pools["app"].Sticky) == 200
	})
	reads := 0
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); {
		st, err := parseState(path)
		if err != nil {
			t.Fatalf("read %d: the state file cannot be read or does not parse (%v): a partial file was visible", reads, err)
		}
		if st.Version != 1 || st.Pools["app"] == nil || len(st.Pools["app"].Sticky) != 200 || st.Pools["platform"].Leader != c.Platforms[0].Addr {
			t.Fatalf("read %d: state %+v, want every pool with 200 sticky keys in app", reads, st)
		}
		reads++
	}
	if reads < 50 {
		t.Fatalf("only %d reads of the state file in 500ms", reads)
	}
	l.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "state.json" {
		t.Fatalf("files left in the state file's directory: %v, want state.json alone", entries)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v (%v), want 0600: sticky keys may be session cookies", info.Mode(), err)
	}
}

func TestStickyKeysThatAreNotUTF8SurviveTheStateFile(t *testing.T) {
	key := "h:\xff\xfe-asset"
	st := &savedState{Version: stateVersion, Written: time.Now(), Pools: map[string]*savedPool{
		"app": {Balance: "sticky", Sticky: []savedKey{{KeyB64: "aDr//i1hc3NldA==", Server: "10.0.0.1:80"}}},
	}}
	path := filepath.Join(t.TempDir(), "state.json")
	if err := writeStateFile(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := readStateFile(path, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := newPool("app", &config.Pool{Balance: "sticky", Servers: []string{"10.0.0.1:80"}, Sticky: config.Sticky{Keys: []string{"header:X-Asset"}}}, false, nil, func(string, ...any) {})
	_, sticky, _ := p.restore(got.Pools["app"], 0)
	if exp := p.stickyTable().Export(); sticky != ", sticky keys: 1 restored" || len(exp) != 1 || exp[0].Key != key {
		t.Fatalf("restored %q: %+v, want the key %q", sticky, exp, key)
	}
	if saved := p.snapshot().Sticky; len(saved) != 1 || saved[0].Key != "" || saved[0].KeyB64 != "aDr//i1hc3NldA==" {
		t.Fatalf("saved as %+v, want base64", saved)
	}
}

func TestAStateFileThatCannotBeWrittenIsReportedOnceAndFairleadServesOn(t *testing.T) {
	setStateWriteInterval(t, 5*time.Millisecond)
	c := startCluster(t, 2, 0)
	path := filepath.Join(t.TempDir(), "no-such-dir", "state.json")
	l, logs := startLB(t, withState(platformConfig(c, "", ""), path, "normal", ""))
	testkit.Eventually(t, "the warning", 5*time.Second, func() bool { return strings.Contains(logs.all(), "cannot write the state file") })
	time.Sleep(50 * time.Millisecond) // several more failed writes
	if code, by := get(t, l, "/"); code != 200 || by != c.Platforms[0].Name {
		t.Fatalf("got %d from %q, want 200 from %s", code, by, c.Platforms[0].Name)
	}
	if n := strings.Count(logs.all(), "cannot write the state file"); n != 1 || !strings.Contains(logs.all(), "level=WARN") ||
		!strings.Contains(logs.all(), "file="+path) {
		t.Fatalf("%d warnings, want one naming the file:\n%s", n, logs.all())
	}
}

// TestAnUnchangedStateIsNotWrittenAgainButANewStickyKeyIs: a large sticky table costs a full export, so
// the writer skips ticks where nothing the file holds changed, and writes at the next tick after a
// change.
func TestAnUnchangedStateIsNotWrittenAgainButANewStickyKeyIs(t *testing.T) {
	setStateWriteInterval(t, 20*time.Millisecond)
	old := stateRefreshTicks
	stateRefreshTicks = 1 << 30 // no periodic refresh during the test
	t.Cleanup(func() { stateRefreshTicks = old })
	c := startCluster(t, 2, 0)
	path := filepath.Join(t.TempDir(), "state.json")
	files := withApp(withState(platformConfig(c, "", ""), path, "normal", ""), c.Platforms...)
	l, _ := startLB(t, files)
	if a := request(l, "GET", "/app/x", "", "X-User", "user-1"); a.err != nil || a.status != 200 {
		t.Fatalf("GET as user-1: %+v", a)
	}
	written := func() time.Time { st, _ := parseState(path); return st.Written }
	testkit.Eventually(t, "a state file with user-1", 5*time.Second, func() bool {
		st := written()
		return !st.IsZero() && len(readState(t, path).Pools["app"].Sticky) == 1
	})
	first := written()
	// Five ticks with nothing changed: the file stays as it was, even though user-1 keeps using its key.
	for range 5 {
		time.Sleep(stateWriteInterval)
		request(l, "GET", "/app/x", "", "X-User", "user-1")
	}
	if got := written(); !got.Equal(first) {
		t.Fatalf("the state file was rewritten at %v although nothing changed since %v", got, first)
	}
	if a := request(l, "GET", "/app/x", "", "X-User", "user-2"); a.err != nil || a.status != 200 {
		t.Fatalf("GET as user-2: %+v", a)
	}
	testkit.Eventually(t, "the new key in the state file", 5*time.Second, func() bool {
		return written().After(first) && len(readState(t, path).Pools["app"].Sticky) == 2
	})
}

// The token arithmetic of an admission limiter handed over: what the old process's limiter held at the
// export (negative: slots reserved ahead for upgrades waiting in its queue), refilled by the rate for
// the time to the import, and no more than a burst.
func TestAnAdmissionLimiterHandedOverHoldsWhatTheOldOneHeld(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	old := &Server{}
	l := old.admitter(10)
	l.ReserveN(t0, 10) // the burst
	for range 3 {      // three upgrades waiting for their slots
		l.ReserveN(t0, 1)
	}
	at := t0.Add(50 * time.Millisecond)
	tokens, ok := old.admitTokens(at)
	if !ok || math.Abs(tokens-(-2.5)) > 1e-9 {
		t.Fatalf("the old limiter at +50ms: %v tokens (%v), want -2.5: 3 reserved ahead, 0.5 refilled", tokens, ok)
	}
	nu := &Server{}
	now := at.Add(20 * time.Millisecond)
	if got := nu.restoreAdmitter(10, tokens, at, now); math.Abs(got-(-2.3)) > 1e-6 {
		t.Fatalf("restored at +70ms: %v tokens, want -2.3", got)
	}
	// The next upgrade waits for its slot behind the old process's queue: 3.3 tokens at 10/s.
	if d := nu.admit.Load().ReserveN(now, 1).DelayFrom(now); d < 329*time.Millisecond || d > 331*time.Millisecond {
		t.Fatalf("the next upgrade after the import waits %v, want 330ms", d)
	}
	// A rate raised by the new config: tokens refill at the new rate, capped at its burst.
	if got := (&Server{}).restoreAdmitter(20, 1.5, at, now); math.Abs(got-1.9) > 1e-6 {
		t.Errorf("restored at 20/s: %v tokens, want 1.9", got)
	}
	// Full by the import (or the limit off): no limiter made; a server with one keeps its own.
	full := &Server{}
	if got := full.restoreAdmitter(10, 9.9, at, at.Add(time.Second)); got != 10 || full.admit.Load() != nil {
		t.Errorf("a limiter full again by the import: %v tokens, limiter %v; want 10 and none made", got, full.admit.Load())
	}
	if _, ok := full.admitTokens(at); ok {
		t.Error("a server without a limiter has tokens to hand over")
	}
	if got := nu.restoreAdmitter(10, 0, now, now); math.Abs(got-(-3.3)) > 1e-6 {
		t.Errorf("a second restore changed the limiter: %v tokens, want -3.3 (-2.3, and the upgrade above)", got)
	}
}

// A binary upgrade's state document carries the admission limiters, the buckets per source and the
// history (two LBs in this process, the second given the first's document as a new process would be):
// the second refuses the address that spent its rate_per_source with the same 429, admits its next
// tunnel in the slot after those the first had reserved, and its status document has the first's
// events, in order, before its own upgraded event.
func TestABinaryUpgradeHandsOverTheLimitersTheBucketsAndTheHistory(t *testing.T) {
	c := startCluster(t, 2, 1) // one connection server: one limiter
	clock := &testkit.Clock{}  // rate_per_source's clock, stopped: the buckets refill only when the test says
	files := cxConfig(c, "[frontend]\nrate_per_source = 20\n")
	files["40-admission.toml"] = "[pools.cxserver]\nnew_tunnels_per_second = 2\nqueue_timeout = \"3s\"\n"
	old := startLBClock(t, files, clock)
	var mu sync.Mutex
	var slots []time.Time
	hook := func(_ *Server, at time.Time) {
		mu.Lock()
		slots = append(slots, at)
		mu.Unlock()
	}
	old.px.admitted.Store(&hook)

	// Six devices at once: two admitted (the burst), four waiting for slots 0.5 s apart.
	var conns sync.WaitGroup
	dial := func(l *LB, id string) {
		conn, resp, err := (&websocket.Dialer{HandshakeTimeout: 10 * time.Second}).Dial("ws://"+l.Addr()+"/Thingworx/WS", http.Header{"X-Asset-Id": {id}})
		if err != nil {
			t.Errorf("device %s: %v (%v)", id, err, resp)
			return
		}
		t.Cleanup(func() { conn.Close() })
	}
	for i := range 6 {
		conns.Go(func() { dial(old, "before-"+strconv.Itoa(i)) })
	}
	testkit.Eventually(t, "two upgrades admitted and four waiting", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(slots) == 2 && old.px.gen.Load().pools["cxserver"].waiting.Load() == 4
	})
	mu.Lock()
	first := slots[0]
	mu.Unlock()
	// The address spends the rest of its rate_per_source (20, 6 spent by the upgrades).
	if ok, limited, _ := burst(t, old.Addr(), "/Thingworx/Things", "", 20); ok != 14 || limited != 6 {
		t.Fatalf("before the upgrade: %d served, %d limited; want 14 and 6", ok, limited)
	}
	before := old.Status().Events
	if len(before) == 0 {
		t.Fatal("no event before the upgrade")
	}
	for i := range before {
		before[i].Time = before[i].Time.UTC().Round(0) // the wall clock only, as another process reads it
	}
	doc := old.stateDocument()

	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	nu := New(cfg, Options{Logf: logs.logf, Now: clock.Now, Given: &handover.Given{State: doc}})
	nu.px.admitted.Store(&hook)
	if err := nu.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nu.Close)
	if !strings.Contains(logs.all(), "state: handed over: ") || !strings.Contains(logs.all(), "1 admission limiter, 1 bucket per source") {
		t.Errorf("no log of what was handed over:\n%s", logs.all())
	}

	// The bucket: spent in the old process, spent here.
	if ok, limited, retry := burst(t, nu.Addr(), "/Thingworx/Things", "", 3); ok != 0 || limited != 3 || retry != 1 {
		t.Fatalf("after the upgrade: %d served, %d limited (Retry-After %d); want 0 and 3, Retry-After 1 as before", ok, limited, retry)
	}
	clock.Advance(time.Second) // the bucket refills: the next upgrade passes rate_per_source

	// The limiter: the next tunnel's slot comes after the four the old process reserved.
	mu.Lock()
	n := len(slots)
	mu.Unlock()
	dial(nu, "after")
	conns.Wait()
	mu.Lock()
	last := slots[n:]
	mu.Unlock()
	if len(last) == 0 {
		t.Fatal("the upgrade after the handover was not admitted")
	}
	if got := last[len(last)-1].Sub(first); got < 2500*time.Millisecond-10*time.Millisecond {
		t.Fatalf("the first tunnel after the upgrade is admitted in the slot %v after the first before it, want 2.5 s or later (2 at once, then 4 more at 2 per second reserved by the old process)", got)
	}

	// The history: the old events, in order and with their seqs and times, then the new process's own.
	nu.Succession().TookOver(handover.Hello{PID: 1, Version: "old"}, 0, 0)
	after := nu.Status().Events
	for i := range after {
		after[i].Time = after[i].Time.UTC().Round(0)
	}
	if len(after) < len(before)+1 || !slices.Equal(after[:len(before)], before) {
		t.Fatalf("events after the upgrade:\n%v\nwant first the events before it:\n%v", after, before)
	}
	up := after[len(after)-1]
	if up.Kind != "upgraded" || up.Seq <= before[len(before)-1].Seq {
		t.Fatalf("the last event after the upgrade is %+v, want upgraded, numbered after %d", up, before[len(before)-1].Seq)
	}
}

// Issue 38: the multi-part pins are part of the state: an upload whose first parts went to a server
// before a binary upgrade sends its next parts there after it (a new process's round robin would
// start from the first server again). The state file keeps them as it keeps sticky keys.
func TestMultipartPinsAreHandedOverWithTheState(t *testing.T) {
	c := startReadyCluster(t, 3)
	ps := c.Platforms
	files := balConfig(ps, nil, "[pools.platform]\nmultipart_header = \"X-Multipart-Id\"\n")
	old, _ := startLB(t, files)
	homes := map[string]string{}
	for _, id := range []string{"upload-A", "upload-B", "upload-C"} { // one each on platform1, 2, 3
		homes[id] = mustServe(t, id+" part 1", sendChunk(old, id, "/Thingworx/FileRepositories/upload", 1), "")
	}
	doc := old.stateDocument()
	cfg, err := config.Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	nu := New(cfg, Options{Logf: logs.logf, Given: &handover.Given{State: doc}})
	if err := nu.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nu.Close)
	for _, id := range []string{"upload-C", "upload-B", "upload-A"} { // the new round robin would start at platform1
		mustServe(t, id+" part 2, after the upgrade", sendChunk(nu, id, "/Thingworx/FileRepositories/upload", 2), homes[id])
	}
	if !strings.Contains(logs.all(), "multi-part pins: 3 restored") {
		t.Errorf("no log of the pins restored:\n%s", logs.all())
	}
}
