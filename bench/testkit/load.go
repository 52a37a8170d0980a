package testkit

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"
)

// Load is the one client load of the fault, soak, HA and benchmark suites: workers sending HTTP
// requests over keep-alive connections — paced (a steady rate), closed-loop (each as soon as its answer
// came) or open (each slot a goroutine of its own) — and optionally WebSocket tunnels held or cycled
// through an echo, as ThingWorx edge devices do. It records every request as a Sample, the latency of
// the successful ones in a Hist, tunnel openings and closes, marks set by the test, and failures by
// reason. (The benchmark's closed loop on raw connections, whose load-side CPU is measured, is ClosedLoop
// in rawhttp.go.)
type Load struct {
	o      LoadOptions
	start  time.Time
	client *http.Client
	stop   chan struct{}
	done   chan struct{}
	// abort cuts short the requests still in flight after Stop's grace.
	abort       context.Context
	abortNow    context.CancelFunc
	stopOnce    sync.Once
	ready       chan struct{}
	readyOnce   sync.Once
	seq         atomic.Int64
	openTunnels atomic.Int64

	mu         sync.Mutex
	stopping   bool
	aborting   bool
	samples    []Sample
	unfinished int
	skipped    int
	hist       Hist
	conns      []*HTTPConn
	marks      []Mark
	tunnels    []*Tunnel
	counts     Snapshot
	errs       map[string]*errCount
}

// LoadOptions shape a Load; Addr and Request are required, every other field has a default.
type LoadOptions struct {
	// Addr is the front end, host:port.
	Addr string
	// Workers is the number of concurrent senders, each with one keep-alive connection at a time
	// (default 1; ignored when Open).
	Workers int
	// Rate is the number of requests per second over all workers, paced: a worker whose answer comes
	// later than its next slot skips the missed slots rather than burst. 0: a closed loop.
	Rate int
	// Open sends each of Rate's slots in a goroutine of its own (at most 1,024 in flight; a slot beyond
	// that is counted as skipped): a slow answer never delays the next request. net/http only.
	Open bool
	// Request is what worker w (from 0; 0 for every request when Open) sends as its n-th request (from 1).
	Request func(w, n int) Request
	// Timeout bounds one request; dials alone are bounded by a half of it (default 10s).
	Timeout time.Duration
	// Raw sends over HTTPConn (raw HTTP/1.1, fasthttp's parser) rather than net/http. Like net/http, it
	// resends once on a fresh connection a request whose reused connection closed before any answer byte.
	// Without Raw, net/http resends only idempotent requests so (a POST is never sent twice).
	Raw bool
	// IdleConnTimeout of net/http's connections (default 30s).
	IdleConnTimeout time.Duration
	// Duration ends the load by itself after it (0: at Stop).
	Duration time.Duration
	// Discard keeps no samples, only the counts (Snapshot), the failures by reason and the histogram:
	// for long runs.
	Discard bool
	// NearMark is how soon after the latest mark a failure is counted as caused by it (Snapshot.NearMark).
	NearMark time.Duration
	// Tunnels are WebSocket tunnels held beside the requests.
	Tunnels TunnelOptions
}

// TunnelOptions shape a Load's tunnels. Each opens with one echo of its asset id (the connection server
// only echoes), then either is held until the far side closes it (Echoes nil) or carries Echoes()
// messages and is closed by the device; then it opens again, until the load stops.
type TunnelOptions struct {
	Count int
	// Path of tunnel i (default "/Thingworx/WS"); Asset its X-Asset-Id (default "asset-%03d").
	Path  func(i int) string
	Asset func(i int) string
	// Echoes is how many messages a tunnel carries before the device closes it; nil: held until closed.
	Echoes func() int
	// Message is the next message to echo (default 64 bytes); Pause is the pause after each echo.
	Message func() []byte
	Pause   func() time.Duration
	// Drop is whether the device drops a tunnel without a close frame (default never).
	Drop func() bool
	// Redial is the pause after a failed dial (default 100ms); Ramp the delay between two tunnels' first
	// dials (default none).
	Redial func() time.Duration
	Ramp   time.Duration
	// Timeout bounds a tunnel's dial (a half of it), handshake and each echo (default LoadOptions.Timeout).
	Timeout time.Duration
}

// Request is one request of a Load.
type Request struct {
	Method, Path string
	Body         []byte
	// Chunked sends Body without a length (net/http only).
	Chunked bool
	// ID, when set, is sent as X-Request-Id and kept in the sample.
	ID string
	// Check, when set, judges a 200 answer; its error fails the sample.
	Check func(Answer) error
}

// RequestIDHeader carries a Request's ID.
const RequestIDHeader = "X-Request-Id"

// Answer is what Request.Check sees of a 200 answer: the body was read (Bytes) and discarded.
type Answer struct {
	Bytes  int64
	header func(string) string
}

// Header returns the answer's header field name.
func (a Answer) Header(name string) string { return a.header(name) }

// Sample is one request of a Load and its outcome.
type Sample struct {
	Start, End   time.Time
	Method, Path string
	ID           string
	Status       int    // 0 when Err is set before any answer
	ServedBy     string // X-Served-By of the answer
	Body         string // the first bytes of an answer other than 200
	Retried      bool   // resent on a fresh connection (Raw only reports it)
	Err          error
}

// OK reports whether the request was answered 200 (and passed its check).
func (s Sample) OK() bool { return s.Err == nil && s.Status == http.StatusOK }

// Kind names a failure: "" when OK; refused, reset, unreachable, timeout, eof or other for an error;
// status_NNN for another status.
func (s Sample) Kind() string {
	if s.Err != nil {
		return ErrKind(s.Err)
	}
	if s.Status != http.StatusOK {
		return "status_" + strconv.Itoa(s.Status)
	}
	return ""
}

// Reason is a failure's reason in Load.Errors: the method and the status, or "failed" when no status
// came (or a 200 failed its check).
func (s Sample) Reason() string {
	if s.Err == nil {
		return s.Method + " " + strconv.Itoa(s.Status)
	}
	return s.Method + " failed"
}

func (s Sample) String() string {
	what := fmt.Sprintf("%d %q", s.Status, s.Body)
	if s.Err != nil {
		what = s.Err.Error()
	}
	id := ""
	if s.ID != "" {
		id = " " + s.ID
	}
	return fmt.Sprintf("%s%s started %s, took %s: %s", s.Method, id, s.Start.Format("15:04:05.000"),
		s.End.Sub(s.Start).Round(time.Millisecond), what)
}

// ErrKind names an error for a report: refused, reset, unreachable, timeout, eof or other.
func ErrKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "other"
}

// Mark is a named moment of a Load.
type Mark struct {
	Name string
	At   time.Time
}

// Tunnel is one asset's tunnel over the load's lifetime.
type Tunnel struct {
	Asset       string
	First, Last string      // connection server (X-Served-By) of the first and of the latest tunnel
	Connects    []time.Time // when each tunnel opened
	Closes      []time.Time // when each held tunnel was closed by the far side
	DialFails   int
	Open        bool
	conn        *websocket.Conn
}

// Snapshot is a Load's counts at one time.
type Snapshot struct {
	Requests, OK, Failed uint64
	// OKByMethod counts the successful requests by method.
	OKByMethod map[string]uint64
	// Tunnels opened, messages echoed, failed dials, tunnels broken (an echo failed), open now.
	Tunnels, Echoes, DialFails, Broken uint64
	Open                               int64
	// NearMark counts the failures of any kind within LoadOptions.NearMark of the latest mark.
	NearMark uint64
}

// Errors is the number of failures of any kind.
func (s Snapshot) Errors() uint64 { return s.Failed + s.DialFails + s.Broken }

type errCount struct {
	n     int
	first string
}

// StartLoad starts a load; Stop ends it.
func StartLoad(o LoadOptions) *Load {
	o.Workers = max(o.Workers, 1)
	o.Timeout = cmp.Or(o.Timeout, 10*time.Second)
	o.IdleConnTimeout = cmp.Or(o.IdleConnTimeout, 30*time.Second)
	o.Tunnels.Timeout = cmp.Or(o.Tunnels.Timeout, o.Timeout)
	dial := &net.Dialer{Timeout: o.Timeout / 2}
	l := &Load{
		o:     o,
		start: time.Now(),
		client: &http.Client{Timeout: o.Timeout, Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dial.DialContext,
			MaxIdleConnsPerHost: max(o.Workers, 64),
			IdleConnTimeout:     o.IdleConnTimeout,
			DisableCompression:  true,
		}},
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		ready: make(chan struct{}),
		errs:  map[string]*errCount{},
	}
	l.abort, l.abortNow = context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if o.Duration > 0 {
		time.AfterFunc(o.Duration, l.end)
	}
	switch {
	case o.Open:
		wg.Go(func() { l.open(&wg) })
	default:
		for w := range o.Workers {
			wg.Go(func() { l.worker(w) })
		}
	}
	for i := range o.Tunnels.Count {
		tn := &Tunnel{Asset: fmt.Sprintf("asset-%03d", i)}
		if o.Tunnels.Asset != nil {
			tn.Asset = o.Tunnels.Asset(i)
		}
		l.tunnels = append(l.tunnels, tn)
	}
	for i, tn := range l.tunnels {
		wg.Go(func() {
			if l.sleep(time.Duration(i) * o.Tunnels.Ramp) {
				l.hold(i, tn)
			}
		})
	}
	if o.Tunnels.Count == 0 {
		close(l.ready)
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

// end stops the senders; idempotent.
func (l *Load) end() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		l.stopping = true
		for _, tn := range l.tunnels {
			if tn.conn != nil {
				tn.conn.Close()
			}
		}
		l.mu.Unlock()
		close(l.stop)
	})
}

// sleep waits d or until the load stops; it reports whether the whole wait passed.
func (l *Load) sleep(d time.Duration) bool {
	if d <= 0 {
		return !l.stopped()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.stop:
		return false
	}
}

func (l *Load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// worker sends its requests, paced or in a closed loop, until the load stops.
func (l *Load) worker(w int) {
	var c *HTTPConn
	if l.o.Raw {
		c = NewHTTPConn(l.o.Addr, l.o.Timeout)
		defer c.Close()
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	var period time.Duration
	next := time.Now()
	if l.o.Rate > 0 {
		period = time.Duration(float64(time.Second) * float64(l.o.Workers) / float64(l.o.Rate))
		next = next.Add(period * time.Duration(w) / time.Duration(l.o.Workers))
	}
	for n := 1; ; n++ {
		if !l.sleep(time.Until(next)) {
			return
		}
		s := l.send(c, l.o.Request(w, n))
		if !l.record(s) {
			return
		}
		if s.Err != nil {
			time.Sleep(5 * time.Millisecond) // no hot loop against a refusing proxy
		}
		if period > 0 {
			next = next.Add(period)
			if now := time.Now(); next.Before(now) {
				next = now // a slow answer: skip the missed slots rather than burst
			}
		}
	}
}

// open sends Rate requests per second, each in a goroutine of its own.
func (l *Load) open(wg *sync.WaitGroup) {
	tick := time.NewTicker(time.Second / time.Duration(max(l.o.Rate, 1)))
	defer tick.Stop()
	slots := make(chan struct{}, 1024)
	for n := 1; ; n++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			l.record(l.send(nil, l.o.Request(0, n)))
		})
	}
}

// send sends r, on c if Raw.
func (l *Load) send(c *HTTPConn, r Request) Sample {
	s := Sample{Method: r.Method, Path: r.Path, ID: r.ID, Start: time.Now()}
	if c != nil {
		l.sendRaw(c, r, &s)
	} else {
		l.sendHTTP(r, &s)
	}
	s.End = time.Now()
	return s
}

func (l *Load) sendRaw(c *HTTPConn, r Request, s *Sample) {
	var extra []string
	if r.ID != "" {
		extra = []string{RequestIDHeader, r.ID}
	}
	res := c.Do(RawRequest(r.Method, l.o.Addr, r.Path, r.Body, extra...), true)
	s.Status, s.ServedBy, s.Retried, s.Err = res.Status, res.ServedBy, res.Retried, res.Err
	if res.Err != nil {
		return
	}
	resp := c.Answer()
	if s.Status != http.StatusOK {
		b := resp.Body()
		s.Body = strings.TrimSpace(string(b[:min(len(b), 120)]))
	} else if r.Check != nil {
		s.Err = r.Check(Answer{Bytes: int64(len(resp.Body())), header: func(k string) string { return string(resp.Header.Peek(k)) }})
	}
}

func (l *Load) sendHTTP(r Request, s *Sample) {
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
		if r.Chunked {
			body = io.MultiReader(body) // no length known: net/http sends it chunked
		}
	}
	// Not bound to the load's end: a request in flight when the load stops finishes (within the
	// timeout) unless Stop's grace passes.
	req, _ := http.NewRequestWithContext(l.abort, r.Method, "http://"+l.o.Addr+r.Path, body)
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if r.Chunked {
		req.ContentLength = -1
	}
	if r.ID != "" {
		req.Header.Set(RequestIDHeader, r.ID)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		s.Err = err
		return
	}
	defer resp.Body.Close()
	s.Status, s.ServedBy = resp.StatusCode, resp.Header.Get("X-Served-By")
	var head bytes.Buffer
	w := io.Writer(io.Discard)
	if resp.StatusCode != http.StatusOK {
		w = &head
	}
	n, err := io.Copy(w, resp.Body)
	if resp.StatusCode != http.StatusOK {
		b := head.Bytes()
		s.Body = strings.TrimSpace(string(b[:min(len(b), 120)]))
	}
	switch {
	case err != nil:
		s.Err = fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	case resp.StatusCode == http.StatusOK && r.Check != nil:
		s.Err = r.Check(Answer{Bytes: n, header: resp.Header.Get})
	}
}

// record counts s and keeps it; false when the load is being aborted (s was cut short: not kept).
func (l *Load) record(s Sample) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.aborting {
		l.unfinished++
		return false
	}
	l.counts.Requests++
	if s.OK() {
		l.counts.OK++
		if l.counts.OKByMethod == nil {
			l.counts.OKByMethod = map[string]uint64{}
		}
		l.counts.OKByMethod[s.Method]++
		l.hist.Add(s.End.Sub(s.Start))
	} else {
		what := s.String()
		if s.Err == nil {
			what = fmt.Sprintf("%s %s: %d %s", s.Method, s.Path, s.Status, s.Body)
		}
		l.failLocked(&l.counts.Failed, s.Reason(), what)
	}
	if !l.o.Discard {
		l.samples = append(l.samples, s)
	}
	return true
}

// failLocked counts one failure of reason; mu held.
func (l *Load) failLocked(counter *uint64, reason, what string) {
	*counter++
	if n := len(l.marks); n > 0 && time.Since(l.marks[n-1].At) < l.o.NearMark {
		l.counts.NearMark++
	}
	e := l.errs[reason]
	if e == nil {
		e = &errCount{first: what}
		l.errs[reason] = e
	}
	e.n++
}

func (l *Load) fail(counter *uint64, reason string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopping {
		l.failLocked(counter, reason, err.Error())
	}
}

// hold is tunnel i over the load's lifetime: dial, check one echo, carry its echoes or wait for the
// close, dial again.
func (l *Load) hold(i int, tn *Tunnel) {
	o := l.o.Tunnels
	path := "/Thingworx/WS"
	if o.Path != nil {
		path = o.Path(i)
	}
	for !l.stopped() {
		conn, server, err := DialTunnel(l.o.Addr, path, tn.Asset, o.Timeout)
		if err != nil {
			l.fail(&l.counts.DialFails, "tunnel dial", err)
			l.mu.Lock()
			if !l.stopping {
				tn.DialFails++
			}
			l.mu.Unlock()
			redial := 100 * time.Millisecond
			if o.Redial != nil {
				redial = o.Redial()
			}
			l.sleep(redial)
			continue
		}
		l.mu.Lock()
		stopping := l.stopping
		if !stopping {
			tn.First = cmp.Or(tn.First, server)
			tn.Last, tn.Open, tn.conn = server, true, conn
			tn.Connects = append(tn.Connects, time.Now())
			l.counts.Tunnels++
		}
		all := !stopping && l.allOpenedOnce()
		l.mu.Unlock()
		if stopping {
			conn.Close()
			return
		}
		if all {
			l.readyOnce.Do(func() { close(l.ready) })
		}
		l.openTunnels.Add(1)
		if o.Echoes == nil {
			// The connection server only echoes: a read ends when the tunnel closes.
			_, _, _ = conn.ReadMessage()
		} else {
			l.carry(conn)
		}
		conn.Close()
		l.openTunnels.Add(-1)
		l.mu.Lock()
		tn.Open, tn.conn = false, nil
		if !l.stopping && o.Echoes == nil {
			tn.Closes = append(tn.Closes, time.Now())
		}
		l.mu.Unlock()
	}
}

// carry echoes the tunnel's messages with their pauses, then closes it as the device.
func (l *Load) carry(conn *websocket.Conn) {
	o := l.o.Tunnels
	for range o.Echoes() {
		msg := bytes.Repeat([]byte("e"), 64)
		if o.Message != nil {
			msg = o.Message()
		}
		if err := Echo(conn, msg, o.Timeout); err != nil {
			l.fail(&l.counts.Broken, "tunnel broken", err)
			return
		}
		l.mu.Lock()
		l.counts.Echoes++
		l.mu.Unlock()
		if o.Pause != nil && !l.sleep(o.Pause()) {
			break
		}
	}
	if o.Drop == nil || !o.Drop() {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
	}
}

// allOpenedOnce reports whether every tunnel opened at least once; mu held.
func (l *Load) allOpenedOnce() bool {
	for _, tn := range l.tunnels {
		if tn.First == "" {
			return false
		}
	}
	return true
}

// DialTunnel opens a WebSocket through the front end at addr on path as device asset (X-Asset-Id),
// checks that it carries one message both ways, and returns the connection server that answered the
// upgrade (X-Served-By). timeout bounds the dial (a half of it), the handshake and the echo.
func DialTunnel(addr, path, asset string, timeout time.Duration) (*websocket.Conn, string, error) {
	d := websocket.Dialer{
		HandshakeTimeout: timeout,
		ReadBufferSize:   4096,
		WriteBufferSize:  4096,
		NetDialContext:   (&net.Dialer{Timeout: timeout / 2}).DialContext,
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, resp, err := d.DialContext(ctx, "ws://"+addr+path, http.Header{"X-Asset-Id": {asset}})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			return nil, "", fmt.Errorf("%w (status %d)", err, resp.StatusCode)
		}
		return nil, "", err
	}
	if err := Echo(conn, []byte(asset), timeout); err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("no echo: %w", err)
	}
	return conn, resp.Header.Get("X-Served-By"), nil
}

// Echo sends msg and waits (at most timeout) for the same message back.
func Echo(ws *websocket.Conn, msg []byte, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	_ = ws.SetWriteDeadline(deadline)
	if err := ws.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		return err
	}
	_ = ws.SetReadDeadline(deadline)
	_, got, err := ws.ReadMessage()
	if err != nil {
		return err
	}
	_ = ws.SetReadDeadline(time.Time{})
	if !bytes.Equal(got, msg) {
		return errors.New("the echo differs from the message")
	}
	return nil
}

// Started is when the load started.
func (l *Load) Started() time.Time { return l.start }

// Ready is closed once every tunnel opened once.
func (l *Load) Ready() <-chan struct{} { return l.ready }

// Done is closed once the load ended (Duration passed or Stop) and its senders returned.
func (l *Load) Done() <-chan struct{} { return l.done }

// Mark records a named moment.
func (l *Load) Mark(name string) {
	l.mu.Lock()
	l.marks = append(l.marks, Mark{name, time.Now()})
	l.mu.Unlock()
}

// Samples returns a copy of the samples finished so far, in completion order.
func (l *Load) Samples() []Sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.samples)
}

// Snapshot returns the counts now.
func (l *Load) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.counts
	s.OKByMethod = maps.Clone(s.OKByMethod)
	s.Open = l.openTunnels.Load()
	return s
}

// State is a consistent copy of a load's record at one time.
type State struct {
	Samples []Sample
	Marks   []Mark
	Tunnels []Tunnel
	Skipped int // Open's slots not sent (too many in flight)
	Hist    Hist
}

// State returns a copy of the load's record now.
func (l *Load) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := State{Samples: slices.Clone(l.samples), Marks: slices.Clone(l.marks), Skipped: l.skipped, Hist: l.hist}
	for _, tn := range l.tunnels {
		c := *tn
		c.conn, c.Connects, c.Closes = nil, slices.Clone(tn.Connects), slices.Clone(tn.Closes)
		st.Tunnels = append(st.Tunnels, c)
	}
	return st
}

// Count returns how many samples match.
func (l *Load) Count(match func(Sample) bool) int {
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

// FirstOK returns the end of the first successful answer from server (any server if "") to a request
// started at or after from; ok is false if there is none yet.
func (l *Load) FirstOK(server string, from time.Time) (at time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.samples {
		if s.OK() && !s.Start.Before(from) && (server == "" || s.ServedBy == server) && (at.IsZero() || s.End.Before(at)) {
			at = s.End
		}
	}
	return at, !at.IsZero()
}

// Errors lists the failures by reason ("GET 503", "POST failed", "tunnel dial", "tunnel broken"), most
// frequent first, each with its first occurrence.
func (l *Load) Errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	reasons := make([]string, 0, len(l.errs))
	for r := range l.errs {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(l.errs[b].n-l.errs[a].n, strings.Compare(a, b)) })
	var lines []string
	for _, r := range reasons {
		lines = append(lines, fmt.Sprintf("%d × %s (first: %s)", l.errs[r].n, r, l.errs[r].first))
	}
	return lines
}

// Stop ends the load: it waits up to grace for the requests in flight, then cuts them short (they are
// not samples, only counted: unfinished); tunnels are closed. It returns every sample. Idempotent.
func (l *Load) Stop(grace time.Duration) (samples []Sample, unfinished int) {
	l.end()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
		l.mu.Lock()
		l.aborting = true
		conns := l.conns
		l.mu.Unlock()
		for _, c := range conns {
			c.Abort()
		}
		l.abortNow()
		<-l.done
	}
	l.abortNow()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.samples), l.unfinished
}

// Jitter returns a duration in [lo, hi).
func Jitter(lo, hi time.Duration) time.Duration { return lo + rand.N(hi-lo) }
