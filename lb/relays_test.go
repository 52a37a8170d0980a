package lb

// Relay routes ([relays.NAME], issue #14) through a real fairlead on 127.0.0.1 in front of the
// simulated config servers (bench/sim/configsvc.go): what lb adds to a relay.Route (whose own
// behaviour — topics, caching, streams, seeds, its own refusals, keeping the keys apart, following its
// pool's choice — lb/relay tests): route auth and the access log, lb's health check of the relay's
// pool moving it to the backup and back, reloads that keep or replace a relay, the TLS front end, and
// paths a relay does not match going to the routes. Real sockets, real SSE and WebSocket clients
// (bench/testkit); waits poll with a deadline.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// relayFiles is a config with relay "appconfig" over pool "appconfig" (servers[0] the server,
// servers[1:] its backups), the four testkit.RelayTopics, the upstream key and client auth. relayExtra holds
// more keys of [relays.appconfig], poolExtra more keys of [pools.appconfig], and more goes into a
// file of its own.
func relayFiles(t testing.TB, servers []string, poolExtra, relayExtra, more string) map[string]string {
	t.Helper()
	base := testkit.Relay{Servers: servers, PoolExtra: "connect_timeout = \"1s\"\nresponse_timeout = \"3s\"\n" + poolExtra,
		RelayExtra: relayExtra}.Config(t)
	return map[string]string{"10-relay.toml": base, "20-more.toml": more}
}

// openRelayFiles is a config with relay "appconfig" without client auth over pool "appconfig"
// (servers[0] the server, servers[1:] its backups), the given topics and the upstream key;
// relayExtra holds more keys of [relays.appconfig].
func openRelayFiles(t testing.TB, servers, topics []string, relayExtra string) map[string]string {
	t.Helper()
	return map[string]string{"10-relay.toml": testkit.Relay{Servers: servers, Topics: topics, RelayExtra: relayExtra, Open: true}.Config(t)}
}

// relaySettled waits until fairlead's fetches of each topic have all ended and each topic has had
// its start (or first-request) fetch and the refresh that follows its session's connection: the
// config server counted as many fetches as fairlead ended, at least 2. Counters reset after it
// count only what the test does next.
func relaySettled(t testing.TB, l *LB, s *sim.ConfigServer, topics ...string) {
	t.Helper()
	testkit.Eventually(t, "the relay's fetches to settle", 10*time.Second, func() bool {
		rs := l.Status().Relays
		if len(rs) != 1 {
			return false
		}
		ended := map[string]uint64{}
		for _, t := range rs[0].Topics {
			ended[t.Topic] = t.Fetches
		}
		for _, tp := range topics {
			if n := testkit.Fetches(s, tp); n < 2 || uint64(n) != ended[tp] {
				return false
			}
		}
		return true
	})
}

// relayGet sends method path to fairlead with header pairs (name, value, ...) and returns the answer.
func relayGet(t testing.TB, l *LB, method, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return testkit.Do(t, testClient, method, "http://"+l.Addr()+path, nil, hdr...)
}

// dialRelayWS opens a WebSocket on path with the client key.
func dialRelayWS(t testing.TB, addr, path string) *websocket.Conn {
	t.Helper()
	return testkit.DialWS(t, "ws://"+addr+path, http.Header{testkit.RelayClientHeader: {testkit.RelayClientKey}})
}

// dialRelayBoth subscribes to topic with an SSE stream, which has received version 1, and a
// WebSocket, both with the client key.
func dialRelayBoth(t testing.TB, addr, topic string) (*testkit.SSE, *websocket.Conn) {
	t.Helper()
	sse := testkit.DialSSE(t, addr, "/relay/"+topic, relayKeyHdr...)
	sse.WaitVersion(t, 1, 5*time.Second)
	return sse, dialRelayWS(t, addr, "/relay/"+topic)
}

// relayKeyHdr is the client key header pair.
var relayKeyHdr = []string{testkit.RelayClientHeader, testkit.RelayClientKey}

// lb's health check of the relay's pool (relayPool) moves the relay: it starts on the backup when the
// primary is down, fails back within a failback interval once the primary answers, and has its
// sessions on the backup within a second of the primary stopping, its status and every client
// following. (A Route following its pool's choice is lb/relay's
// TestUpstreamSessionsFollowThePoolsChoiceAndReportTheirFailures.)
func TestRelayStartsOnTheBackupMovesToItWithinASecondAndFailsBackWithinAFailbackInterval(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 2)
	primary, backup := c.Config("config1"), c.Config("config2")
	const failback = time.Second
	primary.Stop()
	l, _ := startLB(t, relayFiles(t, testkit.ConfigAddrs(c), `failback_interval = "1s"`, "", ""))
	testkit.Eventually(t, "the sessions on the backup", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(backup, testkit.RelayTopics...) })
	const topic = "inventory/dev"
	sse, ws := dialRelayBoth(t, l.Addr(), topic)
	served := func(what, server string) {
		t.Helper()
		v := testkit.Publish(t, c, topic, `{"on":"`+what+`"}`)
		if s := testkit.SnapshotOf(t, []byte(sse.WaitVersion(t, v, 5*time.Second).Data)); s.Server != server {
			t.Errorf("the snapshot after the %s came from %s, want %s", what, s.Server, server)
		}
		testkit.WaitChange(t, ws, topic, v, 5*time.Second)
		resp, body := relayGet(t, l, http.MethodGet, "/relay/"+topic, relayKeyHdr...)
		if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Version != v || s.Server != server {
			t.Errorf("GET after the %s: %d %+v", what, resp.StatusCode, s)
		}
	}
	failBack := func() {
		t.Helper()
		if err := primary.Start(); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		// One failback interval, plus a margin for the probe and the reconnections.
		if !testkit.Within(failback+time.Second, func() bool {
			return testkit.OneSessionPerTopic(primary, testkit.RelayTopics...) && testkit.AllSessions(backup) == 0
		}) {
			t.Fatalf("%s after the primary returned: primary %+v, backup %+v", failback+time.Second,
				primary.Stats().Topics, backup.Stats().Topics)
		}
		t.Logf("sessions back on the primary %s after it returned", time.Since(started))
		served("failback", "config1")
	}
	failBack()

	primary.Stop()
	stopped := time.Now()
	if !testkit.Within(time.Second, func() bool { return testkit.OneSessionPerTopic(backup, testkit.RelayTopics...) }) {
		t.Fatalf("1s after the primary stopped, the backup holds %+v", backup.Stats().Topics)
	}
	t.Logf("sessions on the backup %s after the primary stopped", time.Since(stopped))
	// The relay's status follows (the page shows it: lb/admin's TestTheStatusPageShowsARelayAndFollowsItsFailover).
	testkit.Eventually(t, "the relay's status on the backup", 5*time.Second, func() bool {
		rs := l.Status().Relays
		return len(rs) == 1 && rs[0].Upstream == backup.Addr && rs[0].ServingBackup && rs[0].Sessions == len(testkit.RelayTopics)
	})
	if p := poolStatus(t, l, "appconfig"); p.Failovers == 0 {
		t.Errorf("no failover counted: %+v", p)
	}
	served("failover", "config2")
	failBack()
}

// Route auth of a relay (lb's, before the relay): a request without the client key, or with a wrong
// one, is refused 401 and costs the upstream nothing, and counted; no key, the client's or the
// upstream's, shows in an answer, the admin pages or the log, which has the relay's access line. A
// path the relay's template does not match goes to the routes: none here, 404. (What the relay itself
// refuses, and that it never sends the client's key upstream: lb/relay's refusals_test.go.)
func TestRelayRouteAuthRefusesAMissingOrWrongKeyAndNoKeyShowsToClientsOrInTheLog(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	l, logs := startLB(t, relayFiles(t, testkit.ConfigAddrs(c), "", "", "[global]\naccess_log = true\n"))
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	relaySettled(t, l, cfg, testkit.RelayTopics...)
	cfg.ResetCounters()
	const topic = "inventory/dev"
	var seen bytes.Buffer
	dump := func(what string, h http.Header, body []byte) {
		fmt.Fprintf(&seen, "== %s\n", what)
		h.Write(&seen) //nolint:errcheck
		seen.Write(body)
	}

	for _, tc := range []struct {
		name, path string
		want       int
		hdr        []string
	}{
		{"no client key", "/relay/" + topic, 401, nil},
		{"wrong client key", "/relay/" + topic, 401, []string{testkit.RelayClientHeader, "nope"}},
		{"no client key on an unlisted topic", "/relay/not/listed", 401, nil},
		{"a path the template does not match, no [[routes]]", "/relay/a", 404, relayKeyHdr},
		{"a longer path", "/relay/a/b/c", 404, relayKeyHdr},
	} {
		resp, body := relayGet(t, l, http.MethodGet, tc.path, tc.hdr...)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET %s: %d %q, want %d", tc.name, tc.path, resp.StatusCode, body, tc.want)
		}
		dump(tc.name, resp.Header, body)
	}
	// A refused WebSocket upgrade: 401 without the key.
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	if _, resp, err := d.Dial("ws://"+l.Addr()+"/relay/"+topic, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("WebSocket without the key: %v %v, want 401", err, resp)
	}
	// An SSE stream without the key.
	if _, resp, err := testkit.TrySSE(l.Addr(), "/relay/"+topic, nil); err != nil || resp.StatusCode != 401 {
		t.Errorf("SSE without the key: %v %v, want 401", err, resp)
	}
	for tp, ts := range cfg.Stats().Topics {
		if ts.Fetches != 0 || ts.SessionsTotal != 0 {
			t.Errorf("%s: %d fetches and %d sessions for refused requests, want none", tp, ts.Fetches, ts.SessionsTotal)
		}
	}
	if _, ok := cfg.Stats().Topics["not/listed"]; ok {
		t.Errorf("the refused unlisted topic reached the config server")
	}
	const refused = `fairlead_relay_refused_total{relay="appconfig",code="401"}`
	if got := opMetric(t, l.AdminAddr(), "", refused); got != 5 {
		t.Errorf("%s = %v, want 5", refused, got)
	}

	// Admitted: a GET, an on-demand GET, an SSE stream and a WebSocket.
	seen.Write(testkit.RelayClientSees(t, c, l.Addr(), topic, relayKeyHdr...))
	for _, p := range []string{"/status", "/api/status", "/metrics", "/api/config", "/"} {
		code, h, b := opAdmin(t, l.AdminAddr(), http.MethodGet, p, "")
		dump(fmt.Sprintf("admin %s (%d)", p, code), h, b)
	}
	if st := cfg.Stats(); st.Unauthorized != 0 {
		t.Errorf("the config server refused %d requests: the upstream key was not sent", st.Unauthorized)
	}
	if bytes.Contains(seen.Bytes(), []byte(testkit.RelayUpstreamKey)) {
		t.Errorf("the upstream key reached a client:\n%s", seen.String())
	}
	if strings.Contains(logs.all(), testkit.RelayUpstreamKey) || strings.Contains(logs.all(), testkit.RelayClientKey) {
		t.Errorf("the log holds a key:\n%s", logs.all())
	}
	if !strings.Contains(logs.all(), `relay`) {
		t.Errorf("no relay access log line:\n%s", logs.all())
	}
}

func TestRelayPathsTheTemplateDoesNotMatchGoToTheRoutes(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	backend := startCluster(t, 1, 0)
	more := fmt.Sprintf("[pools.platform]\nbalance = \"roundrobin\"\nservers = [%q]\n[[routes]]\npool = \"platform\"\n",
		backend.Platforms[0].Addr)
	l, _ := startLB(t, relayFiles(t, testkit.ConfigAddrs(c), "", "", more))
	status, servedBy := get(t, l, "/relay/a")
	if servedBy != backend.Platforms[0].Name {
		t.Errorf("/relay/a: %d served by %q, want the route's platform server", status, servedBy)
	}
	resp, _ := relayGet(t, l, http.MethodGet, "/relay/inventory/dev", relayKeyHdr...)
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != "" {
		t.Errorf("/relay/inventory/dev: %d X-Served-By %q, want the relay's own answer", resp.StatusCode, resp.Header.Get("X-Served-By"))
	}
}

func TestRelayReloadKeepsAnUnchangedRelayAndReplacesAChangedOne(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	dir := testkit.WriteFiles(t, relayFiles(t, testkit.ConfigAddrs(c), "", "subscriber_buffer = 8", ""))
	l, _ := startLBDir(t, dir)
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	const topic = "inventory/dev"
	sse, ws := dialRelayBoth(t, l.Addr(), topic)
	reload := func(more string) {
		t.Helper()
		mustWriteFile(t, filepath.Join(dir, "20-more.toml"), more)
		mustReloadDir(t, l, dir)
	}
	cfg.ResetCounters()

	// A reload that does not touch the relay keeps its sessions and subscribers.
	reload("[global]\naccess_log = true\n")
	v := testkit.Publish(t, c, topic, `{"after":"same reload"}`)
	if ev, err := sse.NextSnapshot(v, 5*time.Second); err != nil {
		t.Errorf("a reload that did not touch the relay ended its SSE stream: %v", err)
		sse = testkit.DialSSE(t, l.Addr(), "/relay/"+topic, relayKeyHdr...)
		sse.WaitVersion(t, v, 5*time.Second)
	} else if ev.ID != strconv.FormatUint(v, 10) {
		t.Errorf("after a reload that did not touch the relay, the SSE stream got %+v, want version %d", ev, v)
	}
	if ch, _, err := testkit.ReadChange(ws, 5*time.Second); err != nil || ch.Version != v {
		t.Errorf("a reload that did not touch the relay: the WebSocket got %+v %v, want version %d", ch, err, v)
		ws = dialRelayWS(t, l.Addr(), "/relay/"+topic)
	}
	testkit.Eventually(t, "one session per topic", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	if st := cfg.Stats().Topics[topic]; st.SessionsTotal != 0 {
		t.Errorf("a reload that did not touch the relay reopened its sessions: %+v", st)
	}

	// A reload that changes the relay closes the old streams (SSE ends, WebSocket 1001); the new
	// relay serves.
	reload("[relays.appconfig]\nsubscriber_buffer = 4\n")
	for {
		_, err := sse.Next(5 * time.Second)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the old SSE stream did not end at a reload that changed the relay: %v", err)
		}
	}
	for {
		_, _, err := testkit.ReadChange(ws, 5*time.Second)
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Errorf("the old WebSocket ended with %v, want close 1001", err)
		}
		break
	}
	sse = testkit.DialSSE(t, l.Addr(), "/relay/"+topic, relayKeyHdr...)
	sse.WaitVersion(t, v, 5*time.Second)
	ws = dialRelayWS(t, l.Addr(), "/relay/"+topic)
	testkit.Eventually(t, "one session per topic after the new relay started", 5*time.Second, func() bool {
		return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...)
	})
	v = testkit.Publish(t, c, topic, `{"after":"changed reload"}`)
	sse.WaitVersion(t, v, 5*time.Second)
	testkit.WaitChange(t, ws, topic, v, 5*time.Second)
}

func TestRelayAReloadOfTheKeysFileAppliesToTheRelayAtOnce(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	dir := testkit.WriteFiles(t, relayFiles(t, testkit.ConfigAddrs(c), "", "", ""))
	l, _ := startLBDir(t, dir)
	f := func(what, key string, want int) {
		t.Helper()
		if resp, _ := relayGet(t, l, http.MethodGet, "/relay/inventory/dev", testkit.RelayClientHeader, key); resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", what, resp.StatusCode, want)
		}
	}
	// The keys file rotated in place.
	cfg := l.px.gen.Load().cfg
	keysFile := cfg.Relays["appconfig"].Auth.KeysFile
	mustWriteFile(t, keysFile, "second-key\n")
	mustReloadDir(t, l, dir)
	f("the old key after the keys file was rotated", testkit.RelayClientKey, 401)
	f("the new key after the keys file was rotated", "second-key", 200)

	// Another keys file, the whole [relays.appconfig.auth] table set again in a later file.
	newKeys := filepath.Join(t.TempDir(), "keys2")
	mustWriteFile(t, newKeys, "third-key\n")
	mustWriteFile(t, filepath.Join(dir, "20-more.toml"), fmt.Sprintf("[relays.appconfig.auth]\nkeys_file = %q\nheader = %q\n", newKeys, testkit.RelayClientHeader))
	mustReloadDir(t, l, dir)
	f("the rotated key after another keys file", "second-key", 401)
	f("the key of the other keys file", "third-key", 200)
}

// A 5xx is an answer: it is not counted against its server (as for a proxied request), so the pool
// keeps serving with its primary, whose events sessions stand; each fetch the primary answers 5xx
// goes to the pool's next choice.
func TestRelayFetchesMoveToTheBackupWhenThePrimaryAnswers5xx(t *testing.T) {
	t.Parallel()
	broken := testkit.StartHeaderRecorder(t, map[string]int{"*": 503})
	backup := testkit.StartRelaySim(t, 1)
	l, _ := startLB(t, relayFiles(t, []string{broken.Addr, backup.Configs[0].Addr}, "", "", ""))
	resp, body := relayGet(t, l, http.MethodGet, "/relay/inventory/dev", relayKeyHdr...)
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Server != "config1" {
		t.Errorf("GET with the primary answering 503: %d %q, want the backup's snapshot", resp.StatusCode, body)
	}
	resp, body = relayGet(t, l, http.MethodGet, "/relay/new/one", relayKeyHdr...)
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Server != "config1" {
		t.Errorf("an on-demand GET: %d %q, want the backup's snapshot", resp.StatusCode, body)
	}
	p, primary := poolStatus(t, l, "appconfig"), mustServerStatus(t, l, "appconfig", broken.Addr)
	if p.Serving != "primaries" || p.Failovers != 0 || !primary.Available {
		t.Errorf("a primary answering 503 to snapshots: pool serving %s after %d failovers, primary %+v; want it serving",
			p.Serving, p.Failovers, primary)
	}
	if n := testkit.AllSessions(backup.Configs[0]); n != 0 {
		t.Errorf("%d sessions on the backup while the primary serves the events", n)
	}
}

func TestRelayServesGETSSEAndWebSocketOverTheTLSFrontEnd(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	env := newTLSEnv(t, "relay CA")
	l, _, tlsAddr, _ := startTLSLB(t, relayFiles(t, testkit.ConfigAddrs(c), "", "", ""), env.issue(t, "front", tlsName, "127.0.0.1"), "")
	ccfg := env.clientConfig(tlsName)
	const topic = "inventory/dev"

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ccfg}}
	defer hc.CloseIdleConnections()
	resp, body := testkit.Do(t, hc, http.MethodGet, "https://"+tlsAddr+"/relay/"+topic, nil, relayKeyHdr...)
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Topic != topic {
		t.Fatalf("HTTPS GET: %d %q", resp.StatusCode, body)
	}

	sse, sresp, err := testkit.TrySSE(tlsAddr, "/relay/"+topic, func() (net.Conn, error) { return tlsDial(tlsAddr, ccfg) }, relayKeyHdr...)
	if err != nil || sresp.StatusCode != 200 {
		t.Fatalf("SSE over TLS: %v %v", err, sresp)
	}
	defer sse.Conn.Close()
	sse.WaitVersion(t, 1, 5*time.Second)
	ws, _ := dialWSS(t, tlsAddr, ccfg, "/relay/"+topic, http.Header{testkit.RelayClientHeader: {testkit.RelayClientKey}})
	defer ws.Close()
	testkit.Eventually(t, "2 subscribers", 5*time.Second, func() bool { rs := l.Status().Relays; return len(rs) == 1 && rs[0].Subscribers == 2 })

	v := testkit.Publish(t, c, topic, `{"over":"tls"}`)
	if ev := sse.WaitVersion(t, v, 5*time.Second); !strings.Contains(ev.Data, `"over":"tls"`) {
		t.Errorf("SSE over TLS: %+v", ev)
	}
	testkit.WaitChange(t, ws, topic, v, 5*time.Second)
}

func TestRelayConfigABadReloadKeepsTheRunningRelay(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	dir := testkit.WriteFiles(t, relayFiles(t, testkit.ConfigAddrs(c), "", "", ""))
	l, _ := startLBDir(t, dir)
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	sse := testkit.DialSSE(t, l.Addr(), "/relay/inventory/dev", relayKeyHdr...)
	sse.WaitVersion(t, 1, 5*time.Second)

	// A relay config that Load refuses never reaches a reload (lb/config's
	// TestRelayConfigErrorsNameTheFileAndTheKey). A valid config whose new relay cannot start (start = "normal", upstream unreachable) fails the
	// reload, which keeps the running relay.
	mustWriteFile(t, filepath.Join(dir, "20-more.toml"), fmt.Sprintf("[pools.appconfig]\nservers = [%q]\nbackups = []\n", testkit.Addr(t)))
	if err := reloadDir(l, dir); err == nil || !strings.Contains(err.Error(), "relays.appconfig") {
		t.Errorf("a reload to an unreachable upstream with start = \"normal\": %v, want an error naming the relay", err)
	}
	v := testkit.Publish(t, c, "inventory/dev", `{"after":"bad reload"}`)
	sse.WaitVersion(t, v, 5*time.Second)
	resp, body := relayGet(t, l, http.MethodGet, "/relay/inventory/dev", relayKeyHdr...)
	if s := testkit.SnapshotOf(t, body); resp.StatusCode != 200 || s.Version != v {
		t.Errorf("GET after the failed reload: %d %q", resp.StatusCode, body)
	}
	if st := cfg.Stats().Topics["inventory/dev"]; st.Sessions != 1 {
		t.Errorf("after the failed reload: %d sessions, want 1", st.Sessions)
	}
}
