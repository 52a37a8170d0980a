package sim_test

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/fairlead/fairlead/bench/sim"
)

// call sends method to the control API and returns status and body.
func call(t *testing.T, cl *http.Client, c *Cluster, method, path string) (int, string) {
	t.Helper()
	return callBody(t, cl, c, method, path, "")
}

func status(t *testing.T, cl *http.Client, c *Cluster) Status {
	t.Helper()
	code, body := call(t, cl, c, http.MethodGet, "/status")
	if code != 200 {
		t.Fatalf("/status: %d %s", code, body)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %s in %s", err, body)
	}
	return st
}

func TestControlAPI(t *testing.T) {
	c := startCluster(t, Options{ControlAddr: "127.0.0.1:0", ConnectionHealthAddrs: []string{"127.0.0.1:0"}})
	if c.ControlAddr == "" || strings.HasSuffix(c.ControlAddr, ":0") {
		t.Fatalf("ControlAddr = %q", c.ControlAddr)
	}
	cl := newClient(t, 5*time.Second)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	cx1 := c.Connections[0]

	// The raw JSON uses the documented field names.
	_, raw := call(t, cl, c, http.MethodGet, "/status")
	for _, field := range []string{`"platforms"`, `"connections"`, `"name":"platform1"`, `"addr":"` + p1.Addr + `"`,
		`"state":"leader"`, `"requests":0`, `"health_addr":"` + cx1.HealthAddr + `"`, `"healthy":true`,
		`"alive":true`, `"open_tunnels":0`, `"upgrades":0`} {
		if !strings.Contains(raw, field) {
			t.Fatalf("/status lacks %s: %s", field, raw)
		}
	}
	get(t, cl, "http://"+p2.Addr+"/x")
	st := status(t, cl, c)
	if len(st.Platforms) != 2 || len(st.Connections) != 2 || st.Platforms[1].State != "backup" || st.Platforms[1].Requests != 1 {
		t.Fatalf("status %+v", st)
	}

	// Platform states, with POST and GET.
	code, body := call(t, cl, c, http.MethodPost, "/platform/platform2/leader")
	if code != 200 || p2.State() != Leader || !strings.Contains(body, `"state":"leader"`) || strings.Count(body, "\n") != 1 {
		t.Fatalf("set leader: %d %q, state %s", code, body, p2.State())
	}
	if code, _ := call(t, cl, c, http.MethodGet, "/platform/platform1/standby"); code != 200 || p1.State() != Standby {
		t.Fatalf("set standby: %d, state %s", code, p1.State())
	}
	if c.Leader() != p2 {
		t.Fatal("platform2 should lead")
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/platform/platform1/dead"); code != 200 || p1.State() != Dead {
		t.Fatalf("set dead: %d", code)
	}
	if st := status(t, cl, c); st.Platforms[0].State != "dead" {
		t.Fatalf("status after dead: %+v", st.Platforms[0])
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/platform/platform1/backup"); code != 200 || p1.State() != Backup {
		t.Fatalf("revive: %d", code)
	}
	if resp, _ := get(t, cl, leaderCheckURL(p1), "Authorization", testAuth); resp.StatusCode != 503 {
		t.Fatalf("revived platform1 LeaderCheck: %d", resp.StatusCode)
	}
	for path, want := range map[string]int{
		"/platform/platform9/leader":         404,
		"/platform/platform1/asleep":         400,
		"/platform/platform9/leadercheck/1":  404,
		"/platform/platform1/leadercheck/x":  400,
		"/platform/platform1/leadercheck/42": 400,
		"/connection/cx9/up":                 404,
		"/connection/cx1/explode":            400,
		"/nowhere":                           404,
	} {
		if code, body := call(t, cl, c, http.MethodPost, path); code != want {
			t.Fatalf("POST %s: %d %q, want %d", path, code, body, want)
		}
	}
	if code, _ := call(t, cl, c, http.MethodPut, "/platform/platform1/leader"); code != 405 {
		t.Fatalf("PUT: %d", code)
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/status"); code != 405 {
		t.Fatalf("POST /status: %d", code)
	}

	// Forced LeaderCheck status.
	if code, body := call(t, cl, c, http.MethodPost, "/platform/platform2/leadercheck/503"); code != 200 || !strings.Contains(body, `"leadercheck_status":503`) {
		t.Fatalf("force: %d %s", code, body)
	}
	if resp, _ := get(t, cl, leaderCheckURL(p2), "Authorization", testAuth); resp.StatusCode != 503 {
		t.Fatalf("forced LeaderCheck: %d", resp.StatusCode)
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/platform/platform2/leadercheck/0"); code != 200 || p2.LeaderCheckStatus() != 0 {
		t.Fatalf("clear: %d", code)
	}
	if resp, _ := get(t, cl, leaderCheckURL(p2), "Authorization", testAuth); resp.StatusCode != 200 {
		t.Fatalf("cleared LeaderCheck: %d", resp.StatusCode)
	}

	// Connection servers.
	if code, body := call(t, cl, c, http.MethodPost, "/connection/cx1/down"); code != 200 || cx1.Healthy() || !strings.Contains(body, `"healthy":false`) {
		t.Fatalf("down: %d %s", code, body)
	}
	if resp, _ := get(t, cl, "http://"+cx1.HealthAddr+"/health"); resp.StatusCode != 503 {
		t.Fatalf("health after down: %d", resp.StatusCode)
	}
	if code, _ := call(t, cl, c, http.MethodGet, "/connection/cx1/up"); code != 200 || !cx1.Healthy() {
		t.Fatalf("up: %d", code)
	}
	if code, body := call(t, cl, c, http.MethodPost, "/connection/cx1/kill"); code != 200 || cx1.Alive() || !strings.Contains(body, `"alive":false`) {
		t.Fatalf("kill: %d %s", code, body)
	}
	if st := status(t, cl, c); st.Connections[0].Alive || !st.Connections[1].Alive {
		t.Fatalf("status after kill: %+v", st.Connections)
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/connection/cx1/restart"); code != 200 || !cx1.Alive() {
		t.Fatalf("restart: %d", code)
	}
	if resp, _ := get(t, cl, "http://"+cx1.HealthAddr+"/health"); resp.StatusCode != 200 {
		t.Fatalf("health after restart: %d", resp.StatusCode)
	}

	addr := c.ControlAddr
	c.Close()
	if _, err := cl.Get("http://" + addr + "/status"); err == nil {
		t.Fatal("control API still answers after Close")
	}
}

func TestControlAddrInUse(t *testing.T) {
	c := startCluster(t, Options{ControlAddr: "127.0.0.1:0"})
	if _, err := Start(Options{ControlAddr: c.ControlAddr}); err == nil {
		t.Fatal("want error for a busy control address")
	}
}

func TestWriteSummary(t *testing.T) {
	c := startCluster(t, Options{ControlAddr: "127.0.0.1:0"})
	var sb strings.Builder
	c.WriteSummary(&sb)
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "platform1 platform "+c.Platforms[0].Addr) ||
		!strings.HasPrefix(lines[2], "cx1 connection "+c.Connections[0].Addr) || lines[4] != "control "+c.ControlAddr {
		t.Fatalf("summary:\n%s", sb.String())
	}
}

// restConfig fetches topic c/e from a with a token of iam (the new REST form) and returns the status and
// the value of the property AppConfigProperty (-1 when absent).
func restConfig(t *testing.T, cl *http.Client, a *AppConfig, iam *IAM, c, e string) (int, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.URL()+"/apprapp/feature/v1/instances/"+a.GUID+
		"/config?action=sdkConfig&collection_id="+c+"&environment_id="+e, nil)
	code, ans, body := requestToken(t, iam, apikeyForm(DefaultIAMAPIKey))
	if code != 200 {
		t.Fatalf("token for the default API key: %d %s", code, body)
	}
	req.Header.Set("Authorization", "Bearer "+ans.AccessToken)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Environments []struct {
			Properties []struct {
				ID    string `json:"property_id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"environments"`
	}
	if resp.StatusCode != 200 {
		return resp.StatusCode, -1
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, env := range doc.Environments {
		for _, p := range env.Properties {
			if v, ok := p.Value.(float64); ok && p.ID == AppConfigProperty {
				return 200, int(v)
			}
		}
	}
	return 200, -1
}

func TestAClusterRunsAppConfigInstancesWithTheirIAMAndTheControlAPIDrivesThem(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1, NoConnections: true, ControlAddr: "127.0.0.1:0",
		AppConfigs: 2, AppConfigTopics: []string{"inventory/dev", "inventory/prod"}})
	if len(c.AppConfigs) != 2 || c.IAM == nil {
		t.Fatalf("appconfigs %d, iam %v", len(c.AppConfigs), c.IAM)
	}
	a1, a2 := c.AppConfig("appconfig1"), c.AppConfig("appconfig2")
	if a1 == nil || a2 == nil || a1.GUID != "demo-us-south" || a2.GUID != "demo-eu-gb" {
		t.Fatalf("instances %v %v", a1, a2)
	}
	cl := newClient(t, 5*time.Second)

	// The topics exist at version 1 on both; a token of the cluster's IAM for DefaultIAMAPIKey reads them.
	for _, a := range c.AppConfigs {
		if code, v := restConfig(t, cl, a, c.IAM, "inventory", "prod"); code != 200 || v != 1 {
			t.Fatalf("%s: inventory/prod %d, version %d", a.Name, code, v)
		}
	}
	_, raw := call(t, cl, c, http.MethodGet, "/status")
	for _, field := range []string{`"appconfigs":[`, `"name":"appconfig2"`, `"guid":"demo-eu-gb"`, `"up":true`,
		`"inventory/dev":{"version":1`, `"iam":{"addr":"` + c.IAM.Addr + `"`, `"issued":2`} {
		if !strings.Contains(raw, field) {
			t.Fatalf("/status lacks %s: %s", field, raw)
		}
	}

	// A publish on every instance bumps the topic on each; one on an instance only there; a new topic
	// appears.
	if code, body := call(t, cl, c, http.MethodPost, "/appconfig/publish/inventory/dev"); code != 200 ||
		body != `{"topic":"inventory/dev","versions":{"appconfig1":2,"appconfig2":2}}`+"\n" {
		t.Fatalf("publish on every instance: %d %q", code, body)
	}
	if code, body := call(t, cl, c, http.MethodGet, "/appconfig/appconfig2/publish/inventory/dev"); code != 200 ||
		body != `{"topic":"inventory/dev","versions":{"appconfig2":3}}`+"\n" {
		t.Fatalf("publish on appconfig2: %d %q", code, body)
	}
	if _, v := restConfig(t, cl, a1, c.IAM, "inventory", "dev"); v != 2 {
		t.Fatalf("appconfig1 inventory/dev version %d, want 2", v)
	}
	if _, v := restConfig(t, cl, a2, c.IAM, "inventory", "dev"); v != 3 {
		t.Fatalf("appconfig2 inventory/dev version %d, want 3", v)
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/appconfig/publish/payments/dev"); code != 200 {
		t.Fatalf("publish of a new topic: %d", code)
	}
	if code, v := restConfig(t, cl, a2, c.IAM, "payments", "dev"); code != 200 || v != 1 {
		t.Fatalf("payments/dev: %d version %d", code, v)
	}
	// With a body, the document itself (Set).
	doc := string(AppConfigDocument("inventory", "prod", 42))
	if code, body := callBody(t, cl, c, http.MethodPost, "/appconfig/publish/inventory/prod", doc); code != 200 ||
		body != `{"topic":"inventory/prod","versions":{"appconfig1":2,"appconfig2":2}}`+"\n" {
		t.Fatalf("publish of a document: %d %q", code, body)
	}
	if _, v := restConfig(t, cl, a1, c.IAM, "inventory", "prod"); v != 42 {
		t.Fatalf("inventory/prod version %d, want the document's 42", v)
	}

	// Down and up.
	if code, body := call(t, cl, c, http.MethodPost, "/appconfig/appconfig1/down"); code != 200 || a1.Up() ||
		!strings.Contains(body, `"up":false`) {
		t.Fatalf("down: %d %q", code, body)
	}
	if _, err := cl.Get(a1.URL() + "/"); err == nil {
		t.Fatal("a stopped instance answers")
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/appconfig/appconfig1/up"); code != 200 || !a1.Up() {
		t.Fatalf("up: %d", code)
	}
	if code, v := restConfig(t, cl, a1, c.IAM, "inventory", "dev"); code != 200 || v != 2 {
		t.Fatalf("after up: %d version %d", code, v)
	}
	if code, body := call(t, cl, c, http.MethodPost, "/iam/down"); code != 200 || c.IAM.Up() || !strings.Contains(body, `"up":false`) {
		t.Fatalf("iam down: %d %q", code, body)
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/iam/up"); code != 200 || !c.IAM.Up() {
		t.Fatalf("iam up: %d", code)
	}
	if code, body := call(t, cl, c, http.MethodPost, "/appconfig/reset"); code != 200 || !strings.Contains(body, `"fetches":0`) ||
		strings.Contains(body, `"fetches":1`) || c.IAM.Stats().Issued != 0 {
		t.Fatalf("reset: %d %q, iam %+v", code, body, c.IAM.Stats())
	}

	// Bad requests.
	for _, tc := range []struct {
		method, path, body string
		code               int
	}{
		{http.MethodPost, "/appconfig/appconfig9/down", "", 404},
		{http.MethodPost, "/appconfig/appconfig9/publish/inventory/dev", "", 404},
		{http.MethodPost, "/appconfig/appconfig1/restart", "", 400},
		{http.MethodPost, "/appconfig/publish/inv%20entory/dev", "", 400},
		{http.MethodPost, "/appconfig/publish/inventory/dev", `{"environments":[]}`, 400},
		{http.MethodDelete, "/appconfig/publish/inventory/dev", "", 405},
		{http.MethodPost, "/iam/restart", "", 400},
	} {
		if code, body := callBody(t, cl, c, tc.method, tc.path, tc.body); code != tc.code {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, code, body, tc.code)
		}
	}
	if _, v := restConfig(t, cl, a1, c.IAM, "inventory", "dev"); v != 2 {
		t.Fatalf("a refused publish changed inventory/dev: version %d", v)
	}

	// Without instances: no IAM, and the endpoints answer 404.
	c0 := startCluster(t, Options{Platforms: 1, NoConnections: true, ControlAddr: "127.0.0.1:0"})
	if c0.IAM != nil || len(c0.AppConfigs) != 0 {
		t.Fatal("App Configuration instances by default")
	}
	for _, path := range []string{"/appconfig/publish/inventory/dev", "/iam/down"} {
		if code, _ := call(t, cl, c0, http.MethodPost, path); code != 404 {
			t.Errorf("%s without instances: %d, want 404", path, code)
		}
	}
	if _, raw := call(t, cl, c0, http.MethodGet, "/status"); !strings.Contains(raw, `"appconfigs":[]`) || strings.Contains(raw, `"iam"`) {
		t.Errorf("/status without instances: %s", raw)
	}
}

func TestAppConfigOptionsAreCheckedAndGiveNamesGUIDsAndAddresses(t *testing.T) {
	for name, opts := range map[string]Options{
		"a negative count":   {AppConfigs: -1},
		"too many GUIDs":     {AppConfigs: 1, AppConfigGUIDs: []string{"a", "b"}},
		"too many addrs":     {AppConfigs: 1, AppConfigAddrs: []string{"", ""}},
		"a bad topic":        {AppConfigs: 1, AppConfigTopics: []string{"nocollection"}},
		"two of one GUID":    {AppConfigs: 2, AppConfigGUIDs: []string{"g", "g"}},
		"a busy IAM address": {AppConfigs: 1, IAMAddr: busyAddr(t)},
	} {
		opts.Platforms, opts.NoConnections = 1, true
		if c, err := Start(opts); err == nil {
			c.Close()
			t.Errorf("%s: want an error", name)
		}
	}
	// Addresses alone give the count; GUIDs by flag, then the defaults, then demo-instance<i>; the
	// summary lists the IAM, then the instances.
	c := startCluster(t, Options{Platforms: 1, NoConnections: true, IAMAPIKey: "k",
		AppConfigAddrs: []string{"", "", ""}, AppConfigGUIDs: []string{"mine"}})
	if len(c.AppConfigs) != 3 || c.AppConfigs[0].GUID != "mine" || c.AppConfigs[1].GUID != "demo-eu-gb" ||
		c.AppConfigs[2].GUID != "demo-instance3" || c.AppConfigs[2].Name != "appconfig3" {
		t.Fatalf("instances %+v", c.AppConfigs)
	}
	if code, _, _ := requestToken(t, c.IAM, apikeyForm("k")); code != 200 {
		t.Fatalf("the IAM refuses IAMAPIKey: %d", code)
	}
	if code, _, _ := requestToken(t, c.IAM, apikeyForm(DefaultIAMAPIKey)); code != 400 {
		t.Fatalf("the IAM takes the default key besides IAMAPIKey: %d", code)
	}
	var sb strings.Builder
	c.WriteSummary(&sb)
	want := "platform1 platform " + c.Platforms[0].Addr + " state=leader\n" +
		"iam iam " + c.IAM.Addr + "\n" +
		"appconfig1 appconfiguration " + c.AppConfigs[0].Addr + " guid=mine\n" +
		"appconfig2 appconfiguration " + c.AppConfigs[1].Addr + " guid=demo-eu-gb\n" +
		"appconfig3 appconfiguration " + c.AppConfigs[2].Addr + " guid=demo-instance3\n"
	if sb.String() != want {
		t.Fatalf("summary:\n%s\nwant:\n%s", sb.String(), want)
	}
	c.Close()
	if err := c.AppConfigs[0].Start(); err == nil {
		t.Error("an instance starts again after Close")
	}
	if err := c.IAM.Start(); err == nil {
		t.Error("the IAM starts again after Close")
	}
}

// busyAddr returns the address of a listener open until the test ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}
