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

	"github.com/fairlead/fairlead/lb/relay/paths"
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

// ErrNoServer is returned by Fetch when its pool has no server available.
var ErrNoServer = errors.New("relay upstream: no server of the pool is available")

// Pool is where an Upstream's fetches and sessions go: the load balancer's pool that holds the relay's
// servers, the one judge of their health (package lb). The Upstream asks it which server to use, tells
// it how each attempt ended, and follows its changes; it keeps no verdict of its own.
type Pool interface {
	// Choose returns the server ("host:port") to use now, other than those in tried (servers that
	// failed the attempt under way); "" when none is available.
	Choose(tried []string) string
	// Report tells how an attempt on server ended: nil when the server answered (a 4xx is the
	// request's problem, not the server's), else the server's fault: it refused or timed out the
	// connection, or dropped an events session. A 5xx answer is not reported either way (the next
	// choice is tried).
	Report(server string, err error)
	// Changed returns a channel closed when Choose's answer may have changed.
	Changed() <-chan struct{}
}

// A StatusError is a fetch answered with a status other than 200 (on a 5xx Fetch tries the
// pool's next choice first; a 4xx, such as 404 for a topic the upstream does not have, is returned at once).
type StatusError struct {
	Status int
	msg    string
}

func (e *StatusError) Error() string { return e.msg }

// OriginOptions configures an Upstream.
type OriginOptions struct {
	// Pool chooses the server of every fetch and session and hears how each ended. Required.
	Pool Pool
	// Snapshot is the upstream snapshot path, e.g. /config/{collection}/{environment}.
	Snapshot *paths.Template
	// Events is the upstream events (WebSocket) path, e.g. /events/{collection}/{environment}.
	Events *paths.Template
	// Names are the path template's names, in topic-key order: a topic "a/b" gives the value
	// "a" to Names[0] and "b" to Names[1].
	Names []string
	// SnapshotPath and EventsPath, if set, append the upstream path (and query) of a topic's snapshot
	// and events session on server to dst, in place of the Snapshot and Events templates (App
	// Configuration's, which name the server's instance).
	SnapshotPath, EventsPath func(dst []byte, server string, vals [][]byte) []byte
	// Header is sent on every snapshot request and events upgrade (typically the upstream
	// API key). It is never logged nor put into an error.
	Header http.Header
	// Tokens, if set, gives the bearer token sent as Authorization on every fetch, events upgrade
	// and forwarded POST (App Configuration's IAM tokens); an answer 401 tells it the token was
	// refused, and the attempt is made once more with a new one.
	Tokens *TokenSource
	// Heartbeat, if set, is an events message that only says the session is alive (App
	// Configuration's "test message"): it neither signals a change nor causes a fetch.
	Heartbeat []byte
	// TLS, if set, makes the upstream requests use HTTPS and WSS with this config; nil is
	// plain HTTP.
	TLS *tls.Config
	// Backoff is the first reconnect delay of a session once every server failed or none is
	// available (the session redials sooner if the pool changes); it doubles up to 10s and starts
	// over after a session lived 10s. Default 250ms.
	Backoff time.Duration
	// Timeout bounds a dial and a WebSocket handshake (and a fetch, unless FetchTimeout is
	// set). Default 5s.
	Timeout time.Duration
	// FetchTimeout bounds one snapshot fetch from one server, dial included. Default Timeout.
	FetchTimeout time.Duration
	// KeepAlive is the interval of the pings sent on each events session; a session on which
	// nothing (no message, no pong) arrives for 2*KeepAlive+Timeout is taken for dead and
	// redialled, so that an upstream that hangs without closing is noticed. With a Heartbeat no ping
	// is sent: a session without a message (a heartbeat) for that long is dead. Default 25s.
	KeepAlive time.Duration
	// Logf receives the session failures and the moves between servers. Default: discarded.
	Logf func(format string, args ...any)
}

// An Origin manages the upstream side of a relay route: one events WebSocket per watched
// topic, and the snapshot fetches, all going to the server its Pool chooses. Every attempt's end
// is reported to the Pool; an attempt that failed by the server's fault goes at once to the
// Pool's next choice (other than the servers that failed it). When the Pool's choice changes (the
// server in use became unavailable by its health checks or the failures reported, or a better one
// is available again: a failback), every session moves to the new choice. A session that ends
// normally dials the same choice again. Each session calls Hub.PublishChange with each message it
// receives and Hub.Refresh after it connects and after each message, so that the Hub holds the
// latest snapshot. All methods are safe for concurrent use.
type Origin struct {
	hub    *Hub
	opts   OriginOptions
	scheme string // "http" or "https"
	ws     string // "ws" or "wss"
	client *http.Client
	tr     *http.Transport
	dialer *websocket.Dialer

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the Upstream and every running Fetch

	counter  atomic.Uint64 // versions of snapshots that carry none
	switches atomic.Uint64 // moves of the sessions to another server (the pool's choice changed)
	kick     chan struct{} // Recheck: look at the pool's choice now

	mu       sync.Mutex
	cur      string // the pool's choice, as last seen: the server the sessions follow ("": none available)
	last     string // the latest choice that was a server (Current)
	gen      uint64 // bumped at each change of cur
	sessions map[string]*originSession
	closed   bool
}

// originSession is the events session of one watched topic.
type originSession struct {
	topic  string
	vals   [][]byte
	ctx    context.Context // cancelled by Unwatch and Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine ends

	connected     chan struct{} // closed at the first connection (WaitSession)
	connectedOnce sync.Once
	messages      atomic.Uint64          // change messages received
	lastChange    atomic.Pointer[[]byte] // the latest change message, which the next snapshot carries

	// Under Upstream.mu:
	conn   *websocket.Conn // the open connection, nil between connections
	server string          // conn's server
	moved  bool            // conn was closed to follow the pool's choice
}

// NewOrigin returns an Upstream that feeds h, with opts, defaults applied, and starts following
// its pool. It panics without a pool or templates, which configuration validation rules out.
func NewOrigin(h *Hub, opts OriginOptions) *Origin {
	if opts.Pool == nil || (opts.Snapshot == nil || opts.Events == nil) && (opts.SnapshotPath == nil || opts.EventsPath == nil) {
		panic("relay: NewOrigin needs a pool and the snapshot and events paths")
	}
	if opts.SnapshotPath == nil {
		snapshot, events, names := opts.Snapshot, opts.Events, opts.Names
		opts.SnapshotPath = func(dst []byte, _ string, vals [][]byte) []byte { return snapshot.Expand(dst, names, vals) }
		opts.EventsPath = func(dst []byte, _ string, vals [][]byte) []byte { return events.Expand(dst, names, vals) }
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
	u := &Origin{hub: h, opts: opts, scheme: "http", ws: "ws", sessions: map[string]*originSession{},
		kick: make(chan struct{}, 1)}
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
	go u.follow()
	return u
}

// Current returns the server the sessions follow: the pool's choice as last seen (while the pool
// has none available, the one before; "" before the pool had any server available).
func (u *Origin) Current() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// Switches returns how many times the sessions moved to another server because the pool's choice
// changed (failovers and failbacks).
func (u *Origin) Switches() uint64 { return u.switches.Load() }

// Recheck asks the Upstream to look at its pool's choice now, as a change of the pool would.
func (u *Origin) Recheck() {
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Sessions returns the number of open upstream events sessions.
func (u *Origin) Sessions() int {
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

// follow moves the sessions whenever the pool's choice changes, until Close.
func (u *Origin) follow() {
	defer u.wg.Done()
	for {
		changed := u.opts.Pool.Changed()
		u.recheck()
		select {
		case <-changed:
		case <-u.kick:
		case <-u.ctx.Done():
			return
		}
	}
}

// recheck makes the pool's choice the server to follow and closes the connections of the sessions
// on another server, so that they reconnect to it at once. When the pool has no server available,
// every session's server is down by its verdict: their connections are closed too (a server that
// went away may leave a connection that says nothing until the keep-alive gives up), and the
// sessions wait for the pool's next change.
func (u *Origin) recheck() {
	next := u.opts.Pool.Choose(nil)
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	from := u.last
	if next != u.cur {
		// A session that dialed the former choice meanwhile does not keep it (setConn); while the
		// pool has no server available, none keeps a connection.
		u.cur = next
		u.gen++
	}
	if next != "" {
		if from != "" && next != from {
			u.switches.Add(1)
		}
		u.last = next
	}
	n := 0
	for _, s := range u.sessions {
		if s.conn != nil && s.server != next {
			s.moved = true
			_ = s.conn.Close() // its reader sees the error and follows
			n++
		}
	}
	u.mu.Unlock()
	switch {
	case next == "" && n > 0:
		u.opts.Logf("relay upstream: the pool has no server available: %d session(s) closed", n)
	case from != "" && next != from && next != "":
		u.opts.Logf("relay upstream: the pool's choice is now %s (was %s): %d session(s) move", next, from, n)
	}
}

// choose returns the server for an attempt (the pool's choice, other than those in tried) and the
// generation of the choice the attempt began in.
func (u *Origin) choose(tried []string) (string, uint64) {
	u.mu.Lock()
	gen := u.gen
	u.mu.Unlock()
	return u.opts.Pool.Choose(tried), gen
}

// Fetch GETs the topic's snapshot from the pool's choice, and from its next choice after a
// connection error, a timeout or a 5xx (each reported to the pool). The snapshot's Version is the "version" field of the JSON body
// if it has one, else the number in the ETag, else a local counter; its Body is the upstream
// body as it is and its ETag the quoted version.
func (u *Origin) Fetch(ctx context.Context, topic string) (*Snapshot, error) {
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

	var tried []string
	lastErr := ErrNoServer
	for {
		server := u.opts.Pool.Choose(tried)
		if server == "" {
			return nil, lastErr
		}
		s, status, err := u.get(ctx, server, string(u.opts.SnapshotPath(nil, server, vals)), topic)
		if err == nil {
			u.opts.Pool.Report(server, nil)
			return s, nil
		}
		if ctx.Err() != nil { // the caller's end, or Close: not the server's fault
			if u.ctx.Err() != nil {
				return nil, ErrUpstreamClosed
			}
			return nil, ctx.Err()
		}
		if noToken(err) {
			return nil, err // no server can be asked without a token
		}
		switch {
		case status != 0 && status < 500:
			u.opts.Pool.Report(server, nil)
			return nil, err // the server answered: another one would answer the same
		case status == 0:
			u.opts.Pool.Report(server, err)
		}
		// A 5xx is an answer, which a pool's health does not count against its server (as for a
		// proxied request), but another server may have the snapshot: the next choice is tried.
		lastErr = err
		tried = append(tried, server)
	}
}

// get GETs path from server and makes a snapshot of topic from a 200 answer. status is the answer's
// status, 0 if there was none (a connection error, or no IAM token).
func (u *Origin) get(ctx context.Context, server, path, topic string) (s *Snapshot, status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, u.opts.FetchTimeout)
	defer cancel()
	resp, err := u.do(ctx, server, http.MethodGet, path, nil, "")
	if err != nil {
		return nil, 0, fmt.Errorf("relay upstream %s: GET %s: %w", server, path, err)
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
		// Versions are counted here: the same content is the same snapshot (not a new version to push;
		// over a seed, it replaces it silently), other content a version above the one held.
		cur := u.hub.Snapshot(topic)
		switch {
		case cur != nil && (cur.localVersion || cur.Seed) && bytes.Equal(cur.Body, body):
			v = cur.Version
		case cur != nil:
			v = max(u.counter.Add(1), cur.Version+1)
		default:
			v = u.counter.Add(1)
		}
	}
	snap := &Snapshot{Version: v, ETag: `"` + strconv.FormatUint(v, 10) + `"`, Body: body, Fetched: time.Now(), localVersion: local}
	u.mu.Lock()
	if ss := u.sessions[topic]; ss != nil {
		if m := ss.lastChange.Load(); m != nil {
			snap.upstreamChange = *m
		}
	}
	u.mu.Unlock()
	return snap, resp.StatusCode, nil
}

// do sends one request to server, with the relay's headers and, with Tokens, its bearer token: once
// more with a new token when the answer is 401. The caller closes the answer's body.
func (u *Origin) do(ctx context.Context, server, method, path string, body []byte, contentType string) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u.scheme+"://"+server+path, bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("bad request: %v", err)
		}
		if body == nil {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		if u.opts.Header != nil {
			req.Header = u.opts.Header.Clone()
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		token, err := u.bearer(ctx, req.Header)
		if err != nil {
			return nil, err
		}
		resp, err := u.client.Do(req)
		if err != nil {
			return nil, unwrapURLError(err)
		}
		if resp.StatusCode == http.StatusUnauthorized && token != "" && attempt == 0 {
			_ = resp.Body.Close()
			u.opts.Tokens.Rejected(token)
			continue
		}
		return resp, nil
	}
}

// bearer sets h's Authorization to the current IAM token, with Tokens, and returns the token.
func (u *Origin) bearer(ctx context.Context, h http.Header) (string, error) {
	if u.opts.Tokens == nil {
		return "", nil
	}
	token, err := u.opts.Tokens.Token(ctx)
	if err != nil {
		return "", &tokenError{err}
	}
	h.Set("Authorization", "Bearer "+token)
	return token, nil
}

// A tokenError is an attempt that could not start for want of an IAM token: not its server's fault.
type tokenError struct{ err error }

func (e *tokenError) Error() string { return e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

// noToken reports whether err is a tokenError.
func noToken(err error) bool {
	var te *tokenError
	return errors.As(err, &te)
}

// Forward sends a client's request (App Configuration's usage and analytics POSTs) to the pool's
// choice at path(server), with the relay's headers and token in place of the client's credential, and
// returns the answer's status, body and content type. A server that cannot be reached is reported to
// the pool and the next choice tried; one that answered is not.
func (u *Origin) Forward(ctx context.Context, method string, path func(server string) string, body []byte, contentType string) (status int, answer []byte, answerType string, err error) {
	ctx, cancel := context.WithTimeout(ctx, u.opts.FetchTimeout)
	defer cancel()
	var tried []string
	err = ErrNoServer
	for {
		server := u.opts.Pool.Choose(tried)
		if server == "" {
			return 0, nil, "", err
		}
		p := path(server)
		resp, derr := u.do(ctx, server, method, p, body, contentType)
		if derr != nil {
			err = fmt.Errorf("relay upstream %s: %s %s: %w", server, method, p, derr)
			var op *net.OpError
			if ctx.Err() != nil || noToken(derr) || !errors.As(derr, &op) || op.Op != "dial" {
				return 0, nil, "", err // it may have reached the server: not sent twice
			}
			u.opts.Pool.Report(server, derr)
			tried = append(tried, server)
			continue
		}
		answer, rerr := io.ReadAll(io.LimitReader(resp.Body, iamMaxBody))
		_ = resp.Body.Close()
		if rerr != nil {
			return 0, nil, "", fmt.Errorf("relay upstream %s: %s %s: reading the answer: %w", server, method, p, rerr)
		}
		u.opts.Pool.Report(server, nil)
		return resp.StatusCode, answer, resp.Header.Get("Content-Type"), nil
	}
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
func (u *Origin) topicValues(topic string) ([][]byte, error) {
	parts, err := paths.Split(topic, len(u.opts.Names))
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
func (u *Origin) fetcher(topic string) func(context.Context) (*Snapshot, error) {
	return func(ctx context.Context) (*Snapshot, error) { return u.Fetch(ctx, topic) }
}

// Watch makes sure the topic has an events session: it starts one unless there is one. An
// invalid topic is logged and ignored. After Close it does nothing.
func (u *Origin) Watch(topic string) {
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
	s := &originSession{topic: topic, vals: vals, done: make(chan struct{}), connected: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(u.ctx)
	u.sessions[topic] = s
	u.wg.Add(1)
	go u.run(s)
}

// WaitSession waits until the topic's events session has connected once, so that a client
// subscribing after it misses no change message; it returns ctx.Err() if ctx ends first, or
// an error if the topic is not watched.
func (u *Origin) WaitSession(ctx context.Context, topic string) error {
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
func (s *originSession) markConnected() { s.connectedOnce.Do(func() { close(s.connected) }) }

// resyncFetch wraps the session's fetch for the refresh that follows a (re)connection: when the
// fetched snapshot differs from the one held before and no change message has arrived since the
// connection opened, the change happened during the gap and its messages are lost, so the
// snapshot is published and the topic's WebSocket subscribers are resynced. (A message on the
// new connection already tells them to fetch the snapshot.)
func (u *Origin) resyncFetch(s *originSession, fetch func(context.Context) (*Snapshot, error)) func(context.Context) (*Snapshot, error) {
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
func (u *Origin) Unwatch(topic string) {
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

// Close closes every session, stops following the pool and waits for every goroutine of the
// Upstream and every running Fetch to end. Later Fetch calls fail with ErrUpstreamClosed.
func (u *Origin) Close() {
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
func (u *Origin) endLocked(s *originSession) {
	delete(u.sessions, s.topic)
	s.cancel()
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// setConn registers c as the session's open connection to server, dialed in generation gen of
// the pool's choice. It fails, and the caller must close c, if the session ended, or if the
// choice changed meanwhile to another server.
func (u *Origin) setConn(s *originSession, c *websocket.Conn, server string, gen uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s.ctx.Err() != nil || u.gen != gen && server != u.cur {
		return false
	}
	s.conn, s.server, s.moved = c, server, false
	return true
}

// clearConn unregisters the session's connection; it reports whether the connection was closed to
// follow the pool's choice.
func (u *Origin) clearConn(s *originSession) (moved bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	moved = s.moved
	s.conn, s.moved = nil, false
	return moved
}

// dial opens an events session to server. On an error, status is the server's answer (0 for none:
// a connection error or a timeout, the server's fault).
func (u *Origin) dial(s *originSession, server string) (c *websocket.Conn, status int, err error) {
	path := string(u.opts.EventsPath(nil, server, s.vals))
	ctx, cancel := context.WithTimeout(s.ctx, u.opts.Timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		h := u.opts.Header
		var token string
		if u.opts.Tokens != nil {
			h = h.Clone()
			if h == nil {
				h = http.Header{}
			}
			if token, err = u.bearer(ctx, h); err != nil {
				return nil, 0, fmt.Errorf("relay upstream %s: events %s: %w", server, path, err)
			}
		}
		c, resp, err := u.dialer.DialContext(ctx, u.ws+"://"+server+path, h)
		if err == nil {
			return c, 0, nil
		}
		if resp != nil {
			if resp.Body != nil {
				_ = resp.Body.Close()
			}
			if resp.StatusCode == http.StatusUnauthorized && token != "" && attempt == 0 {
				u.opts.Tokens.Rejected(token)
				continue
			}
			if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
				return nil, resp.StatusCode, fmt.Errorf("relay upstream %s: events %s: status %d", server, path, resp.StatusCode)
			}
		}
		return nil, 0, fmt.Errorf("relay upstream %s: events %s: %w", server, path, err)
	}
}

// run is the goroutine of a session: it connects to the pool's choice, relays the messages and
// reconnects, until Unwatch or Close.
func (u *Origin) run(s *originSession) {
	defer u.wg.Done()
	defer close(s.done)
	fetch := u.fetcher(s.topic)
	delay := u.opts.Backoff
	var tried []string // servers that failed this round of dials
	quickEnds := 0     // sessions in a row that ended before upstreamStableSession
	// backoff waits the delay, which doubles; a change of the pool since changed was taken ends the
	// wait early.
	backoff := func(changed <-chan struct{}) bool {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-changed:
		case <-s.ctx.Done():
			return false
		}
		delay = min(delay*2, upstreamMaxBackoff)
		return true
	}
	for s.ctx.Err() == nil {
		changed := u.opts.Pool.Changed() // before the choice: no change after it is missed
		server, gen := u.choose(tried)
		if server == "" {
			// Every available server failed this round, or the pool has none available.
			tried = tried[:0]
			if !backoff(changed) {
				return
			}
			continue
		}
		c, status, err := u.dial(s, server)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			u.opts.Logf("relay upstream: topic %s: %v", s.topic, err)
			switch {
			case noToken(err) || status != 0 && status < 500:
				if !noToken(err) { // (without a token the server was not asked)
					u.opts.Pool.Report(server, nil) // it answered (a 4xx): another would answer the same
				}
				if !backoff(nil) {
					return
				}
				continue
			case status == 0:
				u.opts.Pool.Report(server, err) // not reached, or timed out: the server's fault
			}
			// A 5xx is an answer, not counted against the server, but another may serve the session.
			tried = append(tried, server) // the pool's next choice at once
			continue
		}
		u.opts.Pool.Report(server, nil)
		tried = tried[:0]
		if !u.setConn(s, c, server, gen) {
			_ = c.Close()
			continue // ended, or the pool's choice changed while dialing: follow
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
			if u.opts.Heartbeat != nil && bytes.Equal(msg, u.opts.Heartbeat) {
				continue // alive, nothing changed
			}
			s.messages.Add(1)
			if u.opts.Heartbeat != nil { // App Configuration: the next snapshot carries it (changeFrame)
				s.lastChange.Store(&msg)
			}
			u.hub.PublishChange(s.topic, msg)
			u.hub.Refresh(s.topic, fetch)
		}
		stopPings()
		moved := u.clearConn(s)
		_ = c.Close()
		if s.ctx.Err() != nil {
			return
		}
		if moved {
			continue // the pool's choice changed: reconnect there at once
		}
		u.opts.Logf("relay upstream: topic %s: session with %s ended: %v", s.topic, server, err)
		if dropped(err) {
			// Lost, silent past the keep-alive, or closed with an error: the server's fault, one
			// failure for the pool's health (a run of them takes the server down and moves every
			// session). A session the server ended normally says nothing against it.
			u.opts.Pool.Report(server, err)
		}
		// The session dials the pool's choice again at once; one that keeps ending soon after it
		// opened waits the backoff between tries.
		if time.Since(start) >= upstreamStableSession {
			delay, quickEnds = u.opts.Backoff, 0
		} else if quickEnds++; quickEnds > 1 && !backoff(nil) {
			return
		}
	}
}

// dropped reports whether an events session's end is its server's fault: the connection was lost or
// timed out, or the server closed it with an error code, rather than a normal close (1000, 1001).
func dropped(err error) bool {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code != websocket.CloseNormalClosure && ce.Code != websocket.CloseGoingAway
	}
	return true
}

// alive pushes the read deadline of an events session back: something arrived.
func (u *Origin) alive(c *websocket.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(2*u.opts.KeepAlive + u.opts.Timeout))
}

// keepAlive pings the session every KeepAlive and sets its read deadline, which each message
// and pong pushes back; the returned function stops the pings. With a Heartbeat, only the messages
// push the deadline back (no ping is sent).
func (u *Origin) keepAlive(c *websocket.Conn) (stop func()) {
	u.alive(c)
	if u.opts.Heartbeat != nil {
		// The upstream's heartbeats say the session is alive; a pong would not tell a service that
		// stopped sending them from one that works, so none is asked for.
		return func() {}
	}
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
