package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// relayBase is a valid config of one relay and no [[routes]], and the directory of the secrets files
// it reads.
func relayBase(t *testing.T) (base, secrets string) {
	t.Helper()
	secrets = t.TempDir()
	base = testkit.Relay{Servers: []string{"127.0.0.1:19281", "127.0.0.1:19282"}, PoolExtra: `failback_interval = "2s"`,
		Dir: secrets}.Config(t)
	return base, secrets
}

func TestRelayConfigOfRelaysOnlyLoadsWithItsDefaults(t *testing.T) {
	base, _ := relayBase(t)
	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-relay.toml": base}))
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
	if got := cfg.RelaySpecs["appconfig"].Header.Get("Authorization"); got != "Bearer "+testkit.RelayUpstreamKey {
		t.Errorf("upstream headers: Authorization %q", got)
	}
}

// The fingerprint decides whether a reload keeps a running relay, its upstream sessions and its
// subscribers: the same files must give the same fingerprint.
func TestRelayConfigFingerprintIsTheSameWhenTheFilesAreTheSame(t *testing.T) {
	base, _ := relayBase(t)
	dir := testkit.WriteFiles(t, map[string]string{"10-relay.toml": base})
	a, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := a.RelaySpecs["appconfig"].Fingerprint, b.RelaySpecs["appconfig"].Fingerprint
	if fa != fb {
		t.Errorf("two loads of the same files give different fingerprints, so every reload restarts the relay:\n%s\n%s", fa, fb)
	}
	if strings.Contains(fa, testkit.RelayUpstreamKey) {
		t.Errorf("the fingerprint holds the upstream key")
	}
}

func TestRelayConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	base, secrets := relayBase(t)
	write := func(name, body string) string {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	malformed := write("malformed.hdr", "Authorization: Bearer "+testkit.RelayUpstreamKey+"\nno colon here\n")
	hostHdr := write("host.hdr", "Host: evil.example\n")
	wsKeyHdr := write("wskey.hdr", "Sec-WebSocket-Key: abc\n")
	missing := filepath.Join(secrets, "missing")

	f := func(name, bad string, want ...string) {
		t.Helper()
		err := loadFails(t, name, base, bad, want...)
		if err != nil && strings.Contains(err.Error(), testkit.RelayUpstreamKey) {
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
	dir := testkit.WriteFiles(t, map[string]string{"10-base.toml": base,
		"20-bad.toml": r + "subscriber_buffer = 0\nstart = \"quick\"\ntopics = [\"x\"]\n"})
	_, err := Load(dir)
	for _, key := range []string{"subscriber_buffer", "start", "topics.0"} {
		if err == nil || !strings.Contains(err.Error(), bad(key)) {
			t.Errorf("three problems at once: %v does not name %s", err, key)
		}
	}
}

// conf.d files merge key by key (merge.go): a later file that sets one key of
// [relays.NAME.auth] keeps the others, as it does for [pools.NAME.check].
func TestRelayConfigAuthTableMergesKeyByKeyAcrossFiles(t *testing.T) {
	base, secrets := relayBase(t)
	other := filepath.Join(secrets, "keys2")
	if err := os.WriteFile(other, []byte("k2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-relay.toml": base,
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

// appConfigBase is a valid config of an App Configuration relay over two servers (the second a backup
// instance with a guid of its own), and the directory of its secret files.
func appConfigBase(t *testing.T) (base, dir string) {
	t.Helper()
	dir = t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var c testkit.Config
	c.Table("frontend").Set("listen", "127.0.0.1:0")
	c.Table("admin").Set("listen", "127.0.0.1:0")
	c.Table("pools.ibm").Set("servers", []string{"127.0.0.1:19443"}).Set("backups", []string{"127.0.0.1:19444"})
	c.Table("relays.ibm").Set("pool", "ibm").Set("protocol", "appconfiguration").Set("guid", "g-primary").
		Set("topics", []string{"inventory/dev", "payments/prod"}).
		Set("apikey_file", write("apikey", "ibm-api-key-7f3e\n"))
	c.Table("relays.ibm.guids").Set("127.0.0.1:19444", "g-backup")
	c.Table("relays.ibm.auth").Set("keys_file", write("keys", "sdk-key-1\n"))
	return c.String(), dir
}

func TestAnAppConfigurationRelayLoadsWithItsInstanceAndKey(t *testing.T) {
	base, _ := appConfigBase(t)
	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-ibm.toml": base}))
	if err != nil {
		t.Fatal(err)
	}
	spec := cfg.RelaySpecs["ibm"]
	if spec.Protocol != "appconfiguration" || spec.GUID != "g-primary" || spec.GUIDs["127.0.0.1:19444"] != "g-backup" ||
		spec.APIKey != "ibm-api-key-7f3e" || spec.IAMURL != "https://iam.cloud.ibm.com" ||
		!slices.Equal(spec.Names, []string{"collection", "environment"}) || spec.Path != nil {
		t.Errorf("spec: %+v", spec)
	}
	if !spec.Listed["payments/prod"] {
		t.Errorf("topics: %v", spec.Topics)
	}
	if strings.Contains(spec.Fingerprint, "ibm-api-key-7f3e") {
		t.Error("the fingerprint holds the API key")
	}
	// The SDKs send their key raw (client SDKs) or as a bearer token (server SDKs).
	a := spec.Auth
	for _, v := range []string{"sdk-key-1", "Bearer sdk-key-1", "bearer sdk-key-1"} {
		if !a.Admits([]byte(v)) {
			t.Errorf("Authorization %q refused", v)
		}
	}
	for _, v := range []string{"", "Bearer ", "sdk-key-2", "Basic sdk-key-1"} {
		if a.Admits([]byte(v)) {
			t.Errorf("Authorization %q admitted", v)
		}
	}
}

func TestAppConfigurationRelayErrorsNameTheFileAndTheKey(t *testing.T) {
	base, dir := appConfigBase(t)
	hdr := filepath.Join(dir, "up.hdr")
	if err := os.WriteFile(hdr, []byte("Authorization: Bearer x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := func(name, bad string, want ...string) {
		t.Helper()
		if err := loadFails(t, name, base, bad, want...); err != nil && strings.Contains(err.Error(), "ibm-api-key-7f3e") {
			t.Errorf("%s: the error holds the API key: %q", name, err)
		}
	}
	r := "[relays.ibm]\n"
	f("a path with the protocol", r+`path = "/x/{a}/{b}"`, `20-bad.toml: relays.ibm.path: implied by protocol = "appconfiguration"`)
	f("an unknown protocol", r+`protocol = "graphql"`, `20-bad.toml: relays.ibm.protocol: unknown protocol "graphql"`)
	f("no guid", r+`guid = ""`, "20-bad.toml: relays.ibm.guid: required")
	f("a bad guid", r+`guid = "a b"`, `relays.ibm.guid: "a b" is not an instance GUID`)
	f("no API key file", r+`apikey_file = ""`, "20-bad.toml: relays.ibm.apikey_file: required")
	f("a missing API key file", r+`apikey_file = "/nonexistent/apikey"`, "20-bad.toml: relays.ibm.apikey_file: ")
	f("a bad IAM URL", r+`iam_url = "ftp://iam"`, `20-bad.toml: relays.ibm.iam_url: "ftp://iam" is not an http(s) URL`)
	f("a guid for another server", "[relays.ibm.guids]\n\"127.0.0.1:1\" = \"g\"\n", `20-bad.toml: relays.ibm.guids: "127.0.0.1:1" is not a server of pool "ibm"`)
	f("a topic of three parts", r+`topics = ["a/b/c"]`, "20-bad.toml: relays.ibm.topics.0: ")
	f("the key in another header", "[relays.ibm.auth]\nheader = \"X-Key\"\n", `20-bad.toml: relays.ibm.auth.header: "X-Key": the App Configuration SDKs send their key in Authorization`)
	f("Authorization in the headers file", r+fmt.Sprintf("upstream_headers_file = %q\n", hdr), "20-bad.toml: relays.ibm.upstream_headers_file: ", "sets Authorization")
	f("two relays for one instance", "[relays.again]\npool = \"ibm\"\nprotocol = \"appconfiguration\"\nguid = \"g-primary\"\n"+
		fmt.Sprintf("apikey_file = %q\n", filepath.Join(dir, "apikey")),
		`10-base.toml: relays.ibm.protocol: "appconfiguration" (every path under /apprapp/) on every host overlaps relays.again.protocol`,
		"20-bad.toml): both take /apprapp/wsfeature on any host")
	f("App Configuration keys on a generic relay", "[relays.other]\npool = \"ibm\"\npath = \"/o/{a}\"\nsnapshot = \"/s/{a}\"\nevents = \"/e/{a}\"\nguid = \"g\"\n",
		`20-bad.toml: relays.other.guid: only with protocol = "appconfiguration"`)
}

// A relay's files are watched like every other file the config reads: editing only one of them is a
// config change.
func TestARelaysAPIKeyAndKeysFilesAreAmongTheFilesWatched(t *testing.T) {
	base, dir := appConfigBase(t)
	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-ibm.toml": base}))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dir, "apikey"), filepath.Join(dir, "keys")} {
		if !slices.Contains(cfg.SecretFiles(), f) {
			t.Errorf("SecretFiles %v lacks %s", cfg.SecretFiles(), f)
		}
	}
	hdr, keys := testkit.RelaySecrets(t, t.TempDir())
	generic := testkit.Relay{Servers: []string{"127.0.0.1:19281"}, Dir: filepath.Dir(hdr)}.Config(t)
	if cfg, err = Load(testkit.WriteFiles(t, map[string]string{"10-relay.toml": generic})); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.SecretFiles(), hdr) || !slices.Contains(cfg.SecretFiles(), keys) {
		t.Errorf("SecretFiles %v lacks the upstream headers file or the keys file", cfg.SecretFiles())
	}
}
