package admin

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// interleaved writes series as package lb does, pool by pool: the families of each pool in turn.
type interleaved struct{ Backend }

func (interleaved) WriteMetrics(w io.Writer) {
	for _, pool := range []string{"a", "b"} {
		metrics.WriteCounterUint64(w, `fairlead_pool_requests_total{pool="`+pool+`"}`, 1)
		metrics.WriteGaugeUint64(w, `fairlead_pool_waiting{pool="`+pool+`"}`, 0)
		w.Write([]byte(`fairlead_queue_wait_seconds_bucket{pool="` + pool + `",le="+Inf"} 1` + "\n" +
			`fairlead_queue_wait_seconds_sum{pool="` + pool + `"} 0.5` + "\n" +
			`fairlead_queue_wait_seconds_count{pool="` + pool + `"} 1` + "\n"))
	}
	metrics.WriteGaugeUint64(w, "go_cpu_count", 2)
	metrics.WriteCounterUint64(w, "process_cpu_seconds_total", 3)
}

func TestMetricsAreGroupedByFamilyEachAfterItsHelpAndType(t *testing.T) {
	var b bytes.Buffer
	writeMetrics(&b, interleaved{})
	want := `# HELP fairlead_pool_requests_total requests routed to the pool (labels: pool)
# TYPE fairlead_pool_requests_total counter
fairlead_pool_requests_total{pool="a"} 1
fairlead_pool_requests_total{pool="b"} 1
# HELP fairlead_pool_waiting requests waiting for a server now (labels: pool)
# TYPE fairlead_pool_waiting gauge
fairlead_pool_waiting{pool="a"} 0
fairlead_pool_waiting{pool="b"} 0
# HELP fairlead_queue_wait_seconds each wait for a server, served or not (labels: pool)
# TYPE fairlead_queue_wait_seconds histogram
fairlead_queue_wait_seconds_bucket{pool="a",le="+Inf"} 1
fairlead_queue_wait_seconds_sum{pool="a"} 0.5
fairlead_queue_wait_seconds_count{pool="a"} 1
fairlead_queue_wait_seconds_bucket{pool="b",le="+Inf"} 1
fairlead_queue_wait_seconds_sum{pool="b"} 0.5
fairlead_queue_wait_seconds_count{pool="b"} 1
# HELP go_cpus ` + foreignHelp + `
# TYPE go_cpus gauge
go_cpus 2
# HELP process_cpu_seconds_total ` + foreignHelp + `
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 3
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The second scrape reuses the first one's buffers and writes the same page.
	b.Reset()
	writeMetrics(&b, interleaved{})
	if b.String() != want {
		t.Errorf("a second scrape wrote\n%s", b.String())
	}
}

func TestEveryFamilyHeaderIsOneHelpAndOneTypeLine(t *testing.T) {
	for i, h := range familyHeaders {
		f := metricFamilies[i]
		lines := strings.Split(strings.TrimSuffix(h, "\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "# HELP "+f.name+" ") || lines[1] != "# TYPE "+f.name+" "+f.typ {
			t.Errorf("%s: header %q", f.name, h)
		}
		switch f.typ {
		case "counter", "gauge", "histogram":
		default:
			t.Errorf("%s: type %q", f.name, f.typ)
		}
	}
}

// Grouping costs a scrape a copy of its page, not allocations: the buffers are reused.
func TestGroupingAScrapeAllocatesNothingOnceWarm(t *testing.T) {
	var fw familyWriter
	fw.bufs = make([][]byte, len(metricFamilies))
	lines := [][]byte{[]byte(`fairlead_pool_requests_total{pool="a"} 1` + "\n"), []byte(`fairlead_pool_waiting{pool="a"} 0` + "\n"),
		[]byte(`fairlead_queue_wait_seconds_sum{pool="a"} 0.5` + "\n"), []byte("process_cpu_seconds_total 3\n")}
	allocs := testing.AllocsPerRun(100, func() {
		for range 50 {
			for _, l := range lines {
				fw.Write(l) //nolint:errcheck
			}
		}
		fw.flush(io.Discard)
	})
	if allocs > 0 {
		t.Errorf("%v allocations a scrape", allocs)
	}
}
