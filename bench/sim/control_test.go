package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
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
