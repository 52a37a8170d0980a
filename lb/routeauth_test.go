package lb

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
)

// Secrets of the single-point auth tests: the client keys and the platform's application key that only
// fairlead holds. None may appear in a log line, /api/status, /metrics or an answer to a client.
const (
	clientKeyA     = "device-key-alpha-7f3e"
	clientKeyB     = "device-key-bravo-91c2"
	platformAppKey = "platform-app-key-5d0b9e"
)

// authFiles writes a keys file (with a comment and a blank line around the keys) and the upstream value
// file into a new directory and returns their paths.
func authFiles(t testing.TB, keys ...string) (keysFile, valueFile string) {
	t.Helper()
	dir := t.TempDir()
	keysFile, valueFile = filepath.Join(dir, "client-keys"), filepath.Join(dir, "platform-appkey")
	writeAuthKeys(t, keysFile, keys...)
	mustWriteFile(t, valueFile, "  "+platformAppKey+"\n")
	return keysFile, valueFile
}

func writeAuthKeys(t testing.TB, file string, keys ...string) {
	t.Helper()
	mustWriteFile(t, file, "# client keys of the test\n\n"+strings.Join(keys, "\n  ")+"\n")
}

// authRoute is a [[routes]] entry to the platform pool on /echo-headers and /Thingworx with a
// [routes.auth] table of header, injecting appKey.
func authRoute(keysFile, valueFile, header string) string {
	h := ""
	if header != "" {
		h = fmt.Sprintf("header = %q\n", header)
	}
	return fmt.Sprintf(`
[[routes]]
pool = "platform"
paths = ["/echo-headers", "/Thingworx"]
[routes.auth]
keys_file = %q
%supstream_header = "appKey"
upstream_value_file = %q
`, keysFile, h, valueFile)
}

// authConfig is platformConfig with authRoute in a file of its own that sorts first, so that it is
// routes.0 and platformConfig's catch-all route (without auth) is routes.1; the access log is on.
func authConfig(c *sim.Cluster, keysFile, valueFile, header string) map[string]string {
	files := platformConfig(c, "", "")
	files["05-auth.toml"] = authRoute(keysFile, valueFile, header)
	files["30-log.toml"] = "[global]\naccess_log = true\n"
	return files
}

// authGet sends GET path to fairlead with the headers (name, value, name, value, …) and returns the
// status, the answer's headers and its body.
func authGet(t *testing.T, l *LB, path string, headers ...string) (int, http.Header, string) {
	t.Helper()
	resp, body := testkit.Do(t, testClient, http.MethodGet, "http://"+l.Addr()+path, nil, headers...)
	return resp.StatusCode, resp.Header, string(body)
}

func TestRouteAuthRefusesAMissingOrWrongKeyWithoutForwardingIt(t *testing.T) {
	c := startCluster(t, 2, 0)
	keys, value := authFiles(t, clientKeyA, clientKeyB)
	l, logs := startLB(t, authConfig(c, keys, value, ""))
	leader := c.Platforms[0]
	before := leader.Requests()

	f := func(name string, headers ...string) {
		t.Helper()
		code, h, body := authGet(t, l, "/echo-headers", headers...)
		if code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, code)
		}
		if got := h.Get("WWW-Authenticate"); got != `Bearer realm="fairlead"` {
			t.Errorf("%s: WWW-Authenticate %q, want Bearer realm=\"fairlead\"", name, got)
		}
		if body != "401 Unauthorized\n" {
			t.Errorf("%s: body %q, want the short 401 body", name, body)
		}
	}
	f("no key")
	f("wrong key", "Authorization", "Bearer not-a-key")
	f("a key with another scheme", "Authorization", "Basic "+clientKeyA)
	f("a key in another header", "appKey", clientKeyA)
	f("a prefix of a key", "Authorization", "Bearer "+clientKeyA[:len(clientKeyA)-1])
	f("a key and more", "Authorization", "Bearer "+clientKeyA+"x")
	f("empty bearer", "Authorization", "Bearer ")

	if got := leader.Requests(); got != before {
		t.Errorf("the leader received %d requests, want none forwarded", got-before)
	}
	for _, p := range l.Status().Pools {
		if p.Requests != 0 {
			t.Errorf("pool %s counted %d requests, want 0: refused requests never reach a pool", p.Name, p.Requests)
		}
	}
	wantMetrics(t, l, `fairlead_route_unauthorized_total{route="0",pool="platform"} 7`)
	if strings.Contains(scrapeMetrics(t, l), `fairlead_route_unauthorized_total{route="1"`) {
		t.Errorf("/metrics has a series for routes.1, which has no [routes.auth]")
	}
	var denied int
	for _, line := range strings.Split(logs.all(), "\n") {
		if strings.Contains(line, "msg=access") && strings.Contains(line, "status=401") &&
			strings.Contains(line, "route=0") && strings.Contains(line, "pool=platform") && strings.Contains(line, "server=\"\"") {
			denied++
		}
	}
	if denied != 7 {
		t.Errorf("%d access log lines of a 401 on route 0, want 7:\n%s", denied, logs.all())
	}

	// A route without [routes.auth] asks for nothing.
	if code, _, _ := authGet(t, l, "/other"); code != http.StatusOK {
		t.Errorf("GET /other (routes.1, no auth): %d, want 200", code)
	}
}

func TestRouteAuthAdmitsTheRightKeyAndInjectsTheUpstreamCredential(t *testing.T) {
	c := startCluster(t, 2, 0)
	keys, value := authFiles(t, clientKeyA, clientKeyB)
	f := func(name, header string, headers ...string) {
		t.Helper()
		l, _ := startLB(t, authConfig(c, keys, value, header))
		code, _, body := authGet(t, l, "/echo-headers", headers...)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d, want 200", name, code)
		}
		h := echoedHeaders(body)
		if got := h["appkey"]; len(got) != 1 || got[0] != platformAppKey {
			t.Errorf("%s: the platform saw appKey %q, want only the value file's", name, got)
		}
		for _, k := range []string{clientKeyA, clientKeyB} {
			if strings.Contains(body, k) {
				t.Errorf("%s: the platform saw the client's key:\n%s", name, body)
			}
		}
		if header == "" && len(h["authorization"]) != 0 {
			t.Errorf("%s: the platform saw Authorization %q, want it removed", name, h["authorization"])
		}
		if header == "appKey" {
			if got := h["authorization"]; len(got) != 1 || got[0] != "Basic other" {
				t.Errorf("%s: the platform saw Authorization %q, want the client's own, untouched", name, got)
			}
		}
	}
	f("Bearer", "", "Authorization", "Bearer "+clientKeyB)
	f("Bearer, scheme in lower case, a forged appKey replaced", "", "Authorization", "bearer  "+clientKeyA,
		"appKey", "forged-1", "appKey", "forged-2")
	f("appKey header", "appKey", "appKey", clientKeyA, "Authorization", "Basic other")
}

func TestRouteAuthChecksAWebSocketUpgradeBeforeDialling(t *testing.T) {
	c := startCluster(t, 1, 2)
	keys, value := authFiles(t, clientKeyA)
	files := cxConfig(c, "")
	files["05-cxserver.toml"] += fmt.Sprintf("[routes.auth]\nkeys_file = %q\nheader = \"appKey\"\nupstream_header = \"appKey\"\nupstream_value_file = %q\n", keys, value)
	l, _ := startLB(t, files)

	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	for _, h := range []http.Header{{}, {"appKey": {"wrong"}}} {
		conn, resp, err := d.Dial("ws://"+l.Addr()+"/Thingworx/WS", h)
		if err == nil {
			conn.Close()
			t.Fatalf("upgrade with %v: admitted, want 401", h)
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("upgrade with %v: %v (%v), want 401", h, err, resp)
		}
		if got := resp.Header.Get("WWW-Authenticate"); got != "" {
			t.Errorf("WWW-Authenticate %q on an appKey route, want none", got)
		}
		if !resp.Close {
			t.Errorf("a refused upgrade keeps its connection, want it closed")
		}
	}
	for _, s := range c.Connections {
		if n := s.Upgrades(); n != 0 {
			t.Errorf("%s: %d upgrades, want none", s.Name, n)
		}
	}
	for _, p := range l.Status().Pools {
		if p.Requests != 0 {
			t.Errorf("pool %s: %d requests, want none: nothing is dialled", p.Name, p.Requests)
		}
	}

	conn, _, _ := dialWS(t, l, "/Thingworx/WS", http.Header{"appKey": {clientKeyA}})
	defer conn.Close()
	mustEcho(t, conn, "hello")
	var got http.Header
	for _, s := range c.Connections {
		if s.Upgrades() == 1 {
			got = s.LastUpgradeHeaders()
		}
	}
	if v := got.Values("Appkey"); len(v) != 1 || v[0] != platformAppKey {
		t.Errorf("the connection server saw appKey %q, want only the value file's", v)
	}
}

func TestRouteAuthReloadAdmitsTheNewKeyAndRefusesTheOldOne(t *testing.T) {
	c := startCluster(t, 2, 0)
	keys, value := authFiles(t, clientKeyA)
	dir := testkit.WriteFiles(t, authConfig(c, keys, value, "appKey"))
	l, logs := startLBDir(t, dir)
	if code, _, _ := authGet(t, l, "/echo-headers", "appKey", clientKeyA); code != 200 {
		t.Fatalf("the first key: %d, want 200", code)
	}

	writeAuthKeys(t, keys, clientKeyB) // only the keys file changes: the *.toml files are the same
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.all(), "config unchanged") {
		t.Fatalf("the reload was skipped as unchanged:\n%s", logs.all())
	}
	if code, _, _ := authGet(t, l, "/echo-headers", "appKey", clientKeyA); code != http.StatusUnauthorized {
		t.Errorf("the old key after the reload: %d, want 401", code)
	}
	if code, _, _ := authGet(t, l, "/echo-headers", "appKey", clientKeyB); code != http.StatusOK {
		t.Errorf("the new key after the reload: %d, want 200", code)
	}

}

func TestRouteAuthSecretsNeverShowInStatusLogsMetricsOrAnswers(t *testing.T) {
	c := startCluster(t, 2, 0)
	keys, value := authFiles(t, clientKeyA)
	l, logs := startLB(t, authConfig(c, keys, value, "appKey"))
	var seen strings.Builder
	for _, h := range [][]string{nil, {"appKey", "wrong"}, {"appKey", clientKeyA}} {
		code, hdr, body := authGet(t, l, "/Thingworx/Things", h...)
		fmt.Fprintf(&seen, "%d %v %s\n", code, hdr, body)
	}
	for _, path := range []string{"/api/status", "/metrics", "/"} {
		_, hdr, body := opAdmin(t, l.AdminAddr(), http.MethodGet, path, "")
		fmt.Fprintf(&seen, "%s %v %s\n", path, hdr, body)
	}
	// The /events snapshot at connect.
	events := testkit.DialSSE(t, l.AdminAddr(), "/events")
	for m := (testkit.Event{}); m.Event != "snapshot"; {
		var err error
		if m, err = events.Next(5 * time.Second); err != nil {
			t.Fatalf("/events: %v", err)
		}
	}
	seen.Write(events.Raw.Bytes())
	seen.WriteString(logs.all())
	seen.WriteString(fmt.Sprintf("%v %+v", l.px.gen.Load().cfg, *l.px.gen.Load().cfg)) // a careless %v of the config
	for _, s := range []string{platformAppKey, clientKeyA} {
		if strings.Contains(seen.String(), s) {
			t.Errorf("%q shows in what clients, operators or the log see:\n%s", s, seen.String())
		}
	}
}

// TestRouteAuthPathDoesNotAllocatePerRequest is the allocation guard of the proxy path
// (TestProxyPathDoesNotAllocatePerRequest) on a route with [routes.auth]: the check, the removal of the
// key and the injected header allocate nothing, with a Bearer key and with a plain header.
func TestRouteAuthPathDoesNotAllocatePerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	c := startCluster(t, 2, 0)
	keys, value := authFiles(t, clientKeyA, clientKeyB)
	for _, tc := range []struct{ name, header, key string }{
		{"bearer", "", "Bearer " + clientKeyB},
		{"appKey", "appKey", clientKeyB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := authConfig(c, keys, value, tc.header)
			delete(files, "30-log.toml") // the access log allocates by design
			l, _ := startLB(t, files)
			name := tc.header
			if name == "" {
				name = "Authorization"
			}
			do := handleDo(t, l, "Connection", "keep-alive", name, tc.key)
			const harness, fasthttpStreaming = 1, 4 // as in TestProxyPathDoesNotAllocatePerRequest
			if n := allocsPerRequest(do); n > harness+fasthttpStreaming {
				t.Errorf("%.1f allocations per proxied request, want at most %d", n, harness+fasthttpStreaming)
			}
			wantNoOwnAllocations(t, do)
		})
	}
}
