package harness

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

func TestParseAppConfigVersionReadsTheVersionPropertyOfTheSimulatedInstancesConfiguration(t *testing.T) {
	a, err := sim.StartAppConfig("gen", "127.0.0.1:0", sim.AppConfigOptions{GUID: fanOutACGUID})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for want := uint64(1); want <= 12; want++ {
		a.Bump(fanOutTopics[0])
		doc, _ := a.Export(fanOutTopics[0])
		// As a data line of the SSE stream, and alone.
		for _, b := range [][]byte{append([]byte("data: "), doc...), doc} {
			if v, ok := parseAppConfigVersion(b); !ok || v != want {
				t.Fatalf("parseAppConfigVersion = %d, %v; want %d in %s", v, ok, want, b)
			}
		}
	}
	for _, in := range []string{`{"ready":true}`, `{"property_id":"version"}`, `{"property_id":"other","value":3}`,
		`{"property_id":"version","type":"NUMERIC"},{"value":3}`} {
		if v, ok := parseAppConfigVersion([]byte(in)); ok {
			t.Errorf("parseAppConfigVersion(%s) = %d, true", in, v)
		}
	}
}

func TestFanOutAppConfigRunsOnlyFairleadAndNginxAndSharesFanOutsSizes(t *testing.T) {
	sc := findScenario("fan-out-appconfig")
	if sc == nil {
		t.Fatal("no scenario fan-out-appconfig")
	}
	if got := sc.variants([]string{"fairlead", "haproxy", "nginx", "caddy"}); strings.Join(got, ",") != "fairlead,nginx" {
		t.Errorf("peers %v", got)
	}
	if !sc.sized {
		t.Error("not sized: its table would have no row per N")
	}
	names := ScenarioNames()
	if i := strings.Index(strings.Join(names, ","), "fan-out,fan-out-appconfig"); i < 0 {
		t.Errorf("fan-out-appconfig does not follow fan-out: %v", names)
	}
}

// TestFanOutAppConfigConfigs renders both fan-out-appconfig configurations; nginx (with nchan, when
// installed) validates its own, fairlead's is checked by TestHarnessTiny, which runs it.
func TestFanOutAppConfigConfigs(t *testing.T) {
	for _, base := range []string{"fairlead", "nginx"} {
		t.Run(base, func(t *testing.T) {
			dir := t.TempDir()
			cfg := fanOutConfig{
				Setup:      Setup{Dir: dir, Port: 18080, AdminPort: 18404, MaxClients: 1000, FDLimit: 20000},
				ConfigAddr: "127.0.0.1:19281", Topics: fanOutTopics, Module: nchanModule(), Conns: 2000,
				AppConfig: true, GUID: fanOutACGUID, ClientKey: fanOutACClientKey, IAMURL: "http://127.0.0.1:19282",
				APIKeyFile: filepath.Join(dir, "apikey"), KeysFile: filepath.Join(dir, "client-keys"),
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
				"fairlead": {`servers = ["127.0.0.1:19281"]`, `protocol = "appconfiguration"`, `guid = "` + fanOutACGUID + `"`,
					`iam_url = "http://127.0.0.1:19282"`, `apikey_file = "` + cfg.APIKeyFile + `"`, `keys_file = "` + cfg.KeysFile + `"`,
					`topics = ["inventory/dev", "inventory/prod", "payments/dev", "payments/prod"]`},
				"nginx": {"nchan_subscriber eventsource;", "nchan_channel_id $arg_collection_id/$1;", "nchan_subscriber_first_message oldest;",
					"nchan_message_buffer_length 1;", "nchan_eventsource_event SSEConfig_payload;", `"` + fanOutACClientKey + `" 1;`,
					"/apprapp/feature/v1/instances/" + fanOutACGUID + "/environments/"},
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
				t.Errorf("nginx rejects its fan-out-appconfig config: %v\n%s\n%s", err, out, conf)
			}
		})
	}
}

// TestFanOutAppConfigNchan runs fan-out-appconfig at tiny size against nginx with nchan (skipped when
// either is missing): the subscribers of the client SDK's shape, the key check and the feeder, with a
// peer that needs no relay code. nchan sends no Registration: every subscriber's first event is the
// kept SSEConfig_payload.
func TestFanOutAppConfigNchan(t *testing.T) {
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
	plan.FanOutSizes = [2]int{40, 0}
	rc := &runCtx{ctx: ctx, plan: plan, peer: p, dir: t.TempDir(), round: 1, threads: 1}
	res, err := runFanOutSizes(rc, fanOutAppConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("notes: %q", rc.notes)
	n := 40
	get := func(k string) float64 {
		t.Helper()
		v, ok := res.Metrics[sizedKey(k, n)]
		if !ok {
			t.Fatalf("no %s in %v", k, res.Metrics)
		}
		return v
	}
	if v := get("subscribers"); v != float64(n) {
		t.Errorf("%v subscribers", v)
	}
	if v := get("missed"); v != 0 {
		t.Errorf("%v deliveries missed", v)
	}
	if v, want := get("delivered"), float64(n*plan.FanOutChanges); v != want {
		t.Errorf("%v delivered, want %v", v, want)
	}
	if v := get("no_registration"); v != float64(n) {
		t.Errorf("%v subscribers without Registration first, want every one (%d)", v, n)
	}
	if v := get("no_config_first"); v != 0 {
		t.Errorf("%v subscribers without the current configuration at connect", v)
	}
	if v := get("bad_events"); v != 0 {
		t.Errorf("%v misnamed events", v)
	}
	for _, k := range []string{"upstream_sessions", "fetches_per_change", "iam_tokens"} {
		if _, ok := res.Metrics[sizedKey(k, n)]; ok {
			t.Errorf("nchan has %s", k)
		}
	}
	rep := &Report{Started: time.Now(), Plan: plan, Scenarios: []string{"fan-out-appconfig"},
		Results: []*Result{{Scenario: "fan-out-appconfig", Peer: "nginx", Round: 1, Metrics: res.Metrics}}}
	rep.summarize([]*scenario{fanOutAppConfigScenario()})
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	if w := "| nginx | 40 | 40 |"; !strings.Contains(md.String(), w) {
		t.Errorf("markdown lacks %q:\n%s", w, md.String())
	}
}
