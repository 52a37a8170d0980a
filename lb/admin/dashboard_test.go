package admin

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Grafana dashboard shipped beside the config (conf.d/grafana-fairlead.json) charts what
// /metrics writes: every metric its PromQL names is a family of metricFamilies (or a histogram's
// _bucket, _sum or _count), and it covers what an operator watches in an incident.

const dashboardFile = "../../conf.d/grafana-fairlead.json"

func TestTheDashboardNamesOnlyMetricsThatExist(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d PromQL expressions in %s", len(exprs), dashboardFile)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names := promqlMetricNames(e)
		if len(names) == 0 {
			t.Errorf("%q names no metric", e)
		}
		for _, n := range names {
			if _, ok := familyIndex[n]; !ok {
				t.Errorf("%s names %s, which /metrics does not write (not in metricsdoc.go)", dashboardFile, n)
			}
			used[n] = true
		}
	}
	// leader, failovers, requests and errors by pool, tunnels, queue waits (issue #24).
	for _, n := range []string{"fairlead_server_up", "fairlead_leader_changes_total", "fairlead_pool_failovers_total",
		"fairlead_pool_requests_total", "fairlead_pool_errors_total", "fairlead_server_tunnels",
		"fairlead_pool_tunnels_opened_total", "fairlead_queue_wait_seconds_bucket", "fairlead_pool_waiting",
		// and the servers' states, a lost standby among them, and the pools that lost their redundancy (issue #36)
		"fairlead_server_state", "fairlead_pool_redundancy_lost"} {
		if !used[n] {
			t.Errorf("the dashboard does not chart %s", n)
		}
	}
}

// promtool parses each expression as a recording rule, with Grafana's variables replaced.
func TestTheDashboardsPromQLParses(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed: apt-get install prometheus (Debian; .ci/run installs it)")
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range dashboardExprs(t) {
		if strings.HasPrefix(e, "label_values(") {
			continue // Grafana's, not PromQL
		}
		q, _ := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "  - record: dashboard:expr%d\n    expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules of the dashboard's expressions: %v\n%s", err, out)
	}
}

func TestPromQLMetricNamesAreFoundAndLabelsFunctionsAndKeywordsAreNot(t *testing.T) {
	f := func(expr string, want ...string) {
		t.Helper()
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("%q: got %q, want %q", expr, got, want)
		}
	}
	f(`sum by (pool, le) (rate(a_bucket{instance=~"$instance", x="b c"}[$__rate_interval]))`, "a_bucket")
	f(`a == 1 and on (instance, pool) b`, "a", "b")
	f(`count by (pool) (a) unless on (pool) (b{c="d"} == 1)`, "a", "b")
	f(`histogram_quantile(0.99, sum without (x) (rate(h_bucket[5m]))) / ignoring(y) group_left c offset 5m`, "h_bucket", "c")
	f(`label_values(fairlead_build_info, instance)`, "fairlead_build_info")
}

// dashboardExprs returns every PromQL expression of the dashboard: the panels' targets and the
// template variables' queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("%s: variable query: %v", dashboardFile, err)
			}
			out = append(out, q.Query)
		}
	}
	return out
}

var (
	promqlDropped = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\b[0-9][0-9A-Za-z_.]*`)
	labelValues   = regexp.MustCompile(`label_values\(([^,()]*),[^)]*\)`)
	promqlIdent   = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promqlWords   = []string{"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring", "group_left", "group_right", "Inf", "NaN"}
)

// promqlMetricNames returns the metric names of a PromQL expression (or a Grafana label_values
// query): its identifiers that are not in a label matcher, a range, a grouping clause or a string,
// not called as functions, and not keywords; label_values' second argument is a label.
func promqlMetricNames(expr string) []string {
	expr = labelValues.ReplaceAllString(expr, "$1")
	expr = promqlDropped.ReplaceAllString(expr, " ")
	var out []string
	for _, m := range promqlIdent.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" || slices.Contains(promqlWords, m[0]) || strings.HasPrefix(m[0], "$") {
			continue
		}
		out = append(out, m[0])
	}
	return out
}
