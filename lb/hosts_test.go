package lb

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
)

// Routes by host ([[routes]] hosts, [relays.NAME] hosts) through a running fairlead, over HTTP/1.1 and
// HTTP/2: the pattern rules themselves (case, wildcards, bad patterns, shadowing) are lb/config's.

// hostsFront is a fairlead with two clusters behind it: pool "test" for twx-test.example.com and
// *.test.example.org, pool "platform" for twx.example.com under /Thingworx, and no route for any other
// host. It listens on plain HTTP and on TLS (HTTP/2 by ALPN).
type hostsFront struct {
	l          *LB
	env        *tlsEnv
	tlsAddr    string
	prod, test string // the names of the two clusters' leaders (X-Served-By)
}

func startHostsFront(t *testing.T) *hostsFront {
	t.Helper()
	prod := testkit.StartCluster(t, sim.Options{Platforms: 1, PlatformNames: []string{"prod1"}, Logf: func(string, ...any) {}})
	test := testkit.StartCluster(t, sim.Options{Platforms: 1, PlatformNames: []string{"test1"}, Logf: func(string, ...any) {}})
	conf, _, check, route := poolConf("test", "leader", testkit.PlatformAddrs(test), true)
	fastChecks(check.Set("credentials", sim.DefaultCredentials))
	route.Set("hosts", []string{"twx-test.example.com", "*.test.example.org"})
	pool := conf.Table("pools.platform").Set("balance", "leader").Set("servers", testkit.PlatformAddrs(prod))
	fastChecks(pool.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials))
	conf.Array("routes").Set("pool", "platform").Set("hosts", []string{"TWX.example.com"}).Set("paths", []string{"/Thingworx"})
	env := newTLSEnv(t, "fairlead test CA")
	l, _, tlsAddr, _ := startTLSLB(t, map[string]string{"10-base.toml": conf.String()}, env.issue(t, "frontend", tlsName, "127.0.0.1"), "")
	f := &hostsFront{l: l, env: env, tlsAddr: tlsAddr, prod: "prod1", test: "test1"}
	testkit.Eventually(t, "both pools to have their leader", 10*time.Second, func() bool {
		return f.get(t, testClient, "http://"+l.Addr(), "twx.example.com", "/Thingworx/x").by == f.prod &&
			f.get(t, testClient, "http://"+l.Addr(), "twx-test.example.com", "/x").by == f.test
	})
	return f
}

// get sends GET path to base with Host (HTTP/2: :authority) host.
func (f *hostsFront) get(t *testing.T, client *http.Client, base, host, path string) reply {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return replyOf(client.Do(req))
}

func TestRoutesMatchTheRequestsHostOverHTTP1AndHTTP2(t *testing.T) {
	f := startHostsFront(t)
	h2 := (&rawFront{env: f.env}).h2Client(t)
	for _, tc := range []struct {
		host, path, want string // want: the leader that serves it, "" for 404
	}{
		{"twx-test.example.com", "/Thingworx/Things", f.test},
		{"TWX-Test.Example.COM", "/x", f.test},           // any case
		{"twx-test.example.com:8443", "/x", f.test},      // the port is not compared
		{"twx-test.example.com.", "/x", f.test},          // nor a trailing dot
		{"a.test.example.org", "/x", f.test},             // *. is one label...
		{"A.TEST.example.org:1", "/x", f.test},           //
		{"a.b.test.example.org", "/x", ""},               // ...not two
		{"test.example.org", "/x", ""},                   // ...nor none
		{"twx.example.com", "/Thingworx/Things", f.prod}, // hosts and paths both match
		{"twx.EXAMPLE.com:80", "/Thingworx", f.prod},
		{"twx.example.com", "/other", ""},       // the host matches, the path does not
		{"other.example.com", "/Thingworx", ""}, // a path of a route on another host
		{"127.0.0.1", "/Thingworx", ""},
		{"xtwx.example.com", "/Thingworx", ""},
	} {
		for _, via := range []struct {
			name, base, proto string
			client            *http.Client
		}{{"HTTP/1.1", "http://" + f.l.Addr(), "HTTP/1.1", testClient}, {"HTTP/2", "https://" + f.tlsAddr, "HTTP/2.0", h2}} {
			r := f.get(t, via.client, via.base, tc.host, tc.path)
			switch {
			case r.err != nil || r.proto != via.proto:
				t.Errorf("%s %s%s: %s over %s", via.name, tc.host, tc.path, r, r.proto)
			case tc.want == "" && (r.status != 404 || r.by != ""):
				t.Errorf("%s %s%s: %s, want 404 (no route) from fairlead", via.name, tc.host, tc.path, r)
			case tc.want != "" && (r.status != 200 || r.by != tc.want):
				t.Errorf("%s %s%s: %s, want 200 from %s", via.name, tc.host, tc.path, r, tc.want)
			}
		}
	}
}

// A request in absolute form ("GET http://host/path") is routed by its target's authority, which wins
// over Host (RFC 9112 section 3.2.2), as it goes upstream; one without a host by no route with hosts.
func TestARequestInAbsoluteFormIsRoutedByItsTargetsAuthority(t *testing.T) {
	f := startHostsFront(t)
	rc := dialRawClient(t, f.l.Addr())
	for _, tc := range []struct {
		req, want string
	}{
		{"GET http://twx-test.example.com/x HTTP/1.1\r\nHost: twx.example.com\r\n\r\n", "HTTP/1.1 200 OK"},
		{"GET http://a.test.example.org:8080/x?q HTTP/1.1\r\nHost: a.test.example.org:8080\r\n\r\n", "HTTP/1.1 200 OK"},
		{"GET http://other.example.com/Thingworx HTTP/1.1\r\nHost: twx.example.com\r\n\r\n", "HTTP/1.1 404 Not Found"},
		{"GET /Thingworx HTTP/1.1\r\nHost: twx.example.com\r\n\r\n", "HTTP/1.1 200 OK"},
		// Without a host (HTTP/1.0 may send none) only a route without hosts matches: none here. Last, as
		// the connection closes after it.
		{"GET /Thingworx HTTP/1.0\r\n\r\n", "HTTP/1.1 404 Not Found"},
	} {
		if got := rc.roundTrip(t, []byte(tc.req)); string(got) != tc.want {
			t.Errorf("%q: %q, want %q", tc.req, got, tc.want)
		}
	}
}

// A relay with hosts answers only those hosts; a request on another goes on to [[routes]] (here there
// are none: 404).
func TestARelayWithHostsAnswersOnlyThoseHosts(t *testing.T) {
	c := testkit.StartRelaySim(t, 1)
	l, _ := startLB(t, openRelayFiles(t, testkit.ConfigAddrs(c), []string{"inventory/dev"}, `hosts = ["config.example.com", "*.config.example.net"]`))
	get := func(host string) reply {
		req, err := http.NewRequest("GET", "http://"+l.Addr()+"/relay/inventory/dev", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		return replyOf(testClient.Do(req))
	}
	testkit.Eventually(t, "the relay's snapshot", 10*time.Second, func() bool { return get("config.example.com").status == 200 })
	for host, want := range map[string]int{
		"CONFIG.example.com:8080": 200, "eu.config.example.net": 200,
		"other.example.com": 404, "config.example.net": 404, "a.b.config.example.net": 404,
	} {
		if r := get(host); r.err != nil || r.status != want {
			t.Errorf("%s: %s, want %d", host, r, want)
		}
	}
}

// Matching a route by host costs no allocation: the request's host is a sub-slice of the request, and
// patterns are compared without case in place.
func TestRoutingByHostDoesNotAllocatePerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	s := testkit.StartRawServer(t, rawServe([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")))
	conf, _, check, route := poolConf("platform", "leader", []string{s.Addr}, true)
	check.Set("credentials", sim.DefaultCredentials).Set("interval", time.Hour).Set("interval_max", time.Hour)
	route.Set("hosts", []string{"*.other.example", "twx.other.example"})
	conf.Array("routes").Set("pool", "platform").Set("hosts", []string{"a.example.org", "*.example.com"}).Set("paths", []string{"/Thingworx"})
	l, _ := startLB(t, map[string]string{"10-base.toml": conf.String()})
	req := []byte("GET /Thingworx/Things HTTP/1.1\r\nHost: ThingWorx.Example.COM:8080\r\n\r\n")
	rc := dialRawClient(t, l.Addr())
	testkit.Eventually(t, "fairlead to forward (its first check to find the leader)", 10*time.Second, func() bool {
		return bytes.Equal(rc.roundTrip(t, req), []byte("HTTP/1.1 200 OK"))
	})
	wantNoAllocsGET(t, rc, req, fmt.Sprintf("request routed by host (%d routes tried)", 2))
}

// The config's shadowing check (lb/config: "never matches") and lb's route matching agree: for random
// route lists over a small alphabet of hosts (names, wildcards, case variants) and path prefixes, a
// route is reported shadowed exactly when no request (host, path, upgrade or not) has it as its first
// match. The requests tried are each pattern's own name, a fresh label under each wildcard and a fresh
// host (the witnesses a route that is not shadowed must be reached by), with each prefix as the path.
func TestTheShadowingCheckAgreesWithRouteMatchingOnHosts(t *testing.T) {
	hosts := []string{"a.x", "A.X", "b.x", "*.x", "c.y.x", "*.Y.x"}
	paths := []string{"/a", "/a/b", "/ab", "/b", "/"}
	probeHosts := []string{"a.x", "b.x", "zz.x", "c.y.x", "zz.y.x", "fresh.host", "x"}
	rng := rand.New(rand.NewPCG(39, 1))
	pick := func(from []string) []string {
		var out []string
		for range rng.IntN(3) {
			out = append(out, from[rng.IntN(len(from))])
		}
		return out
	}
	never := regexp.MustCompile(`routes\.(\d+): never matches`)
	shadowedSeen, reachedSeen := 0, 0
	for n := range 150 {
		var toml strings.Builder
		toml.WriteString("[pools.p]\nservers = [\"127.0.0.1:9\"]\n")
		var rs []route
		for range 1 + rng.IntN(4) {
			r := route{hosts: pick(hosts), paths: pick(paths), websocket: rng.IntN(4) == 0}
			fmt.Fprintf(&toml, "[[routes]]\npool = \"p\"\nhosts = %s\npaths = %s\nwebsocket = %v\n", tomlList(r.hosts), tomlList(r.paths), r.websocket)
			r.hosts = config.LowerHosts(r.hosts)
			rs = append(rs, r)
		}
		reported := map[int]bool{}
		if _, err := config.Load(testkit.WriteFiles(t, map[string]string{"a.toml": toml.String()})); err != nil {
			for _, m := range never.FindAllStringSubmatch(err.Error(), -1) {
				i, _ := strconv.Atoi(m[1])
				reported[i] = true
			}
			if len(reported) == 0 {
				t.Fatalf("config %d: %v\n%s", n, err, toml.String())
			}
		}
		reached := map[int]bool{}
		for _, h := range probeHosts {
			for _, p := range paths {
				for _, upgrade := range []bool{false, true} {
					for i := range rs {
						if rs[i].matches([]byte(h), []byte(p), upgrade) {
							reached[i] = true
							break
						}
					}
				}
			}
		}
		for i := range rs {
			if reported[i] == reached[i] {
				t.Errorf("config %d: routes.%d reported shadowed %v, reached by a request %v\n%s", n, i, reported[i], reached[i], toml.String())
			}
			if reported[i] {
				shadowedSeen++
			} else {
				reachedSeen++
			}
		}
	}
	if shadowedSeen < 20 || reachedSeen < 20 {
		t.Errorf("%d shadowed and %d reachable routes: the random configs try too few of either", shadowedSeen, reachedSeen)
	}
}

func tomlList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
