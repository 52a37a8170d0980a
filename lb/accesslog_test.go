package lb

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// Secrets a client or the config may hold, none of which may reach the log.
const (
	leaderCredentials = "YWRtaW46YWRtaW4=" // the LeaderCheck credentials of platformConfig: admin:admin
	cookieSecret      = "s3ss10n-c00k1e"
	appKeySecret      = "0a1b2c3d-app-key"
)

// sendWithSecrets sends GET path?appKey=... with Basic credentials and a session cookie and returns the
// status.
func sendWithSecrets(t *testing.T, l *LB, path string) int {
	t.Helper()
	resp, _ := testkit.Do(t, testClient, http.MethodGet, "http://"+l.Addr()+path+"?appKey="+appKeySecret, nil,
		"Authorization", "Basic "+leaderCredentials, "Cookie", "JSESSIONID="+cookieSecret, "appKey", appKeySecret)
	return resp.StatusCode
}

// wantNoSecrets fails the test if the log holds any credential, cookie or query string.
func wantNoSecrets(t *testing.T, log string) {
	t.Helper()
	for _, s := range []string{leaderCredentials, "admin:admin", cookieSecret, appKeySecret, "appKey", "?"} {
		if strings.Contains(log, s) {
			t.Errorf("the log holds %q:\n%s", s, log)
		}
	}
}

// textFields parses a slog text line (key=value, values quoted when needed) into its fields.
func textFields(t *testing.T, line string) map[string]string {
	t.Helper()
	fields := map[string]string{}
	for rest := strings.TrimSpace(line); rest != ""; rest = strings.TrimLeft(rest, " ") {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			t.Fatalf("not a key=value line: %q", line)
		}
		var value string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				t.Fatalf("bad quoted value in %q: %v", line, err)
			}
			value, _ = strconv.Unquote(q)
			rest = after[len(q):]
		} else {
			value, rest, _ = strings.Cut(after, " ")
		}
		fields[key] = value
	}
	return fields
}

// accessLines returns the fields of the access log lines of a type ("request" or "tunnel") in logs.
func accessLines(t *testing.T, logs *logSink, typ string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, ln := range strings.Split(logs.all(), "\n") {
		if !strings.Contains(ln, "msg=access ") {
			continue
		}
		if f := textFields(t, ln); f["type"] == typ {
			out = append(out, f)
		}
	}
	return out
}

func TestAccessLogHasALinePerRequestAndPerTunnelAndNoSecrets(t *testing.T) {
	c := startCluster(t, 2, 2)
	// Display names (issue 36): the lines carry them beside the addresses, as the metrics' labels do.
	l, logs := startLB(t, cxConfig(c, fmt.Sprintf("[global]\naccess_log = true\n[pools.platform.names]\n%q = %q\n[pools.cxserver.names]\n%q = %q\n%q = %q\n",
		c.Platforms[0].Addr, c.Platforms[0].Name, c.Connections[0].Addr, c.Connections[0].Name, c.Connections[1].Addr, c.Connections[1].Name)))

	if code := sendWithSecrets(t, l, "/Thingworx/Things/Asset1/Properties"); code != 200 {
		t.Fatalf("status %d", code)
	}
	reqs := accessLines(t, logs, "request")
	if len(reqs) != 1 {
		t.Fatalf("%d request lines, want 1:\n%s", len(reqs), logs.all())
	}
	want := map[string]string{"client": "127.0.0.1", "method": "GET", "path": "/Thingworx/Things/Asset1/Properties",
		"route": "1", "pool": "platform", "server": c.Platforms[0].Addr, "name": c.Platforms[0].Name, "status": "200", "req_bytes": "0",
		"retries": "0", "level": "INFO"}
	for k, v := range want {
		if reqs[0][k] != v {
			t.Errorf("%s = %q, want %q in %v", k, reqs[0][k], v, reqs[0])
		}
	}
	if d, err := strconv.ParseFloat(reqs[0]["duration_ms"], 64); err != nil || d <= 0 {
		t.Errorf("duration_ms %q", reqs[0]["duration_ms"])
	}
	if n, err := strconv.Atoi(reqs[0]["resp_bytes"]); err != nil || n <= 0 {
		t.Errorf("resp_bytes %q", reqs[0]["resp_bytes"])
	}

	// A tunnel: its upgrade is a request line (101), its close a tunnel line.
	h := assetHeader("asset-7")
	h.Set("Cookie", "JSESSIONID="+cookieSecret)
	h.Set("Authorization", "Basic "+leaderCredentials)
	conn, by, _ := dialWS(t, l, "/Thingworx/WS", h)
	msg := []byte("twelve bytes")
	mustEcho(t, conn, string(msg))
	conn.Close()
	var server string
	for _, cs := range c.Connections {
		if cs.Name == by {
			server = cs.Addr
		}
	}
	testkit.Eventually(t, "the tunnel line", 3*time.Second, func() bool { return len(accessLines(t, logs, "tunnel")) == 1 })
	tl := accessLines(t, logs, "tunnel")[0]
	for k, v := range map[string]string{"client": "127.0.0.1", "pool": "cxserver", "server": server, "name": by} {
		if tl[k] != v {
			t.Errorf("tunnel line: %s = %q, want %q in %v", k, tl[k], v, tl)
		}
	}
	if tl["reason"] == "" {
		t.Errorf("tunnel line without a reason: %v", tl)
	}
	// The client's frame is masked (6 bytes of header for a short frame) and the close frame follows.
	if n, _ := strconv.Atoi(tl["bytes_to_server"]); n < len(msg)+6 {
		t.Errorf("bytes_to_server %q, want at least %d", tl["bytes_to_server"], len(msg)+6)
	}
	if n, _ := strconv.Atoi(tl["bytes_to_client"]); n < len(msg)+2 {
		t.Errorf("bytes_to_client %q, want at least %d", tl["bytes_to_client"], len(msg)+2)
	}
	reqs = accessLines(t, logs, "request")
	if len(reqs) != 2 || reqs[1]["status"] != "101" || reqs[1]["pool"] != "cxserver" || reqs[1]["server"] != server || reqs[1]["name"] != by || reqs[1]["route"] != "0" {
		t.Errorf("upgrade request line: %v", reqs[len(reqs)-1])
	}

	// A request no route takes is logged too, without a pool.
	l2, logs2 := startLB(t, map[string]string{"a.toml": `
[frontend]
listen = "127.0.0.1:0"
[admin]
listen = ""
[global]
access_log = true
[pools.p]
servers = ["` + c.Platforms[0].Addr + `"]
[[routes]]
paths = ["/Thingworx"]
pool = "p"
`})
	if code := sendWithSecrets(t, l2, "/elsewhere"); code != 404 {
		t.Fatalf("status %d, want 404", code)
	}
	reqs = accessLines(t, logs2, "request")
	if len(reqs) != 1 || reqs[0]["status"] != "404" || reqs[0]["route"] != "-1" || reqs[0]["pool"] != "" {
		t.Errorf("404 line: %v", reqs)
	}
	wantNoSecrets(t, logs.all()+logs2.all())
}

func TestAccessLogIsOffByDefaultAndAReloadTurnsItOn(t *testing.T) {
	c := startCluster(t, 2, 0)
	files := platformConfig(c, "", "")
	l, logs := startLB(t, files)
	sendWithSecrets(t, l, "/Thingworx/Things/A")
	if n := len(accessLines(t, logs, "request")); n != 0 {
		t.Fatalf("%d access lines with access_log off", n)
	}
	files["30-access.toml"] = "[global]\naccess_log = true\n"
	reloadWith(t, l, files)
	sendWithSecrets(t, l, "/Thingworx/Things/B")
	if reqs := accessLines(t, logs, "request"); len(reqs) != 1 || reqs[0]["path"] != "/Thingworx/Things/B" {
		t.Fatalf("after the reload: %v", reqs)
	}
	wantNoSecrets(t, logs.all())
}

func TestJSONLogLinesParseAndCarryTheAccessAndEventFields(t *testing.T) {
	c := startCluster(t, 2, 0)
	var buf testkit.SyncBuffer
	files := platformConfig(c, "", "")
	files["30-global.toml"] = "[global]\nlog_format = \"json\"\naccess_log = true\n"
	l, _ := startLBOpts(t, testkit.WriteFiles(t, files), Options{Logger: NewLogger("json", nil, &buf)})
	sendWithSecrets(t, l, "/Thingworx/Things/A")
	mustSetState(t, c.Platforms[0], sim.Backup)
	mustSetState(t, c.Platforms[1], sim.Leader)
	var access, leader map[string]any
	testkit.Eventually(t, "the leader change", 5*time.Second, func() bool {
		for _, ln := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(ln), &m); err != nil {
				t.Fatalf("not JSON: %q: %v", ln, err)
			}
			switch {
			case m["msg"] == "access" && m["type"] == "request":
				access = m
			case m["kind"] == "leader_changed" && m["old"] != nil:
				leader = m
			}
		}
		return leader != nil
	})
	if access == nil || access["pool"] != "platform" || access["server"] != c.Platforms[0].Addr || access["status"] != float64(200) ||
		access["path"] != "/Thingworx/Things/A" || access["method"] != "GET" {
		t.Errorf("access line: %v", access)
	}
	if _, ok := access["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms is not a number: %v", access)
	}
	if leader == nil || leader["pool"] != "platform" || leader["server"] != c.Platforms[1].Addr || leader["old"] != c.Platforms[0].Addr ||
		leader["level"] != "INFO" || leader["time"] == nil {
		t.Errorf("leader change line: %v", leader)
	}
	wantNoSecrets(t, buf.String())
}

func TestLogFormatChoosesTheDefaultLoggersHandler(t *testing.T) {
	f := func(format string, json bool) {
		t.Helper()
		o := Options{}
		o.setDefaults(&config.Config{Global: config.Global{LogFormat: format}})
		_, isJSON := o.Logger.Handler().(*slog.JSONHandler)
		_, isText := o.Logger.Handler().(*slog.TextHandler)
		if isJSON != json || isText == json {
			t.Errorf("log_format %q: handler %T", format, o.Logger.Handler())
		}
		if o.Logf == nil || o.Version != "dev" {
			t.Errorf("log_format %q: Logf set %v, Version %q", format, o.Logf != nil, o.Version)
		}
	}
	f("json", true)
	f("text", false)
}

// newAccessLogBench is newHandlerBench with the access log on, written as text to io.Discard.
func newAccessLogBench(tb testing.TB) func() {
	files := platformConfig(startCluster(tb, 2, 0), "", "")
	files["30-global.toml"] = "[global]\naccess_log = true\n"
	l, _ := startLBOpts(tb, testkit.WriteFiles(tb, files), Options{Logger: NewLogger("text", nil, io.Discard)})
	return handleDo(tb, l)
}

func BenchmarkProxyHandlerGETWithAccessLog(b *testing.B) {
	do := newAccessLogBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		do()
	}
}

// With the access log on, a request costs a few allocations more (the line's strings and slog's
// buffer); off, none (TestProxyPathDoesNotAllocatePerRequest).
func TestAccessLogCostsABoundedNumberOfAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	const harness, fasthttpStreaming, accessLine = 1, 4, 6
	if n := allocsPerRequest(newAccessLogBench(t)); n > harness+fasthttpStreaming+accessLine {
		t.Errorf("%.1f allocations per request with the access log on, want at most %d", n, harness+fasthttpStreaming+accessLine)
	}
}

// A tunnel still open when fairlead stops is logged with reason=shutdown (not "closed", which is a
// server going down, a leader change, a drain) and counted so; the stop's line counts it in the
// singular.
func TestATunnelOpenAtCloseIsLoggedWithReasonShutdown(t *testing.T) {
	c := startCluster(t, 2, 2)
	l, logs := startLB(t, cxConfig(c, "[global]\naccess_log = true\n"))
	conn, _ := dialAsset(t, l, "asset-7")
	mustEcho(t, conn, "hello")
	l.Close()
	tl := accessLines(t, logs, "tunnel")
	if len(tl) != 1 || tl[0]["reason"] != "shutdown" {
		t.Fatalf("tunnel lines %v; want one with reason=shutdown", tl)
	}
	if st := l.px.tunnels.stats(); st.ByReason[tunnel.Shutdown] != 1 || st.ByReason[tunnel.Closed] != 0 {
		t.Errorf("closed by reason %v; want the one tunnel counted as shutdown", st.ByReason)
	}
	if !strings.Contains(logs.all(), "tunnel: pool cxserver: closing 1 tunnel to stop") {
		t.Errorf("no line about closing 1 tunnel to stop:\n%s", logs.all())
	}
}
