package admin

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// What the status document remembers of the past, so that a page opened after an incident shows it:
// the last events, each pool's request and error counts over the last hour at a coarse step, each
// server's state since when and its last change, when each alarm began, and the last failed reload
// while it is the latest. All of it is in memory and bounded; a binary upgrade hands it to the new
// process (Export, Import), a restart forgets it.
//
// History knows no clock of its own: every method that depends on time takes the time, so that tests
// drive it with chosen times and no sleeps. Package lb calls Record from the event bus, Sample and
// Observe from a ticker and from Status, and Fill on each status document.

const (
	// EventHistory is how many events (all kinds but check_answered) the status document carries.
	EventHistory = 500
	// RateStep is the step of the rate history; RateSlots the number of steps kept (one hour).
	RateStep  = 10 * time.Second
	RateSlots = 360
	// EventDetailMax bounds the detail of a remembered event (the stream sends it whole): 500 events
	// stay small enough for every snapshot of /api/status.
	EventDetailMax = 512
)

// The server states: one vocabulary for /api/status (ServerStatus.State), /metrics
// (fairlead_server_state) and the status page.
const (
	StateUp      = "up"      // takes traffic: passes its checks (in a leader pool: the leader) in the tier serving
	StateStandby = "standby" // healthy but not serving: a non-leader of a leader pool that answers its check, or a backup at rest
	StateDown    = "down"    // no answer, refused, or failing its checks (or fall live failures in a row)
	StateDrain   = "drain"   // an operator drained it: no new traffic, tunnels stay
	StateMaint   = "maint"   // an operator put it in maintenance: no traffic
	StateRemoved = "removed" // a server set change removed it; it drains
)

// ServerStates lists every server state, in the order above.
var ServerStates = []string{StateUp, StateStandby, StateDown, StateDrain, StateMaint, StateRemoved}

// The alarm kinds (Alarm.Kind).
const (
	AlarmNoLeader = "no_leader" // a leader pool has no leader
	AlarmNoServer = "no_server" // a pool has no available server
	// AlarmRedundancyLost: a pool of two servers or more serves, but with fewer than two that can
	// serve (up, or a standby ready to take over): the next failure is an outage.
	AlarmRedundancyLost = "redundancy_lost"
)

// The alarm severities (Alarm.Severity).
const (
	SeverityCritical = "critical" // the pool does not serve (no_leader, no_server): red
	SeverityWarning  = "warning"  // the pool serves, one failure from not serving (redundancy_lost): amber
)

// History is the bounded memory of the status document. It is safe for concurrent use.
type History struct {
	mu      sync.Mutex
	events  [EventHistory]StreamEvent // a ring
	nEvents int                       // events recorded (the ring holds the last EventHistory)
	reload  *ReloadFailure            // the last reload event, when it was a failure
	rates   map[string]*rateRing
	servers map[serverKey]*serverHistory
	alarms  map[Alarm]time.Time // by Kind and Pool (Since zero): when it began
}

type serverKey struct{ pool, addr string }

type serverHistory struct {
	state string
	since time.Time
	seen  time.Time // the last observation: an older one arriving late is ignored
	last  *StateChange
}

// rateRing is one pool's steps: slot idx%RateSlots holds step idx.
type rateRing struct {
	slots            [RateSlots]struct{ req, err uint64 }
	first, last      int64 // step indexes of the oldest and the current step
	through          time.Time
	lastReq, lastErr uint64 // the counters at the last sample
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{rates: map[string]*rateRing{}, servers: map[serverKey]*serverHistory{}, alarms: map[Alarm]time.Time{}}
}

// Record keeps e (an event bus subscriber: quick, never blocks for long). Probe answers are not kept.
func (h *History) Record(e event.Event) {
	if e.Kind == event.CheckAnswered {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	se := streamEventOf(e)
	se.Detail = shorten(se.Detail, EventDetailMax)
	h.events[h.nEvents%EventHistory] = se
	h.nEvents++
	switch e.Kind {
	case event.ReloadFailed:
		h.reload = &ReloadFailure{Time: e.Time, Detail: e.Detail}
	case event.ReloadApplied:
		h.reload = nil
	}
}

// PoolCount is a pool's counters at a Sample.
type PoolCount struct {
	Pool             string
	Requests, Errors uint64
}

// Sample adds what each pool counted since the previous sample to the step of now; pools not in
// pools are forgotten. A counter that went back (a reload replaced the pool) counts from zero.
func (h *History) Sample(now time.Time, pools []PoolCount) {
	h.mu.Lock()
	defer h.mu.Unlock()
	idx := now.UnixNano() / int64(RateStep)
	seen := make(map[string]bool, len(pools))
	for _, pc := range pools {
		seen[pc.Pool] = true
		r := h.rates[pc.Pool]
		if r == nil {
			// The first sample only sets the counters: what came before is not known to fall in this step.
			h.rates[pc.Pool] = &rateRing{first: idx, last: idx, through: now, lastReq: pc.Requests, lastErr: pc.Errors}
			continue
		}
		if idx < r.last {
			continue // a sample older than the current step: its counts are in it already
		}
		for i := r.last + 1; i <= idx && i <= r.last+RateSlots; i++ {
			r.slots[i%RateSlots] = struct{ req, err uint64 }{}
		}
		r.last = idx
		r.first = max(r.first, idx-RateSlots+1)
		s := &r.slots[idx%RateSlots]
		s.req += delta(pc.Requests, r.lastReq)
		s.err += delta(pc.Errors, r.lastErr)
		r.lastReq, r.lastErr, r.through = pc.Requests, pc.Errors, now
	}
	for name := range h.rates {
		if !seen[name] {
			delete(h.rates, name)
		}
	}
}

func delta(now, before uint64) uint64 {
	if now < before {
		return now
	}
	return now - before
}

// Observe records the states of st's servers and its alarms as seen at now, and fills each server's
// Since and LastChange and each alarm's Since. Servers and alarms absent from st are forgotten. An
// observation older than one already recorded for a server does not change its state.
func (h *History) Observe(now time.Time, st *Status) {
	now = now.Truncate(time.Second)
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[serverKey]bool{}
	for i := range st.Pools {
		p := &st.Pools[i]
		for j := range p.Servers {
			s := &p.Servers[j]
			k := serverKey{p.Name, s.Addr}
			seen[k] = true
			sh := h.servers[k]
			switch {
			case sh == nil:
				sh = &serverHistory{state: s.State, since: now, seen: now}
				h.servers[k] = sh
			case now.Before(sh.seen):
			case sh.state != s.State:
				sh.last = &StateChange{From: sh.state, To: s.State, Time: now}
				sh.state, sh.since, sh.seen = s.State, now, now
			default:
				sh.seen = now
			}
			s.Since = sh.since
			if sh.last != nil {
				c := *sh.last
				s.LastChange = &c
			}
		}
	}
	for k := range h.servers {
		if !seen[k] {
			delete(h.servers, k)
		}
	}
	current := map[Alarm]bool{}
	for i := range st.Alarms {
		a := &st.Alarms[i]
		k := Alarm{Kind: a.Kind, Pool: a.Pool}
		current[k] = true
		since, ok := h.alarms[k]
		if !ok {
			since = now
			h.alarms[k] = since
		}
		a.Since = since
	}
	for k := range h.alarms {
		if !current[k] {
			delete(h.alarms, k)
		}
	}
}

// Fill puts the remembered past into st: the events, each pool's rates and the last failed reload.
func (h *History) Fill(st *Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := min(h.nEvents, EventHistory)
	st.Events = make([]StreamEvent, 0, n)
	for i := h.nEvents - n; i < h.nEvents; i++ {
		st.Events = append(st.Events, h.events[i%EventHistory])
	}
	if h.reload != nil {
		r := *h.reload
		st.LastReloadFailed = &r
	}
	for i := range st.Pools {
		r := h.rates[st.Pools[i].Name]
		if r == nil {
			continue
		}
		rh := &RateHistory{StepSeconds: int(RateStep / time.Second), Start: time.Unix(0, r.first*int64(RateStep)).UTC(),
			Through: r.through.UTC()}
		for idx := r.first; idx <= r.last; idx++ {
			rh.Requests = append(rh.Requests, r.slots[idx%RateSlots].req)
			rh.Errors = append(rh.Errors, r.slots[idx%RateSlots].err)
		}
		st.Pools[i].Rates = rh
	}
}

// recent returns st without its past beyond what a running /events stream needs: no events (the
// stream sends them as they happen) and each pool's last steps only. It does not modify st.
func (st Status) recent(steps int) Status {
	st.Events = nil
	pools := make([]PoolStatus, len(st.Pools))
	copy(pools, st.Pools)
	for i := range pools {
		r := pools[i].Rates
		if r == nil || len(r.Requests) <= steps {
			continue
		}
		cut := len(r.Requests) - steps
		pools[i].Rates = &RateHistory{StepSeconds: r.StepSeconds, Start: r.Start.Add(time.Duration(cut*r.StepSeconds) * time.Second),
			Through: r.Through, Requests: r.Requests[cut:], Errors: r.Errors[cut:]}
	}
	st.Pools = pools
	return st
}

// shorten cuts s to at most n bytes, at a rune boundary, marking the cut with "…".
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// HistoryState is what a History remembers, as the old process of a binary upgrade hands it to the new
// one (Export, Import): the page and /events of the new process go on with the old one's past.
type HistoryState struct {
	Events  []StreamEvent          `json:"events"`           // oldest first
	Reload  *ReloadFailure         `json:"reload,omitempty"` // the last reload, when it failed
	Rates   map[string]RateHistory `json:"rates,omitempty"`
	Servers []ServerSince          `json:"servers,omitempty"`
	Alarms  []Alarm                `json:"alarms,omitempty"` // Kind, Pool and Since only
}

// ServerSince is a server's remembered state: since when, and its last change.
type ServerSince struct {
	Pool  string       `json:"pool"`
	Addr  string       `json:"addr"`
	State string       `json:"state"`
	Since time.Time    `json:"since"`
	Last  *StateChange `json:"last,omitempty"`
}

// Export returns what h remembers.
func (h *History) Export() HistoryState {
	var st HistoryState
	h.mu.Lock()
	defer h.mu.Unlock()
	n := min(h.nEvents, EventHistory)
	st.Events = make([]StreamEvent, 0, n)
	for i := h.nEvents - n; i < h.nEvents; i++ {
		st.Events = append(st.Events, h.events[i%EventHistory])
	}
	st.Reload = h.reload
	st.Rates = make(map[string]RateHistory, len(h.rates))
	for name, r := range h.rates {
		rh := RateHistory{StepSeconds: int(RateStep / time.Second), Start: time.Unix(0, r.first*int64(RateStep)).UTC(), Through: r.through.UTC()}
		for idx := r.first; idx <= r.last; idx++ {
			rh.Requests = append(rh.Requests, r.slots[idx%RateSlots].req)
			rh.Errors = append(rh.Errors, r.slots[idx%RateSlots].err)
		}
		st.Rates[name] = rh
	}
	for k, sh := range h.servers {
		st.Servers = append(st.Servers, ServerSince{Pool: k.pool, Addr: k.addr, State: sh.state, Since: sh.since, Last: sh.last})
	}
	for a, since := range h.alarms {
		st.Alarms = append(st.Alarms, Alarm{Kind: a.Kind, Pool: a.Pool, Since: since})
	}
	return st
}

// Import gives h the past st that another process exported (the old one of a binary upgrade, before
// this one serves): its events come before those h recorded, in their order and with their times;
// each pool's rates go on in the same steps (this process's counters count from zero at its first
// sample); servers and alarms keep their since while they stay as they were.
func (h *History) Import(st HistoryState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := min(h.nEvents, EventHistory)
	own := make([]StreamEvent, 0, n)
	for i := h.nEvents - n; i < h.nEvents; i++ {
		own = append(own, h.events[i%EventHistory])
	}
	h.nEvents = 0
	for _, e := range st.Events[max(0, len(st.Events)+len(own)-EventHistory):] {
		e.Detail = shorten(e.Detail, EventDetailMax)
		h.events[h.nEvents%EventHistory] = e
		h.nEvents++
	}
	for _, e := range own {
		h.events[h.nEvents%EventHistory] = e
		h.nEvents++
	}
	if st.Reload != nil {
		r := *st.Reload
		h.reload = &r
	}
	for name, rh := range st.Rates {
		if rh.StepSeconds != int(RateStep/time.Second) || len(rh.Requests) == 0 || len(rh.Requests) != len(rh.Errors) {
			continue // another step: not comparable
		}
		first := rh.Start.UnixNano() / int64(RateStep)
		steps := min(len(rh.Requests), RateSlots)
		skip := len(rh.Requests) - steps
		r := &rateRing{first: first + int64(skip), last: first + int64(len(rh.Requests)) - 1, through: rh.Through}
		for i := skip; i < len(rh.Requests); i++ {
			r.slots[(first+int64(i))%RateSlots] = struct{ req, err uint64 }{rh.Requests[i], rh.Errors[i]}
		}
		h.rates[name] = r
	}
	for _, s := range st.Servers {
		var last *StateChange
		if s.Last != nil {
			c := *s.Last
			last = &c
		}
		h.servers[serverKey{s.Pool, s.Addr}] = &serverHistory{state: s.State, since: s.Since, seen: s.Since, last: last}
	}
	for _, a := range st.Alarms {
		h.alarms[Alarm{Kind: a.Kind, Pool: a.Pool}] = a.Since
	}
}
