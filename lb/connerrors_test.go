package lb

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
)

// Over max_conns fasthttp refuses connections with 503: they are counted as limit, and a WARN line says
// so.
func TestConnectionsOverMaxConnsAreCountedAsLimitAndWarned(t *testing.T) {
	c := startCluster(t, 2, 0)
	l, logs := startLB(t, hostileFiles(platformConfig(c, "", ""), map[string]string{"30-limit.toml": "[frontend]\nmax_conns = 2\n"}))
	req := "GET " + hostilePath + " HTTP/1.1\r\nHost: a\r\n\r\n"
	for i := range 2 {
		held := frontendtest.Dial(t, l.Addr())
		held.WriteRaw(req) //nolint:errcheck
		if r := held.Answer(frontendtest.AnswerWait); r.Status != 200 {
			t.Fatalf("keep-alive connection %d: got %s, want 200", i, r)
		}
	}
	extra := frontendtest.Dial(t, l.Addr())
	extra.WriteRaw(req) //nolint:errcheck
	if r := extra.Answer(frontendtest.AnswerWait); r.Status != 503 && !(r.Status == 0 && r.Closed) {
		t.Fatalf("the third connection: got %s, want 503 or a close", r)
	}
	testkit.Eventually(t, "the refused connection to be counted and logged", 3*time.Second, func() bool {
		return hostileMetric(t, l, `fairlead_frontend_connection_errors_total{kind="limit"}`) >= 1 &&
			strings.Contains(logs.all(), `level=WARN msg="frontend: connection limit reached: new connections are refused" kind=limit detail="2 connections open"`)
	})
}

// hostileMetric is the value of the metric line named name on the admin /metrics (-1 if absent).
func hostileMetric(t testing.TB, l *LB, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(hostileAdminGet(t, l, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f) //nolint:errcheck
			return f
		}
	}
	return -1
}
