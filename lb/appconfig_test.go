package lb

// A relay with protocol = "appconfiguration" in front of simulated App Configuration instances and
// IAM (bench/sim): the shapes the server SDKs use (REST in both forms, wsfeature) with a client of the
// test's own, the client SDKs' SSE, metering, failover to a backup instance with its own guid, IAM
// token renewal, and the secrets kept out of every log, status and answer. The official JS client SDK
// runs against a fairlead process in cmd/fairlead.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
)

const (
	acAPIKey    = "ibm-cloud-apikey-51d2"
	acClientKey = "sdk-key-9e1f"
	acGUID      = "guid-primary"
	acBackupID  = "guid-backup"
)

var acTopics = []string{"inventory/dev", "payments/prod"}

// acEnv is testkit's App Configuration environment (a simulated IAM, a primary and a backup
// instance holding acTopics) and a relay in front of it.
type acEnv struct {
	*testkit.AppConfigEnv
	iam             *sim.IAM
	primary, backup *sim.AppConfig
	l               *LB
	logs            *logSink
}

// startAppConfigRelay starts the environment; expiresIn is the life of IAM's tokens, relayExtra more
// lines of [relays.ibm].
func startAppConfigRelay(t *testing.T, expiresIn time.Duration, relayExtra string) *acEnv {
	t.Helper()
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, BackupGUID: acBackupID, Topics: acTopics, ExpiresIn: expiresIn})
	e := &acEnv{AppConfigEnv: env, iam: env.IAM, primary: env.Primary, backup: env.Backup}
	var c testkit.Config
	listenAnywhere(&c)
	env.Relay(&c, `response_timeout = "2s"`, `keepalive = "400ms"`+"\n"+relayExtra)
	e.l, e.logs = startLB(t, map[string]string{"10-ibm.toml": c.String()})
	// Settled: each topic fetched at start and again once its session connected.
	testkit.Eventually(t, "the relay's sessions and fetches", 10*time.Second, func() bool {
		for _, tp := range acTopics {
			if st := e.primary.Stats().Topics[tp]; st.WSSessions != 1 || st.Fetches < 2 {
				return false
			}
		}
		return true
	})
	return e
}

// acPath returns the client path of the configuration (sdkConfig form) of topic.
func acConfigPath(guid, topic string) string {
	c, env, _ := strings.Cut(topic, "/")
	return "/apprapp/feature/v1/instances/" + guid + "/config?action=sdkConfig&collection_id=" + c + "&environment_id=" + env
}

// acGet GETs path from the relay with Authorization auth and returns the status and body.
func acGet(t *testing.T, l *LB, path, auth string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+l.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// acVersion returns the value of the simulated configuration's version property in an sdkConfig
// document (environments[0]) or a flat one; -1 if there is none.
func acVersion(t *testing.T, body []byte) int {
	t.Helper()
	var doc struct {
		Environments []struct {
			Properties []struct {
				ID    string `json:"property_id"`
				Value int    `json:"value"`
			} `json:"properties"`
		} `json:"environments"`
		Properties []struct {
			ID    string `json:"property_id"`
			Value int    `json:"value"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("not JSON: %v: %q", err, body)
	}
	props := doc.Properties
	if len(doc.Environments) > 0 {
		props = doc.Environments[0].Properties
	}
	for _, p := range props {
		if p.ID == sim.AppConfigProperty {
			return p.Value
		}
	}
	return -1
}

// directGet GETs path from instance a with a token of IAM, as a server SDK would, and returns the body.
func (e *acEnv) directGet(t *testing.T, a *sim.AppConfig, path string) []byte {
	t.Helper()
	resp, err := http.PostForm(e.iam.URL()+"/identity/token", map[string][]string{
		"grant_type": {"urn:ibm:params:oauth:grant-type:apikey"}, "apikey": {acAPIKey}})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	json.NewDecoder(resp.Body).Decode(&tok) //nolint:errcheck
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, a.URL()+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err = testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("direct GET %s: %d %q", path, resp.StatusCode, body)
	}
	return body
}

// dialWSFeature opens a server SDK's wsfeature WebSocket on the relay for topic.
func dialWSFeature(t *testing.T, l *LB, guid, topic, auth string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	c, env, _ := strings.Cut(topic, "/")
	u := "ws://" + l.Addr() + "/apprapp/wsfeature?instance_id=" + guid + "&collection_id=" + c + "&environment_id=" + env
	conn, resp, err := websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {auth}})
	if err == nil {
		t.Cleanup(func() { conn.Close() })
	}
	return conn, resp, err
}

// readText reads text frames until one satisfies ok, within timeout.
func readText(t *testing.T, conn *websocket.Conn, what string, timeout time.Duration, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		conn.SetReadDeadline(deadline) //nolint:errcheck
		mt, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if mt == websocket.TextMessage && ok(string(msg)) {
			return
		}
	}
}

func TestAppConfigurationRelayAnswersTheServerSDKsShapesFromItsCache(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	topic := acTopics[0]
	st := e.primary.Stats().Topics[topic]
	// The new form, with the SDK's key as a bearer token: the instance's own answer.
	code, body := acGet(t, e.l, acConfigPath(acGUID, topic), "Bearer "+acClientKey)
	if code != 200 || acVersion(t, body) != 1 {
		t.Fatalf("sdkConfig: %d %q", code, body)
	}
	if want := e.directGet(t, e.primary, acConfigPath(acGUID, topic)); string(body) != string(want) {
		t.Errorf("sdkConfig through the relay differs from the instance's:\n%s\n%s", body, want)
	}
	// The older form: flattened as the instance flattens it.
	old := "/apprapp/feature/v1/instances/" + acGUID + "/collections/inventory/config?environment_id=dev"
	code, body = acGet(t, e.l, old, "Bearer "+acClientKey)
	var got, want any
	json.Unmarshal(body, &got)                            //nolint:errcheck
	json.Unmarshal(e.directGet(t, e.primary, old), &want) //nolint:errcheck
	if code != 200 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("older form: %d %q, want %v", code, body, want)
	}
	if n := e.primary.Stats().Topics[topic].Fetches - st.Fetches; n != 1 { // the direct GET only
		t.Errorf("the relay's answers cost %d fetches upstream, want none", n-1)
	}

	// wsfeature: "test message" every keepalive; after a change, a change frame once the new
	// configuration is in the cache, so that the fetch it causes gets it.
	ws, _, err := dialWSFeature(t, e.l, acGUID, topic, "Bearer "+acClientKey)
	if err != nil {
		t.Fatal(err)
	}
	readText(t, ws, "a heartbeat", 3*time.Second, func(m string) bool { return m == "test message" })
	n := e.primary.Bump(topic)
	readText(t, ws, "a change frame", 5*time.Second, func(m string) bool { return strings.Contains(m, "collection_id:inventory") })
	if code, body := acGet(t, e.l, acConfigPath(acGUID, topic), "Bearer "+acClientKey); code != 200 || acVersion(t, body) != n {
		t.Errorf("GET after the change frame: %d, version %d, want %d", code, acVersion(t, body), n)
	}

	// One upstream session per topic, one token, no client key upstream.
	testkit.Eventually(t, "one session per topic", 5*time.Second, func() bool {
		s := e.primary.Stats()
		return s.Topics[acTopics[0]].WSSessions == 1 && s.Topics[acTopics[1]].WSSessions == 1
	})
	if s := relayStatus(t, e.l).IAM; s == nil || s.Tokens != 1 {
		t.Errorf("the relay obtained %+v tokens, want 1", s)
	}
	if s := e.primary.Stats(); s.ClientKeyOnTokenPath != 0 || s.Unauthorized != 0 {
		t.Errorf("upstream: %d requests with a client key, %d unauthorized", s.ClientKeyOnTokenPath, s.Unauthorized)
	}
}

func TestAppConfigurationRelayStreamsRegistrationThenEachConfigurationToClientSDKs(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	path := "/apprapp/feature/v1/instances/" + acGUID + "/environments/prod/sse/subscribe?collection_id=payments"
	sse := dialRelaySSE(t, e.l.Addr(), path, "Authorization", acClientKey) // raw, as the client SDK sends it
	ev, err := sse.next(5 * time.Second)
	if err != nil || ev.event != "Registration" || ev.id != "" || acVersion(t, []byte(ev.data)) != 1 {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	for range 2 {
		n := e.primary.Bump("payments/prod")
		ev, err = sse.next(5 * time.Second)
		if err != nil || ev.event != "SSEConfig_payload" || acVersion(t, []byte(ev.data)) != n {
			t.Fatalf("after change %d: %+v, %v", n, ev, err)
		}
	}
	// A wrong key: 401, nothing upstream.
	before := e.primary.Stats()
	_, resp, err := tryRelaySSE(e.l.Addr(), path, nil, "Authorization", "not-a-key")
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("a wrong key: %v, %v", resp, err)
	}
	if after := e.primary.Stats(); after.Unauthorized != before.Unauthorized {
		t.Error("a refused client reached the instance")
	}
	// Another instance, or a path the relay does not serve: 404.
	for _, p := range []string{
		"/apprapp/feature/v1/instances/other-guid/environments/prod/sse/subscribe?collection_id=payments",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=export",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=sdkConfig&collection_id=a/b&environment_id=c",
		"/apprapp/nothing"} {
		if code, _ := acGet(t, e.l, p, acClientKey); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}

func TestAppConfigurationRelayForwardsMeteringWithItsTokenNotTheClientsKey(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	for _, p := range []string{"/apprapp/events/v1/instances/" + acGUID + "/usage", "/apprapp/metrics/v1/instances/" + acGUID + "/analytics"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+e.l.Addr()+p,
			strings.NewReader(`{"collection_id":"inventory","environment_id":"dev","usages":[]}`))
		req.Header.Set("Authorization", acClientKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Errorf("POST %s: %d, want the instance's 202", p, resp.StatusCode)
		}
	}
	s := e.primary.Stats()
	if s.Usage != 1 || s.Analytics != 1 || s.MeteringWithClientKey != 0 {
		t.Errorf("the instance got %d usage and %d analytics POSTs, %d with a client key", s.Usage, s.Analytics, s.MeteringWithClientKey)
	}
	if got := relayStatus(t, e.l).Requests; got["usage"] != 1 || got["analytics"] != 1 {
		t.Errorf("requests counted: %v", got)
	}
}

func TestAppConfigurationRelayMovesToTheBackupInstanceAndBack(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	path := "/apprapp/feature/v1/instances/" + acGUID + "/environments/dev/sse/subscribe?collection_id=inventory"
	sse := dialRelaySSE(t, e.l.Addr(), path, "Authorization", acClientKey)
	if ev, err := sse.next(5 * time.Second); err != nil || ev.event != "Registration" {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	e.primary.Stop()
	testkit.Eventually(t, "the sessions on the backup instance", 10*time.Second, func() bool {
		return e.backup.Stats().Topics["inventory/dev"].WSSessions == 1
	})
	// The backup instance, addressed with its own guid, serves the changes.
	n := e.backup.Bump("inventory/dev")
	waitPayload(t, sse, n)
	if p := poolStatus(t, e.l, "ibm"); p.Failovers == 0 {
		t.Errorf("no failover counted: %+v", p)
	}
	// The primary back: a failback, and its changes reach the subscriber.
	if err := e.primary.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the sessions back on the primary", 10*time.Second, func() bool {
		return e.primary.Stats().Topics["inventory/dev"].WSSessions == 1 && e.backup.Stats().Topics["inventory/dev"].WSSessions == 0
	})
	for e.primary.Stats().Topics["inventory/dev"].Version <= n {
		e.primary.Bump("inventory/dev")
	}
	waitPayload(t, sse, e.primary.Stats().Topics["inventory/dev"].Version)
	if s := e.backup.Stats(); s.Unauthorized != 0 {
		t.Errorf("the backup instance refused %d requests (another guid or token?)", s.Unauthorized)
	}
}

// waitPayload reads events until an SSEConfig_payload of version n.
func waitPayload(t *testing.T, sse *relaySSE, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := sse.next(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for version %d: %v", n, err)
		}
		if ev.event == "SSEConfig_payload" && acVersion(t, []byte(ev.data)) == n {
			return
		}
	}
}

func TestAppConfigurationRelayRenewsItsTokenBeforeItExpiresAndAfterA401(t *testing.T) {
	e := startAppConfigRelay(t, 2*time.Second, "")
	topic := acTopics[0]
	// Each change costs a fetch; past 80% of a token's life the next fetch uses a new one.
	testkit.Eventually(t, "a renewed token", 10*time.Second, func() bool {
		e.primary.Bump(topic)
		time.Sleep(200 * time.Millisecond)
		return e.iam.Stats().Issued >= 2
	})
	if s := e.primary.Stats(); s.Unauthorized != 0 {
		t.Errorf("%d requests with an expired token: the token was not renewed before it expired", s.Unauthorized)
	}
	// A token the upstream refuses is replaced at once, and the fetch succeeds.
	issued := e.iam.Stats().Issued
	e.iam.RevokeAll()
	n := e.primary.Bump(topic)
	testkit.Eventually(t, "the change fetched with a new token", 5*time.Second, func() bool {
		_, body := acGet(t, e.l, acConfigPath(acGUID, topic), acClientKey)
		return acVersion(t, body) == n
	})
	if e.iam.Stats().Issued <= issued {
		t.Error("no new token after the 401")
	}
	// Neither the API key nor a token anywhere an operator looks.
	st, _ := json.Marshal(e.l.Status())
	for _, where := range []string{e.logs.all(), string(st)} {
		if strings.Contains(where, acAPIKey) || strings.Contains(where, "eyJ") {
			t.Errorf("a secret in the log or the status: %q", where)
		}
	}
	if s := relayStatus(t, e.l); s.IAM == nil || s.IAM.Tokens < 2 || s.IAM.TokenExpires.IsZero() {
		t.Errorf("IAM status: %+v", s.IAM)
	}
}

func TestAppConfigurationRelayNormalStartFailsNamingIAMWhenItCannotGetAToken(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	e.l.Close()
	e.iam.Stop()
	var c testkit.Config
	listenAnywhere(&c)
	c.Table("pools.ibm").Set("servers", []string{e.primary.Addr})
	c.Table("relays.ibm").Set("pool", "ibm").Set("protocol", "appconfiguration").Set("guid", acGUID).
		Set("topics", acTopics).Set("apikey_file", e.APIKeyFile).Set("iam_url", e.iam.URL())
	cfg, err := loadConfig(t, map[string]string{"10-ibm.toml": c.String()})
	if err != nil {
		t.Fatal(err)
	}
	l := New(cfg, Options{Logf: func(string, ...any) {}})
	defer l.Close()
	err = l.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "relays.ibm") || !strings.Contains(err.Error(), "IAM "+e.iam.URL()) ||
		!strings.Contains(err.Error(), "inventory/dev") {
		t.Errorf("start: %v, want an error naming the relay, the topic and IAM", err)
	}
	if err != nil && strings.Contains(err.Error(), acAPIKey) {
		t.Error("the error holds the API key")
	}
}

// relayStatus returns the status of the only relay of l.
func relayStatus(t *testing.T, l *LB) admin.RelayStatus {
	t.Helper()
	rs := l.Status().Relays
	if len(rs) != 1 {
		t.Fatalf("%d relays in the status, want 1", len(rs))
	}
	return rs[0]
}

// loadConfig loads the config files.
func loadConfig(t *testing.T, files map[string]string) (*config.Config, error) {
	t.Helper()
	return config.Load(testkit.WriteFiles(t, files))
}

func TestAnAppConfigurationSessionWithoutHeartbeatsIsDialledAgain(t *testing.T) {
	iam, err := sim.StartIAM("127.0.0.1:0", sim.IAMOptions{APIKeys: []string{acAPIKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iam.Close)
	// An instance whose heartbeats never come: its sessions look dead after 2 x keepalive + connect_timeout.
	a, err := sim.StartAppConfig("silent", "127.0.0.1:0", sim.AppConfigOptions{GUID: acGUID, IAM: iam, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	a.Bump("inventory/dev")
	dir := t.TempDir()
	apikey := filepath.Join(dir, "apikey")
	if err := os.WriteFile(apikey, []byte(acAPIKey), 0o600); err != nil {
		t.Fatal(err)
	}
	var c testkit.Config
	listenAnywhere(&c)
	c.Table("pools.ibm").Set("servers", []string{a.Addr}).Set("connect_timeout", 300*time.Millisecond)
	c.Table("relays.ibm").Set("pool", "ibm").Set("protocol", "appconfiguration").Set("guid", acGUID).
		Set("topics", []string{"inventory/dev"}).Set("apikey_file", apikey).Set("iam_url", iam.URL()).
		Set("keepalive", 200*time.Millisecond)
	l, logs := startLB(t, map[string]string{"10-ibm.toml": c.String()})
	testkit.Eventually(t, "the silent session dialled again", 10*time.Second, func() bool {
		return a.Stats().Topics["inventory/dev"].WSSessionsTotal >= 3
	})
	if !strings.Contains(logs.all(), "i/o timeout") {
		t.Errorf("the log does not say the session timed out:\n%s", logs.all())
	}
	// The cache still serves.
	if code, body := acGet(t, l, acConfigPath(acGUID, "inventory/dev"), "Bearer unchecked"); code != 200 || acVersion(t, body) != 1 {
		t.Errorf("GET: %d %q", code, body)
	}
}
