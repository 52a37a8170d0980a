package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

func TestBadHostPatternsAreNamedWithTheFileAndTheKey(t *testing.T) {
	f := func(name, hosts, want string) {
		t.Helper()
		loadFails(t, name, minimalConfig, "[[routes]]\npool = \"platform\"\npaths = [\"/x\"]\nhosts = ["+hosts+"]\n",
			"20-bad.toml: routes.1.hosts."+want)
	}
	f("empty", `""`, `0: bad host pattern "": empty`)
	f("a port", `"twx.example.com:443"`, `0: bad host pattern "twx.example.com:443": has a port`)
	f("a port after an IPv6 address", `"[::1]:8443"`, `0: bad host pattern "[::1]:8443": has a port`)
	f("not an IPv6 address", `"[nope]"`, `0: bad host pattern "[nope]": not an IPv6 address`)
	f("a * inside a label", `"a.example.com", "tw*.example.com"`, `1: bad host pattern "tw*.example.com": * only as the whole first label`)
	f("a * in a later label", `"a.*.example.com"`, `0: bad host pattern "a.*.example.com": * only as the whole first label`)
	f("a * alone", `"*"`, `0: bad host pattern "*": "*" alone`)
	f("*. without a name", `"*."`, `0: bad host pattern "*.": "*." needs a name`)
	f("an underscore", `"my_host.example.com"`, `0: bad host pattern "my_host.example.com": a character not allowed in a host name: '_'`)
	f("a slash", `"example.com/x"`, `0: bad host pattern "example.com/x": a character not allowed in a host name: '/'`)
	f("an empty label", `"a..example.com"`, `0: bad host pattern "a..example.com": an empty label`)
	f("a trailing dot", `"example.com."`, `0: bad host pattern "example.com.": an empty label`)
	f("a label too long", `"`+strings.Repeat("a", 64)+`.com"`, `0: bad host pattern "`+strings.Repeat("a", 64)+`.com": a label longer than 63`)

	// A relay's hosts are checked the same way, under its own key.
	base, _ := relayBase(t)
	loadFails(t, "relay hosts", base, "[relays.appconfig]\nhosts = [\"ok.example.com\", \"x:1\"]\n",
		`20-bad.toml: relays.appconfig.hosts.1: bad host pattern "x:1": has a port`)

	// Valid patterns load, and are held in lower case for the match.
	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"a.toml": `
[pools.platform]
servers = ["127.0.0.1:9081"]
[[routes]]
pool = "platform"
hosts = ["TWX.Example.com", "*.example.org", "10.0.0.5", "[2001:db8::1]"]
`}))
	if err != nil {
		t.Fatal(err)
	}
	if got := LowerHosts(cfg.Routes[0].Hosts); !slices.Equal(got, []string{"twx.example.com", "*.example.org", "10.0.0.5", "[2001:db8::1]"}) {
		t.Errorf("hosts = %q", got)
	}
}

// A route with hosts is shadowed only by earlier routes whose hosts cover its own, path by path; a
// route without hosts covers every host.
func TestShadowingAccountsForHosts(t *testing.T) {
	f := func(name string, routes []Route, want ...int) {
		t.Helper()
		if got := shadowedBy(routes, len(routes)-1); !slices.Equal(got, want) {
			t.Errorf("%s: shadowed by %v, want %v", name, got, want)
		}
	}
	r := func(hosts []string, paths ...string) Route { return Route{Hosts: hosts, Paths: paths} }
	h := func(hs ...string) []string { return hs }

	f("a route with hosts after a catch-all", []Route{r(nil), r(h("a.example.com"), "/x")}, 0)
	f("the same host", []Route{r(h("a.example.com")), r(h("A.Example.COM"), "/x")}, 0)
	f("a wildcard covers a name one label under it", []Route{r(h("*.example.com")), r(h("a.example.com"))}, 0)
	f("a wildcard covers the same wildcard", []Route{r(h("*.example.com")), r(h("*.Example.com"))}, 0)
	f("each host covered by another route", []Route{r(h("a.example.com")), r(h("b.example.com")), r(h("a.example.com", "b.example.com"))}, 0, 1)
	f("each host and path covered by another route", []Route{r(h("a.example.com"), "/p"), r(nil, "/q"), r(h("a.example.com"), "/p", "/q")}, 0, 1)

	f("a catch-all after a route with hosts", []Route{r(h("a.example.com")), r(nil)})
	f("another host", []Route{r(h("a.example.com")), r(h("b.example.com"))})
	f("one host of several not covered", []Route{r(h("a.example.com")), r(h("a.example.com", "b.example.com"))})
	f("a wildcard does not cover the name itself", []Route{r(h("*.example.com")), r(h("example.com"))})
	f("a wildcard does not cover two labels under it", []Route{r(h("*.example.com")), r(h("a.b.example.com"))})
	f("names do not cover a wildcard", []Route{r(h("a.example.com", "b.example.com")), r(h("*.example.com"))})
	f("a wildcard does not cover a wider one", []Route{r(h("*.a.example.com")), r(h("*.example.com"))})
	f("the host is covered, the path is not", []Route{r(h("a.example.com"), "/p"), r(h("a.example.com"), "/q")})
	f("a route with a bad host shadows nothing (a problem of its own)", []Route{r(h("a:1")), r(h("a"))})

	// Through Load: the problem names the hosts of both routes.
	loadFails(t, "shadowed by hosts", minimalConfig, "[[routes]]\npool = \"platform\"\nhosts = [\"a.example.com\"]\n",
		`20-bad.toml: routes.1: never matches (every path, hosts "a.example.com"): routes.0 (every path, in `,
		`put routes.1 first or narrow the paths or hosts of routes.0`)
	if _, err := Load(testkit.WriteFiles(t, map[string]string{"a.toml": `
[pools.platform]
servers = ["127.0.0.1:9081"]
[pools.test]
servers = ["127.0.0.1:9091"]
[[routes]]
pool = "test"
hosts = ["twx-test.example.com", "*.test.example.org"]
[[routes]]
pool = "platform"
hosts = ["twx.example.com"]
[[routes]]
pool = "platform"
`})); err != nil {
		t.Errorf("routes by host, then a catch-all: %v", err)
	}
}

func TestHostMatches(t *testing.T) {
	pats := LowerHosts([]string{"twx.example.com", "*.Example.org", "10.0.0.5", "[2001:db8::1]"})
	for host, want := range map[string]bool{
		"twx.example.com": true, "TWX.EXAMPLE.COM": true, "a.example.org": true, "A.EXAMPLE.ORG": true,
		"10.0.0.5": true, "[2001:db8::1]": true,
		"example.org": false, ".example.org": false, "a.b.example.org": false, "twx.example.com.evil": false,
		"xtwx.example.com": false, "": false, "10.0.0.6": false, "aexample.org": false,
	} {
		if got := HostMatches(pats, []byte(host)); got != want {
			t.Errorf("%q: %v, want %v", host, got, want)
		}
	}
	if !HostMatches(nil, []byte("anything")) {
		t.Error("no patterns: want every host")
	}
	if n := testing.AllocsPerRun(100, func() { HostMatches(pats, []byte("A.example.org")[:13]) }); n != 0 {
		t.Errorf("HostMatches allocates %v times", n)
	}
}
