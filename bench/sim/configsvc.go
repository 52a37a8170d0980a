package sim

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// The simulated configuration service: the upstream of a fairlead relay route, which keeps one
// upstream WebSocket per topic, caches the topic's snapshot and fans the changes out to its own
// subscribers. A topic is "collection/environment"; each config server holds, per topic, a version and
// a JSON document, serves the snapshot over HTTP and pushes a change message over a WebSocket session
// each time the topic is published.

const (
	// configWriteTimeout bounds one write of a change message to a session: a session whose peer does
	// not read for that long is closed, so that a stuck subscriber costs the server one goroutine for at
	// most a second and never delays the other sessions.
	configWriteTimeout = time.Second
	// configSessionQueue is how many change messages a session may have waiting for its writer. When
	// it is full the oldest waiting one is dropped: a change message only says "version N is out", so
	// the newest one supersedes the others, and Publish never waits for a session.
	configSessionQueue = 16
	// configReadLimit bounds a message a client sends on a session (they are read and discarded).
	configReadLimit = 64 << 10
)

var (
	pathConfigPrefix = []byte("/config/")
	pathEventsPrefix = []byte("/events/")
	hdrETag          = []byte("ETag")
	applicationJSON  = []byte("application/json")
	valBearerAuth    = []byte(`Bearer realm="fairlead-sim"`)
	bodyNotFound     = []byte("not found\n")
)

// ConfigOptions configures one config server.
type ConfigOptions struct {
	// APIKey, if non-empty, must arrive as "Authorization: Bearer <APIKey>" on every snapshot request
	// and session upgrade; anything else is answered 401 and only counted (ConfigStats.Unauthorized).
	APIKey string
	// TLS, if set, makes the server serve over TLS with this config (see Options.TLS); nil serves
	// plain HTTP.
	TLS *tls.Config
	// Logf, if set, receives the server's stops and starts, the sessions it closes and server errors.
	Logf func(format string, args ...any)
}

// ConfigServer is a simulated configuration service, as a relay route would use upstream.
//
// A topic is "collection/environment", each segment matching [A-Za-z0-9._-]+. The server holds, per
// topic, a version (1 when the topic is first known) and a JSON document, and serves two endpoints:
//
//	GET /config/<collection>/<environment>   the snapshot: 200 application/json
//	    {"topic":"c/e","version":N,"server":"<Name>","data":<document>} with ETag: "N"
//	GET /events/<collection>/<environment>   a WebSocket session for the topic
//
// Any topic exists, as on an upstream that makes topics on demand: one that was never published has
// version 1 and the document {"collection":"c","environment":"e"}. Each snapshot request counts as a
// fetch of its topic. A session receives the text message {"topic":"c/e","version":N} each time its
// topic is published (Publish, Cluster.PublishConfig); the server answers pings and reads and discards
// whatever the client sends, so a client that closes ends its session. A session counts from just
// after the 101 is written until its connection closes. A session more than 16 messages behind loses
// the oldest waiting ones (it always gets the newest version), and one whose client does not take a
// message within a second is closed, so a stuck subscriber never delays the others.
//
// Every answer carries "X-Served-By: <Name>". Any other path is answered 404, a snapshot request with
// a method other than GET 405, and a request on /events without a WebSocket upgrade 400. With
// ConfigOptions.APIKey, a request on either endpoint without "Authorization: Bearer <key>" is answered
// 401 and counted as unauthorized, and nothing else happens: no fetch is counted, no session opened,
// no topic becomes known.
//
// Stop and Start kill and revive the server as a process; the topics and counters survive them.
//
// All methods are safe for concurrent use.
type ConfigServer struct {
	// Name is "config1", "config2", ... in a Cluster; config1 is the one a relay would call primary.
	Name string
	// Addr is the host:port the server listens on; it does not change across Stop and Start.
	Addr string

	srv      *netServer
	logf     func(format string, args ...any)
	servedBy []byte
	auth     []byte // "Bearer <APIKey>", nil without an API key
	upgrader websocket.FastHTTPUpgrader

	// opMu serializes Stop and Start.
	opMu sync.Mutex
	// pubMu serializes publishes, so that every session gets a topic's versions in order while mu is
	// held only to bump the version and copy the session list.
	pubMu sync.Mutex

	mu           sync.Mutex
	topics       map[string]*configTopic
	unauthorized int64
}

// configTopic is the state of one known topic of a server. Guarded by ConfigServer.mu.
type configTopic struct {
	version       uint64
	data          []byte // never modified: Publish replaces it
	fetches       int64
	sessionsTotal int64
	sessions      map[*configSession]struct{}
}

// configSession is one open WebSocket session. Publish queues versions on it; its writer goroutine
// writes them, so no socket write ever happens under a lock or in Publish.
type configSession struct {
	conn  *websocket.Conn
	queue chan uint64
	done  chan struct{} // closed when the session's handler is ending
}

// ConfigStats is a snapshot of one config server's state and counters.
type ConfigStats struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Up reports whether the server is running (not stopped).
	Up bool `json:"up"`
	// Unauthorized counts the requests answered 401 since the start or the last ResetCounters.
	Unauthorized int64 `json:"unauthorized"`
	// Topics holds every known topic (fetched, subscribed to or published), by "collection/environment".
	Topics map[string]ConfigTopicStats `json:"topics"`
}

// ConfigTopicStats is a snapshot of one topic of a config server.
type ConfigTopicStats struct {
	// Version is the topic's current version.
	Version uint64 `json:"version"`
	// Fetches counts the snapshot requests since the start or the last ResetCounters.
	Fetches int64 `json:"fetches"`
	// Sessions is the number of sessions open now.
	Sessions int `json:"sessions"`
	// SessionsTotal counts the sessions opened since the start or the last ResetCounters.
	SessionsTotal int64 `json:"sessions_total"`
}

// StartConfigServer starts a config server named name on addr ("host:0" picks a free port), on its own,
// outside a Cluster (whose Options.ConfigServers start them too); Close stops it for good.
func StartConfigServer(name, addr string, opts ConfigOptions) (*ConfigServer, error) {
	s := &ConfigServer{
		Name:     name,
		logf:     opts.Logf,
		servedBy: []byte(name),
		topics:   map[string]*configTopic{},
		upgrader: websocket.FastHTTPUpgrader{
			CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		},
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if opts.APIKey != "" {
		s.auth = []byte("Bearer " + opts.APIKey)
	}
	srv, err := newNetServer(addr, opts.TLS, s.newServer, s.logf)
	if err != nil {
		return nil, fmt.Errorf("config server %s: %w", name, err)
	}
	s.srv = srv
	s.Addr = srv.addr
	return s, nil
}

func (s *ConfigServer) newServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:        s.handle,
		Name:           "fairlead-sim",
		ReadBufferSize: 16 << 10,
		Logger:         fasthttpLogger{prefix: s.Name + ": ", logf: s.logf},
	}
}

// Publish makes a new version of topic ("collection/environment") with data as its document (a JSON
// document, checked with json.Valid; nil or empty keeps the current one) and queues the change message
// on every open session of the topic; it returns the new version. A topic not known yet first exists
// at version 1 (as a snapshot request would have found it), so its first publish makes version 2.
// Publish never waits for a session: each session's own goroutine writes the message. A stopped
// server takes the publish too (its store is replicated, as the upstream's would be) and serves the
// new version once started again.
func (s *ConfigServer) Publish(topic string, data []byte) (uint64, error) {
	if err := checkPublish(topic, data); err != nil {
		return 0, err
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	return s.publishLocked(topic, bytes.Clone(data), 0), nil
}

// checkPublish validates the arguments of a publish.
func checkPublish(topic string, data []byte) error {
	if _, _, ok := splitTopic(topic); !ok {
		return fmt.Errorf("sim: bad topic %q (want collection/environment, each [A-Za-z0-9._-]+)", topic)
	}
	if len(data) > 0 && !json.Valid(data) {
		return errors.New("sim: config data is not a JSON document")
	}
	return nil
}

// publishLocked bumps topic's version to at least version and at least one above the current one,
// stores data unless it is empty, and queues the change on the topic's sessions. The caller holds
// pubMu; data is not modified afterwards.
func (s *ConfigServer) publishLocked(topic string, data []byte, version uint64) uint64 {
	s.mu.Lock()
	t := s.topicLocked(topic)
	t.version = max(t.version+1, version)
	if len(data) > 0 {
		t.data = data
	}
	v := t.version
	sessions := make([]*configSession, 0, len(t.sessions))
	for ss := range t.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.send(v)
	}
	return v
}

// version returns topic's current version, 1 if it is not known yet.
func (s *ConfigServer) version(topic string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.topics[topic]; t != nil {
		return t.version
	}
	return 1
}

// PublishConfig publishes data on topic on every config server of the cluster (see
// ConfigServer.Publish), as a replicated upstream would hold the same data on its primary and backups,
// and returns the new version, the same on every server: one above the highest current version. It
// fails without config servers.
func (c *Cluster) PublishConfig(topic string, data []byte) (uint64, error) {
	if len(c.Configs) == 0 {
		return 0, errors.New("sim: no config servers")
	}
	if err := checkPublish(topic, data); err != nil {
		return 0, err
	}
	data = bytes.Clone(data)
	// Holding every server's pubMu (always in Configs order) keeps the versions still between the
	// reading and the publishing.
	for _, s := range c.Configs {
		s.pubMu.Lock()
		defer s.pubMu.Unlock()
	}
	var next uint64
	for _, s := range c.Configs {
		next = max(next, s.version(topic)+1)
	}
	for _, s := range c.Configs {
		s.publishLocked(topic, data, next)
	}
	return next, nil
}

// Stop simulates the server process dying: it closes the listener and every open connection, the
// sessions included, so their clients see the connection close and new dials are refused. Stopping a
// stopped server is a no-op.
func (s *ConfigServer) Stop() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	wasUp := s.srv.running()
	s.srv.stop()
	if wasUp {
		s.logf("%s: stopped", s.Name)
	}
}

// Start listens again on Addr after Stop, retrying briefly while the port is still busy. Starting a
// running server is a no-op; it fails once the server is closed.
func (s *ConfigServer) Start() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.srv.running() {
		return nil
	}
	if err := s.srv.start(); err != nil {
		return fmt.Errorf("config server %s: %w", s.Name, err)
	}
	s.logf("%s: started", s.Name)
	return nil
}

// Up reports whether the server is running (not stopped).
func (s *ConfigServer) Up() bool {
	return s.srv.running()
}

// Close stops the server for good, as Cluster.Close does: Start fails afterwards.
func (s *ConfigServer) Close() {
	s.srv.close()
}

// Stats returns a snapshot of the server's state and counters.
func (s *ConfigServer) Stats() ConfigStats {
	st := ConfigStats{Name: s.Name, Addr: s.Addr, Up: s.Up()}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Unauthorized = s.unauthorized
	st.Topics = make(map[string]ConfigTopicStats, len(s.topics))
	for name, t := range s.topics {
		st.Topics[name] = ConfigTopicStats{
			Version:       t.version,
			Fetches:       t.fetches,
			Sessions:      len(t.sessions),
			SessionsTotal: t.sessionsTotal,
		}
	}
	return st
}

// ResetCounters zeroes the fetches, the sessions opened and the unauthorized requests; the topics,
// their versions and documents and the open sessions are kept.
func (s *ConfigServer) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unauthorized = 0
	for _, t := range s.topics {
		t.fetches = 0
		t.sessionsTotal = 0
	}
}

// topicLocked returns topic's state, making it known at version 1 with the default document if it is
// not. The caller holds mu and has checked the name.
func (s *ConfigServer) topicLocked(topic string) *configTopic {
	if t := s.topics[topic]; t != nil {
		return t
	}
	collection, environment, _ := splitTopic(topic)
	data, _ := json.Marshal(struct {
		Collection  string `json:"collection"`
		Environment string `json:"environment"`
	}{collection, environment})
	t := &configTopic{version: 1, data: data, sessions: map[*configSession]struct{}{}}
	s.topics[topic] = t
	return t
}

// splitTopic splits "collection/environment", each segment matching [A-Za-z0-9._-]+.
func splitTopic(topic string) (collection, environment string, ok bool) {
	i := 0
	for i < len(topic) && topic[i] != '/' {
		i++
	}
	if i == len(topic) {
		return "", "", false
	}
	collection, environment = topic[:i], topic[i+1:]
	if !validSegment(collection) || !validSegment(environment) {
		return "", "", false
	}
	return collection, environment, true
}

func validSegment(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}

func (s *ConfigServer) handle(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetBytesKV(hdrServedBy, s.servedBy)
	path := ctx.Path()
	var events bool
	var rest []byte
	switch {
	case bytes.HasPrefix(path, pathConfigPrefix):
		rest = path[len(pathConfigPrefix):]
	case bytes.HasPrefix(path, pathEventsPrefix):
		rest, events = path[len(pathEventsPrefix):], true
	}
	if _, _, ok := splitTopic(string(rest)); !ok {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBody(bodyNotFound)
		return
	}
	topic := string(rest)
	if s.auth != nil && !bytes.Equal(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), s.auth) {
		s.mu.Lock()
		s.unauthorized++
		s.mu.Unlock()
		ctx.SetStatusCode(fasthttp.StatusUnauthorized)
		ctx.Response.Header.SetBytesKV(hdrWWWAuth, valBearerAuth)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBody(bodyUnauthorized)
		return
	}
	switch {
	case events && websocket.FastHTTPIsWebSocketUpgrade(ctx):
		if err := s.upgrader.Upgrade(ctx, func(c *websocket.Conn) { s.runSession(c, topic) }); err != nil {
			s.logf("%s: upgrade failed: %s", s.Name, err)
		}
	case events:
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBodyString("websocket upgrade expected\n")
	case !ctx.IsGet():
		ctx.Response.Header.Set(fasthttp.HeaderAllow, fasthttp.MethodGet)
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBodyString("method not allowed\n")
	default:
		s.serveSnapshot(ctx, topic)
	}
}

// serveSnapshot answers a snapshot request and counts the fetch.
func (s *ConfigServer) serveSnapshot(ctx *fasthttp.RequestCtx, topic string) {
	s.mu.Lock()
	t := s.topicLocked(topic)
	t.fetches++
	version, data := t.version, t.data
	s.mu.Unlock()
	body, err := json.Marshal(struct {
		Topic   string          `json:"topic"`
		Version uint64          `json:"version"`
		Server  string          `json:"server"`
		Data    json.RawMessage `json:"data"`
	}{topic, version, s.Name, data})
	if err != nil { // cannot happen: data was checked by Publish
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		ctx.SetBodyString(err.Error() + "\n")
		return
	}
	ctx.Response.Header.SetBytesK(hdrETag, `"`+strconv.FormatUint(version, 10)+`"`)
	ctx.SetContentTypeBytes(applicationJSON)
	ctx.SetBody(body)
}

// runSession is the hijack handler of a session: it registers the session, starts its writer and
// reads (and discards) the client's messages until the connection fails or closes, which ends the
// session.
func (s *ConfigServer) runSession(c *websocket.Conn, topic string) {
	ss := &configSession{conn: c, queue: make(chan uint64, configSessionQueue), done: make(chan struct{})}
	s.mu.Lock()
	t := s.topicLocked(topic)
	t.sessions[ss] = struct{}{}
	t.sessionsTotal++
	s.mu.Unlock()
	written := make(chan struct{})
	go func() {
		defer close(written)
		s.writeChanges(ss, topic)
	}()

	c.SetReadLimit(configReadLimit)
	for {
		_, r, err := c.NextReader()
		if err != nil {
			break
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			break
		}
	}

	s.mu.Lock()
	delete(t.sessions, ss)
	s.mu.Unlock()
	close(ss.done)
	_ = socketOf(c).Close() // unblocks a writer stuck on a peer that does not read
	<-written
}

// socketOf returns the TCP socket under a session: closing it ends the session's reads and writes at
// once. The WebSocket's own Close does not do that: fasthttp closes a hijacked connection only once its
// handler has returned, and a TLS close would first try to send an alert to a peer that may not be
// reading. The socket is taken from under its trackedConn, which fasthttp closes after the handler, so
// that netServer.stop still waits for the handler to return.
func socketOf(c *websocket.Conn) net.Conn {
	nc := c.NetConn()
	if u, ok := nc.(interface{ UnsafeConn() net.Conn }); ok {
		nc = u.UnsafeConn()
	}
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if tc, ok := nc.(*trackedConn); ok {
		nc = tc.Conn
	}
	return nc
}

// writeChanges writes the versions queued on ss as change messages until the session ends. A write
// that fails or does not complete within configWriteTimeout closes the connection, which also ends the
// session's read loop.
func (s *ConfigServer) writeChanges(ss *configSession, topic string) {
	var msg []byte
	for {
		var v uint64
		select {
		case <-ss.done:
			return
		case v = <-ss.queue:
		}
		msg = append(msg[:0], `{"topic":"`...)
		msg = append(msg, topic...) // [A-Za-z0-9._-/]: nothing to escape
		msg = append(msg, `","version":`...)
		msg = strconv.AppendUint(msg, v, 10)
		msg = append(msg, '}')
		_ = ss.conn.SetWriteDeadline(time.Now().Add(configWriteTimeout))
		if err := ss.conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			select {
			case <-ss.done: // the session was ending anyway
			default:
				s.logf("%s: closing a session of %s: %s", s.Name, topicForLog(topic), err)
			}
			_ = socketOf(ss.conn).Close()
			return
		}
	}
}

// topicForLog shortens a topic name for a log line.
func topicForLog(topic string) string {
	if len(topic) > 80 {
		return topic[:77] + "..."
	}
	return topic
}

// send queues version v on the session without waiting, dropping the oldest waiting version if the
// queue is full. Only publishes send, serialized by the server's pubMu, so after one drop there is
// room.
func (ss *configSession) send(v uint64) {
	for {
		select {
		case ss.queue <- v:
			return
		default:
		}
		select {
		case <-ss.queue:
		default:
		}
	}
}
