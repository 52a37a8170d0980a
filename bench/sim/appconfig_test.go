package sim_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

const (
	acGUID      = "guid-1"
	acAPIKey    = "ibm-cloud-api-key-1"
	acClientKey = "client-key-1"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func startIAM(t *testing.T, opts IAMOptions) *IAM {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := StartIAM("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// startAppConfig starts an instance with guid acGUID, the client key acClientKey and an IAM that
// knows acAPIKey, unless opts says otherwise.
func startAppConfig(t *testing.T, opts AppConfigOptions) *AppConfig {
	t.Helper()
	if opts.GUID == "" {
		opts.GUID = acGUID
	}
	if opts.IAM == nil {
		opts.IAM = startIAM(t, IAMOptions{APIKeys: []string{acAPIKey}})
	}
	if opts.ClientKeys == nil {
		opts.ClientKeys = []string{acClientKey}
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	a, err := StartAppConfig("appconfig1", "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// tokenAnswer is IAM's answer to a token request.
type tokenAnswer struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	Expiration   int64  `json:"expiration"`
	Scope        string `json:"scope"`
}

// requestToken POSTs a token request with the given form to s; it decodes a 200's body.
func requestToken(t *testing.T, s *IAM, form url.Values) (int, tokenAnswer, string) {
	t.Helper()
	resp, err := http.PostForm(s.URL()+"/identity/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ans tokenAnswer
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatalf("token answer %q: %s", b, err)
		}
	}
	return resp.StatusCode, ans, string(b)
}

func apikeyForm(key string) url.Values {
	return url.Values{"grant_type": {IAMGrantAPIKey}, "apikey": {key}, "response_type": {"cloud_iam"}}
}

// token gets a token for acAPIKey from s.
func token(t *testing.T, s *IAM) string {
	t.Helper()
	code, ans, body := requestToken(t, s, apikeyForm(acAPIKey))
	if code != 200 {
		t.Fatalf("token request: %d %s", code, body)
	}
	return ans.AccessToken
}

func TestIAMExchangesAKnownAPIKeyForAJWTThatExpiresByItsClock(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	var logged strings.Builder
	var logMu sync.Mutex
	s := startIAM(t, IAMOptions{APIKeys: []string{acAPIKey}, ExpiresIn: 90 * time.Second, Now: clock.Now,
		Logf: func(f string, a ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logged.WriteString(f)
		}})

	code, ans, body := requestToken(t, s, apikeyForm(acAPIKey))
	if code != 200 || ans.TokenType != "Bearer" || ans.RefreshToken != "not_supported" || ans.ExpiresIn != 90 ||
		ans.Expiration != 1_800_000_090 || ans.Scope == "" {
		t.Fatalf("token answer: %d %s", code, body)
	}
	parts := strings.Split(ans.AccessToken, ".")
	if len(parts) != 3 {
		t.Fatalf("access_token is not a JWT: %q", ans.AccessToken)
	}
	var header map[string]string
	var claims struct {
		IAMID string `json:"iam_id"`
		Sub   string `json:"sub"`
		Iat   int64  `json:"iat"`
		Exp   int64  `json:"exp"`
	}
	for i, v := range []any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(b, v) != nil {
			t.Fatalf("JWT part %d %q: %v", i, parts[i], err)
		}
	}
	if header["alg"] != "RS256" || header["typ"] != "JWT" || header["kid"] != "sim" {
		t.Fatalf("JWT header %v", header)
	}
	if claims.Iat != 1_800_000_000 || claims.Exp != 1_800_000_090 || claims.IAMID == "" || claims.Sub == "" {
		t.Fatalf("JWT claims %+v", claims)
	}
	if _, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil || parts[2] == "" {
		t.Fatalf("JWT signature %q", parts[2])
	}

	second := token(t, s)
	if second == ans.AccessToken || !s.Valid(ans.AccessToken) || !s.Valid(second) || s.Valid("x.y.z") || s.Valid("") {
		t.Fatal("each token is its own and valid; another is not")
	}
	clock.Add(89 * time.Second)
	if !s.Valid(ans.AccessToken) {
		t.Fatal("a token is valid until its exp")
	}
	clock.Add(time.Second)
	if s.Valid(ans.AccessToken) || s.Stats().Valid != 0 {
		t.Fatal("a token is not valid from its exp on")
	}

	// Refusals: 400 with an IAM-like JSON error, counted.
	for _, form := range []url.Values{
		apikeyForm("another-key"),
		{"grant_type": {"password"}, "apikey": {acAPIKey}},
		{"grant_type": {IAMGrantAPIKey}},
	} {
		code, _, body := requestToken(t, s, form)
		var e struct{ ErrorCode, ErrorMessage string }
		if code != 400 || json.Unmarshal([]byte(body), &e) != nil || !strings.HasPrefix(e.ErrorCode, "BXNIM") || e.ErrorMessage == "" {
			t.Fatalf("form %v: %d %s", form, code, body)
		}
	}
	resp, err := http.Post(s.URL()+"/identity/token", "application/json", strings.NewReader(`{"apikey":"`+acAPIKey+`"}`))
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("a JSON token request: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, body := get(t, http.DefaultClient, s.URL()+"/identity/token"); resp.StatusCode != 405 {
		t.Fatalf("GET /identity/token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, http.DefaultClient, s.URL()+"/identity/keys"); resp.StatusCode != 404 {
		t.Fatalf("GET /identity/keys: %d", resp.StatusCode)
	}
	if st := s.Stats(); st != (IAMStats{Addr: s.Addr, Up: true, Issued: 2, Refused: 4}) {
		t.Fatalf("Stats %+v", st)
	}

	// RevokeAll, Stop and Start; ResetCounters.
	third := token(t, s)
	s.RevokeAll()
	if s.Valid(third) {
		t.Fatal("a revoked token is valid")
	}
	fourth := token(t, s)
	s.Stop()
	if _, err := http.PostForm(s.URL()+"/identity/token", apikeyForm(acAPIKey)); err == nil || s.Up() {
		t.Fatal("a stopped IAM answers")
	}
	if !s.Valid(fourth) {
		t.Fatal("a token does not survive Stop")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	token(t, s)
	s.ResetCounters()
	if st := s.Stats(); st.Issued != 0 || st.Refused != 0 || st.Valid != 2 {
		t.Fatalf("Stats after ResetCounters %+v", st)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logged.String(), acAPIKey) || strings.Contains(logged.String(), fourth) {
		t.Fatal("a key or token was logged")
	}
}

// twoCollections is an export document with environments dev and prod, a feature and a property in
// collection c1, a feature in c2 and a property in no collection, and one segment.
const twoCollections = `{
 "environments": [
  {"name": "Dev", "environment_id": "dev", "features": [
    {"feature_id": "f1", "type": "BOOLEAN", "enabled": true, "enabled_value": true, "disabled_value": false, "segment_rules": [], "collections": [{"collection_id": "c1"}]},
    {"feature_id": "f2", "type": "BOOLEAN", "enabled": true, "enabled_value": true, "disabled_value": false, "segment_rules": [], "collections": [{"collection_id": "c2"}]}
   ], "properties": [
    {"property_id": "p1", "type": "NUMERIC", "value": 1, "segment_rules": [], "collections": [{"collection_id": "c2"}, {"collection_id": "c1"}]},
    {"property_id": "p0", "type": "STRING", "format": "TEXT", "value": "<&>", "segment_rules": []}
   ]},
  {"name": "Prod", "environment_id": "prod", "features": [], "properties": []}
 ],
 "collections": [{"collection_id": "c1", "name": "One"}, {"collection_id": "c2", "name": "Two"}],
 "segments": [{"segment_id": "s1", "name": "S", "rules": [{"attribute_name": "email", "operator": "endsWith", "values": ["@x"]}]}],
 "extra": {"kept": true}
}`

// ids returns the value of key in each object of items.
func ids(items []map[string]any, key string) []string {
	var out []string
	for _, it := range items {
		out = append(out, it[key].(string))
	}
	return out
}

func TestAppConfigRESTAnswersBothFormsOfTheTopicFilteredByCollection(t *testing.T) {
	a := startAppConfig(t, AppConfigOptions{})
	tok := token(t, a.IAMForTest())
	for _, topic := range []string{"c1/dev", "c2/dev", "c1/prod"} {
		if err := a.Set(topic, []byte(twoCollections)); err != nil {
			t.Fatalf("Set %s: %s", topic, err)
		}
	}
	base := a.URL() + "/apprapp/feature/v1/instances/" + acGUID
	cl := newClient(t, 5*time.Second)
	auth := []string{"Authorization", "Bearer " + tok}

	var doc struct {
		Environments []struct {
			ID         string           `json:"environment_id"`
			Features   []map[string]any `json:"features"`
			Properties []map[string]any `json:"properties"`
		} `json:"environments"`
		Collections []map[string]any `json:"collections"`
		Segments    []map[string]any `json:"segments"`
		Extra       map[string]bool  `json:"extra"`
	}
	resp, body := get(t, cl, base+"/config?action=sdkConfig&collection_id=c1&environment_id=dev", append(auth, "If-None-Match", `"x"`)...)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("ETag") != "" ||
		strings.Contains(body, "\n") || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("new form: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if len(doc.Environments) != 1 || doc.Environments[0].ID != "dev" ||
		strings.Join(ids(doc.Environments[0].Features, "feature_id"), ",") != "f1" ||
		strings.Join(ids(doc.Environments[0].Properties, "property_id"), ",") != "p1,p0" ||
		strings.Join(ids(doc.Collections, "collection_id"), ",") != "c1" || len(doc.Segments) != 1 || !doc.Extra["kept"] {
		t.Fatalf("new form, c1/dev: %s", body)
	}
	if ex, _ := a.Export("c1/dev"); string(ex) != body {
		t.Fatal("Export is not the new-form answer")
	}
	// The query's order does not matter; c2 gets its own items.
	_, body = get(t, cl, base+"/config?environment_id=dev&collection_id=c2&action=sdkConfig", auth...)
	if json.Unmarshal([]byte(body), &doc) != nil || strings.Join(ids(doc.Environments[0].Features, "feature_id"), ",") != "f2" ||
		strings.Join(ids(doc.Collections, "collection_id"), ",") != "c2" {
		t.Fatalf("new form, c2/dev: %s", body)
	}

	var flat struct {
		Features   []map[string]any `json:"features"`
		Properties []map[string]any `json:"properties"`
		Segments   []map[string]any `json:"segments"`
	}
	resp, body = get(t, cl, base+"/collections/c1/config?environment_id=dev", auth...)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &flat) != nil ||
		strings.Join(ids(flat.Features, "feature_id"), ",") != "f1" || strings.Join(ids(flat.Properties, "property_id"), ",") != "p1,p0" ||
		len(flat.Segments) != 1 || flat.Properties[1]["value"] != "<&>" {
		t.Fatalf("older form: %d %s", resp.StatusCode, body)
	}

	// 404: another guid, an unknown topic, another action, a bad path; the credential is checked first.
	for _, path := range []string{
		"/apprapp/feature/v1/instances/guid-2/config?action=sdkConfig&collection_id=c1&environment_id=dev",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=sdkConfig&collection_id=c2&environment_id=prod",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=sdkConfig&collection_id=c1",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?action=other&collection_id=c1&environment_id=dev",
		"/apprapp/feature/v1/instances/" + acGUID + "/config?collection_id=c1&environment_id=dev",
		"/apprapp/feature/v1/instances/" + acGUID + "/collections/c9/config?environment_id=dev",
		"/apprapp/feature/v1/instances/" + acGUID + "/collections/c1/config",
		"/apprapp/feature/v1/instances/" + acGUID + "/collections/c1/config/x?environment_id=dev",
		"/apprapp/feature/v1/instances/" + acGUID,
		"/apprapp/feature/v1/instances/" + acGUID + "/environments/dev/sse?collection_id=c1",
		"/apprapp/events/v1/instances/" + acGUID + "/usage/x",
		"/", "/config/c1/dev",
	} {
		if resp, body := get(t, cl, a.URL()+path, auth...); resp.StatusCode != 404 || body != string(ACBodyNotFound) {
			t.Errorf("GET %s: %d %s, want 404", path, resp.StatusCode, body)
		}
	}
	st := a.Stats()
	if c1 := st.Topics["c1/dev"]; c1.Fetches != 1 || c1.FetchesOld != 1 || c1.Version != 1 || c1.Changes != 1 {
		t.Fatalf("c1/dev stats %+v", c1)
	}
	if st.Unauthorized != 0 || st.ClientKeyOnTokenPath != 0 {
		t.Fatalf("Stats %+v", st)
	}

	// 401: no credential, a client key (raw or as a bearer), an unknown or revoked token.
	newForm := base + "/config?action=sdkConfig&collection_id=c1&environment_id=dev"
	for _, h := range [][]string{
		nil, {"Authorization", acClientKey}, {"Authorization", "Bearer " + acClientKey}, {"Authorization", "Bearer x.y.z"}, {"Authorization", tok},
	} {
		if resp, body := get(t, cl, newForm, h...); resp.StatusCode != 401 || body != string(ACBodyUnauthorized) ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET with %q: %d %s, want 401", h, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, cl, base+"/collections/c1/config?environment_id=dev", "Authorization", acClientKey); resp.StatusCode != 401 {
		t.Fatalf("older form with a client key: %d", resp.StatusCode)
	}
	a.IAMForTest().RevokeAll()
	if resp, _ := get(t, cl, newForm, auth...); resp.StatusCode != 401 {
		t.Fatalf("a revoked token: %d", resp.StatusCode)
	}
	st = a.Stats()
	if st.Unauthorized != 7 || st.ClientKeyOnTokenPath != 3 || st.Topics["c1/dev"].Fetches != 1 {
		t.Fatalf("Stats after 401s %+v", st)
	}
	a.ResetCounters()
	if st := a.Stats(); st.Unauthorized != 0 || st.ClientKeyOnTokenPath != 0 || st.Topics["c1/dev"] != (AppConfigTopicStats{Version: 1}) {
		t.Fatalf("Stats after ResetCounters %+v", st)
	}

	for _, tc := range []struct{ topic, doc string }{
		{"c1", twoCollections}, {"c1/dev/x", twoCollections}, {"c1/test", twoCollections}, {"c3/dev", twoCollections},
		{"c1/dev", `[]`}, {"c1/dev", `{"environments":[{"environment_id":"dev"}],"collections":[{"collection_id":"c1"}]}`},
		{"c1/dev", `{"environments":[{"environment_id":"dev","features":{}}],"collections":[{"collection_id":"c1"}],"segments":[]}`},
		{"c1/dev", `{"unterminated":`},
	} {
		if err := a.Set(tc.topic, []byte(tc.doc)); err == nil {
			t.Errorf("Set(%q, %.40q): want an error", tc.topic, tc.doc)
		}
	}
}

func TestAppConfigBumpGeneratesAValidConfigurationNumberedByTheTopicsVersion(t *testing.T) {
	a := startAppConfig(t, AppConfigOptions{})
	for want := 1; want <= 3; want++ {
		if n := a.Bump("inventory/dev"); n != want {
			t.Fatalf("Bump: %d, want %d", n, want)
		}
	}
	if n := a.Bump("payments/prod"); n != 1 {
		t.Fatalf("Bump of another topic: %d", n)
	}
	if err := a.Set("inventory/dev", AppConfigDocument("inventory", "dev", 40)); err != nil {
		t.Fatal(err)
	}
	if n := a.Bump("inventory/dev"); n != 5 {
		t.Fatalf("Bump after Set: %d, want 5", n)
	}
	ex, _ := a.Export("inventory/dev")
	var doc struct {
		Environments []struct {
			ID       string `json:"environment_id"`
			Features []struct {
				ID           string            `json:"feature_id"`
				Type         string            `json:"type"`
				Enabled      bool              `json:"enabled"`
				SegmentRules []json.RawMessage `json:"segment_rules"`
				Collections  []map[string]any  `json:"collections"`
			} `json:"features"`
			Properties []struct {
				ID           string            `json:"property_id"`
				Type         string            `json:"type"`
				Value        int               `json:"value"`
				SegmentRules []json.RawMessage `json:"segment_rules"`
				Collections  []map[string]any  `json:"collections"`
			} `json:"properties"`
		} `json:"environments"`
		Collections []map[string]any `json:"collections"`
		Segments    []struct {
			ID    string            `json:"segment_id"`
			Rules []json.RawMessage `json:"rules"`
		} `json:"segments"`
	}
	if err := json.Unmarshal(ex, &doc); err != nil {
		t.Fatal(err)
	}
	env := doc.Environments[0]
	if len(doc.Environments) != 1 || env.ID != "dev" || len(env.Properties) != 1 || len(env.Features) != 1 ||
		len(doc.Segments) != 1 || doc.Segments[0].ID != AppConfigSegment || len(doc.Segments[0].Rules) != 1 ||
		doc.Collections[0]["collection_id"] != "inventory" {
		t.Fatalf("generated export %s", ex)
	}
	p, f := env.Properties[0], env.Features[0]
	if p.ID != AppConfigProperty || p.Type != "NUMERIC" || p.Value != 5 || p.SegmentRules == nil || len(p.Collections) != 1 ||
		f.ID != AppConfigFeature || f.Type != "BOOLEAN" || !f.Enabled || len(f.SegmentRules) != 1 || len(f.Collections) != 1 {
		t.Fatalf("generated items %s", ex)
	}
	if st := a.Stats().Topics["inventory/dev"]; st.Version != 5 || st.Changes != 5 {
		t.Fatalf("stats %+v", st)
	}
	if d, ok := a.Document("inventory/dev"); !ok || !strings.Contains(string(d), `"value":5`) {
		t.Fatalf("Document %s", d)
	}
	if _, ok := a.Document("inventory/test"); ok {
		t.Fatal("Document of an unknown topic")
	}
}

// dialFeature dials the wsfeature session of topic c/e on a with the given headers.
func dialFeature(a *AppConfig, guid, c, e string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second}
	return d.Dial("ws://"+a.Addr+"/apprapp/wsfeature?instance_id="+guid+"&collection_id="+c+"&environment_id="+e, hdr)
}

// readFrame reads the next text frame within 5s.
func readFrame(t *testing.T, conn *websocket.Conn) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	mt, b, err := conn.ReadMessage()
	if err != nil || mt != websocket.TextMessage {
		t.Fatalf("reading a frame: type %d, %v", mt, err)
	}
	return string(b)
}

func TestAppConfigWSFeatureSendsHeartbeatsAndOneFramePerChange(t *testing.T) {
	a := startAppConfig(t, AppConfigOptions{Heartbeat: 20 * time.Millisecond})
	a.Bump("inventory/dev")
	a.Bump("inventory/prod")
	bearer := http.Header{"Authorization": {"Bearer " + token(t, a.IAMForTest())}}

	conn, resp, err := dialFeature(a, acGUID, "inventory", "dev", bearer)
	if err != nil {
		t.Fatalf("dial: %s", err)
	}
	defer conn.Close()
	if resp.Header.Get("X-Served-By") != "appconfig1" {
		t.Fatalf("101 headers %v", resp.Header)
	}
	other, _, err := dialFeature(a, acGUID, "inventory", "prod", bearer)
	if err != nil {
		t.Fatalf("dial prod: %s", err)
	}
	defer other.Close()
	for range 3 {
		if f := readFrame(t, conn); f != "test message" {
			t.Fatalf("before any change: %q", f)
		}
	}
	testkit.Eventually(t, "one session per topic", 5*time.Second, func() bool {
		st := a.Stats().Topics
		return st["inventory/dev"].WSSessions == 1 && st["inventory/dev"].WSSessionsTotal == 1 && st["inventory/prod"].WSSessions == 1
	})

	// Each change of the topic makes one change frame among the heartbeats; another topic's makes none.
	a.Bump("inventory/prod")
	for range 2 {
		a.Bump("inventory/dev")
		for {
			f := readFrame(t, conn)
			if f == "test message" {
				continue
			}
			if f != "collection_id:inventory;environment_id:dev;action:update" {
				t.Fatalf("change frame %q", f)
			}
			break
		}
	}
	testkit.Eventually(t, "2 change frames counted", 5*time.Second, func() bool { return a.Stats().Topics["inventory/dev"].WSChanges == 2 })

	// Before the upgrade: 401 without a token or with a client key (counted), 404 for another guid or
	// an unknown topic, 400 without an upgrade.
	for _, tc := range []struct {
		guid, c string
		hdr     http.Header
		want    int
	}{
		{acGUID, "inventory", nil, 401},
		{acGUID, "inventory", http.Header{"Authorization": {acClientKey}}, 401},
		{acGUID, "inventory", http.Header{"Authorization": {"Bearer " + acClientKey}}, 401},
		{"guid-2", "inventory", bearer, 404},
		{acGUID, "payments", bearer, 404},
	} {
		_, resp, err := dialFeature(a, tc.guid, tc.c, "dev", tc.hdr)
		if err == nil || resp == nil || resp.StatusCode != tc.want {
			t.Errorf("dial %s %s with %v: %v, want %d", tc.guid, tc.c, tc.hdr, resp, tc.want)
		}
	}
	resp, _ = get(t, newClient(t, 5*time.Second), a.URL()+"/apprapp/wsfeature?instance_id="+acGUID+"&collection_id=inventory&environment_id=dev",
		"Authorization", bearer.Get("Authorization"))
	if resp.StatusCode != 400 {
		t.Fatalf("wsfeature without an upgrade: %d", resp.StatusCode)
	}
	if st := a.Stats(); st.Unauthorized != 3 || st.ClientKeyOnTokenPath != 2 || st.Topics["inventory/dev"].WSSessionsTotal != 1 {
		t.Fatalf("Stats %+v", st)
	}

	conn.Close()
	testkit.Eventually(t, "the closed session to end", 5*time.Second, func() bool { return a.Stats().Topics["inventory/dev"].WSSessions == 0 })
}

// sseClient is an SSE subscription read by hand.
type sseClient struct {
	conn net.Conn
	resp *http.Response
	br   *bufio.Reader
}

// subscribe opens the SSE subscription of c/e on a with the Authorization value auth ("" for none)
// and reads the answer's head.
func subscribe(t *testing.T, a *AppConfig, guid, c, e, auth string) *sseClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", a.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET /apprapp/feature/v1/instances/" + guid + "/environments/" + e + "/sse/subscribe?collection_id=" + c +
		" HTTP/1.1\r\nHost: sim\r\nAccept: text/event-stream\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &sseClient{conn: conn, resp: resp, br: bufio.NewReader(resp.Body)}
}

// next reads the next event within 5s: its lines up to the blank line.
func (s *sseClient) next(t *testing.T) []string {
	t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var lines []string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an event: %s (after %q)", err, lines)
		}
		if line == "\n" {
			return lines
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
}

func TestAppConfigSSESendsRegistrationAtConnectAndThePayloadAtEachChange(t *testing.T) {
	a := startAppConfig(t, AppConfigOptions{})
	a.Bump("inventory/dev")
	a.Bump("inventory/prod")

	sub := subscribe(t, a, acGUID, "inventory", "dev", acClientKey)
	if sub.resp.StatusCode != 200 || sub.resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" ||
		sub.resp.Header.Get("Cache-Control") != "no-cache" || len(sub.resp.TransferEncoding) != 1 {
		t.Fatalf("SSE answer %d %v %v", sub.resp.StatusCode, sub.resp.Header, sub.resp.TransferEncoding)
	}
	ex1, _ := a.Export("inventory/dev")
	if ev := sub.next(t); len(ev) != 2 || ev[0] != "event: Registration" || ev[1] != "data: "+string(ex1) {
		t.Fatalf("first event %q", ev)
	}
	// A bearer client key works too; an extra lastEventId is ignored.
	sub2 := subscribe(t, a, acGUID, "inventory&lastEventId=abc%201", "dev", "Bearer "+acClientKey)
	if sub2.resp.StatusCode != 200 {
		t.Fatalf("bearer client key: %d", sub2.resp.StatusCode)
	}
	if ev := sub2.next(t); ev[0] != "event: Registration" {
		t.Fatalf("first event %q", ev)
	}

	a.Bump("inventory/prod")
	a.Bump("inventory/dev")
	ex2, _ := a.Export("inventory/dev")
	for _, s := range []*sseClient{sub, sub2} {
		if ev := s.next(t); len(ev) != 2 || ev[0] != "event: SSEConfig_payload" || ev[1] != "data: "+string(ex2) {
			t.Fatalf("change event %q", ev)
		}
	}
	testkit.Eventually(t, "4 events counted", 5*time.Second, func() bool { // counted just after each write
		st := a.Stats().Topics["inventory/dev"]
		return st.SSESubscribers == 2 && st.SSESubscribersTotal == 2 && st.SSEEvents == 4
	})

	// 401 (JSON) for no key, a wrong one, an IAM token; 404 for another guid or an unknown topic.
	tok := token(t, a.IAMForTest())
	for _, tc := range []struct {
		guid, c, auth string
		want          int
	}{
		{acGUID, "inventory", "", 401},
		{acGUID, "inventory", "wrong-key", 401},
		{acGUID, "inventory", "Bearer " + tok, 401},
		{"guid-2", "inventory", acClientKey, 404},
		{acGUID, "payments", acClientKey, 404},
	} {
		s := subscribe(t, a, tc.guid, tc.c, "dev", tc.auth)
		b, _ := io.ReadAll(s.resp.Body)
		if s.resp.StatusCode != tc.want || s.resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("subscribe %s %s with %q: %d %s, want %d", tc.guid, tc.c, tc.auth, s.resp.StatusCode, b, tc.want)
		}
	}
	if st := a.Stats(); st.Unauthorized != 3 || st.ClientKeyOnTokenPath != 0 {
		t.Fatalf("Stats %+v", st)
	}

	sub.conn.Close()
	testkit.Eventually(t, "the closed subscriber to go", 5*time.Second, func() bool { return a.Stats().Topics["inventory/dev"].SSESubscribers == 1 })
}

func TestAppConfigMeteringPOSTsAreAcceptedCountedAndTheirCredentialNoted(t *testing.T) {
	a := startAppConfig(t, AppConfigOptions{})
	tok := token(t, a.IAMForTest())
	usage := a.URL() + "/apprapp/events/v1/instances/" + acGUID + "/usage"
	analytics := a.URL() + "/apprapp/metrics/v1/instances/" + acGUID + "/analytics"
	post := func(url, auth, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const body = `{"collection_id":"c1","environment_id":"dev","usages":[{"feature_id":"f1","entity_id":"e","segment_id":null,"evaluation_time":"2026-01-02T03:04:05Z","count":3}]}`
	for _, tc := range []struct {
		url, auth, body string
		want            int
	}{
		{usage, acClientKey, body, 202},
		{usage, "Bearer " + tok, body, 202},
		{analytics, "Bearer " + acClientKey, `{"type":"metric_event","environment_id":"dev","usages":[]}`, 202},
		{usage, "", body, 401},
		{usage, "wrong", body, 401},
		{usage, acClientKey, "{not json", 400},
		{a.URL() + "/apprapp/events/v1/instances/guid-2/usage", acClientKey, body, 404},
	} {
		if got := post(tc.url, tc.auth, tc.body); got != tc.want {
			t.Errorf("POST %s with %q: %d, want %d", tc.url, tc.auth, got, tc.want)
		}
	}
	if resp, _ := get(t, http.DefaultClient, usage, "Authorization", acClientKey); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET usage: %d", resp.StatusCode)
	}
	st := a.Stats()
	if st.Usage != 2 || st.Analytics != 1 || st.Unauthorized != 2 || st.MeteringWithClientKey != 5 || st.ClientKeyOnTokenPath != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

func TestAppConfigStopDropsEverySessionAndStartServesTheSameTopicsAgain(t *testing.T) {
	a := startAppConfig(t, AppConfigOptions{Heartbeat: time.Hour})
	a.Bump("inventory/dev")
	bearer := http.Header{"Authorization": {"Bearer " + token(t, a.IAMForTest())}}
	conn, _, err := dialFeature(a, acGUID, "inventory", "dev", bearer)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sub := subscribe(t, a, acGUID, "inventory", "dev", acClientKey)
	sub.next(t)
	testkit.Eventually(t, "both sessions", 5*time.Second, func() bool {
		st := a.Stats().Topics["inventory/dev"]
		return st.WSSessions == 1 && st.SSESubscribers == 1
	})

	a.Stop()
	if a.Up() {
		t.Fatal("Up after Stop")
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := conn.ReadMessage(); err == nil {
		t.Fatal("the wsfeature session survived Stop")
	}
	_ = sub.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := sub.br.ReadString('\n'); err == nil {
		t.Fatal("the SSE subscription survived Stop")
	}
	if st := a.Stats().Topics["inventory/dev"]; st.WSSessions != 0 || st.SSESubscribers != 0 {
		t.Fatalf("sessions after Stop %+v", st)
	}
	if _, _, err := dialFeature(a, acGUID, "inventory", "dev", bearer); err == nil {
		t.Fatal("a stopped instance upgrades")
	}
	a.Bump("inventory/dev") // a stopped instance takes changes and serves them once started

	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	sub = subscribe(t, a, acGUID, "inventory", "dev", acClientKey)
	if ev := sub.next(t); !strings.Contains(ev[1], `"property_id":"version"`) || !strings.Contains(ev[1], `"value":2`) {
		t.Fatalf("Registration after Start: %q", ev)
	}
	a.Close()
	if err := a.Start(); err == nil {
		t.Fatal("Start after Close")
	}
}

func TestAppConfigNeedsAGUID(t *testing.T) {
	if _, err := StartAppConfig("x", "127.0.0.1:0", AppConfigOptions{}); err == nil {
		t.Fatal("no error without a GUID")
	}
}
