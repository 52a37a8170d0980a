package main

// /metrics as Prometheus reads it (issue #24): promtool, Prometheus's own linter, accepts the page of a
// fairlead that has served requests, tunnels and a relay, and every family is one group headed by its
// # HELP and # TYPE.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

func TestPromtoolAcceptsTheMetricsOfAFairleadThatServedRequestsTunnelsAndARelay(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed: apt-get install prometheus (Debian; .ci/run installs it)")
	}
	t.Parallel()
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2, ConfigServers: 1,
		ConfigAPIKey: testkit.RelayUpstreamKey})
	addr, admin := testkit.Addr(t), testkit.Addr(t)
	var rr testkit.Config
	rr.Table("pools.rr").Set("balance", "roundrobin").Set("servers", testkit.ConnectionAddrs(c)).
		Set("multipart_header", "X-Upload-Id")
	rr.Array("routes").Set("paths", []string{"/rr"}).Set("pool", "rr")
	// A pool whose only server does not listen: its requests wait for it, then get 503.
	rr.Table("pools.dead").Set("servers", []string{testkit.Addr(t)}).Set("queue_timeout", "100ms")
	rr.Array("routes").Set("paths", []string{"/dead"}).Set("pool", "dead")
	cdir := testkit.WriteFiles(t, map[string]string{
		"00-cx.toml":    cxPool(c),
		"05-rr.toml":    rr.String(),
		"10-base.toml":  baseConfig(addr, admin, c),
		"30-relay.toml": testkit.Relay{Listen: addr, Admin: admin, Servers: []string{c.Config("config1").Addr}}.Config(t),
	})
	p := testkit.RunFairlead(t, cdir, addr, admin)
	p.WaitServing()

	get := func(path string, h http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
	}
	for range 20 {
		get("/Thingworx/Things", nil)
		get("/rr", nil)
	}
	for range 3 {
		get("/dead", nil)
	}
	get("/relay/inventory/dev", http.Header{testkit.RelayClientHeader: {testkit.RelayClientKey}})
	get("/relay/inventory/dev", nil) // refused: no key
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	for i := range 3 {
		ws, _, err := d.Dial("ws://"+addr+"/Thingworx/WS", http.Header{"X-Asset-Id": {fmt.Sprint("asset-", i)}})
		if err != nil {
			t.Fatalf("tunnel: %v", err)
		}
		if i > 0 {
			ws.Close() // one stays open
		} else {
			defer ws.Close()
		}
	}
	p.Eventually("the tunnels counted", func() bool { return p.MetricInt("fairlead_tunnels_opened_total") >= 3 })

	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fairlead_request_duration_seconds_bucket{", "fairlead_queue_wait_seconds_bucket{",
		"fairlead_check_duration_seconds_bucket{", "fairlead_relay_requests_total{", "fairlead_server_tunnels{",
		"fairlead_leader_changes_total{", "fairlead_pool_sticky_entries{", "fairlead_server_writable{"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("/metrics has no %s series: the test does not exercise what it should", want)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(page)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	checkFamiliesGrouped(t, string(page))
}

// checkFamiliesGrouped checks what promtool lets pass: each family's series form one group, right
// after its # HELP and # TYPE lines (histograms' _bucket, _sum and _count series belong to it).
func checkFamiliesGrouped(t *testing.T, page string) {
	t.Helper()
	typ := map[string]string{} // family → type, from # TYPE
	seen := map[string]bool{}  // families whose group has ended
	cur := ""
	for i, line := range strings.Split(strings.TrimSuffix(page, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			if _, dup := typ[name]; dup {
				t.Errorf("line %d: second # TYPE of %s", i+1, name)
			}
			typ[name] = kind
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		fam := name
		if _, ok := typ[fam]; !ok {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := strings.CutSuffix(name, suf); ok && (typ[f] == "histogram" || typ[f] == "summary") {
					fam = f
				}
			}
		}
		if _, ok := typ[fam]; !ok {
			t.Errorf("line %d: %s has no # TYPE before it", i+1, name)
		}
		if fam != cur {
			if seen[fam] {
				t.Errorf("line %d: the series of %s are not one group", i+1, fam)
			}
			seen[cur], cur = true, fam
		}
	}
}
