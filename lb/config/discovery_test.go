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

// A pool's [discovery] table: the errors name the file and the key, each provider takes only its own
// keys, the defaults, and the digest password file counted in the config. The providers themselves are
// tested in lb/discovery, their lists put in force in lb.

// discoveryPool is a conf.d of one file, 10-NAME.toml: a roundrobin pool NAME over seed with the lines of
// its [pools.NAME.discovery] table, behind a catch-all route.
func discoveryPool(pool string, seed []string, table string) map[string]string {
	var c testkit.Config
	c.Table("pools."+pool).Set("balance", "roundrobin").Set("servers", seed)
	c.Table("pools." + pool + ".discovery").Lines(table)
	c.Array("routes").Set("pool", pool)
	return map[string]string{"10-" + pool + ".toml": c.String()}
}

// discoveryErrors returns a check that files with more (a second file, 20-more.toml) fail to load with
// want in the error.
func discoveryErrors(t *testing.T, files map[string]string) func(more, want string) {
	return func(more, want string) {
		t.Helper()
		all := map[string]string{"20-more.toml": more}
		for name, body := range files {
			all[name] = body
		}
		_, err := Load(testkit.WriteFiles(t, all))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", more, err, want)
		}
	}
}

func TestDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	files := discoveryPool("rr", []string{"127.0.0.1:1"}, `provider = "file"
file = "/etc/fairlead/servers.toml"`)
	f := discoveryErrors(t, files)
	f("[pools.rr.discovery]\nprovider = \"consul\"\n", "20-more.toml: pools.rr.discovery.provider: unknown provider \"consul\"")
	f("[pools.rr.discovery]\nname = \"x\"\n", "pools.rr.discovery.name: not a key of the file provider")
	f("[pools.rr.discovery]\nempty_grace = \"soon\"\n", "pools.rr.discovery.empty_grace: bad duration")
	f("[pools.other]\nservers = [\"127.0.0.1:2\"]\n[pools.other.discovery]\npath = \"/x\"\n", "pools.other.discovery.path: needs provider")
	f("[pools.other]\nbalance = \"roundrobin\"\n", "pools.other.servers: empty server list")

	// With a provider, servers may be empty (no seed).
	if _, err := Load(testkit.WriteFiles(t, discoveryPool("rr", nil, `provider = "file"
file = "/etc/fairlead/servers.toml"`))); err != nil {
		t.Fatalf("no seed: %v", err)
	}
}

func TestDNSDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	base := discoveryPool("rr", []string{"127.0.0.1:1"}, `provider = "dns"
name = "cx.fairlead.test"`)
	check := discoveryErrors(t, base)
	f := func(table, want string) { t.Helper(); check("[pools.rr.discovery]\n"+table, want) }
	f(`name = ""`, "20-more.toml: pools.rr.discovery.name: required")
	f(`name = "cx..test"`, `20-more.toml: pools.rr.discovery.name: bad DNS name "cx..test"`)
	f(`name = "cx test"`, `pools.rr.discovery.name: bad DNS name "cx test"`)
	f(`port = 70000`, "20-more.toml: pools.rr.discovery.port: port 70000 out of range (1 to 65535)")
	f(`port = 0`, "20-more.toml: pools.rr.discovery.port: port 0 out of range")
	f(`port = -1`, "pools.rr.discovery.port: port -1 out of range")
	f(`resolve_interval = "0s"`, "20-more.toml: pools.rr.discovery.resolve_interval: must be positive")
	f(`resolve_interval = "often"`, `20-more.toml: pools.rr.discovery.resolve_interval: bad duration "often"`)
	f(`resolvers = ["10.0.0.2"]`, `20-more.toml: pools.rr.discovery.resolvers.0: bad resolver address "10.0.0.2"`)
	f(`resolvers = ["10.0.0.2:53", ":53"]`, `pools.rr.discovery.resolvers.1: bad resolver address ":53"`)
	f(`path = "/services/cx"`, "20-more.toml: pools.rr.discovery.path: not a key of the dns provider")
	f(`file = "/etc/fairlead/cx.toml"`, "pools.rr.discovery.file: not a key of the dns provider")
	// A provider in 10-rr.toml and no name anywhere: the error names the file that set the table.
	if _, err := Load(testkit.WriteFiles(t, discoveryPool("rr", nil, `provider = "dns"`))); err == nil ||
		!strings.Contains(err.Error(), "10-rr.toml: pools.rr.discovery.name: required") {
		t.Errorf("missing name: %v", err)
	}

	// Defaults: resolve_interval 10s (only for dns), the system resolver.
	cfg, err := Load(testkit.WriteFiles(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Pools["rr"].Discovery; d.ResolveInterval.D != 10*time.Second || d.Port != 0 || d.Resolvers != nil {
		t.Fatalf("defaults: %+v", d)
	}
	cfg, err = Load(testkit.WriteFiles(t, discoveryPool("rr", nil, `provider = "file"
file = "/nonexistent/cx.toml"`)))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Pools["rr"].Discovery.ResolveInterval.D; d != 0 {
		t.Fatalf("resolve_interval of a file provider: %s", d)
	}
}

func TestFileDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	base := discoveryPool("rr", []string{"127.0.0.1:1"}, `provider = "file"
file = "/etc/fairlead/cx-servers.toml"`)
	check := discoveryErrors(t, base)
	f := func(table, want string) { t.Helper(); check("[pools.rr.discovery]\n"+table, want) }
	f(`file = ""`, "20-more.toml: pools.rr.discovery.file: required")
	f(`file = "  "`, "20-more.toml: pools.rr.discovery.file: required")
	f(`name = "cx.fairlead.test"`, "20-more.toml: pools.rr.discovery.name: not a key of the file provider")
	f(`resolve_interval = "10s"`, "pools.rr.discovery.resolve_interval: not a key of the file provider")
	f(`zookeeper = ["127.0.0.1:2181"]`, "pools.rr.discovery.zookeeper: not a key of the file provider")
	if _, err := Load(testkit.WriteFiles(t, discoveryPool("rr", nil, `provider = "file"`))); err == nil ||
		!strings.Contains(err.Error(), "10-rr.toml: pools.rr.discovery.file: required") {
		t.Errorf("missing file: %v", err)
	}
	// The file need not exist when the config is loaded.
	if _, err := Load(testkit.WriteFiles(t, base)); err != nil {
		t.Fatalf("a file that does not exist yet: %v", err)
	}
}

// zkPool is pool platform with the zookeeper provider on 127.0.0.1:2181 and /services/thingworx, and
// lines (more keys of its table).
func zkPool(lines ...string) map[string]string {
	lines = append([]string{`provider = "zookeeper"`, `zookeeper = ["127.0.0.1:2181"]`, `path = "/services/thingworx"`}, lines...)
	return discoveryPool("platform", []string{}, strings.Join(lines, "\n"))
}

func TestZooKeeperDiscoveryConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600) //nolint:errcheck
	missing := filepath.Join(dir, "missing")
	check := discoveryErrors(t, zkPool(`session_timeout = "2s"`))
	f := func(table, want string) { t.Helper(); check("[pools.platform.discovery]\n"+table+"\n", want) }
	k := "20-more.toml: pools.platform.discovery."
	f(`zookeeper = []`, k+"zookeeper: required")
	f(`zookeeper = ["zk1"]`, k+`zookeeper: bad address "zk1": missing port in address`)
	f(`zookeeper = ["zk1:0"]`, k+`zookeeper: bad address "zk1:0": port 0`)
	f(`path = ""`, k+"path: required")
	f(`path = "services/thingworx"`, k+`path: "services/thingworx" is not absolute`)
	f(`path = "/services/thingworx/"`, k+`path: "/services/thingworx/" ends with /`)
	f(`path = "/"`, k+`path: "/" ends with /`)
	f(`path = "/services//thingworx"`, k+"path: \"/services//thingworx\" has an empty segment")
	f(`path = "/services/../thingworx"`, k+`path: "/services/../thingworx" has a relative segment ".."`)
	f(`session_timeout = "soon"`, k+`session_timeout: bad duration "soon"`)
	f(`session_timeout = "0s"`, k+"session_timeout: must be at least 1ms")
	f(`session_timeout = "2h"`, k+"session_timeout: must be at most 1h")
	f(`digest_user = "fairlead"`, k+"digest_password_file: digest_user and digest_password_file go together")
	f(fmt.Sprintf("digest_password_file = %q", empty), k+"digest_user: digest_user and digest_password_file go together")
	f(fmt.Sprintf("digest_user = \"fairlead\"\ndigest_password_file = %q", missing), k+"digest_password_file: open "+missing+": no such file or directory")
	f(fmt.Sprintf("digest_user = \"fairlead\"\ndigest_password_file = %q", empty), k+"digest_password_file: "+empty+" is empty")
	f(fmt.Sprintf("digest_user = \"a:b\"\ndigest_password_file = %q", empty), k+"digest_user: must not contain ':'")
	f(`name = "thingworx.service.consul"`, k+"name: not a key of the zookeeper provider")
	f(`file = "/etc/fairlead/servers.toml"`, k+"file: not a key of the zookeeper provider")
	f(`resolve_interval = "5s"`, k+"resolve_interval: not a key of the zookeeper provider")

	// The defaults: session_timeout 10s (zookeeper only), empty_grace 30s.
	cfg, err := Load(testkit.WriteFiles(t, zkPool()))
	if err != nil {
		t.Fatal(err)
	}
	if dc := cfg.Pools["platform"].Discovery; dc.SessionTimeout.D != 10*time.Second || dc.EmptyGrace.D != 30*time.Second {
		t.Fatalf("defaults: session_timeout %s, empty_grace %s", dc.SessionTimeout.D, dc.EmptyGrace.D)
	}
}

func TestZooKeeperDigestPasswordFileIsReadWatchedAndCountedInTheConfigDigest(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "zk-password")
	os.WriteFile(pw, []byte("s3cret-Pw\n"), 0o600) //nolint:errcheck
	dir := testkit.WriteFiles(t, zkPool(`digest_user = "fairlead"`, fmt.Sprintf("digest_password_file = %q", pw)))
	before, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dc := before.Pools["platform"].Discovery; dc.DigestUser != "fairlead" || dc.DigestPassword != "s3cret-Pw" {
		t.Fatalf("digest credentials %q, %q", dc.DigestUser, dc.DigestPassword)
	}
	if !slices.Contains(before.SecretFiles(), pw) {
		t.Fatalf("SecretFiles %v lacks the password file", before.SecretFiles())
	}
	// Rotated: a reload applies it (the config's digest changes).
	os.WriteFile(pw, []byte("rotated-Pw\n"), 0o600) //nolint:errcheck
	after, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if before.Digest == "" || before.Digest == after.Digest || after.Pools["platform"].Discovery.DigestPassword != "rotated-Pw" {
		t.Fatalf("a rotated password: digest %q → %q, password %q", before.Digest, after.Digest, after.Pools["platform"].Discovery.DigestPassword)
	}
}
