package harness

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The chart: one group of horizontal bars per charted scenario metric, one bar per peer, each the
// median ratio to HAProxy from the same round on a logarithmic axis centred on 1× (HAProxy), with the
// min–max over rounds as a whisker. Hand-written SVG, readable in any browser.

var peerColors = map[string]string{
	"fairlead":       "#1f77b4",
	"fairlead-tuned": "#6baed6",
	"haproxy":        "#7f7f7f",
	"haproxy-tuned":  "#b5b5b5",
	"nginx":          "#2ca02c",
	"caddy":          "#ff7f0e",
}

const (
	svgWidth   = 1000
	svgLabelW  = 330 // group and peer labels
	svgPlotW   = 480
	svgBarH    = 16
	svgRowGap  = 4
	svgGroupGp = 18
	svgLogSpan = 4.0 // the axis spans 2^-4 .. 2^4
)

// xOf maps a ratio to the x coordinate of the plot (clipped to the axis).
func xOf(ratio float64) (x float64, clipped bool) {
	l := math.Log2(ratio)
	if l > svgLogSpan {
		l, clipped = svgLogSpan, true
	}
	if l < -svgLogSpan {
		l, clipped = -svgLogSpan, true
	}
	return svgLabelW + (l+svgLogSpan)/(2*svgLogSpan)*svgPlotW, clipped
}

// SVG renders the chart of ratios to HAProxy.
func (rep *Report) SVG() string {
	type bar struct {
		peer  string
		stat  *Stat
		note  string
		color string
	}
	type group struct {
		title  string
		better string
		bars   []bar
	}
	var groups []group
	for _, ss := range rep.Summary {
		sc := findScenario(ss.Scenario)
		if sc == nil {
			continue
		}
		for _, m := range sc.metrics {
			if !m.chart {
				continue
			}
			g := group{title: ss.Scenario + " · " + m.label, better: m.better}
			for _, ps := range ss.Peers {
				b := bar{peer: ps.Peer, color: peerColors[ps.Peer]}
				if b.color == "" {
					b.color = "#9467bd"
				}
				if r, ok := ps.Ratios[m.key]; ok {
					r := r
					b.stat = &r
				} else if ps.Runs == len(ps.Errors) {
					b.note = "failed"
				} else if v, ok := ps.Values[m.key]; ok && v.Bound {
					b.note = fmt.Sprintf("n/a: not within the window (>%s)", fmtNum(v.Median, m.format))
				} else if ok && baseBound(ss, m.key) {
					b.note = fmt.Sprintf("n/a: HAProxy not within the window (value here %s)", fmtNum(v.Median, m.format))
				} else if ok {
					b.note = fmt.Sprintf("n/a: no HAProxy figure (value here %s)", fmtNum(v.Median, m.format))
				} else {
					b.note = "n/a"
				}
				g.bars = append(g.bars, b)
			}
			if len(g.bars) > 0 {
				groups = append(groups, g)
			}
		}
	}

	top := 96
	h := top
	for _, g := range groups {
		h += 22 + len(g.bars)*(svgBarH+svgRowGap) + svgGroupGp
	}
	h += 40

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		svgWidth, h, svgWidth, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	pin := "proxy pinned to core 0, generators to core 1"
	if !rep.Pinned {
		pin = "not pinned"
	}
	if n := rep.workers(); n > 1 {
		pin += fmt.Sprintf(", %d workers per proxy", n)
	}
	fmt.Fprintf(&b, `<text x="16" y="26" font-size="17" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("fairlead bench (%s, %d round(s), %s): ratio to HAProxy, same round", rep.Plan.Mode, rep.Plan.Rounds, rep.Started.Format("2006-01-02 15:04"))))
	fmt.Fprintf(&b, `<text x="16" y="46" fill="#444">%s</text>`+"\n",
		esc("Bar = median ratio (whisker: min–max over rounds), logarithmic axis, 1× = HAProxy. "+pin+"."))

	// axis: grid lines at powers of two
	y0, y1 := top-14, h-40
	for e := -int(svgLogSpan); e <= int(svgLogSpan); e++ {
		x, _ := xOf(math.Pow(2, float64(e)))
		stroke, width := "#dddddd", 1
		if e == 0 {
			stroke, width = "#333333", 2
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%d"/>`+"\n", x, y0, x, y1, stroke, width)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x, y0-6, ratioLabel(math.Pow(2, float64(e))))
	}

	y := top
	for _, g := range groups {
		hint := ""
		switch g.better {
		case "higher":
			hint = "(higher is better)"
		case "lower":
			hint = "(lower is better)"
		}
		fmt.Fprintf(&b, `<text x="16" y="%d" font-weight="bold">%s<tspan dx="8" font-weight="normal" fill="#666">%s</tspan></text>`+"\n", y+12, esc(g.title), esc(hint))
		y += 22
		for _, br := range g.bars {
			cy := y + svgBarH/2
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgLabelW-10, cy+1, esc(br.peer))
			if br.stat == nil {
				fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle" fill="#888" font-style="italic">%s</text>`+"\n", svgLabelW+svgPlotW/2+6, cy+1, esc(br.note))
				y += svgBarH + svgRowGap
				continue
			}
			x1, _ := xOf(1)
			x2, clipped := xOf(br.stat.Median)
			lo, hi := math.Min(x1, x2), math.Max(x1, x2)
			if hi-lo < 2 {
				lo, hi = x1-1, x1+1
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				lo, y, hi-lo, svgBarH, br.color, esc(fmt.Sprintf("%s %s: %.3f× HAProxy", br.peer, g.title, br.stat.Median)))
			if br.stat.N > 1 && br.stat.Min != br.stat.Max {
				wl, _ := xOf(br.stat.Min)
				wh, _ := xOf(br.stat.Max)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222" stroke-width="1.5"/>`+"\n", wl, cy, wh, cy)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/>`+"\n",
					wl, cy-4, wl, cy+4, wh, cy-4, wh, cy+4)
			}
			label := fmt.Sprintf("%.2f×", br.stat.Median)
			if clipped {
				label += " (off scale)"
			}
			if verdict := betterOrWorse(g.better, br.stat.Median); verdict != "" && br.peer != baseline {
				label += " " + verdict
			}
			lx := svgLabelW + svgPlotW + 8
			fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx, cy+1, esc(label))
			y += svgBarH + svgRowGap
		}
		y += svgGroupGp
	}
	if len(groups) == 0 {
		fmt.Fprintf(&b, `<text x="16" y="%d" fill="#888">no ratio to HAProxy in this run (HAProxy not run?)</text>`+"\n", top+12)
	}
	fmt.Fprintf(&b, `<text x="16" y="%d" fill="#666">%s</text>`+"\n", h-16,
		esc("fairlead bench — figures in the JSON next to this file; targets and what each peer cannot express in the Markdown report."))
	b.WriteString("</svg>\n")
	return b.String()
}

// baseBound reports whether HAProxy's figure for key is only a lower bound (not within the window).
func baseBound(ss ScenarioSummary, key string) bool {
	for _, p := range ss.Peers {
		if p.Peer == baseline {
			return p.Values[key].Bound
		}
	}
	return false
}

func betterOrWorse(better string, ratio float64) string {
	switch {
	case better == "higher" && ratio > 1.02, better == "lower" && ratio < 0.98:
		return "better"
	case better == "higher" && ratio < 0.98, better == "lower" && ratio > 1.02:
		return "worse"
	}
	return ""
}

func ratioLabel(r float64) string {
	if r >= 1 {
		return fmt.Sprintf("%g×", r)
	}
	return fmt.Sprintf("1/%g", 1/r)
}

func esc(s string) string { return html.EscapeString(s) }
