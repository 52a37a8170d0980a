package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is everything a run measured, as written to bench/results/<timestamp>.json.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Plan     Plan      `json:"plan"`
	// Pinned is true when the proxies ran on core 0 and the generators on core 1; Threads is the workers
	// of every proxy (Options.Threads; absent from reports made before it existed: 1).
	Pinned       bool              `json:"pinned"`
	Threads      int               `json:"threads,omitempty"`
	Host         map[string]string `json:"host"`
	BenchFDLimit int               `json:"bench_fd_limit"`
	FDHardLimit  int               `json:"fd_hard_limit"`
	TempDir      string            `json:"temp_dir,omitempty"`
	Scenarios    []string          `json:"scenarios"`
	Peers        []PeerInfo        `json:"peers"`
	Results      []*Result         `json:"results"`
	Summary      []ScenarioSummary `json:"summary"`
	Targets      []Target          `json:"targets"`
	// Costs is true when the run measured the costs per request (-costs); Strace is the strace used
	// for the system call counts ("" when not installed).
	Costs  bool   `json:"costs,omitempty"`
	Strace string `json:"strace,omitempty"`
}

// PeerInfo describes a peer of the run.
type PeerInfo struct {
	Name      string   `json:"name"`
	Base      string   `json:"base"`
	Bin       string   `json:"bin,omitempty"`
	Version   string   `json:"version,omitempty"`
	Installed bool     `json:"installed"`
	Limits    []string `json:"cannot_express,omitempty"`
}

// Stat is the median and range of a figure over the rounds.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
	// Bound is true when at least one round gave only a lower bound (e.g. a failover not converged).
	Bound bool `json:"lower_bound,omitempty"`
}

// ScenarioSummary aggregates one scenario.
type ScenarioSummary struct {
	Scenario string        `json:"scenario"`
	Summary  string        `json:"summary"`
	Metrics  []MetricInfo  `json:"metrics"`
	Peers    []PeerSummary `json:"peers"`
}

// MetricInfo describes a metric of a scenario.
type MetricInfo struct {
	Key    string `json:"key"`
	Label  string `json:"label"`
	Better string `json:"better,omitempty"`
}

// PeerSummary aggregates one peer's runs of a scenario.
type PeerSummary struct {
	Peer   string          `json:"peer"`
	Runs   int             `json:"runs"`
	Errors []string        `json:"errors,omitempty"`
	Notes  []string        `json:"notes,omitempty"`
	Values map[string]Stat `json:"values"`
	// Ratios are value / HAProxy's value from the same round.
	Ratios map[string]Stat `json:"ratio_to_haproxy,omitempty"`
}

// Target is one of fairlead's goals, checked against the same run.
type Target struct {
	Name  string `json:"name"`
	Goal  string `json:"goal"`
	Value string `json:"value"`
	// Met is nil when the run cannot tell (scenario not run, failed, or no HAProxy).
	Met *bool `json:"met"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func statOf(xs []float64, bound bool) Stat {
	return Stat{Median: median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs), Bound: bound}
}

// valid reports whether r's value of m is a measurement (not a lower bound).
func (m metric) valid(r *Result) bool {
	return m.needs == "" || r.Metrics[m.needs] == 1
}

// summarize fills Summary and Targets from Results.
func (rep *Report) summarize(scs []*scenario) {
	rep.Summary = nil
	for _, sc := range scs {
		ss := ScenarioSummary{Scenario: sc.name, Summary: sc.summary}
		for _, m := range sc.metrics {
			ss.Metrics = append(ss.Metrics, MetricInfo{Key: m.key, Label: m.label, Better: m.better})
		}
		var peerOrder []string
		for _, r := range rep.Results {
			if r.Scenario == sc.name && !slices.Contains(peerOrder, r.Peer) {
				peerOrder = append(peerOrder, r.Peer)
			}
		}
		for _, peer := range peerOrder {
			ps := PeerSummary{Peer: peer, Values: map[string]Stat{}, Ratios: map[string]Stat{}}
			vals := map[string][]float64{}
			ratios := map[string][]float64{}
			bound := map[string]bool{}
			for _, r := range rep.Results {
				if r.Scenario != sc.name || r.Peer != peer {
					continue
				}
				ps.Runs++
				for _, n := range r.Notes {
					if !slices.Contains(ps.Notes, n) {
						ps.Notes = append(ps.Notes, n)
					}
				}
				if r.Error != "" {
					ps.Errors = append(ps.Errors, fmt.Sprintf("round %d: %s", r.Round, r.Error))
					continue
				}
				base := rep.result(sc.name, baseline, r.Round)
				for k, v := range r.Metrics {
					vals[k] = append(vals[k], v)
				}
				for _, m := range sc.metrics {
					v, ok := r.Metrics[m.key]
					if !ok {
						continue
					}
					if !m.valid(r) {
						bound[m.key] = true
					}
					if !(m.ratio || m.chart) || base == nil || !m.valid(r) || !m.valid(base) {
						continue
					}
					if b, ok := base.Metrics[m.key]; ok && b > 0 {
						ratios[m.key] = append(ratios[m.key], v/b)
					}
				}
			}
			for k, xs := range vals {
				ps.Values[k] = statOf(xs, bound[k])
			}
			for k, xs := range ratios {
				ps.Ratios[k] = statOf(xs, false)
			}
			ss.Peers = append(ss.Peers, ps)
		}
		rep.Summary = append(rep.Summary, ss)
	}
	rep.Targets = rep.targets()
}

// result finds the successful result of scenario/peer/round.
func (rep *Report) result(scenario, peer string, round int) *Result {
	for _, r := range rep.Results {
		if r.Scenario == scenario && r.Peer == peer && r.Round == round && r.Error == "" {
			return r
		}
	}
	return nil
}

func (rep *Report) peerSummary(scenario, peer string) *PeerSummary {
	for i := range rep.Summary {
		if rep.Summary[i].Scenario != scenario {
			continue
		}
		for j := range rep.Summary[i].Peers {
			p := &rep.Summary[i].Peers[j]
			if p.Peer == peer && p.Runs > len(p.Errors) {
				return p
			}
		}
	}
	return nil
}

func boolp(b bool) *bool { return &b }

// targets checks fairlead's goals against the same run.
func (rep *Report) targets() []Target {
	var ts []Target
	ran := func(s string) bool { return slices.Contains(rep.Scenarios, s) }
	for _, sc := range []string{"http-small", "http-16k", "https-small"} {
		if !ran(sc) {
			continue
		}
		f, h := rep.peerSummary(sc, "fairlead"), rep.peerSummary(sc, baseline)
		goal := 1.0
		if sc == "http-16k" {
			goal = 1.2 // nginx reaches about 1.2× HAProxy there
		}
		t1 := Target{Name: sc + " req/s", Goal: fmt.Sprintf("≥ %.1f× HAProxy", goal)}
		t2 := Target{Name: sc + " p99", Goal: "≤ HAProxy's"}
		if f != nil && h != nil {
			if r, ok := f.Ratios["req_s"]; ok {
				t1.Value = fmt.Sprintf("%.2f× (%s vs %s req/s)", r.Median, fmtNum(f.Values["req_s"].Median, ""), fmtNum(h.Values["req_s"].Median, ""))
				if c, ok := h.Values["ceiling"]; ok && c.Median > 0 {
					t1.Value += fmt.Sprintf("; no-proxy ceiling %s = %.2f× HAProxy", fmtNum(c.Median, ""), c.Median/h.Values["req_s"].Median)
				}
				t1.Met = boolp(r.Median >= goal)
			}
			if r, ok := f.Ratios["p99_ms"]; ok {
				t2.Value = fmt.Sprintf("%.2f× (%.2f vs %.2f ms)", r.Median, f.Values["p99_ms"].Median, h.Values["p99_ms"].Median)
				t2.Met = boolp(r.Median <= 1.0)
			}
		}
		ts = append(ts, t1, t2)
	}
	for _, sc := range []string{"ws-echo", "wss-echo"} {
		if !ran(sc) {
			continue
		}
		t := Target{Name: sc + " round trips/s", Goal: "≥ 1.0× the best peer"}
		if f := rep.peerSummary(sc, "fairlead"); f != nil {
			best, bestPeer := 0.0, ""
			for _, p := range rep.summaryOf(sc).Peers {
				if p.Peer == "fairlead" || p.Runs == len(p.Errors) {
					continue
				}
				if v := p.Values["rt_s"].Median; v > best {
					best, bestPeer = v, p.Peer
				}
			}
			if bestPeer != "" {
				v := f.Values["rt_s"].Median
				t.Value = fmt.Sprintf("%.2f× %s (%s vs %s)", v/best, bestPeer, fmtNum(v, ""), fmtNum(best, ""))
				if c, ok := f.Values["ceiling"]; ok && c.Median > 0 {
					t.Value += fmt.Sprintf("; no-proxy ceiling %s = %.2f× %s", fmtNum(c.Median, ""), c.Median/best, bestPeer)
				}
				t.Met = boolp(v >= best)
			}
		}
		ts = append(ts, t)
	}
	if sc := "https-small-h2"; ran(sc) { // #26: CPU per request at most the best peer's
		t := Target{Name: sc + " CPU per request", Goal: "≤ the best peer's"}
		if f := rep.peerSummary(sc, "fairlead"); f != nil {
			best, bestPeer := 0.0, ""
			for _, p := range rep.summaryOf(sc).Peers {
				if v := p.Values["cpu_us"].Median; p.Peer != "fairlead" && p.Runs > len(p.Errors) && v > 0 && (bestPeer == "" || v < best) {
					best, bestPeer = v, p.Peer
				}
			}
			if v := f.Values["cpu_us"].Median; bestPeer != "" && v > 0 {
				t.Value = fmt.Sprintf("%.2f× %s (%.1f vs %.1f µs)", v/best, bestPeer, v, best)
				t.Met = boolp(v <= best)
			}
		}
		ts = append(ts, t)
	}
	for _, sc := range []string{"ws-idle", "ws-idle-tls"} {
		if !ran(sc) {
			continue
		}
		t := Target{Name: sc + " memory per tunnel", Goal: "≤ HAProxy's"}
		f, h := rep.peerSummary(sc, "fairlead"), rep.peerSummary(sc, baseline)
		if f != nil && h != nil {
			fv, hv := f.Values["kib_per_tunnel"].Median, h.Values["kib_per_tunnel"].Median
			t.Value = fmt.Sprintf("%.1f vs %.1f KiB/tunnel (N = %s)", fv, hv, fmtNum(f.Values["tunnels"].Min, ""))
			t.Met = boolp(fv <= hv)
		}
		ts = append(ts, t)
	}
	if ran("failover") {
		for _, v := range []struct {
			peer    string
			timeout bool
		}{{"fairlead-tuned", true}, {"fairlead", false}} {
			t := Target{Name: "failover (" + v.peer + ")", Goal: "0 failed requests"}
			if v.timeout {
				t.Goal += ", new leader serving within 1 s"
			}
			if f := rep.peerSummary("failover", v.peer); f != nil {
				failed := f.Values["flip_failed"].Max + f.Values["kill_failed"].Max
				worst := max(f.Values["flip_new_leader_s"].Max, f.Values["kill_new_leader_s"].Max)
				conv := f.Values["flip_served"].Min == 1 && f.Values["kill_served"].Min == 1
				t.Value = fmt.Sprintf("%s failed; new leader after %.2f s (step-down) / %.2f s (kill)",
					fmtNum(failed, ""), f.Values["flip_new_leader_s"].Median, f.Values["kill_new_leader_s"].Median)
				if !conv {
					t.Value += ", new leader not serving within the window"
				}
				met := failed == 0 && (!v.timeout || (conv && worst <= 1.0))
				t.Met = boolp(met)
			}
			ts = append(ts, t)
		}
	}
	if ran("reload") {
		t := Target{Name: "reload", Goal: "0 requests failed, 0 tunnels lost"}
		if f := rep.peerSummary("reload", "fairlead"); f != nil {
			failed, lost := f.Values["failed"].Max, f.Values["tunnels_lost"].Max
			t.Value = fmt.Sprintf("%s failed, %s of %s tunnels lost", fmtNum(failed, ""), fmtNum(lost, ""), fmtNum(f.Values["tunnels"].Min, ""))
			t.Met = boolp(failed == 0 && lost == 0)
		}
		ts = append(ts, t)
	}
	if ran("upgrade") {
		t := Target{Name: "upgrade", Goal: "0 tunnels dropped, 0 devices reconnected, 0 connection attempts and 0 GETs failed"}
		if f := rep.peerSummary("upgrade", "fairlead"); f != nil {
			d, rec, att, get := f.Values["dropped"].Max, f.Values["reconnected"].Max, f.Values["attempts_failed"].Max, f.Values["http_failed"].Max
			t.Value = fmt.Sprintf("%s dropped, %s reconnected, %s attempts and %s GETs failed (%s devices); old process gone after %s s",
				fmtNum(d, ""), fmtNum(rec, ""), fmtNum(att, ""), fmtNum(get, ""), fmtNum(f.Values["devices"].Min, ""),
				cell(metricOf(upgradeScenario(), "old_gone_s"), f.Values["old_gone_s"], nil))
			t.Met = boolp(d == 0 && rec == 0 && att == 0 && get == 0)
		}
		ts = append(ts, t)
	}
	if ran("fan-in") {
		t := Target{Name: "fan-in upstream conns", Goal: "≤ cap (max_conns)"}
		if f := rep.peerSummary("fan-in", "fairlead"); f != nil {
			up, c := f.Values["upstream_max"].Max, f.Values["cap"].Median
			t.Value = fmt.Sprintf("%s (cap %s, %s clients)", fmtNum(up, ""), fmtNum(c, ""), fmtNum(f.Values["clients"].Min, ""))
			t.Met = boolp(up <= c)
		}
		ts = append(ts, t)
	}
	if ran("fan-out") {
		ts = append(ts, rep.fanOutTarget("fan-out", Target{Name: "fan-out deliveries", Goal: "0 missed; 4 upstream sessions; 1 snapshot fetch per topic per change"}))
	}
	if ran("fan-out-appconfig") {
		ts = append(ts, rep.fanOutTarget("fan-out-appconfig", Target{Name: "fan-out-appconfig deliveries",
			Goal: "0 missed; Registration first at every subscriber; 4 upstream sessions; 1 fetch per topic per change; 1 IAM token"}))
	}
	return ts
}

// fanOutTarget fills t from fairlead's results of a fan-out scenario (fan-out, fan-out-appconfig): met
// when, at every N, no delivery was missed, the upstream had 4 sessions and 1 fetch per topic per
// change and, for fan-out-appconfig, every subscriber got a Registration first and IAM issued 1 token.
func (rep *Report) fanOutTarget(scenario string, t Target) Target {
	f := rep.peerSummary(scenario, "fairlead")
	if f == nil {
		return t
	}
	met := true
	var parts []string
	vals := map[string]float64{}
	for k, v := range f.Values {
		vals[k] = v.Median
	}
	for _, n := range resultSizes(vals) {
		missed := f.Values[sizedKey("missed", n)].Max
		sess := f.Values[sizedKey("upstream_sessions", n)]
		fetches := f.Values[sizedKey("fetches_per_change", n)]
		part := fmt.Sprintf("N %s: %s missed, %s sessions, %.2f fetches", fmtNum(f.Values[sizedKey("subscribers", n)].Min, ""),
			fmtNum(missed, ""), fmtNum(sess.Max, ""), fetches.Max)
		met = met && missed == 0 && sess.Min == 4 && sess.Max == 4 && fetches.Min == 1 && fetches.Max == 1
		if scenario == "fan-out-appconfig" {
			noReg, tokens := f.Values[sizedKey("no_registration", n)].Max, f.Values[sizedKey("iam_tokens", n)]
			part += fmt.Sprintf(", %s tokens, %s without Registration first", fmtNum(tokens.Max, ""), fmtNum(noReg, ""))
			met = met && noReg == 0 && tokens.Min == 1 && tokens.Max == 1
		}
		parts = append(parts, part+fmt.Sprintf(", p99 %.2f ms", f.Values[sizedKey("p99_ms", n)].Median))
	}
	if len(parts) > 0 {
		t.Value = strings.Join(parts, "; ")
		t.Met = boolp(met)
	}
	return t
}

func (rep *Report) summaryOf(scenario string) *ScenarioSummary {
	for i := range rep.Summary {
		if rep.Summary[i].Scenario == scenario {
			return &rep.Summary[i]
		}
	}
	return &ScenarioSummary{}
}

// fmtNum prints v with format (default: integer with thousands separators).
func fmtNum(v float64, format string) string {
	if math.IsNaN(v) {
		return "—"
	}
	if format != "" {
		return fmt.Sprintf(format, v)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// num prints a value of m (its show function, or fmtNum with its format).
func (m metric) num(v float64) string {
	if m.show != nil && !math.IsNaN(v) {
		return m.show(v)
	}
	return fmtNum(v, m.format)
}

func (m metric) fmt(v float64, all map[string]float64) string {
	s := m.num(v)
	if m.needs != "" && all[m.needs] != 1 {
		s = ">" + s
	}
	return s
}

func metricOf(sc *scenario, key string) metric {
	for _, m := range sc.metrics {
		if m.key == key {
			return m
		}
	}
	return metric{key: key}
}

// cell prints a stat: median (min–max), and its ratio to HAProxy.
func cell(m metric, v Stat, r *Stat) string {
	s := m.num(v.Median)
	if v.Bound {
		s = ">" + s
	}
	if v.N > 1 && v.Min != v.Max {
		s += fmt.Sprintf(" (%s–%s)", m.num(v.Min), m.num(v.Max))
	}
	if r != nil {
		s += fmt.Sprintf(" · **%.2f×**", r.Median)
		if r.N > 1 && r.Min != r.Max {
			s += fmt.Sprintf(" (%.2f–%.2f)", r.Min, r.Max)
		}
	}
	return s
}

// WriteMarkdown writes the report as Markdown tables.
func (rep *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "# fairlead bench — %s, %d round(s), %s\n\n", rep.Plan.Mode, rep.Plan.Rounds, rep.Started.Format("2006-01-02 15:04:05"))
	fmt.Fprintln(w, rep.setupLine())
	fmt.Fprintf(w, "Load at start: %s. Every figure: median over rounds (min–max), and **ratio to HAProxy** from the same round (median).\n\n",
		rep.Host["loadavg_at_start"])
	fmt.Fprintln(w, "| peer | version |")
	fmt.Fprintln(w, "|---|---|")
	for _, p := range rep.Peers {
		v := p.Version
		if !p.Installed {
			v = "not installed — skipped"
		}
		fmt.Fprintf(w, "| %s | %s |\n", p.Name, v)
	}
	fmt.Fprintln(w)

	for _, ss := range rep.Summary {
		sc := findScenario(ss.Scenario)
		fmt.Fprintf(w, "## %s\n\n%s.\n\n", ss.Scenario, ss.Summary)
		if sc != nil && sc.sized {
			writeSizedTable(w, sc, ss)
		} else {
			writeTable(w, sc, ss)
		}
		var notes []string
		for _, ps := range ss.Peers {
			for _, e := range ps.Errors {
				notes = append(notes, fmt.Sprintf("%s: error, %s", ps.Peer, firstLine(e)))
			}
			for _, n := range ps.Notes {
				notes = append(notes, ps.Peer+": "+n)
			}
		}
		if len(notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range notes {
				fmt.Fprintf(w, "- %s\n", mdEscape(n))
			}
		}
		fmt.Fprintln(w)
	}

	rep.writeCosts(w)

	if len(rep.Targets) > 0 {
		fmt.Fprintf(w, "## Targets (fairlead, same run)\n\n| target | goal | measured | met |\n|---|---|---|---|\n")
		for _, t := range rep.Targets {
			met := "n/a"
			if t.Met != nil {
				met = "not met"
				if *t.Met {
					met = "**met**"
				}
			}
			v := t.Value
			if v == "" {
				v = "—"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Name, t.Goal, mdEscape(v), met)
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "## What the peers cannot express")
	fmt.Fprintln(w)
	seen := map[string]bool{}
	for _, p := range rep.Peers {
		if len(p.Limits) == 0 || seen[p.Base] {
			continue
		}
		seen[p.Base] = true
		fmt.Fprintf(w, "- **%s**:\n", p.Base)
		for _, l := range p.Limits {
			fmt.Fprintf(w, "  - %s\n", l)
		}
	}
	fmt.Fprintln(w)
}

// metricHeaders are the column headers of a scenario's metrics, with an arrow for the better way.
func metricHeaders(ss ScenarioSummary) []string {
	var hdr []string
	for _, m := range ss.Metrics {
		l := m.Label
		switch m.Better {
		case "higher":
			l += " ↑"
		case "lower":
			l += " ↓"
		}
		hdr = append(hdr, l)
	}
	return hdr
}

// writeTable writes a scenario's table: a row per peer, a column per metric.
func writeTable(w io.Writer, sc *scenario, ss ScenarioSummary) {
	hdr := metricHeaders(ss)
	fmt.Fprintf(w, "| peer | %s |\n|---|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, ps := range ss.Peers {
		var cells []string
		for _, mi := range ss.Metrics {
			m := metricOf(sc, mi.Key)
			v, ok := ps.Values[mi.Key]
			if !ok {
				cells = append(cells, "—")
				continue
			}
			var r *Stat
			if rr, ok := ps.Ratios[mi.Key]; ok && ps.Peer != baseline {
				r = &rr
			}
			cells = append(cells, cell(m, v, r))
		}
		if ps.Runs == len(ps.Errors) {
			fmt.Fprintf(w, "| %s | failed: %s |%s\n", ps.Peer, mdEscape(firstLine(ps.Errors[0])), strings.Repeat(" |", max(len(hdr)-1, 0)))
			continue
		}
		fmt.Fprintf(w, "| %s | %s |\n", ps.Peer, strings.Join(cells, " | "))
	}
}

// writeSizedTable writes a sized scenario's table (fan-out): a row per peer and N, a column per metric.
func writeSizedTable(w io.Writer, sc *scenario, ss ScenarioSummary) {
	hdr := metricHeaders(ss)
	fmt.Fprintf(w, "| peer | N | %s |\n|---|---|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, ps := range ss.Peers {
		if ps.Runs == len(ps.Errors) {
			fmt.Fprintf(w, "| %s | | failed: %s |%s\n", ps.Peer, mdEscape(firstLine(ps.Errors[0])), strings.Repeat(" |", max(len(hdr)-1, 0)))
			continue
		}
		sizes := map[string]float64{}
		for k, v := range ps.Values {
			sizes[k] = v.Median
		}
		for _, n := range resultSizes(sizes) {
			var cells []string
			for _, mi := range ss.Metrics {
				v, ok := ps.Values[sizedKey(mi.Key, n)]
				if !ok {
					cells = append(cells, "n/a")
					continue
				}
				cells = append(cells, cell(metricOf(sc, mi.Key), v, nil))
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", ps.Peer, fmtNum(float64(n), ""), strings.Join(cells, " | "))
		}
	}
}

// resultSizes returns the sizes N of a sized scenario's metrics ("<key>@<N>"), ascending.
func resultSizes(metrics map[string]float64) []int {
	var ns []int
	for k := range metrics {
		_, n, ok := strings.Cut(k, "@")
		if !ok {
			continue
		}
		if x, err := strconv.Atoi(n); err == nil && !slices.Contains(ns, x) {
			ns = append(ns, x)
		}
	}
	slices.Sort(ns)
	return ns
}

// setupLine says where the proxies and the load ran and how many workers each proxy had.
func (rep *Report) setupLine() string {
	if n := rep.workers(); n > 1 {
		return fmt.Sprintf("Not pinned (-threads %d: proxy, load generators and simulated servers share every core); %d workers per proxy "+
			"(HAProxy nbthread %d, nginx worker_processes %d, Caddy and fairlead GOMAXPROCS=%d).", n, n, n, n, n)
	}
	if rep.Pinned {
		return "Proxy under test pinned to core 0, load generators and simulated servers to core 1; one worker per proxy."
	}
	return "Not pinned (taskset missing or pinning disabled); one worker per proxy."
}

// workers is Threads, at least 1.
func (rep *Report) workers() int { return max(rep.Threads, 1) }

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// WriteFiles writes <dir>/<timestamp>.json and <dir>/<timestamp>.svg and returns their paths.
func (rep *Report) WriteFiles(dir string) (jsonPath, svgPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	stamp := rep.Started.Format("20060102-150405")
	jsonPath = filepath.Join(dir, stamp+".json")
	svgPath = filepath.Join(dir, stamp+".svg")
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(svgPath, []byte(rep.SVG()), 0o644); err != nil {
		return "", "", err
	}
	return jsonPath, svgPath, nil
}
