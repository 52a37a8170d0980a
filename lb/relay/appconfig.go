package relay

// IBM Cloud App Configuration (protocol = "appconfiguration"): the relay answers the requests of the
// official SDKs, pointed at fairlead with overrideServiceUrl, as the service would, from its cache:
//
//   - GET /apprapp/feature/v1/instances/{guid}/config?action=sdkConfig&collection_id={c}&environment_id={e}
//     (the server SDKs' configuration): the cached configuration as the instance gave it;
//   - GET /apprapp/feature/v1/instances/{guid}/collections/{c}/config?environment_id={e} (older server
//     SDKs): the same, flattened to {features, properties, segments} of that collection and environment;
//   - GET /apprapp/wsfeature?instance_id={guid}&collection_id={c}&environment_id={e} (the server SDKs'
//     WebSocket): the text frame "test message" every keepalive, and a change frame once each new
//     configuration is in the cache (so that the fetch it causes gets the new one);
//   - GET /apprapp/feature/v1/instances/{guid}/environments/{e}/sse/subscribe?collection_id={c} (the
//     client SDKs' Server-Sent Events): event Registration with the configuration at connect, and
//     SSEConfig_payload with the new one after each change;
//   - POST /apprapp/events/v1/instances/{guid}/usage and /apprapp/metrics/v1/instances/{guid}/analytics
//     (metering): forwarded to the instance in use, with the relay's IAM token in place of the
//     client's key, and its answer returned.
//
// The topic is "collection/environment". Upstream, each topic has one wsfeature session on the
// instance in use (its "test message" heartbeats keep the session alive, any other frame is a change)
// and the configuration is fetched with the sdkConfig form; the requests name the GUID of the server's
// instance (guids) and carry the IAM token (iam.go).

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/relay/paths"
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// appConfigHeartbeat is the text frame of App Configuration's WebSocket that says a session is alive.
var appConfigHeartbeat = []byte("test message")

// appConfigHeartbeatFrame is appConfigHeartbeat framed once for every subscriber.
var appConfigHeartbeatFrame = func() *websocket.PreparedMessage {
	pm, err := websocket.NewPreparedMessage(websocket.TextMessage, appConfigHeartbeat)
	if err != nil {
		panic(err)
	}
	return pm
}()

// A reqKind is what a matched request asks of its relay.
type reqKind uint8

const (
	reqGeneric      reqKind = iota // the generic protocol: Serve tells a snapshot, an SSE and a WebSocket apart
	reqUnknown                     // an App Configuration path the relay does not serve, or another instance: 404
	reqConfig                      // the configuration (sdkConfig)
	reqConfigLegacy                // the configuration, flattened (the older REST form)
	reqSSE                         // the client SDKs' SSE
	reqWebSocket                   // wsfeature
	reqUsage                       // a metering POST
	reqAnalytics                   // an analytics POST
)

// A Request is a client request a relay matched: the topic key it names and what it asks.
type Request struct {
	Key  []byte
	kind reqKind
}

// Kind names what the request asks: "snapshot", "sse" or "websocket" (RequestKind), "usage" or
// "analytics" (App Configuration's metering), or "unknown".
func (r Request) Kind(ctx *fasthttp.RequestCtx) string {
	if r.kind == reqGeneric {
		return RequestKind(ctx)
	}
	return reqKindNames[r.kind]
}

var reqKindNames = [...]string{reqUnknown: "unknown", reqConfig: "snapshot", reqConfigLegacy: "snapshot", reqSSE: "sse",
	reqWebSocket: "websocket", reqUsage: "usage", reqAnalytics: "analytics"}

// Match reports whether the request's path is the relay's, and returns the topic key (appended to
// dst) and what it asks. It does not allocate.
func (rr *Route) Match(ctx *fasthttp.RequestCtx, dst []byte) (Request, bool) {
	return Match(rr.spec, ctx, dst)
}

// Match is Route.Match of the relay spec describes: which requests a relay takes depends on its spec
// alone (its path, or its protocol and instance). It does not allocate.
func Match(spec *config.RelaySpec, ctx *fasthttp.RequestCtx, dst []byte) (Request, bool) {
	if spec.Protocol == "appconfiguration" {
		return matchAppConfig(spec, ctx, dst)
	}
	var buf [8][]byte
	vals, ok := spec.Path.MatchInto(ctx.Path(), buf[:0])
	if !ok {
		return Request{}, false
	}
	return Request{Key: paths.AppendKey(dst, vals)}, true
}

// matchAppConfig matches the App Configuration service's paths (all of /apprapp/).
func matchAppConfig(spec *config.RelaySpec, ctx *fasthttp.RequestCtx, dst []byte) (Request, bool) {
	rest, ok := cutPrefix(ctx.Path(), "/apprapp/")
	if !ok {
		return Request{}, false
	}
	unknown := Request{kind: reqUnknown}
	args := ctx.QueryArgs()
	var guid, c, e []byte
	kind := reqUnknown
	if string(rest) == "wsfeature" {
		guid, c, e, kind = args.Peek("instance_id"), args.Peek("collection_id"), args.Peek("environment_id"), reqWebSocket
	} else if r, ok := cutPrefix(rest, "feature/v1/instances/"); ok {
		guid, r = cutSegment(r)
		switch {
		case string(r) == "config":
			if string(args.Peek("action")) != "sdkConfig" {
				return unknown, true
			}
			c, e, kind = args.Peek("collection_id"), args.Peek("environment_id"), reqConfig
		case hasPrefix(r, "collections/"):
			c, r = cutSegment(r[len("collections/"):])
			if string(r) != "config" {
				return unknown, true
			}
			e, kind = args.Peek("environment_id"), reqConfigLegacy
		case hasPrefix(r, "environments/"):
			e, r = cutSegment(r[len("environments/"):])
			if string(r) != "sse/subscribe" {
				return unknown, true
			}
			c, kind = args.Peek("collection_id"), reqSSE
		default:
			return unknown, true
		}
	} else if r, ok := cutPrefix(rest, "events/v1/instances/"); ok {
		guid, r = cutSegment(r)
		if string(r) != "usage" {
			return unknown, true
		}
		kind = reqUsage
	} else if r, ok := cutPrefix(rest, "metrics/v1/instances/"); ok {
		guid, r = cutSegment(r)
		if string(r) != "analytics" {
			return unknown, true
		}
		kind = reqAnalytics
	}
	if kind == reqUnknown || string(guid) != spec.GUID {
		return unknown, true
	}
	if kind == reqUsage || kind == reqAnalytics {
		return Request{kind: kind}, true
	}
	key := append(append(append(dst, c...), '/'), e...)
	if !paths.ValidKey(key, 2) {
		return unknown, true
	}
	return Request{Key: key, kind: kind}, true
}

// serveAppConfig answers an App Configuration request (Serve); it returns the topic and the kind of
// request, for the access log and the counters.
func (rr *Route) serveAppConfig(ctx *fasthttp.RequestCtx, req Request) (topic, kind string) {
	switch req.kind {
	case reqUnknown:
		rr.refuse(ctx, fasthttp.StatusNotFound, "not a path of this App Configuration instance")
		return string(req.Key), "unknown"
	case reqUsage, reqAnalytics:
		return "", rr.forward(ctx, req.kind)
	}
	kind = reqKindNames[req.kind]
	get := ctx.IsGet()
	if !get && !(ctx.IsHead() && (req.kind == reqConfig || req.kind == reqConfigLegacy)) {
		rr.CountRefused(fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set("Allow", "GET")
		ctx.Error("405 Method Not Allowed\n", fasthttp.StatusMethodNotAllowed)
		return string(req.Key), kind
	}
	wait, topic, ok := rr.admit(ctx, req.Key)
	if !ok {
		return topic, kind
	}
	if wait.cancel != nil {
		defer wait.cancel()
	}
	if req.kind == reqWebSocket && !websocket.FastHTTPIsWebSocketUpgrade(ctx) {
		rr.refuse(ctx, fasthttp.StatusBadRequest, "wsfeature is a WebSocket")
		return topic, kind
	}
	if (req.kind == reqSSE || req.kind == reqWebSocket) && rr.hub.Subscribers() >= int64(rr.cfg.MaxSubscribers) {
		rr.refuse(ctx, fasthttp.StatusServiceUnavailable, "too many subscribers (max_subscribers)")
		return topic, kind
	}
	rr.count(kind)
	switch req.kind {
	case reqConfig:
		serveSnapshot(ctx, wait.ctx, rr.hub, topic)
	case reqConfigLegacy:
		serveSnapshotAs(ctx, wait.ctx, rr.hub, topic, func(s *Snapshot) ([]byte, string, error) {
			b, err := s.flat(topic)
			etag := ""
			if n := len(s.ETag); n >= 2 && s.ETag[n-1] == '"' {
				etag = s.ETag[:n-1] + `-flat"` // another representation: another entity tag
			}
			return b, etag, err
		})
	case reqSSE:
		rr.serveAppConfigSSE(ctx, topic)
	case reqWebSocket:
		serveWebSocketAs(ctx, rr.hub, topic, rr.opts, true) // "test message" every keepalive, a change frame per new configuration
	}
	if ctx.Response.StatusCode() == fasthttp.StatusServiceUnavailable {
		rr.CountRefused(fasthttp.StatusServiceUnavailable) // no snapshot within wait_timeout
	}
	return topic, kind
}

// serveAppConfigSSE streams the topic's configuration to a client SDK: Registration with the current
// one (or with the first one, when there is none yet: a client SDK answered anything but 200 never
// tries again), then SSEConfig_payload with each new one.
func (rr *Route) serveAppConfigSSE(ctx *fasthttp.RequestCtx, topic string) {
	sub := rr.hub.Subscribe(topic, SSE)
	startSSE(ctx, sub, rr.opts, topic, sseRegistration, sseConfigPayload, rr.hub.Snapshot(topic), true)
}

// appConfigWS is what a wsfeature subscriber is sent: the change frame of each snapshot of topic newer
// than since, and "test message" as its keep-alive.
type appConfigWS struct {
	topic string
	since uint64
	snap  *Snapshot // the snapshot of version since, when known
}

// changeFrame returns App Configuration's change frame for the snapshot of topic, framed once for
// every subscriber: the upstream's change message that led to the snapshot, or one of the same form
// ("collection_id:…;environment_id:…;action:update") for a snapshot no message led to (a change found
// when a session reconnected, a failover).
func (s *Snapshot) changeFrame(topic string) *websocket.PreparedMessage {
	return s.change.get(func() any {
		msg := s.upstreamChange
		if msg == nil {
			c, e, _ := cutString(topic, '/')
			msg = []byte("collection_id:" + c + ";environment_id:" + e + ";action:update")
		}
		pm, err := websocket.NewPreparedMessage(websocket.TextMessage, msg)
		if err != nil {
			panic(err)
		}
		return pm
	}).(*websocket.PreparedMessage)
}

// flat returns the configuration of topic ("collection/environment") in the older REST form: the
// features and properties of that environment that belong to that collection (or name none), and
// the segments; computed once per snapshot.
func (s *Snapshot) flat(topic string) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	r := s.flatForm.get(func() any {
		b, err := flattenConfig(s.Body, topic)
		return result{b, err}
	}).(result)
	return r.b, r.err
}

// flattenConfig makes the older REST form of an sdkConfig document for topic.
func flattenConfig(body []byte, topic string) ([]byte, error) {
	collection, environment, _ := cutString(topic, '/')
	var doc struct {
		Environments []struct {
			EnvironmentID string            `json:"environment_id"`
			Features      []json.RawMessage `json:"features"`
			Properties    []json.RawMessage `json:"properties"`
		} `json:"environments"`
		Segments []json.RawMessage `json:"segments"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	out := struct {
		Features   []json.RawMessage `json:"features"`
		Properties []json.RawMessage `json:"properties"`
		Segments   []json.RawMessage `json:"segments"`
	}{Features: []json.RawMessage{}, Properties: []json.RawMessage{}, Segments: doc.Segments}
	if out.Segments == nil {
		out.Segments = []json.RawMessage{}
	}
	inCollection := func(item json.RawMessage) bool {
		var it struct {
			Collections *[]struct {
				CollectionID string `json:"collection_id"`
			} `json:"collections"`
		}
		if json.Unmarshal(item, &it) != nil {
			return false
		}
		if it.Collections == nil {
			return true
		}
		for _, c := range *it.Collections {
			if c.CollectionID == collection {
				return true
			}
		}
		return false
	}
	for _, env := range doc.Environments {
		if env.EnvironmentID != environment {
			continue
		}
		for _, f := range env.Features {
			if inCollection(f) {
				out.Features = append(out.Features, f)
			}
		}
		for _, p := range env.Properties {
			if inCollection(p) {
				out.Properties = append(out.Properties, p)
			}
		}
	}
	return json.Marshal(out)
}

// forward forwards a metering POST to the instance in use and answers with its answer; it returns
// the kind of request.
func (rr *Route) forward(ctx *fasthttp.RequestCtx, kind reqKind) string {
	name, p := "usage", "events/v1/instances/%s/usage"
	if kind == reqAnalytics {
		name, p = "analytics", "metrics/v1/instances/%s/analytics"
	}
	if !ctx.IsPost() {
		rr.CountRefused(fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set("Allow", "POST")
		ctx.Error("405 Method Not Allowed\n", fasthttp.StatusMethodNotAllowed)
		return name
	}
	rr.count(name)
	body := append([]byte(nil), ctx.PostBody()...)
	path := func(server string) string { return "/apprapp/" + sprintfGUID(p, rr.guidOf(server)) }
	status, answer, ctype, err := rr.origin.Forward(context.Background(), http.MethodPost, path, body,
		string(ctx.Request.Header.ContentType()))
	if err != nil {
		rr.logf("relay %s: %s: %v", rr.name, name, err)
		rr.refuse(ctx, fasthttp.StatusServiceUnavailable, "the App Configuration instance cannot be reached")
		return name
	}
	ctx.SetStatusCode(status)
	if ctype != "" {
		ctx.Response.Header.SetContentType(ctype)
	}
	ctx.Response.SetBodyRaw(answer)
	return name
}

// guidOf returns the instance GUID of server: its own (guids), or the relay's.
func (rr *Route) guidOf(server string) string {
	if g := rr.spec.GUIDs[server]; g != "" {
		return g
	}
	return rr.spec.GUID
}

// appConfigPaths returns the upstream paths of a topic's configuration and wsfeature session on a
// server (OriginOptions.SnapshotPath, EventsPath).
func (rr *Route) appConfigPaths() (snapshot, events func(dst []byte, server string, vals [][]byte) []byte) {
	snapshot = func(dst []byte, server string, vals [][]byte) []byte {
		dst = append(dst, "/apprapp/feature/v1/instances/"...)
		dst = append(dst, rr.guidOf(server)...)
		dst = append(dst, "/config?action=sdkConfig&collection_id="...)
		dst = append(dst, vals[0]...)
		dst = append(dst, "&environment_id="...)
		return append(dst, vals[1]...)
	}
	events = func(dst []byte, server string, vals [][]byte) []byte {
		dst = append(dst, "/apprapp/wsfeature?instance_id="...)
		dst = append(dst, rr.guidOf(server)...)
		dst = append(dst, "&collection_id="...)
		dst = append(dst, vals[0]...)
		dst = append(dst, "&environment_id="...)
		return append(dst, vals[1]...)
	}
	return snapshot, events
}

// sprintfGUID puts guid in the %s of format.
func sprintfGUID(format, guid string) string {
	before, after, _ := cutString(format, '%')
	return before + guid + after[1:]
}

// cutString splits s around the first sep.
func cutString(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// cutPrefix returns b without prefix, and whether it had it.
func cutPrefix(b []byte, prefix string) ([]byte, bool) {
	if !hasPrefix(b, prefix) {
		return nil, false
	}
	return b[len(prefix):], true
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// cutSegment splits b at its first "/": the segment before it and what follows it.
func cutSegment(b []byte) (seg, rest []byte) {
	for i, c := range b {
		if c == '/' {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}
