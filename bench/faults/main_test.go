package faults

import (
	"bufio"
	"encoding/json"
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

	"github.com/fairlead/fairlead/bench/harness"
	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// long selects the long form (make faults): longer load phases and 1,000 tunnels.
var long = flag.Bool("faults.long", false, "long form: longer load phases, 1,000 tunnels (make faults)")

func TestMain(m *testing.M) {
	flag.Parse()
	// The children (fairlead with 1,000 tunnels holds 2,000+ sockets) inherit the raised limit only when
	// it is set explicitly; Go raises its own soft limit but restores the original for children.
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		rl.Cur = min(rl.Max, 20000)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	os.Exit(m.Run())
}

// pick returns the phase length of the form being run: short, shorter under the race detector, or long.
func pick(short, long_ time.Duration) time.Duration {
	switch {
	case *long:
		return long_
	case raceEnabled:
		return short * 3 / 4
	default:
		return short
	}
}

// pickN is pick for counts.
func pickN(short, long_ int) int {
	if *long {
		return long_
	}
	return short
}

// startCluster starts an in-process simulated cluster recording POST deliveries by X-Request-Id.
func startCluster(t *testing.T, opts sim.Options) *sim.Cluster {
	t.Helper()
	opts.DeliveryHeader = testkit.RequestIDHeader
	return testkit.StartCluster(t, opts)
}

// quiet drops from a fairlead log the lines fasthttp repeats for every request with a streamed body
// (see the report: fairlead reads small streamed bodies with Request.Body()), and says how many.
func quiet(log string) string {
	const noise = "Request.Body() reads the entire stream into memory"
	var keep []string
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, noise) {
			n++
			continue
		}
		keep = append(keep, line)
	}
	if n > 0 {
		keep = append(keep, fmt.Sprintf("(%d lines of fasthttp's %q warning left out)", n, noise))
	}
	return strings.Join(keep, "\n")
}

// fairlead is a fairlead process started by a test (testkit.Fairlead), with what the scenarios read of
// its state.
type fairlead struct{ *testkit.Fairlead }

// testChecks are the LeaderCheck settings of most scenarios: test-sized intervals, so that a leader
// change completes in about three fast intervals (0.3 s). The timeout is generous: on busy shared cores
// a probe answered late would count as a failure, and three in a row would switch the leader.
const testChecks = `interval = "200ms"
fast_interval = "100ms"
timeout = "1s"`

// platformPool is the leader pool over the given platforms with the given check settings (besides the
// credentials). Scenarios override single keys in a later file.
func platformPool(addrs, names []string, checks string) string {
	var servers, named []string
	for i, a := range addrs {
		servers = append(servers, strconv.Quote(a))
		named = append(named, fmt.Sprintf("%q = %q", a, names[i]))
	}
	return fmt.Sprintf(`
[pools.platform]
servers = [%s]
queue_timeout = "5s"
response_timeout = "10s"
[pools.platform.names]
%s
[pools.platform.check]
credentials = "YWRtaW46YWRtaW4="
%s
[[routes]]
pool = "platform"
`, strings.Join(servers, ", "), strings.Join(named, "\n"), checks)
}

// clusterPool is platformPool over an in-process cluster's platforms.
func clusterPool(c *sim.Cluster, checks string) string {
	var addrs, names []string
	for _, p := range c.Platforms {
		addrs = append(addrs, p.Addr)
		names = append(names, p.Name)
	}
	return platformPool(addrs, names, checks)
}

// cxPool is the sticky connection-server pool behind the WebSocket route, as conf.d ships it, with
// test-sized checks. Its file must sort before the platform route's (routes are tried in order).
func cxPool(c *sim.Cluster) string {
	var conf testkit.Config
	conf.Table("pools.cxserver").Set("balance", "sticky").Set("servers", testkit.ConnectionAddrs(c)).
		Set("queue_timeout", 2*time.Second)
	names := conf.Table("pools.cxserver.names")
	for _, s := range c.Connections {
		names.Set(s.Addr, s.Name)
	}
	conf.Table("pools.cxserver.sticky").Set("keys", []string{"header:X-Asset-Id", "query:assetId", "source"})
	conf.Table("pools.cxserver.check").Set("path", "/health").Set("interval", 100*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("fall", 2).Set("rise", 2)
	conf.Array("routes").Set("websocket", true).
		Set("paths", []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"}).
		Set("pool", "cxserver")
	return conf.String()
}

// startFairlead writes files (name → TOML; "00-listen.toml" with the listen addresses is added) into
// a new config directory, starts fairlead on it and waits until it serves.
func startFairlead(t *testing.T, files map[string]string) *fairlead {
	t.Helper()
	f := &fairlead{testkit.StartFairlead(t, files)}
	f.LogFilter = quiet
	return f
}

// runFairlead starts fairlead on an existing config directory without waiting.
func runFairlead(t *testing.T, dir, addr, admin string) *fairlead {
	t.Helper()
	f := &fairlead{testkit.RunFairlead(t, dir, addr, admin)}
	f.LogFilter = quiet
	return f
}

var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}

// poolStatus is the part of /api/status the scenarios read.
type poolStatus struct {
	Name          string `json:"name"`
	Leader        string `json:"leader"`
	LeaderChanges uint64 `json:"leader_changes"`
	Servers       []struct {
		Addr      string `json:"addr"`
		Name      string `json:"name"`
		State     string `json:"state"`
		Available bool   `json:"available"`
		Tunnels   int64  `json:"tunnels"`
	} `json:"servers"`
}

// pool returns the /api/status of one pool (zero if unreachable).
func (f *fairlead) pool(name string) poolStatus {
	resp, err := adminClient.Get("http://" + f.Admin + "/api/status")
	if err != nil {
		return poolStatus{}
	}
	defer resp.Body.Close()
	var st struct {
		Pools []poolStatus `json:"pools"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return poolStatus{}
	}
	for _, p := range st.Pools {
		if p.Name == name {
			return p
		}
	}
	return poolStatus{}
}

// serverAvailable reports whether the named server of a pool is available in fairlead's view.
func (f *fairlead) serverAvailable(pool, server string) bool {
	for _, s := range f.pool(pool).Servers {
		if s.Name == server {
			return s.Available
		}
	}
	return false
}

// fds counts the process's open file descriptors.
func (f *fairlead) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", f.Cmd.Process.Pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// simProc is a cmd/fairlead-sim process running one platform server.
type simProc struct {
	name, addr, control string
	deliveryLog         string
	cmd                 *exec.Cmd
	exited              chan struct{}
}

// startSimProc runs one platform server named name in state as a process of its own, recording
// deliveries by X-Request-Id into a file that outlives it.
func startSimProc(t *testing.T, name string, state sim.State) *simProc {
	t.Helper()
	p := &simProc{name: name, deliveryLog: filepath.Join(t.TempDir(), name+".deliveries"), exited: make(chan struct{})}
	p.cmd = exec.Command(testkit.Binary(t, "cmd/fairlead-sim"), "-platforms", "1", "-connections", "0", "-platform-port", "0",
		"-control", "127.0.0.1:0", "-platform-names", name, "-states", state.String(),
		"-delivery-header", testkit.RequestIDHeader, "-delivery-log", p.deliveryLog)
	var stderr harness.SyncBuffer
	p.cmd.Stderr = &stderr
	p.cmd.SysProcAttr = testkit.DieWithTest()
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.cmd.Wait() //nolint:errcheck
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("fairlead-sim %s log:\n%s", name, testkit.Tail(stderr.String(), 3000))
		}
	})
	timeout := time.After(10 * time.Second)
	for p.control == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("fairlead-sim %s exited: %s", name, stderr.String())
			}
			if f := strings.Fields(l); len(f) >= 3 && f[0] == name && f[1] == "platform" {
				p.addr = f[2]
			} else if len(f) == 2 && f[0] == "control" {
				p.control = f[1]
			}
		case <-timeout:
			t.Fatalf("fairlead-sim %s printed no control address", name)
		}
	}
	if p.addr == "" {
		t.Fatalf("fairlead-sim %s printed no platform address", name)
	}
	return p
}

// setState changes the platform's state through the control API.
func (p *simProc) setState(st sim.State) error {
	resp, err := adminClient.Post("http://"+p.control+"/platform/"+p.name+"/"+st.String(), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("control %s: %d %s", p.name, resp.StatusCode, b)
	}
	return nil
}

// deliveries reads the process's delivery log: id → count.
func (p *simProc) deliveries(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile(p.deliveryLog)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if _, id, ok := strings.Cut(line, " "); ok {
			out[id]++
		}
	}
	return out
}
