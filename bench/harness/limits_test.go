package harness

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testSetup is a Setup as startPeer makes it, with fixed addresses.
func testSetup(t *testing.T) Setup {
	return Setup{
		Dir: t.TempDir(), Port: 18080, AdminPort: 18404,
		Platforms: []string{"127.0.0.1:19081", "127.0.0.1:19082"}, Connections: []string{"127.0.0.1:19181"},
		Credentials: "YWRtaW46YWRtaW4=", CheckPath: "/Thingworx/Admin/HA/LeaderCheck",
		WSPaths: []string{"/Thingworx/WS"}, MaxClients: 1000, FDLimit: 20000, ConnectTimeout: "3s",
	}
}

// renderConfig writes base's configuration for s and returns its path and text.
func renderConfig(t *testing.T, base string, s Setup) (string, string) {
	t.Helper()
	path, err := (&Peer{Name: base, Base: base}).writeConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, string(b)
}

// checkConfig has an installed HAProxy or nginx validate its configuration (skipped when missing).
func checkConfig(t *testing.T, base, path string, s Setup) {
	t.Helper()
	if base != "haproxy" && base != "nginx" {
		return
	}
	bin := lookBin(base)
	if bin == "" {
		t.Logf("%s is not installed: configuration not validated", base)
		return
	}
	var cmd *exec.Cmd
	switch base {
	case "haproxy":
		cmd = exec.Command(bin, "-c", "-f", path)
	case "nginx":
		cmd = exec.Command(bin, "-t", "-e", s.Dir+"/nginx-error.log", "-p", s.Dir, "-c", path)
	default:
		return
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s rejects its config: %v\n%s", base, err, out)
	}
}

func TestEveryProxyGetsTheWorkersAsked(t *testing.T) {
	f := func(threads, want int) {
		t.Helper()
		s := testSetup(t)
		s.Threads = threads
		procs := fmt.Sprintf("GOMAXPROCS=%d", want)
		for base, line := range map[string]string{
			"haproxy": fmt.Sprintf("\tnbthread %d\n", want),
			"nginx":   fmt.Sprintf("\nworker_processes %d;\n", want),
		} {
			path, conf := renderConfig(t, base, s)
			if !strings.Contains(conf, line) {
				t.Errorf("threads %d: %s config lacks %q:\n%s", threads, base, line, conf)
			}
			if want > 1 {
				checkConfig(t, base, path, s)
			}
			if _, env := (&Peer{Base: base, Bin: base}).command(s, path); slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "GOMAXPROCS=") }) {
				t.Errorf("threads %d: %s gets %q", threads, base, env)
			}
		}
		for _, base := range []string{"fairlead", "caddy"} {
			_, env := (&Peer{Base: base, Bin: base}).command(s, "conf")
			if !slices.Contains(env, procs) {
				t.Errorf("threads %d: %s environment %q lacks %s", threads, base, env, procs)
			}
		}
	}
	f(0, 1)
	f(1, 1)
	f(2, 2)
	f(4, 4)
}

func TestFitFDLimitsLowersToTheTighterLimitAndSaysWhy(t *testing.T) {
	tunnel := fdCost{unit: "tunnel", benchPer: 2, benchFixed: 1000, proxyPer: 2, proxyFixed: 300}
	f := func(n int, soft, hard uint64, c fdCost, want int, wantNotes ...string) {
		t.Helper()
		got, notes := fitFDLimits(n, soft, hard, c)
		if got != want {
			t.Errorf("fitFDLimits(%d, %d, %d) = %d, want %d", n, soft, hard, got, want)
		}
		if len(notes) != len(wantNotes) {
			t.Fatalf("notes %q, want %d", notes, len(wantNotes))
		}
		for i, w := range wantNotes {
			if notes[i] != w {
				t.Errorf("note %q, want %q", notes[i], w)
			}
		}
	}
	f(8000, 1<<20, 1<<20, tunnel, 8000)
	f(8000, 20000, 20000, tunnel, 8000)
	f(8000, 16000, 20000, tunnel, 7500,
		"lowered from 8000 to 7500: the bench process's open-file limit is 16000 (2 per tunnel, 1000 for the rest)")
	f(8000, 16000, 15000, tunnel, 7350,
		"lowered from 8000 to 7500: the bench process's open-file limit is 16000 (2 per tunnel, 1000 for the rest)",
		"lowered from 7500 to 7350: the proxy's open-file limit is 15000 (2 per tunnel, 300 for the rest)")
	f(10, 100, 100, tunnel, 0,
		"lowered from 10 to 0: the bench process's open-file limit is 100 (2 per tunnel, 1000 for the rest)")
	// Fan-in at 20,000 with a 20,000 limit: one descriptor per client beside the capped upstream.
	f(20000, 20000, 20000, fanInFDCost(64, 2), 19572,
		"lowered from 20000 to 19572: the bench process's open-file limit is 20000 (1 per client connection, 428 for the rest)")
	// Without a cap (nginx) up to one upstream connection per client.
	f(20000, 20000, 20000, fanInFDCost(0, 2), 9850,
		"lowered from 20000 to 9850: the bench process's open-file limit is 20000 (2 per client connection, 300 for the rest)")
}

// TestFanInClientsFitEveryProxysConfig checks that the client connections fan-in keeps under an open-file
// limit are accepted by each proxy's generated configuration: HAProxy's maxconn (with `no strict-limits`
// once it is above HAProxy's own two descriptors per connection), nginx's worker_connections (clients
// and their upstream connections), fairlead's max_conns.
func TestFanInClientsFitEveryProxysConfig(t *testing.T) {
	for _, limit := range []int{4096, 20000, 65536} {
		for _, base := range []string{"fairlead", "haproxy", "nginx"} {
			capPer := 64
			if base == "nginx" {
				capPer = 0
			}
			clients, _ := fitFDLimits(20000, uint64(limit), uint64(limit), fanInFDCost(capPer, 2))
			s := testSetup(t)
			s.FDLimit, s.MaxClients, s.UpstreamCap = limit, clients+100, capPer
			path, conf := renderConfig(t, base, s)
			switch base {
			case "fairlead":
				if s.FairleadMaxConns() < clients {
					t.Errorf("limit %d: fairlead max_conns %d < %d clients", limit, s.FairleadMaxConns(), clients)
				}
			case "haproxy":
				if s.HAProxyMaxConn() < clients {
					t.Errorf("limit %d: HAProxy maxconn %d < %d clients", limit, s.HAProxyMaxConn(), clients)
				}
				if !strings.Contains(conf, fmt.Sprintf("\tmaxconn %d\n", s.HAProxyMaxConn())) {
					t.Errorf("limit %d: no maxconn %d:\n%s", limit, s.HAProxyMaxConn(), conf)
				}
				strict := 2*clients+200 <= limit
				if got := strings.Contains(conf, "\tno strict-limits\n"); got == strict {
					t.Errorf("limit %d, %d clients: `no strict-limits` in the config = %v", limit, clients, got)
				}
			case "nginx":
				if s.NginxWorkerConns() < 2*clients {
					t.Errorf("limit %d: nginx worker_connections %d < 2 × %d clients", limit, s.NginxWorkerConns(), clients)
				}
			}
			checkConfig(t, base, path, s)
		}
	}
	// Without a cap HAProxy keeps two descriptors per connection and its strict limits.
	s := testSetup(t)
	s.MaxClients = 19000
	if got, want := s.HAProxyMaxConn(), (s.FDLimit-200)/2; got != want || s.HAProxyNoStrictLimits() {
		t.Errorf("uncapped: maxconn %d (want %d), no strict-limits %v", got, want, s.HAProxyNoStrictLimits())
	}
}

func TestReportHeaderSaysWhatIsPinnedAndTheWorkers(t *testing.T) {
	f := func(pinned bool, threads int, want string) {
		t.Helper()
		rep := &Report{Plan: QuickPlan(), Pinned: pinned, Threads: threads, Host: map[string]string{}}
		var md strings.Builder
		rep.WriteMarkdown(&md)
		if !strings.Contains(md.String(), want) {
			t.Errorf("pinned %v threads %d: report lacks %q:\n%s", pinned, threads, want, md.String())
		}
		if svg := rep.SVG(); threads > 1 && !strings.Contains(svg, fmt.Sprintf("%d workers per proxy", threads)) {
			t.Errorf("threads %d: chart does not say so", threads)
		}
	}
	f(true, 1, "Proxy under test pinned to core 0, load generators and simulated servers to core 1; one worker per proxy.")
	f(true, 0, "one worker per proxy.")
	f(false, 1, "Not pinned (taskset missing or pinning disabled); one worker per proxy.")
	f(false, 2, "Not pinned (-threads 2: proxy, load generators and simulated servers share every core); 2 workers per proxy "+
		"(HAProxy nbthread 2, nginx worker_processes 2, Caddy and fairlead GOMAXPROCS=2).")
}
