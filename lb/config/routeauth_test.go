package config

// [routes.auth] as Load reads it from conf.d: the table belongs to the route before it, across files,
// and every problem of one names the file and the key and shows no secret. Route auth at work
// (refusals, the injected credential, reloads of the keys) is package lb's.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// Secrets of the route auth tests: a client key and the platform's application key that only fairlead
// holds.
const (
	authClientKey = "device-key-alpha-7f3e"
	authAppKey    = "platform-app-key-5d0b9e"
)

// authFiles writes a keys file (with a comment and a blank line around the key) and the upstream value
// file into a new directory and returns their paths.
func authFiles(t *testing.T) (keysFile, valueFile string) {
	t.Helper()
	dir := t.TempDir()
	keysFile, valueFile = filepath.Join(dir, "client-keys"), filepath.Join(dir, "platform-appkey")
	writeTestFile(t, keysFile, "# client keys of the test\n\n"+authClientKey+"\n")
	writeTestFile(t, valueFile, "  "+authAppKey+"\n")
	return keysFile, valueFile
}

func writeTestFile(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRouteAuthTableBelongsToTheRouteBeforeItAcrossConfDFiles(t *testing.T) {
	keys, value := authFiles(t)
	dir := testkit.WriteFiles(t, map[string]string{
		// The first route is not a catch-all: it would shadow the others (a config error).
		"10-a.toml": strings.Replace(minimalConfig, `pool = "platform"`, "pool = \"platform\"\npaths = [\"/p\"]", 1) + fmt.Sprintf(`
[[routes]]
pool = "platform"
paths = ["/a"]
[routes.auth]
keys_file = %q
`, keys),
		"20-b.toml": fmt.Sprintf(`
[[routes]]
pool = "platform"
paths = ["/echo-headers", "/Thingworx"]
[routes.auth]
keys_file = %q
header = "appKey"
upstream_header = "appKey"
upstream_value_file = %q

[[routes]]
pool = "platform"
paths = ["/c"]
`, keys, value),
	})
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != 4 {
		t.Fatalf("%d routes, want 4", len(cfg.Routes))
	}
	f := func(i int, want *RouteAuth) {
		t.Helper()
		got := cfg.Routes[i].Auth
		switch {
		case want == nil && got != nil:
			t.Errorf("routes.%d.auth = %+v, want none", i, *got)
		case want != nil && (got == nil || *got != *want):
			t.Errorf("routes.%d.auth = %v, want %+v", i, got, *want)
		case (cfg.RouteAuthOf(i) != nil) != (want != nil):
			t.Errorf("routes.%d: loaded auth %v, want %v", i, cfg.RouteAuthOf(i) != nil, want != nil)
		}
	}
	f(0, nil)
	f(1, &RouteAuth{KeysFile: keys, Header: "Authorization"}) // the documented default header
	f(2, &RouteAuth{KeysFile: keys, Header: "appKey", UpstreamHeader: "appKey", UpstreamValueFile: value})
	f(3, nil)
	if a := cfg.RouteAuthOf(1); a == nil || !a.Bearer || !a.Admits([]byte("Bearer "+authClientKey)) || a.UpstreamHeader != "" {
		t.Errorf("routes.1: loaded %+v, want a Bearer check of one key injecting nothing", a)
	}
	if a := cfg.RouteAuthOf(2); a == nil || a.Bearer || a.UpstreamValue != authAppKey {
		t.Errorf("routes.2: want an appKey check injecting the trimmed value file")
	}
}

func TestRouteAuthConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	keys, value := authFiles(t)
	dir := t.TempDir()
	empty, blank, missing, twoLines := filepath.Join(dir, "empty"), filepath.Join(dir, "blank"), filepath.Join(dir, "missing"), filepath.Join(dir, "two-lines")
	writeTestFile(t, empty, "# no keys yet\n\n   \n")
	writeTestFile(t, blank, " \n\n")
	writeTestFile(t, twoLines, authAppKey+"\nX-Injected: "+authAppKey+"\n")
	f := func(name, auth string, want ...string) {
		t.Helper()
		err := loadFails(t, name, minimalConfig, "[[routes]]\npool = \"platform\"\n[routes.auth]\n"+auth, want...)
		for _, secret := range []string{authClientKey, authAppKey} {
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("%s: error %q shows a secret", name, err)
			}
		}
	}
	at := func(key string) string { return "20-bad.toml: routes.1.auth." + key + ": " }
	f("keys file missing", fmt.Sprintf("keys_file = %q\n", missing),
		at("keys_file")+"open "+missing+": no such file or directory")
	f("keys file without keys", fmt.Sprintf("keys_file = %q\n", empty), at("keys_file")+empty+" has no keys")
	f("no keys_file", "header = \"appKey\"\n", at("keys_file")+"required with [routes.auth]")
	f("upstream_header without its value file", fmt.Sprintf("keys_file = %q\nupstream_header = \"appKey\"\n", keys),
		at("upstream_value_file")+"upstream_header and upstream_value_file go together")
	f("value file without upstream_header", fmt.Sprintf("keys_file = %q\nupstream_value_file = %q\n", keys, value),
		at("upstream_header")+"upstream_header and upstream_value_file go together")
	f("value file missing", fmt.Sprintf("keys_file = %q\nupstream_header = \"appKey\"\nupstream_value_file = %q\n", keys, missing),
		at("upstream_value_file")+"open "+missing)
	f("value file empty", fmt.Sprintf("keys_file = %q\nupstream_header = \"appKey\"\nupstream_value_file = %q\n", keys, blank),
		at("upstream_value_file")+blank+" is empty")
	f("value file of two lines", fmt.Sprintf("keys_file = %q\nupstream_header = \"appKey\"\nupstream_value_file = %q\n", keys, twoLines),
		at("upstream_value_file")+twoLines+" must hold one line")
	f("bad header", fmt.Sprintf("keys_file = %q\nheader = \"app key\"\n", keys), at("header")+"bad header name")
	f("framing header", fmt.Sprintf("keys_file = %q\nheader = \"Host\"\n", keys), at("header")+"\"Host\" cannot carry a key")
	f("upstream header removed by fairlead", fmt.Sprintf("keys_file = %q\nupstream_header = \"Proxy-Authorization\"\nupstream_value_file = %q\n", keys, value),
		at("upstream_header")+"\"Proxy-Authorization\" is set or removed by fairlead")
	f("unknown key", fmt.Sprintf("keys_file = %q\nkey_file = \"x\"\n", keys), "20-bad.toml: routes.auth.key_file: unknown key") // TOML's metadata knows no route index
}
