// Package relay is the transport-independent core of fairlead's relay routes, a caching
// proxy for configuration snapshots.
//
// A relay route maps client paths such as "/relay/inventory/dev" to topics ("inventory/dev").
// Clients GET a topic's cached snapshot, or subscribe to it over Server-Sent Events or
// WebSocket. fairlead keeps one upstream WebSocket per topic; when the upstream signals a
// change, the snapshot is fetched once and pushed to every subscriber, so N clients cost the
// upstream one connection and one fetch per change instead of N.
//
// This package holds the parts that do not touch sockets: path templates (Template), which
// match client paths and build the upstream snapshot and events paths, and the Hub, which
// caches each topic's latest Snapshot, coalesces fetches (Refresh), and fans snapshots and
// raw change messages out to subscribers without blocking on slow ones. The HTTP handlers,
// the SSE and WebSocket writers and the upstream session manager plug into it: a writer
// goroutine per client reads Subscriber.C, the upstream manager calls Refresh and
// PublishChange, and closes the upstream sessions of the topics IdleTopics reports. The upstream
// manager (Upstream) judges no server: it asks its Pool (package lb's pool, whose health check is
// the one verdict on the servers) which one to use, reports how each attempt ended, and follows the
// pool's changes.
package relay
