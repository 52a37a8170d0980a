package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// Relays on one path ([relays.NAME] hosts): two relays may take the same paths when their hosts never
// match the same host (a test and a production cluster behind one ingress); when some request could go
// to either, the later relay (by name) is refused, naming both relays by file and key and a request both
// would take.

// secondRelay is a generic relay "second" on pool "appconfig" with path template path and, when given,
// hosts (a TOML list).
func secondRelay(path, hosts string) string {
	s := fmt.Sprintf("[relays.second]\npool = \"appconfig\"\npath = %q\nsnapshot = %q\nevents = %q\ntopics = []\n", path, "/s"+path, "/e"+path)
	if hosts != "" {
		s += "hosts = " + hosts + "\n"
	}
	return s
}

// firstHosts sets the hosts of the base's relay "appconfig" (path "/relay/{collection}/{environment}").
func firstHosts(hosts string) string { return "[relays.appconfig]\nhosts = " + hosts + "\n" }

func TestTwoRelaysMayShareAPathOnHostsThatNeverMeet(t *testing.T) {
	base, _ := relayBase(t)
	const same = "/relay/{collection}/{environment}"
	f := func(name, extra string) {
		t.Helper()
		cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": base, "20-more.toml": extra}))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if len(cfg.RelaySpecs) < 2 {
			t.Errorf("%s: relays %v, want both", name, slices.Sorted(maps.Keys(cfg.RelaySpecs)))
		}
	}
	f("test and prod", firstHosts(`["twx-test.example.com"]`)+secondRelay(same, `["twx.example.com"]`))
	f("any case, either side", firstHosts(`["TWX-Test.example.com", "cfg.test.example.org"]`)+secondRelay(same, `["twx.example.com", "CFG.example.org"]`))
	f("two wildcards", firstHosts(`["*.test.example.com"]`)+secondRelay(same, `["*.example.com"]`))
	f("a wildcard and the name itself", firstHosts(`["*.example.com"]`)+secondRelay(same, `["example.com"]`))
	f("a wildcard and a name two labels under it", firstHosts(`["*.example.com"]`)+secondRelay(same, `["a.b.example.com"]`))
	f("other names of one path", firstHosts(`["a.example.com"]`)+secondRelay("/relay/{c}/{e}", `["b.example.com"]`))
	f("paths of other lengths, every host", secondRelay("/relay/{collection}", ""))
	f("paths with other literals, every host", secondRelay("/config/{collection}/{environment}", ""))
	f("a literal a value cannot be", secondRelay("/relay/in~v/{environment}", ""))

	// App Configuration relays take every path under /apprapp/: one instance (or two) per host.
	ibm, dir := appConfigBase(t)
	again := func(guid, hosts string) string {
		return fmt.Sprintf("[relays.ibm]\nhosts = [\"twx.example.com\"]\n[relays.again]\npool = \"ibm\"\nprotocol = \"appconfiguration\"\nguid = %q\napikey_file = %q\nhosts = %s\n",
			guid, filepath.Join(dir, "apikey"), hosts)
	}
	for _, tc := range []struct{ name, extra string }{
		{"one instance on two hosts", again("g-primary", `["twx-test.example.com"]`)},
		{"two instances on two hosts", again("g-other", `["*.test.example.com"]`)},
		{"a generic relay outside /apprapp/", secondRelay("/relay/{collection}/{environment}", "") + "[pools.appconfig]\nservers = [\"127.0.0.1:1\"]\n"},
	} {
		cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": ibm, "20-more.toml": tc.extra}))
		if err != nil || len(cfg.RelaySpecs) != 2 {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestTwoRelaysThatCouldTakeOneRequestAreRefusedNamingBoth(t *testing.T) {
	base, _ := relayBase(t)
	const same = "/relay/{collection}/{environment}"
	later := `20-bad.toml: relays.second.path: "`
	earlier := func(hosts string) string {
		return `overlaps relays.appconfig.path "/relay/{collection}/{environment}" on ` + hosts + ` (in `
	}
	const fix = "which only one would answer; give the two relays hosts that never match the same host, or paths that differ"
	f := func(name, bad string, want ...string) {
		t.Helper()
		loadFails(t, name, base, bad, append(want, "10-base.toml): both take", fix)...)
	}
	f("one path, no hosts", secondRelay(same, ""),
		later+same+`" on every host `+earlier("every host"), "both take /relay/x/x on any host")
	f("one path, hosts on one only", secondRelay(same, `["twx.example.com"]`),
		later+same+`" on hosts "twx.example.com" `+earlier("every host"), "both take /relay/x/x on host twx.example.com")
	f("one path, one host in any case", firstHosts(`["a.example.com", "TWX.example.com"]`)+secondRelay(same, `["b.example.com", "twx.EXAMPLE.com"]`),
		`on hosts "b.example.com", "twx.example.com" `+earlier(`hosts "a.example.com", "twx.example.com"`), "/relay/x/x on host twx.example.com")
	f("a wildcard and a name one label under it", firstHosts(`["*.example.com"]`)+secondRelay(same, `["a.example.com"]`),
		"/relay/x/x on host a.example.com")
	f("the same wildcard", firstHosts(`["*.example.com"]`)+secondRelay(same, `["*.Example.com"]`),
		"/relay/x/x on host x.example.com")
	f("other names, the same paths", secondRelay("/relay/{c}/{e}", ""), later+`/relay/{c}/{e}" on every host`, "/relay/x/x on any host")
	f("a literal where the other has a name", secondRelay("/relay/inventory/{environment}", ""), "/relay/inventory/x on any host")

	// App Configuration relays: every path under /apprapp/, whatever the instance.
	ibm, dir := appConfigBase(t)
	g := func(name, bad string, want ...string) {
		t.Helper()
		loadFails(t, name, ibm, bad, want...)
	}
	again := fmt.Sprintf("[relays.again]\npool = \"ibm\"\nprotocol = \"appconfiguration\"\nguid = \"g-other\"\napikey_file = %q\n", filepath.Join(dir, "apikey"))
	g("two instances, no hosts", again,
		`10-base.toml: relays.ibm.protocol: "appconfiguration" (every path under /apprapp/) on every host overlaps relays.again.protocol "appconfiguration" (every path under /apprapp/) on every host (in `,
		"20-bad.toml): both take /apprapp/wsfeature on any host, which only one would answer; give the two relays hosts that never match the same host")
	g("two instances, a wildcard over a name", again+"hosts = [\"*.example.com\"]\n[relays.ibm]\nhosts = [\"twx.example.com\"]\n",
		`10-base.toml: relays.ibm.protocol: "appconfiguration" (every path under /apprapp/) on hosts "twx.example.com" overlaps relays.again.protocol`,
		"/apprapp/wsfeature on host twx.example.com")
	g("a generic relay under /apprapp/", "[relays.zz]\npool = \"ibm\"\npath = \"/{a}/{b}\"\nsnapshot = \"/s/{a}/{b}\"\nevents = \"/e/{a}/{b}\"\n",
		`20-bad.toml: relays.zz.path: "/{a}/{b}" on every host overlaps relays.ibm.protocol "appconfiguration" (every path under /apprapp/) on every host (in `,
		"10-base.toml): both take /apprapp/x on any host")
}

// An App Configuration relay takes every path under /apprapp/ on its hosts before any route: a route
// that it (and the routes before it) always take is refused as any shadowed route; a generic relay
// never shadows a route (its paths have a fixed number of segments).
func TestARouteUnderAnAppConfigurationRelayNeverMatches(t *testing.T) {
	ibm, _ := appConfigBase(t)
	route := func(paths, hosts string) string {
		s := "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\npaths = " + paths + "\n"
		if hosts != "" {
			s += "hosts = " + hosts + "\n"
		}
		return s
	}
	loadFails(t, "a route under /apprapp/", ibm, route(`["/apprapp/feature"]`, ""),
		`20-bad.toml: routes.0: never matches (paths "/apprapp/feature"): relays.ibm (paths "/apprapp/", protocol "appconfiguration", in `,
		`10-base.toml) comes before it and matches every request it could; narrow the paths of routes.0, or the hosts of relays.ibm`)
	loadFails(t, "a route under /apprapp/ on the relay's host", ibm, route(`["/apprapp/"]`, `["twx.example.com"]`)+"[relays.ibm]\nhosts = [\"*.example.com\"]\n",
		`routes.0: never matches (paths "/apprapp/", hosts "twx.example.com"): relays.ibm (paths "/apprapp/", hosts "*.example.com", protocol "appconfiguration", in `,
		"narrow the paths or hosts of routes.0, or the hosts of relays.ibm")
	for name, extra := range map[string]string{
		"a route on another host":         route(`["/apprapp/"]`, `["other.example.com"]`) + "[relays.ibm]\nhosts = [\"twx.example.com\"]\n",
		"a route with a path beside it":   route(`["/apprapp"]`, ""), // "/apprapp" itself, and "/apprappx", are not the relay's
		"a route with a path outside":     route(`["/apprapp/x", "/Thingworx"]`, ""),
		"a route on a generic relay path": route(`["/relay/inventory/dev"]`, "") + secondRelay("/relay/{collection}/{environment}", "") + "[pools.appconfig]\nservers = [\"127.0.0.1:1\"]\n",
	} {
		if _, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": ibm, "20-more.toml": extra})); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestHostsOverlap(t *testing.T) {
	f := func(a, b []string, want string, ok bool) {
		t.Helper()
		got, gotOK := hostsOverlap(a, b)
		if got != want || gotOK != ok {
			t.Errorf("%q, %q: %q %v, want %q %v", a, b, got, gotOK, want, ok)
		}
		if back, backOK := hostsOverlap(b, a); backOK != ok || (ok && !HostMatches(a, []byte(back)) && back != "") {
			t.Errorf("%q, %q the other way: %q %v", a, b, back, backOK)
		}
		if ok && got != "" && (!HostMatches(a, []byte(got)) || !HostMatches(b, []byte(got))) {
			t.Errorf("%q, %q: %q is not matched by both", a, b, got)
		}
	}
	h := func(hs ...string) []string { return hs }
	f(nil, nil, "", true)
	f(nil, h("a.x"), "a.x", true)
	f(h("*.x"), nil, "x.x", true)
	f(h("a.x"), h("a.x"), "a.x", true)
	f(h("*.x"), h("a.x"), "a.x", true)
	f(h("b.x", "a.x"), h("*.x"), "b.x", true)
	f(h("*.x"), h("*.x"), "x.x", true)
	f(h("a.x"), h("b.x"), "", false)
	f(h("*.x"), h("x"), "", false)
	f(h("*.x"), h("a.b.x"), "", false)
	f(h("*.x"), h("*.y.x"), "", false)
	f(h("*.x"), h("*.y"), "", false)
}
