package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCommandRunsConfigServers: -configs, -config-port and -config-api-key start the simulated
// configuration services, listed in the summary, and the control API publishes on them.
func TestCommandRunsConfigServers(t *testing.T) {
	_, lines := runSim(t, "-platforms", "1", "-connections", "0", "-platform-port", "0",
		"-configs", "2", "-config-port", "0", "-config-api-key", "k3y", "-control", "127.0.0.1:0")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "config1 config 127.0.0.1:") || !strings.HasPrefix(lines[2], "config2 config 127.0.0.1:") {
		t.Fatalf("summary %q", lines)
	}
	config2 := strings.Fields(lines[2])[2]
	control := strings.TrimPrefix(lines[3], "control ")

	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Post("http://"+control+"/config/publish/app/prod", "application/json", strings.NewReader(`{"on":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"topic":"app/prod","version":2}`+"\n" {
		t.Fatalf("publish: %d %q", resp.StatusCode, body)
	}
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+config2+"/config/app/prod", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != 401 {
		t.Fatalf("GET without the key: %d", code)
	}
	if code, body := get("Bearer k3y"); code != 200 || body != `{"topic":"app/prod","version":2,"server":"config2","data":{"on":true}}` {
		t.Fatalf("GET with the key: %d %q", code, body)
	}
}

func TestRunBadConfigFlags(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"-configs", "-1"}, &out, &errOut); code != 2 {
		t.Fatalf("exit code %d", code)
	}
}
