package faults

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// loadOpts shapes the steady load of a scenario.
type loadOpts struct {
	workers   int           // concurrent clients (each one keep-alive connection at a time)
	rate      int           // requests per second over all workers, paced (slots missed are skipped)
	postEvery int           // every postEvery-th request of a worker is a POST (0: GETs only)
	timeout   time.Duration // per request; beyond queue_timeout + response_timeout
}

var defaultLoad = loadOpts{workers: 8, rate: 300, postEvery: 5, timeout: 20 * time.Second}

// sample is one request of the load and its outcome.
type sample = testkit.Sample

func isPost(s sample) bool { return s.Method == http.MethodPost }

// refused reports whether the request found no listener (connection refused).
func refused(s sample) bool { return s.Err != nil && errors.Is(s.Err, syscall.ECONNREFUSED) }

// noServer reports whether the answer is fairlead's own unavailable_status: 503 "no server available".
func noServer(s sample) bool {
	return s.Err == nil && s.Status == http.StatusServiceUnavailable && s.ServedBy == "" &&
		strings.Contains(s.Body, "no server available")
}

// startLoad starts a steady stream of GETs and POSTs through fairlead at addr from a real HTTP client
// (net/http, keep-alive: testkit.Load); t.Cleanup stops it if the test does not. Like every ordinary
// client, net/http resends a GET once on a fresh connection when a reused keep-alive connection turns
// out closed before any answer byte; it never resends a POST whose bytes may have been written. Each
// POST carries a new id (name-N).
func startLoad(t *testing.T, name, addr string, o loadOpts) *testkit.Load {
	t.Helper()
	var seq atomic.Int64
	body := bytes.Repeat([]byte("p"), 128)
	l := testkit.StartLoad(testkit.LoadOptions{Addr: addr, Workers: o.workers, Rate: o.rate, Timeout: o.timeout,
		Request: func(w, n int) testkit.Request {
			if o.postEvery > 0 && n%o.postEvery == 0 {
				return testkit.Request{Method: http.MethodPost, Path: "/Thingworx/Things/FaultThing/Services/Write",
					Body: body, ID: fmt.Sprintf("%s-%d", name, seq.Add(1))}
			}
			return testkit.Request{Method: http.MethodGet, Path: "/Thingworx/Things/FaultThing/Properties/value?worker=" + strconv.Itoa(w)}
		}})
	t.Cleanup(func() { stop(l) })
	return l
}

// stop stops the load, waits for the requests in flight (each bounded by the client timeout; the
// grace is only a backstop) and returns every sample. Idempotent.
func stop(l *testkit.Load) []sample {
	ss, _ := l.Stop(time.Minute)
	return ss
}

// waitOK waits (bounded) for a successful answer from server to a request started at or after from
// and returns when it ended.
func waitOK(t *testing.T, l *testkit.Load, server string, from time.Time, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	if !testkit.Within(timeout, func() bool {
		var ok bool
		at, ok = l.FirstOK(server, from)
		return ok
	}) {
		t.Fatalf("no successful answer from %q within %s", server, timeout)
	}
	return at
}

// verdict classifies a sample that is not a plain success: "" is a broken promise; any other string
// names an expected outcome, counted under that name.
type verdict func(s sample) string

// postLost excuses a POST that failed after it may have reached a server that died or hung: fairlead
// must not resend it, so the client sees the failure.
func postLost(s sample) string {
	if isPost(s) && (s.Err != nil || s.Status == http.StatusBadGateway || s.Status == http.StatusGatewayTimeout) {
		return "post_lost"
	}
	return ""
}

// strict excuses nothing.
func strict(sample) string { return "" }

// result is what a scenario's load amounted to.
type result struct {
	name       string
	samples    []sample
	sent, ok   int
	gets, post int
	failed     []sample
	excused    map[string]int
	longestGap time.Duration
	figures    []string
}

// judge classifies every sample and computes the figures of the scenario's line.
func judge(name string, samples []sample, why verdict) *result {
	r := &result{name: name, samples: samples, sent: len(samples), excused: map[string]int{}}
	var oks []time.Time
	var first, last time.Time
	for _, s := range samples {
		if isPost(s) {
			r.post++
		} else {
			r.gets++
		}
		if first.IsZero() || s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
		if s.OK() {
			r.ok++
			oks = append(oks, s.End)
			continue
		}
		if k := why(s); k != "" {
			r.excused[k]++
			continue
		}
		r.failed = append(r.failed, s)
	}
	sort.Slice(oks, func(i, j int) bool { return oks[i].Before(oks[j]) })
	prev := first
	for _, at := range append(oks, last) {
		r.longestGap = max(r.longestGap, at.Sub(prev))
		prev = at
	}
	return r
}

// add appends scenario figures ("key=value") to the line.
func (r *result) add(format string, args ...any) {
	r.figures = append(r.figures, fmt.Sprintf(format, args...))
}

// line is the scenario's printed line.
func (r *result) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: sent=%d ok=%d failed=%d longest_gap=%s get=%d post=%d", r.name, r.sent, r.ok,
		len(r.failed), r.longestGap.Round(time.Millisecond), r.gets, r.post)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range r.excused {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, " %s=%d", k, r.excused[k])
	}
	for _, f := range r.figures {
		b.WriteString(" " + f)
	}
	return b.String()
}

// finish prints the line and fails the test for every broken promise (the first few in detail).
func (r *result) finish(t *testing.T) {
	t.Helper()
	fmt.Println(r.line())
	if r.sent == 0 {
		t.Errorf("%s: no request was sent", r.name)
	}
	if len(r.failed) > 0 {
		var b strings.Builder
		for i, s := range r.failed {
			if i == 8 {
				fmt.Fprintf(&b, "\n  … and %d more", len(r.failed)-i)
				break
			}
			b.WriteString("\n  " + s.String())
		}
		t.Errorf("%s: %d requests broke the promise:%s", r.name, len(r.failed), b.String())
	}
}

// checkDeliveries fails the test for every POST id delivered more than once, and for a POST answered
// 200 that no platform recorded (the record would be broken); it adds the figures dup_posts and
// lost_delivered (POSTs that failed after reaching a platform).
func (r *result) checkDeliveries(t *testing.T, delivered map[string]int) {
	t.Helper()
	dups, lostDelivered := 0, 0
	var dupIDs []string
	for id, n := range delivered {
		if n > 1 {
			dups++
			if len(dupIDs) < 8 {
				dupIDs = append(dupIDs, fmt.Sprintf("%s×%d", id, n))
			}
		}
	}
	for _, s := range r.samples {
		if !isPost(s) {
			continue
		}
		switch {
		case s.OK() && delivered[s.ID] == 0:
			t.Errorf("%s: POST %s answered 200 but no platform recorded it", r.name, s.ID)
		case !s.OK() && delivered[s.ID] > 0:
			lostDelivered++
		}
	}
	r.add("dup_posts=%d", dups)
	if r.excused["post_lost"] > 0 {
		r.add("post_lost_delivered=%d", lostDelivered)
	}
	if dups > 0 {
		t.Errorf("%s: %d POSTs delivered more than once: %s", r.name, dups, strings.Join(dupIDs, ", "))
	}
}

// servedBy counts the successful answers by server among samples matching from.
func servedBy(samples []sample, match func(sample) bool) map[string]int {
	out := map[string]int{}
	for _, s := range samples {
		if s.OK() && match(s) {
			out[s.ServedBy]++
		}
	}
	return out
}
