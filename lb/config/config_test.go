package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

const minimalConfig = `
[pools.platform]
servers = ["127.0.0.1:9081", "127.0.0.1:9082"]
[[routes]]
pool = "platform"
`

func TestLoadConfigAppliesTheDocumentedDefaults(t *testing.T) {
	cfg, err := Load(testkit.WriteFiles(t, map[string]string{"a.toml": minimalConfig}))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pools["platform"]
	ck := p.Check
	f := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	f("frontend.listen", cfg.Frontend.Listen, "127.0.0.1:8080")
	f("admin.listen", cfg.Admin.Listen, "127.0.0.1:8404")
	f("balance", p.Balance, "leader")
	f("queue_timeout", p.QueueTimeout.D, 5*time.Second)
	f("check.path", ck.Path, "/Thingworx/Admin/HA/LeaderCheck")
	f("check.interval", ck.Interval.D, 15*time.Second)
	f("check.interval_max", ck.IntervalMax.D, 20*time.Second)
	f("check.fast_interval", ck.FastInterval.D, 250*time.Millisecond)
	f("check.timeout", ck.Timeout.D, 5*time.Second)
	f("check.fall", ck.Fall, 3)
}

func TestConfDFilesMergeInLexicalOrder(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{
		"10-base.toml": `
[pools.platform]
servers = ["127.0.0.1:9081"]
[[routes]]
pool = "platform"
paths = ["/Thingworx"]
[frontend]
listen = "127.0.0.1:7000"
idle_timeout = "30s"
[pools.platform.check]
interval = "10s"
`,
		"20-override.toml": `
[frontend]
listen = "127.0.0.1:7001"
[pools.platform.check]
fall = 5
[pools.other]
servers = ["127.0.0.1:9999"]
[[routes]]
pool = "other"
paths = ["/other"]
`,
		"notes.txt": "not a config file",
	})
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Frontend.Listen != "127.0.0.1:7001" || cfg.Frontend.IdleTimeout.D != 30*time.Second {
		t.Errorf("frontend = %+v, want listen from the later file and idle_timeout from the earlier", cfg.Frontend)
	}
	ck := cfg.Pools["platform"].Check
	if ck.Interval.D != 10*time.Second || ck.Fall != 5 || ck.IntervalMax.D != 10*time.Second*4/3 {
		t.Errorf("check = interval %s fall %d interval_max %s", ck.Interval.D, ck.Fall, ck.IntervalMax.D)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[0].Pool != "platform" || cfg.Routes[1].Pool != "other" {
		t.Errorf("routes = %+v, want platform then other", cfg.Routes)
	}
	if len(cfg.Files) != 2 {
		t.Errorf("files = %v, want the two .toml files", cfg.Files)
	}
}

// loadFails loads base as 10-base.toml and bad as 20-bad.toml and reports unless Load fails with an
// *Error whose text holds each of want; it returns the error.
func loadFails(t *testing.T, name, base, bad string, want ...string) error {
	t.Helper()
	_, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": base, "20-bad.toml": bad}))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Errorf("%s: got %v, want an *Error", name, err)
		return err
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not contain %q", name, err, w)
		}
	}
	return err
}

func TestConfigErrorsNameTheFileAndTheKey(t *testing.T) {
	f := func(name, extra string, want ...string) {
		t.Helper()
		loadFails(t, name, minimalConfig, extra, want...)
	}
	bad := filepath.Join("20-bad.toml")
	f("unknown key", "[frontend]\nlisen = \"x\"\n", bad+": frontend.lisen: unknown key")
	f("unknown key in a pool", "[pools.platform.check]\nintervall = \"1s\"\n", bad+": pools.platform.check.intervall: unknown key")
	f("route to an undefined pool", "[[routes]]\npool = \"nope\"\n", bad+": routes.1.pool: pool \"nope\" is not defined")
	f("empty server list", "[pools.empty]\nservers = []\n", bad+": pools.empty.servers: empty server list")
	f("a websocket route after the catch-all", "[[routes]]\nwebsocket = true\npaths = [\"/Thingworx/WS\"]\npool = \"platform\"\n",
		bad+`: routes.1: never matches (paths "/Thingworx/WS", websocket only): routes.0 (every path, in `,
		`10-base.toml) comes before it and matches every request it could; put routes.1 first or narrow the paths of routes.0`)
	f("bad duration", "[pools.platform.check]\ninterval = \"15x\"\n", bad+": pools.platform.check.interval: bad duration \"15x\"")
	f("bad address", "[frontend]\nlisten = \"localhost\"\n", bad+": frontend.listen: bad address")
	f("bad server address", "[pools.x]\nservers = [\"127.0.0.1:99999\"]\n", bad+": pools.x.servers.0: bad address")
	f("bad balance", "[pools.platform]\nbalance = \"random\"\n", bad+": pools.platform.balance: unknown balance")
	f("interval_max below interval", "[pools.platform.check]\ninterval = \"20s\"\ninterval_max = \"10s\"\n", bad+": pools.platform.check.interval_max")
	f("bad credentials", "[pools.platform.check]\ncredentials = \"not base64!\"\n", bad+": pools.platform.check.credentials: not valid base64")
	f("wrong type", "[pools.platform]\nservers = \"127.0.0.1:1\"\n", bad)
	f("syntax error", "[frontend\n", bad)
	f("negative rate_per_source", "[frontend]\nrate_per_source = -1\n", bad+": frontend.rate_per_source: must not be negative")
	f("burst_per_source without a rate", "[frontend]\nburst_per_source = 10\n", bad+": frontend.burst_per_source: needs rate_per_source")
	f("negative max_conns_per_source", "[frontend]\nmax_conns_per_source = -2\n", bad+": frontend.max_conns_per_source: must not be negative")
	f("bad proxy_protocol", "[frontend]\nproxy_protocol = [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n", bad+`: frontend.proxy_protocol.1: "10.0.0.0/33" is neither a CIDR nor an IP address`)
	f("proxy_protocol from every IPv4 address", "[frontend]\nproxy_protocol = [\"10.1.0.0/24\", \"0.0.0.0/0\"]\n",
		bad+`: frontend.proxy_protocol.1: "0.0.0.0/0" lists every address: any host could forge its clients' addresses; list only the load balancers' own addresses or subnets`)
	f("proxy_protocol from every IPv6 address", "[frontend]\nproxy_protocol = [\"::/0\"]\n", bad+`: frontend.proxy_protocol.0: "::/0" lists every address`)
	f("proxy_protocol from every address, unmasked", "[frontend]\nproxy_protocol = [\"10.1.2.3/0\"]\n", bad+`: frontend.proxy_protocol.0: "10.1.2.3/0" lists every address`)
	f("negative new_tunnels_per_second", "[pools.platform]\nnew_tunnels_per_second = -5\n", bad+": pools.platform.new_tunnels_per_second: must not be negative")
	f("several errors at once", "[frontend]\nlisen = 1\n[pools.platform.check]\nfall = 0\n",
		"frontend.lisen: unknown key", "pools.platform.check.fall: must be greater than zero")
}

// TestARouteIsShadowedWhenEarlierRoutesMatchEveryRequestItCould checks the rule of shadowedBy against
// route.matches: routes are written "ws /a /b" (websocket only, paths /a and /b), "" for a catch-all;
// want lists the earlier routes that shadow the last one, or none.
func TestARouteIsShadowedWhenEarlierRoutesMatchEveryRequestItCould(t *testing.T) {
	f := func(name string, routes []string, want ...int) {
		t.Helper()
		var rs []Route
		for _, r := range routes {
			var rc Route
			for _, w := range strings.Fields(r) {
				if w == "ws" {
					rc.WebSocket = true
				} else {
					rc.Paths = append(rc.Paths, w)
				}
			}
			rs = append(rs, rc)
		}
		if got := shadowedBy(rs, len(rs)-1); !slices.Equal(got, want) {
			t.Errorf("%s: %q: shadowed by %v, want %v", name, routes, got, want)
		}
	}
	f("a websocket route after a catch-all", []string{"", "ws /Thingworx/WS"}, 0)
	f("a catch-all after a catch-all", []string{"", ""}, 0)
	f("a catch-all after the prefix / (every path starts with it)", []string{"/", ""}, 0)
	f("the prefix / after a catch-all", []string{"", "/"}, 0)
	f("a longer prefix after a shorter one", []string{"/a", "/a/b"}, 0)
	f("a prefix is a string prefix, not a segment one", []string{"/a", "/ab"}, 0)
	f("the same prefix twice", []string{"/a", "/a"}, 0)
	f("a websocket route after a websocket route with a shorter prefix", []string{"ws /a", "ws /a/b"}, 0)
	f("each prefix covered by another route", []string{"/a", "/b", "/a/x /b"}, 0, 1)
	f("the first route covering a prefix is named", []string{"/a", "/a/x", "/a/x/y"}, 0)

	f("the websocket route first, as conf.d ships it", []string{"ws /Thingworx/WS", ""})
	f("a websocket-only route leaves plain requests to a later route", []string{"ws /a", "/a"})
	f("a websocket catch-all leaves plain requests to a later catch-all", []string{"ws", ""})
	f("a shorter prefix after a longer one", []string{"/a/b", "/a"})
	f("a trailing slash leaves the path without it", []string{"/a/", "/a"})
	f("one prefix of several not covered", []string{"/a /c", "/a /b"})
	f("a catch-all after paths", []string{"/a", ""})
	f("a route with a bad prefix shadows nothing (it is a problem of its own)", []string{"x /", "/a"})
	f("the first route", []string{""})
}

func TestCredentialsNeverAppearInConfigErrors(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{"a.toml": minimalConfig + "[pools.platform.check]\ncredentials = \"c2VjcmV0\"\n"})
	_, err := Load(dir)
	if err == nil || strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("got %v: want an error that does not show the credentials", err)
	}
}

// A file with type errors in several pools lists each of them, in pool order, the same at every load
// (the decoder alone stops at one, chosen by map order: found by FuzzLoadConfig).
func TestTypeErrorsOfSeveralPoolsAreAllListedTheSameEveryTime(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{"10-x.toml": "[pools.a]\nmax_conns = \"x\"\n[pools.b]\nmax_conns = \"y\"\n[pools.c]\nservers = 3\n[[routes]]\npool = \"a\"\n"})
	var first string
	for i := range 20 {
		_, err := Load(dir)
		if err == nil {
			t.Fatal("loaded")
		}
		if i == 0 {
			first = err.Error()
			for _, want := range []string{`pools.a.max_conns`, `pools.b.max_conns`, `pools.c.servers`} {
				if !strings.Contains(first, want) {
					t.Errorf("%s is not named:\n%s", want, first)
				}
			}
		} else if err.Error() != first {
			t.Fatalf("load %d differs:\n%s\nfirst:\n%s", i, err, first)
		}
	}
	// The fuzzer's input: pools that are not tables.
	dir = testkit.WriteFiles(t, map[string]string{"10-x.toml": "[pools]\n\"\"=\"\"\n\"9\"=\"\\b\"\n"})
	_, e1 := Load(dir)
	for range 20 {
		if _, e := Load(dir); e == nil || e1 == nil || e.Error() != e1.Error() {
			t.Fatalf("loads differ: %v / %v", e, e1)
		}
	}
}

func TestTypeErrorsOfOneTableAreAllListed(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{"10-x.toml": "[frontend]\nmax_conns = \"x\"\nretry_buffer = \"y\"\nmax_header_size = [1]\n[pools.a]\nservers = [\"127.0.0.1:1\"]\n[[routes]]\npool = \"a\"\n"})
	_, err := Load(dir)
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{"frontend.max_conns", "frontend.retry_buffer", "frontend.max_header_size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s is not named:\n%s", want, err)
		}
	}
	for range 10 {
		if _, e := Load(dir); e == nil || e.Error() != err.Error() {
			t.Fatalf("loads differ:\n%v\n%v", e, err)
		}
	}
}

func TestAFieldsKeyIsItsTomlPath(t *testing.T) {
	c := &Config{Pools: map[string]*Pool{"p": {Servers: []string{"a:1", "b:2", "c:3"}}},
		Routes: []Route{{Pool: "p"}, {Pool: "p"}}, Relays: map[string]*Relay{"r": {}}}
	f := func(field any, want string) {
		t.Helper()
		if got := c.keyOf(field); got != want {
			t.Errorf("keyOf = %q, want %q", got, want)
		}
	}
	f(&c.Frontend.Listen, "frontend.listen")
	f(&c.Global.StateMaxAge, "global.state_max_age")
	f(&c.Pools["p"].Check.Interval, "pools.p.check.interval")
	f(&c.Pools["p"].Check, "pools.p.check")
	f(&c.Pools["p"].Servers, "pools.p.servers")
	f(&c.Pools["p"].Servers[2], "pools.p.servers.2")
	f(&c.Pools["p"].Discovery.EmptyGrace, "pools.p.discovery.empty_grace")
	f(&c.Routes[1].Pool, "routes.1.pool")
	f(&c.Relays["r"].KeepAlive, "relays.r.keepalive")
}

// The status page lists pools as the files do, leader pools first (not alphabetically).
func TestPoolNamesFollowTheFilesWithLeaderPoolsFirst(t *testing.T) {
	dir := testkit.WriteFiles(t, map[string]string{
		"10-a.toml": `
[pools.zeta]
balance = "roundrobin"
servers = ["127.0.0.1:9001"]
[pools.alpha]
balance = "roundrobin"
servers = ["127.0.0.1:9002"]
[pools.platform]
servers = ["127.0.0.1:9003"]
[[routes]]
pool = "platform"
paths = ["/Thingworx"]
[[routes]]
pool = "zeta"
paths = ["/z"]
[[routes]]
pool = "alpha"
paths = ["/a"]
`,
		"20-b.toml": `
[pools.middle]
balance = "roundrobin"
servers = ["127.0.0.1:9004"]
[pools.alpha.check]
fall = 5
[[routes]]
pool = "middle"
paths = ["/m"]
`,
	})
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(cfg.PoolNames(), " "), "platform zeta alpha middle"; got != want {
		t.Fatalf("PoolNames() = %q, want %q", got, want)
	}
}
