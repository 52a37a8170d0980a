// Package healthcheck probes upstream servers and decides who may take traffic. It is the only writer of
// server health and of "who is the leader"; the load balancer reads the result through cheap atomic
// predicates (Leader.Current) and never probes on its own.
//
// Leader implements the ThingWorx HA rules: every platform server is polled with
// GET /Thingworx/Admin/HA/LeaderCheck and Basic credentials; 200 means leader, and the leader is replaced
// only after fall consecutive non-200 answers (see election).
package healthcheck

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Probe is what every health check sends, to which servers, and how often. Durations must be positive;
// the constructors do not validate them (the config loader does).
type Probe struct {
	// Servers are the addresses (host:port) probed, in config order.
	Servers []string
	// Path is probed with GET.
	Path string
	// Credentials is base64 of user:password, sent as "Authorization: Basic <Credentials>"; "" sends none.
	// It is never logged.
	Credentials string
	// Interval and IntervalMax bound the random steady-state wait between two probes of one server.
	Interval, IntervalMax time.Duration
	// FastInterval is the probe period while things are failing (see Leader and Checker).
	FastInterval time.Duration
	// Timeout bounds one probe; a probe that times out has failed.
	Timeout time.Duration
	// Fall is the number of consecutive failed answers that take the leader (or a server) down.
	Fall int
	// Logf logs state changes. Default log.Printf.
	Logf func(format string, args ...any)
	// Rand returns a number in [0, 1) for probe jitter. Default math/rand/v2.Float64. Tests inject one.
	Rand func() float64
}

// LeaderOptions configures a Leader: Path is the LeaderCheck, e.g. "/Thingworx/Admin/HA/LeaderCheck",
// 200 is a leader answer, and FastInterval applies while the leader is failing or unknown.
type LeaderOptions struct {
	Probe
	// OnProbe, if set, is called after every probe with the server index and the answer (status 0 on a
	// transport error). It runs on the prober goroutine and must be quick.
	OnProbe func(server, status int, err error)
}

// Leader polls every server of a leader pool and tracks the current leader.
//
// Current is safe for concurrent use and free of locks and allocations: it is on every request's path.
type Leader struct {
	o       LeaderOptions
	servers []*leaderServer

	current     atomic.Int32 // index of the leader, -1 while none is known
	splitBrains atomic.Uint64
	changes     atomic.Uint64
	lastTrigger atomic.Int64 // unix nanos of the last accepted Trigger

	mu       sync.Mutex
	el       *election
	notify   chan struct{} // closed and replaced after every probe answer; see Changed
	ready    chan struct{} // closed once the first round of probes has answered
	answered int           // servers that answered in the first round
}

// leaderServer is the probe state of one server. Fields written by its prober goroutine are atomics so
// that Status can read them.
type leaderServer struct {
	addr    string
	probe   *prober
	trigger chan struct{} // probe now
	wake    chan struct{} // the pace changed: recompute the next probe time

	lastStart  atomic.Int64 // unix nanos when the latest probe started
	lastOKAt   atomic.Int64 // unix nanos when the latest probe that answered 200 started
	lastStatus atomic.Int32
	lastErr    atomic.Pointer[string]
	probes     atomic.Uint64
}

// NewLeader returns a Leader for o. Start begins probing.
func NewLeader(o LeaderOptions) *Leader {
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	l := &Leader{
		o:      o,
		el:     newElection(len(o.Servers), o.Fall),
		notify: make(chan struct{}),
		ready:  make(chan struct{}),
	}
	l.current.Store(-1)
	for _, addr := range o.Servers {
		l.servers = append(l.servers, &leaderServer{
			addr:    addr,
			probe:   newProber(addr, &o.Probe),
			trigger: make(chan struct{}, 1),
			wake:    make(chan struct{}, 1),
		})
	}
	return l
}

// Start launches one prober goroutine per server; they stop when ctx is done. The first probe of every
// server is sent at once.
func (l *Leader) Start(ctx context.Context) {
	for i := range l.servers {
		go l.probeLoop(ctx, i)
	}
	// The first round is over when every server answered or, at the latest, after Timeout (plus a
	// little for scheduling).
	go func() {
		t := time.NewTimer(l.o.Timeout + 100*time.Millisecond)
		defer t.Stop()
		select {
		case <-l.ready:
		case <-t.C:
			l.mu.Lock()
			l.publishLocked(l.finishFirstRoundLocked())
			l.mu.Unlock()
			l.wakeAll()
		case <-ctx.Done():
		}
	}()
}

// Ready is closed once the first round of probes has answered (bounded by the probe timeout).
func (l *Leader) Ready() <-chan struct{} { return l.ready }

// Current returns the index of the leader, or -1 if none is known.
func (l *Leader) Current() int { return int(l.current.Load()) }

// Changed returns a channel that is closed after the next probe answer of any server. Waiters re-check
// Current (or Confirmed) when it closes, then call Changed again.
func (l *Leader) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notify
}

// Confirmed reports whether server i answered a LeaderCheck with 200 on a probe that started after since.
// The proxy uses it to tell "the leader is fine, the 503 was its own" from "the probes have not settled".
func (l *Leader) Confirmed(i int, since time.Time) bool {
	return l.servers[i].lastOKAt.Load() > since.UnixNano()
}

// Trigger asks for an immediate probe of every server, because live traffic to the leader was refused,
// reset or answered 503. It does not itself count as an answer. Triggers closer together than a quarter
// of FastInterval (at least 50ms, at most 500ms) are merged, so an error storm cannot become a probe storm.
func (l *Leader) Trigger() {
	gap := min(max(l.o.FastInterval/4, 50*time.Millisecond), 500*time.Millisecond)
	now := time.Now().UnixNano()
	last := l.lastTrigger.Load()
	if now-last < int64(gap) || !l.lastTrigger.CompareAndSwap(last, now) {
		return
	}
	for _, s := range l.servers {
		select {
		case s.trigger <- struct{}{}:
		default:
		}
	}
}

// SplitBrains returns how many times a second server answered 200 while the leader was healthy.
func (l *Leader) SplitBrains() uint64 { return l.splitBrains.Load() }

// Changes returns how many times the leader changed (including to and from "none").
func (l *Leader) Changes() uint64 { return l.changes.Load() }

// ServerStatus is a snapshot of one server's probe state, for the admin endpoints.
type ServerStatus struct {
	Addr       string    `json:"addr"`
	Leader     bool      `json:"leader,omitempty"`
	Up         bool      `json:"up"`
	LastStatus int       `json:"last_status"`
	LastError  string    `json:"last_error,omitempty"`
	LastProbe  time.Time `json:"last_probe"`
	Run        int       `json:"run"`   // consecutive 200 answers
	Fails      int       `json:"fails"` // consecutive non-200 answers
	Probes     uint64    `json:"probes"`
}

// Status returns a snapshot of every server.
func (l *Leader) Status() []ServerStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ServerStatus, len(l.servers))
	for i, s := range l.servers {
		st := ServerStatus{
			Addr:       s.addr,
			Leader:     l.el.leader == i,
			Up:         l.el.leader == i,
			LastStatus: int(s.lastStatus.Load()),
			Run:        l.el.runs[i],
			Fails:      l.el.fails[i],
			Probes:     s.probes.Load(),
		}
		if e := s.lastErr.Load(); e != nil {
			st.LastError = *e
		}
		if ns := s.lastStart.Load(); ns > 0 {
			st.LastProbe = time.Unix(0, ns)
		}
		out[i] = st
	}
	return out
}

func (l *Leader) probeLoop(ctx context.Context, i int) {
	s := l.servers[i]
	timer := time.NewTimer(0) // the first probe goes at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.trigger:
		case <-s.wake:
			timer.Stop()
			if d := time.Until(l.nextProbe(s)); d > 0 {
				timer.Reset(d)
				continue
			}
		}
		timer.Stop()
		l.probeOnce(ctx, i)
		timer.Reset(time.Until(l.nextProbe(s)))
	}
}

// nextProbe is when server s is due: FastInterval after its latest probe while the leader is failing or
// unknown, otherwise a random time in [Interval, IntervalMax] after it.
func (l *Leader) nextProbe(s *leaderServer) time.Time {
	l.mu.Lock()
	fast := l.el.failing()
	l.mu.Unlock()
	last := time.Unix(0, s.lastStart.Load())
	if fast {
		return last.Add(l.o.FastInterval)
	}
	jitter := time.Duration(l.o.Rand() * float64(l.o.IntervalMax-l.o.Interval))
	return last.Add(l.o.Interval + jitter)
}

func (l *Leader) probeOnce(ctx context.Context, i int) {
	defer func() {
		// A checker must never take the process down; log and carry on with the next probe.
		if r := recover(); r != nil {
			l.o.Logf("healthcheck: probe of %s panicked: %v", l.servers[i].addr, r)
		}
	}()
	s := l.servers[i]
	start := time.Now()
	s.lastStart.Store(start.UnixNano())
	status, err := s.probe.get()
	if ctx.Err() != nil {
		return
	}
	s.probes.Add(1)
	s.lastStatus.Store(int32(status))
	if err != nil {
		msg := err.Error()
		s.lastErr.Store(&msg)
	} else {
		s.lastErr.Store(nil)
	}
	ok := err == nil && status == fasthttp.StatusOK
	if ok {
		s.lastOKAt.Store(start.UnixNano())
	}
	if l.o.OnProbe != nil {
		l.o.OnProbe(i, status, err)
	}
	l.record(i, ok, status, err)
}

// record feeds one answer to the election and publishes the result.
func (l *Leader) record(i int, ok bool, status int, err error) {
	l.mu.Lock()
	wasFailing := l.el.failing()
	if !ok && i == l.el.leader {
		what := fmt.Sprintf("status %d", status)
		if err != nil {
			what = err.Error()
		}
		l.o.Logf("healthcheck: leader %s answered %s", l.servers[i].addr, what)
	}
	out := l.el.observe(i, ok)
	if !l.el.ready {
		l.answered++
		if l.answered == len(l.servers) {
			out = l.finishFirstRoundLocked()
		}
	}
	l.publishLocked(out)
	nowFailing := l.el.failing()
	l.mu.Unlock()

	if wasFailing != nowFailing {
		l.wakeAll()
	}
}

// wakeAll switches every prober between the normal and the fast pace now, not after its current wait.
func (l *Leader) wakeAll() {
	for _, s := range l.servers {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (l *Leader) finishFirstRoundLocked() outcome {
	if l.el.ready {
		return outcome{old: l.el.leader}
	}
	out := l.el.finishFirstRound()
	close(l.ready)
	if l.el.leader < 0 {
		l.o.Logf("healthcheck: no leader after the first round of probes")
	}
	return out
}

func (l *Leader) publishLocked(out outcome) {
	if out.splitBrain {
		l.splitBrains.Add(1)
		l.o.Logf("healthcheck: split brain: more than one server answers 200; keeping leader %s", l.addr(l.el.leader))
	}
	if out.changed {
		l.changes.Add(1)
		l.current.Store(int32(l.el.leader))
		l.o.Logf("healthcheck: leader is now %s (was %s)", l.addr(l.el.leader), l.addr(out.old))
	}
	close(l.notify)
	l.notify = make(chan struct{})
}

func (l *Leader) addr(i int) string {
	if i < 0 {
		return "none"
	}
	return l.servers[i].addr
}
