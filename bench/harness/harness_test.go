package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// TestHarnessTiny runs every scenario once at tiny size against fairlead (built here), so that the bench
// cannot rot: it checks that every run succeeded with sane figures and that the Markdown, JSON and SVG
// outputs are produced. Peers are left out by default (they would multiply the run time); set
// FAIRLEAD_BENCH_TEST_PEERS=haproxy,nginx,caddy to include the installed ones (missing ones are skipped).
func TestHarnessTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin := testkit.Binary(t, "cmd/fairlead")

	// fan-out needs fairlead's relay routes ([relays.NAME]): a -check that rejects its configuration is
	// a regression, not a reason to leave the scenario out.
	names := ScenarioNames()
	if ok, why := fairleadAcceptsRelays(bin, t.TempDir()); !ok {
		t.Fatalf("fairlead -check rejects the fan-out scenario's [relays.NAME] configuration: %s", why)
	}

	var peers []string
	if env := os.Getenv("FAIRLEAD_BENCH_TEST_PEERS"); env != "" {
		peers = strings.Split(env, ",")
	}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Plan: TinyPlan(), FairleadBin: bin, Peers: append([]string{"fairlead"}, peers...),
		Pin: false, Progress: &progress, Scenarios: names,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}

	// Every scenario ran against fairlead (and fairlead-tuned for failover) without error.
	for _, sc := range names {
		want := []string{"fairlead"}
		if sc == "failover" {
			want = append(want, "fairlead-tuned")
		}
		for _, p := range want {
			r := rep.result(sc, p, 1)
			if r == nil {
				for _, x := range rep.Results {
					if x.Scenario == sc && x.Peer == p {
						t.Errorf("%s/%s: %s", sc, p, x.Error)
					}
				}
				t.Errorf("%s/%s: no successful result", sc, p)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	get := func(sc, peer, key string) float64 {
		t.Helper()
		v, ok := rep.result(sc, peer, 1).Metrics[key]
		if !ok {
			t.Errorf("%s/%s: no metric %s", sc, peer, key)
		}
		return v
	}
	positive := func(sc, key string) {
		if v := get(sc, "fairlead", key); !(v > 0) {
			t.Errorf("%s: %s = %v, want > 0", sc, key, v)
		}
	}
	for _, sc := range []string{"http-small", "http-16k", "upload-1m", "http-rr"} {
		positive(sc, "req_s")
		positive(sc, "p99_ms")
		if v := get(sc, "fairlead", "errors"); v != 0 {
			t.Errorf("%s: %v errors", sc, v)
		}
	}
	positive("upload-1m", "mib_s")
	// Round robin over both platform servers: both got requests, neither much more than the other.
	positive("http-rr", "platform1_requests")
	positive("http-rr", "platform2_requests")
	if v := get("http-rr", "fairlead", "split"); v < 25 || v > 75 {
		t.Errorf("http-rr: platform1 got %.1f%% of the requests, want about 50%%", v)
	}
	if v := get("http-rr", "fairlead", "watermark"); v != float64(TinyPlan().RRWatermark) {
		t.Errorf("http-rr: cap per server %v, want %d", v, TinyPlan().RRWatermark)
	}
	// The TLS scenarios, through fairlead's TLS listener.
	positive("https-small", "req_s")
	positive("https-small", "p99_ms")
	if v := get("https-small", "fairlead", "errors"); v != 0 {
		t.Errorf("https-small: %v errors", v)
	}
	for _, sc := range []string{"ws-echo", "wss-echo"} {
		positive(sc, "rt_s")
		positive(sc, "p99_ms")
		if v := get(sc, "fairlead", "errors"); v != 0 {
			t.Errorf("%s: %v errors", sc, v)
		}
	}
	for _, sc := range []string{"ws-idle", "ws-idle-tls"} {
		if n, want := get(sc, "fairlead", "tunnels"), float64(TinyPlan().IdleTunnels); n != want {
			t.Errorf("%s: %v tunnels open, want %v", sc, n, want)
		}
		if kib := get(sc, "fairlead", "kib_per_tunnel"); kib < -64 || kib > 1024 {
			t.Errorf("%s: %v KiB per tunnel is not plausible", sc, kib)
		}
		positive(sc, "rss_before_mib")
		positive(sc, "fd_limit")
	}
	for _, sc := range []string{"https-small", "wss-echo", "ws-idle-tls"} {
		r := rep.result(sc, "fairlead", 1)
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "TLS negotiated with a Go client: TLS 1.") }) {
			t.Errorf("%s: no note of the negotiated TLS version: %q", sc, r.Notes)
		}
	}
	for _, p := range []string{"fairlead", "fairlead-tuned"} {
		for _, ev := range []string{"flip", "kill"} {
			if v := get("failover", p, ev+"_new_leader_s"); v < 0 || v > 10 {
				t.Errorf("failover %s %s: new leader after %v s", p, ev, v)
			}
		}
	}
	if v := get("failover", "fairlead", "requests"); v < 50 {
		t.Errorf("failover: only %v requests sent", v)
	}
	if v := get("reload", "fairlead", "tunnels"); v != float64(TinyPlan().ReloadTunnels) {
		t.Errorf("reload: %v tunnels open before the reload", v)
	}
	positive("reload", "requests")
	// upgrade: fairlead's binary upgrade breaks nothing (issue #38), the new process serves and the old
	// one is gone within the bound.
	for _, k := range []string{"dropped", "reconnected", "attempts_failed", "http_failed"} {
		if v := get("upgrade", "fairlead", k); v != 0 {
			t.Errorf("upgrade: %s = %v, want 0 (notes: %q)", k, v, rep.result("upgrade", "fairlead", 1).Notes)
		}
	}
	if v := get("upgrade", "fairlead", "devices"); v != float64(TinyPlan().UpgradeDevices) {
		t.Errorf("upgrade: %v devices", v)
	}
	if v, s := get("upgrade", "fairlead", "old_gone"), get("upgrade", "fairlead", "old_sockets"); v != 1 || s != 0 {
		t.Errorf("upgrade: the old process was not gone within the bound (%v sockets left)", s)
	}
	for _, k := range []string{"echoes", "attempts", "requests", "old_rss_mib", "new_rss_mib", "new_s", "old_gone_s"} {
		positive("upgrade", k)
	}
	if up, c := get("fan-in", "fairlead", "upstream_max"), get("fan-in", "fairlead", "cap"); up < 1 || c != float64(TinyPlan().FanInCap) {
		t.Errorf("fan-in: upstream max %v, cap %v", up, c)
	}
	if v := get("fan-in", "fairlead", "clients"); v != float64(TinyPlan().FanInClients) {
		t.Errorf("fan-in: %v clients", v)
	}
	t.Run("fan-out", func(t *testing.T) {
		n := TinyPlan().FanOutSizes[0]
		get := func(key string) float64 {
			t.Helper()
			v, ok := rep.result("fan-out", "fairlead", 1).Metrics[sizedKey(key, n)]
			if !ok {
				t.Errorf("fan-out N %d: no metric %s", n, key)
			}
			return v
		}
		// Every subscriber got every change, over one upstream session per topic, and each change was
		// fetched once per topic.
		if v := get("subscribers"); v != float64(n) {
			t.Errorf("fan-out: %v subscribers, want %d", v, n)
		}
		if v := get("missed"); v != 0 {
			t.Errorf("fan-out: %v deliveries missed", v)
		}
		if v, want := get("delivered"), float64(n*TinyPlan().FanOutChanges); v != want {
			t.Errorf("fan-out: %v deliveries, want %v", v, want)
		}
		if v := get("upstream_sessions"); v != 4 {
			t.Errorf("fan-out: %v upstream sessions, want 4 (one per topic)", v)
		}
		if v := get("fetches_per_change"); v != 1 {
			t.Errorf("fan-out: %v snapshot fetches per topic per change, want 1", v)
		}
		if v := get("p99_ms"); !(v > 0) {
			t.Errorf("fan-out: p99 %v ms", v)
		}
	})

	t.Run("fan-out-appconfig", func(t *testing.T) {
		n := TinyPlan().FanOutSizes[0]
		get := func(key string) float64 {
			t.Helper()
			v, ok := rep.result("fan-out-appconfig", "fairlead", 1).Metrics[sizedKey(key, n)]
			if !ok {
				t.Errorf("fan-out-appconfig N %d: no metric %s", n, key)
			}
			return v
		}
		// Every subscriber got a Registration with the configuration at connect and every change, over
		// one wsfeature session per topic and one IAM token, and each change was fetched once per topic.
		if v := get("subscribers"); v != float64(n) {
			t.Errorf("%v subscribers, want %d", v, n)
		}
		if v := get("missed"); v != 0 {
			t.Errorf("%v deliveries missed", v)
		}
		if v, want := get("delivered"), float64(n*TinyPlan().FanOutChanges); v != want {
			t.Errorf("%v deliveries, want %v", v, want)
		}
		for _, k := range []string{"no_registration", "no_config_first", "bad_events"} {
			if v := get(k); v != 0 {
				t.Errorf("%s = %v, want 0", k, v)
			}
		}
		if v := get("upstream_sessions"); v != 4 {
			t.Errorf("%v upstream sessions, want 4 (one per topic)", v)
		}
		if v := get("fetches_per_change"); v != 1 {
			t.Errorf("%v fetches per topic per change, want 1", v)
		}
		if v := get("iam_tokens"); v != 1 {
			t.Errorf("%v IAM tokens, want 1", v)
		}
		if v := get("p99_ms"); !(v > 0) {
			t.Errorf("p99 %v ms", v)
		}
	})

	// Outputs.
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	for _, want := range append(slices.Clone(names), "## Targets", "| fairlead |", "What the peers cannot express") {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if len(rep.Targets) < 12 {
		t.Errorf("%d targets, want at least 12", len(rep.Targets))
	}
	dir := t.TempDir()
	jp, sp, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("JSON does not parse back: %v", err)
	}
	if len(back.Results) != len(rep.Results) || len(back.Summary) != len(names) {
		t.Errorf("JSON has %d results and %d summaries", len(back.Results), len(back.Summary))
	}
	svg, err := os.ReadFile(sp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg ")) || !bytes.HasSuffix(bytes.TrimSpace(svg), []byte("</svg>")) {
		t.Errorf("SVG malformed: %.200s", svg)
	}
	if t.Failed() {
		t.Logf("report:\n%s", md.String())
	}
}

// TestReportRatiosAndSVG checks the aggregation on synthetic results: medians, ratios to HAProxy from
// the same round, targets and the chart.
func TestReportRatiosAndSVG(t *testing.T) {
	rep := &Report{Started: time.Now(), Plan: QuickPlan(), Scenarios: []string{"http-small"}}
	add := func(peer string, round int, rps, p99 float64) {
		rep.Results = append(rep.Results, &Result{Scenario: "http-small", Peer: peer, Round: round,
			Metrics: map[string]float64{"req_s": rps, "p99_ms": p99, "errors": 0}})
	}
	add("fairlead", 1, 1200, 1.0)
	add("haproxy", 1, 1000, 2.0)
	add("fairlead", 2, 900, 3.0)
	add("haproxy", 2, 1000, 2.0)
	add("fairlead", 3, 1100, 1.5)
	add("haproxy", 3, 1000, 2.0)
	rep.summarize([]*scenario{httpSmallScenario()})
	f := rep.peerSummary("http-small", "fairlead")
	if f == nil {
		t.Fatal("no fairlead summary")
	}
	if r := f.Ratios["req_s"]; r.Median != 1.1 || r.Min != 0.9 || r.Max != 1.2 || r.N != 3 {
		t.Errorf("req/s ratio %+v", r)
	}
	if v := f.Values["p99_ms"]; v.Median != 1.5 || v.Min != 1.0 || v.Max != 3.0 {
		t.Errorf("p99 %+v", v)
	}
	if len(rep.Targets) != 2 || rep.Targets[0].Met == nil || !*rep.Targets[0].Met || rep.Targets[1].Met == nil || !*rep.Targets[1].Met {
		t.Errorf("targets %+v", rep.Targets)
	}
	svg := rep.SVG()
	for _, want := range []string{"http-small · req/s", "1.10×", "fairlead", "haproxy"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
}

// TestPeerConfigs renders every peer's configuration, leader (the default), round robin (http-rr) and
// with a TLS listener (the TLS scenarios, with a certificate made like a run's), checks the lines http-rr
// and TLS depend on, and has each installed peer validate its own (haproxy -c, nginx -t, caddy adapt;
// haproxy and nginx load the certificate). fairlead's is checked by TestHarnessTiny, which runs it.
func TestPeerConfigs(t *testing.T) {
	certs, err := newRunCerts(t.TempDir()).get()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct{ rr, tls bool }{{false, false}, {true, false}, {false, true}} {
		rr := v.rr
		for _, base := range []string{"fairlead", "haproxy", "nginx", "caddy"} {
			t.Run(fmt.Sprintf("%s/roundrobin=%v/tls=%v", base, rr, v.tls), func(t *testing.T) {
				s := Setup{
					Dir: t.TempDir(), Port: 18080, AdminPort: 18404,
					Platforms: []string{"127.0.0.1:19081", "127.0.0.1:19082"}, Connections: []string{"127.0.0.1:19181"},
					Credentials: "YWRtaW46YWRtaW4=", CheckPath: "/Thingworx/Admin/HA/LeaderCheck",
					WSPaths: []string{"/Thingworx/WS"}, MaxClients: 1000, FDLimit: 65536, ConnectTimeout: "3s",
					RoundRobin: rr, Watermark: 7,
				}
				if v.tls {
					s.TLSPort, s.TLSCert, s.TLSKey, s.TLSPEM = 18443, certs.certFile, certs.keyFile, certs.pemFile
				}
				p := &Peer{Name: base, Base: base}
				path, err := p.writeConfig(s)
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				conf := string(b)
				// Lines that are there with RoundRobin, and only then.
				rrOnly := map[string][]string{
					"fairlead": {`balance = "roundrobin"`, "high_watermark = 7", `path = "/Thingworx/ready"`},
					"haproxy":  {"balance roundrobin", "option httpchk GET /Thingworx/ready", "server platform1 127.0.0.1:19081 maxconn 7 check", "server platform2 127.0.0.1:19082 maxconn 7 check"},
					"nginx":    {"server 127.0.0.1:19081 max_conns=7;", "server 127.0.0.1:19082 max_conns=7;"},
					"caddy":    {"lb_policy round_robin", "health_uri /Thingworx/ready", "unhealthy_request_count 7"},
				}[base]
				for _, w := range rrOnly {
					if in := strings.Contains(conf, w); in != rr {
						t.Errorf("roundrobin=%v but contains %q = %v:\n%s", rr, w, in, conf)
					}
				}
				// Lines that are there with a TLS listener, and only then.
				tlsOnly := map[string][]string{
					"fairlead": {`tls_listen = "127.0.0.1:18443"`, `tls_cert = "` + certs.certFile + `"`, `tls_key = "` + certs.keyFile + `"`},
					"haproxy":  {"bind 127.0.0.1:18443 ssl crt " + certs.pemFile + " alpn http/1.1", "ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:"},
					"nginx":    {"listen 127.0.0.1:18443 ssl backlog=4096;", "ssl_certificate " + certs.certFile + ";", "ssl_certificate_key " + certs.keyFile + ";", "ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:"},
					"caddy":    {"https://127.0.0.1:18443 {", "tls " + certs.certFile + " " + certs.keyFile + " {", "alpn http/1.1"},
				}[base]
				for _, w := range tlsOnly {
					if in := strings.Contains(conf, w); in != v.tls {
						t.Errorf("tls=%v but contains %q = %v:\n%s", v.tls, w, in, conf)
					}
				}
				// The plain listener is always there.
				if want := map[string]string{"fairlead": `listen = "127.0.0.1:18080"`, "haproxy": "bind 127.0.0.1:18080\n",
					"nginx": "listen 127.0.0.1:18080 backlog=4096;", "caddy": "http://127.0.0.1:18080 {"}[base]; !strings.Contains(conf, want) {
					t.Errorf("no plain listener %q:\n%s", want, conf)
				}
				var cmd *exec.Cmd
				switch bin := lookBin(map[string]string{"haproxy": "haproxy", "nginx": "nginx", "caddy": "caddy"}[base]); {
				case base == "fairlead":
					return
				case bin == "":
					t.Skipf("%s is not installed", base)
				case base == "haproxy":
					cmd = exec.Command(bin, "-c", "-f", path)
				case base == "nginx":
					cmd = exec.Command(bin, "-t", "-e", filepath.Join(s.Dir, "nginx-error.log"), "-p", s.Dir, "-c", path)
				case base == "caddy":
					cmd = exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile")
					cmd.Env = append(os.Environ(), "HOME="+s.Dir, "XDG_CONFIG_HOME="+s.Dir, "XDG_DATA_HOME="+s.Dir)
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s rejects its config: %v\n%s\n%s", base, err, out, conf)
				}
			})
		}
	}
}

func TestNginxHasMaxConns(t *testing.T) {
	for v, want := range map[string]bool{
		"nginx version: nginx/1.22.1":          true,
		"nginx version: nginx/1.11.5":          true,
		"nginx version: nginx/1.11.4":          false,
		"nginx version: nginx/1.10.3 (Ubuntu)": false,
		"nginx version: nginx/2.0.0":           true,
		"something else":                       true,
	} {
		if got := nginxHasMaxConns(v); got != want {
			t.Errorf("nginxHasMaxConns(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParseWrk(t *testing.T) {
	out := `Running 1s test @ http://127.0.0.1:8080/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     5.12ms    1.20ms  20.00ms   90.00%
    Req/Sec    12.50k     1.00k   14.00k    70.00%
  Latency Distribution
     50%    5.00ms
     75%    5.50ms
     90%    6.00ms
     99%  850.00us
  12500 requests in 1.00s, 2.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  12500.50
Transfer/sec:      2.00MB
`
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.reqPerSec != 12500.50 || r.p99ms != 0.85 || r.errors != 7 {
		t.Errorf("%+v", r)
	}
}

func TestParseH2load(t *testing.T) {
	out := `starting benchmark...
spawning thread #0: 16 total client(s). 10 timing-based test with 0s of warm-up time and 5s of main duration for each client
Application protocol: h2
finished in 5.00s, 16989.40 req/s, 1.23MB/s
requests: 84947 total, 84950 started, 84947 done, 84940 succeeded, 5 failed, 2 errored, 0 timeout
status codes: 84940 2xx, 0 3xx, 0 4xx, 5 5xx
traffic: 6.15MB (6449282) total, 1.01MB (1062050) headers (space savings 93.49%), 5.19MB (5436608) data
                     min         max         mean         sd        +/- sd
time for request:      340us     40.28ms      8.64ms      3.16ms    70.93%
time for connect:     2.11ms      9.32ms      5.68ms      2.46ms    62.50%
time to 1st byte:     9.08ms     17.45ms     12.89ms      2.83ms    56.25%
req/s           :    1045.54     1078.47     1061.77        9.12    62.50%
`
	r, err := parseH2load(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.reqPerSec != 16989.40 || r.succeeded != 84940 || r.failed != 7 || r.meanMS != 8.64 || r.proto != "h2" {
		t.Errorf("%+v", r)
	}
	if _, err := parseH2load(strings.Replace(out, "Application protocol: h2", "Application protocol: http/1.1", 1)); err == nil {
		t.Error("a run over http/1.1 parsed as an h2 run")
	}
	if _, err := parseH2load("h2load: no connection\n"); err == nil {
		t.Error("output without a summary parsed")
	}
}

func TestPlanJSON(t *testing.T) {
	b, err := json.Marshal(FullPlan())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"failover_window":"1m0s"`) {
		t.Errorf("durations not in Go syntax: %s", b)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != FullPlan() {
		t.Errorf("round trip: %+v", back)
	}
}

// The HTTP/2 target compares fairlead's CPU per request with the lowest of the peers', same run.
func TestTheHTTP2TargetIsCPUPerRequestAgainstTheBestPeer(t *testing.T) {
	for _, tc := range []struct {
		fairlead float64
		value    string
		met      bool
	}{{30, "1.20× haproxy (30.0 vs 25.0 µs)", false}, {24, "0.96× haproxy (24.0 vs 25.0 µs)", true}} {
		rep := &Report{Started: time.Now(), Plan: QuickPlan(), Scenarios: []string{"https-small-h2"}}
		for peer, cpu := range map[string]float64{"fairlead": tc.fairlead, "haproxy": 25, "nginx": 40} {
			rep.Results = append(rep.Results, &Result{Scenario: "https-small-h2", Peer: peer, Round: 1,
				Metrics: map[string]float64{"req_s": 1000, "cpu_us": cpu}})
		}
		rep.summarize([]*scenario{httpsSmallH2Scenario()})
		if len(rep.Targets) != 1 || rep.Targets[0].Value != tc.value || rep.Targets[0].Met == nil || *rep.Targets[0].Met != tc.met {
			t.Errorf("fairlead at %.0f µs: targets %+v, want %q met=%v", tc.fairlead, rep.Targets, tc.value, tc.met)
		}
	}
}
