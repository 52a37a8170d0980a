package lb

// [relays.NAME] validation (relayconfig.go, issue #14): every problem names the file and the full
// dotted key; a bad reload keeps the running relay; a config of relays only loads.

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
)

// relayBaseConfig is a valid config of one relay and no [[routes]]; it reads the secrets files of
// dir (written by writeRelaySecrets).
func relayBaseConfig(dir string) string {
	return fmt.Sprintf(`
[frontend]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[pools.appconfig]
servers = ["127.0.0.1:19281"]
backups = ["127.0.0.1:19282"]
failback_interval = "2s"
[relays.appconfig]
pool = "appconfig"
path = "/relay/{collection}/{environment}"
snapshot = "/config/{collection}/{environment}"
events = "/events/{collection}/{environment}"
topics = ["inventory/dev", "inventory/prod", "payments/dev", "payments/prod"]
upstream_headers_file = %q
[relays.appconfig.auth]
keys_file = %q
header = "X-Client-Key"
`, filepath.Join(dir, "up.hdr"), filepath.Join(dir, "keys"))
}

// writeRelaySecrets writes the upstream headers file and the keys file relayBaseConfig reads
// (relaySecrets) and returns their directory.
func writeRelaySecrets(t *testing.T) string {
	t.Helper()
	headers, _ := relaySecrets(t)
	return filepath.Dir(headers)
}

func TestRelayConfigOfRelaysOnlyLoadsWithItsDefaults(t *testing.T) {
	secrets := writeRelaySecrets(t)
	cfg, err := config.Load(testkit.WriteFiles(t, map[string]string{"10-relay.toml": relayBaseConfig(secrets)}))
	if err != nil {
		t.Fatalf("a config with a relay and no [[routes]]: %v", err)
	}
	r := cfg.Relays["appconfig"]
	if r == nil || cfg.RelaySpecs["appconfig"] == nil {
		t.Fatal("the relay is not in the loaded config")
	}
	if !*r.OnDemand || r.MaxTopics != 1000 || r.Start != "normal" || r.SubscriberBuffer != 16 ||
		r.TopicIdleTimeout.D != 5*time.Minute || r.KeepAlive.D != 25*time.Second || r.WriteTimeout.D != 10*time.Second ||
		r.WaitTimeout.D != 5*time.Second {
		t.Errorf("defaults: %+v", r)
	}
	if b := cfg.Pools["appconfig"].Balance; b != "roundrobin" {
		t.Errorf("a pool named by relays only has balance %q, want roundrobin", b)
	}
	if got := cfg.RelaySpecs["appconfig"].Header.Get("Authorization"); got != "Bearer "+relayUpKey {
		t.Errorf("upstream headers: Authorization %q", got)
	}
}

// The fingerprint decides whether a reload keeps a running relay, its upstream sessions and its
// subscribers: the same files must give the same fingerprint.
func TestRelayConfigFingerprintIsTheSameWhenTheFilesAreTheSame(t *testing.T) {
	secrets := writeRelaySecrets(t)
	dir := testkit.WriteFiles(t, map[string]string{"10-relay.toml": relayBaseConfig(secrets)})
	a, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := a.RelaySpecs["appconfig"].Fingerprint, b.RelaySpecs["appconfig"].Fingerprint
	if fa != fb {
		t.Errorf("two loads of the same files give different fingerprints, so every reload restarts the relay:\n%s\n%s", fa, fb)
	}
	if strings.Contains(fa, relayUpKey) {
		t.Errorf("the fingerprint holds the upstream key")
	}
}

func TestRelayConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	secrets := writeRelaySecrets(t)
	write := func(name, body string) string {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	malformed := write("malformed.hdr", "Authorization: Bearer "+relayUpKey+"\nno colon here\n")
	hostHdr := write("host.hdr", "Host: evil.example\n")
	wsKeyHdr := write("wskey.hdr", "Sec-WebSocket-Key: abc\n")
	missing := filepath.Join(secrets, "missing")

	f := func(name, bad string, want ...string) {
		t.Helper()
		dir := testkit.WriteFiles(t, map[string]string{"10-base.toml": relayBaseConfig(secrets), "20-bad.toml": bad})
		_, err := config.Load(dir)
		var ce *config.Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a Error", name, err)
			return
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), relayUpKey) {
			t.Errorf("%s: the error holds the upstream key: %q", name, err)
		}
	}
	bad := func(key string) string { return "20-bad.toml: relays.appconfig." + key + ": " }
	r := "[relays.appconfig]\n"

	f("missing pool", "[relays.other]\npath = \"/o/{a}\"\nsnapshot = \"/s/{a}\"\nevents = \"/e/{a}\"\n",
		"20-bad.toml: relays.other.pool: missing pool")
	f("unknown pool", r+"pool = \"nope\"\n", bad("pool")+"pool \"nope\" is not defined")
	f("leader pool", "[pools.lead]\nbalance = \"leader\"\nservers = [\"127.0.0.1:1\"]\n"+r+"pool = \"lead\"\n",
		bad("pool"), "leader")
	f("leader by default: the pool is also named by a route",
		"[pools.both]\nservers = [\"127.0.0.1:1\"]\n[[routes]]\npool = \"both\"\n"+r+"pool = \"both\"\n", bad("pool"), "leader")
	f("pool with discovery", "[pools.disc]\nbalance = \"roundrobin\"\nservers = [\"127.0.0.1:1\"]\n[pools.disc.discovery]\nprovider = \"file\"\nfile = \"/nonexistent/x.toml\"\n"+r+"pool = \"disc\"\n",
		bad("pool"), "discovery")
	f("bad path template", r+"path = \"/relay/{collection\"\n", bad("path"))
	f("path template without a name", r+"path = \"relay\"\n", bad("path"))
	f("snapshot using a name the path lacks", r+"snapshot = \"/config/{app}/{environment}\"\n", bad("snapshot"), "app")
	f("events using a name the path lacks", r+"events = \"/events/{collection}/{env}\"\n", bad("events"), "env")
	f("missing snapshot", r+"snapshot = \"\"\n", bad("snapshot")+"required")
	f("topic with the wrong number of parts", r+"topics = [\"inventory/dev\", \"inventory\"]\n", bad("topics.1"))
	f("topic with three parts", r+"topics = [\"a/b/c\"]\n", bad("topics.0"))
	f("topic with bad characters", r+"topics = [\"inventory/dev\", \"payments/prod\", \"in ventory/d$v\"]\n", bad("topics.2"))
	f("topic with a dot segment", r+"topics = [\"../dev\"]\n", bad("topics.0"))
	f("topic listed twice", r+"topics = [\"inventory/dev\", \"inventory/dev\"]\n", bad("topics.1")+"topic \"inventory/dev\" listed twice")
	f("on_demand = false without topics", r+"topics = []\non_demand = false\n", bad("on_demand"))
	f("max_topics below the listed topics", r+"max_topics = 2\n", bad("max_topics"), "2", "4")
	f("max_topics 0", r+"max_topics = 0\n", bad("max_topics"))
	f("fast start without seed_file", r+"start = \"fast\"\n", bad("start"), "seed_file")
	f("bad start", r+"start = \"quick\"\n", bad("start"), "quick")
	f("seed_file_write without seed_file", r+"seed_file_write = true\n", bad("seed_file_write"))
	f("subscriber_buffer 0", r+"subscriber_buffer = 0\n", bad("subscriber_buffer"))
	f("negative subscriber_buffer", r+"subscriber_buffer = -1\n", bad("subscriber_buffer"))
	for _, key := range []string{"topic_idle_timeout", "keepalive", "write_timeout", "wait_timeout"} {
		f("bad "+key, r+key+" = \"soon\"\n", bad(key)+"bad duration")
		f("zero "+key, r+key+" = \"0s\"\n", bad(key)+"must be greater than zero")
	}
	f("upstream_headers_file missing", r+fmt.Sprintf("upstream_headers_file = %q\n", missing), bad("upstream_headers_file"))
	f("upstream_headers_file malformed", r+fmt.Sprintf("upstream_headers_file = %q\n", malformed),
		bad("upstream_headers_file"), "malformed.hdr line 2")
	f("upstream_headers_file sets Host", r+fmt.Sprintf("upstream_headers_file = %q\n", hostHdr), bad("upstream_headers_file"), "Host")
	f("upstream_headers_file sets Sec-WebSocket-Key", r+fmt.Sprintf("upstream_headers_file = %q\n", wsKeyHdr),
		bad("upstream_headers_file"), "Sec-WebSocket-Key")
	f("auth keys_file missing", "[relays.appconfig.auth]\n"+fmt.Sprintf("keys_file = %q\n", missing), "20-bad.toml: relays.appconfig.auth.keys_file")
	f("unknown key", r+"topic = [\"a/b\"]\n", "20-bad.toml: relays.appconfig.topic: unknown key")
	f("two relays on one path", "[relays.second]\npool = \"appconfig\"\npath = \"/relay/{collection}/{environment}\"\nsnapshot = \"/s/{collection}/{environment}\"\nevents = \"/e/{collection}/{environment}\"\n",
		"20-bad.toml: relays.second.path: ", "relays.appconfig")

	// Every problem of a relay is listed, not only the first.
	dir := testkit.WriteFiles(t, map[string]string{"10-base.toml": relayBaseConfig(secrets),
		"20-bad.toml": r + "subscriber_buffer = 0\nstart = \"quick\"\ntopics = [\"x\"]\n"})
	_, err := config.Load(dir)
	for _, key := range []string{"subscriber_buffer", "start", "topics.0"} {
		if err == nil || !strings.Contains(err.Error(), bad(key)) {
			t.Errorf("three problems at once: %v does not name %s", err, key)
		}
	}
}

func TestRelayConfigABadReloadKeepsTheRunningRelay(t *testing.T) {
	t.Parallel()
	c := startRelaySim(t, 1)
	cfg := c.Configs[0]
	files := relayFiles(t, relayConfigAddrs(c), "", "", "")
	dir := testkit.WriteFiles(t, files)
	l, _ := startLBDir(t, dir)
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return oneSessionPerTopic(cfg, relayTopics...) })
	sse := dialRelaySSE(t, l.Addr(), "/relay/inventory/dev", relayKeyHdr...)
	sse.waitVersion(t, 1, 5*time.Second)

	// Load refuses it, so a reload never sees it.
	if err := os.WriteFile(filepath.Join(dir, "20-more.toml"), []byte("[relays.appconfig]\nsubscriber_buffer = 0\ntopics = [\"bad\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(dir); err == nil || !strings.Contains(err.Error(), "20-more.toml: relays.appconfig.subscriber_buffer") {
		t.Fatalf("Load of a bad relay: %v", err)
	}
	// A valid config whose new relay cannot start (start = "normal", upstream unreachable) fails the
	// reload, which keeps the running relay.
	if err := os.WriteFile(filepath.Join(dir, "20-more.toml"), []byte(fmt.Sprintf("[pools.appconfig]\nservers = [%q]\nbackups = []\n", testkit.Addr(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	nc, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(nc); err == nil || !strings.Contains(err.Error(), "relays.appconfig") {
		t.Errorf("a reload to an unreachable upstream with start = \"normal\": %v, want an error naming the relay", err)
	}
	v := relayPublish(t, c, "inventory/dev", `{"after":"bad reload"}`)
	sse.waitVersion(t, v, 5*time.Second)
	resp, body := relayGet(t, l, http.MethodGet, "/relay/inventory/dev", relayKeyHdr...)
	if s := snapshotOf(t, body); resp.StatusCode != 200 || s.Version != v {
		t.Errorf("GET after the failed reload: %d %q", resp.StatusCode, body)
	}
	if st := cfg.Stats().Topics["inventory/dev"]; st.Sessions != 1 {
		t.Errorf("after the failed reload: %d sessions, want 1", st.Sessions)
	}
}

// conf.d files merge key by key (config_merge.go): a later file that sets one key of
// [relays.NAME.auth] keeps the others, as it does for [pools.NAME.check].
func TestRelayConfigAuthTableMergesKeyByKeyAcrossFiles(t *testing.T) {
	secrets := writeRelaySecrets(t)
	other := filepath.Join(secrets, "keys2")
	if err := os.WriteFile(other, []byte("k2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(testkit.WriteFiles(t, map[string]string{"10-relay.toml": relayBaseConfig(secrets),
		"20-more.toml": fmt.Sprintf("[relays.appconfig.auth]\nkeys_file = %q\n", other)}))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Relays["appconfig"].Auth
	if a.KeysFile != other {
		t.Errorf("keys_file = %q, want the later file's %q", a.KeysFile, other)
	}
	if a.Header != "X-Client-Key" {
		t.Errorf("header = %q after a later file set only keys_file: the earlier file's \"X-Client-Key\" was dropped", a.Header)
	}
}
