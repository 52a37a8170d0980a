package relay

// What a relay refuses, and what it never passes on: the relay's own refusals (an unlisted topic
// without on_demand, a method other than GET, a path its template does not match) cost the upstream
// nothing and are counted by status; the upstream key never reaches a client, and a client's headers
// never reach the upstream. Route auth (401) and what the operator sees (status, metrics, the log) are
// package lb's.

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

func TestRelayRefusesAnUnlistedTopicAPOSTAndPathsItsTemplateDoesNotMatchWithoutAskingTheUpstream(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), "on_demand = false"), "appconfig")
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	e.settled(t, cfg, testkit.RelayTopics...)
	cfg.ResetCounters()

	for _, tc := range []struct {
		name, method, path string
		want               int
	}{
		{"unlisted topic with on_demand = false", http.MethodGet, "/relay/not/listed", 404},
		{"POST", http.MethodPost, "/relay/inventory/dev", 405},
		// Not the relay's: the harness answers 404 for what Match does not take.
		{"a path the template does not match", http.MethodGet, "/relay/a", 404},
		{"a longer path", http.MethodGet, "/relay/a/b/c", 404},
	} {
		if resp, body := e.get(t, tc.method, tc.path); resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s: %d %q, want %d", tc.name, tc.method, tc.path, resp.StatusCode, body, tc.want)
		}
	}
	for tp, ts := range cfg.Stats().Topics {
		if ts.Fetches != 0 || ts.SessionsTotal != 0 {
			t.Errorf("%s: %d fetches and %d sessions for refused requests, want none", tp, ts.Fetches, ts.SessionsTotal)
		}
	}
	if _, ok := cfg.Stats().Topics["not/listed"]; ok {
		t.Errorf("the refused unlisted topic reached the config server")
	}
	for code, want := range map[string]float64{"404": 1, "405": 1} {
		series := fmt.Sprintf(`fairlead_relay_refused_total{relay="appconfig",code=%q}`, code)
		if got := e.metric(t, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

func TestRelayAnswersNeverShowTheUpstreamKeyAndItsUpstreamRequestsNeverCarryTheClientsKey(t *testing.T) {
	t.Parallel()
	c := testkit.StartRelaySim(t, 1)
	cfg := c.Configs[0]
	e := startRoute(t, routeFiles(t, testkit.ConfigAddrs(c), ""), "appconfig")
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool { return testkit.OneSessionPerTopic(cfg, testkit.RelayTopics...) })
	const topic = "inventory/dev"
	key := []string{testkit.RelayClientHeader, testkit.RelayClientKey} // what a client sends; route auth is lb's
	seen := bytes.NewBuffer(testkit.RelayClientSees(t, c, e.addr, topic, key...))
	if st := cfg.Stats(); st.Unauthorized != 0 {
		t.Errorf("the config server refused %d requests: the upstream key was not sent", st.Unauthorized)
	}
	if bytes.Contains(seen.Bytes(), []byte(testkit.RelayUpstreamKey)) {
		t.Errorf("the upstream key reached a client:\n%s", seen.String())
	}
	if bytes.Contains([]byte(e.logs.String()), []byte(testkit.RelayUpstreamKey)) {
		t.Errorf("the relay's log holds the upstream key:\n%s", e.logs.String())
	}

	// An upstream that records headers: the client key is never forwarded, the upstream key always is.
	hr := testkit.StartHeaderRecorder(t, nil)
	e2 := startRoute(t, routeFiles(t, []string{hr.Addr}, ""), "appconfig")
	e2.get(t, http.MethodGet, "/relay/"+topic, key...)
	e2.get(t, http.MethodGet, "/relay/other/topic", key...)
	sse2 := testkit.DialSSE(t, e2.addr, "/relay/"+topic, key...)
	sse2.WaitVersion(t, 1, 5*time.Second)
	testkit.DialWS(t, "ws://"+e2.addr+"/relay/"+topic, http.Header{key[0]: {key[1]}})
	testkit.Eventually(t, "the recorder to see the sessions and fetches", 5*time.Second, func() bool { return len(hr.All()) >= 9 })
	for i, h := range hr.All() {
		if h.Get(testkit.RelayClientHeader) != "" {
			t.Errorf("upstream request %d carries the client key header %s", i, testkit.RelayClientHeader)
		}
		if got := h.Get("Authorization"); got != "Bearer "+testkit.RelayUpstreamKey {
			t.Errorf("upstream request %d: Authorization %q, want the upstream key", i, got)
		}
	}
}
