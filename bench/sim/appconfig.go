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
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// The simulated IBM Cloud App Configuration instance: the upstream of a relay route with
// protocol = "appconfiguration" (issue #23), and, pointed at directly, a service the official SDKs
// work against. It speaks the protocol as the SDKs use it (the research is in the notes,
// "appconfig-protocol.md", section 3): REST configuration fetches and wsfeature WebSockets for the
// server SDKs with IAM bearer tokens (see IAM), server-sent events for the client SDKs with client
// keys, and the metering POSTs.

const (
	// appConfigDefaultHeartbeat is the interval of "test message" on wsfeature sessions; the service's
	// is 30 s (the Node server SDK declares a session dead after 120 s without one).
	appConfigDefaultHeartbeat = 30 * time.Second
	// appConfigHeartbeatText is the heartbeat frame of a wsfeature session.
	appConfigHeartbeatText = "test message"
	// appConfigWriteTimeout bounds one write to a session (WebSocket or SSE): a subscriber that does not
	// read for that long is closed, so that it never delays the others.
	appConfigWriteTimeout = time.Second
	// appConfigSessionQueue is how many messages a session may have waiting for its writer; when full,
	// the oldest waiting one is dropped (every message carries or announces the whole configuration,
	// so the newest supersedes the others).
	appConfigSessionQueue = 16
	// appConfigReadLimit bounds a message a wsfeature client sends (read and discarded).
	appConfigReadLimit = 64 << 10
	// appConfigMaxBody bounds a metering POST's body.
	appConfigMaxBody = 1 << 20
)

// The generated configuration of AppConfig.Bump and AppConfigDocument.
const (
	// AppConfigProperty is the NUMERIC property whose value is the document's number n.
	AppConfigProperty = "version"
	// AppConfigFeature is the BOOLEAN feature, enabled when n is odd.
	AppConfigFeature = "sim-feature"
	// AppConfigSegment is the segment the feature's one segment rule names.
	AppConfigSegment = "sim-segment"
)

const (
	acPathFeature  = "/apprapp/feature/v1/instances/"
	acPathEvents   = "/apprapp/events/v1/instances/"
	acPathMetrics  = "/apprapp/metrics/v1/instances/"
	acPathWS       = "/apprapp/wsfeature"
	acActionSDK    = "sdkConfig"
	acBearerPrefix = "Bearer "
)

var (
	acBodyUnauthorized = []byte(`{"message":"Unauthorized","status_code":401}`)
	acBodyNotFound     = []byte(`{"message":"Not found","status_code":404}`)
	acValWWWAuth       = []byte(`Bearer realm="fairlead-sim"`)
)

// AppConfigOptions configures a simulated App Configuration instance.
type AppConfigOptions struct {
	// GUID is the instance id the paths name (required); another gets 404.
	GUID string
	// IAM, if set, is the token service whose tokens the instance accepts on the REST paths and
	// wsfeature, as "Authorization: Bearer <token>" with IAM.Valid(token); anything else is 401. Nil
	// leaves those paths unchecked.
	IAM *IAM
	// ClientKeys are the keys the client SDKs authenticate with on the SSE path and the metering
	// POSTs, raw ("Authorization: <key>", as the client SDK sends them) or "Bearer <key>"; anything
	// else is 401. Empty leaves the SSE path unchecked. (A metering POST passes with a client key or a
	// token.)
	ClientKeys []string
	// Heartbeat is the interval of "test message" on wsfeature sessions (default 30 s, the service's).
	Heartbeat time.Duration
	// TLS, if set, serves over TLS with this config (see Options.TLS); nil serves plain HTTP.
	TLS *tls.Config
	// Logf, if set, receives the instance's stops and starts, the sessions it closes and server
	// errors. Tokens, keys and request bytes are never logged.
	Logf func(format string, args ...any)
}

// AppConfig is a simulated IBM Cloud App Configuration instance. A topic is "collection/environment"
// (each [A-Za-z0-9._-]+); it exists once Set or Bump gave it a configuration, an export document of the
// instance:
//
//	{"environments":[{"environment_id":E,"features":[…],"properties":[…],…}],
//	 "collections":[{"collection_id":C,…}],"segments":[…]}
//
// From it the instance derives the answers for the topic: the environment E alone, its features and
// properties kept when they have no "collections" field or one that lists C, the collections list cut
// to C, every segment. It serves:
//
//	GET  /apprapp/feature/v1/instances/{guid}/config?action=sdkConfig&collection_id=C&environment_id=E
//	     REST, new form (server SDKs): 200 application/json, the derived export document (never 304)
//	GET  /apprapp/feature/v1/instances/{guid}/collections/C/config?environment_id=E
//	     REST, older form: 200 application/json {"features":[…],"properties":[…],"segments":[…]}
//	GET  /apprapp/wsfeature?instance_id={guid}&collection_id=C&environment_id=E
//	     a WebSocket session (server SDKs): the text frame "test message" every Heartbeat, and
//	     "collection_id:C;environment_id:E;action:update" at each change of the topic
//	GET  /apprapp/feature/v1/instances/{guid}/environments/E/sse/subscribe?collection_id=C
//	     server-sent events (client SDKs): 200 text/event-stream, chunked, at once
//	     "event: Registration\ndata: <document>\n\n" and "event: SSEConfig_payload\ndata: <document>\n\n"
//	     at each change, the document being the derived export on one line (extra query parameters
//	     such as lastEventId are ignored; no id:, retry: or comment lines)
//	POST /apprapp/events/v1/instances/{guid}/usage         metering: 202, counted
//	POST /apprapp/metrics/v1/instances/{guid}/analytics    experiment analytics: 202, counted
//
// The REST paths and wsfeature take "Authorization: Bearer <IAM token>" (AppConfigOptions.IAM), the SSE
// path a client key raw or after "Bearer " (AppConfigOptions.ClientKeys), the metering POSTs either.
// A request is answered 404 (JSON) for an unknown path, another guid or an unknown topic, 401 (JSON)
// for a missing or wrong credential (checked first, counted as unauthorized; nothing else happens),
// 405 for the wrong method, 400 for a wsfeature request without an upgrade or a metering body that is
// not JSON. A client key on a REST path or wsfeature, where only tokens belong, is counted as such
// (AppConfigStats.ClientKeyOnTokenPath), and a metering POST that carried one too
// (AppConfigStats.MeteringWithClientKey): a relay must never send its clients' keys upstream.
//
// Each session (WebSocket or SSE) has its own writer and a queue of 16 messages; a session more than
// 16 behind loses the oldest, and one whose client does not take a message within a second is closed,
// so a stuck subscriber never delays the others. Stop and Start kill and revive the instance as a
// process (every session drops); topics and counters survive them.
//
// All methods are safe for concurrent use.
type AppConfig struct {
	// Name names the instance in its log lines and X-Served-By.
	Name string
	// Addr is the host:port the instance listens on; it does not change across Stop and Start.
	Addr string
	// GUID is the instance id.
	GUID string

	srv        *netServer
	logf       func(format string, args ...any)
	servedBy   []byte
	scheme     string
	iam        *IAM
	clientKeys map[string]bool
	heartbeat  time.Duration
	upgrader   websocket.FastHTTPUpgrader

	// opMu serializes Stop and Start.
	opMu sync.Mutex
	// pubMu serializes changes, so that every session gets a topic's changes in order while mu is held
	// only to swap the configuration and copy the session lists.
	pubMu sync.Mutex

	mu                    sync.Mutex
	topics                map[string]*acTopic
	usage, analytics      int64
	unauthorized          int64
	clientKeyOnTokenPath  int64
	meteringWithClientKey int64
}

// acTopic is one known topic of an instance. Guarded by AppConfig.mu.
type acTopic struct {
	collection, environment string
	doc                     []byte // as Set; never modified
	export, flat            []byte // the derived answers; never modified
	version                 int
	changes                 int64
	fetches, fetchesOld     int64
	wsTotal, sseTotal       int64
	wsChanges, sseEvents    int64
	ws, sse                 map[*acSession]struct{}
}

// acSession is one open WebSocket or SSE session; a change queues its message, the session's own
// writer writes it.
type acSession struct {
	queue chan []byte
	done  chan struct{} // closed when the session is ending
}

// AppConfigStats is a snapshot of an instance's state and counters. Every counter counts since the
// start or the last ResetCounters.
type AppConfigStats struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	GUID string `json:"guid"`
	Up   bool   `json:"up"`
	// Usage and Analytics count the metering POSTs accepted (202).
	Usage     int64 `json:"usage"`
	Analytics int64 `json:"analytics"`
	// Unauthorized counts the requests answered 401.
	Unauthorized int64 `json:"unauthorized"`
	// ClientKeyOnTokenPath counts the requests on a REST path or wsfeature that carried a client key.
	ClientKeyOnTokenPath int64 `json:"client_key_on_token_path"`
	// MeteringWithClientKey counts the metering POSTs that carried a client key.
	MeteringWithClientKey int64 `json:"metering_with_client_key"`
	// Topics holds every topic, by "collection/environment".
	Topics map[string]AppConfigTopicStats `json:"topics"`
}

// AppConfigTopicStats is a snapshot of one topic of an instance.
type AppConfigTopicStats struct {
	// Version counts the configurations the topic had (Set and Bump), never reset: Bump's n.
	Version int `json:"version"`
	// Changes counts the configurations published (Set and Bump).
	Changes int64 `json:"changes"`
	// Fetches and FetchesOld count the REST fetches of the new (action=sdkConfig) and the older form.
	Fetches    int64 `json:"fetches"`
	FetchesOld int64 `json:"fetches_old"`
	// WSSessions is the number of wsfeature sessions open now, WSSessionsTotal those opened;
	// WSChanges counts the change frames written to them (heartbeats not included).
	WSSessions      int   `json:"ws_sessions"`
	WSSessionsTotal int64 `json:"ws_sessions_total"`
	WSChanges       int64 `json:"ws_changes"`
	// SSESubscribers is the number of SSE subscribers connected now, SSESubscribersTotal those that
	// connected; SSEEvents counts the events written to them (Registration and SSEConfig_payload).
	SSESubscribers      int   `json:"sse_subscribers"`
	SSESubscribersTotal int64 `json:"sse_subscribers_total"`
	SSEEvents           int64 `json:"sse_events"`
}

// StartAppConfig starts a simulated App Configuration instance named name on addr ("host:0" picks a
// free port); Close stops it for good.
func StartAppConfig(name, addr string, opts AppConfigOptions) (*AppConfig, error) {
	if opts.GUID == "" {
		return nil, fmt.Errorf("app configuration %s: no GUID", name)
	}
	a := &AppConfig{
		Name:       name,
		GUID:       opts.GUID,
		logf:       opts.Logf,
		servedBy:   []byte(name),
		scheme:     "http",
		iam:        opts.IAM,
		clientKeys: map[string]bool{},
		heartbeat:  opts.Heartbeat,
		topics:     map[string]*acTopic{},
		upgrader: websocket.FastHTTPUpgrader{
			CheckOrigin: func(*fasthttp.RequestCtx) bool { return true }, // the SDKs set no Origin
		},
	}
	if a.logf == nil {
		a.logf = func(string, ...any) {}
	}
	if a.heartbeat <= 0 {
		a.heartbeat = appConfigDefaultHeartbeat
	}
	if opts.TLS != nil {
		a.scheme = "https"
	}
	for _, k := range opts.ClientKeys {
		a.clientKeys[k] = true
	}
	srv, err := newNetServer(addr, opts.TLS, a.newServer, a.logf)
	if err != nil {
		return nil, fmt.Errorf("app configuration %s: %w", name, err)
	}
	a.srv = srv
	a.Addr = srv.addr
	return a, nil
}

func (a *AppConfig) newServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               a.handle,
		Name:                  "fairlead-sim",
		ReadBufferSize:        16 << 10,
		SecureErrorLogMessage: true, // a request's bytes (its credential) never reach the log
		Logger:                fasthttpLogger{prefix: a.Name + ": ", logf: a.logf},
	}
}

// URL is the instance's base URL, "http://Addr" (https with TLS): what an SDK's overrideServiceUrl
// takes.
func (a *AppConfig) URL() string { return a.scheme + "://" + a.Addr }

// AppConfigDocument returns the generated export document of Bump: for collection c and environment
// e, the NUMERIC property AppConfigProperty with value n (no segment rules), the BOOLEAN feature
// AppConfigFeature, enabled when n is odd, with one segment rule naming AppConfigSegment (whose rule,
// an email ending in @example.com, entities without attributes do not match), and that segment.
// Every item lists collection c and has segment_rules, as the client SDK and the server SDKs'
// extraction require.
func AppConfigDocument(c, e string, n int) []byte {
	type obj = map[string]any
	coll := []obj{{"collection_id": c, "name": "Collection " + c}}
	doc := obj{
		"environments": []obj{{
			"name":           "Environment " + e,
			"environment_id": e,
			"features": []obj{{
				"name":               "Sim feature",
				"feature_id":         AppConfigFeature,
				"description":        "A feature of the simulated instance",
				"type":               "BOOLEAN",
				"enabled_value":      true,
				"disabled_value":     false,
				"enabled":            n%2 == 1,
				"rollout_percentage": 100,
				"segment_rules": []obj{{
					"rules":              []obj{{"segments": []string{AppConfigSegment}}},
					"value":              "$default",
					"order":              1,
					"rollout_percentage": "$default",
				}},
				"collections": coll,
			}},
			"properties": []obj{{
				"name":          "Version",
				"property_id":   AppConfigProperty,
				"description":   "The number of the configuration",
				"type":          "NUMERIC",
				"value":         n,
				"segment_rules": []obj{},
				"collections":   coll,
			}},
		}},
		"collections": coll,
		"segments": []obj{{
			"name":       "Sim segment",
			"segment_id": AppConfigSegment,
			"rules": []obj{{
				"attribute_name": "email",
				"operator":       "endsWith",
				"values":         []string{"@example.com"},
			}},
		}},
	}
	b, _ := json.Marshal(doc)
	return b
}

// Set gives topic ("collection/environment") the export document doc and publishes it: every open
// session of the topic gets it (an SSEConfig_payload, a wsfeature change frame). doc must be a JSON
// object whose "environments" holds the topic's environment, whose "collections" lists its collection
// and whose "segments" is an array; the answers derived from it are fixed here (see AppConfig).
func (a *AppConfig) Set(topic string, doc []byte) error {
	c, e, ok := splitTopic(topic)
	if !ok {
		return fmt.Errorf("sim: bad topic %q (want collection/environment, each [A-Za-z0-9._-]+)", topic)
	}
	export, flat, err := deriveAppConfig(c, e, doc)
	if err != nil {
		return fmt.Errorf("sim: topic %s: %w", topic, err)
	}
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	a.publishLocked(topic, c, e, bytes.Clone(doc), export, flat)
	return nil
}

// Bump publishes the next generated configuration of topic, AppConfigDocument with n = the topic's
// version after it (1 for a new topic), and returns n. It panics on a bad topic name (a test's bug).
func (a *AppConfig) Bump(topic string) int {
	c, e, ok := splitTopic(topic)
	if !ok {
		panic(fmt.Sprintf("sim: bad topic %q", topic))
	}
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	a.mu.Lock()
	n := 1
	if t := a.topics[topic]; t != nil {
		n = t.version + 1
	}
	a.mu.Unlock()
	doc := AppConfigDocument(c, e, n)
	export, flat, err := deriveAppConfig(c, e, doc)
	if err != nil {
		panic(err) // the generated document is always valid
	}
	return a.publishLocked(topic, c, e, doc, export, flat)
}

// Document returns topic's export document as last Set or Bumped (nil, false for an unknown topic).
func (a *AppConfig) Document(topic string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.topics[topic]; t != nil {
		return t.doc, true
	}
	return nil, false
}

// Export returns the new-form REST answer of topic (also the data of its SSE events): what a client
// of the topic gets now.
func (a *AppConfig) Export(topic string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.topics[topic]; t != nil {
		return t.export, true
	}
	return nil, false
}

// publishLocked stores the topic's new configuration and queues the change on its sessions; it
// returns the topic's new version. The caller holds pubMu.
func (a *AppConfig) publishLocked(topic, c, e string, doc, export, flat []byte) int {
	a.mu.Lock()
	t := a.topics[topic]
	if t == nil {
		t = &acTopic{collection: c, environment: e, ws: map[*acSession]struct{}{}, sse: map[*acSession]struct{}{}}
		a.topics[topic] = t
	}
	t.version++
	t.changes++
	t.doc, t.export, t.flat = doc, export, flat
	v := t.version
	ws := sessionList(t.ws)
	sse := sessionList(t.sse)
	a.mu.Unlock()
	frame := []byte("collection_id:" + c + ";environment_id:" + e + ";action:update")
	event := sseEvent("SSEConfig_payload", export)
	for _, s := range ws {
		s.send(frame)
	}
	for _, s := range sse {
		s.send(event)
	}
	return v
}

func sessionList(m map[*acSession]struct{}) []*acSession {
	l := make([]*acSession, 0, len(m))
	for s := range m {
		l = append(l, s)
	}
	return l
}

// sseEvent returns one server-sent event: its name and data (one line).
func sseEvent(name string, data []byte) []byte {
	b := make([]byte, 0, len(name)+len(data)+16)
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// deriveAppConfig checks an export document and derives the topic's two answers: the new-form export
// (environment e only, items filtered by collection c, collections cut to c) and the older flat form.
// Both are compact JSON on one line.
func deriveAppConfig(c, e string, doc []byte) (export, flat []byte, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return nil, nil, errors.New("the configuration is not a JSON object")
	}
	var envs []map[string]json.RawMessage
	if err := json.Unmarshal(top["environments"], &envs); err != nil {
		return nil, nil, errors.New(`"environments" is not an array of objects`)
	}
	var env map[string]json.RawMessage
	for _, en := range envs {
		var id string
		if json.Unmarshal(en["environment_id"], &id) == nil && id == e {
			env = en
			break
		}
	}
	if env == nil {
		return nil, nil, fmt.Errorf("no environment %q in \"environments\"", e)
	}
	var colls []json.RawMessage
	if err := json.Unmarshal(top["collections"], &colls); err != nil {
		return nil, nil, errors.New(`"collections" is not an array`)
	}
	var keptColls []json.RawMessage
	for _, raw := range colls {
		var cl struct {
			ID string `json:"collection_id"`
		}
		if json.Unmarshal(raw, &cl) == nil && cl.ID == c {
			keptColls = append(keptColls, raw)
		}
	}
	if keptColls == nil {
		return nil, nil, fmt.Errorf("no collection %q in \"collections\"", c)
	}
	var segments []json.RawMessage
	if err := json.Unmarshal(top["segments"], &segments); err != nil || segments == nil {
		return nil, nil, errors.New(`"segments" is not an array`)
	}
	items := map[string][]json.RawMessage{}
	for _, kind := range []string{"features", "properties"} {
		var all []json.RawMessage
		if raw, ok := env[kind]; ok {
			if err := json.Unmarshal(raw, &all); err != nil {
				return nil, nil, fmt.Errorf("environment %q: %q is not an array", e, kind)
			}
		}
		kept := []json.RawMessage{}
		for _, raw := range all {
			var it struct {
				Collections *[]struct {
					ID string `json:"collection_id"`
				} `json:"collections"`
			}
			if err := json.Unmarshal(raw, &it); err != nil {
				return nil, nil, fmt.Errorf("environment %q: an item of %q is not an object", e, kind)
			}
			keep := it.Collections == nil
			if it.Collections != nil {
				for _, cl := range *it.Collections {
					keep = keep || cl.ID == c
				}
			}
			if keep {
				kept = append(kept, raw)
			}
		}
		items[kind] = kept
	}

	outEnv := make(map[string]any, len(env))
	for k, v := range env {
		outEnv[k] = v
	}
	outEnv["features"], outEnv["properties"] = items["features"], items["properties"]
	outTop := make(map[string]any, len(top))
	for k, v := range top {
		outTop[k] = v
	}
	outTop["environments"] = []any{outEnv}
	outTop["collections"] = keptColls
	if export, err = json.Marshal(outTop); err != nil {
		return nil, nil, err
	}
	flat, err = json.Marshal(map[string]any{
		"features": items["features"], "properties": items["properties"], "segments": segments,
	})
	return export, flat, err
}

// Stop simulates the instance dying: it closes the listener and every open connection, sessions
// included. Stopping a stopped instance is a no-op.
func (a *AppConfig) Stop() {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	wasUp := a.srv.running()
	a.srv.stop()
	if wasUp {
		a.logf("%s: stopped", a.Name)
	}
}

// Start listens again on Addr after Stop, retrying briefly while the port is still busy. Starting a
// running instance is a no-op; it fails once closed.
func (a *AppConfig) Start() error {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	if a.srv.running() {
		return nil
	}
	if err := a.srv.start(); err != nil {
		return fmt.Errorf("app configuration %s: %w", a.Name, err)
	}
	a.logf("%s: started", a.Name)
	return nil
}

// Up reports whether the instance is running (not stopped).
func (a *AppConfig) Up() bool { return a.srv.running() }

// Close stops the instance for good: Start fails afterwards.
func (a *AppConfig) Close() { a.srv.close() }

// Stats returns a snapshot of the instance's state and counters.
func (a *AppConfig) Stats() AppConfigStats {
	st := AppConfigStats{Name: a.Name, Addr: a.Addr, GUID: a.GUID, Up: a.Up()}
	a.mu.Lock()
	defer a.mu.Unlock()
	st.Usage, st.Analytics = a.usage, a.analytics
	st.Unauthorized = a.unauthorized
	st.ClientKeyOnTokenPath, st.MeteringWithClientKey = a.clientKeyOnTokenPath, a.meteringWithClientKey
	st.Topics = make(map[string]AppConfigTopicStats, len(a.topics))
	for name, t := range a.topics {
		st.Topics[name] = AppConfigTopicStats{
			Version:             t.version,
			Changes:             t.changes,
			Fetches:             t.fetches,
			FetchesOld:          t.fetchesOld,
			WSSessions:          len(t.ws),
			WSSessionsTotal:     t.wsTotal,
			WSChanges:           t.wsChanges,
			SSESubscribers:      len(t.sse),
			SSESubscribersTotal: t.sseTotal,
			SSEEvents:           t.sseEvents,
		}
	}
	return st
}

// ResetCounters zeroes every counter; the topics, their configurations and versions and the open
// sessions are kept.
func (a *AppConfig) ResetCounters() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.usage, a.analytics, a.unauthorized, a.clientKeyOnTokenPath, a.meteringWithClientKey = 0, 0, 0, 0, 0
	for _, t := range a.topics {
		t.changes, t.fetches, t.fetchesOld, t.wsTotal, t.sseTotal, t.wsChanges, t.sseEvents = 0, 0, 0, 0, 0, 0, 0
	}
}

// acRoute is what a request asks for.
type acRoute int

const (
	acNone acRoute = iota
	acREST
	acRESTOld
	acWS
	acSSE
	acUsage
	acAnalytics
)

// route parses a request's path and query: the route, the guid it names and its topic's collection
// and environment (acNone for a path the service does not have).
func route(ctx *fasthttp.RequestCtx) (r acRoute, guid, c, e string) {
	path := string(ctx.Path())
	q := ctx.QueryArgs()
	if path == acPathWS {
		return acWS, string(q.Peek("instance_id")), string(q.Peek("collection_id")), string(q.Peek("environment_id"))
	}
	var rest string
	var ok bool
	if rest, ok = strings.CutPrefix(path, acPathEvents); ok {
		if guid, ok = strings.CutSuffix(rest, "/usage"); ok && !strings.Contains(guid, "/") {
			return acUsage, guid, "", ""
		}
		return acNone, "", "", ""
	}
	if rest, ok = strings.CutPrefix(path, acPathMetrics); ok {
		if guid, ok = strings.CutSuffix(rest, "/analytics"); ok && !strings.Contains(guid, "/") {
			return acAnalytics, guid, "", ""
		}
		return acNone, "", "", ""
	}
	if rest, ok = strings.CutPrefix(path, acPathFeature); !ok {
		return acNone, "", "", ""
	}
	seg := strings.Split(rest, "/")
	switch {
	case len(seg) == 2 && seg[1] == "config":
		if string(q.Peek("action")) != acActionSDK {
			return acNone, "", "", ""
		}
		return acREST, seg[0], string(q.Peek("collection_id")), string(q.Peek("environment_id"))
	case len(seg) == 4 && seg[1] == "collections" && seg[3] == "config":
		return acRESTOld, seg[0], seg[2], string(q.Peek("environment_id"))
	case len(seg) == 5 && seg[1] == "environments" && seg[3] == "sse" && seg[4] == "subscribe":
		return acSSE, seg[0], string(q.Peek("collection_id")), seg[2]
	}
	return acNone, "", "", ""
}

// authorize checks the request's credential for route r; it counts a client key where it does not
// belong, and answers and counts a 401 when the credential is wrong (false).
func (a *AppConfig) authorize(ctx *fasthttp.RequestCtx, r acRoute) bool {
	h := string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	bearer, hasBearer := strings.CutPrefix(h, acBearerPrefix)
	clientKey := h != "" && (a.clientKeys[h] || (hasBearer && a.clientKeys[bearer]))
	token := hasBearer && a.iam != nil && a.iam.Valid(bearer)
	tokenOK := a.iam == nil || token
	keyOK := len(a.clientKeys) == 0 || clientKey
	var ok bool
	a.mu.Lock()
	switch r {
	case acREST, acRESTOld, acWS:
		ok = tokenOK
		if clientKey {
			a.clientKeyOnTokenPath++
		}
	case acSSE:
		ok = keyOK
	case acUsage, acAnalytics:
		ok = tokenOK || keyOK
		if clientKey {
			a.meteringWithClientKey++
		}
	}
	if !ok {
		a.unauthorized++
	}
	a.mu.Unlock()
	if !ok {
		ctx.SetStatusCode(fasthttp.StatusUnauthorized)
		ctx.Response.Header.SetBytesKV(hdrWWWAuth, acValWWWAuth)
		ctx.SetContentTypeBytes(applicationJSON)
		ctx.SetBody(acBodyUnauthorized)
	}
	return ok
}

func (a *AppConfig) handle(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetBytesKV(hdrServedBy, a.servedBy)
	r, guid, c, e := route(ctx)
	if r == acNone {
		a.notFound(ctx)
		return
	}
	if !a.authorize(ctx, r) {
		return
	}
	if guid != a.GUID {
		a.notFound(ctx)
		return
	}
	wantPost := r == acUsage || r == acAnalytics
	if wantPost != ctx.IsPost() || (!wantPost && !ctx.IsGet()) {
		allow := fasthttp.MethodGet
		if wantPost {
			allow = fasthttp.MethodPost
		}
		ctx.Response.Header.Set(fasthttp.HeaderAllow, allow)
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBodyString("method not allowed\n")
		return
	}
	if wantPost {
		a.meter(ctx, r)
		return
	}
	topic := c + "/" + e
	a.mu.Lock()
	t := a.topics[topic]
	if t != nil {
		switch r {
		case acREST:
			t.fetches++
		case acRESTOld:
			t.fetchesOld++
		}
	}
	a.mu.Unlock()
	if t == nil {
		a.notFound(ctx)
		return
	}
	switch r {
	case acREST, acRESTOld:
		a.mu.Lock()
		body := t.export
		if r == acRESTOld {
			body = t.flat
		}
		a.mu.Unlock()
		ctx.SetContentTypeBytes(applicationJSON)
		ctx.SetBody(body)
	case acWS:
		if !websocket.FastHTTPIsWebSocketUpgrade(ctx) {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			ctx.SetContentTypeBytes(textPlain)
			ctx.SetBodyString("websocket upgrade expected\n")
			return
		}
		if err := a.upgrader.Upgrade(ctx, func(conn *websocket.Conn) { a.runWS(conn, t, topic) }); err != nil {
			a.logf("%s: upgrade failed: %s", a.Name, err)
		}
	case acSSE:
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(conn net.Conn) { a.runSSE(conn, t, topic) })
	}
}

func (a *AppConfig) notFound(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusNotFound)
	ctx.SetContentTypeBytes(applicationJSON)
	ctx.SetBody(acBodyNotFound)
}

// meter answers a metering POST: 202 for a JSON body, counted; 400 otherwise.
func (a *AppConfig) meter(ctx *fasthttp.RequestCtx, r acRoute) {
	body := ctx.PostBody()
	if len(body) > appConfigMaxBody || !json.Valid(body) {
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetContentTypeBytes(textPlain)
		ctx.SetBodyString("the body is not a JSON document\n")
		return
	}
	a.mu.Lock()
	if r == acUsage {
		a.usage++
	} else {
		a.analytics++
	}
	a.mu.Unlock()
	ctx.SetStatusCode(fasthttp.StatusAccepted)
}

// register adds a new session to one of t's session sets and returns it with the topic's current
// export, in one step, so that the session gets every later change and no earlier one.
func (a *AppConfig) register(t *acTopic, sse bool) (*acSession, []byte) {
	s := &acSession{queue: make(chan []byte, appConfigSessionQueue), done: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if sse {
		t.sse[s] = struct{}{}
		t.sseTotal++
	} else {
		t.ws[s] = struct{}{}
		t.wsTotal++
	}
	return s, t.export
}

func (a *AppConfig) unregister(t *acTopic, s *acSession) {
	a.mu.Lock()
	delete(t.sse, s)
	delete(t.ws, s)
	a.mu.Unlock()
	close(s.done)
}

// runWS is the hijack handler of a wsfeature session: it registers the session, starts its writer
// (changes and heartbeats) and reads and discards what the client sends until the connection ends.
func (a *AppConfig) runWS(conn *websocket.Conn, t *acTopic, topic string) {
	s, _ := a.register(t, false)
	written := make(chan struct{})
	go func() {
		defer close(written)
		a.writeWS(conn, s, t, topic)
	}()
	conn.SetReadLimit(appConfigReadLimit)
	for {
		_, r, err := conn.NextReader()
		if err != nil {
			break
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			break
		}
	}
	a.unregister(t, s)
	_ = socketOf(conn).Close() // unblocks a writer stuck on a peer that does not read
	<-written
}

// writeWS writes a session's change frames as they are queued and "test message" every heartbeat,
// until the session ends; a write that fails or takes longer than appConfigWriteTimeout closes it.
func (a *AppConfig) writeWS(conn *websocket.Conn, s *acSession, t *acTopic, topic string) {
	tick := time.NewTicker(a.heartbeat)
	defer tick.Stop()
	for {
		var msg []byte
		change := false
		select {
		case <-s.done:
			return
		case <-tick.C:
			msg = []byte(appConfigHeartbeatText)
		case msg = <-s.queue:
			change = true
		}
		_ = conn.SetWriteDeadline(time.Now().Add(appConfigWriteTimeout))
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			a.closing(s, "wsfeature", topic, err)
			_ = socketOf(conn).Close()
			return
		}
		if change {
			a.mu.Lock()
			t.wsChanges++
			a.mu.Unlock()
		}
	}
}

// runSSE is the hijack handler of an SSE subscription: it writes the 200 event-stream head and the
// Registration event, then each queued SSEConfig_payload, as chunks, until the client goes away, a
// write fails or the instance stops.
func (a *AppConfig) runSSE(conn net.Conn, t *acTopic, topic string) {
	s, export := a.register(t, true)
	gone := make(chan struct{})
	go func() { // the client sends nothing more: a read returns when it closes
		defer close(gone)
		_, _ = io.Copy(io.Discard, conn)
	}()
	defer func() {
		a.unregister(t, s)
		_ = conn.Close()
		<-gone
	}()
	stopping := a.srv.stopping()

	head := "HTTP/1.1 200 OK\r\nServer: fairlead-sim\r\nDate: " + time.Now().UTC().Format(time.RFC1123) +
		"\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n" +
		"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\nX-Served-By: " + a.Name + "\r\n\r\n"
	buf := append([]byte(head), chunk(sseEvent("Registration", export))...)
	for {
		_ = conn.SetWriteDeadline(time.Now().Add(appConfigWriteTimeout))
		if _, err := conn.Write(buf); err != nil {
			a.closing(s, "SSE", topic, err)
			return
		}
		a.mu.Lock()
		t.sseEvents++
		a.mu.Unlock()
		select {
		case <-gone:
			return
		case <-stopping:
			return
		case ev := <-s.queue:
			buf = chunk(ev)
		}
	}
}

// closing logs a session that ends on a write error, unless it was ending anyway.
func (a *AppConfig) closing(s *acSession, kind, topic string, err error) {
	select {
	case <-s.done:
	default:
		a.logf("%s: closing a %s session of %s: %s", a.Name, kind, topicForLog(topic), err)
	}
}

// chunk frames b as one chunk of a chunked body.
func chunk(b []byte) []byte {
	out := make([]byte, 0, len(b)+12)
	out = strconv.AppendInt(out, int64(len(b)), 16)
	out = append(out, "\r\n"...)
	out = append(out, b...)
	return append(out, "\r\n"...)
}

// send queues msg on the session without waiting, dropping the oldest waiting message if the queue
// is full. Only changes send, serialized by the instance's pubMu, so after one drop there is room.
func (s *acSession) send(msg []byte) {
	for {
		select {
		case s.queue <- msg:
			return
		default:
		}
		select {
		case <-s.queue:
		default:
		}
	}
}
