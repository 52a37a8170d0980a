package lb

// Service discovery, lb's side: package discovery runs a provider per pool and reports the lists it
// finds; discoveries keeps one discovery.Watcher per pool across reloads and puts each list in force in
// the pool as a server set change, exactly as a reload does (new servers take traffic after their first
// passing probe, removed ones drain and their tunnels close). servers, when given, is the seed used until
// the provider's first answer. Every change is logged, counted and published as a discovery_changed
// event. A reload that keeps a pool's [discovery] table keeps its provider and its list; one that
// changes it starts the new provider (the old list stays until its first answer).

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/discovery"
)

// discoveries runs the service discovery of every pool that has a provider.
type discoveries struct {
	lb *LB // its context (a provider's lifetime), reload lock, generation, event bus and log

	// Lock order: LB.reloadMu (a reload calls sync and discovered under it), then mu.
	mu     sync.Mutex
	byPool map[string]*discovery.Watcher
	tls    map[string]bool // by pool: whether its watcher was started for a pool with [tls] (Options.TLS)
}

// sync starts, keeps or stops the provider of every pool of g: a pool whose [discovery] table is
// unchanged keeps its provider (and its list); a changed one gets a new provider; a pool without one (or
// gone) has its provider stopped.
func (d *discoveries) sync(g *generation) {
	lb := d.lb
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byPool == nil {
		d.byPool, d.tls = map[string]*discovery.Watcher{}, map[string]bool{}
	}
	// A watcher stays while its pool's [discovery] table and its [tls] (which port of a Curator
	// instance it reads) stay.
	same := func(name string, pc *config.Pool, w *discovery.Watcher) bool {
		return reflect.DeepEqual(pc.Discovery, w.Config()) && d.tls[name] == pc.TLS.Enabled
	}
	for name, w := range d.byPool {
		pc, ok := g.cfg.Pools[name]
		if !ok || pc.Discovery.Provider == "" || !same(name, pc, w) || lb.ctx.Err() != nil {
			w.Stop(false)
			if ok && pc.Discovery.Provider != "" {
				continue // replaced below; its list stays in force meanwhile
			}
			delete(d.byPool, name)
			delete(d.tls, name)
		}
	}
	for name, pc := range g.cfg.Pools {
		if pc.Discovery.Provider == "" {
			continue
		}
		var last []string
		if w, ok := d.byPool[name]; ok {
			if same(name, pc, w) && w.Running() {
				continue
			}
			last = w.List()
		}
		dc := pc.Discovery
		d.tls[name] = pc.TLS.Enabled
		d.byPool[name] = discovery.Start(lb.ctx, dc,
			discovery.Options{Pool: name, TLS: pc.TLS.Enabled, Logf: lb.logf},
			discovery.Target{
				Lock:  &lb.reloadMu,
				Seed:  func() ([]string, bool) { return d.seed(name, dc) },
				Apply: func(c discovery.Change) { d.apply(name, c) },
			}, last)
	}
}

// stop stops every provider and waits for them (Close).
func (d *discoveries) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.byPool {
		w.Stop(true)
	}
}

// watcher returns pool name's watcher, or nil.
func (d *discoveries) watcher(name string) *discovery.Watcher {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byPool[name]
}

// discovered returns pc with the servers its provider found, when it has answered (newGeneration: a
// reload must not put the seed back).
func (d *discoveries) discovered(name string, pc *config.Pool) *config.Pool {
	if pc.Discovery.Provider == "" {
		return pc
	}
	w := d.watcher(name)
	if w == nil {
		return pc
	}
	last := w.List()
	if last == nil {
		return pc
	}
	cp := *pc
	cp.Servers = withoutBackups(last, pc.Backups)
	return &cp
}

// seed is a watcher's Target.Seed, under the reload lock: the servers pool name is configured with, and
// whether dc is still its table (and fairlead is not stopping).
func (d *discoveries) seed(name string, dc config.Discovery) ([]string, bool) {
	g := d.lb.px.gen.Load()
	p, pc := g.pools[name], g.cfg.Pools[name]
	if p == nil || pc == nil || !reflect.DeepEqual(pc.Discovery, dc) || d.lb.ctx.Err() != nil {
		return nil, false
	}
	return pc.Servers, true
}

// apply is a watcher's Target.Apply, under the reload lock (after seed said yes): a server set change
// of pool name, published as a discovery_changed event (which logs it).
func (d *discoveries) apply(name string, c discovery.Change) {
	lb := d.lb
	g := lb.px.gen.Load()
	p, pc := g.pools[name], g.cfg.Pools[name]
	cp := *pc
	cp.Servers = withoutBackups(c.List, pc.Backups)
	p.apply(&cp, lb.logf)
	lb.bus.Publish(event.Event{Kind: event.DiscoveryChanged, Pool: name, Detail: c.String()})
}

// withoutBackups drops from list the addresses that are configured backups (a backup stays a backup).
func withoutBackups(list, backups []string) []string {
	if len(backups) == 0 {
		return list
	}
	out := make([]string, 0, len(list))
	for _, a := range list {
		if !slices.Contains(backups, a) {
			out = append(out, a)
		}
	}
	return out
}

// status describes pool name's provider, or nil.
func (d *discoveries) status(name string) *admin.DiscoveryStatus {
	w := d.watcher(name)
	if w == nil {
		return nil
	}
	ds := admin.DiscoveryStatus(w.Status())
	return &ds
}

// writeMetrics writes pool name's discovery series (none without a provider).
func (d *discoveries) writeMetrics(w io.Writer, name string) {
	ds := d.status(name)
	if ds == nil {
		return
	}
	l := fmt.Sprintf(`pool=%q,provider=%q`, name, ds.Provider)
	metrics.WriteCounterUint64(w, "fairlead_discovery_changes_total{"+l+"}", ds.Changes)
	metrics.WriteCounterUint64(w, "fairlead_discovery_errors_total{"+l+"}", ds.Errors)
	metrics.WriteGaugeUint64(w, "fairlead_discovery_servers{"+l+"}", uint64(len(ds.Servers)))
	if !ds.LastSuccess.IsZero() {
		metrics.WriteGaugeUint64(w, "fairlead_discovery_last_success_timestamp_seconds{"+l+"}", uint64(ds.LastSuccess.Unix()))
	}
}
