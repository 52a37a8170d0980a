package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

const (
	// upstreamMaxBackoff caps the reconnect delay of a session.
	upstreamMaxBackoff = 10 * time.Second
	// upstreamStableSession is how long a session must live for its backoff to start over.
	upstreamStableSession = 10 * time.Second
	// upstreamMaxBody bounds a snapshot body read from the upstream.
	upstreamMaxBody = 64 << 20
	// upstreamReadLimit bounds one change message read from an events session.
	upstreamReadLimit = 1 << 20
)

// ErrUpstreamClosed is returned by Fetch once the Upstream is closed.
var ErrUpstreamClosed = errors.New("relay: upstream closed")

// A StatusError is a fetch answered with a status other than 200 (Fetch fails over on a 5xx
// first; a 4xx, such as 404 for a topic the upstream does not have, is returned at once).
type StatusError struct {
	Status int
	msg    string
}

func (e *StatusError) Error() string { return e.msg }

// UpstreamOptions configures an Upstream.
type UpstreamOptions struct {
	// Servers are the upstream servers as "host:port", in order: Servers[0] is the primary,
	// the others backups tried in order. At least one is required.
	Servers []string
	// Snapshot is the upstream snapshot path, e.g. /config/{collection}/{environment}.
	Snapshot *Template
	// Events is the upstream events (WebSocket) path, e.g. /events/{collection}/{environment}.
	Events *Template
	// Names are the path template's names, in topic-key order: a topic "a/b" gives the value
	// "a" to Names[0] and "b" to Names[1].
	Names []string
	// Header is sent on every snapshot request and events upgrade (typically the upstream
	// API key). It is never logged nor put into an error.
	Header http.Header
	// TLS, if set, makes the upstream requests use HTTPS and WSS with this config; nil is
	// plain HTTP.
	TLS *tls.Config
	// FailbackInterval is how often, while a backup is in use, the primary is probed (a GET
	// of the snapshot of a watched topic, or a TCP dial when no topic is watched); when it
	// answers, every session moves back to it. Default 15s.
	FailbackInterval time.Duration
	// Backoff is the first reconnect delay of a session once every server failed; it doubles
	// up to 10s and starts over after a session lived 10s. Default 250ms.
	Backoff time.Duration
	// Timeout bounds a dial and a WebSocket handshake (and a fetch, unless FetchTimeout is
	// set). Default 5s.
	Timeout time.Duration
	// FetchTimeout bounds one snapshot fetch from one server, dial included. Default Timeout.
	FetchTimeout time.Duration
	// KeepAlive is the interval of the pings sent on each events session; a session on which
	// nothing (no message, no pong) arrives for 2*KeepAlive+Timeout is taken for dead and
	// redialled, so that an upstream that hangs without closing is noticed. Default 25s.
	KeepAlive time.Duration
	// Logf receives the session failures and server switches. Default: discarded.
	Logf func(format string, args ...any)
}

// An Upstream manages the upstream side of a relay route: one events WebSocket per watched
// topic, and the snapshot fetches, all against one current server of the set (Servers). When
// the current server fails (a session cannot dial it or upgrade there, or a fetch gets a
// connection error or a 5xx) the next server becomes current at once and every session
// reconnects there; a session that merely ends dials the same server again first; while a backup is current, the primary is probed every
// FailbackInterval and, as soon as it answers, becomes current again. Each session calls
// Hub.PublishChange with each message it receives and Hub.Refresh after it connects and
// after each message, so that the Hub holds the latest snapshot. All methods are safe for
// concurrent use.
type Upstream struct {
	hub    *Hub
	opts   UpstreamOptions
	scheme string // "http" or "https"
	ws     string // "ws" or "wss"
	client *http.Client
	tr     *http.Transport
	dialer *websocket.Dialer

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the Upstream and every running Fetch

	counter  atomic.Uint64 // versions of snapshots that carry none
	switches atomic.Uint64 // server switches (failovers and failbacks)

	mu       sync.Mutex
	cur      int    // index of the current server
	gen      uint64 // bumped at each server switch
	sessions map[string]*upstreamSession
	closed   bool
}

// upstreamSession is the events session of one watched topic.
type upstreamSession struct {
	topic  string
	vals   [][]byte
	ctx    context.Context // cancelled by Unwatch and Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine ends

	connected     chan struct{} // closed at the first connection (WaitSession)
	connectedOnce sync.Once
	messages      atomic.Uint64 // change messages received

	// Under Upstream.mu:
	conn *websocket.Conn // the open connection, nil between connections
	gen  uint64          // the server generation conn was dialed in
}

// NewUpstream returns an Upstream that feeds h, with opts, defaults applied, and starts its
// failback loop. It panics without servers or templates, which configuration validation
// rules out.
func NewUpstream(h *Hub, opts UpstreamOptions) *Upstream {
	if len(opts.Servers) == 0 || opts.Snapshot == nil || opts.Events == nil {
		panic("relay: NewUpstream needs servers and the snapshot and events templates")
	}
	if opts.FailbackInterval <= 0 {
		opts.FailbackInterval = 15 * time.Second
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 250 * time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = opts.Timeout
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 25 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	u := &Upstream{hub: h, opts: opts, scheme: "http", ws: "ws", sessions: map[string]*upstreamSession{}}
	if opts.TLS != nil {
		u.scheme, u.ws = "https", "wss"
	}
	nd := &net.Dialer{Timeout: opts.Timeout, KeepAlive: 30 * time.Second}
	u.tr = &http.Transport{
		DialContext:           nd.DialContext,
		TLSClientConfig:       opts.TLS,
		TLSHandshakeTimeout:   opts.Timeout,
		ResponseHeaderTimeout: opts.FetchTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	u.client = &http.Client{
		Transport: u.tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // the upstream API key must not follow a redirect
		},
	}
	u.dialer = &websocket.Dialer{
		NetDialContext:   nd.DialContext,
		TLSClientConfig:  opts.TLS,
		HandshakeTimeout: opts.Timeout,
	}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.wg.Add(1)
	go u.failbackLoop()
	return u
}

// Current returns the server in use.
func (u *Upstream) Current() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.opts.Servers[u.cur]
}

// Primary returns the primary server (Servers[0]).
func (u *Upstream) Primary() string { return u.opts.Servers[0] }

// Switches returns how many times the current server changed (failovers and failbacks).
func (u *Upstream) Switches() uint64 { return u.switches.Load() }

// Sessions returns the number of open upstream events sessions.
func (u *Upstream) Sessions() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.sessions {
		if s.conn != nil {
			n++
		}
	}
	return n
}

// current returns the index of the current server and its generation.
func (u *Upstream) current() (int, uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cur, u.gen
}

// switchTo makes server idx current, unless a switch happened since generation gen, and
// closes every session's connection so that all of them reconnect there at once. It reports
// whether it switched.
func (u *Upstream) switchTo(idx int, gen uint64, why string) bool {
	u.mu.Lock()
	if u.gen != gen || u.closed {
		u.mu.Unlock()
		return false
	}
	from := u.opts.Servers[u.cur]
	u.cur = idx
	u.gen++
	u.switches.Add(1)
	for _, s := range u.sessions {
		if s.conn != nil {
			_ = s.conn.Close() // its reader sees the error and follows
		}
	}
	u.mu.Unlock()
	u.opts.Logf("relay upstream: switching from %s to %s: %s", from, u.opts.Servers[idx], why)
	return true
}

// fail reports that the current server of generation gen failed: the next one becomes
// current (the primary after the last backup).
func (u *Upstream) fail(gen uint64, why string) {
	u.mu.Lock()
	next := (u.cur + 1) % len(u.opts.Servers)
	u.mu.Unlock()
	u.switchTo(next, gen, why)
}

// Fetch GETs the topic's snapshot from the current server, failing over to the next server on
// a connection error or a 5xx. The snapshot's Version is the "version" field of the JSON body
// if it has one, else the number in the ETag, else a local counter; its Body is the upstream
// body as it is and its ETag the quoted version.
func (u *Upstream) Fetch(ctx context.Context, topic string) (*Snapshot, error) {
	vals, err := u.topicValues(topic)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, ErrUpstreamClosed
	}
	u.wg.Add(1)
	u.mu.Unlock()
	defer u.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(u.ctx, cancel)
	defer stop()

	path := string(u.opts.Snapshot.Expand(nil, u.opts.Names, vals))
	var lastErr error
	for range len(u.opts.Servers) {
		idx, gen := u.current()
		s, status, err := u.get(ctx, u.opts.Servers[idx], path)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			if u.ctx.Err() != nil {
				return nil, ErrUpstreamClosed
			}
			return nil, ctx.Err()
		}
		lastErr = err
		if status != 0 && status < 500 {
			return nil, err // the server answered: another one would answer the same
		}
		u.fail(gen, err.Error())
	}
	return nil, lastErr
}

// get GETs path from server and makes a snapshot of a 200 answer. status is the answer's
// status, 0 if there was none (a connection error).
func (u *Upstream) get(ctx context.Context, server, path string) (s *Snapshot, status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, u.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.scheme+"://"+server+path, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("relay upstream %s: %s: bad request: %v", server, path, err)
	}
	if u.opts.Header != nil {
		req.Header = u.opts.Header.Clone()
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("relay upstream %s: GET %s: %w", server, path, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, upstreamMaxBody+1))
	if err != nil {
		return nil, 0, fmt.Errorf("relay upstream %s: GET %s: reading the body: %w", server, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, &StatusError{Status: resp.StatusCode,
			msg: fmt.Sprintf("relay upstream %s: GET %s: status %d", server, path, resp.StatusCode)}
	}
	if len(body) > upstreamMaxBody {
		return nil, resp.StatusCode, fmt.Errorf("relay upstream %s: GET %s: body larger than %d bytes", server, path, upstreamMaxBody)
	}
	v, ok := jsonVersion(body)
	if !ok {
		v, ok = etagVersion(resp.Header.Get("ETag"))
	}
	local := !ok
	if local {
		v = u.counter.Add(1)
	}
	return &Snapshot{Version: v, ETag: `"` + strconv.FormatUint(v, 10) + `"`, Body: body, Fetched: time.Now(), localVersion: local},
		resp.StatusCode, nil
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the method and URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// jsonVersion returns the "version" field of a JSON object body, if it is a number.
func jsonVersion(body []byte) (uint64, bool) {
	var doc struct {
		Version json.RawMessage `json:"version"`
	}
	if json.Unmarshal(body, &doc) != nil || len(doc.Version) == 0 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(doc.Version), 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// etagVersion returns the number in an entity tag such as `"7"` or `W/"7"`.
func etagVersion(etag string) (uint64, bool) {
	etag = strings.TrimPrefix(etag, "W/")
	etag = strings.TrimSuffix(strings.TrimPrefix(etag, `"`), `"`)
	v, err := strconv.ParseUint(etag, 10, 64)
	return v, err == nil
}

// topicValues splits a topic key into the values of Names.
func (u *Upstream) topicValues(topic string) ([][]byte, error) {
	parts, err := SplitTopic(topic, len(u.opts.Names))
	if err != nil {
		return nil, err
	}
	vals := make([][]byte, len(parts))
	for i, p := range parts {
		vals[i] = []byte(p)
	}
	return vals, nil
}

// fetcher returns the fetch function Refresh gets for topic.
func (u *Upstream) fetcher(topic string) func(context.Context) (*Snapshot, error) {
	return func(ctx context.Context) (*Snapshot, error) { return u.Fetch(ctx, topic) }
}

// Watch makes sure the topic has an events session: it starts one unless there is one. An
// invalid topic is logged and ignored. After Close it does nothing.
func (u *Upstream) Watch(topic string) {
	vals, err := u.topicValues(topic)
	if err != nil {
		u.opts.Logf("relay upstream: not watching: %v", err)
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || u.sessions[topic] != nil {
		return
	}
	s := &upstreamSession{topic: topic, vals: vals, done: make(chan struct{}), connected: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(u.ctx)
	u.sessions[topic] = s
	u.wg.Add(1)
	go u.run(s)
}

// WaitSession waits until the topic's events session has connected once, so that a client
// subscribing after it misses no change message; it returns ctx.Err() if ctx ends first, or
// an error if the topic is not watched.
func (u *Upstream) WaitSession(ctx context.Context, topic string) error {
	u.mu.Lock()
	s := u.sessions[topic]
	u.mu.Unlock()
	if s == nil {
		return fmt.Errorf("relay upstream: topic %s is not watched", topic)
	}
	select {
	case <-s.connected:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return fmt.Errorf("relay upstream: topic %s is no longer watched", topic)
	}
}

// markConnected records the session's first connection.
func (s *upstreamSession) markConnected() { s.connectedOnce.Do(func() { close(s.connected) }) }

// resyncFetch wraps the session's fetch for the refresh that follows a (re)connection: when the
// fetched snapshot differs from the one held before and no change message has arrived since the
// connection opened, the change happened during the gap and its messages are lost, so the
// snapshot is published and the topic's WebSocket subscribers are resynced. (A message on the
// new connection already tells them to fetch the snapshot.)
func (u *Upstream) resyncFetch(s *upstreamSession, fetch func(context.Context) (*Snapshot, error)) func(context.Context) (*Snapshot, error) {
	before, seen := u.hub.Snapshot(s.topic), s.messages.Load()
	return func(ctx context.Context) (*Snapshot, error) {
		snap, err := fetch(ctx)
		if err != nil || before == nil || sameContent(snap, before) || s.messages.Load() != seen {
			return snap, err
		}
		u.hub.Publish(s.topic, snap)
		if n := u.hub.Resync(s.topic); n > 0 {
			u.opts.Logf("relay upstream: topic %s changed while its session was down: %d WebSocket subscriber(s) told to resync", s.topic, n)
		}
		return snap, nil
	}
}

// sameContent reports whether two snapshots of a topic hold the same version: the same
// upstream version, or the same body when the versions are local counts.
func sameContent(a, b *Snapshot) bool {
	if a.localVersion || b.localVersion {
		return bytes.Equal(a.Body, b.Body)
	}
	return a.Version == b.Version
}

// Unwatch closes the topic's events session, if any, and waits for its goroutine to end.
func (u *Upstream) Unwatch(topic string) {
	u.mu.Lock()
	s := u.sessions[topic]
	if s != nil {
		u.endLocked(s)
	}
	u.mu.Unlock()
	if s != nil {
		<-s.done
	}
}

// Close closes every session, stops the failback loop and waits for every goroutine of the
// Upstream and every running Fetch to end. Later Fetch calls fail with ErrUpstreamClosed.
func (u *Upstream) Close() {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		u.wg.Wait()
		return
	}
	u.closed = true
	u.cancel()
	for _, s := range u.sessions {
		u.endLocked(s)
	}
	u.mu.Unlock()
	u.wg.Wait()
	u.tr.CloseIdleConnections()
}

// endLocked forgets session s, cancels it and closes its connection, so that its goroutine
// ends; u.mu is held.
func (u *Upstream) endLocked(s *upstreamSession) {
	delete(u.sessions, s.topic)
	s.cancel()
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// setConn registers c as the session's open connection, dialed in generation gen. It fails,
// and the caller must close c, if the session ended or the server switched meanwhile.
func (u *Upstream) setConn(s *upstreamSession, c *websocket.Conn, gen uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s.ctx.Err() != nil || u.gen != gen {
		return false
	}
	s.conn, s.gen = c, gen
	return true
}

// clearConn unregisters the session's connection.
func (u *Upstream) clearConn(s *upstreamSession) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s.conn = nil
}

// sleep waits for d, or until the session ends; it reports whether the session goes on.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dial opens an events session to server. fault reports an error that is the server's fault
// (a connection error or a 5xx answer), which makes the next server current.
func (u *Upstream) dial(s *upstreamSession, server string) (c *websocket.Conn, fault bool, err error) {
	path := string(u.opts.Events.Expand(nil, u.opts.Names, s.vals))
	ctx, cancel := context.WithTimeout(s.ctx, u.opts.Timeout)
	defer cancel()
	c, resp, err := u.dialer.DialContext(ctx, u.ws+"://"+server+path, u.opts.Header)
	if err == nil {
		return c, false, nil
	}
	if resp != nil {
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
		if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
			return nil, resp.StatusCode >= 500, fmt.Errorf("relay upstream %s: events %s: status %d", server, path, resp.StatusCode)
		}
	}
	return nil, true, fmt.Errorf("relay upstream %s: events %s: %w", server, path, err)
}

// run is the goroutine of a session: it connects to the current server, relays the messages
// and reconnects, until Unwatch or Close.
func (u *Upstream) run(s *upstreamSession) {
	defer u.wg.Done()
	defer close(s.done)
	fetch := u.fetcher(s.topic)
	delay := u.opts.Backoff
	tries := 0     // failures since the last session that lived upstreamStableSession
	quickEnds := 0 // sessions in a row that ended before upstreamStableSession
	backoff := func() bool {
		tries = 0
		if !sleep(s.ctx, delay) {
			return false
		}
		delay = min(delay*2, upstreamMaxBackoff)
		return true
	}
	for s.ctx.Err() == nil {
		idx, gen := u.current()
		server := u.opts.Servers[idx]
		c, fault, err := u.dial(s, server)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			u.opts.Logf("relay upstream: topic %s: %v", s.topic, err)
			if !fault {
				if !backoff() {
					return
				}
				continue
			}
			u.fail(gen, err.Error())
			if tries++; tries < len(u.opts.Servers) {
				continue // try the next server at once
			}
			if !backoff() {
				return
			}
			continue
		}
		if !u.setConn(s, c, gen) {
			_ = c.Close()
			continue // ended, or switched while dialing: follow
		}
		start := time.Now()
		// Changes may have been missed while disconnected: fetch again, and if the snapshot
		// changed meanwhile, the change messages the WebSocket subscribers did not get
		// cannot be replayed, so they are told to resync (Hub.Resync).
		u.hub.Refresh(s.topic, u.resyncFetch(s, fetch))
		s.markConnected()
		c.SetReadLimit(upstreamReadLimit)
		stopPings := u.keepAlive(c)
		for {
			_, msg, err2 := c.ReadMessage()
			if err2 != nil {
				err = err2
				break
			}
			u.alive(c)
			s.messages.Add(1)
			u.hub.PublishChange(s.topic, msg)
			u.hub.Refresh(s.topic, fetch)
		}
		stopPings()
		u.clearConn(s)
		_ = c.Close()
		if s.ctx.Err() != nil {
			return
		}
		if _, g := u.current(); g != gen {
			continue // the server switched: reconnect at once
		}
		u.opts.Logf("relay upstream: topic %s: session with %s ended: %v", s.topic, server, err)
		// One session ending says little about its server (an upstream may drop one slow
		// session on its own), so it does not move the others: the session dials the same
		// server again at once, and only a failed dial (above) moves every session on. A
		// session that keeps ending soon after it opened waits the backoff between tries.
		if time.Since(start) >= upstreamStableSession {
			delay, tries, quickEnds = u.opts.Backoff, 0, 0
		} else if quickEnds++; quickEnds > 1 && !backoff() {
			return
		}
	}
}

// alive pushes the read deadline of an events session back: something arrived.
func (u *Upstream) alive(c *websocket.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(2*u.opts.KeepAlive + u.opts.Timeout))
}

// keepAlive pings the session every KeepAlive and sets its read deadline, which each message
// and pong pushes back; the returned function stops the pings.
func (u *Upstream) keepAlive(c *websocket.Conn) (stop func()) {
	u.alive(c)
	c.SetPongHandler(func(string) error { u.alive(c); return nil })
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(u.opts.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// WriteControl may run concurrently with the reader; a failure shows there.
				if c.WriteControl(websocket.PingMessage, nil, time.Now().Add(u.opts.Timeout)) != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// failbackLoop probes the primary every FailbackInterval while a backup is current, and
// switches back to it when it answers.
func (u *Upstream) failbackLoop() {
	defer u.wg.Done()
	t := time.NewTicker(u.opts.FailbackInterval)
	defer t.Stop()
	for {
		select {
		case <-u.ctx.Done():
			return
		case <-t.C:
		}
		idx, gen := u.current()
		if idx == 0 {
			continue
		}
		if err := u.probe(); err != nil {
			continue
		}
		u.switchTo(0, gen, "the primary answers again")
	}
}

// probe checks that the primary answers: a snapshot GET of a watched topic, or a TCP dial when
// no topic is watched.
func (u *Upstream) probe() error {
	primary := u.opts.Servers[0]
	var topic string
	var vals [][]byte
	u.mu.Lock()
	for t, s := range u.sessions {
		topic, vals = t, s.vals
		break
	}
	u.mu.Unlock()
	if topic == "" {
		ctx, cancel := context.WithTimeout(u.ctx, u.opts.Timeout)
		defer cancel()
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", primary)
		if err != nil {
			return err
		}
		return c.Close()
	}
	_, _, err := u.get(u.ctx, primary, string(u.opts.Snapshot.Expand(nil, u.opts.Names, vals)))
	return err
}
