package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// TestCommandRunsAppConfigInstancesAndTheirIAM: -appconfigs, -appconfig-port, -appconfig-guids,
// -appconfig-topics, -iam-port and -iam-api-key start the simulated App Configuration instances on
// consecutive ports and their IAM, listed in the summary; the instances hold the topics, take the
// IAM's tokens for the key, and the control API publishes on them and takes them down and up.
func TestCommandRunsAppConfigInstancesAndTheirIAM(t *testing.T) {
	base := freePorts(t, 3)
	_, lines := runSim(t, "-platforms", "1", "-connections", "0", "-platform-port", "0",
		"-appconfigs", "2", "-appconfig-port", strconv.Itoa(base+1), "-iam-port", strconv.Itoa(base),
		"-appconfig-guids", "g-one", "-appconfig-topics", "shop/dev, shop/prod", "-iam-api-key", "k3y",
		"-control", "127.0.0.1:0")
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	want := []string{"iam iam " + addr(base), "appconfig1 appconfiguration " + addr(base+1) + " guid=g-one",
		"appconfig2 appconfiguration " + addr(base+2) + " guid=demo-eu-gb"}
	if len(lines) != 5 || strings.Join(lines[1:4], "\n") != strings.Join(want, "\n") {
		t.Fatalf("summary %q, want lines 2-4 %q", lines, want)
	}
	control := "http://" + strings.TrimPrefix(lines[4], "control ")
	cl := &http.Client{Timeout: 5 * time.Second}

	token := func(key string) (int, string) {
		resp, err := cl.PostForm("http://"+addr(base)+"/identity/token",
			url.Values{"grant_type": {sim.IAMGrantAPIKey}, "apikey": {key}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans struct {
			AccessToken string `json:"access_token"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		return resp.StatusCode, ans.AccessToken
	}
	if code, _ := token(sim.DefaultIAMAPIKey); code != 400 {
		t.Fatalf("the IAM takes the default key although -iam-api-key is given: %d", code)
	}
	code, tok := token("k3y")
	if code != 200 || tok == "" {
		t.Fatalf("token for -iam-api-key: %d", code)
	}
	fetch := func(port int, guid, c, e string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr(port)+"/apprapp/feature/v1/instances/"+guid+
			"/config?action=sdkConfig&collection_id="+c+"&environment_id="+e, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := fetch(base+1, "g-one", "shop", "prod"); code != 200 || !strings.Contains(body, `"value":1`) {
		t.Fatalf("appconfig1 shop/prod: %d %s", code, body)
	}
	if code, _ := fetch(base+2, "demo-eu-gb", "shop", "dev"); code != 200 {
		t.Fatalf("appconfig2 shop/dev: %d", code)
	}
	if code, _ := fetch(base+2, "demo-eu-gb", "inventory", "dev"); code != 404 {
		t.Fatalf("a topic not in -appconfig-topics: %d, want 404", code)
	}

	post := func(path string) (int, string) {
		resp, err := cl.Post(control+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/appconfig/publish/shop/dev"); code != 200 ||
		body != `{"topic":"shop/dev","versions":{"appconfig1":2,"appconfig2":2}}`+"\n" {
		t.Fatalf("publish: %d %q", code, body)
	}
	if code, body := fetch(base+1, "g-one", "shop", "dev"); code != 200 || !strings.Contains(body, `"value":2`) {
		t.Fatalf("after the publish: %d %s", code, body)
	}
	if code, _ := post("/appconfig/appconfig1/down"); code != 200 {
		t.Fatalf("down: %d", code)
	}
	if code, _ := fetch(base+1, "g-one", "shop", "dev"); code != 0 {
		t.Fatalf("a stopped instance answers %d", code)
	}
	if code, _ := post("/appconfig/appconfig1/up"); code != 200 {
		t.Fatalf("up: %d", code)
	}
	if code, _ := fetch(base+1, "g-one", "shop", "dev"); code != 200 {
		t.Fatalf("after up: %d", code)
	}
}

func TestRunBadAppConfigFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-appconfigs", "-1"},
		{"-appconfigs", "1", "-appconfig-guids", "a,b"},
		{"-appconfigs", "1", "-iam-api-key", ""},
	} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit code %d, want 2 (%s)", args, code, errOut.String())
		}
	}
	// A bad topic is the cluster's error: exit 1, naming it.
	var out, errOut strings.Builder
	if code := run([]string{"-platform-port", "0", "-connections", "0", "-control", "", "-appconfigs", "1",
		"-appconfig-port", "0", "-iam-port", "0", "-appconfig-topics", "nocollection"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), `"nocollection"`) {
		t.Errorf("a bad topic: exit %d, %q", code, errOut.String())
	}
}
