// Package discovery finds a pool's servers in a registry instead of (or after) its static servers list,
// without a restart. ThingWorx HA registers its platform instances in ZooKeeper (Apache Curator service
// discovery: zookeeper.go); DNS fits Kubernetes headless services and Consul (dns.go); a file fits
// everything else (file.go).
//
// A Provider only reads its registry: it reports every complete list it reads, and every failed read.
// A Watcher runs the provider of one pool and decides what is put in force: lists are normalized
// (sorted, no duplicates or blanks) and only a list that differs from the one in force is handed to its
// Target, as a Change; a failed read keeps the last list (serving goes on) and is counted; an empty list
// is applied only after the table's empty_grace without a non-empty one, so that a registry glitch never
// empties a pool at once. Until the provider's first answer the pool's own servers (the seed) serve.
//
// What a list does to the pool (a server set change, exactly as a reload makes one: new servers take
// traffic after their first passing probe, removed ones drain and their tunnels close), the log line and
// the discovery_changed event are the Target's, in package lb, which also keeps one Watcher per pool
// across reloads. The [discovery] table's keys and their validation are package config's
// (config.Discovery, config.Providers).
package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/config"
)

// A Provider watches one registry.
type Provider interface {
	// Watch runs until ctx ends. It calls found with every complete list it reads (host:port
	// addresses, any order, duplicates allowed) and failed with every error reading the registry (the
	// last list stays in force). It never calls them concurrently, nor after it returned.
	Watch(ctx context.Context, found func([]string), failed func(error))
}

// Options are what a provider knows of its pool.
type Options struct {
	Pool string               // the pool's name, for the log
	TLS  bool                 // the pool speaks TLS to its servers (a Curator record's sslPort is used)
	Logf func(string, ...any) // operational lines
}

// NewFunc builds the provider of a [discovery] table.
type NewFunc func(dc config.Discovery, o Options) (Provider, error)

// kinds are the providers by the value of their provider key; config.Providers holds their keys.
var kinds = map[string]NewFunc{
	"zookeeper": newZooKeeper,
	"dns":       newDNSProvider,
	"file":      newFileProvider,
}

// Register adds a provider kind (a test's own provider; add its keys to config.Providers too). It is
// not safe to call while watchers start: call it from an init function.
func Register(provider string, f NewFunc) { kinds[provider] = f }

// New returns the provider that dc names.
func New(dc config.Discovery, o Options) (Provider, error) {
	f, ok := kinds[dc.Provider]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", dc.Provider) // the config's validation refuses it first
	}
	return f(dc, o)
}

// A Change is a list put in force that differs from the one before.
type Change struct {
	Provider       string   // the table's provider key
	List           []string // the whole list in force now, sorted
	Added, Removed []string // the servers the list adds and removes
}

// String describes the change for the log and the event stream, e.g. "dns: 3 servers (added 10.0.0.3:8080;
// removed none)".
func (c Change) String() string {
	servers := "servers"
	if len(c.List) == 1 {
		servers = "server"
	}
	return fmt.Sprintf("%s: %d %s (added %s; removed %s)", c.Provider, len(c.List), servers, orNone(c.Added), orNone(c.Removed))
}

// A Target is the pool a Watcher's lists go to.
type Target struct {
	// Lock, when not nil, is held while a list is put in force: across Seed, the watcher's own record
	// of the list (List) and Apply. lb gives its reload lock, so that a reload sees the pool's servers
	// and List change together.
	Lock sync.Locker
	// Seed returns the pool's servers in force before the provider's first answer (its configured
	// servers), and false when the list must be dropped: the pool left or changed its [discovery]
	// table, or fairlead is stopping. Required.
	Seed func() (servers []string, ok bool)
	// Apply puts a change in force. Called one at a time, never for a list equal to the one in force.
	// Required.
	Apply func(Change)
}

// A Watcher runs the provider of one pool's [discovery] table and keeps the list in force.
// Its methods are safe for concurrent use.
type Watcher struct {
	dc     config.Discovery
	o      Options
	target Target
	done   chan struct{} // closed when the provider returned (at once when it could not be built)

	// Lock order: applyMu, then Target.Lock, then mu.
	applyMu sync.Mutex         // one list put in force at a time (the provider's and the empty_grace timer's)
	mu      sync.Mutex         // guards cancel, last and empty
	cancel  context.CancelFunc // nil once stopped, or when the provider could not be built
	last    []string           // the list in force (sorted), nil before the provider's first answer
	empty   *time.Timer        // pending: an empty list, applied at the end of empty_grace

	changes, errors atomic.Uint64
	lastOK          atomic.Int64 // unix nanos of the provider's last answer
	lastErr         atomic.Pointer[string]
}

// Start builds dc's provider and runs it until ctx ends or Stop. last is the list in force from the
// pool's previous Watcher (a reload that changed the table: it stays in force until the new provider's
// first answer), nil for none. A provider that cannot be built is logged (the pool keeps its servers)
// and the Watcher returned is not Running.
func Start(ctx context.Context, dc config.Discovery, o Options, t Target, last []string) *Watcher {
	w := &Watcher{dc: dc, o: o, target: t, last: last, done: make(chan struct{})}
	pv, err := New(dc, o)
	if err != nil {
		o.Logf("discovery: pool %s: %v (the pool keeps its servers)", o.Pool, err)
		close(w.done)
		return w
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		defer close(w.done)
		pv.Watch(ctx, w.found, w.failed)
	}()
	return w
}

// Config returns the [discovery] table the Watcher runs.
func (w *Watcher) Config() config.Discovery { return w.dc }

// Running reports whether the provider runs: it was built and not stopped.
func (w *Watcher) Running() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cancel != nil
}

// List returns the list in force from the provider (sorted), nil before its first answer. The caller
// must not modify it.
func (w *Watcher) List() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Stop ends the provider and drops a pending empty list; with wait, it also waits until the provider
// returned (not while holding Target.Lock: a list being put in force takes it). A list the provider
// reads as it stops reaches Target.Seed, which drops it when the table is no longer the pool's.
func (w *Watcher) Stop(wait bool) {
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
	if w.empty != nil {
		w.empty.Stop()
		w.empty = nil
	}
	w.mu.Unlock()
	if wait {
		<-w.done
	}
}

func (w *Watcher) failed(err error) {
	w.errors.Add(1)
	msg := err.Error()
	w.lastErr.Store(&msg)
	w.o.Logf("discovery: pool %s: %s: %v (keeping the last list)", w.o.Pool, w.dc.Provider, err)
}

// found receives a complete list from the provider.
func (w *Watcher) found(list []string) {
	w.lastOK.Store(time.Now().UnixNano())
	w.lastErr.Store(nil)
	list = normalize(list)
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	w.mu.Lock()
	last := w.last
	if len(list) > 0 {
		if w.empty != nil {
			w.empty.Stop()
			w.empty = nil
		}
		w.mu.Unlock()
		if last == nil || !slices.Equal(list, last) {
			w.apply(list)
		}
		return
	}
	defer w.mu.Unlock()
	if (last != nil && len(last) == 0) || w.empty != nil {
		return // already empty, or pending
	}
	grace := w.dc.EmptyGrace.D
	w.o.Logf("discovery: pool %s: %s lists no server; applied in %s unless servers come back", w.o.Pool, w.dc.Provider, grace)
	var t *time.Timer
	t = time.AfterFunc(grace, func() {
		w.applyMu.Lock()
		defer w.applyMu.Unlock()
		w.mu.Lock()
		due := w.empty == t
		if due {
			w.empty = nil
		}
		w.mu.Unlock()
		if due {
			w.apply([]string{})
		}
	})
	w.empty = t
}

// apply puts list in force through the target, under its lock. The caller holds applyMu.
func (w *Watcher) apply(list []string) {
	if l := w.target.Lock; l != nil {
		l.Lock()
		defer l.Unlock()
	}
	seed, ok := w.target.Seed()
	if !ok {
		return // the pool left or changed its provider meanwhile, or fairlead is stopping
	}
	w.mu.Lock()
	before := w.last
	w.last = list
	w.mu.Unlock()
	if before == nil {
		before = seed
	}
	added, removed := diffLists(before, list)
	if len(added) == 0 && len(removed) == 0 {
		return // the provider's first answer confirms the seed
	}
	w.changes.Add(1)
	w.target.Apply(Change{Provider: w.dc.Provider, List: list, Added: added, Removed: removed})
}

// Status describes a Watcher (lb's DiscoveryStatus of /api/status has the same fields).
type Status struct {
	Provider string
	// Servers is the list in force from the provider (nil before its first answer: the seed serves).
	Servers []string
	// Changes and Errors count the lists applied and the failed reads of the registry; LastSuccess is
	// the time of the provider's last answer, LastError the last failed read since then ("" if none).
	Changes     uint64
	Errors      uint64
	LastSuccess time.Time
	LastError   string
	// EmptyPending: the provider lists no server; it is applied at the end of empty_grace.
	EmptyPending bool
}

// Status returns the Watcher's state now.
func (w *Watcher) Status() Status {
	s := Status{Provider: w.dc.Provider, Changes: w.changes.Load(), Errors: w.errors.Load()}
	if ns := w.lastOK.Load(); ns != 0 {
		s.LastSuccess = time.Unix(0, ns).UTC()
	}
	if e := w.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	w.mu.Lock()
	s.Servers, s.EmptyPending = slices.Clone(w.last), w.empty != nil
	w.mu.Unlock()
	return s
}

// normalize returns list sorted, without duplicates and blanks.
func normalize(list []string) []string {
	out := make([]string, 0, len(list))
	for _, a := range list {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func diffLists(before, after []string) (added, removed []string) {
	for _, a := range after {
		if !slices.Contains(before, a) {
			added = append(added, a)
		}
	}
	for _, b := range before {
		if !slices.Contains(after, b) {
			removed = append(removed, b)
		}
	}
	return added, removed
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
