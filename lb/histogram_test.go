package lb

import (
	"strings"
	"testing"
)

func TestHistogramWritesCumulativeLeBuckets(t *testing.T) {
	var h histogram
	var b strings.Builder
	h.write(&b, "x_seconds", `pool="p"`)
	if b.Len() != 0 {
		t.Fatalf("an empty histogram wrote %q", b.String())
	}
	for _, d := range []float64{0.0004, 0.001, 0.003, 0.3, 100} {
		h.Update(d)
	}
	h.write(&b, "x_seconds", `pool="p"`)
	out := b.String()
	for _, want := range []string{
		`x_seconds_bucket{pool="p",le="0.0005"} 1`,
		`x_seconds_bucket{pool="p",le="0.001"} 2`, // a value on a bound is in that bucket
		`x_seconds_bucket{pool="p",le="0.0025"} 2`,
		`x_seconds_bucket{pool="p",le="0.005"} 3`,
		`x_seconds_bucket{pool="p",le="0.5"} 4`,
		`x_seconds_bucket{pool="p",le="60"} 4`,
		`x_seconds_bucket{pool="p",le="+Inf"} 5`,
		`x_seconds_sum{pool="p"} 100.3044`,
		`x_seconds_count{pool="p"} 5`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if n := testing.AllocsPerRun(100, func() { h.Update(0.01) }); n != 0 {
		t.Errorf("Update allocates %.1f", n)
	}
}
