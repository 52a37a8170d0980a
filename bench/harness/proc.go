package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// Process helpers: starting a proxy pinned to a core, stopping its whole process group, and reading what
// the kernel knows about it (resident memory, CPU time, open-file limit) from /proc.

// Proc is a process the harness started, in a process group of its own so that a proxy's workers
// (nginx, HAProxy master-worker) are stopped with it.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // path of the file receiving its stdout and stderr
	done chan struct{}
	err  error // the exit status, valid once done is closed
}

// taskset returns the taskset binary, "" when it is missing (pinning is then skipped).
func taskset() string {
	p, err := exec.LookPath("taskset")
	if err != nil {
		return ""
	}
	return p
}

// pinned prefixes argv with "taskset -c CORE" when core >= 0 and taskset exists.
func pinned(core int, argv []string) []string {
	if core < 0 {
		return argv
	}
	ts := taskset()
	if ts == "" {
		return argv
	}
	return append([]string{ts, "-c", strconv.Itoa(core)}, argv...)
}

// startProc starts argv (pinned to core unless core < 0) with extra environment, output to logPath.
func startProc(name string, core int, env []string, logPath string, argv ...string) (*Proc, error) {
	argv = pinned(core, argv)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id (taskset execs the command, so it is the proxy's own pid).
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group. Only the group
// this harness created is signalled.
func (p *Proc) Stop(grace time.Duration) {
	pgid := p.Pid()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	// Workers left behind (an old HAProxy worker still draining tunnels) go too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// LogTail returns the last n bytes of the process log, for error messages.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// Tree returns pid and all its descendants, found through /proc/*/stat.
func Tree(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(c); ok {
			children[pp] = append(children[pp], c)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out) && i < 10000; i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after the command name.
func statFields(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

func ppid(pid int) (int, bool) {
	f, ok := statFields(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// RSS returns the summed VmRSS (bytes) of the process tree rooted at pid.
func RSS(pid int) int64 {
	var total int64
	for _, p := range Tree(pid) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "VmRSS:") {
				fs := strings.Fields(line)
				if len(fs) >= 2 {
					kb, _ := strconv.ParseInt(fs[1], 10, 64)
					total += kb * 1024
				}
				break
			}
		}
		f.Close()
	}
	return total
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// CPUTime returns the user+system CPU time consumed so far by the process tree rooted at pid.
func CPUTime(pid int) time.Duration {
	var ticks int64
	for _, p := range Tree(pid) {
		f, ok := statFields(p)
		if !ok || len(f) < 13 {
			continue
		}
		// fields after ")" start at field 3 (state); utime is field 14, stime 15.
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// FDLimit returns the soft "Max open files" limit of pid, 0 if unknown.
func FDLimit(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			fs := strings.Fields(strings.TrimPrefix(line, "Max open files"))
			if len(fs) > 0 {
				n, _ := strconv.Atoi(fs[0])
				return n
			}
		}
	}
	return 0
}

// raiseNoFile raises this process's soft open-file limit to the hard limit. Calling Setrlimit also makes
// the Go runtime pass the raised limit on to children (proxies, wrk) instead of the original one.
func raiseNoFile() (soft, hard uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0
	}
	rl.Cur = rl.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	return rl.Cur, rl.Max
}

// fdCost is what a scenario's units (idle tunnels, client connections) cost in open files, in the bench
// process (its load generators and the simulated servers) and in the proxy: so many descriptors per unit,
// and so many for the rest (listeners, upstream connections at a cap, logs, the runtime's own).
type fdCost struct {
	unit                 string // singular: "tunnel", "client connection"
	benchPer, benchFixed int
	proxyPer, proxyFixed int
}

// fitFDLimits returns n lowered to what the bench process's open-file limit (soft) and the proxy's (at
// most hard: the proxies inherit this process's limit raised to hard, see raiseNoFile) allow for units
// costing c, and a note for each lowering saying which limit and why ("lowered from 8000 to 7500: …").
func fitFDLimits(n int, soft, hard uint64, c fdCost) (int, []string) {
	var notes []string
	lower := func(limit uint64, whose string, per, fixed int) {
		if per <= 0 {
			return
		}
		if lim := max((int(limit)-fixed)/per, 0); n > lim {
			notes = append(notes, fmt.Sprintf("lowered from %d to %d: %s open-file limit is %d (%d per %s, %d for the rest)",
				n, lim, whose, limit, per, c.unit, fixed))
			n = lim
		}
	}
	lower(soft, "the bench process's", c.benchPer, c.benchFixed)
	lower(hard, "the proxy's", c.proxyPer, c.proxyFixed)
	return n, notes
}

// fitFDLimits lowers n (the scenario's name for it: "N", "client connections") to what the open-file
// limits allow for units costing c (see fitFDLimits), noting each lowering in the result.
func (rc *runCtx) fitFDLimits(name string, n int, c fdCost) int {
	soft, hard := raiseNoFile()
	n, notes := fitFDLimits(n, soft, hard, c)
	for _, s := range notes {
		rc.note("%s %s", name, s)
	}
	return n
}

// freePort returns a free TCP port on 127.0.0.1 that no other process will be handed while this one
// runs (a peer is started on it after the check; see testkit.FreePort).
func freePort() (int, error) { return testkit.FreePort() }

// establishedTo counts ESTABLISHED TCP sockets whose remote port is one of ports, with `ss -tn`: the
// proxy's upstream connections (the simulated servers' own sockets have these as local ports).
func establishedTo(ports []int) (int, error) {
	if len(ports) == 0 {
		return 0, nil
	}
	var filter []string
	for _, p := range ports {
		filter = append(filter, fmt.Sprintf("dport = :%d", p))
	}
	out, err := exec.Command("ss", "-Htn", "state", "established", "( "+strings.Join(filter, " or ")+" )").Output()
	if err != nil {
		return 0, fmt.Errorf("ss: %w", err)
	}
	return bytes.Count(out, []byte{'\n'}), nil
}

// portOf returns the port of a host:port address.
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// lookBin finds a binary on PATH or as a path; "" if missing.
func lookBin(name string) string {
	if strings.ContainsRune(name, filepath.Separator) {
		if st, err := os.Stat(name); err == nil && !st.IsDir() {
			abs, _ := filepath.Abs(name)
			return abs
		}
		return ""
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

// waitFor polls cond every step until it returns nil or timeout passes; it returns the last error. It
// gives up at once when cond returns errExited (the process waited for has ended). It is not
// testkit.Eventually, which fails a test: the harness is a program, and its caller reports why a peer
// never became ready (the last error) in the run's notes.
func waitFor(timeout, step time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(step)
	}
}

var errExited = errors.New("process exited")

// dialOK reports whether addr accepts a TCP connection.
func dialOK(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// SyncBuffer collects a child process's output while a test (or the harness) reads it.
type SyncBuffer = testkit.SyncBuffer
