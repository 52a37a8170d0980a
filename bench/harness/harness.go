// Package harness is fairlead's comparative benchmark: it starts the simulated ThingWorx cluster (package
// bench/sim) and, alternately, fairlead and each installed peer (HAProxy, nginx, Caddy) with an
// equivalent generated configuration, runs the scenarios against each, and reports every figure as a
// ratio to HAProxy from the same round (Markdown, JSON and an SVG chart).
//
// Fairness: the proxy under test runs pinned to core 0 with one worker (HAProxy nbthread 1, nginx
// worker_processes 1, Caddy and fairlead GOMAXPROCS=1); the bench process itself (the simulated servers
// and the Go load generators) and wrk run on core 1. With Options.Threads N > 1 every proxy gets N
// workers instead (nbthread N, worker_processes N, GOMAXPROCS=N) and nothing is pinned: how each proxy
// scales with cores. Peers alternate within each round (A B C D A B C D ...), and medians with min–max
// over rounds are reported.
package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// Options configures Run.
type Options struct {
	Plan Plan
	// Scenarios to run, by name; nil means all, in the standard order.
	Scenarios []string
	// Peers to compare, by base name (fairlead, haproxy, nginx, caddy); nil means PeerNames. The failover
	// scenario adds the tuned variants of fairlead and HAProxy; fan-out and fan-out-appconfig run only
	// fairlead and nginx (with nchan), the others having no pub/sub fan-out. A peer that is not installed
	// is skipped (and listed as such), except fairlead, which must exist.
	Peers []string
	// FairleadBin is the fairlead binary.
	FairleadBin string
	// Pin runs the proxy under test on core 0 with taskset (when taskset exists). The caller is expected
	// to run the bench process itself on core 1 (cmd/fairlead-bench re-executes itself under taskset).
	// Ignored when Threads > 1.
	Pin bool
	// Threads is the workers of every proxy (HAProxy nbthread, nginx worker_processes, fairlead and Caddy
	// GOMAXPROCS); 0 means 1. Above 1 nothing is pinned.
	Threads int
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// KeepTemp leaves the generated configurations and proxy logs in place (their directory is reported).
	KeepTemp bool
	// Costs adds, for http-small, the extra phases measuring the proxy's CPU time and context switches,
	// the host's TCP segments and (with strace) the proxy's system calls per request (costs.go).
	Costs bool
}

// Result is one run of one scenario against one peer in one round.
type Result struct {
	Scenario string             `json:"scenario"`
	Peer     string             `json:"peer"`
	Round    int                `json:"round"`
	Metrics  map[string]float64 `json:"metrics"`
	Notes    []string           `json:"notes,omitempty"`
	Error    string             `json:"error,omitempty"`
	Seconds  float64            `json:"seconds"`
}

// scenario is one benchmark scenario.
type scenario struct {
	name    string
	summary string
	metrics []metric
	// variants expands the base peers into the peers this scenario runs (failover adds tuned variants).
	variants func(base []string) []string
	run      func(rc *runCtx) (*Result, error)
	// sized is true when the scenario measures its metrics at several sizes N in one run (fan-out): a
	// result's keys are then "<metric key>@<N>" (sizedKey) and the Markdown has a row per peer and N.
	sized bool
}

// metric describes one figure of a scenario.
type metric struct {
	key   string
	label string
	// better is "higher", "lower" or "" (information only: no ratio).
	better string
	// ratio reports the metric as a ratio to HAProxy's from the same round (counts of failures are not).
	ratio bool
	// chart puts the metric's ratio to HAProxy in the SVG (implies ratio).
	chart bool
	// format prints a value ("%.0f" by default).
	format string
	// show, if set, prints a value instead of format (e.g. a split "50.0/50.0").
	show func(v float64) string
	// needs names a 0/1 metric that must be 1 for the value to be meaningful (e.g. a converged failover);
	// otherwise the value is a lower bound, shown with ">".
	needs string
	// progress shows the metric in the progress line (as the charted ones are).
	progress bool
}

// ScenarioNames lists every scenario in run order.
func ScenarioNames() []string {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name)
	}
	return names
}

func scenarios() []*scenario {
	return []*scenario{
		httpSmallScenario(), http16kScenario(), uploadScenario(), httpRRScenario(),
		wsEchoScenario(), wsIdleScenario(),
		failoverScenario(), reloadScenario(), fanInScenario(), fanOutScenario(), fanOutAppConfigScenario(),
		httpsSmallScenario(), wssEchoScenario(), wsIdleTLSScenario(), httpsSmallH2Scenario(), stormScenario(),
		upgradeScenario(),
	}
}

func findScenario(name string) *scenario {
	for _, s := range scenarios() {
		if s.name == name {
			return s
		}
	}
	return nil
}

func samePeers(base []string) []string { return base }

// runCtx is what a scenario run gets.
type runCtx struct {
	ctx   context.Context
	plan  Plan
	peer  *Peer
	pin   bool
	dir   string
	round int
	// threads is the proxy's workers (Options.Threads, at least 1).
	threads int
	// costs measures the costs per request (Options.Costs).
	costs bool
	// certs is the run's TLS certificate (made on first use; TLS scenarios).
	certs *runCerts
	// cleanup runs in reverse order when the run ends.
	cleanup []func()
	notes   []string
}

func (rc *runCtx) onCleanup(f func()) { rc.cleanup = append(rc.cleanup, f) }

func (rc *runCtx) note(format string, args ...any) {
	rc.notes = append(rc.notes, fmt.Sprintf(format, args...))
}

func (rc *runCtx) proxyCore() int {
	if rc.pin {
		return 0
	}
	return -1
}

func (rc *runCtx) genCore() int {
	if rc.pin {
		return 1
	}
	return -1
}

// startCluster starts the simulated cluster (2 platform servers, 2 connection servers) in this process,
// with ordinary answers of body.
func (rc *runCtx) startCluster(body []byte) (*sim.Cluster, error) {
	c, err := sim.Start(sim.Options{Platforms: 2, Connections: 2, Body: body})
	if err != nil {
		return nil, err
	}
	rc.onCleanup(c.Close)
	return c, nil
}

// readiness says when a started peer is ready for a scenario.
type readiness int

const (
	// serving: ordinary requests get 200 (from either platform server: HAProxy splits traffic between
	// both until the backup's first check fails, about 4 s after start with 15 s intervals; throughput is
	// not affected by which server answers).
	serving readiness = iota
	// leaderOnly: 4 consecutive requests are answered by the leader, platform1 (failover).
	leaderOnly
	// servingWS: serving, and a WebSocket upgrade on /Thingworx/WS echoes.
	servingWS
	// servingAll: serving, and answered by every platform server within a few requests (a round-robin
	// peer whose servers all passed their first check: http-rr).
	servingAll
)

// readyPath is the ordinary path that readiness checks (and http-rr's health checks) request: the
// simulated platform servers answer it 200 like any ordinary path.
const readyPath = "/Thingworx/ready"

// peerPorts returns a free port for a proxy's listener and one for its admin listener.
func peerPorts() (port, admin int, err error) {
	if port, err = freePort(); err != nil {
		return 0, 0, err
	}
	admin, err = freePort()
	return port, admin, err
}

// startPeer starts the peer in front of c (mod may adjust the setup) and waits until it is ready.
func (rc *runCtx) startPeer(c *sim.Cluster, ready readiness, mod func(*Setup)) (*Instance, error) {
	port, admin, err := peerPorts()
	if err != nil {
		return nil, err
	}
	_, hard := raiseNoFile()
	s := Setup{
		Dir: rc.dir, Port: port, AdminPort: admin,
		Credentials: sim.DefaultCredentials, CheckPath: sim.DefaultLeaderCheckPath,
		WSPaths: []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"},
		Tuned:   rc.peer.Tuned, MaxClients: 1000, FDLimit: int(min(hard, 1<<20)), ConnectTimeout: "3s",
		Threads: rc.threads,
	}
	for _, p := range c.Platforms {
		s.Platforms = append(s.Platforms, p.Addr)
	}
	for _, cx := range c.Connections {
		s.Connections = append(s.Connections, cx.Addr)
	}
	if mod != nil {
		mod(&s)
	}
	in, err := rc.peer.Start(s, rc.proxyCore())
	if err != nil {
		return nil, err
	}
	rc.onCleanup(in.Stop)
	leader := ""
	if ready == leaderOnly {
		leader = "platform1"
	}
	if err := waitReady(in, leader, 20*time.Second); err != nil {
		return nil, err
	}
	if ready == servingAll {
		var names []string
		for _, p := range c.Platforms {
			names = append(names, p.Name)
		}
		if err := waitServedByAll(in, names, 20*time.Second); err != nil {
			return nil, err
		}
	}
	if ready == servingWS {
		err := waitFor(10*time.Second, 100*time.Millisecond, func() error {
			if in.Proc.Exited() {
				return errExited
			}
			conn, err := wsDial(in.Addr(), "/Thingworx/WS", "ready-check", 2*time.Second, 1024)
			if err != nil {
				return err
			}
			defer conn.Close()
			return wsEcho(conn, []byte("ready"), 2*time.Second)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: WebSocket route not ready: %v\n%s", rc.peer.Name, err, in.Proc.LogTail(1000))
		}
	}
	return in, nil
}

// waitReady waits until 4 consecutive GETs on fresh connections get 200, from the server named leader
// unless it is "" (a round-robin peer whose other server has not failed its first check yet alternates).
func waitReady(in *Instance, leader string, timeout time.Duration) error {
	raw := testkit.RawRequest("GET", in.Addr(), readyPath, nil)
	ok := 0
	var last string
	err := waitFor(timeout, 50*time.Millisecond, func() error {
		if in.Proc.Exited() {
			return errExited
		}
		for ok < 4 {
			c := testkit.NewHTTPConn(in.Addr(), 2*time.Second)
			r := c.Do(raw, true)
			c.Close()
			if r.Err != nil || r.Status != 200 || (leader != "" && r.ServedBy != leader) {
				ok = 0
				last = fmt.Sprintf("status %d served by %q err %v", r.Status, r.ServedBy, r.Err)
				return fmt.Errorf("not ready: %s", last)
			}
			ok++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", in.Peer.Name, err, in.Proc.LogTail(1000))
	}
	return nil
}

// waitServedByAll waits until 4 GETs per server in a row, on fresh connections, all get 200 and every
// server named in names answered at least one of them.
func waitServedByAll(in *Instance, names []string, timeout time.Duration) error {
	raw := testkit.RawRequest("GET", in.Addr(), readyPath, nil)
	err := waitFor(timeout, 50*time.Millisecond, func() error {
		if in.Proc.Exited() {
			return errExited
		}
		seen := map[string]int{}
		for i := 0; i < 4*len(names); i++ {
			c := testkit.NewHTTPConn(in.Addr(), 2*time.Second)
			r := c.Do(raw, true)
			c.Close()
			if r.Err != nil || r.Status != 200 {
				return fmt.Errorf("not ready: status %d served by %q err %v", r.Status, r.ServedBy, r.Err)
			}
			seen[r.ServedBy]++
		}
		for _, n := range names {
			if seen[n] == 0 {
				return fmt.Errorf("not served by every server yet: %s got none of %d requests (%v)", n, 4*len(names), seen)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", in.Peer.Name, err, in.Proc.LogTail(1000))
	}
	return nil
}

// step is one planned run.
type step struct {
	sc    *scenario
	peer  *Peer
	round int
}

// Run runs the plan and returns the report (also when some runs failed: their errors are in it).
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Plan.Rounds < 1 {
		o.Plan.Rounds = 1
	}
	o.Threads = max(o.Threads, 1)
	if o.Threads > 1 {
		o.Pin = false
	}
	prog := o.Progress
	if prog == nil {
		prog = io.Discard
	}
	var scs []*scenario
	if len(o.Scenarios) == 0 {
		scs = scenarios()
	} else {
		for _, n := range o.Scenarios {
			s := findScenario(n)
			if s == nil {
				return nil, fmt.Errorf("unknown scenario %q (known: %s)", n, strings.Join(ScenarioNames(), ", "))
			}
			scs = append(scs, s)
		}
	}
	base := o.Peers
	if len(base) == 0 {
		base = PeerNames
	}
	if !slices.Contains(base, "fairlead") {
		base = append([]string{"fairlead"}, base...)
	}
	soft, hard := raiseNoFile()

	rep := &Report{
		Started: time.Now(), Plan: o.Plan, Pinned: o.Pin && taskset() != "", Threads: o.Threads,
		Host: hostInfo(), BenchFDLimit: int(soft), FDHardLimit: int(hard),
	}
	if o.Costs {
		rep.Costs, rep.Strace = true, straceBin()
	}
	peers := map[string]*Peer{}
	peerFor := func(name string) (*Peer, error) {
		if p, ok := peers[name]; ok {
			return p, nil
		}
		p, err := NewPeer(name, o.FairleadBin)
		if err != nil {
			return nil, err
		}
		peers[name] = p
		info := PeerInfo{Name: p.Name, Base: p.Base, Bin: p.Bin, Version: p.Version, Installed: p.Bin != "", Limits: p.Limits}
		rep.Peers = append(rep.Peers, info)
		return p, nil
	}

	// The plan: for each scenario, rounds × peers, peers alternating within a round.
	var steps []step
	for _, sc := range scs {
		names := sc.variants(base)
		for r := 1; r <= o.Plan.Rounds; r++ {
			for _, n := range names {
				p, err := peerFor(n)
				if err != nil {
					return nil, err
				}
				if p.Bin == "" {
					if p.Base == "fairlead" {
						return nil, fmt.Errorf("fairlead binary %q not found (run `make build`)", o.FairleadBin)
					}
					continue
				}
				steps = append(steps, step{sc: sc, peer: p, round: r})
			}
		}
	}
	for _, sc := range scs {
		rep.Scenarios = append(rep.Scenarios, sc.name)
	}

	root, err := os.MkdirTemp("", "fairlead-bench-")
	if err != nil {
		return nil, err
	}
	if o.KeepTemp {
		rep.TempDir = root
	} else {
		defer os.RemoveAll(root)
	}

	certs := newRunCerts(filepath.Join(root, "tls"))
	start := time.Now()
	for i, st := range steps {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(prog, "[%2d/%d %s] %-17s round %d/%d  %-14s ", i+1, len(steps), fmtElapsed(time.Since(start)),
			st.sc.name, st.round, o.Plan.Rounds, st.peer.Name)
		dir := filepath.Join(root, fmt.Sprintf("%03d-%s-%s-r%d", i+1, st.sc.name, st.peer.Name, st.round))
		res := runStep(ctx, o, st, dir, certs)
		rep.Results = append(rep.Results, res)
		if res.Error != "" {
			first, _, _ := strings.Cut(res.Error, "\n")
			fmt.Fprintf(prog, "ERROR %s\n", first)
		} else {
			fmt.Fprintf(prog, "%s (%.1fs)\n", st.sc.brief(res), res.Seconds)
		}
	}
	order := []string{"fairlead", "fairlead-tuned", "haproxy", "haproxy-tuned", "nginx", "caddy"}
	slices.SortStableFunc(rep.Peers, func(a, b PeerInfo) int {
		return slices.Index(order, a.Name) - slices.Index(order, b.Name)
	})
	rep.Finished = time.Now()
	rep.summarize(scs)
	return rep, ctx.Err()
}

// runStep runs one step, turning a panic or an error into Result.Error, and always cleans up.
func runStep(ctx context.Context, o Options, st step, dir string, certs *runCerts) (res *Result) {
	t0 := time.Now()
	rc := &runCtx{ctx: ctx, plan: o.Plan, peer: st.peer, pin: o.Pin, threads: o.Threads, dir: dir, round: st.round, certs: certs, costs: o.Costs}
	defer func() {
		if r := recover(); r != nil {
			res = &Result{Error: fmt.Sprintf("panic: %v", r)}
		}
		for i := len(rc.cleanup) - 1; i >= 0; i-- {
			rc.cleanup[i]()
		}
		res.Scenario, res.Peer, res.Round = st.sc.name, st.peer.Name, st.round
		res.Notes = append(res.Notes, rc.notes...)
		res.Seconds = time.Since(t0).Seconds()
		if res.Metrics == nil {
			res.Metrics = map[string]float64{}
		}
		for k, v := range res.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				delete(res.Metrics, k)
				res.Notes = append(res.Notes, k+": no finite value")
			}
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &Result{Error: err.Error()}
	}
	r, err := st.sc.run(rc)
	if err != nil {
		return &Result{Error: err.Error()}
	}
	return r
}

// brief is the progress summary of a result: its charted metrics (a sized scenario's: every figure, per
// N).
func (sc *scenario) brief(r *Result) string {
	var parts []string
	if sc.sized {
		for _, n := range resultSizes(r.Metrics) {
			var fs []string
			for _, m := range sc.metrics {
				if v, ok := r.Metrics[sizedKey(m.key, n)]; ok {
					fs = append(fs, fmt.Sprintf("%s %s", m.label, m.num(v)))
				}
			}
			parts = append(parts, fmt.Sprintf("N=%d: %s", n, strings.Join(fs, ", ")))
		}
		return strings.Join(parts, "; ")
	}
	for _, m := range sc.metrics {
		v, ok := r.Metrics[m.key]
		if !ok || !(m.chart || m.progress || m.key == "failed" || m.key == "tunnels_lost" || m.key == "split") {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", m.label, m.fmt(v, r.Metrics)))
	}
	return strings.Join(parts, ", ")
}

func fmtElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// hostInfo describes the machine for the report.
func hostInfo() map[string]string {
	h := map[string]string{}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h["loadavg_at_start"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h["kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Cpus_allowed_list:") {
				h["bench_cpus"] = strings.TrimSpace(strings.TrimPrefix(l, "Cpus_allowed_list:"))
			}
		}
	}
	return h
}
