package lb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// Two relays on one path by host ([relays.NAME] hosts) through a running fairlead: a test and a
// production cluster behind one ingress, each relay in front of its own simulated config service.
// Which relays lb/config accepts on one path is its test; here, that each request reaches the relay of
// its host.

// twoRelays is a fairlead with relay "test" (hosts test.example.com) and relay "prod" (hosts
// prod.example.com and *.prod.example.org), both on path /relay/{collection}/{environment} with topic
// inventory/dev, each over a pool of its own cluster's config server; and no [[routes]] but those of
// more, a file of its own. It listens on plain HTTP and on TLS (HTTP/2 by ALPN).
type twoRelays struct {
	l          *LB
	tlsAddr    string
	dir        string // the config directory: 10-relays.toml, 20-more.toml
	h2         *http.Client
	test, prod *sim.Cluster
}

const twoRelaysTopic = "inventory/dev"

func startTwoRelays(t *testing.T, more string) *twoRelays {
	t.Helper()
	f := &twoRelays{test: testkit.StartRelaySim(t, 1), prod: testkit.StartRelaySim(t, 1)}
	headers, _ := testkit.RelaySecrets(t, t.TempDir())
	var c testkit.Config
	c.Table("frontend").Set("listen", "127.0.0.1:0")
	c.Table("admin").Set("listen", "127.0.0.1:0")
	for _, r := range []struct {
		name  string
		c     *sim.Cluster
		hosts []string
	}{{"test", f.test, []string{"test.example.com"}}, {"prod", f.prod, []string{"prod.example.com", "*.prod.example.org"}}} {
		c.Table("pools.config-"+r.name).Set("servers", testkit.ConfigAddrs(r.c))
		c.Table("relays."+r.name).Set("pool", "config-"+r.name).Set("hosts", r.hosts).
			Set("path", "/relay/{collection}/{environment}").
			Set("snapshot", "/config/{collection}/{environment}").
			Set("events", "/events/{collection}/{environment}").
			Set("topics", []string{twoRelaysTopic}).
			Set("upstream_headers_file", headers)
	}
	env := newTLSEnv(t, "fairlead test CA")
	l, _, tlsAddr, dir := startTLSLB(t, map[string]string{"10-relays.toml": c.String(), "20-more.toml": more}, env.issue(t, "frontend", tlsName, "127.0.0.1"), "")
	f.l, f.tlsAddr, f.dir, f.h2 = l, tlsAddr, dir, (&rawFront{env: env}).h2Client(t)
	// Each relay's upstream session open before a test publishes, so that the change reaches it.
	testkit.Eventually(t, "each relay's upstream session", 10*time.Second, func() bool {
		return testkit.OneSessionPerTopic(f.test.Configs[0], twoRelaysTopic) && testkit.OneSessionPerTopic(f.prod.Configs[0], twoRelaysTopic)
	})
	return f
}

// get sends GET path with Host (HTTP/2: :authority) host, over HTTP/2 when h2.
func (f *twoRelays) get(t *testing.T, h2 bool, host, path string) reply {
	t.Helper()
	base, client := "http://"+f.l.Addr(), testClient
	if h2 {
		base, client = "https://"+f.tlsAddr, f.h2
	}
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return replyOf(client.Do(req))
}

// publish publishes a configuration naming cluster on topic at c, and returns its version.
func publish(t *testing.T, c *sim.Cluster, cluster string) uint64 {
	t.Helper()
	return testkit.Publish(t, c, twoRelaysTopic, `{"cluster":"`+cluster+`"}`)
}

// clusterOf returns the cluster a snapshot body names, and its version.
func clusterOf(t *testing.T, body string) (string, uint64) {
	t.Helper()
	s := testkit.SnapshotOf(t, []byte(body))
	var d struct {
		Cluster string `json:"cluster"`
	}
	if err := json.Unmarshal(s.Data, &d); err != nil {
		t.Errorf("snapshot data %q: %v", s.Data, err)
	}
	return d.Cluster, s.Version
}

func TestTwoRelaysOnOnePathAnswerEachItsOwnHostOverHTTP1AndHTTP2(t *testing.T) {
	f := startTwoRelays(t, "")
	// Versions apart, so that a change message names its cluster too: prod ahead by 20.
	vt := publish(t, f.test, "test")
	var vp uint64
	for range 20 {
		vp = publish(t, f.prod, "prod")
	}
	testkit.Eventually(t, "both relays to hold their cluster's configuration", 10*time.Second, func() bool {
		rt, rp := f.get(t, false, "test.example.com", "/relay/"+twoRelaysTopic), f.get(t, false, "prod.example.com", "/relay/"+twoRelaysTopic)
		return rt.status == 200 && rp.status == 200 && strings.Contains(rt.body, `"test"`) && strings.Contains(rp.body, `"prod"`)
	})
	for _, tc := range []struct {
		host, want string // want: the cluster whose configuration answers, "" for fairlead's 404 (no route)
		version    uint64
	}{
		{"test.example.com", "test", vt},
		{"TEST.Example.com:8443", "test", vt}, // any case, any port
		{"test.example.com.", "test", vt},     // one trailing dot
		{"prod.example.com", "prod", vp},
		{"eu.prod.example.org", "prod", vp}, // *. is one label
		{"other.example.com", "", 0},        // neither relay's host: as a request no route matches
		{"a.b.prod.example.org", "", 0},
		{"example.com", "", 0},
		{"127.0.0.1", "", 0},
	} {
		for _, h2 := range []bool{false, true} {
			r := f.get(t, h2, tc.host, "/relay/"+twoRelaysTopic)
			via := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
			switch {
			case r.err != nil || r.proto != via:
				t.Errorf("%s over %s: %s over %s", tc.host, via, r, r.proto)
			case tc.want == "":
				if r.status != 404 || !strings.Contains(r.body, "no route") {
					t.Errorf("%s over %s: %s, want fairlead's 404 (no route)", tc.host, via, r)
				}
			default:
				cluster, v := clusterOf(t, r.body)
				if r.status != 200 || cluster != tc.want || v != tc.version {
					t.Errorf("%s over %s: %d, cluster %q version %d, want %q version %d", tc.host, via, r.status, cluster, v, tc.want, tc.version)
				}
			}
		}
	}

	// Subscribers of each host, SSE and WebSocket (streams are HTTP/1.1: a relay's SSE stream takes its
	// connection over, which an HTTP/2 stream cannot give): each gets its own cluster's configuration at
	// connect and its own cluster's change after it, never the other's.
	type sub struct {
		name, cluster string
		sse           *sseStream
		ws            *websocket.Conn
	}
	var subs []sub
	for _, s := range []struct{ host, cluster string }{{"test.example.com", "test"}, {"www.prod.example.org", "prod"}} {
		subs = append(subs, sub{name: "SSE on " + s.host, cluster: s.cluster, sse: f.dialSSE(t, s.host)},
			sub{name: "another SSE on " + s.host, cluster: s.cluster, sse: f.dialSSE(t, strings.ToUpper(s.host)+":80")})
		subs = append(subs, sub{name: "WebSocket on " + s.host, cluster: s.cluster,
			ws: testkit.DialWS(t, "ws://"+f.l.Addr()+"/relay/"+twoRelaysTopic, http.Header{"Host": {s.host}})})
	}
	want := map[string]uint64{"test": vt, "prod": vp}
	for _, s := range subs {
		if s.sse != nil {
			if cluster, v := s.sse.next(t); cluster != s.cluster || v != want[s.cluster] {
				t.Errorf("%s: first snapshot of cluster %q version %d, want %q version %d", s.name, cluster, v, s.cluster, want[s.cluster])
			}
		}
	}
	want = map[string]uint64{"test": publish(t, f.test, "test"), "prod": publish(t, f.prod, "prod")}
	for _, s := range subs {
		if s.sse != nil {
			if cluster, v := s.sse.next(t); cluster != s.cluster || v != want[s.cluster] {
				t.Errorf("%s: next snapshot of cluster %q version %d, want %q version %d", s.name, cluster, v, s.cluster, want[s.cluster])
			}
			continue
		}
		ch, raw, err := testkit.ReadChange(s.ws, 10*time.Second)
		if err != nil || ch.Topic != twoRelaysTopic || ch.Version != want[s.cluster] {
			t.Errorf("%s: change %q (%v), want %s version %d of cluster %s", s.name, raw, err, twoRelaysTopic, want[s.cluster], s.cluster)
		}
	}
}

// A reload that moves hosts from one relay to the other applies to the next request, and keeps both
// relays running (hosts are not part of a relay's fingerprint): their upstream sessions stay, and a
// subscriber keeps the relay it subscribed to. A reload that would let one host reach both is refused
// and the running config keeps serving.
func TestAReloadMovesHostsBetweenRelaysOnOnePathAtOnce(t *testing.T) {
	f := startTwoRelays(t, "")
	publish(t, f.test, "test")
	publish(t, f.prod, "prod")
	clusterAt := func(host string) string {
		t.Helper()
		r := f.get(t, false, host, "/relay/"+twoRelaysTopic)
		if r.status != 200 {
			return r.String()
		}
		cluster, _ := clusterOf(t, r.body)
		return cluster
	}
	testkit.Eventually(t, "both relays to hold their cluster's configuration", 10*time.Second, func() bool {
		return clusterAt("test.example.com") == "test" && clusterAt("prod.example.com") == "prod"
	})
	sub := f.dialSSE(t, "test.example.com")
	if cluster, _ := sub.next(t); cluster != "test" {
		t.Fatalf("SSE on test.example.com: cluster %q", cluster)
	}
	sessions := func() (int64, int64) {
		return f.test.Configs[0].Stats().Topics[twoRelaysTopic].SessionsTotal, f.prod.Configs[0].Stats().Topics[twoRelaysTopic].SessionsTotal
	}
	st, sp := sessions()

	mustWriteFile(t, filepath.Join(f.dir, "20-more.toml"), "[relays.test]\nhosts = [\"prod.example.com\"]\n[relays.prod]\nhosts = [\"test.example.com\"]\n")
	mustReloadDir(t, f.l, f.dir)
	for host, want := range map[string]string{"test.example.com": "prod", "prod.example.com": "test", "eu.prod.example.org": "404"} {
		if got := clusterAt(host); got != want && !(want == "404" && strings.HasPrefix(got, "404")) {
			t.Errorf("after the reload, %s: %s, want %s", host, got, want)
		}
	}
	// /api/status names each relay's hosts, as now in force.
	for _, r := range f.l.Status().Relays {
		if want := map[string]string{"test": "prod.example.com", "prod": "test.example.com"}[r.Name]; len(r.Hosts) != 1 || r.Hosts[0] != want {
			t.Errorf("/api/status relay %s: hosts %q, want [%s]", r.Name, r.Hosts, want)
		}
	}
	if nt, np := sessions(); nt != st || np != sp {
		t.Errorf("upstream sessions opened: test %d → %d, prod %d → %d; want both relays kept", st, nt, sp, np)
	}
	v := publish(t, f.test, "test")
	if cluster, got := sub.next(t); cluster != "test" || got != v {
		t.Errorf("the SSE subscriber of relay test after the reload: cluster %q version %d, want test version %d", cluster, got, v)
	}

	mustWriteFile(t, filepath.Join(f.dir, "20-more.toml"), "[relays.test]\nhosts = [\"*.example.com\"]\n")
	if err := reloadDir(f.l, f.dir); err == nil || !strings.Contains(err.Error(), `relays.test.path: "/relay/{collection}/{environment}" on hosts "*.example.com" overlaps relays.prod.path`) {
		t.Errorf("a reload giving both relays prod.example.com: %v, want refused naming both", err)
	}
	if got := clusterAt("test.example.com"); got != "prod" {
		t.Errorf("after the refused reload, test.example.com: %s, want the running config's prod", got)
	}
}

// sseStream is a relay's SSE stream read through net/http.
type sseStream struct {
	body *bufio.Reader
}

// dialSSE opens an SSE stream of the topic with Host host; it fails the test unless answered 200
// text/event-stream. The stream ends at cleanup, and within 30 s.
func (f *twoRelays) dialSSE(t *testing.T, host string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+f.l.Addr()+"/relay/"+twoRelaysTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Accept", "text/event-stream")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("SSE on %s: %v", host, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("SSE on %s: %d %q over %s", host, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Proto)
	}
	return &sseStream{body: bufio.NewReader(resp.Body)}
}

// next reads the stream's next snapshot event and returns the cluster its data names and its id.
func (s *sseStream) next(t *testing.T) (string, uint64) {
	t.Helper()
	var event, id, data string
	for {
		line, err := s.body.ReadString('\n')
		if err != nil {
			t.Fatalf("SSE: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "" && event == "snapshot":
			cluster, _ := clusterOf(t, data)
			v, _ := strconv.ParseUint(id, 10, 64)
			return cluster, v
		case line == "":
			event, id, data = "", "", ""
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		}
	}
}

// Two relays on one path cost a request no allocation to pass by host: one on neither relay's host
// goes to its route, and one on a relay's host is answered its snapshot, allocating nothing.
func TestRelaysByHostDoNotAllocatePerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	s := testkit.StartRawServer(t, rawServe([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")))
	var route testkit.Config
	route.Table("pools.platform").Set("servers", []string{s.Addr}).Set("balance", "roundrobin")
	route.Array("routes").Set("pool", "platform")
	f := startTwoRelays(t, route.String())
	rc := dialRawClient(t, f.l.Addr())
	routed := []byte("GET /relay/inventory/dev HTTP/1.1\r\nHost: twx.example.com\r\n\r\n")
	relayed := []byte("GET /relay/inventory/dev HTTP/1.1\r\nHost: Eu.Prod.Example.org:443\r\n\r\n")
	testkit.Eventually(t, "the route's server and the relay's snapshot", 10*time.Second, func() bool {
		return bytes.Equal(rc.roundTrip(t, routed), []byte("HTTP/1.1 200 OK")) && bytes.Equal(rc.roundTrip(t, relayed), []byte("HTTP/1.1 200 OK"))
	})
	if r := f.get(t, false, "twx.example.com", "/relay/inventory/dev"); r.status != 200 || r.body != "ok" {
		t.Fatalf("on neither relay's host: %s, want the route's server's 200", r)
	}
	if r := f.get(t, false, "Eu.Prod.Example.org:443", "/relay/inventory/dev"); r.status != 200 || !strings.Contains(r.body, `"topic"`) {
		t.Fatalf("on the prod relay's host: %s, want its snapshot", r)
	}
	wantNoAllocsGET(t, rc, routed, "request on neither relay's host (both relays passed by host, then routed)")
	wantNoAllocsGET(t, rc, relayed, "relay snapshot by host")
}

// The config's relay checks (lb/config: two relays that "overlap", a route that "never matches") and
// lb's dispatch agree: for random relay sets over a small alphabet of path templates (other names of
// one path, literals where another has a name, a literal no value can be, paths under /apprapp/) and
// App Configuration relays (two instances), with hosts as TestTheShadowingCheckAgreesWithRouteMatchingOnHosts
// draws them, and a few routes after them: two relays are reported exactly when some request (host,
// path) is taken by both (relayBinding.takes, as serveRelay asks each relay), and a route exactly when
// no request, upgrade or not, reaches it past the relays and the routes before it. The requests tried
// are paths of one to three segments of the templates' literals and "x", each route's prefix alone and
// followed by three segments more, on each pattern's own name, a fresh label under each wildcard and a
// fresh host.
func TestTheRelayChecksAgreeWithLbsDispatchOnPathsAndHosts(t *testing.T) {
	templates := []string{"/relay/{a}/{b}", "/relay/{c}/{d}", "/relay/inv/{b}", "/relay/{a}", "/{a}/{b}", "/apprapp/{a}",
		"/cfg/{a}/{b}", "/relay/a~b/{b}", "/{a}/inv/x"}
	hosts := []string{"a.x", "A.X", "b.x", "*.x", "c.y.x", "*.Y.x"}
	routePaths := []string{"/apprapp/", "/apprapp/x", "/apprapp/feature", "/apprapp", "/relay/", "/"}
	probeHosts := []string{"a.x", "b.x", "zz.x", "c.y.x", "zz.y.x", "fresh.host", "x"}
	segs := []string{"relay", "inv", "apprapp", "cfg", "a~b", "x"}
	probePaths := slices.Clone(routePaths)
	for _, p := range routePaths {
		probePaths = append(probePaths, strings.TrimSuffix(p, "/")+"/x/x/x")
	}
	for _, a := range segs {
		probePaths = append(probePaths, "/"+a)
		for _, b := range segs {
			probePaths = append(probePaths, "/"+a+"/"+b)
			for _, c := range segs {
				probePaths = append(probePaths, "/"+a+"/"+b+"/"+c)
			}
		}
	}
	apikey := filepath.Join(t.TempDir(), "apikey")
	if err := os.WriteFile(apikey, []byte("k\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(39, 2))
	pick := func(from []string) []string {
		var out []string
		for range rng.IntN(3) {
			out = append(out, from[rng.IntN(len(from))])
		}
		return out
	}
	const pools = "[pools.p]\nservers = [\"127.0.0.1:9\"]\n[pools.q]\nservers = [\"127.0.0.1:9\"]\n"
	overlaps := regexp.MustCompile(`relays\.(r\d)\.(?:path|protocol): .* overlaps relays\.(r\d)\.`)
	never := regexp.MustCompile(`routes\.(\d+): never matches`)
	var ctx fasthttp.RequestCtx
	var kb [256]byte
	seen := map[string]int{}
	for n := range 150 {
		var all strings.Builder
		all.WriteString(pools)
		var bs []relayBinding
		for i := range 2 + rng.IntN(2) {
			var toml string
			name := fmt.Sprintf("r%d", i)
			if rng.IntN(3) == 0 {
				toml = fmt.Sprintf("[relays.%s]\npool = \"p\"\nprotocol = \"appconfiguration\"\nguid = \"g%d\"\napikey_file = %q\nhosts = %s\n",
					name, rng.IntN(2), apikey, tomlList(pick(hosts)))
			} else {
				tmpl := templates[rng.IntN(len(templates))]
				toml = fmt.Sprintf("[relays.%s]\npool = \"p\"\npath = %q\nsnapshot = %q\nevents = %q\nhosts = %s\n",
					name, tmpl, "/s"+tmpl, "/e"+tmpl, tomlList(pick(hosts)))
			}
			all.WriteString(toml)
			// The relay alone, as a generation binds it (takes needs its spec, not its running relay).
			cfg, err := config.Load(testkit.WriteFiles(t, map[string]string{"a.toml": pools + toml}))
			if err != nil {
				t.Fatalf("config %d: relay %s alone: %v", n, name, err)
			}
			bs = append(bs, relayBinding{spec: cfg.RelaySpecs[name]})
		}
		var rs []route
		for range rng.IntN(4) {
			r := route{hosts: pick(hosts), paths: pick(routePaths), websocket: rng.IntN(4) == 0}
			fmt.Fprintf(&all, "[[routes]]\npool = \"q\"\nhosts = %s\npaths = %s\nwebsocket = %v\n", tomlList(r.hosts), tomlList(r.paths), r.websocket)
			r.hosts = config.LowerHosts(r.hosts)
			rs = append(rs, r)
		}

		reportedPairs, reportedRoutes := map[[2]string]bool{}, map[int]bool{}
		if _, err := config.Load(testkit.WriteFiles(t, map[string]string{"a.toml": all.String()})); err != nil {
			for _, m := range overlaps.FindAllStringSubmatch(err.Error(), -1) {
				reportedPairs[[2]string{min(m[1], m[2]), max(m[1], m[2])}] = true
			}
			for _, m := range never.FindAllStringSubmatch(err.Error(), -1) {
				i, _ := strconv.Atoi(m[1])
				reportedRoutes[i] = true
			}
			if len(reportedPairs)+len(reportedRoutes) == 0 {
				t.Fatalf("config %d: %v\n%s", n, err, all.String())
			}
		}
		takenPairs, reached := map[[2]string]bool{}, map[int]bool{}
		for _, h := range probeHosts {
			for _, p := range probePaths {
				ctx.Request.Reset()
				ctx.Request.SetRequestURI(p)
				var takers []string
				for i := range bs {
					if _, ok := bs[i].takes(&ctx, []byte(h), kb[:0]); ok {
						takers = append(takers, bs[i].spec.Name)
					}
				}
				for i, a := range takers {
					for _, b := range takers[i+1:] {
						takenPairs[[2]string{a, b}] = true
					}
				}
				if len(takers) > 0 {
					continue // a relay answers it
				}
				for _, upgrade := range []bool{false, true} {
					for i := range rs {
						if rs[i].matches([]byte(h), ctx.Path(), upgrade) {
							reached[i] = true
							break
						}
					}
				}
			}
		}
		for i, a := range bs {
			for _, b := range bs[i+1:] {
				pair := [2]string{a.spec.Name, b.spec.Name}
				if reportedPairs[pair] != takenPairs[pair] {
					t.Errorf("config %d: relays %s and %s reported overlapping %v, a request taken by both %v\n%s", n, pair[0], pair[1], reportedPairs[pair], takenPairs[pair], all.String())
				}
				seen[fmt.Sprintf("overlap %v", takenPairs[pair])]++
			}
		}
		for i := range rs {
			if reportedRoutes[i] == reached[i] {
				t.Errorf("config %d: routes.%d reported shadowed %v, reached by a request %v\n%s", n, i, reportedRoutes[i], reached[i], all.String())
			}
			seen[fmt.Sprintf("route reached %v", reached[i])]++
		}
	}
	for _, k := range []string{"overlap true", "overlap false", "route reached true", "route reached false"} {
		if seen[k] < 20 {
			t.Errorf("%s: %d cases (%v): the random configs try too few", k, seen[k], seen)
		}
	}
	t.Logf("cases: %v", seen)
}
