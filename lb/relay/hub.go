package relay

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Snapshot is one version of a topic's content, as fetched from the upstream. It is
// shared by every reader and subscriber once published, so nothing may modify it (Body
// included) after it is passed to Publish.
type Snapshot struct {
	// Version orders the snapshots of a topic: the upstream's version or a local counter
	// kept by the fetcher. It must strictly increase per topic; Publish refuses any other.
	Version uint64
	// ETag is the quoted entity tag served with the snapshot, e.g. `"7"`.
	ETag string
	// Body is the snapshot as served to clients.
	Body []byte
	// Fetched is when the snapshot was fetched from the upstream.
	Fetched time.Time
	// Seed marks a snapshot read from a seed file at a fast start, not fetched in this run: the
	// first fetched snapshot replaces it whatever the two versions (the upstream may have been
	// reset since the file was written).
	Seed bool

	// localVersion: Version is the fetcher's count, the upstream gave none (origin.go).
	localVersion bool

	// sse holds the snapshot as an SSE event of each name (serve.go), encoded once for every stream.
	sse [numSSENames]struct {
		once sync.Once
		b    []byte
	}
	// upstreamChange is the upstream's latest change message when the snapshot was fetched, which App
	// Configuration's WebSocket subscribers get once the snapshot is cached; change is that frame
	// (appconfig.go), framed once for every subscriber.
	upstreamChange []byte
	change         encoding
	// flatForm is the snapshot in the older REST form of App Configuration (appconfig.go), made once.
	flatForm encoding
	// sum is the SHA-256 of Body, for a binary upgrade's streams to compare (handover.go), made once.
	sum encoding
}

// A Message is what a subscriber receives: exactly one of its fields is set.
type Message struct {
	// Snapshot is set for a newly published snapshot (delivered to subscribers that want
	// Snapshots).
	Snapshot *Snapshot
	// Change is set for a raw change message from the upstream events session, as it was
	// sent (delivered to subscribers that want Changes). It is shared by every subscriber
	// and must not be modified.
	Change []byte
	// encoded, with Change, holds the change encoded once for every subscriber's transport
	// (serve.go: a prepared WebSocket message).
	encoded *encoding
}

// An encoding is a message encoded once, by the first transport writer that needs it, and
// shared by all.
type encoding struct {
	once sync.Once
	v    any
}

// get returns the encoding, computing it with f the first time.
func (e *encoding) get(f func() any) any {
	e.once.Do(func() { e.v = f() })
	return e.v
}

// A Kind says which messages a subscriber wants; it is a bitmask, so a WebSocket client that
// also wants snapshots subscribes with WebSocket|Snapshots.
type Kind uint8

const (
	// Snapshots asks for every snapshot published after Subscribe.
	Snapshots Kind = 1 << iota
	// Changes asks for every raw change message published after Subscribe.
	Changes

	// SSE is what a Server-Sent Events client gets: snapshots.
	SSE = Snapshots
	// WebSocket is what a WebSocket client gets by default: the upstream's change messages,
	// relayed as they were sent.
	WebSocket = Changes
)

// Options configures a Hub. The zero value is usable.
type Options struct {
	// SubscriberBuffer is how many messages may be queued for a subscriber that has not read
	// them yet. The subscriber that would need one more is dropped, so that one slow client
	// never delays the others or the publisher. Default 16.
	SubscriberBuffer int
	// TopicIdleTimeout is how long a topic may have no subscriber before IdleTopics reports
	// it, so that its upstream session can be closed. Default 5 minutes.
	TopicIdleTimeout time.Duration
	// Now is the clock for idle times; tests inject one. Default time.Now.
	Now func() time.Time
	// OnFetchError is called, from the goroutine Refresh started, with each error a fetch
	// returned. It must not block for long: the next fetch of that topic waits for it.
	// Default: errors are ignored.
	OnFetchError func(topic string, err error)
}

// ErrClosed is returned by WaitSnapshot once the Hub is closed.
var ErrClosed = errors.New("relay: hub closed")

// errNoSnapshot is reported when a fetch returns neither a snapshot nor an error.
var errNoSnapshot = errors.New("relay: fetch returned no snapshot and no error")

// A Hub holds every topic of a relay: its latest snapshot, its subscribers and the state of
// its fetches. Topics are created on first use (WaitSnapshot, Subscribe, Publish, Refresh)
// and live as long as the Hub, so the caller must only pass topics it accepts (configured
// ones), never arbitrary client input. All methods are safe for concurrent use.
//
// Fan-out is built for many subscribers per topic and rare publishes: each topic keeps its
// subscribers in a slice that is only appended to or replaced, never reordered in place, and
// a publish walks it doing a non-blocking send to each subscriber's buffered channel. The
// Hub runs no goroutine per subscriber (the transport's writer reads Subscriber.C) and
// allocates nothing per subscriber when publishing.
type Hub struct {
	opts   Options
	ctx    context.Context // passed to fetches; cancelled by Close
	cancel context.CancelFunc

	changes     atomic.Uint64 // snapshots stored and topics forgotten (Changes)
	subscribers atomic.Int64  // open subscribers of every topic (Subscribers)

	mu     sync.Mutex                        // serialises topic creation and Close
	topics atomic.Pointer[map[string]*topic] // copy-on-write, so that lookups take no lock
	closed bool                              // under mu
}

// topic is the state of one topic. Its two mutexes are always taken in the order pubMu,
// then subsMu.
type topic struct {
	name  string
	now   func() time.Time // Options.Now
	snap  atomic.Pointer[Snapshot]
	ready chan struct{} // closed by the first Publish, under pubMu

	// pubMu serialises every send on and close of a subscriber channel of this topic, and
	// the publishes of its snapshots. That makes "send to a closed channel" impossible and
	// keeps stored versions increasing; publishes of one topic are rare, so serialising them
	// costs nothing that matters.
	pubMu sync.Mutex

	// subs is the subscriber set. Subscribe appends under subsMu only, so it never waits
	// for a fan-out: appending writes past the length readers loaded, and a full slice is
	// reallocated by append. Closed subscribers stay in the slice (senders skip them) until
	// they outnumber the live ones; the slice is then compacted into a new array under both
	// mutexes. Both Subscribe and Close are thus amortised O(1), where removing each closed
	// subscriber at once would make the departure of N subscribers cost O(N²).
	subs   atomic.Pointer[[]*Subscriber]
	subsMu sync.Mutex
	live   int           // subscribers not closed; under subsMu
	total  *atomic.Int64 // the Hub's count of open subscribers, which live is part of
	stale  int           // closed subscribers still in subs; under subsMu
	idle   time.Time     // when live last became 0 (or the topic was created); zero while live > 0; under subsMu
	closed bool          // set by Hub.Close; under subsMu

	publishes, drops, fetches, fetchErrors atomic.Uint64

	// history holds the topic's latest change messages, the one of count n-1 at (n-1)%historyLen,
	// for a subscriber taken over from another process to be sent those it missed
	// (SubscribeAfter); under pubMu.
	history [historyLen][]byte
	changes uint64

	refreshMu sync.Mutex
	running   bool                                         // a Refresh goroutine is fetching; under refreshMu
	dirty     bool                                         // fetch again when it ends; under refreshMu
	fetch     func(ctx context.Context) (*Snapshot, error) // the latest fetch given to Refresh; under refreshMu
}

// A Subscriber receives a topic's messages on C until it is closed, by Close, by the Hub
// when it falls SubscriberBuffer messages behind (Dropped then reports true), or by Hub.Close.
type Subscriber struct {
	t       *topic
	kind    Kind
	ch      chan Message
	closed  bool // the channel is closed; under t.pubMu
	dropped atomic.Bool
	resync  atomic.Bool // closed by Resync: it missed changes and should start again
}

// NewHub returns a Hub with opts, defaults applied.
func NewHub(opts Options) *Hub {
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = 16
	}
	if opts.TopicIdleTimeout <= 0 {
		opts.TopicIdleTimeout = 5 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Hub{opts: opts}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.topics.Store(&map[string]*topic{})
	return h
}

// lookup returns the topic or nil, without locking.
func (h *Hub) lookup(name string) *topic {
	return (*h.topics.Load())[name]
}

// get returns the topic, creating it if needed. Creation copies the map, which is fine for
// the handful of topics a relay has.
func (h *Hub) get(name string) *topic {
	if t := h.lookup(name); t != nil {
		return t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.topics.Load()
	if t := old[name]; t != nil {
		return t
	}
	t := &topic{name: name, now: h.opts.Now, ready: make(chan struct{}), idle: h.opts.Now(), closed: h.closed,
		total: &h.subscribers}
	m := make(map[string]*topic, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = t
	h.topics.Store(&m)
	return t
}

// Snapshot returns the topic's latest snapshot, or nil if it has none yet (or is unknown).
// It takes no lock, so GET requests never contend with publishes or each other.
func (h *Hub) Snapshot(topic string) *Snapshot {
	if t := h.lookup(topic); t != nil {
		return t.snap.Load()
	}
	return nil
}

// WaitSnapshot returns the topic's latest snapshot, waiting for the first one if there is
// none yet, so that the first requests for a topic are answered once its first fetch ends
// rather than failed. It creates the topic if needed; starting the fetch is the caller's
// business (Refresh). It returns ctx.Err() if ctx ends first, and ErrClosed if the Hub is
// closed before the snapshot arrives.
func (h *Hub) WaitSnapshot(ctx context.Context, topic string) (*Snapshot, error) {
	t := h.get(topic)
	if s := t.snap.Load(); s != nil {
		return s, nil
	}
	select {
	case <-t.ready:
		return t.snap.Load(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.ctx.Done():
		return nil, ErrClosed
	}
}

// Publish stores s as the topic's snapshot if its Version is greater than the current one's
// and sends it to every subscriber that wants Snapshots; it returns false, and does nothing,
// otherwise (an older or repeated version, e.g. from a fetch that raced a newer one). Over a
// Seed snapshot, a fetched one is stored whatever its version, and sent unless it has the
// seed's version and body (then it only replaces the seed, silently). It never blocks on a
// subscriber: one whose buffer is full is dropped. s must not be modified afterwards.
func (h *Hub) Publish(topic string, s *Snapshot) bool {
	t := h.get(topic)
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	if cur := t.snap.Load(); cur != nil && cur.Seed && !s.Seed {
		if s.Version == cur.Version && bytes.Equal(s.Body, cur.Body) {
			t.snap.Store(s)
			h.changes.Add(1)
			return false
		}
	} else if cur != nil && s.Version <= cur.Version {
		return false
	}
	first := t.snap.Load() == nil
	t.snap.Store(s)
	t.publishes.Add(1)
	h.changes.Add(1)
	if first {
		close(t.ready)
	}
	t.fanOut(Message{Snapshot: s}, Snapshots)
	return true
}

// historyLen is how many of its latest change messages a topic keeps (SubscribeAfter).
const historyLen = 32

// PublishChange sends a copy of msg (one copy, shared by all) to every subscriber of the
// topic that wants Changes, and keeps it among the topic's latest (SubscribeAfter). A topic that
// does not exist is not created, and msg is then not copied. Like Publish, it never blocks on a
// subscriber.
func (h *Hub) PublishChange(topic string, msg []byte) {
	t := h.lookup(topic)
	if t == nil {
		return
	}
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	c := append([]byte(nil), msg...)
	t.history[t.changes%historyLen] = c
	t.changes++
	if subs := t.subs.Load(); subs == nil || len(*subs) == 0 {
		return
	}
	t.fanOut(Message{Change: c, encoded: &encoding{}}, Changes)
}

// SubscribeAfter is Subscribe for a subscriber of change messages that another process (the old
// one of a binary upgrade) last sent the change message last: it also returns the change messages
// the topic got after last, in order, to send it first, with found true. When last is not among the
// topic's latest messages, found is false and latest holds them all: this process's session is
// behind the other's (last is to come, after some of them), or opened after last (they all came
// after it). No message published after it returns is among them.
func (h *Hub) SubscribeAfter(topic string, kind Kind, last []byte) (s *Subscriber, latest [][]byte, found bool) {
	t := h.get(topic)
	t.pubMu.Lock() // no change message between the subscription and the look at the latest
	defer t.pubMu.Unlock()
	s = h.Subscribe(topic, kind)
	n := min(t.changes, historyLen)
	for i := range n { // the newest first: a message repeated is the last one sent
		k := t.changes - 1 - i
		if bytes.Equal(t.history[k%historyLen], last) {
			for j := k + 1; j < t.changes; j++ {
				latest = append(latest, t.history[j%historyLen])
			}
			return s, latest, true
		}
	}
	for j := t.changes - n; j < t.changes; j++ {
		latest = append(latest, t.history[j%historyLen])
	}
	return s, latest, false
}

// Resubscribe replaces s by a subscriber of its topic that wants kind, with no message published in
// between: it returns the new one and the messages s had queued, in order, for the caller to handle
// first; s is closed. A closed s is returned as it is.
func (h *Hub) Resubscribe(s *Subscriber, kind Kind) (*Subscriber, []Message) {
	t := s.t
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	if s.closed {
		return s, nil
	}
	ns := h.Subscribe(t.name, kind)
	var queued []Message
	for len(s.ch) > 0 {
		queued = append(queued, <-s.ch)
	}
	s.closed = true
	close(s.ch)
	t.subsMu.Lock()
	t.removed(1)
	t.subsMu.Unlock()
	return ns, queued
}

// fanOut sends m to every open subscriber that wants kind, dropping those whose buffer is
// full. The caller holds t.pubMu.
func (t *topic) fanOut(m Message, kind Kind) {
	p := t.subs.Load()
	if p == nil {
		return
	}
	dropped := 0
	for _, s := range *p {
		if s.closed || s.kind&kind == 0 {
			continue
		}
		select {
		case s.ch <- m:
		default:
			s.dropped.Store(true)
			s.closed = true
			close(s.ch)
			dropped++
		}
	}
	if dropped > 0 {
		t.drops.Add(uint64(dropped))
		t.subsMu.Lock()
		t.removed(dropped)
		t.subsMu.Unlock()
	}
}

// removed accounts for n subscribers that were just closed, compacting the set when closed
// ones outnumber the live ones. The caller holds t.pubMu and t.subsMu, so no subscriber's
// closed flag changes meanwhile.
func (t *topic) removed(n int) {
	t.live -= n
	t.total.Add(int64(-n))
	t.stale += n
	if t.live == 0 {
		t.idle = t.now()
		t.stale = 0
		t.subs.Store(nil)
		return
	}
	if t.stale > t.live {
		old := *t.subs.Load()
		subs := make([]*Subscriber, 0, t.live+t.live/2)
		for _, s := range old {
			if !s.closed {
				subs = append(subs, s)
			}
		}
		t.stale = 0
		t.subs.Store(&subs)
	}
}

// Subscribe returns a subscriber that receives every message of kind published on the topic
// after it returns, creating the topic if needed. It does not receive the current snapshot:
// a transport that starts a stream with it subscribes first, then sends Snapshot(topic), and
// skips received snapshots whose Version is not greater than the one it sent. That way no
// version is missed. After Hub.Close it returns a subscriber that is already closed.
func (h *Hub) Subscribe(topic string, kind Kind) *Subscriber {
	t := h.get(topic)
	s := &Subscriber{t: t, kind: kind, ch: make(chan Message, h.opts.SubscriberBuffer)}
	t.subsMu.Lock()
	defer t.subsMu.Unlock()
	if t.closed {
		s.closed = true // not shared yet, so no lock needed
		close(s.ch)
		return s
	}
	var subs []*Subscriber
	if p := t.subs.Load(); p != nil {
		subs = *p
	}
	subs = append(subs, s)
	t.subs.Store(&subs)
	t.live++
	t.total.Add(1)
	t.idle = time.Time{}
	return s
}

// C returns the channel the subscriber's messages arrive on. It is closed when the
// subscriber is closed (by Close, by a drop, or by Hub.Close), after the messages already
// queued, so a reader ranges over it and then checks Dropped.
func (s *Subscriber) C() <-chan Message { return s.ch }

// Dropped reports whether the Hub closed the subscriber because its buffer was full: the
// client fell behind and should be told so (its stream ended, it may reconnect).
func (s *Subscriber) Dropped() bool { return s.dropped.Load() }

// Resynced reports whether Resync closed the subscriber: changes happened that it was not
// sent, and its client should reconnect and fetch the snapshot.
func (s *Subscriber) Resynced() bool { return s.resync.Load() }

// Resync closes the topic's subscribers that want Changes (after the messages already queued),
// marking them Resynced: the upstream changed the topic while its events session was down, so
// they missed change messages that cannot be replayed. Their clients reconnect and fetch the
// snapshot. It returns how many it closed.
func (h *Hub) Resync(topic string) int {
	t := h.lookup(topic)
	if t == nil {
		return 0
	}
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	p := t.subs.Load()
	if p == nil {
		return 0
	}
	n := 0
	for _, s := range *p {
		if s.closed || s.kind&Changes == 0 {
			continue
		}
		s.resync.Store(true)
		s.closed = true
		close(s.ch)
		n++
	}
	if n > 0 {
		t.subsMu.Lock()
		t.removed(n)
		t.subsMu.Unlock()
	}
	return n
}

// Close unsubscribes: no message is sent after it returns and C is closed. It is safe to
// call more than once and concurrently with publishes and drops.
func (s *Subscriber) Close() {
	t := s.t
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.ch)
	t.subsMu.Lock()
	t.removed(1)
	t.subsMu.Unlock()
}

// A TopicStats describes one topic, for the status page and metrics.
type TopicStats struct {
	Topic       string
	Subscribers int       // open subscribers
	Version     uint64    // of the current snapshot; 0 if none
	Fetched     time.Time // of the current snapshot; zero if none
	Publishes   uint64    // snapshots published
	Drops       uint64    // subscribers dropped for falling behind
	Fetches     uint64    // fetches ended: those run by Refresh and those counted by CountFetch
	FetchErrors uint64    // of which failed
}

// Topics returns the statistics of every topic, sorted by name.
func (h *Hub) Topics() []TopicStats {
	m := *h.topics.Load()
	out := make([]TopicStats, 0, len(m))
	for _, t := range m {
		st := TopicStats{Topic: t.name, Publishes: t.publishes.Load(), Drops: t.drops.Load(),
			Fetches: t.fetches.Load(), FetchErrors: t.fetchErrors.Load()}
		if s := t.snap.Load(); s != nil {
			st.Version, st.Fetched = s.Version, s.Fetched
		}
		t.subsMu.Lock()
		st.Subscribers = t.live
		t.subsMu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b TopicStats) int {
		switch {
		case a.Topic < b.Topic:
			return -1
		case a.Topic > b.Topic:
			return 1
		}
		return 0
	})
	return out
}

// IdleTopics returns, sorted, the topics that have had no subscriber for more than
// TopicIdleTimeout (by Options.Now), counting from the departure of the last subscriber, the
// last Touch, or, for a topic that never had a subscriber, its creation. The upstream manager closes their
// upstream sessions. A topic stays reported until it gets a subscriber again, so the caller
// must tolerate seeing it repeatedly.
func (h *Hub) IdleTopics() []string {
	now := h.opts.Now()
	var out []string
	for _, t := range *h.topics.Load() {
		if t.isIdle(now, h.opts.TopicIdleTimeout) {
			out = append(out, t.name)
		}
	}
	slices.Sort(out)
	return out
}

// Idle reports whether the topic has had no subscriber for more than TopicIdleTimeout (see
// IdleTopics). An unknown topic is not idle.
func (h *Hub) Idle(topic string) bool {
	t := h.lookup(topic)
	return t != nil && t.isIdle(h.opts.Now(), h.opts.TopicIdleTimeout)
}

// isIdle reports whether t has had no subscriber for more than timeout at now.
func (t *topic) isIdle(now time.Time, timeout time.Duration) bool {
	t.subsMu.Lock()
	defer t.subsMu.Unlock()
	return t.live == 0 && !t.idle.IsZero() && now.Sub(t.idle) > timeout
}

// Forget removes an idle topic (see Idle) with its snapshot, so that the topics a relay
// accepts on demand do not accumulate; it reports whether it did. A later use creates the
// topic again, empty. The caller makes sure that no request is about to subscribe to it (a
// request that does calls Touch first, which makes the topic not idle).
func (h *Hub) Forget(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.topics.Load()
	t := old[name]
	if t == nil || !t.isIdle(h.opts.Now(), h.opts.TopicIdleTimeout) {
		return false
	}
	m := make(map[string]*topic, len(old))
	for k, v := range old {
		if k != name {
			m[k] = v
		}
	}
	h.topics.Store(&m)
	h.changes.Add(1)
	return true
}

// CountFetch records, in the topic's statistics, a fetch made outside Refresh (the first fetch of
// a topic, a fetch at start) that ended with err. A topic that does not exist is not created.
func (h *Hub) CountFetch(topic string, err error) {
	if t := h.lookup(topic); t != nil {
		t.countFetch(err)
	}
}

// countFetch records a fetch that ended with err.
func (t *topic) countFetch(err error) {
	t.fetches.Add(1)
	if err != nil {
		t.fetchErrors.Add(1)
	}
}

// Subscribers returns the number of open subscribers of every topic.
func (h *Hub) Subscribers() int64 { return h.subscribers.Load() }

// Changes counts the changes to the cache: snapshots stored and topics forgotten. A caller that
// saves the cache (a seed file) saves it again when this has moved.
func (h *Hub) Changes() uint64 { return h.changes.Load() }

// Touch records a use of the topic that is not a subscription (a client GET of its
// snapshot): a topic without subscribers is idle from its last use, so one that clients still
// read keeps its upstream session and stays fresh. A topic that does not exist is not created.
func (h *Hub) Touch(topic string) {
	t := h.lookup(topic)
	if t == nil {
		return
	}
	t.subsMu.Lock()
	if t.live == 0 {
		t.idle = t.now()
	}
	t.subsMu.Unlock()
}

// Close closes every subscriber (their C channels end; Dropped stays false), cancels the
// context of running fetches, makes waiting WaitSnapshot calls return ErrClosed, and makes
// later Subscribe calls return closed subscribers and later Refresh calls do nothing.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.cancel()
	h.mu.Unlock()
	for _, t := range *h.topics.Load() {
		t.pubMu.Lock()
		t.subsMu.Lock()
		t.closed = true
		if p := t.subs.Load(); p != nil {
			for _, s := range *p {
				if !s.closed {
					s.closed = true
					close(s.ch)
				}
			}
		}
		t.subs.Store(nil)
		if t.live > 0 {
			t.idle = h.opts.Now()
		}
		t.total.Add(int64(-t.live))
		t.live, t.stale = 0, 0
		t.subsMu.Unlock()
		t.pubMu.Unlock()
	}
}

// Refresh fetches the topic's snapshot in a goroutine of its own and publishes it, unless a
// fetch of that topic is already running: then exactly one more fetch runs once it ends,
// however many Refresh calls arrived meanwhile (the latest fetch function is used). A burst
// of change signals thus costs at most two fetches, and the last one starts after the last
// signal, so the published snapshot is never older than the last change signalled. Refresh
// never blocks. Fetch errors go to Options.OnFetchError; a fetch that returns an older
// version than the current is silently not published. fetch gets a context that Hub.Close
// cancels. After Close, Refresh does nothing.
func (h *Hub) Refresh(topic string, fetch func(ctx context.Context) (*Snapshot, error)) {
	if h.ctx.Err() != nil {
		return
	}
	t := h.get(topic)
	t.refreshMu.Lock()
	t.fetch = fetch
	if t.running {
		t.dirty = true
		t.refreshMu.Unlock()
		return
	}
	t.running = true
	t.refreshMu.Unlock()
	go h.refreshLoop(t)
}

// refreshLoop runs the fetches of one topic until no Refresh arrived during the last one.
func (h *Hub) refreshLoop(t *topic) {
	for {
		t.refreshMu.Lock()
		fetch := t.fetch
		t.dirty = false
		t.refreshMu.Unlock()

		if h.ctx.Err() == nil {
			s, err := fetch(h.ctx)
			if err == nil && s == nil {
				err = errNoSnapshot
			}
			t.countFetch(err)
			if err != nil {
				if h.opts.OnFetchError != nil {
					h.opts.OnFetchError(t.name, err)
				}
			} else {
				h.Publish(t.name, s)
			}
		}

		t.refreshMu.Lock()
		if !t.dirty || h.ctx.Err() != nil {
			t.running = false
			t.refreshMu.Unlock()
			return
		}
		t.refreshMu.Unlock()
	}
}
