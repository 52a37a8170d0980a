package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/fairlead/fairlead/bench/testkit"
)

// upgrade: a binary upgrade under load (issue #38). N devices (Plan.UpgradeDevices: as many as the
// open-file limits allow, 8,000 at most; quick 1,000) each hold a WebSocket tunnel through the proxy to
// the connection servers and send a small numbered message every Plan.UpgradeEvery (each device at its
// own phase), checking that its echo comes back, whole and in order; beside them a steady paced load of
// keep-alive GETs and a stream of new connections (one GET each). After Plan.UpgradeWarmup the proxy's
// binary is upgraded once, the way its documentation says:
//
//   - fairlead: the binary is installed again over the one it was started from (the same file, copied
//     and renamed into place, as `make install` does) and the process gets SIGUSR2; its PID file (-pidfile)
//     names the new process once that serves.
//   - HAProxy: master-worker mode (-W), SIGUSR2 to the master: a seamless reload (the listeners pass to
//     the new worker through the stats socket's expose-fd listeners); the old worker keeps its tunnels
//     until hard-stop-after (Plan.UpgradeHardStop).
//   - nginx: USR2 to the master (a new master on the new binary, inheriting the listeners), then WINCH to
//     the old master (its workers stop gracefully: they finish their connections, tunnels included) and
//     QUIT (the old master goes once its workers have).
//
// Counted from the signal on: tunnels dropped (a device saw its tunnel close, or an echo missing, late by
// more than the echo timeout, or not the message it sent: a duplicate, an older one, another's), devices
// reconnected, connection attempts that failed (refused, reset, ...), HTTP requests failed; the time
// until every old process is gone (bounded by Plan.UpgradeBound: beyond it "> bound"), and the peak
// resident memory of the old and of the new processes while both exist. Caddy has no binary upgrade
// (`caddy reload` only reloads a configuration) and is not run.

func upgradeScenario() *scenario {
	return &scenario{
		name: "upgrade",
		summary: "binary upgrade under load: N devices (8,000 or what the fd limits allow; quick 1,000) each hold a WebSocket tunnel and echo a " +
			"numbered message every few seconds, plus paced keep-alive GETs and a stream of new connections; the proxy's binary is upgraded once " +
			"(fairlead SIGUSR2, HAProxy master-worker SIGUSR2 with hard-stop-after, nginx USR2 + WINCH + QUIT): tunnels dropped, devices " +
			"reconnected, connection attempts and GETs failed, time until the old process is gone, RSS of old and new",
		metrics: []metric{
			{key: "dropped", label: "tunnels dropped", better: "lower", progress: true},
			{key: "reconnected", label: "devices reconnected", better: "lower", progress: true},
			{key: "attempts_failed", label: "new connections failed (refused, reset, …)", better: "lower", progress: true},
			{key: "http_failed", label: "HTTP requests failed", better: "lower", progress: true},
			{key: "old_gone_s", label: "old process gone after s", better: "lower", format: "%.1f", needs: "old_gone", progress: true},
			{key: "old_sockets", label: "sockets still held by old processes at the bound"},
			{key: "new_s", label: "new process serving after s", format: "%.2f"},
			{key: "old_rss_mib", label: "old RSS MiB (peak)", format: "%.1f"},
			{key: "new_rss_mib", label: "new RSS MiB (peak)", format: "%.1f"},
			{key: "rss_before_mib", label: "RSS before MiB", format: "%.1f"},
			{key: "devices", label: "devices"},
			{key: "echoes", label: "echoes checked"},
			{key: "attempts", label: "connection attempts"},
			{key: "requests", label: "HTTP requests"},
			{key: "stale_retries", label: "GETs resent on a fresh connection"},
		},
		variants: func(base []string) []string {
			var out []string
			for _, b := range base {
				if b == "fairlead" || b == "haproxy" || b == "nginx" {
					out = append(out, b)
				}
			}
			return out
		},
		run: runUpgrade,
	}
}

// installExe copies the executable from to to as an install does: into a new file renamed over to, so
// that a process running the old file keeps it whole.
func installExe(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".new"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

// The devices' accounting.

// echoVerdict is what a device makes of what came back for its message.
type echoVerdict int

const (
	echoOK      echoVerdict = iota
	echoClosed              // the tunnel closed (or failed) while sending or waiting
	echoMissing             // nothing came back within the echo timeout
	echoWrong               // something else came back: an older message (a duplicate), a later one, another device's
)

func (v echoVerdict) String() string {
	return [...]string{"ok", "closed", "missing", "wrong"}[v]
}

// deviceMessage is device id's message number seq.
func deviceMessage(buf []byte, id, seq int) []byte {
	return fmt.Appendf(buf[:0], "upgrade-%d-%d", id, seq)
}

// judgeEcho judges got, what came back after device id sent its message number seq.
func judgeEcho(id, seq int, got []byte) echoVerdict {
	var want [32]byte
	if bytes.Equal(got, deviceMessage(want[:], id, seq)) {
		return echoOK
	}
	return echoWrong
}

// echoErrVerdict judges a failed send or wait: a timeout is a missing echo, anything else a closed tunnel.
func echoErrVerdict(err error) echoVerdict {
	if testkit.ErrKind(err) == "timeout" {
		return echoMissing
	}
	return echoClosed
}

// deviceTally counts what every device saw.
type deviceTally struct {
	echoes, closed, missing, wrong, reconnected, redialFailed atomic.Int64
}

// deviceCounts is a snapshot of a deviceTally.
type deviceCounts struct {
	Echoes, Closed, Missing, Wrong, Reconnected, RedialFailed int64
}

// Dropped is the tunnels dropped: closed, missing an echo or echoing something else.
func (c deviceCounts) Dropped() int64 { return c.Closed + c.Missing + c.Wrong }

func (c deviceCounts) sub(o deviceCounts) deviceCounts {
	return deviceCounts{c.Echoes - o.Echoes, c.Closed - o.Closed, c.Missing - o.Missing, c.Wrong - o.Wrong,
		c.Reconnected - o.Reconnected, c.RedialFailed - o.RedialFailed}
}

func (t *deviceTally) snapshot() deviceCounts {
	return deviceCounts{t.echoes.Load(), t.closed.Load(), t.missing.Load(), t.wrong.Load(), t.reconnected.Load(), t.redialFailed.Load()}
}

func (t *deviceTally) count(v echoVerdict) {
	switch v {
	case echoOK:
		t.echoes.Add(1)
	case echoClosed:
		t.closed.Add(1)
	case echoMissing:
		t.missing.Add(1)
	case echoWrong:
		t.wrong.Add(1)
	}
}

// upgradeDevice is one device: it holds a tunnel, sends a numbered message every period at its own
// phase and checks the echo; a dropped tunnel is dialled again after a pause (redialing every second
// while that fails).
type upgradeDevice struct {
	id   int
	addr string
	conn *websocket.Conn
	seq  int
	buf  []byte
}

func (d *upgradeDevice) dial(timeout time.Duration) error {
	cn, err := wsDial(d.addr, "/Thingworx/WS", "upgrade-"+strconv.Itoa(d.id), timeout, 512)
	if err != nil {
		return err
	}
	d.conn = cn
	return nil
}

// echo sends the next message and judges what comes back within timeout.
func (d *upgradeDevice) echo(timeout time.Duration) echoVerdict {
	d.seq++
	d.buf = deviceMessage(d.buf, d.id, d.seq)
	_ = d.conn.SetWriteDeadline(time.Now().Add(timeout))
	if err := d.conn.WriteMessage(websocket.BinaryMessage, d.buf); err != nil {
		return echoErrVerdict(err)
	}
	_ = d.conn.SetReadDeadline(time.Now().Add(timeout))
	_, got, err := d.conn.ReadMessage()
	if err != nil {
		return echoErrVerdict(err)
	}
	return judgeEcho(d.id, d.seq, got)
}

// run echoes every period (first after phase) until stop, then once more (a tunnel dropped at the very
// end is counted too) and closes the tunnel.
func (d *upgradeDevice) run(period, phase, timeout time.Duration, t *deviceTally, stop <-chan struct{}) {
	defer func() {
		if d.conn != nil {
			d.conn.Close()
		}
	}()
	next := time.NewTimer(phase)
	defer next.Stop()
	for {
		final := false
		select {
		case <-stop:
			final = true
		case <-next.C:
			next.Reset(period)
		}
		if d.conn != nil {
			v := d.echo(timeout)
			t.count(v)
			if v != echoOK {
				d.conn.Close()
				d.conn = nil
			}
		}
		if final {
			return
		}
		if d.conn == nil && !d.redial(timeout, t, stop) {
			return
		}
	}
}

// redial dials again after a pause, every second while that fails, until stop (false).
func (d *upgradeDevice) redial(timeout time.Duration, t *deviceTally, stop <-chan struct{}) bool {
	wait := 200 * time.Millisecond
	for {
		select {
		case <-stop:
			return false
		case <-time.After(wait):
		}
		if err := d.dial(timeout); err == nil {
			t.reconnected.Add(1)
			return true
		}
		t.redialFailed.Add(1)
		wait = time.Second
	}
}

// The stream of new connections.

// attemptLog records the outcome of every new connection's GET: its end and its failure kind
// (testkit.ErrKind, or status_NNN; "" for a 200).
type attemptLog struct {
	mu   sync.Mutex
	ends []time.Time
	kind []string
}

func (a *attemptLog) add(end time.Time, kind string) {
	a.mu.Lock()
	a.ends = append(a.ends, end)
	a.kind = append(a.kind, kind)
	a.mu.Unlock()
}

// since counts the attempts that ended at or after t0, and their failures by kind.
func (a *attemptLog) since(t0 time.Time) (n int, failed map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	failed = map[string]int{}
	for i, e := range a.ends {
		if e.Before(t0) {
			continue
		}
		n++
		if a.kind[i] != "" {
			failed[a.kind[i]]++
		}
	}
	return n, failed
}

// attempt opens a new connection to addr, sends one GET of path with Connection: close and reads the
// answer's head: "" for a 200, else the failure's kind.
func attempt(addr, path string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return testkit.ErrKind(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr); err != nil {
		return testkit.ErrKind(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return testkit.ErrKind(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "status_" + strconv.Itoa(resp.StatusCode)
	}
	if err != nil {
		return testkit.ErrKind(err)
	}
	return ""
}

// startAttempts opens about rate new connections a second (over 4 workers, paced) until stop.
func startAttempts(addr string, rate int, log *attemptLog, stop <-chan struct{}, wg *sync.WaitGroup) {
	const workers = 4
	every := time.Duration(workers) * time.Second / time.Duration(max(rate, 1))
	for w := range workers {
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			time.Sleep(time.Duration(w) * every / workers)
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				log.add(time.Now(), attempt(addr, readyPath, 5*time.Second))
			}
		})
	}
}

// The proxy's processes.

// procInfo is what /proc/PID/stat says of a process.
type procInfo struct {
	pid, ppid, pgrp int
	comm, state     string
}

// parseStat parses a /proc/PID/stat line.
func parseStat(b []byte) (procInfo, bool) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return procInfo{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[close+1:]))
	if len(f) < 3 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procInfo{}, false
	}
	return procInfo{pid: pid, ppid: ppid, pgrp: pgrp, comm: string(b[open+1 : close]), state: f[0]}, true
}

// live reports whether the process runs: a zombie (Z; orphans of an upgrade are reparented to a PID 1
// that may not reap them) or a dead one (X) has gone.
func (p procInfo) live() bool { return p.state != "Z" && p.state != "X" }

// groupProcs lists the live processes of process group pgrp named comm (the proxy's own: not a
// launcher or taskset), ascending. Every process of a proxy stays in the group the harness started it
// in (Setpgid), whoever its parent becomes during an upgrade.
func groupProcs(pgrp int, comm string) []procInfo {
	var out []procInfo
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(b); ok && p.pgrp == pgrp && p.comm == comm && p.live() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// splitOldNew divides the processes now into those of before (old) and the others (new), leaving out
// keep (HAProxy's master, which re-executes itself in place: counted with the new).
func splitOldNew(before []int, now []procInfo, keep int) (old, new []int) {
	for _, p := range now {
		if p.pid != keep && slices.Contains(before, p.pid) {
			old = append(old, p.pid)
		} else {
			new = append(new, p.pid)
		}
	}
	return old, new
}

// procRSS is the VmRSS of one process in bytes (0 once it is gone).
func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				kb, _ := strconv.ParseInt(fs[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

func sumRSS(pids []int) int64 {
	var t int64
	for _, p := range pids {
		t += procRSS(p)
	}
	return t
}

// procTitle is a process's command line as it shows it (nginx: "nginx: worker process is shutting
// down"), up to its first option.
func procTitle(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	t, _, _ := strings.Cut(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), " -")
	return strings.TrimSpace(t)
}

// socketsOf counts the sockets a process holds open (its tunnels' two ends, connections, listeners).
func socketsOf(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// readPIDFile reads a PID file, 0 without one.
func readPIDFile(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// upgrader is one peer's binary upgrade.
type upgrader struct {
	in   *Instance
	comm string // the proxy's process name
	pgrp int
	// master is the process that stays through the upgrade (HAProxy's master), 0 for none.
	master int
	// oldMain is the process that gets the signal (fairlead's process, nginx's master).
	oldMain int
	before  []int
}

func newUpgrader(in *Instance) (*upgrader, error) {
	u := &upgrader{in: in, comm: in.Peer.Base, pgrp: in.Pid()}
	for _, p := range groupProcs(u.pgrp, u.comm) {
		u.before = append(u.before, p.pid)
	}
	switch in.Peer.Base {
	case "fairlead":
		u.oldMain = readPIDFile(in.Setup.PIDFile("fairlead"))
	case "nginx":
		u.oldMain = readPIDFile(in.Setup.PIDFile("nginx"))
	case "haproxy":
		u.master, u.oldMain = in.Pid(), in.Pid()
	default:
		return nil, fmt.Errorf("%s has no binary upgrade", in.Peer.Name)
	}
	if u.oldMain == 0 || !slices.Contains(u.before, u.oldMain) {
		return nil, fmt.Errorf("%s: main process %d not among its processes %v", in.Peer.Name, u.oldMain, u.before)
	}
	return u, nil
}

// signal starts the upgrade: fairlead's binary installed again and SIGUSR2; HAProxy's master SIGUSR2
// once it is settled (haproxySettled); nginx's master USR2.
func (u *upgrader) signal() error {
	switch u.in.Peer.Base {
	case "fairlead":
		if err := installExe(u.in.Peer.Bin, u.in.Setup.FairleadExe()); err != nil {
			return err
		}
	case "haproxy":
		if err := waitFor(10*time.Second, 20*time.Millisecond, func() error {
			if !haproxySettled(u.master) {
				return fmt.Errorf("HAProxy's master %d not in wait mode with a SIGUSR2 handler", u.master)
			}
			return nil
		}); err != nil {
			return err
		}
	case "nginx":
		// nginx ignores USR2 while its parent is the one it had at start: wait until the launcher's
		// subshell has left it (its parent is then outside the group: PID 1 or a subreaper).
		if err := waitFor(10*time.Second, 20*time.Millisecond, func() error {
			if parentInGroup(u.oldMain, u.pgrp) {
				return fmt.Errorf("nginx's master %d still has its launcher as parent", u.oldMain)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return syscall.Kill(u.oldMain, syscall.SIGUSR2)
}

// parentInGroup reports whether pid's parent is in process group pgrp.
func parentInGroup(pid, pgrp int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	p, ok := parseStat(b)
	if !ok {
		return false
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.ppid))
	if err != nil {
		return false
	}
	pp, ok := parseStat(b)
	return ok && pp.pgrp == pgrp
}

// haproxySettled reports whether HAProxy's master (2.6) is ready for a reload. After starting its worker
// the master executes itself again in "wait mode" (HAPROXY_MWORKER_WAIT_ONLY=1 in its environment); a
// SIGUSR2 that comes before that one has installed its handler kills it (the default action) or is lost
// (seen here, a few times in ten, even after "Loading success").
func haproxySettled(pid int) bool {
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	waiting := slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool {
		return string(kv) == "HAPROXY_MWORKER_WAIT_ONLY=1"
	})
	if !waiting {
		return false
	}
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return catches(st, syscall.SIGUSR2)
}

// catches reports whether the SigCgt line of a /proc/PID/status says the process catches sig.
func catches(status []byte, sig syscall.Signal) bool {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && sig >= 1 && sig <= 64 && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// newServing reports whether the new process serves: fairlead's PID file names another live process;
// HAProxy has a worker that was not there before; nginx's PID file names a new master that has a worker.
func (u *upgrader) newServing() bool {
	now := groupProcs(u.pgrp, u.comm)
	_, fresh := splitOldNew(u.before, now, u.master)
	switch u.in.Peer.Base {
	case "fairlead":
		pid := readPIDFile(u.in.Setup.PIDFile("fairlead"))
		return pid != u.oldMain && slices.Contains(fresh, pid)
	case "haproxy":
		return slices.ContainsFunc(fresh, func(p int) bool { return p != u.master })
	case "nginx":
		pid := readPIDFile(u.in.Setup.PIDFile("nginx"))
		return pid != u.oldMain && slices.Contains(fresh, pid) &&
			slices.ContainsFunc(now, func(p procInfo) bool { return p.ppid == pid })
	}
	return false
}

// retire is nginx's second step, once the new master serves: WINCH to the old master (its workers stop
// gracefully) and QUIT (it goes once they have).
func (u *upgrader) retire() error {
	if u.in.Peer.Base != "nginx" {
		return nil
	}
	if err := syscall.Kill(u.oldMain, syscall.SIGWINCH); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	return syscall.Kill(u.oldMain, syscall.SIGQUIT)
}

// switchWatch is what the watch of a switch saw.
type switchWatch struct {
	newAt, goneAt  time.Duration // since the signal; 0: not seen
	oldRSS, newRSS int64         // peaks
	samples        int
	// oldLeft are the old processes still there when the watch ended (at the bound), and what each is
	// (its title and the sockets it held then).
	oldLeft     []int
	oldLeftDesc []string
	oldSockets  int
}

// watch samples the old and new processes every step from t0 until the old ones are gone and the new
// one serves, or bound passes; once the new one serves it runs retire once.
func (u *upgrader) watch(t0 time.Time, bound, step time.Duration) (switchWatch, error) {
	var w switchWatch
	var retireErr error
	retired := false
	for {
		now := groupProcs(u.pgrp, u.comm)
		old, fresh := splitOldNew(u.before, now, u.master)
		w.oldRSS = max(w.oldRSS, sumRSS(old))
		w.newRSS = max(w.newRSS, sumRSS(fresh))
		w.samples++
		el := time.Since(t0)
		if w.newAt == 0 && u.newServing() {
			w.newAt = max(el, time.Nanosecond)
		}
		if w.newAt != 0 && !retired {
			retired = true
			retireErr = u.retire()
		}
		if w.goneAt == 0 && len(old) == 0 {
			w.goneAt = max(el, time.Nanosecond)
		}
		if (w.goneAt != 0 && w.newAt != 0) || el > bound {
			w.oldLeft = old
			for _, pid := range old {
				w.oldSockets += socketsOf(pid)
				w.oldLeftDesc = append(w.oldLeftDesc, fmt.Sprintf("%q holding %d sockets", procTitle(pid), socketsOf(pid)))
			}
			return w, retireErr
		}
		time.Sleep(step)
	}
}

func runUpgrade(rc *runCtx) (*Result, error) {
	p := rc.plan
	// Each device costs the bench two descriptors (its end and the connection server's) and the proxy
	// two (client and server side); the new connections and the GETs a few hundred more.
	n := rc.fitFDLimits("devices", p.UpgradeDevices, fdCost{unit: "device", benchPer: 2, benchFixed: 1000, proxyPer: 2, proxyFixed: 500})
	c, err := rc.startCluster(nil)
	if err != nil {
		return nil, err
	}
	in, err := rc.startPeer(c, servingWS, func(s *Setup) {
		s.MaxClients = n + 500
		s.Upgradable = true
		if rc.peer.Base == "haproxy" {
			s.HardStopAfter = p.UpgradeHardStop
		}
	})
	if err != nil {
		return nil, err
	}
	u, err := newUpgrader(in)
	if err != nil {
		return nil, err
	}
	addr := in.Addr()

	// The devices connect, 32 at a time.
	devices := make([]*upgradeDevice, n)
	for i := range devices {
		devices[i] = &upgradeDevice{id: i, addr: addr}
	}
	var tally deviceTally
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopAll()
	deadline := time.Now().Add(max(p.IdleOpenTimeout, time.Duration(n)*10*time.Millisecond))
	failed, firstErr := testkit.OpenAll(rc.ctx, n, 32, deadline, 0, func(i int) error {
		d := devices[i]
		if err := d.dial(5 * time.Second); err != nil {
			return err
		}
		if v := d.echo(5 * time.Second); v != echoOK {
			d.conn.Close()
			d.conn = nil
			return fmt.Errorf("first echo: %s", v)
		}
		return nil
	})
	for _, d := range devices {
		if d.conn == nil {
			failed++
		}
	}
	if failed > 0 {
		for _, d := range devices {
			if d.conn != nil {
				d.conn.Close()
			}
		}
		return nil, fmt.Errorf("%d of %d devices could not open their tunnel (first: %v)", failed, n, firstErr)
	}
	for _, d := range devices {
		wg.Go(func() {
			d.run(p.UpgradeEvery, rand.N(p.UpgradeEvery), p.UpgradeEchoTimeout, &tally, stop)
		})
	}
	var attempts attemptLog
	startAttempts(addr, p.UpgradeAttemptRate, &attempts, stop, &wg)
	load := startPaced(addr, 16, p.UpgradeHTTPRate, p.UpgradeWarmup+p.UpgradeBound+p.UpgradeAfter+60*time.Second,
		"/Thingworx/Things/UpgradeThing/Properties")

	time.Sleep(p.UpgradeWarmup)
	rssBefore := sumRSS(u.before)
	before := tally.snapshot()
	t0 := time.Now()
	if err := u.signal(); err != nil {
		load.Stop(time.Second)
		return nil, fmt.Errorf("upgrade signal: %v", err)
	}
	w, retireErr := u.watch(t0, p.UpgradeBound, 100*time.Millisecond)
	time.Sleep(p.UpgradeAfter)
	ss, unfinished := load.Stop(5 * time.Second)
	stopAll() // every device echoes once more, then closes
	after := tally.snapshot()

	if retireErr != nil {
		rc.note("retiring the old master: %v", retireErr)
	}
	if w.newAt == 0 {
		return nil, fmt.Errorf("%s: no new process serving within %s of the upgrade signal\n%s", in.Peer.Name, p.UpgradeBound, in.Proc.LogTail(1500))
	}
	dc := after.sub(before)
	if pre := before.Dropped(); pre > 0 {
		rc.note("%d tunnels dropped before the upgrade (not counted)", pre)
	}
	if dc.Dropped() > 0 {
		rc.note("tunnels dropped: %d closed, %d echo missing, %d wrong echo; %d redials failed", dc.Closed, dc.Missing, dc.Wrong, dc.RedialFailed)
	}
	nAtt, attFailed := attempts.since(t0)
	attFail := 0
	for _, k := range attFailed {
		attFail += k
	}
	if attFail > 0 {
		rc.note("connection attempts failed: %s", fmtKinds(attFailed))
	}
	var httpN, httpFail, retried int
	httpKinds := map[string]int{}
	for _, s := range ss {
		if s.End.Before(t0) {
			continue
		}
		httpN++
		if s.Retried {
			retried++
		}
		if !s.OK() {
			httpFail++
			httpKinds[s.Kind()]++
		}
	}
	httpFail += unfinished
	if unfinished > 0 {
		httpKinds["unfinished"] += unfinished
	}
	if httpFail > 0 {
		rc.note("HTTP requests failed: %s", fmtKinds(httpKinds))
	}
	res := &Result{Metrics: map[string]float64{
		"dropped":         float64(dc.Dropped()),
		"reconnected":     float64(dc.Reconnected),
		"attempts_failed": float64(attFail),
		"http_failed":     float64(httpFail),
		"new_s":           w.newAt.Seconds(),
		"old_sockets":     float64(w.oldSockets),
		"old_rss_mib":     float64(w.oldRSS) / (1 << 20),
		"new_rss_mib":     float64(w.newRSS) / (1 << 20),
		"rss_before_mib":  float64(rssBefore) / (1 << 20),
		"devices":         float64(n),
		"echoes":          float64(dc.Echoes),
		"attempts":        float64(nAtt),
		"requests":        float64(httpN),
		"stale_retries":   float64(retried),
		"old_gone":        b2f(w.goneAt != 0),
		"old_gone_s":      p.UpgradeBound.Seconds(),
	}}
	if w.goneAt != 0 {
		res.Metrics["old_gone_s"] = w.goneAt.Seconds()
	} else {
		rc.note("old processes still there %s after the upgrade signal (the bound): %s", p.UpgradeBound, strings.Join(w.oldLeftDesc, ", "))
	}
	return res, nil
}

// fmtKinds prints failure counts by kind, most first ("reset 3, refused 1").
func fmtKinds(m map[string]int) string {
	ks := slices.Collect(maps.Keys(m))
	sort.Slice(ks, func(i, j int) bool {
		if m[ks[i]] != m[ks[j]] {
			return m[ks[i]] > m[ks[j]]
		}
		return ks[i] < ks[j]
	})
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
