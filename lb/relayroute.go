package lb

// Relay routes ([relays.NAME], issue #14): fairlead answers the requests of a relay's path itself,
// from one upstream events session per active topic and a cache of each topic's latest snapshot
// (package relay holds the hub, the upstream manager and the client side). A relayRoute is the
// running relay; it outlives generations while its fingerprint (relayconfig.go) stays, so that a
// reload that does not touch it keeps its sessions and subscribers.
//
// Topics: the listed ones are fetched at start and always accepted; with on_demand, the first
// request for another topic fetches it (404 if the upstream has none) and opens its session. A topic
// with no subscriber and no GET for topic_idle_timeout has its session closed; an on-demand one is
// forgotten, a listed one is fetched again at its next request.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/relay"
	"github.com/valyala/fasthttp"
)

// relaySeedInterval is how often a relay with seed_file_write checks for new snapshots to write.
const relaySeedInterval = 2 * time.Second

// relayKinds are the kinds of relay requests counted, as relay.RequestKind names them.
var relayKinds = [...]string{"snapshot", "sse", "websocket"}

// relayRefusals are the statuses of relay requests refused or failed, counted by status.
var relayRefusals = [...]int{401, 404, 405, 502, 503}

// relayRoute is one running relay.
type relayRoute struct {
	name string
	spec *config.RelaySpec // the spec it was built from; auth is read from each request's generation
	cfg  config.Relay
	hub  *relay.Hub
	up   *relay.Upstream
	pool *relayPool // the pool its upstream asks and reports to
	opts relay.ServeOptions
	logf func(string, ...any)

	mu sync.Mutex
	// known holds the topics in the hub (listed, and on-demand ones fetched and not forgotten), each
	// mapped to itself: a request finds its topic, interned, from the path's bytes without allocating.
	known   map[string]string
	watched map[string]bool          // topics with an upstream session
	pending map[string]*relayPending // first fetches of on-demand topics in flight
	started bool
	closed  bool

	stop chan struct{} // closed by close: ends the idle and seed loops
	wg   sync.WaitGroup

	seeded      atomic.Bool   // the cache was filled from seed_file at a fast start
	filled      atomic.Bool   // start filled the cache (a normal start fetched every listed topic)
	seedWritten atomic.Uint64 // the hub's Changes at the last write of seed_file
	seedWrites  atomic.Uint64
	seedErrors  atomic.Uint64
	requests    [len(relayKinds)]atomic.Uint64
	refused     [len(relayRefusals)]atomic.Uint64
}

// relayPending is the first fetch of an on-demand topic: the requests that want the topic meanwhile
// wait for it.
type relayPending struct {
	done   chan struct{}
	status int // 0: fetched; else the status to answer
	reason string
}

// newRelayRoute builds the relay spec describes, over the servers of pool pc, whose running pool
// pool is. Its upstream manager runs from here on; start fills its cache.
func newRelayRoute(spec *config.RelaySpec, rc *config.Relay, pc *config.Pool, pool *relayPool, logf func(string, ...any)) *relayRoute {
	rr := &relayRoute{name: spec.Name, spec: spec, cfg: *rc, logf: logf, known: map[string]string{},
		watched: map[string]bool{}, pending: map[string]*relayPending{}, stop: make(chan struct{}),
		opts: relay.ServeOptions{KeepAlive: rc.KeepAlive.D, WriteTimeout: rc.WriteTimeout.D, KeepHijacked: true}}
	prefix := "relay " + spec.Name + ": "
	rr.hub = relay.NewHub(relay.Options{SubscriberBuffer: rc.SubscriberBuffer, TopicIdleTimeout: rc.TopicIdleTimeout.D,
		OnFetchError: func(topic string, err error) { logf("%stopic %s: %v", prefix, topic, err) }})
	rr.pool = pool
	uo := relay.UpstreamOptions{Pool: pool, Snapshot: spec.Snapshot, Events: spec.Events,
		Names: spec.Path.Names(), Header: spec.Header,
		Timeout: pc.ConnectTimeout.D, FetchTimeout: pc.ResponseTimeout.D, KeepAlive: rc.KeepAlive.D,
		Logf: func(format string, args ...any) { logf(prefix+format, args...) }}
	if pc.TLS.Enabled {
		uo.TLS = pc.TLS.Client
	}
	rr.up = relay.NewUpstream(rr.hub, uo)
	return rr
}

// relayPool is a relay's pool as its upstream sees it (relay.Pool): the running pool that holds the
// relay's servers. Its health is the one verdict on them: the upstream takes the pool's choice, reports
// every attempt to its health check as a request would (a run of failures takes a server down, which
// the pool publishes, counts and shows like any failover), and follows the pool's changes.
type relayPool struct {
	lb               *LB
	name             string
	servers, backups []string // the relay's pool config, as its fingerprint holds it
}

// pool returns the running pool and its state when it holds the relay's servers. A relay that a
// reload adds or changes starts (fetches its listed topics) before the reload's generation is in
// force (LB.Reload): until then its pool may be missing or hold other servers, and pool returns nil.
func (rp *relayPool) pool() (*Pool, *poolState) {
	g := rp.lb.gen.Load()
	if g == nil {
		return nil, nil
	}
	p := g.pools[rp.name]
	if p == nil {
		return nil, nil
	}
	st := p.state.Load()
	if !slices.Equal(st.cfg.Servers, rp.servers) || !slices.Equal(st.cfg.Backups, rp.backups) {
		return nil, nil
	}
	return p, st
}

// Choose returns the pool's first available server, the serving tier first (primaries in config
// order while any is available, else the backups), other than those tried. Until the relay's pool is
// in force (see pool), the config's order without health.
func (rp *relayPool) Choose(tried []string) string {
	_, st := rp.pool()
	if st == nil {
		for _, list := range [][]string{rp.servers, rp.backups} {
			for _, addr := range list {
				if !slices.Contains(tried, addr) {
					return addr
				}
			}
		}
		return ""
	}
	if s := st.firstAvailable(tried); s != nil {
		return s.Addr
	}
	return ""
}

// Report tells the pool's health check how an attempt on server ended, as a request's end is told
// (Pool.health.Report); a failure counts in the server's failures too.
func (rp *relayPool) Report(server string, err error) {
	p, st := rp.pool()
	if p == nil {
		return
	}
	for _, s := range st.servers {
		if s.Addr == server {
			if err != nil {
				s.failures.Add(1)
			}
			p.health.Report(s.health, err)
			return
		}
	}
}

// Changed returns the pool's change notification (a server's availability, a reload).
func (rp *relayPool) Changed() <-chan struct{} { return rp.lb.bus.Changed(rp.name) }

// servingBackup reports whether server is one of the pool's backups.
func (rp *relayPool) servingBackup(server string) bool { return slices.Contains(rp.backups, server) }

// start fills the cache and opens the upstream sessions of the listed topics. With start = "normal"
// every listed topic is fetched first, and the first failure is returned, naming the topic; with
// "fast" the seed file fills the cache (a missing or unreadable one is logged) and the sessions fetch
// fresh snapshots in the background. It then starts the idle loop and, with seed_file_write, the seed
// writer.
func (rr *relayRoute) start(ctx context.Context) error {
	rr.mu.Lock()
	if rr.started {
		rr.mu.Unlock()
		return nil
	}
	rr.started = true
	rr.mu.Unlock()
	var topics []string
	if rr.cfg.Start == "fast" {
		topics = rr.loadSeed()
	} else if err := rr.fetchListed(ctx); err != nil {
		return err
	}
	rr.filled.Store(true)
	rr.mu.Lock()
	for _, t := range rr.spec.Topics {
		rr.addKnown(t)
	}
	for _, t := range topics {
		rr.addKnown(t)
	}
	for t := range rr.known {
		rr.watched[t] = true
		rr.up.Watch(t)
	}
	rr.mu.Unlock()
	if rr.cfg.Start == "normal" {
		// The sessions too, within wait_timeout, so that the first subscribers miss no change.
		wait, cancel := context.WithTimeout(ctx, rr.cfg.WaitTimeout.D)
		for _, t := range rr.spec.Topics {
			rr.waitSession(wait, t)
		}
		cancel()
	}
	rr.wg.Add(1)
	go rr.idleLoop()
	if rr.cfg.SeedFileWrite {
		rr.seedWritten.Store(rr.hub.Changes()) // what the seed file or the first fetches hold
		rr.wg.Add(1)
		go rr.every(relaySeedInterval, rr.writeSeedIfChanged)
	}
	return nil
}

// fetchListed fetches every listed topic at once and publishes the snapshots; the first error names
// its topic.
func (rr *relayRoute) fetchListed(ctx context.Context) error {
	errs := make([]error, len(rr.spec.Topics))
	var wg sync.WaitGroup
	for i, t := range rr.spec.Topics {
		wg.Go(func() {
			s, err := rr.up.Fetch(ctx, t)
			if err != nil {
				errs[i] = fmt.Errorf("relays.%s: start = \"normal\": topic %q: %w", rr.name, t, err)
				return
			}
			rr.hub.Publish(t, s)
			rr.hub.CountFetch(t, nil)
		})
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 1 {
		return fmt.Errorf("%w (and %d more of the %d listed topics)", failed[0], len(failed)-1, len(errs))
	}
	if len(failed) == 1 {
		return failed[0]
	}
	return nil
}

// close ends the relay: its streaming subscribers (SSE streams end, WebSockets close with 1001), its
// upstream sessions and its loops; with seed_file_write the seed file is written a last time.
func (rr *relayRoute) close() {
	rr.mu.Lock()
	if rr.closed {
		rr.mu.Unlock()
		return
	}
	rr.closed = true
	close(rr.stop)
	rr.mu.Unlock()
	rr.wg.Wait()
	if rr.cfg.SeedFileWrite && rr.filled.Load() {
		rr.writeSeedIfChanged() // not after a failed start: the file would lose what the cache lacks
	}
	rr.hub.Close()
	rr.up.Close()
}

// idleLoop closes the upstream sessions of idle topics and forgets idle on-demand topics.
func (rr *relayRoute) idleLoop() {
	rr.every(min(rr.cfg.TopicIdleTimeout.D/2, 30*time.Second), func() {
		for _, topic := range rr.hub.IdleTopics() {
			rr.retire(topic)
		}
	})
}

// every runs f every d until the relay closes; it is a goroutine of rr.wg.
func (rr *relayRoute) every(d time.Duration, f func()) {
	defer rr.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-rr.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// retire closes the session of an idle topic and forgets it if it was on demand. Requests activate
// topics under rr.mu after touching them, so a topic still idle here has no request on its way.
func (rr *relayRoute) retire(topic string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if !rr.hub.Idle(topic) {
		return
	}
	if rr.watched[topic] {
		delete(rr.watched, topic)
		rr.up.Unwatch(topic) // waits for the session's goroutine, which never takes rr.mu
		rr.logf("relay %s: topic %s idle for %s: upstream session closed", rr.name, topic, rr.cfg.TopicIdleTimeout.D)
	}
	if !rr.spec.Listed[topic] && rr.hub.Forget(topic) {
		delete(rr.known, topic)
	}
}

// addKnown records a topic of the hub; rr.mu is held.
func (rr *relayRoute) addKnown(topic string) {
	rr.known[topic] = topic
}

// ready returns the topic of key, interned when the relay knows it, and whether it can be served at
// once: it has an upstream session and a snapshot. It touches the topic, so that it is not retired as
// idle meanwhile. It does not allocate for a known topic.
func (rr *relayRoute) ready(key []byte) (topic string, ok bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	topic, known := rr.known[string(key)]
	if !known {
		return string(key), false
	}
	rr.hub.Touch(topic)
	return topic, !rr.closed && rr.watched[topic] && rr.hub.Snapshot(topic) != nil
}

// activate makes topic servable: it reports 0, or the status and reason to answer. A listed topic, or
// an on-demand one already fetched, gets its upstream session back if it was idle (and a stale
// snapshot is fetched again first); a new on-demand topic is fetched once, however many requests ask
// for it meanwhile, and is refused if the upstream has no such topic or max_topics is reached.
func (rr *relayRoute) activate(ctx context.Context, topic string) (int, string) {
	rr.mu.Lock()
	if rr.closed {
		rr.mu.Unlock()
		return fasthttp.StatusServiceUnavailable, "relay reloading"
	}
	if !rr.spec.Listed[topic] && !rr.spec.OnDemand {
		rr.mu.Unlock()
		return fasthttp.StatusNotFound, "unknown topic"
	}
	rr.hub.Touch(topic)
	if rr.watched[topic] {
		rr.mu.Unlock()
		return 0, ""
	}
	if _, known := rr.known[topic]; known {
		rr.watched[topic] = true
		rr.up.Watch(topic)
		rr.mu.Unlock()
		rr.waitSession(ctx, topic)
		if rr.hub.Snapshot(topic) != nil {
			// The cached snapshot may be stale: the session was closed while the topic was idle.
			s, err := rr.up.Fetch(ctx, topic)
			rr.hub.CountFetch(topic, err)
			if err == nil {
				rr.hub.Publish(topic, s)
			} else {
				rr.logf("relay %s: topic %s: serving the cached snapshot: %v", rr.name, topic, err)
			}
		}
		return 0, ""
	}
	p := rr.pending[topic]
	first := p == nil
	if first {
		if len(rr.known)+len(rr.pending) >= rr.cfg.MaxTopics {
			rr.mu.Unlock()
			return fasthttp.StatusServiceUnavailable, "too many topics (max_topics)"
		}
		p = &relayPending{done: make(chan struct{})}
		rr.pending[topic] = p
	}
	rr.mu.Unlock()
	if !first {
		select {
		case <-p.done:
			return p.status, p.reason
		case <-ctx.Done():
			return fasthttp.StatusServiceUnavailable, "snapshot not available yet"
		}
	}
	s, err := rr.up.Fetch(ctx, topic)
	rr.mu.Lock()
	delete(rr.pending, topic)
	switch {
	case err == nil:
		rr.addKnown(topic)
		rr.watched[topic] = true
		rr.hub.Publish(topic, s)
		rr.hub.CountFetch(topic, nil)
		rr.hub.Touch(topic)
		rr.up.Watch(topic)
		rr.mu.Unlock()
		rr.waitSession(ctx, topic)
		rr.mu.Lock()
	case rr.closed:
		p.status, p.reason = fasthttp.StatusServiceUnavailable, "relay reloading"
	default:
		p.status, p.reason = relayFetchStatus(err)
		rr.logf("relay %s: on-demand topic %s: %v", rr.name, topic, err)
	}
	close(p.done)
	rr.mu.Unlock()
	return p.status, p.reason
}

// waitSession waits, within ctx, for the topic's upstream session to connect, so that the
// subscriber about to join misses no change message; past ctx the request is served anyway (its
// snapshot is fresh, and a change made before the session connects resyncs the WebSocket
// subscribers, relay.Hub.Resync).
func (rr *relayRoute) waitSession(ctx context.Context, topic string) {
	if err := rr.up.WaitSession(ctx, topic); err != nil {
		rr.logf("relay %s: topic %s: serving before its upstream session is open: %v", rr.name, topic, err)
	}
}

// relayFetchStatus maps a failed first fetch to the client's answer: the upstream's 404 is the
// client's, another answer is a bad gateway, no answer makes the relay unavailable.
func relayFetchStatus(err error) (int, string) {
	var se *relay.StatusError
	switch {
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		return fasthttp.StatusNotFound, "unknown topic"
	case errors.As(err, &se):
		return fasthttp.StatusBadGateway, "the upstream answered " + strconv.Itoa(se.Status)
	}
	return fasthttp.StatusServiceUnavailable, "upstream unavailable"
}

// serveRelay answers the request if its path matches a relay's; it reports whether one did.
func (lb *LB) serveRelay(ctx *fasthttp.RequestCtx, g *generation, upgradeHeader bool) bool {
	var buf [8][]byte
	var kb [256]byte
	for i := range g.relays {
		b := &g.relays[i]
		vals, ok := b.spec.Path.MatchInto(ctx.Path(), buf[:0])
		if !ok {
			continue
		}
		lb.relayRequest(ctx, g, b, relay.AppendTopicKey(kb[:0], vals))
		lb.closeUnlessTunnel(ctx, upgradeHeader) // a refused upgrade, or one that was not a WebSocket
		return true
	}
	return false
}

// relayBinding is a relay of a generation: the running relay and the spec of that generation's config
// (its auth).
type relayBinding struct {
	rr   *relayRoute
	spec *config.RelaySpec
}

// relayRequest answers one request for the topic of key on relay b. A GET of a topic that is ready
// (relayRoute.ready) allocates nothing.
func (lb *LB) relayRequest(ctx *fasthttp.RequestCtx, g *generation, b *relayBinding, key []byte) {
	rr := b.rr
	var topic string
	if a := b.spec.Auth; a != nil {
		h := &ctx.Request.Header
		if !a.Admits(h.Peek(a.Header)) {
			rr.refuse(ctx, fasthttp.StatusUnauthorized, "")
			unauthorized(ctx, a)
			lb.logRelay(ctx, g, rr.name, string(key))
			return
		}
		h.Del(a.Header) // the relay answers itself: the key goes nowhere, but not even into a log
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		rr.countRefusal(fasthttp.StatusMethodNotAllowed)
		relay.Serve(ctx, context.Background(), rr.hub, "", rr.opts) // 405 with Allow
		lb.logRelay(ctx, g, rr.name, string(key))
		return
	}
	wait := context.Background() // a ready topic is served without waiting
	topic, ok := rr.ready(key)
	if !ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(wait, rr.cfg.WaitTimeout.D)
		defer cancel()
		if status, reason := rr.activate(wait, topic); status != 0 {
			rr.refuse(ctx, status, reason)
			lb.logRelay(ctx, g, rr.name, topic)
			return
		}
	}
	kind := relay.RequestKind(ctx)
	if kind != "snapshot" && ctx.IsGet() && rr.hub.Subscribers() >= int64(rr.cfg.MaxSubscribers) {
		rr.refuse(ctx, fasthttp.StatusServiceUnavailable, "too many subscribers (max_subscribers)")
		lb.logRelay(ctx, g, rr.name, topic)
		return
	}
	rr.requests[slices.Index(relayKinds[:], kind)].Add(1)
	relay.Serve(ctx, wait, rr.hub, topic, rr.opts)
	if ctx.Response.StatusCode() == fasthttp.StatusServiceUnavailable {
		rr.countRefusal(fasthttp.StatusServiceUnavailable) // no snapshot within wait_timeout
	}
	lb.logRelay(ctx, g, rr.name, topic)
}

// refuse answers status with reason (for 401, the caller writes the answer) and counts it.
func (rr *relayRoute) refuse(ctx *fasthttp.RequestCtx, status int, reason string) {
	rr.countRefusal(status)
	if reason == "" {
		return
	}
	ctx.Error(strconv.Itoa(status)+" "+fasthttp.StatusMessage(status)+": "+reason+"\n", status)
	if status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", "1")
	}
}

func (rr *relayRoute) countRefusal(status int) {
	if i := slices.Index(relayRefusals[:], status); i >= 0 {
		rr.refused[i].Add(1)
	}
}

// logRelay writes the access log line of a relay request, when the access log is on. A stream's line
// is written when its answer's head is ready, not when it ends.
func (lb *LB) logRelay(ctx *fasthttp.RequestCtx, g *generation, name, topic string) {
	if !g.accessLog() {
		return
	}
	status, kind := ctx.Response.StatusCode(), relay.RequestKind(ctx)
	if ctx.Hijacked() && kind == "websocket" {
		status = fasthttp.StatusSwitchingProtocols // an SSE stream, hijacked too, answered 200
	}
	lb.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("type", "relay"),
		slog.String("client", ctx.RemoteIP().String()),
		slog.String("method", string(ctx.Method())),
		slog.String("path", string(ctx.Path())),
		slog.String("relay", name),
		slog.String("topic", topic),
		slog.String("kind", kind),
		slog.Int("status", status),
		slog.Float64("duration_ms", milliseconds(time.Since(ctx.Time()))),
	)
}

// The seed file: the snapshots of a relay, written by seed_file_write and read by a fast start.
type seedFile struct {
	Relay   string               `json:"relay"`
	Written time.Time            `json:"written"`
	Topics  map[string]seedTopic `json:"topics"`
}

// seedTopic is one snapshot of a seed file: its body as JSON when it is JSON ("json"), else as a
// string ("body").
type seedTopic struct {
	Version uint64          `json:"version"`
	ETag    string          `json:"etag,omitempty"`
	JSON    json.RawMessage `json:"json,omitempty"`
	Body    *string         `json:"body,omitempty"`
}

// loadSeed publishes the snapshots of the seed file and returns the on-demand topics it held (those
// the relay still accepts, within max_topics). A missing or unreadable file is logged: the relay then
// starts empty, and requests wait for the first fetches up to wait_timeout.
func (rr *relayRoute) loadSeed() (onDemand []string) {
	f := rr.cfg.SeedFile
	data, err := os.ReadFile(f)
	if err != nil {
		rr.logf("relay %s: start = \"fast\": no seed (%v): serving once the first snapshots are fetched", rr.name, err)
		return nil
	}
	var sf seedFile
	if err := json.Unmarshal(data, &sf); err != nil {
		rr.logf("relay %s: start = \"fast\": seed file %s: %v: serving once the first snapshots are fetched", rr.name, f, err)
		return nil
	}
	n := 0
	for _, topic := range slices.Sorted(maps.Keys(sf.Topics)) {
		st := sf.Topics[topic]
		listed := rr.spec.Listed[topic]
		if !listed {
			if _, err := relay.SplitTopic(topic, len(rr.spec.Path.Names())); err != nil || !rr.spec.OnDemand ||
				len(rr.spec.Topics)+len(onDemand) >= rr.cfg.MaxTopics {
				continue
			}
		}
		var body []byte
		switch {
		case st.Body != nil:
			body = []byte(*st.Body)
		case len(st.JSON) > 0:
			body = st.JSON
		default:
			rr.logf("relay %s: seed file %s: topic %s has neither json nor body: skipped", rr.name, f, topic)
			continue
		}
		etag := st.ETag
		if etag == "" {
			etag = `"` + strconv.FormatUint(st.Version, 10) + `"`
		}
		rr.hub.Publish(topic, &relay.Snapshot{Version: st.Version, ETag: etag, Body: body, Fetched: sf.Written, Seed: true})
		n++
		if !listed {
			onDemand = append(onDemand, topic)
		}
	}
	rr.seeded.Store(true)
	rr.logf("relay %s: start = \"fast\": %d snapshot(s) from %s (written %s); refreshing in the background",
		rr.name, n, f, sf.Written.Format(time.RFC3339))
	return onDemand
}

// writeSeedIfChanged writes the seed file if the cache changed since the last write.
func (rr *relayRoute) writeSeedIfChanged() {
	n := rr.hub.Changes()
	if n == rr.seedWritten.Load() {
		return
	}
	if err := rr.writeSeed(); err != nil {
		rr.seedErrors.Add(1)
		rr.logf("relay %s: seed_file_write: %v", rr.name, err)
		return
	}
	rr.seedWrites.Add(1)
	rr.seedWritten.Store(n)
}

// writeSeed writes every cached snapshot to the seed file, atomically (a temporary file renamed).
func (rr *relayRoute) writeSeed() error {
	sf := seedFile{Relay: rr.name, Written: time.Now().UTC(), Topics: map[string]seedTopic{}}
	for _, ts := range rr.hub.Topics() {
		s := rr.hub.Snapshot(ts.Topic)
		if s == nil {
			continue
		}
		st := seedTopic{Version: s.Version, ETag: s.ETag}
		// A compact JSON object or array is kept as JSON, readable in the file; anything else (JSON
		// whose spacing the encoder would change included) as a string, so that it is read back as is.
		var compact bytes.Buffer
		if len(s.Body) > 0 && (s.Body[0] == '{' || s.Body[0] == '[') && json.Compact(&compact, s.Body) == nil &&
			bytes.Equal(compact.Bytes(), s.Body) {
			st.JSON = s.Body
		} else {
			b := string(s.Body)
			st.Body = &b
		}
		sf.Topics[ts.Topic] = st
	}
	data, err := json.Marshal(sf)
	if err != nil {
		return err
	}
	return writeFileAtomic(rr.cfg.SeedFile, append(data, '\n'))
}
