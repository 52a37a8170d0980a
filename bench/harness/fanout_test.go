package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseVersion(t *testing.T) {
	f := func(in string, want uint64, wantOK bool) {
		t.Helper()
		v, ok := parseVersion([]byte(in))
		if v != want || ok != wantOK {
			t.Errorf("parseVersion(%q) = %d, %v; want %d, %v", in, v, ok, want, wantOK)
		}
	}
	f(`{"topic":"inventory/dev","version":42}`, 42, true)
	f(` {"topic":"a/b","version":7,"server":"config1","data":{"change":1}}`+"\n", 7, true)
	f(`{"topic":"a/b","version": 12345678901}`, 12345678901, true)
	f(`{"topic":"a/b"}`, 0, false)
	f(`{"version":"x"}`, 0, false)
	f(`hi`, 0, false)
}

func TestFanOutPeersAreFairleadAndNginx(t *testing.T) {
	got := fanOutPeers([]string{"fairlead", "haproxy", "nginx", "caddy"})
	if strings.Join(got, ",") != "fairlead,nginx" {
		t.Errorf("fan-out peers %v", got)
	}
}

// TestFanOutConfigs renders both fan-out configurations and has nginx (with nchan, when installed)
// validate its own; fairlead's is checked by TestHarnessTiny, which runs it.
func TestFanOutConfigs(t *testing.T) {
	for _, base := range []string{"fairlead", "nginx"} {
		t.Run(base, func(t *testing.T) {
			cfg := fanOutConfig{
				Setup:      Setup{Dir: t.TempDir(), Port: 18080, AdminPort: 18404, MaxClients: 1000, FDLimit: 20000},
				ConfigAddr: "127.0.0.1:19281", Topics: fanOutTopics, Module: nchanModule(), Conns: 2000,
			}
			path, err := writeFanOutConfig(base, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			conf := string(b)
			want := map[string][]string{
				"fairlead": {`servers = ["127.0.0.1:19281"]`, `path = "/relay/{collection}/{environment}"`,
					`topics = ["inventory/dev", "inventory/prod", "payments/dev", "payments/prod"]`},
				"nginx": {"nchan_subscriber websocket eventsource;", "nchan_publisher;", "nchan_channel_id $1/$2;", "load_module "},
			}[base]
			for _, w := range want {
				if !strings.Contains(conf, w) {
					t.Errorf("lacks %q:\n%s", w, conf)
				}
			}
			if base != "nginx" {
				return
			}
			bin := lookBin("nginx")
			if bin == "" || cfg.Module == "" {
				t.Skip("nginx or its nchan module is not installed")
			}
			out, err := exec.Command(bin, "-t", "-e", filepath.Join(cfg.Dir, "nginx-error.log"), "-p", cfg.Dir, "-c", path).CombinedOutput()
			if err != nil {
				t.Errorf("nginx rejects its fan-out config: %v\n%s\n%s", err, out, conf)
			}
		})
	}
}

// TestFanOutNchan runs fan-out at tiny size against nginx with nchan (skipped when either is missing):
// the generator, the SSE and WebSocket subscribers and the feeder, with a peer that needs no relay code.
func TestFanOutNchan(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	p, err := NewPeer("nginx", "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Bin == "" || nchanModule() == "" {
		t.Skip("nginx or its nchan module is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan := TinyPlan()
	plan.FanOutSizes = [2]int{40, 80}
	rc := &runCtx{ctx: ctx, plan: plan, peer: p, dir: t.TempDir(), round: 1, threads: 1}
	res, err := runFanOut(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("notes: %q", rc.notes)
	for _, n := range []int{40, 80} {
		get := func(k string) float64 {
			t.Helper()
			v, ok := res.Metrics[sizedKey(k, n)]
			if !ok {
				t.Fatalf("N %d: no %s in %v", n, k, res.Metrics)
			}
			return v
		}
		if v := get("subscribers"); v != float64(n) {
			t.Errorf("N %d: %v subscribers", n, v)
		}
		if v := get("missed"); v != 0 {
			t.Errorf("N %d: %v deliveries missed", n, v)
		}
		if v, want := get("delivered"), float64(n*plan.FanOutChanges); v != want {
			t.Errorf("N %d: %v delivered, want %v", n, v, want)
		}
		if v := get("p99_ms"); !(v > 0 && v < 1000) {
			t.Errorf("N %d: p99 %v ms", n, v)
		}
		if _, ok := res.Metrics[sizedKey("upstream_sessions", n)]; ok {
			t.Errorf("N %d: nchan has upstream sessions", n)
		}
	}
	// The report: a row per N.
	rep := &Report{Started: time.Now(), Plan: plan, Scenarios: []string{"fan-out"},
		Results: []*Result{{Scenario: "fan-out", Peer: "nginx", Round: 1, Metrics: res.Metrics}}}
	rep.summarize([]*scenario{fanOutScenario()})
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	for _, w := range []string{"| nginx | 40 | 40 |", "| nginx | 80 | 80 |"} {
		if !strings.Contains(md.String(), w) {
			t.Errorf("markdown lacks %q:\n%s", w, md.String())
		}
	}
}

// fairleadAcceptsRelays reports whether the fairlead binary's -check accepts fan-out's configuration
// (a [relays.NAME] table), and if not, what it said.
func fairleadAcceptsRelays(bin, dir string) (bool, string) {
	cfg := fanOutConfig{
		Setup:      Setup{Dir: dir, Port: 18080, AdminPort: 18404, MaxClients: 100},
		ConfigAddr: "127.0.0.1:19281", Topics: fanOutTopics,
	}
	if _, err := writeFanOutConfig("fairlead", cfg); err != nil {
		return false, err.Error()
	}
	out, err := exec.Command(bin, "-check", "-config", dir).CombinedOutput()
	if err != nil {
		return false, fmt.Sprintf("%v: %s", err, bytes.TrimSpace(out))
	}
	return true, ""
}
