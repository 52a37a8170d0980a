package lb

import (
	"io"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
)

// histogram is a Prometheus histogram of durations in seconds with fixed buckets (le labels), so that
// histogram_quantile works in Prometheus as in VictoriaMetrics. Recording is a few atomic adds: no lock,
// no allocation, safe on the request path.
type histogram struct {
	counts [len(latencyBounds) + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sumNs  atomic.Uint64
}

// latencyBounds are the upper bounds of the buckets, in seconds: from half a millisecond (a loopback
// request) to a minute (response_timeout).
var latencyBounds = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Update records one duration of d seconds.
func (h *histogram) Update(d float64) {
	h.counts[sort.SearchFloat64s(latencyBounds[:], d)].Add(1)
	h.sumNs.Add(uint64(max(d, 0) * 1e9))
}

// UpdateDuration records the time since start (for defer).
func (h *histogram) UpdateDuration(start time.Time) { h.Update(time.Since(start).Seconds()) }

// count returns the number of durations recorded.
func (h *histogram) count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// write writes name_bucket{labels,le=...} (cumulative), name_sum and name_count, once something was
// recorded.
func (h *histogram) write(w io.Writer, name, labels string) {
	if h.count() == 0 {
		return
	}
	var cum uint64
	b := make([]byte, 0, 128)
	for i := range h.counts {
		cum += h.counts[i].Load()
		le := "+Inf"
		if i < len(latencyBounds) {
			le = strconv.FormatFloat(latencyBounds[i], 'g', -1, 64)
		}
		b = append(b[:0], name...)
		b = append(b, "_bucket{"...)
		b = append(b, labels...)
		b = append(b, `,le="`...)
		b = append(b, le...)
		b = append(b, `"} `...)
		b = strconv.AppendUint(b, cum, 10)
		b = append(b, '\n')
		w.Write(b) //nolint:errcheck // a scrape's writer
	}
	b = append(append(append(b[:0], name...), "_sum{"...), labels...)
	b = append(b, "} "...)
	b = strconv.AppendFloat(b, float64(h.sumNs.Load())/1e9, 'g', -1, 64)
	b = append(append(append(append(b, '\n'), name...), "_count{"...), labels...)
	b = append(b, "} "...)
	b = strconv.AppendUint(b, cum, 10)
	b = append(b, '\n')
	w.Write(b) //nolint:errcheck
}
