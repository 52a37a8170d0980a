// Package relay is fairlead's relay routes ([relays.NAME]), a caching proxy for configuration
// snapshots, modelled on the IBM Cloud App Configuration Relay Proxy: the whole feature but its path
// templates (package paths, which the config parses) and the route auth and access log of the
// request path (package lb).
//
// A relay route maps client paths such as "/relay/inventory/dev" to topics ("inventory/dev").
// Clients GET a topic's cached snapshot, or subscribe to it over Server-Sent Events or
// WebSocket. fairlead keeps one upstream WebSocket per topic; when the upstream signals a
// change, the snapshot is fetched once and pushed to every subscriber, so N clients cost the
// upstream one connection and one fetch per change instead of N.
//
//   - Route (route.go) is one running relay: its topics (listed and on-demand), their lifecycle
//     (activated by a request, retired when idle), its start (normal: every listed topic fetched;
//     fast: the seed file, seed.go) and its Status and metrics (status.go).
//   - Hub (hub.go) caches each topic's latest Snapshot, coalesces fetches (Refresh), and fans
//     snapshots and raw change messages out to subscribers without blocking on slow ones.
//   - Serve (serve.go) answers a client: the snapshot, an SSE stream or a WebSocket, a writer
//     goroutine per subscriber reading Subscriber.C (on the hijacked HTTP/1.1 connection; an SSE
//     stream over HTTP/2 writes the stream's DATA, frontend.StreamAnswer).
//   - Streams and Route.Adopt (handover.go) move the running subscribers to the new process of a
//     binary upgrade: each stops between two messages, and goes on there from what it was sent
//     (an HTTPS client's with its TLS session, which fairlead's record layer carries on).
//   - Origin (origin.go) holds the upstream sessions and fetches. It judges no server: it asks its
//     Pool (package lb's pool, whose health check is the one verdict on the servers) which one to
//     use, reports how each attempt ended, and follows the pool's changes.
package relay
