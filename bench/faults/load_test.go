package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// requestIDHeader tags every POST with a unique id; the simulated platforms record each id that
// reaches them, so a POST delivered twice is seen.
const requestIDHeader = "X-Request-Id"

// loadOpts shapes the steady load of a scenario.
type loadOpts struct {
	workers   int           // concurrent clients (each one keep-alive connection at a time)
	rate      int           // requests per second over all workers, paced (slots missed are skipped)
	postEvery int           // every postEvery-th request of a worker is a POST (0: GETs only)
	timeout   time.Duration // per request; beyond queue_timeout + response_timeout
}

var defaultLoad = loadOpts{workers: 8, rate: 300, postEvery: 5, timeout: 20 * time.Second}

// sample is one request of the load and its outcome.
type sample struct {
	start, end time.Time
	post       bool
	id         string // X-Request-Id of a POST
	status     int    // 0 when err is set
	servedBy   string // X-Served-By of the answer
	body       string // the first bytes of an answer other than 200
	err        error
}

func (s sample) ok() bool { return s.err == nil && s.status == http.StatusOK }

func (s sample) method() string {
	if s.post {
		return "POST"
	}
	return "GET"
}

// refused reports whether the request found no listener (connection refused).
func (s sample) refused() bool { return s.err != nil && errors.Is(s.err, syscall.ECONNREFUSED) }

// noServer reports whether the answer is fairlead's own unavailable_status: 503 "no server available".
func (s sample) noServer() bool {
	return s.err == nil && s.status == http.StatusServiceUnavailable && s.servedBy == "" &&
		strings.Contains(s.body, "no server available")
}

func (s sample) String() string {
	what := fmt.Sprintf("%d %q", s.status, s.body)
	if s.err != nil {
		what = s.err.Error()
	}
	id := ""
	if s.id != "" {
		id = " " + s.id
	}
	return fmt.Sprintf("%s%s started %s, took %s: %s", s.method(), id, s.start.Format("15:04:05.000"),
		s.end.Sub(s.start).Round(time.Millisecond), what)
}

// load is a steady stream of GETs and POSTs through fairlead from a real HTTP client (net/http,
// keep-alive). Like every ordinary client, net/http resends a GET once on a fresh connection when a
// reused keep-alive connection turns out closed before any answer byte; it never resends a POST whose
// bytes may have been written. Each POST attempt carries a new id.
type load struct {
	name    string
	addr    string
	o       loadOpts
	tr      *http.Transport
	cl      *http.Client
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time

	mu      sync.Mutex
	samples []sample
	seq     int
}

// startLoad starts the load against addr; t.Cleanup stops it if the test does not.
func startLoad(t *testing.T, name, addr string, o loadOpts) *load {
	t.Helper()
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: o.workers,
		DisableCompression:  true,
		IdleConnTimeout:     30 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{name: name, addr: addr, o: o, tr: tr, cl: &http.Client{Transport: tr, Timeout: o.timeout},
		ctx: ctx, cancel: cancel, started: time.Now()}
	every := time.Duration(o.workers) * time.Second / time.Duration(o.rate)
	for w := range o.workers {
		l.wg.Add(1)
		go l.worker(w, every)
	}
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *load) worker(w int, every time.Duration) {
	defer l.wg.Done()
	body := bytes.Repeat([]byte("p"), 128)
	get := "http://" + l.addr + "/Thingworx/Things/FaultThing/Properties/value?worker=" + fmt.Sprint(w)
	post := "http://" + l.addr + "/Thingworx/Things/FaultThing/Services/Write"
	next := time.Now().Add(time.Duration(rand.Int64N(int64(every))))
	for n := 1; ; n++ {
		t := time.NewTimer(time.Until(next))
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if l.ctx.Err() != nil {
			return // both were ready: select chose the timer
		}
		isPost := l.o.postEvery > 0 && n%l.o.postEvery == 0
		var s sample
		if isPost {
			s = l.do(http.MethodPost, post, body)
		} else {
			s = l.do(http.MethodGet, get, nil)
		}
		l.mu.Lock()
		l.samples = append(l.samples, s)
		l.mu.Unlock()
		next = next.Add(every)
		if now := time.Now(); next.Before(now) {
			next = now // a slow answer: skip the missed slots rather than burst
		}
	}
}

func (l *load) do(method, url string, body []byte) sample {
	s := sample{post: method == http.MethodPost, start: time.Now()}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// Not bound to l.ctx: a request in flight when the load stops finishes (within the timeout).
	req, _ := http.NewRequest(method, url, rd)
	if s.post {
		l.mu.Lock()
		l.seq++
		s.id = fmt.Sprintf("%s-%d", l.name, l.seq)
		l.mu.Unlock()
		req.Header.Set(requestIDHeader, s.id)
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := l.cl.Do(req)
	if err != nil {
		s.err, s.end = err, time.Now()
		return s
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	s.end, s.status, s.servedBy = time.Now(), resp.StatusCode, resp.Header.Get("X-Served-By")
	if err != nil {
		s.err = fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		s.body = strings.TrimSpace(string(b[:min(len(b), 120)]))
	}
	return s
}

// firstOK returns the end of the first successful answer from server (any server if "") to a request
// started at or after from; ok is false if there is none yet.
func (l *load) firstOK(server string, from time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, s := range l.samples {
		if s.ok() && !s.start.Before(from) && (server == "" || s.servedBy == server) && (first.IsZero() || s.end.Before(first)) {
			first = s.end
		}
	}
	return first, !first.IsZero()
}

// waitOK waits (bounded) for a successful answer from server to a request started at or after from
// and returns when it ended.
func (l *load) waitOK(t *testing.T, server string, from time.Time, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	if !testkit.Within(timeout, func() bool {
		var ok bool
		at, ok = l.firstOK(server, from)
		return ok
	}) {
		t.Fatalf("%s: no successful answer from %q within %s", l.name, server, timeout)
	}
	return at
}

// count returns how many samples match.
func (l *load) count(match func(sample) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.samples {
		if match(s) {
			n++
		}
	}
	return n
}

// stop stops the workers, waits for the requests in flight (each bounded by the client timeout) and
// returns every sample. Idempotent.
func (l *load) stop() []sample {
	l.cancel()
	l.wg.Wait()
	l.tr.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.samples)
}

// verdict classifies a sample that is not a plain success: "" is a broken promise; any other string
// names an expected outcome, counted under that name.
type verdict func(s sample) string

// postLost excuses a POST that failed after it may have reached a server that died or hung: fairlead
// must not resend it, so the client sees the failure.
func postLost(s sample) string {
	if s.post && (s.err != nil || s.status == http.StatusBadGateway || s.status == http.StatusGatewayTimeout) {
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
		if s.post {
			r.post++
		} else {
			r.gets++
		}
		if first.IsZero() || s.start.Before(first) {
			first = s.start
		}
		if s.end.After(last) {
			last = s.end
		}
		if s.ok() {
			r.ok++
			oks = append(oks, s.end)
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
		if !s.post {
			continue
		}
		switch {
		case s.ok() && delivered[s.id] == 0:
			t.Errorf("%s: POST %s answered 200 but no platform recorded it", r.name, s.id)
		case !s.ok() && delivered[s.id] > 0:
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
		if s.ok() && match(s) {
			out[s.servedBy]++
		}
	}
	return out
}
