package relay

// A Route with protocol = "appconfiguration" in front of simulated App Configuration instances and
// IAM (bench/sim): the shapes the server SDKs use (REST in both forms, wsfeature) with a client of the
// test's own, the client SDKs' SSE, metering, IAM token renewal, and the secrets kept out of the log,
// the status and every answer, and the move to the backup instance (its own guid) when the pool's
// choice moves. The route's auth and the pool's health, which moves that choice, are package lb's; the
// official JS client SDK runs against a fairlead process in cmd/fairlead.

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
	"github.com/fasthttp/websocket"
)

const (
	acAPIKey    = "ibm-cloud-apikey-51d2"
	acClientKey = "sdk-key-9e1f"
	acGUID      = "guid-primary"
)

var acTopics = []string{"inventory/dev", "payments/prod"}

// acRoute is testkit's App Configuration environment (a simulated IAM, a primary and a backup
// instance holding acTopics) and relay "ibm" in front of it.
type acRoute struct {
	*routeEnv
	env *testkit.AppConfigEnv
}

// startAppConfigRoute starts the environment and the relay; expiresIn is the life of IAM's tokens.
func startAppConfigRoute(t *testing.T, expiresIn time.Duration) *acRoute {
	t.Helper()
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, Topics: acTopics, ExpiresIn: expiresIn})
	var c testkit.Config
	c.Table("frontend").Set("listen", "127.0.0.1:0")
	env.Relay(&c, `response_timeout = "2s"`, `keepalive = "400ms"`)
	e := &acRoute{routeEnv: startRoute(t, map[string]string{"10-ibm.toml": c.String()}, "ibm"), env: env}
	// Settled: each topic fetched at start and again once its session connected.
	testkit.Eventually(t, "the relay's sessions and fetches", 10*time.Second, func() bool {
		for _, tp := range acTopics {
			if st := env.Primary.Stats().Topics[tp]; st.WSSessions != 1 || st.Fetches < 2 {
				return false
			}
		}
		return true
	})
	return e
}

// directGet GETs path from instance a with a token of IAM, as a server SDK would, and returns the body.
func (e *acRoute) directGet(t *testing.T, a *sim.AppConfig, path string) []byte {
	t.Helper()
	resp, err := http.PostForm(e.env.IAM.URL()+"/identity/token", map[string][]string{
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
	resp, err = e.client.Do(req)
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

// acGet GETs path from the relay with Authorization auth and returns the status and body.
func (e *acRoute) acGet(t *testing.T, path, auth string) (int, []byte) {
	t.Helper()
	var hdr []string
	if auth != "" {
		hdr = []string{"Authorization", auth}
	}
	resp, body := e.get(t, http.MethodGet, path, hdr...)
	return resp.StatusCode, body
}

// dialWSFeature opens a server SDK's wsfeature WebSocket on the relay for topic.
func (e *acRoute) dialWSFeature(t *testing.T, guid, topic, auth string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	c, env, _ := strings.Cut(topic, "/")
	u := "ws://" + e.addr + "/apprapp/wsfeature?instance_id=" + guid + "&collection_id=" + c + "&environment_id=" + env
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
	e := startAppConfigRoute(t, time.Hour)
	primary := e.env.Primary
	topic := acTopics[0]
	st := primary.Stats().Topics[topic]
	// The new form, with the SDK's key as a bearer token: the instance's own answer.
	code, body := e.acGet(t, testkit.AppConfigPath(acGUID, topic), "Bearer "+acClientKey)
	if code != 200 || testkit.AppConfigVersion(t, body) != 1 {
		t.Fatalf("sdkConfig: %d %q", code, body)
	}
	if want := e.directGet(t, primary, testkit.AppConfigPath(acGUID, topic)); string(body) != string(want) {
		t.Errorf("sdkConfig through the relay differs from the instance's:\n%s\n%s", body, want)
	}
	// The older form: flattened as the instance flattens it.
	old := "/apprapp/feature/v1/instances/" + acGUID + "/collections/inventory/config?environment_id=dev"
	code, body = e.acGet(t, old, "Bearer "+acClientKey)
	var got, want any
	json.Unmarshal(body, &got)                          //nolint:errcheck
	json.Unmarshal(e.directGet(t, primary, old), &want) //nolint:errcheck
	if code != 200 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("older form: %d %q, want %v", code, body, want)
	}
	if n := primary.Stats().Topics[topic].Fetches - st.Fetches; n != 1 { // the direct GET only
		t.Errorf("the relay's answers cost %d fetches upstream, want none", n-1)
	}

	// wsfeature: "test message" every keepalive; after a change, a change frame once the new
	// configuration is in the cache, so that the fetch it causes gets it.
	ws, _, err := e.dialWSFeature(t, acGUID, topic, "Bearer "+acClientKey)
	if err != nil {
		t.Fatal(err)
	}
	readText(t, ws, "a heartbeat", 3*time.Second, func(m string) bool { return m == "test message" })
	n := primary.Bump(topic)
	readText(t, ws, "a change frame", 5*time.Second, func(m string) bool { return strings.Contains(m, "collection_id:inventory") })
	if code, body := e.acGet(t, testkit.AppConfigPath(acGUID, topic), "Bearer "+acClientKey); code != 200 || testkit.AppConfigVersion(t, body) != n {
		t.Errorf("GET after the change frame: %d, version %d, want %d", code, testkit.AppConfigVersion(t, body), n)
	}

	// One upstream session per topic, one token, no client key upstream.
	testkit.Eventually(t, "one session per topic", 5*time.Second, func() bool {
		s := primary.Stats()
		return s.Topics[acTopics[0]].WSSessions == 1 && s.Topics[acTopics[1]].WSSessions == 1
	})
	if s := e.rr.Status().IAM; s == nil || s.Tokens != 1 {
		t.Errorf("the relay obtained %+v tokens, want 1", s)
	}
	if s := primary.Stats(); s.ClientKeyOnTokenPath != 0 || s.Unauthorized != 0 {
		t.Errorf("upstream: %d requests with a client key, %d unauthorized", s.ClientKeyOnTokenPath, s.Unauthorized)
	}
}

func TestAppConfigurationRelayStreamsRegistrationThenEachConfigurationToClientSDKs(t *testing.T) {
	e := startAppConfigRoute(t, time.Hour)
	path := "/apprapp/feature/v1/instances/" + acGUID + "/environments/prod/sse/subscribe?collection_id=payments"
	sse := testkit.DialSSE(t, e.addr, path, "Authorization", acClientKey) // raw, as the client SDK sends it
	ev, err := sse.Next(5 * time.Second)
	if err != nil || ev.Event != "Registration" || ev.ID != "" || testkit.AppConfigVersion(t, []byte(ev.Data)) != 1 {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	for range 2 {
		n := e.env.Primary.Bump("payments/prod")
		ev, err = sse.Next(5 * time.Second)
		if err != nil || ev.Event != "SSEConfig_payload" || testkit.AppConfigVersion(t, []byte(ev.Data)) != n {
			t.Fatalf("after change %d: %+v, %v", n, ev, err)
		}
	}
	// Another instance, or a path the relay does not serve: 404.
	for _, p := range []string{
		"/apprapp/feature/v1/instances/other-guid/environments/prod/sse/subscribe?collection_id=payments",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=export",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=sdkConfig&collection_id=a/b&environment_id=c",
		"/apprapp/nothing"} {
		if code, _ := e.acGet(t, p, acClientKey); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}

func TestAppConfigurationRelayForwardsMeteringWithItsTokenNotTheClientsKey(t *testing.T) {
	e := startAppConfigRoute(t, time.Hour)
	for _, p := range []string{"/apprapp/events/v1/instances/" + acGUID + "/usage", "/apprapp/metrics/v1/instances/" + acGUID + "/analytics"} {
		// The client's key reaches the relay here (no route auth takes it off): the relay still
		// sends the instance its own token only.
		resp, _ := e.send(t, http.MethodPost, p, strings.NewReader(`{"collection_id":"inventory","environment_id":"dev","usages":[]}`),
			"Authorization", acClientKey, "Content-Type", "application/json")
		if resp.StatusCode != 202 {
			t.Errorf("POST %s: %d, want the instance's 202", p, resp.StatusCode)
		}
	}
	s := e.env.Primary.Stats()
	if s.Usage != 1 || s.Analytics != 1 || s.MeteringWithClientKey != 0 {
		t.Errorf("the instance got %d usage and %d analytics POSTs, %d with a client key", s.Usage, s.Analytics, s.MeteringWithClientKey)
	}
	if got := e.rr.Status().Requests; got["usage"] != 1 || got["analytics"] != 1 {
		t.Errorf("requests counted: %v", got)
	}
}

func TestAppConfigurationRelayRenewsItsTokenBeforeItExpiresAndAfterA401(t *testing.T) {
	e := startAppConfigRoute(t, 2*time.Second)
	iam, primary := e.env.IAM, e.env.Primary
	topic := acTopics[0]
	// Each change costs a fetch; past 80% of a token's life the next fetch uses a new one.
	testkit.Eventually(t, "a renewed token", 10*time.Second, func() bool {
		primary.Bump(topic)
		time.Sleep(200 * time.Millisecond)
		return iam.Stats().Issued >= 2
	})
	if s := primary.Stats(); s.Unauthorized != 0 {
		t.Errorf("%d requests with an expired token: the token was not renewed before it expired", s.Unauthorized)
	}
	// A token the upstream refuses is replaced at once, and the fetch succeeds.
	issued := iam.Stats().Issued
	iam.RevokeAll()
	n := primary.Bump(topic)
	testkit.Eventually(t, "the change fetched with a new token", 5*time.Second, func() bool {
		_, body := e.acGet(t, testkit.AppConfigPath(acGUID, topic), acClientKey)
		return testkit.AppConfigVersion(t, body) == n
	})
	if iam.Stats().Issued <= issued {
		t.Error("no new token after the 401")
	}
	// Neither the API key nor a token anywhere an operator looks.
	st, _ := json.Marshal(e.rr.Status())
	for _, where := range []string{e.logs.String(), string(st)} {
		if strings.Contains(where, acAPIKey) || strings.Contains(where, "eyJ") {
			t.Errorf("a secret in the log or the status: %q", where)
		}
	}
	if s := e.rr.Status(); s.IAM == nil || s.IAM.Tokens < 2 || s.IAM.TokenExpires.IsZero() {
		t.Errorf("IAM status: %+v", s.IAM)
	}
}

func TestAppConfigurationRelayNormalStartFailsNamingIAMWhenItCannotGetAToken(t *testing.T) {
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, Topics: acTopics})
	env.IAM.Stop()
	var c testkit.Config
	c.Table("frontend").Set("listen", "127.0.0.1:0")
	c.Table("pools.ibm").Set("servers", []string{env.Primary.Addr})
	c.Table("relays.ibm").Set("pool", "ibm").Set("protocol", "appconfiguration").Set("guid", acGUID).
		Set("topics", acTopics).Set("apikey_file", env.APIKeyFile).Set("iam_url", env.IAM.URL())
	rr, _, _ := newRoute(t, map[string]string{"10-ibm.toml": c.String()}, "ibm")
	err := rr.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "relays.ibm") || !strings.Contains(err.Error(), "IAM "+env.IAM.URL()) ||
		!strings.Contains(err.Error(), "inventory/dev") {
		t.Errorf("start: %v, want an error naming the relay, the topic and IAM", err)
	}
	if err != nil && strings.Contains(err.Error(), acAPIKey) {
		t.Error("the error holds the API key")
	}
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
	apikey := filepath.Join(t.TempDir(), "apikey")
	if err := os.WriteFile(apikey, []byte(acAPIKey), 0o600); err != nil {
		t.Fatal(err)
	}
	var c testkit.Config
	c.Table("frontend").Set("listen", "127.0.0.1:0")
	c.Table("pools.ibm").Set("servers", []string{a.Addr}).Set("connect_timeout", 300*time.Millisecond)
	c.Table("relays.ibm").Set("pool", "ibm").Set("protocol", "appconfiguration").Set("guid", acGUID).
		Set("topics", []string{"inventory/dev"}).Set("apikey_file", apikey).Set("iam_url", iam.URL()).
		Set("keepalive", 200*time.Millisecond)
	e := &acRoute{routeEnv: startRoute(t, map[string]string{"10-ibm.toml": c.String()}, "ibm")}
	testkit.Eventually(t, "the silent session dialled again", 10*time.Second, func() bool {
		return a.Stats().Topics["inventory/dev"].WSSessionsTotal >= 3
	})
	if !strings.Contains(e.logs.String(), "i/o timeout") {
		t.Errorf("the log does not say the session timed out:\n%s", e.logs.String())
	}
	// The cache still serves.
	if code, body := e.acGet(t, testkit.AppConfigPath(acGUID, "inventory/dev"), "Bearer unchecked"); code != 200 || testkit.AppConfigVersion(t, body) != 1 {
		t.Errorf("GET: %d %q", code, body)
	}
}

// The pool's choice moves to the backup instance (the primary stopped) and back: the sessions follow,
// addressing the backup with its own guid, and its changes reach the client SDK's stream, then the
// primary's again.
func TestAppConfigurationRelayMovesToTheBackupInstanceAndBack(t *testing.T) {
	e := startAppConfigRoute(t, time.Hour)
	primary, backup := e.env.Primary, e.env.Backup
	path := "/apprapp/feature/v1/instances/" + acGUID + "/environments/dev/sse/subscribe?collection_id=inventory"
	sse := testkit.DialSSE(t, e.addr, path, "Authorization", acClientKey)
	if ev, err := sse.Next(5 * time.Second); err != nil || ev.Event != "Registration" {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	primary.Stop()
	e.pool.set(backup.Addr, primary.Addr) // the pool's health took the primary down
	testkit.Eventually(t, "the sessions on the backup instance", 10*time.Second, func() bool {
		return backup.Stats().Topics["inventory/dev"].WSSessions == 1
	})
	// The backup instance, addressed with its own guid, serves the changes.
	n := backup.Bump("inventory/dev")
	waitPayload(t, sse, n)
	// The primary back: a failback, and its changes reach the subscriber.
	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	e.pool.set(primary.Addr, backup.Addr)
	testkit.Eventually(t, "the sessions back on the primary", 10*time.Second, func() bool {
		return primary.Stats().Topics["inventory/dev"].WSSessions == 1 && backup.Stats().Topics["inventory/dev"].WSSessions == 0
	})
	for primary.Stats().Topics["inventory/dev"].Version <= n {
		primary.Bump("inventory/dev")
	}
	waitPayload(t, sse, primary.Stats().Topics["inventory/dev"].Version)
	if s := backup.Stats(); s.Unauthorized != 0 {
		t.Errorf("the backup instance refused %d requests (another guid or token?)", s.Unauthorized)
	}
}

// waitPayload reads events until an SSEConfig_payload of version n.
func waitPayload(t *testing.T, sse *testkit.SSE, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := sse.Next(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for version %d: %v", n, err)
		}
		if ev.Event == "SSEConfig_payload" && testkit.AppConfigVersion(t, []byte(ev.Data)) == n {
			return
		}
	}
}
