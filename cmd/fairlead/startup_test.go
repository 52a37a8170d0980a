package main

import (
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// A plain start reloads nothing: the config watch's catch-up (an edit made while fairlead started) finds
// the files as they were read and says so at DEBUG only, never "reload: config unchanged" (no one
// reloaded).
func TestAPlainStartLogsNoReload(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startProc(t, c, "[global]\nlog_level = \"debug\"\n")
	p.Eventually("the watch's catch-up to find the files as read at start", func() bool {
		return strings.Contains(p.Log.String(), "config watch: the files are as read at start")
	})
	if lines := linesWith(p.Log.String(), "reload"); len(lines) != 0 {
		t.Errorf("a plain start logged a reload:\n%s", strings.Join(lines, "\n"))
	}
}

// The startup line names every listener: the plain and the TLS front end and the admin.
func TestTheStartupLineNamesTheTLSListener(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	tp, _ := startTLSProc(t, c)
	want := "listening on " + tp.Addr + " (HTTP) and " + tp.tlsAddr + " (HTTPS), admin on " + tp.Admin
	tp.Eventually("the startup line", func() bool { return strings.Contains(tp.Log.String(), "listening on") })
	if lines := linesWith(tp.Log.String(), "listening on"); len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("startup line %q; want one naming %q", lines, want)
	}
}

func TestStartupLine(t *testing.T) {
	for _, c := range []struct{ addr, tls, admin, want string }{
		{"127.0.0.1:8080", "", "127.0.0.1:8404", "fairlead v listening on 127.0.0.1:8080 (HTTP), admin on 127.0.0.1:8404"},
		{"", "127.0.0.1:8443", "", "fairlead v listening on 127.0.0.1:8443 (HTTPS), no admin listener"},
	} {
		if got := startupLine("v", c.addr, c.tls, c.admin); got != c.want {
			t.Errorf("startupLine(%q, %q, %q) = %q, want %q", c.addr, c.tls, c.admin, got, c.want)
		}
	}
}
