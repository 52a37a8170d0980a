package healthcheck

import (
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Target is one upstream server as the health checks see it, keyed by its address. It belongs to one
// Checker or Leader for its whole life: a reload that keeps the address keeps the Target and with it the
// health, the leader role and the run of answers. Only this package writes it; the load balancer reads
// Up on every request.
type Target struct {
	addr string

	up         atomic.Bool  // may take traffic: passes its checks (a leader pool: it is the leader)
	answered   atomic.Bool  // at least one probe answered
	lastStart  atomic.Int64 // unix nanos when the latest probe started
	inProgress atomic.Int64 // unix nanos when the probe in progress started; 0 when none is
	lastPassAt atomic.Int64 // unix nanos when the latest passing probe started
	lastStatus atomic.Int32
	latency    atomic.Int64 // of the latest probe, nanoseconds
	lastErr    atomic.Pointer[string]
	probes     atomic.Uint64
	passive    atomic.Int32 // live-traffic failures in a row (see Checker.Report)
	backup     atomic.Bool  // a backup server: elected, or probed for failback, after the primaries
	awaited    atomic.Int32 // requests waiting for it to pass a probe (AwaitPass)

	// Guarded by the owning Checker's or Leader's mutex.
	run, fails int  // consecutive passing / failing answers
	first      bool // no answer yet: the first decides the initial state
	// A leader pool's view of a server beside the election: misses counts its probes in a row that
	// got no serving answer (refused, timed out, another status than 200, 400, 401 or 503); lost is
	// true from the fall-th such miss (ServerDown published) until its next serving answer (ServerUp).
	misses int
	lost   bool

	kick chan struct{} // probe now
	wake chan struct{} // the pace changed: recompute the wait
	stop func()        // ends the target's probe loop
	// retry ends a passive-only target's down time (no active probe); nil otherwise.
	retry *time.Timer
}

// NewTarget returns the health state of the server at addr: not up, never probed.
func NewTarget(addr string) *Target {
	return &Target{addr: addr, first: true, kick: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

// Addr is the server's address (host:port).
func (t *Target) Addr() string { return t.addr }

// SetBackup marks the server as a backup (true) or a primary (false). It is configuration, not health:
// the pool sets it before it hands the target to Set. A Leader elects a backup only when no primary
// answers 200; while traffic is on backups, primaries are probed at least every FailbackInterval.
func (t *Target) SetBackup(b bool) { t.backup.Store(b) }

// Backup reports whether the server is a backup.
func (t *Target) Backup() bool { return t.backup.Load() }

// Up reports whether the server may take new traffic by its health: it passes its checks, or, in a
// leader pool, it is the elected leader. Lock-free and allocation-free.
func (t *Target) Up() bool { return t.up.Load() }

// AwaitPass registers a waiter for t's next passing probe: until the returned count of waiters is
// given back with EndAwaitPass, every probe of t that passes wakes its pool's waiters (event.Bus.Wake),
// as a change would. A request that failed on t and may go to it again once it answered for itself
// (PassedSince) waits so, without every other probe answer of the pool waking it.
func (t *Target) AwaitPass() { t.awaited.Add(1) }

// EndAwaitPass ends a wait that AwaitPass began.
func (t *Target) EndAwaitPass() { t.awaited.Add(-1) }

// PassedSince reports whether a probe that started after since passed (a LeaderCheck answered 200, a
// health check 2xx/3xx): the server answered for itself after a failure was seen.
func (t *Target) PassedSince(since time.Time) bool { return t.lastPassAt.Load() > since.UnixNano() }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// probeAddr is where probes of addr go: the same host, on port if non-zero.
func probeAddr(addr string, port int) string {
	if port == 0 {
		return addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// ServerStatus is a snapshot of one server's check state, for the admin endpoints.
type ServerStatus struct {
	Addr       string    `json:"addr"`                 // the server's address
	Up         bool      `json:"up"`                   // passes its checks (in a leader pool: is the leader)
	Answered   bool      `json:"answered"`             // at least one probe answered
	LastStatus int       `json:"last_status"`          // status of the last answer (0 on a transport error)
	LastError  string    `json:"last_error,omitempty"` // the last probe's error, if it failed without an answer
	LastProbe  time.Time `json:"last_probe"`           // when the last probe was sent
	LatencyMs  float64   `json:"latency_ms"`           // how long the last probe took
	Run        int       `json:"run"`                  // consecutive passing answers (200 for a LeaderCheck)
	Fails      int       `json:"fails"`                // consecutive failing answers
	Passive    int       `json:"passive_failures"`     // live failures in a row (refused, reset, timed out)
	Probes     uint64    `json:"probes"`               // probes sent
	// Lost (a leader pool's server) is true once fall LeaderChecks in a row got no serving answer (no
	// answer, or a status other than 200, 400, 401 and 503; from the first round if it did not answer
	// it), until its next serving answer: the server is down, not a standby ready to take over. Its
	// server_down and server_up events mark the same moments.
	Lost bool `json:"lost,omitempty"`
	// PendingSince is when the probe in progress was sent, while it has no answer (omitted when no
	// probe is in progress); last_status, last_error and latency_ms are then the answer of the probe
	// before. Overdue: it has waited longer than a server that works takes to answer (a second, or
	// half the check's timeout when that is less): a hung server shows so within a second, while its
	// timeout and fall failed probes have not yet taken it down (nor a leader out of its term).
	PendingSince time.Time `json:"probe_pending_since,omitzero"`
	Overdue      bool      `json:"probe_overdue,omitempty"`
}

// OverdueAfter is how long a probe may wait for its answer before ServerStatus calls it overdue, with
// probes that time out after timeout: a second, or half the timeout when that is less. A server that
// works answers a LeaderCheck or a health check in milliseconds; one that has not answered in a second
// is stuck, which an operator should see before the timeout (5 s for a LeaderCheck) and fall
// (3) failed probes end its term.
func OverdueAfter(timeout time.Duration) time.Duration { return min(time.Second, timeout/2) }

// status fills what the atomics hold at now, with probes that time out after timeout (Options.Timeout);
// the caller holds its lock (Run and Fails).
func (t *Target) status(now time.Time, timeout time.Duration) ServerStatus {
	st := ServerStatus{
		Addr:       t.addr,
		Up:         t.up.Load(),
		Answered:   t.answered.Load(),
		LastStatus: int(t.lastStatus.Load()),
		LatencyMs:  float64(t.latency.Load()) / 1e6,
		Passive:    int(t.passive.Load()),
		Probes:     t.probes.Load(),
		Run:        t.run,
		Fails:      t.fails,
		Lost:       t.lost,
	}
	if e := t.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	if ns := t.lastStart.Load(); ns > 0 {
		st.LastProbe = time.Unix(0, ns)
	}
	if ns := t.inProgress.Load(); ns > 0 {
		st.PendingSince = time.Unix(0, ns)
		st.Overdue = now.Sub(st.PendingSince) > OverdueAfter(timeout)
	}
	return st
}

// record stores one probe's answer in the atomics and reports whether it passed by pass.
func (t *Target) record(start time.Time, status int, err error, pass bool) {
	t.probes.Add(1)
	t.answered.Store(true)
	t.lastStatus.Store(int32(status))
	t.latency.Store(int64(time.Since(start)))
	if err != nil {
		msg := err.Error()
		t.lastErr.Store(&msg)
	} else {
		t.lastErr.Store(nil)
	}
	if pass {
		t.lastPassAt.Store(start.UnixNano())
	}
}
