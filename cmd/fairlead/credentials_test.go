package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// TestLeaderCheckCredentialsAreReadFromTheirFileAndRotatedByAReload: check.credentials_file is read at
// start (the simulated platforms elect a leader only for the right credentials: the wrong ones get 401
// to LeaderCheck), a SIGHUP after rewriting only that file applies the new credentials, and so does a
// rewrite alone (the file is watched). The credentials appear neither in the log nor in /api/status.
func TestLeaderCheckCredentialsAreReadFromTheirFileAndRotatedByAReload(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2}) // expects sim.DefaultCredentials
	wrong := base64.StdEncoding.EncodeToString([]byte("admin:not-the-password"))
	secret := filepath.Join(t.TempDir(), "leadercheck-credentials") // outside the config directory
	write := func(value string) {
		t.Helper()
		if err := os.WriteFile(secret, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(sim.DefaultCredentials)

	addr, admin := testkit.Addr(t), testkit.Addr(t)
	var conf testkit.Config
	conf.Table("frontend").Set("listen", addr)
	conf.Table("admin").Set("listen", admin)
	conf.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c)[:2]).Set("queue_timeout", "300ms")
	conf.Table("pools.platform.check").Set("credentials_file", secret).
		Set("interval", "200ms").Set("fast_interval", "100ms").Set("timeout", "300ms")
	conf.Array("routes").Set("pool", "platform")
	p := &proc{testkit.RunFairlead(t, testkit.WriteFiles(t, map[string]string{"fairlead.toml": conf.String()}), addr, admin)}
	p.WaitServing()

	get := func() int {
		resp, err := http.Get("http://" + p.Addr + "/")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	p.Eventually("a leader elected with the credentials read from the file", func() bool { return get() == 200 })

	// Rotated to credentials the platforms refuse, then SIGHUP: no leader is left, requests get 503.
	write(wrong)
	p.Cmd.Process.Signal(syscall.SIGHUP) //nolint:errcheck
	p.Eventually("the leader to be lost once the platforms answer 401", func() bool { return get() == 503 })

	// Rotated back, with no signal: the watch reloads. The watch follows the running config's secret
	// files again after each reload applied, a moment after it: the write is repeated (well apart from
	// the 300 ms debounce) until it applies.
	var wrote time.Time
	p.Eventually("a leader elected again after the file alone was rewritten", func() bool {
		if time.Since(wrote) > time.Second {
			write(sim.DefaultCredentials)
			wrote = time.Now()
		}
		return get() == 200
	})

	resp, err := http.Get("http://" + p.Admin + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	status, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range []string{sim.DefaultCredentials, wrong, "admin:admin", "not-the-password"} {
		if strings.Contains(p.Log.String(), s) {
			t.Errorf("the log shows the credentials (%q)", s)
		}
		if strings.Contains(string(status), s) {
			t.Errorf("/api/status shows the credentials (%q)", s)
		}
	}
}
