package healthcheck

import (
	"strconv"
	"sync"
	"time"
)

// Kind says what an Event reports.
type Kind uint8

// The kinds of events. Health checks publish the server and leader kinds; the load balancer publishes
// the set, reload, tier (failover, failback) and pool (pool_down, pool_up) kinds.
const (
	ServerUp         Kind = iota + 1 // a server passes its checks and may take traffic
	ServerDown                       // a server failed fall checks (or fall live requests in a row)
	ServerAdded                      // a server set change added a server (it gets traffic after a passing probe)
	ServerRemoved                    // a server set change removed a server (it drains)
	LeaderChanged                    // a leader pool elected another leader (Server; Old was the leader)
	SplitBrain                       // the leader answered 200 while another server's latest answer was 200 (once per split brain)
	CheckAnswered                    // one probe answered (Status, Latency, Detail on error)
	ReloadApplied                    // a new configuration is in force
	ReloadFailed                     // a configuration did not load; the running one stays (Detail)
	Failover                         // no primary of a pool is usable: its backups serve (Detail)
	Failback                         // a primary of a pool is usable again: traffic returns to the primaries
	AdminAction                      // an operator drained, put in maintenance, readied or re-probed a server (Detail)
	DiscoveryChanged                 // a pool's service discovery found a new server list (Detail)
	PoolDown                         // no server of a pool is available at all: its requests wait, then get unavailable_status
	PoolUp                           // a server of a pool is available again after PoolDown (Detail)
	NumKinds                         // one more than the last kind: the size of an array indexed by Kind
)

var kindNames = [NumKinds]string{"", "server_up", "server_down", "server_added", "server_removed",
	"leader_changed", "split_brain", "check_answered", "reload_applied", "reload_failed", "failover", "failback", "admin_action",
	"discovery_changed", "pool_down", "pool_up"}

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
	Detail  string        // why: an error, a status, a count of live failures
}

// Bus is the one event stream of a running fairlead. Publishers (the health checks, reloads, server set
// changes) call Publish; subscribers are called synchronously, in the publisher's goroutine, and must be
// quick and must not publish. Waiters that need "something changed" (a request waiting for a usable
// server) use Changed instead of polling. A Bus is safe for concurrent use.
type Bus struct {
	mu      sync.Mutex
	seq     uint64
	subs    map[uint64]func(Event)
	list    []func(Event) // a copy of subs' values, replaced (never modified) on Subscribe/cancel
	nextID  uint64
	changed chan struct{}
}

// NewBus returns a Bus without subscribers.
func NewBus() *Bus {
	return &Bus{subs: map[uint64]func(Event){}, changed: make(chan struct{})}
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

// Publish numbers e, stamps it with the time if it has none, calls every subscriber and then wakes
// every waiter of Changed.
func (b *Bus) Publish(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	b.mu.Lock()
	b.seq++
	e.Seq = b.seq
	list := b.list
	ch := b.changed
	b.changed = make(chan struct{})
	b.mu.Unlock()
	for _, fn := range list {
		fn(e)
	}
	close(ch)
}

// Changed returns a channel closed by the next Publish. A waiter takes it, then checks its condition,
// then waits on it: no event between the check and the wait is missed.
func (b *Bus) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}
