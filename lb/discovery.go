package lb

// Service discovery: a pool's servers come from a registry instead of (or after) its static servers list,
// without a restart. ThingWorx HA registers its platform instances in ZooKeeper (Apache Curator service
// discovery); DNS fits Kubernetes headless services and Consul; a file fits everything else.
//
// A provider only produces server lists (discovery_zk.go, discovery_dns.go, discovery_file.go); the pool
// applies each new list as a server set change, exactly as a reload does: new servers take traffic after
// their first passing probe, removed ones drain and their tunnels close. servers, when given, is the seed
// used until the provider's first answer. A provider that cannot read its registry keeps the last list
// (serving goes on) and counts the error; an empty list is applied only after empty_grace, so that a
// registry glitch never empties a pool at once. Every change is logged, counted and published as a
// discovery_changed event. A reload that keeps a pool's [discovery] table keeps its provider and its
// list; one that changes it starts the new provider (the old list stays until its first answer).

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/healthcheck"
)

// providerKind is a provider's constructor. Each provider's file registers its kind in providerKinds;
// its keys and their validation are the config's (config.Providers).
type providerKind struct {
	new func(dc DiscoveryConfig, o providerOptions) (provider, error)
}

var providerKinds = map[string]providerKind{}

// providerOptions is what a provider knows of its pool.
type providerOptions struct {
	pool string
	tls  bool                 // the pool speaks TLS to its servers (a Curator record's sslPort is used)
	logf func(string, ...any) // operational lines
}

// A provider watches one registry.
type provider interface {
	// watch runs until ctx ends. It calls found with every complete list it reads (host:port
	// addresses, any order, duplicates allowed) and failed with every error reading the registry (the
	// last list stays in force). It never calls them concurrently.
	watch(ctx context.Context, found func([]string), failed func(error))
}

// discovery runs the provider of one pool.
type discovery struct {
	lb     *LB
	pool   string
	dc     DiscoveryConfig
	cancel context.CancelFunc
	done   chan struct{}

	// Lock order: applyMu, then LB.reloadMu, then mu (a reload takes reloadMu, then mu).
	applyMu sync.Mutex  // one list applied at a time (the provider's and the empty_grace timer's)
	mu      sync.Mutex  // guards last and empty
	last    []string    // the list in force (sorted), nil before the provider's first answer
	empty   *time.Timer // pending: an empty list, applied at the end of empty_grace

	changes, errors atomic.Uint64
	lastOK          atomic.Int64 // unix nanos of the provider's last answer
	lastErr         atomic.Pointer[string]
}

// syncDiscovery starts, keeps or stops the provider of every pool of g: a pool whose [discovery] table
// is unchanged keeps its provider (and its list); a changed one gets a new provider; a pool without one
// (or gone) has its provider stopped.
func (lb *LB) syncDiscovery(g *generation) {
	lb.discMu.Lock()
	defer lb.discMu.Unlock()
	for name, d := range lb.disc {
		pc, ok := g.cfg.Pools[name]
		if !ok || pc.Discovery.Provider == "" || !reflect.DeepEqual(pc.Discovery, d.dc) || lb.ctx.Err() != nil {
			d.stop(false)
			if ok && pc.Discovery.Provider != "" {
				continue // replaced below; its list stays in force meanwhile
			}
			delete(lb.disc, name)
		}
	}
	for name, pc := range g.cfg.Pools {
		if pc.Discovery.Provider == "" {
			continue
		}
		if d, ok := lb.disc[name]; ok && reflect.DeepEqual(pc.Discovery, d.dc) && d.cancel != nil {
			continue
		}
		var last []string
		if d, ok := lb.disc[name]; ok {
			last = d.last
		}
		d := &discovery{lb: lb, pool: name, dc: pc.Discovery, last: last, done: make(chan struct{})}
		pv, err := providerKinds[pc.Discovery.Provider].new(pc.Discovery,
			providerOptions{pool: name, tls: pc.TLS.Enabled, logf: lb.logf})
		if err != nil {
			lb.logf("discovery: pool %s: %v (the pool keeps its servers)", name, err)
			close(d.done)
			lb.disc[name] = d
			continue
		}
		var ctx context.Context
		ctx, d.cancel = context.WithCancel(lb.ctx)
		lb.disc[name] = d
		go func() {
			defer close(d.done)
			pv.watch(ctx, d.found, d.failed)
		}()
	}
}

// stop ends the provider; with wait, it also waits for it (not under the reload lock: an answer being
// applied takes that lock). A stopped provider's late answer is dropped by apply (its table is no longer
// the pool's).
func (d *discovery) stop(wait bool) {
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
	}
	if wait {
		<-d.done
	}
	d.mu.Lock()
	if d.empty != nil {
		d.empty.Stop()
		d.empty = nil
	}
	d.mu.Unlock()
}

// stopDiscovery stops every provider (Close).
func (lb *LB) stopDiscovery() {
	lb.discMu.Lock()
	defer lb.discMu.Unlock()
	for _, d := range lb.disc {
		d.stop(true)
	}
}

// discovered returns pc with the servers its provider found, when it has answered (newGeneration: a
// reload must not put the seed back).
func (lb *LB) discovered(name string, pc *PoolConfig) *PoolConfig {
	if pc.Discovery.Provider == "" {
		return pc
	}
	lb.discMu.Lock()
	d := lb.disc[name]
	lb.discMu.Unlock()
	if d == nil {
		return pc
	}
	d.mu.Lock()
	last := d.last
	d.mu.Unlock()
	if last == nil {
		return pc
	}
	cp := *pc
	cp.Servers = withoutBackups(last, pc.Backups)
	return &cp
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

func (d *discovery) failed(err error) {
	d.errors.Add(1)
	msg := err.Error()
	d.lastErr.Store(&msg)
	d.lb.logf("discovery: pool %s: %s: %v (keeping the last list)", d.pool, d.dc.Provider, err)
}

// found receives a complete list from the provider.
func (d *discovery) found(list []string) {
	d.lastOK.Store(time.Now().UnixNano())
	d.lastErr.Store(nil)
	list = normalize(list)
	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	d.mu.Lock()
	last := d.last
	if len(list) > 0 {
		if d.empty != nil {
			d.empty.Stop()
			d.empty = nil
		}
		d.mu.Unlock()
		if last == nil || !slices.Equal(list, last) {
			d.apply(list)
		}
		return
	}
	defer d.mu.Unlock()
	if (last != nil && len(last) == 0) || d.empty != nil {
		return // already empty, or pending
	}
	grace := d.dc.EmptyGrace.D
	d.lb.logf("discovery: pool %s: %s lists no server; applied in %s unless servers come back", d.pool, d.dc.Provider, grace)
	var t *time.Timer
	t = time.AfterFunc(grace, func() {
		d.applyMu.Lock()
		defer d.applyMu.Unlock()
		d.mu.Lock()
		due := d.empty == t
		if due {
			d.empty = nil
		}
		d.mu.Unlock()
		if due {
			d.apply([]string{})
		}
	})
	d.empty = t
}

// apply puts list in force: a server set change of the pool, under the reload lock so that it never
// races a reload. The caller holds applyMu.
func (d *discovery) apply(list []string) {
	lb := d.lb
	lb.reloadMu.Lock()
	defer lb.reloadMu.Unlock()
	g := lb.gen.Load()
	p, pc := g.pools[d.pool], g.cfg.Pools[d.pool]
	if p == nil || pc == nil || !reflect.DeepEqual(pc.Discovery, d.dc) || lb.ctx.Err() != nil {
		return // the pool left or changed its provider meanwhile, or fairlead is stopping
	}
	d.mu.Lock()
	before := d.last
	d.last = list
	d.mu.Unlock()
	if before == nil {
		before = pc.Servers
	}
	added, removed := diffLists(before, list)
	if len(added) == 0 && len(removed) == 0 {
		return // the provider's first answer confirms the seed
	}
	cp := *pc
	cp.Servers = withoutBackups(list, pc.Backups)
	p.apply(&cp, lb.logf)
	d.changes.Add(1)
	detail := fmt.Sprintf("%s: %d servers (added %s; removed %s)", d.dc.Provider, len(list), orNone(added), orNone(removed))
	lb.bus.Publish(healthcheck.Event{Kind: healthcheck.DiscoveryChanged, Pool: d.pool, Detail: detail})
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

// discoveryStatus describes pool name's provider, or nil.
func (lb *LB) discoveryStatus(name string) *DiscoveryStatus {
	lb.discMu.Lock()
	d := lb.disc[name]
	lb.discMu.Unlock()
	if d == nil {
		return nil
	}
	ds := &DiscoveryStatus{Provider: d.dc.Provider, Changes: d.changes.Load(), Errors: d.errors.Load()}
	if ns := d.lastOK.Load(); ns != 0 {
		ds.LastSuccess = time.Unix(0, ns).UTC()
	}
	if e := d.lastErr.Load(); e != nil {
		ds.LastError = *e
	}
	d.mu.Lock()
	ds.Servers, ds.EmptyPending = slices.Clone(d.last), d.empty != nil
	d.mu.Unlock()
	return ds
}

// writeDiscoveryMetrics writes pool name's discovery series (none without a provider).
func (lb *LB) writeDiscoveryMetrics(w io.Writer, name string) {
	ds := lb.discoveryStatus(name)
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
