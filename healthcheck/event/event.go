// Package event is fairlead's event stream: what can happen (Kind), one happening (Event), and the Bus
// that carries them to subscribers (the log, the counters, the tunnel closer, /events) and wakes the
// waiters of a pool when what it may serve with changed. It is the one place where event kinds are
// declared: the health checks (package healthcheck) publish the server and leader kinds, the load
// balancer (package lb) the rest. It imports nothing of fairlead, so both can use it.
package event

import (
	"strconv"
	"sync"
	"time"
)

// Kind says what an Event reports.
type Kind uint8

// The kinds of events. Health checks publish the server and leader kinds; the load balancer publishes
// the set, reload, tier (failover, failback), pool (pool_down, pool_up), admin and discovery kinds.
const (
	ServerUp         Kind = iota + 1 // a server passes its checks and may take traffic
	ServerDown                       // a server failed fall checks (or fall live requests in a row)
	ServerAdded                      // a server set change added a server (it gets traffic after a passing probe)
	ServerRemoved                    // a server set change removed a server (it drains)
	LeaderChanged                    // a leader pool elected another leader (Server; Old was the leader)
	SplitBrain                       // the leader answered 200 while another server's latest answer was 200 (once per split brain)
	CheckAnswered                    // one probe answered (Status, Latency, Detail on error)
	ReloadApplied                    // a new configuration is in force, or the running one's files are back after a reload_failed (Detail)
	ReloadFailed                     // a configuration did not load; the running one stays (Detail)
	Failover                         // no primary of a pool is usable: its backups serve (Detail)
	Failback                         // a primary of a pool is usable again: traffic returns to the primaries
	AdminAction                      // an operator drained, put in maintenance, readied or re-probed a server (Admin, Detail)
	DiscoveryChanged                 // a pool's service discovery found a new server list (Detail)
	PoolDown                         // no server of a pool is available at all: its requests wait, then get unavailable_status
	PoolUp                           // a server of a pool is available again after PoolDown (Detail)
	Upgraded                         // this process took over from the old one of a binary upgrade (Detail: which, with what)
	UpgradeFailed                    // a binary upgrade's new process failed; this one keeps serving (Detail: why)
	CertObtained                     // [frontend.acme] obtained or renewed a certificate and serves it (Server: the name; Detail)
	CertFailed                       // [frontend.acme] could not obtain or renew a certificate; the last good one stays (Server: the name; Detail: why)
	NumKinds                         // one more than the last kind: the size of an array indexed by Kind
)

var kindNames = [NumKinds]string{"", "server_up", "server_down", "server_added", "server_removed",
	"leader_changed", "split_brain", "check_answered", "reload_applied", "reload_failed", "failover", "failback", "admin_action",
	"discovery_changed", "pool_down", "pool_up", "upgraded", "upgrade_failed", "cert_obtained", "cert_failed"}

func (k Kind) String() string {
	if k > 0 && k < NumKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds lists every kind, in order (for metrics that want a series per kind).
func Kinds() []Kind {
	ks := make([]Kind, 0, NumKinds-1)
	for k := Kind(1); k < NumKinds; k++ {
		ks = append(ks, k)
	}
	return ks
}

// changesServing reports whether an event of kind k may change which servers of its pool are available,
// who leads it or which tier serves: the events that wake the pool's waiters (Bus.Changed). A probe's
// answer does not (a health check that wants its pool's waiters to look again calls Bus.Wake); the tier
// and pool events follow a change that woke them already.
func (k Kind) changesServing() bool {
	switch k {
	case ServerUp, ServerDown, ServerAdded, ServerRemoved, LeaderChanged, AdminAction, DiscoveryChanged, ReloadApplied:
		return true
	}
	return false
}

// Severity is what an event means for the service, decided here once for every reader: the log's
// level (ERROR, WARN, INFO), the status page's colour (red, amber, green, grey-blue) and any consumer of
// /events, which carries it as a word. It depends on the kind alone, but for LeaderChanged: to a
// server it is a recovery (the pool has a leader; the old one's loss, if it failed, is its own
// ServerDown), to none an outage.
type Severity uint8

// The severities, from the least to the most pressing.
const (
	SeverityInfo    Severity = iota // information: a reload applied, a server added or removed, an operator's action, a new discovered list, a probe's answer
	SeverityOK                      // a recovery: a server up, a pool up, a failback, a leader elected
	SeverityWarning                 // a loss that still serves: a server down, a failover to the backups, a split brain, a failed reload (the running config stays)
	SeverityOutage                  // an outage: a pool down, a leader pool left without a leader
)

var severityNames = [...]string{"info", "ok", "warn", "outage"}

// String is the severity's word in /events and /api/status: "info", "ok", "warn" or "outage" (the
// status page's classes sev-info, sev-ok, sev-warn and sev-outage).
func (s Severity) String() string {
	if int(s) < len(severityNames) {
		return severityNames[s]
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// Severity is what e means for the service.
func (e Event) Severity() Severity {
	switch e.Kind {
	case PoolDown:
		return SeverityOutage
	case LeaderChanged:
		if e.Server == "" {
			return SeverityOutage
		}
		return SeverityOK
	case ServerDown, Failover, SplitBrain, ReloadFailed, UpgradeFailed, CertFailed:
		return SeverityWarning
	case ServerUp, PoolUp, Failback, CertObtained:
		return SeverityOK
	}
	return SeverityInfo
}

// Admin is an operator's state of a server, as an AdminAction sets it.
type Admin uint8

// The operator's states: ready takes traffic as its health allows; drain takes no new traffic and keeps
// its tunnels; maint takes no traffic and its tunnels are closed.
const (
	AdminNone  Admin = iota // not an admin state: an event of another kind, or a re-probe
	AdminReady              // the server takes traffic again as its health allows
	AdminDrain              // the server takes no new traffic and keeps its tunnels
	AdminMaint              // the server takes no traffic and its tunnels are closed
)

var adminNames = [...]string{"", "ready", "drain", "maint"}

func (a Admin) String() string {
	if int(a) < len(adminNames) {
		return adminNames[a]
	}
	return "admin(" + strconv.Itoa(int(a)) + ")"
}

// Event is one thing that happened to the servers or the configuration.
type Event struct {
	Seq     uint64 // position in the stream, from 1; set by Publish
	Time    time.Time
	Kind    Kind
	Pool    string
	Server  string        // the server's address; for LeaderChanged the new leader ("" for none)
	Old     string        // LeaderChanged: the previous leader ("" for none)
	Status  int           // CheckAnswered: the answer's status (0 on a transport error)
	Latency time.Duration // CheckAnswered: how long the probe took
	Admin   Admin         // AdminAction: the state the operator put the server in (AdminNone for a re-probe)
	Detail  string        // why: an error, a status, a count of live failures
}

// Bus is the one event stream of a running fairlead. Publishers (the health checks, reloads, server set
// changes, admin actions) call Publish; subscribers are called synchronously, in the publisher's
// goroutine, and must be quick and must not publish. Waiters that need "what this pool may serve with
// changed" (a request waiting for a usable server, a pool's tier watch, a relay following its pool)
// use Changed instead of polling: it is per pool, and fired only by the events that change a server's
// availability, a leader or a tier (and by Wake), not by every probe answer. A Bus is safe for
// concurrent use.
type Bus struct {
	mu      sync.Mutex
	seq     uint64
	subs    map[uint64]func(Event)
	list    []func(Event) // a copy of subs' values, replaced (never modified) on Subscribe/cancel
	nextID  uint64
	changed map[string]chan struct{} // by pool; made by the first waiter, closed and dropped by a change
}

// NewBus returns a Bus without subscribers.
func NewBus() *Bus {
	return &Bus{subs: map[uint64]func(Event){}, changed: map[string]chan struct{}{}}
}

// Subscribe calls fn with every event published from now on, until cancel is called.
func (b *Bus) Subscribe(fn func(Event)) (cancel func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	id := b.nextID
	b.subs[id] = fn
	b.rebuildLocked()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, id)
		b.rebuildLocked()
	}
}

func (b *Bus) rebuildLocked() {
	ids := make([]uint64, 0, len(b.subs))
	for id := range b.subs {
		ids = append(ids, id)
	}
	// Subscribers are called in the order they subscribed.
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
	list := make([]func(Event), len(ids))
	for i, id := range ids {
		list[i] = b.subs[id]
	}
	b.list = list
}

// Seq is the seq of the last event published, 0 before the first.
func (b *Bus) Seq() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq
}

// Continue makes the stream go on after seq: the next event is numbered seq+1, unless the stream is
// past it already. A binary upgrade's new process continues the old one's stream, so that its events
// follow those it was handed (a reader that keeps the highest seq it saw misses none).
func (b *Bus) Continue(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq = max(b.seq, seq)
}

// Publish numbers e, stamps it with the time if it has none and calls every subscriber; then, if e may
// change what its pool serves with, it wakes the waiters of Changed for that pool (for every pool on
// ReloadApplied, which has none).
func (b *Bus) Publish(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	b.mu.Lock()
	b.seq++
	e.Seq = b.seq
	list := b.list
	b.mu.Unlock()
	for _, fn := range list {
		fn(e)
	}
	switch {
	case !e.Kind.changesServing():
	case e.Pool == "":
		b.wakeAll()
	default:
		b.Wake(e.Pool)
	}
}

// Changed returns a channel closed by the next change of what pool may serve with: a server up, down,
// added, removed, drained, put in maintenance or readied, a new leader, a reload (or a Wake). A waiter
// takes it, then checks its condition, then waits on it: no change between the check and the wait is
// missed. It allocates only when nobody waits on the pool yet.
func (b *Bus) Changed(pool string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.changed[pool]
	if ch == nil {
		ch = make(chan struct{})
		b.changed[pool] = ch
	}
	return ch
}

// Wake wakes the waiters of pool's Changed without an event: a health check calls it when a server
// that requests are waiting on answered its probe (Target.AwaitPass).
func (b *Bus) Wake(pool string) {
	b.mu.Lock()
	ch := b.changed[pool]
	delete(b.changed, pool)
	b.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (b *Bus) wakeAll() {
	b.mu.Lock()
	chs := b.changed
	b.changed = map[string]chan struct{}{}
	b.mu.Unlock()
	for _, ch := range chs {
		close(ch)
	}
}
