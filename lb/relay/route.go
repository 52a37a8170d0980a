package relay

// A Route is one running relay ([relays.NAME]): fairlead answers the requests of the relay's path
// itself, from one upstream events session per active topic (Upstream) and a cache of each topic's
// latest snapshot (Hub). It outlives config generations while its fingerprint (config.RelaySpec)
// stays, so that a reload that does not touch it keeps its sessions and subscribers.
//
// Topics: the listed ones are fetched at start and always accepted; with on_demand, the first
// request for another topic fetches it (404 if the upstream has none) and opens its session. A topic
// with no subscriber and no GET for topic_idle_timeout has its session closed; an on-demand one is
// forgotten, a listed one is fetched again at its next request.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/valyala/fasthttp"
)

// SeedInterval is how often a relay with seed_file_write checks for new snapshots to write.
const SeedInterval = 2 * time.Second

// kinds are the kinds of relay requests counted: RequestKind's, and App Configuration's metering
// POSTs.
var kinds = [...]string{"snapshot", "sse", "websocket", "usage", "analytics"}

// refusals are the statuses of relay requests refused or failed, counted by status.
var refusals = [...]int{401, 404, 405, 502, 503}

// Route is one running
type Route struct {
	name    string
	spec    *config.RelaySpec // the spec it was built from; auth is read from each request's generation
	cfg     config.Relay
	hub     *Hub
	origin  *Origin
	tokens  *TokenSource // protocol = "appconfiguration": the IAM tokens of its upstream requests
	backups []string     // the servers of its pool that are backups (Status: serving a backup)
	opts    ServeOptions
	logf    func(string, ...any)

	mu sync.Mutex
	// known holds the topics in the hub (listed, and on-demand ones fetched and not forgotten), each
	// mapped to itself: a request finds its topic, interned, from the path's bytes without allocating.
	known   map[string]string
	watched map[string]bool          // topics with an upstream session
	pending map[string]*pendingFetch // first fetches of on-demand topics in flight
	started bool
	closed  bool

	stop chan struct{} // closed by close: ends the idle and seed loops
	wg   sync.WaitGroup

	seeded      atomic.Bool   // the cache was filled from seed_file at a fast start
	filled      atomic.Bool   // start filled the cache (a normal start fetched every listed topic)
	seedWritten atomic.Uint64 // the hub's Changes at the last write of seed_file
	seedWrites  atomic.Uint64
	seedErrors  atomic.Uint64
	requests    [len(kinds)]atomic.Uint64
	refused     [len(refusals)]atomic.Uint64
}

// pendingFetch is the first fetch of an on-demand topic: the requests that want the topic meanwhile
// wait for it.
type pendingFetch struct {
	done   chan struct{}
	status int // 0: fetched; else the status to answer
	reason string
}

// NewRoute builds the relay spec describes, over the servers of pool pc, whose running pool pool
// is. Its upstream manager runs from here on; Start fills its cache.
func NewRoute(spec *config.RelaySpec, rc *config.Relay, pc *config.Pool, pool Pool, logf func(string, ...any)) *Route {
	rr := &Route{name: spec.Name, spec: spec, cfg: *rc, logf: logf, backups: slices.Clone(pc.Backups),
		known: map[string]string{}, watched: map[string]bool{}, pending: map[string]*pendingFetch{},
		stop: make(chan struct{}),
		opts: ServeOptions{KeepAlive: rc.KeepAlive.D, WriteTimeout: rc.WriteTimeout.D, KeepHijacked: true, Streams: NewStreams()}}
	prefix := "relay " + spec.Name + ": "
	rr.hub = NewHub(Options{SubscriberBuffer: rc.SubscriberBuffer, TopicIdleTimeout: rc.TopicIdleTimeout.D,
		OnFetchError: func(topic string, err error) { logf("%stopic %s: %v", prefix, topic, err) }})
	uo := OriginOptions{Pool: pool, Snapshot: spec.Snapshot, Events: spec.Events,
		Names: spec.Names, Header: spec.Header,
		Timeout: pc.ConnectTimeout.D, FetchTimeout: pc.ResponseTimeout.D, KeepAlive: rc.KeepAlive.D,
		Logf: func(format string, args ...any) { logf(prefix+format, args...) }}
	if pc.TLS.Enabled {
		uo.TLS = pc.TLS.Client
	}
	if spec.Protocol == "appconfiguration" {
		uo.SnapshotPath, uo.EventsPath = rr.appConfigPaths()
		rr.tokens = NewTokenSource(spec.IAMURL, spec.APIKey, pc.ConnectTimeout.D+pc.ResponseTimeout.D, nil)
		uo.Tokens, uo.Heartbeat = rr.tokens, appConfigHeartbeat
	}
	rr.origin = NewOrigin(rr.hub, uo)
	return rr
}

// Name returns the relay's name.
func (rr *Route) Name() string { return rr.name }

// Spec returns the spec the relay was built from (its fingerprint says whether a reload keeps it).
func (rr *Route) Spec() *config.RelaySpec { return rr.spec }

// start fills the cache and opens the upstream sessions of the listed topics. With start = "normal"
// every listed topic is fetched first, and the first failure is returned, naming the topic; with
// "fast" the seed file fills the cache (a missing or unreadable one is logged) and the sessions fetch
// fresh snapshots in the background. It then starts the idle loop and, with seed_file_write, the seed
// writer.
func (rr *Route) Start(ctx context.Context) error {
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
		rr.origin.Watch(t)
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
		go rr.every(SeedInterval, rr.writeSeedIfChanged)
	}
	return nil
}

// fetchListed fetches every listed topic at once and publishes the snapshots; the first error names
// its topic.
func (rr *Route) fetchListed(ctx context.Context) error {
	errs := make([]error, len(rr.spec.Topics))
	var wg sync.WaitGroup
	for i, t := range rr.spec.Topics {
		wg.Go(func() {
			s, err := rr.origin.Fetch(ctx, t)
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
func (rr *Route) Close() {
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
	rr.origin.Close()
	if rr.tokens != nil {
		rr.tokens.Close()
	}
}

// idleLoop closes the upstream sessions of idle topics and forgets idle on-demand topics.
func (rr *Route) idleLoop() {
	rr.every(min(rr.cfg.TopicIdleTimeout.D/2, 30*time.Second), func() {
		for _, topic := range rr.hub.IdleTopics() {
			rr.retire(topic)
		}
	})
}

// every runs f every d until the relay closes; it is a goroutine of rr.wg.
func (rr *Route) every(d time.Duration, f func()) {
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
func (rr *Route) retire(topic string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if !rr.hub.Idle(topic) {
		return
	}
	if rr.watched[topic] {
		delete(rr.watched, topic)
		rr.origin.Unwatch(topic) // waits for the session's goroutine, which never takes rr.mu
		rr.logf("relay %s: topic %s idle for %s: upstream session closed", rr.name, topic, rr.cfg.TopicIdleTimeout.D)
	}
	if !rr.spec.Listed[topic] && rr.hub.Forget(topic) {
		delete(rr.known, topic)
	}
}

// addKnown records a topic of the hub; rr.mu is held.
func (rr *Route) addKnown(topic string) {
	rr.known[topic] = topic
}

// ready returns the topic of key, interned when the relay knows it, and whether it can be served at
// once: it has an upstream session and a snapshot. It touches the topic, so that it is not retired as
// idle meanwhile. It does not allocate for a known topic.
func (rr *Route) ready(key []byte) (topic string, ok bool) {
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
func (rr *Route) activate(ctx context.Context, topic string) (int, string) {
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
		rr.origin.Watch(topic)
		rr.mu.Unlock()
		rr.waitSession(ctx, topic)
		if rr.hub.Snapshot(topic) != nil {
			// The cached snapshot may be stale: the session was closed while the topic was idle.
			s, err := rr.origin.Fetch(ctx, topic)
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
		p = &pendingFetch{done: make(chan struct{})}
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
	s, err := rr.origin.Fetch(ctx, topic)
	rr.mu.Lock()
	delete(rr.pending, topic)
	switch {
	case err == nil:
		rr.addKnown(topic)
		rr.watched[topic] = true
		rr.hub.Publish(topic, s)
		rr.hub.CountFetch(topic, nil)
		rr.hub.Touch(topic)
		rr.origin.Watch(topic)
		rr.mu.Unlock()
		rr.waitSession(ctx, topic)
		rr.mu.Lock()
	case rr.closed:
		p.status, p.reason = fasthttp.StatusServiceUnavailable, "relay reloading"
	default:
		p.status, p.reason = fetchStatus(err)
		rr.logf("relay %s: on-demand topic %s: %v", rr.name, topic, err)
	}
	close(p.done)
	rr.mu.Unlock()
	return p.status, p.reason
}

// waitSession waits, within ctx, for the topic's upstream session to connect, so that the
// subscriber about to join misses no change message; past ctx the request is served anyway (its
// snapshot is fresh, and a change made before the session connects resyncs the WebSocket
// subscribers, Hub.Resync).
func (rr *Route) waitSession(ctx context.Context, topic string) {
	if err := rr.origin.WaitSession(ctx, topic); err != nil {
		rr.logf("relay %s: topic %s: serving before its upstream session is open: %v", rr.name, topic, err)
	}
}

// fetchStatus maps a failed first fetch to the client's answer: the upstream's 404 is the
// client's, another answer is a bad gateway, no answer makes the relay unavailable.
func fetchStatus(err error) (int, string) {
	var se *StatusError
	switch {
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		return fasthttp.StatusNotFound, "unknown topic"
	case errors.As(err, &se):
		return fasthttp.StatusBadGateway, "the upstream answered " + strconv.Itoa(se.Status)
	}
	return fasthttp.StatusServiceUnavailable, "upstream unavailable"
}

// Serve answers one request the relay matched (Match), whose auth the caller checked, and returns its
// topic and kind (for the access log). A GET of a topic that is ready (ready) allocates nothing.
func (rr *Route) Serve(ctx *fasthttp.RequestCtx, req Request) (topic, kind string) {
	if req.kind != reqGeneric {
		return rr.serveAppConfig(ctx, req)
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		rr.CountRefused(fasthttp.StatusMethodNotAllowed)
		Serve(ctx, context.Background(), rr.hub, "", rr.opts) // 405 with Allow
		return string(req.Key), RequestKind(ctx)
	}
	wait, topic, ok := rr.admit(ctx, req.Key)
	kind = RequestKind(ctx)
	if !ok {
		return topic, kind
	}
	if wait.cancel != nil {
		defer wait.cancel()
	}
	if kind != "snapshot" && ctx.IsGet() && rr.hub.Subscribers() >= int64(rr.cfg.MaxSubscribers) {
		rr.refuse(ctx, fasthttp.StatusServiceUnavailable, "too many subscribers (max_subscribers)")
		return topic, kind
	}
	rr.count(kind)
	Serve(ctx, wait.ctx, rr.hub, topic, rr.opts)
	if ctx.Response.StatusCode() == fasthttp.StatusServiceUnavailable {
		rr.CountRefused(fasthttp.StatusServiceUnavailable) // no snapshot within wait_timeout
	}
	return topic, kind
}

// waitCtx bounds a request's wait for its topic's first snapshot: none for a topic that is ready,
// wait_timeout for one that was not (cancel then releases it).
type waitCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// admit makes the topic of key servable (ready, else activate) and returns it with the request's
// wait; a topic that cannot be served is refused here (ok false).
func (rr *Route) admit(ctx *fasthttp.RequestCtx, key []byte) (wait waitCtx, topic string, ok bool) {
	wait.ctx = context.Background() // a ready topic is served without waiting
	topic, ready := rr.ready(key)
	if ready {
		return wait, topic, true
	}
	wait.ctx, wait.cancel = context.WithTimeout(wait.ctx, rr.cfg.WaitTimeout.D)
	if status, reason := rr.activate(wait.ctx, topic); status != 0 {
		wait.cancel()
		rr.refuse(ctx, status, reason)
		return waitCtx{}, topic, false
	}
	return wait, topic, true
}

// count counts a request of kind.
func (rr *Route) count(kind string) {
	if i := slices.Index(kinds[:], kind); i >= 0 {
		rr.requests[i].Add(1)
	}
}

// refuse answers status with reason and counts it.
func (rr *Route) refuse(ctx *fasthttp.RequestCtx, status int, reason string) {
	rr.CountRefused(status)
	ctx.Error(strconv.Itoa(status)+" "+fasthttp.StatusMessage(status)+": "+reason+"\n", status)
	if status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", "1")
	}
}

// CountRefused counts a request refused with status (the caller's 401 included).
func (rr *Route) CountRefused(status int) {
	if i := slices.Index(refusals[:], status); i >= 0 {
		rr.refused[i].Add(1)
	}
}
