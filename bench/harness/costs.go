package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Costs per request (Options.Costs, fairlead-bench -costs): for http-small and https-small-h2, after the
// ordinary measurement of each peer, two extra load phases of costsPhase each, with the same load (wrk,
// or the Go generator where wrk is not used; h2load):
//
//  1. CPU, context switches and TCP segments: the proxy's user+system CPU time (/proc/PID/stat, the
//     whole process tree), its threads' voluntary and nonvoluntary context switches
//     (/proc/PID/task/TID/status, every thread of the tree) and the host's TCP segments (/proc/net/snmp
//     Tcp: OutSegs, InSegs: every process on the host, load generator and simulated servers included),
//     each divided by the requests completed;
//  2. system calls: `strace -c -f -p PID…` attached to the proxy's processes for the phase (stopped with
//     SIGINT), calls per system call divided by the requests completed. strace slows the proxy down a
//     lot, which is why this is a phase of its own; only the counts are used, never the times.
//
// All figures go into the scenario's result as cost_* metrics (so into the JSON) and into a Markdown
// table of their own per scenario (Report.writeCosts). A run without -costs does none of this.

// costsPhase is the length of each extra phase.
const costsPhase = 3 * time.Second

// costsScenarios are the scenarios measured with -costs.
var costsScenarios = []string{"http-small", "https-small-h2"}

// Metric keys of the costs (values per request unless noted).
const (
	costCPU       = "cost_cpu_us_per_req"
	costReqS      = "cost_req_s"        // req/s of the CPU phase
	costCtxSw     = "cost_ctx_switches" // voluntary + nonvoluntary, every thread of the proxy
	costCtxVol    = "cost_ctx_switches_voluntary"
	costCtxInvol  = "cost_ctx_switches_nonvoluntary"
	costOutSegs   = "cost_tcp_out_segs" // host-wide
	costInSegs    = "cost_tcp_in_segs"  // host-wide
	costStraceRS  = "cost_strace_req_s" // req/s under strace
	costSyscalls  = "cost_syscalls"
	costEpollWait = "cost_epoll_waits"
	costSysPrefix = "cost_sys_" // + syscall name
)

// straceBin is the strace binary, "" when it is not installed (never installed by the bench).
func straceBin() string {
	p, err := exec.LookPath("strace")
	if err != nil {
		return ""
	}
	return p
}

// costLoad runs one phase of the measurement's load for dur and returns the requests completed.
type costLoad func(dur time.Duration) (float64, error)

// measureCosts runs the two phases against in and adds the cost_* metrics to m.
func measureCosts(rc *runCtx, in *Instance, load costLoad, m map[string]float64) error {
	// Phase 1: CPU, context switches and TCP segments.
	out0, in0, err := tcpSegs()
	if err != nil {
		return err
	}
	sw0 := ctxSwitches(in.Pid())
	cpu0, t0 := cpuTicks(in.Pid()), time.Now()
	n, err := load(costsPhase)
	if err != nil {
		return fmt.Errorf("costs, CPU phase: %w", err)
	}
	cpu1, el := cpuTicks(in.Pid()), time.Since(t0)
	sw1 := ctxSwitches(in.Pid())
	out1, in1, err := tcpSegs()
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("costs, CPU phase: no request completed")
	}
	m[costReqS] = n / el.Seconds()
	m[costCPU] = float64(cpu1-cpu0) * 1e6 / clockTicks / n
	vol, invol := sw1.voluntary-sw0.voluntary, sw1.nonvoluntary-sw0.nonvoluntary
	m[costCtxSw] = float64(vol+invol) / n
	m[costCtxVol] = float64(vol) / n
	m[costCtxInvol] = float64(invol) / n
	m[costOutSegs] = float64(out1-out0) / n
	m[costInSegs] = float64(in1-in0) / n

	// Phase 2: system calls under strace.
	st := straceBin()
	if st == "" {
		rc.note("costs: strace not installed: no system call counts")
		return nil
	}
	calls, n, el, err := straceCounts(rc.ctx, st, Tree(in.Pid()), filepath.Join(rc.dir, "strace.txt"), load)
	if err != nil {
		rc.note("costs: strace phase failed: %v", err)
		return nil
	}
	if n <= 0 {
		rc.note("costs: strace phase: no request completed")
		return nil
	}
	m[costStraceRS] = n / el.Seconds()
	var total, epoll float64
	for name, c := range calls {
		total += float64(c)
		if strings.HasPrefix(name, "epoll_wait") || strings.HasPrefix(name, "epoll_pwait") {
			epoll += float64(c)
		}
		m[costSysPrefix+name] = float64(c) / n
	}
	m[costSyscalls] = total / n
	m[costEpollWait] = epoll / n
	return nil
}

// cpuTicks is the user+system time, in clock ticks, of the process tree rooted at pid.
func cpuTicks(pid int) int64 {
	return int64(CPUTime(pid) * clockTicks / time.Second)
}

// ctxSwitchCount is a count of context switches.
type ctxSwitchCount struct {
	voluntary, nonvoluntary int64
}

// ctxSwitches sums the context switches of every thread of every process in the tree rooted at pid
// (/proc/PID/task/TID/status: /proc/PID/status alone counts only the main thread). A thread that exits
// between two readings takes its switches with it; the proxies' threads live as long as they do.
func ctxSwitches(pid int) ctxSwitchCount {
	var sum ctxSwitchCount
	for _, p := range Tree(pid) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", p, t.Name()))
			if err != nil {
				continue
			}
			if c, ok := parseCtxSwitches(string(b)); ok {
				sum.voluntary += c.voluntary
				sum.nonvoluntary += c.nonvoluntary
			}
		}
	}
	return sum
}

// parseCtxSwitches reads the two context switch counters of a /proc/PID/task/TID/status:
//
//	voluntary_ctxt_switches:	150
//	nonvoluntary_ctxt_switches:	545
//
// ok is false unless both are there.
func parseCtxSwitches(status string) (c ctxSwitchCount, ok bool) {
	got := 0
	for _, l := range strings.Split(status, "\n") {
		name, val, found := strings.Cut(l, ":")
		if !found {
			continue
		}
		var dst *int64
		switch name {
		case "voluntary_ctxt_switches":
			dst = &c.voluntary
		case "nonvoluntary_ctxt_switches":
			dst = &c.nonvoluntary
		default:
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return ctxSwitchCount{}, false
		}
		*dst = v
		got++
	}
	return c, got == 2
}

// tcpSegs reads the host's TCP segment counters (Tcp: OutSegs, InSegs) from /proc/net/snmp.
func tcpSegs() (out, in int64, err error) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, 0, err
	}
	var hdr []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "Tcp:") {
			continue
		}
		f := strings.Fields(l)
		if hdr == nil {
			hdr = f
			continue
		}
		got := 0
		for i := 1; i < len(f) && i < len(hdr); i++ {
			switch hdr[i] {
			case "OutSegs":
				out, _ = strconv.ParseInt(f[i], 10, 64)
				got++
			case "InSegs":
				in, _ = strconv.ParseInt(f[i], 10, 64)
				got++
			}
		}
		if got == 2 {
			return out, in, nil
		}
		break
	}
	return 0, 0, fmt.Errorf("/proc/net/snmp: no Tcp OutSegs/InSegs")
}

var reStraceAttached = regexp.MustCompile(`Process \d+ attached`)

// straceCounts attaches `strace -c -f` to pids, runs load for costsPhase, stops strace with SIGINT and
// returns its calls per system call, the requests completed and the phase's length.
func straceCounts(ctx context.Context, st string, pids []int, outPath string, load costLoad) (map[string]int64, float64, time.Duration, error) {
	args := []string{"-c", "-f", "-o", outPath}
	for _, p := range pids {
		args = append(args, "-p", strconv.Itoa(p))
	}
	cmd := exec.Command(st, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, 0, err
	}
	// Wait until strace has attached (one "Process N attached" line per thread), at most 5 s.
	attached := make(chan struct{})
	var errText strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			l := sc.Text()
			if reStraceAttached.MatchString(l) {
				if !once {
					once = true
					close(attached)
				}
			} else if errText.Len() < 2000 {
				errText.WriteString(l + "\n")
			}
		}
		if !once {
			close(attached)
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-attached:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	// Give strace a moment to attach to the remaining threads.
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-waited:
		return nil, 0, 0, fmt.Errorf("strace exited before the phase: %v: %s", err, strings.TrimSpace(errText.String()))
	default:
	}
	t0 := time.Now()
	n, lerr := load(costsPhase)
	el := time.Since(t0)
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-waited
		return nil, 0, 0, fmt.Errorf("strace did not stop on SIGINT")
	}
	if lerr != nil {
		return nil, 0, 0, lerr
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		return nil, 0, 0, err
	}
	calls := parseStraceSummary(string(b))
	if len(calls) == 0 {
		return nil, 0, 0, fmt.Errorf("no system call counted: %s", strings.TrimSpace(errText.String()))
	}
	return calls, n, el, nil
}

// parseStraceSummary reads the calls per system call from `strace -c` output:
//
//	% time     seconds  usecs/call     calls    errors syscall
//	------ ----------- ----------- --------- --------- ----------------
//	 45.00    0.001234          12       100        10 read
//	...
//	100.00    0.002000           6       300        20 total
func parseStraceSummary(s string) map[string]int64 {
	calls := map[string]int64{}
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || len(f) > 6 {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		name := f[len(f)-1]
		if name == "total" {
			continue
		}
		c, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		calls[name] += c
	}
	return calls
}

// costRow is one figure of the costs table.
type costRow struct {
	key, label, format, explain string
}

var costRows = []costRow{
	{costCPU, "proxy CPU µs / request", "%.1f", "user+system CPU time of the proxy's processes (/proc/PID/stat) during the CPU phase, divided by the requests completed in it"},
	{costReqS, "req/s (CPU phase)", "", "throughput of the CPU phase (same load as the measurement, no tracing)"},
	{costCtxSw, "context switches / request", "%.3f", "voluntary + nonvoluntary context switches of every thread of the proxy's processes (/proc/PID/task/*/status) during the CPU phase, divided by its requests: a proxy that hands a request from one thread to another, waking it, switches more often than one that serves it on the thread that read it"},
	{costCtxVol, "voluntary switches / request", "%.3f", "of these, the switches where a thread gave up its core to wait (for events, a lock, a futex): each sleep of a thread that is woken again"},
	{costCtxInvol, "nonvoluntary switches / request", "%.3f", "of these, the switches where the kernel preempted a runnable thread (its time slice was up and another task wanted the core)"},
	{costOutSegs, "TCP segments out / request (host)", "%.2f", "/proc/net/snmp Tcp OutSegs delta during the CPU phase, divided by its requests: the whole host (wrk, simulated servers and proxy, both legs of every loopback connection)"},
	{costInSegs, "TCP segments in / request (host)", "%.2f", "the same for InSegs (on loopback every segment sent is received: ≈ OutSegs)"},
	{costStraceRS, "req/s under strace", "", "throughput of the strace phase (strace slows the proxy down; only its counts are used)"},
	{costSyscalls, "system calls / request", "%.2f", "every system call of the proxy's processes counted by `strace -c -f` during the strace phase, divided by its requests (reads and writes per request are reliable; calls driven by time, such as the Go runtime's `nanosleep` or epoll waits, are distorted by the slowdown)"},
	{costEpollWait, "epoll waits / request", "%.3f", "epoll_wait + epoll_pwait (+ epoll_pwait2) calls / request: how often the event loop went back to the kernel for events"},
}

// writeCosts writes a costs table (peers side by side) for each scenario whose costs the run measured.
func (rep *Report) writeCosts(w io.Writer) {
	if !rep.Costs {
		return
	}
	for _, sc := range costsScenarios {
		if slices.Contains(rep.Scenarios, sc) {
			rep.writeScenarioCosts(w, sc)
		}
	}
}

func (rep *Report) writeScenarioCosts(w io.Writer, costsScenario string) {
	ss := rep.summaryOf(costsScenario)
	fmt.Fprintf(w, "## Costs per request (%s, -costs)\n\n", costsScenario)
	var peers []PeerSummary
	for _, ps := range ss.Peers {
		if _, ok := ps.Values[costCPU]; ok {
			peers = append(peers, ps)
		}
	}
	if len(peers) == 0 {
		fmt.Fprintf(w, "No costs measured (%s not run, or failed).\n\n", costsScenario)
		return
	}
	fmt.Fprintf(w, "After each peer's measurement, two extra phases of %s with the same load: CPU, context switches and TCP segments, then "+
		"system calls under `strace -c -f`. Median over rounds.", costsPhase)
	if rep.Strace == "" {
		fmt.Fprint(w, " **strace not installed**: no system call counts.")
	}
	fmt.Fprint(w, "\n\n")
	hdr := "| figure |"
	sep := "|---|"
	for _, ps := range peers {
		hdr += " " + ps.Peer + " |"
		sep += "---|"
	}
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	row := func(key, label, format string) {
		cells := ""
		any := false
		for _, ps := range peers {
			v, ok := ps.Values[key]
			if !ok {
				cells += " — |"
				continue
			}
			any = true
			cells += " " + fmtNum(v.Median, format) + " |"
		}
		if any {
			fmt.Fprintf(w, "| %s |%s\n", label, cells)
		}
	}
	for _, r := range costRows {
		row(r.key, r.label, r.format)
	}
	// System calls by kind: every kind of at least 0.01 per request for some peer, most frequent first.
	top := map[string]float64{}
	for _, ps := range peers {
		for k, v := range ps.Values {
			if name, ok := strings.CutPrefix(k, costSysPrefix); ok && v.Median >= 0.01 {
				top[name] = max(top[name], v.Median)
			}
		}
	}
	names := make([]string, 0, len(top))
	for n := range top {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if top[names[i]] != top[names[j]] {
			return top[names[i]] > top[names[j]]
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		row(costSysPrefix+n, "`"+n+"` / request", "%.3f")
	}
	fmt.Fprintln(w)
	for _, r := range costRows {
		fmt.Fprintf(w, "- **%s**: %s.\n", r.label, r.explain)
	}
	if len(names) > 0 {
		fmt.Fprintln(w, "- **`name` / request**: calls of that system call during the strace phase / requests (kinds under 0.01 per request for every peer left out; all are in the JSON as `cost_sys_<name>`).")
	}
	fmt.Fprintln(w)
}

// costsWanted reports whether rc should measure costs for the scenario named sc.
func (rc *runCtx) costsWanted(sc string) bool { return rc.costs && slices.Contains(costsScenarios, sc) }
