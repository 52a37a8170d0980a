package lb

// The state file ([global] state_file) and the fast start (start = "fast").
//
// While fairlead runs, a writer saves every stateWriteInterval, and once more when the LB stops, what a
// restart needs to serve at once: per pool its balance, its leader, each server's health, its sticky
// keys and its multi-part pins (with how long each had been idle). The file is JSON, replaced atomically: a temp file in the
// same directory, fsync, rename. It holds no credentials, but sticky keys may be session cookies or
// asset ids, so it is readable by its owner only.
//
// A fast start reads it before the first probe: a leader pool's remembered leader is elected at once,
// a checker pool's remembered-up servers are up, and sticky keys and pins go back into the pool's tables, so the
// pool serves without waiting for its first round; the probes then confirm or correct by the usual
// rules. A missing, stale or corrupt file falls back to a normal start with a warning; a pool whose
// balance changed, or whose remembered leader left it, waits for its first round.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/atomicfile"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/stickiness"
)

// pinTable is the multi-part pins of p's policy (balance = "roundrobin" with multipart_header), nil
// for another.
func (p *Pool) pinTable() *stickiness.Table {
	if rp, ok := p.view.Load().policy.(*roundRobinPolicy); ok {
		return rp.pins
	}
	return nil
}

// stickyTable is the sticky keys of p's policy (balance = "sticky"), nil for another balance.
func (p *Pool) stickyTable() *stickiness.Table {
	if sp, ok := p.view.Load().policy.(*stickyPolicy); ok {
		return sp.table
	}
	return nil
}

// stateWriteInterval is how often the state file is written while fairlead runs (and once more at
// stop). A variable so that tests can shorten it; it is not a config key.
var stateWriteInterval = 5 * time.Second

// stateVersion is the format version of the state file; a file of another version is not read.
const stateVersion = 1

// savedState is the state file.
type savedState struct {
	Version int                   `json:"version"`
	Written time.Time             `json:"written"`
	Pools   map[string]*savedPool `json:"pools"`
	// Handover is what only a binary upgrade's state document carries (stateDocument), never the
	// file: see handoverState.
	Handover *handoverState `json:"handover,omitempty"`
}

// handoverState is what a binary upgrade hands over besides the file's content: what is worth keeping
// across a switch of milliseconds between two processes on one clock, not across a restart. The
// admission limiters and the buckets per source are rates over seconds: a file written up to
// stateWriteInterval before a stop misses what was spent since, and after a restart's gap of seconds
// they are full again anyway; the new process of an upgrade takes them as they were a moment ago, so
// that devices limited before the switch are not let through in a burst after it. The event history
// (with the rates, the servers' since and the alarms of the status document) is what this process saw;
// the new process of an upgrade goes on with it, the page and /events showing what happened before
// the switch, then upgraded. A restart is a new process that saw nothing: its page starts empty, the
// log has the past.
type handoverState struct {
	At  time.Time `json:"at"`  // when the admission limiters' tokens were read (full precision)
	Seq uint64    `json:"seq"` // the event stream's last seq: the new process numbers on from it
	// Admission is, per pool and server, the tokens of new_tunnels_per_second's limiter at At, for
	// those not full.
	Admission map[string][]savedAdmit `json:"admission,omitempty"`
	// Buckets are rate_per_source's buckets that were not full at BucketsAt, on the buckets' clock (at
	// most handoverBuckets: the emptiest).
	BucketsAt time.Time           `json:"buckets_at"`
	Buckets   []frontend.Bucket   `json:"buckets,omitempty"`
	History   *admin.HistoryState `json:"history,omitempty"`
}

// savedAdmit is a server's admission limiter: its tokens at handoverState.At (negative: slots reserved
// ahead for upgrades waiting in the old process's queue).
type savedAdmit struct {
	Server string  `json:"server"`
	Tokens float64 `json:"tokens"`
}

// handoverBuckets bounds the buckets per source a binary upgrade hands over: about 1 MiB of JSON.
const handoverBuckets = 16384

// savedPool is one pool in the state file.
type savedPool struct {
	Balance string        `json:"balance"`
	Leader  string        `json:"leader,omitempty"` // leader pools: the leader's address, "" for none
	Servers []savedServer `json:"servers"`
	Sticky  []savedKey    `json:"sticky,omitempty"`
	Pins    []savedKey    `json:"pins,omitempty"` // balance = "roundrobin" with multipart_header: the multi-part pins
}

type savedServer struct {
	Addr string `json:"addr"`
	Up   bool   `json:"up"`
}

// savedKey is one sticky key: the key as a string, or in base64 when it is not valid UTF-8 (JSON
// strings cannot carry such bytes).
type savedKey struct {
	Key    string `json:"key,omitempty"`
	KeyB64 string `json:"key_b64,omitempty"`
	Server string `json:"server"`
	IdleMs int64  `json:"idle_ms"` // idle this long when the file was written
}

// startStateWriter launches the writer of g's state_file (none without one), which stops with ctx
// after a last write. Like start, the file is fixed for the process's life: a reload that changes it
// needs a restart.
func (lb *LB) startStateWriter(ctx context.Context, g *generation) {
	path, every := g.cfg.Global.StateFile, stateWriteInterval
	if path == "" {
		return
	}
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		failing := false
		var last stateMark
		ticks := 0
		save := func(always bool) {
			// An unchanged state is not written again (a large sticky table costs a full export), except
			// every stateRefreshTicks ticks so that the keys' idle ages stay current.
			ticks++
			v := stateMarkOf(lb.px.gen.Load(), &lb.events)
			if !always && !failing && v == last && ticks%stateRefreshTicks != 0 {
				return
			}
			last = v
			err := writeStateFile(path, lb.px.gen.Load().saved(time.Now()))
			switch {
			case err != nil && !failing:
				lb.log.Warn("state: cannot write the state file", "file", path, "error", err.Error())
			case err == nil && failing:
				lb.logf("state: the state file %s is written again", path)
			}
			failing = err != nil
		}
		for {
			select {
			case <-tick.C:
				save(false)
			case <-ctx.Done():
				save(true)
				return
			}
		}
	}()
}

// stateRefreshTicks: an unchanged state is written again every this many write intervals (a minute).
// A variable for tests.
var stateRefreshTicks = 12

// stateMark changes when something the state file holds may have changed: the generation, an event
// other than a probe answer (health, leader, set changes), or a sticky table's placements.
type stateMark struct {
	gen    *generation
	events uint64
	tables uint64
}

// stateMarkOf is the mark of g with the event counts events.
func stateMarkOf(g *generation, events *[event.NumKinds]atomic.Uint64) stateMark {
	v := stateMark{gen: g}
	for k := range events {
		if event.Kind(k) != event.CheckAnswered {
			v.events += events[k].Load()
		}
	}
	for _, p := range g.pools {
		if p.stickyTable() != nil {
			v.tables += p.stickyTable().Changes()
		}
	}
	return v
}

// snapshotState is the state of every pool of the generation in force.
// saved is the state file of g at now.
func (g *generation) saved(now time.Time) *savedState {
	st := &savedState{Version: stateVersion, Written: now.UTC().Truncate(time.Millisecond),
		Pools: make(map[string]*savedPool, len(g.pools))}
	for name, p := range g.pools {
		st.Pools[name] = p.snapshot()
	}
	return st
}

func (p *Pool) snapshot() *savedPool {
	st := p.view.Load()
	sp := &savedPool{Balance: p.balance, Servers: make([]savedServer, len(st.servers))}
	inPool := make(map[string]bool, len(st.servers))
	for i, s := range st.servers {
		sp.Servers[i] = savedServer{Addr: s.Addr, Up: s.target.Up()}
		inPool[s.Addr] = true
	}
	if l, ok := p.checks.(*healthcheck.Leader); ok {
		if cur := l.Current(); cur != nil {
			sp.Leader = cur.Addr()
		}
	}
	sp.Sticky = savedKeys(p.stickyTable(), inPool)
	sp.Pins = savedKeys(p.pinTable(), inPool)
	return sp
}

// savedKeys is what t (nil: none) holds for the servers in the pool (inPool), as the file keeps it.
func savedKeys(t *stickiness.Table, inPool map[string]bool) []savedKey {
	if t == nil {
		return nil
	}
	var keys []savedKey
	for _, e := range t.Export() {
		if !inPool[e.Server] {
			continue // a removed server's key, about to be forgotten
		}
		k := savedKey{Server: e.Server, IdleMs: e.Idle.Milliseconds()}
		if utf8.ValidString(e.Key) {
			k.Key = e.Key
		} else {
			k.KeyB64 = base64.StdEncoding.EncodeToString([]byte(e.Key))
		}
		keys = append(keys, k)
	}
	return keys
}

// writeStateFile replaces the file at path with st atomically (a temporary file in the same
// directory, synced, then renamed over it): a reader sees the old file or the new one, whole, and after
// a crash one of them is on disk. A new file's mode is 0600; an existing one keeps its own.
func writeStateFile(path string, st *savedState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// readStateFile reads the state file at path; the error says why it cannot be used: missing,
// unreadable, corrupt, of another version, or stale (written more than maxAge before now).
func readStateFile(path string, maxAge time.Duration, now time.Time) (*savedState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errors.New("missing")
	}
	if err != nil {
		return nil, fmt.Errorf("unreadable: %w", err)
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	switch {
	case st.Version != stateVersion:
		return nil, fmt.Errorf("format version %d; this fairlead reads version %d", st.Version, stateVersion)
	case st.Written.IsZero():
		return nil, errors.New("corrupt: no write time")
	}
	if age := now.Sub(st.Written); age > maxAge {
		return nil, fmt.Errorf("stale: written %s ago, more than state_max_age (%s)", age.Round(time.Second), maxAge)
	}
	return &st, nil
}

// restoreState is the fast start (start = "fast"): before the first probes, every pool of g that has a
// usable state in the state file gets it back, and so needs no first round of probes before it serves.
// Anything unusable is logged and falls back to the normal start (of every pool, or of that pool).
//
// A process that a binary upgrade started (Options.Given) takes the old process's state the same way,
// whatever start says: it is a second old, not a file's age; and first what only a handover carries
// (handoverState: the event stream, the history, the admission limiters, the buckets per source).
func (lb *LB) restoreState(g *generation, given []byte) {
	gl := g.cfg.Global
	now := time.Now()
	var st *savedState
	switch {
	case given != nil:
		st = new(savedState)
		if err := json.Unmarshal(given, st); err != nil || st.Version != stateVersion {
			lb.log.Warn("state: the old process's state is not usable; waiting for the first round of probes", "reason", fmt.Sprint(err))
			return
		}
		if st.Handover != nil { // first: the pools' restore may publish events, which follow the old ones
			lb.logf("state: %s", lb.restoreHandover(g, st.Handover, now))
		}
	case gl.Start != "fast":
		return
	default:
		var err error
		st, err = readStateFile(gl.StateFile, gl.StateMaxAge.D, now)
		if err != nil {
			lb.log.Warn("state: start = \"fast\", but the state file is not usable; normal start: waiting for the first round of probes",
				"file", gl.StateFile, "reason", err.Error())
			return
		}
	}
	age := max(now.Sub(st.Written), 0)
	for name, p := range g.pools {
		sp := st.Pools[name]
		if sp == nil {
			lb.logf("state: pool %s is not in the state file; waiting for its first round of probes", name)
			continue
		}
		health, sticky, err := p.restore(sp, age)
		if err != nil {
			lb.logf("state: pool %s: remembered health not used (%v)%s; waiting for its first round of probes",
				name, err, sticky)
			continue
		}
		lb.logf("state: pool %s: fast start with %s%s, as of %s ago", name, health, sticky, age.Round(time.Millisecond))
	}
}

// restore gives p, whose checks have not started, the state sp remembered age ago: the leader or the
// servers that were up, and the sticky keys of servers still in the pool. It describes what it restored
// of the pool's health and of its sticky keys (", sticky keys: 12 restored", "" without a sticky table), or
// says why it did not restore the pool's health (the pool then needs its first round of probes).
func (p *Pool) restore(sp *savedPool, age time.Duration) (health, sticky string, err error) {
	if sp.Balance != p.balance {
		return "", "", fmt.Errorf("its balance was %q, now %q", sp.Balance, p.balance)
	}
	st := p.view.Load()
	byAddr := make(map[string]*Server, len(st.servers))
	for _, s := range st.servers {
		byAddr[s.Addr] = s
	}
	if t := p.stickyTable(); t != nil {
		sticky = restoreKeys(t, "sticky keys", sp.Sticky, byAddr, age)
	}
	if t := p.pinTable(); t != nil {
		sticky = restoreKeys(t, "multi-part pins", sp.Pins, byAddr, age)
	}

	switch h := p.checks.(type) {
	case *healthcheck.Leader:
		s := byAddr[sp.Leader]
		switch {
		case sp.Leader == "":
			return "", sticky, errors.New("it had no leader")
		case s == nil:
			return "", sticky, fmt.Errorf("its remembered leader %s is no longer in the pool", sp.Leader)
		case !h.Restore(s.target):
			return "", sticky, errors.New("its checks decided already")
		}
		return "leader " + s.label(), sticky, nil
	case *healthcheck.Checker:
		var up []*healthcheck.Target
		for _, ss := range sp.Servers {
			if s := byAddr[ss.Addr]; s != nil && ss.Up {
				up = append(up, s.target)
			}
		}
		if len(up) == 0 {
			return "", sticky, errors.New("none of its servers was up")
		}
		h.Restore(up)
		n := 0 // up now: restored, or up already (a pool without active checks starts up)
		for _, s := range st.servers {
			if s.target.Up() {
				n++
			}
		}
		return fmt.Sprintf("%d of %s up", n, plural(len(st.servers), "server")), sticky, nil
	}
	return "", sticky, fmt.Errorf("balance %q keeps no state", p.balance)
}

// restoreKeys puts the remembered keys (sticky keys, or multi-part pins: what) of servers still in the
// pool (byAddr) back into t, each idle for as long as it was when written plus age, and describes what
// it did. A key too idle to keep, or already known, is not counted.
func restoreKeys(t *stickiness.Table, what string, keys []savedKey, byAddr map[string]*Server, age time.Duration) string {
	entries := make([]stickiness.Entry, 0, len(keys))
	dropped := 0
	for _, k := range keys {
		key := k.Key
		if k.KeyB64 != "" {
			b, err := base64.StdEncoding.DecodeString(k.KeyB64)
			if err != nil {
				dropped++
				continue
			}
			key = string(b)
		}
		if byAddr[k.Server] == nil {
			dropped++ // a server no longer in the pool
			continue
		}
		entries = append(entries, stickiness.Entry{Key: key, Server: k.Server,
			Idle: time.Duration(k.IdleMs)*time.Millisecond + age})
	}
	said := fmt.Sprintf(", %s: %d restored", what, t.Import(entries))
	if dropped > 0 {
		said += fmt.Sprintf(" (%d dropped: their server left the pool)", dropped)
	}
	return said
}

// stateDocument is the state of the generation in force as the state file holds it, with what only a
// binary upgrade hands over (handoverState), for its new process (handover.Given.State).
func (lb *LB) stateDocument() []byte {
	g := lb.px.gen.Load()
	st := g.saved(time.Now())
	st.Handover = lb.handoverState(g, time.Now())
	b, _ := json.Marshal(st) // plain data: Marshal cannot fail
	return b
}

// handoverState is what only a binary upgrade hands over, as of now.
func (lb *LB) handoverState(g *generation, now time.Time) *handoverState {
	hs := &handoverState{At: now, Seq: lb.bus.Seq()}
	for name, p := range g.pools {
		for _, s := range p.view.Load().servers {
			if tokens, ok := s.admitTokens(now); ok {
				if hs.Admission == nil {
					hs.Admission = map[string][]savedAdmit{}
				}
				hs.Admission[name] = append(hs.Admission[name], savedAdmit{Server: s.Addr, Tokens: tokens})
			}
		}
	}
	hs.BucketsAt, hs.Buckets = lb.px.front.Sources().Export(handoverBuckets)
	h := lb.hist.Export()
	hs.History = &h
	return hs
}

// restoreHandover takes what the old process of a binary upgrade handed over besides its pools (hs) into
// this one, which has served nothing yet, at now: the event stream numbers on from the old one's, the
// history goes on from the old one's, each server's admission limiter and each source's bucket hold what
// they held then, refilled by their rate since. It describes what it restored.
func (lb *LB) restoreHandover(g *generation, hs *handoverState, now time.Time) string {
	lb.bus.Continue(hs.Seq)
	events := 0
	if hs.History != nil {
		lb.hist.Import(*hs.History)
		events = len(hs.History.Events)
	}
	limiters := 0
	for name, admits := range hs.Admission {
		p := g.pools[name]
		if p == nil {
			continue
		}
		st := p.view.Load()
		for _, a := range admits {
			for _, s := range st.servers {
				if s.Addr == a.Server && st.cfg.NewTunnelsPerSecond > 0 {
					s.restoreAdmitter(st.cfg.NewTunnelsPerSecond, a.Tokens, hs.At, now)
					limiters++
				}
			}
		}
	}
	buckets := lb.px.front.Sources().Import(hs.BucketsAt, hs.Buckets)
	return fmt.Sprintf("handed over: %s of history, %s, %s per source (the event stream goes on from seq %d)",
		plural(events, "event"), plural(limiters, "admission limiter"), plural(buckets, "bucket"), hs.Seq+1)
}
