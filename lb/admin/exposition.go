package admin

// GET /metrics in the Prometheus text format as Prometheus's linter (promtool check metrics) wants it:
// every family once, as one group of series headed by its # HELP and # TYPE lines. The series are
// written where their values live, pool by pool and server by server, with VictoriaMetrics/metrics'
// Write* helpers, which write neither header; so the page is written through a familyWriter, which
// sorts each series line into its family's buffer and then writes the families in the order of
// metricFamilies, each after its header, taken from that table.

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// familyIndex maps a series name to its family's index in metricFamilies: a family's own name, and a
// histogram's name_bucket, name_sum and name_count.
var familyIndex = func() map[string]int {
	m := make(map[string]int, len(metricFamilies)+8)
	for i, f := range metricFamilies {
		m[f.name] = i
		if f.typ == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				m[f.name+suffix] = i
			}
		}
	}
	return m
}()

// familyHeaders are the # HELP and # TYPE lines of each family of metricFamilies. The help is the
// reference's text without its Markdown backticks, escaped as the text format requires.
var familyHeaders = func() []string {
	h := make([]string, len(metricFamilies))
	esc := strings.NewReplacer("`", "", `\`, `\\`, "\n", `\n`)
	for i, f := range metricFamilies {
		help := f.help
		if f.labels != "" {
			help += " (labels: " + f.labels + ")"
		}
		h[i] = "# HELP " + f.name + " " + esc.Replace(help) + "\n# TYPE " + f.name + " " + f.typ + "\n"
	}
	return h
}()

// foreignHelp is the help of the families that are not fairlead's: the Go runtime and process metrics
// of VictoriaMetrics/metrics (WriteProcessMetrics), which it does not describe.
const foreignHelp = "Go runtime or process metric, as github.com/VictoriaMetrics/metrics' WriteProcessMetrics writes it"

// familyWriter is an io.Writer for the series lines of one /metrics page. Each Write holds whole lines
// (as the Write* helpers and histogram.write write them); lines of a family of metricFamilies go to
// that family's buffer, others (the Go process metrics, each already one group) to foreign, and
// comment lines are dropped: the headers are written by flush. Writers are reused through
// familyWriters, so that a scrape reuses the buffers of the last one.
type familyWriter struct {
	bufs    [][]byte // by index in metricFamilies
	foreign []byte
}

var familyWriters = sync.Pool{New: func() any { return &familyWriter{bufs: make([][]byte, len(metricFamilies))} }}

func (fw *familyWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line, p = p[:i+1], p[i+1:]
		} else {
			p = nil
		}
		if line[0] == '#' {
			continue
		}
		if i, ok := familyIndex[string(seriesName(line))]; ok {
			fw.bufs[i] = append(fw.bufs[i], line...)
		} else {
			fw.foreign = append(fw.foreign, line...)
		}
	}
	return n, nil
}

// seriesName is the metric name at the start of a series line.
func seriesName(line []byte) []byte {
	if i := bytes.IndexAny(line, "{ \n"); i >= 0 {
		return line[:i]
	}
	return line
}

// flush writes the families in the order of metricFamilies, each family that has series after its
// header, then the foreign ones, and empties the writer for its next use.
func (fw *familyWriter) flush(w io.Writer) {
	for i, b := range fw.bufs {
		if len(b) > 0 {
			io.WriteString(w, familyHeaders[i]) //nolint:errcheck // a scrape's writer
			w.Write(b)                          //nolint:errcheck
			fw.bufs[i] = b[:0]
		}
	}
	writeForeign(w, fw.foreign)
	fw.foreign = fw.foreign[:0]
}

// writeForeign writes the series lines of families not in metricFamilies, each family headed by a
// # HELP and a # TYPE line whose type is read from its series: a name_bucket series with an le label
// starts a histogram (the Go runtime's have no _sum or _count), a quantile label a summary, whose
// name_sum and name_count follow; a name ending in _total is a counter, any other a gauge. A family's
// series are one group already, as WriteProcessMetrics writes them.
func writeForeign(w io.Writer, b []byte) {
	var family []byte
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i+1], b[i+1:]
		} else {
			b = nil
		}
		name := seriesName(line)
		if to, ok := foreignRenames[string(name)]; ok {
			line = append([]byte(to), line[len(name):]...) // three short lines a scrape
			name = line[:len(to)]
		}
		fam, typ := name, "gauge"
		switch {
		case bytes.HasSuffix(name, []byte("_bucket")) && bytes.Contains(line, []byte(`le="`)):
			fam, typ = name[:len(name)-len("_bucket")], "histogram"
		case bytes.Contains(line, []byte(`quantile="`)):
			typ = "summary"
		case family != nil && bytes.HasPrefix(name, family) &&
			(string(name[len(family):]) == "_sum" || string(name[len(family):]) == "_count"):
			fam = family
		case bytes.HasSuffix(name, []byte("_total")):
			typ = "counter"
		}
		if !bytes.Equal(fam, family) {
			family = fam
			io.WriteString(w, "# HELP ")                   //nolint:errcheck
			w.Write(fam)                                   //nolint:errcheck
			io.WriteString(w, " "+foreignHelp+"\n# TYPE ") //nolint:errcheck
			w.Write(fam)                                   //nolint:errcheck
			io.WriteString(w, " ")                         //nolint:errcheck
			io.WriteString(w, typ)                         //nolint:errcheck
			io.WriteString(w, "\n")                        //nolint:errcheck
		}
		w.Write(line) //nolint:errcheck
	}
}

// foreignRenames are the names the Go runtime metrics take on /metrics where VictoriaMetrics/metrics'
// names break Prometheus's naming rules (the _count suffix belongs to histograms and summaries; a
// counter ends in _total).
var foreignRenames = map[string]string{
	"go_cgo_calls_count": "go_cgo_calls_total", // calls from Go to C, a counter
	"go_gc_forced_count": "go_gc_forced_total", // GC cycles forced by runtime.GC, a counter
	"go_cpu_count":       "go_cpus",            // runtime.NumCPU, a gauge
}

// writeMetrics writes the backend's metrics to w (GET /metrics), grouped by family with headers.
func writeMetrics(w io.Writer, b Backend) {
	fw := familyWriters.Get().(*familyWriter)
	b.WriteMetrics(fw)
	fw.flush(w)
	familyWriters.Put(fw)
}
