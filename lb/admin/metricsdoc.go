package admin

// metricFamilies describes every metric family of GET /metrics: its type, labels and help, in one place.
// The series themselves are written at scrape time where their values live, in package lb (metrics.go,
// policy.go, roundrobin.go, discovery.go, package relay: Backend.WriteMetrics); the admin and metrics
// reference (ADMIN.md) is generated from this table, and a test fails when a family written anywhere
// in lb or its sub-packages is missing here, or a family here is written nowhere.
var metricFamilies = []metricFamily{
	// Process-wide.
	{"fairlead_build_info", "gauge", "version, goversion", "always 1; the labels tell the build"},
	{"fairlead_frontend_requests_total", "counter", "protocol", "requests handed to routing, by the protocol they came over: `http/1.1` (HTTP/1.0 included) or `h2` (one per HTTP/2 stream)"},
	{"fairlead_http2_connections_total", "counter", "", "HTTP/2 connections served on tls_listen (ALPN h2)"},
	{"fairlead_http2_refused_total", "counter", "kind", "what HTTP/2 refused, by kind: `rapid_reset` (connections closed for resetting most of the streams they open, CVE-2023-44487), `bad_request` (streams answered 400 by the framer), `connection_field` (streams reset: a connection-specific field, or TE other than trailers), `header_too_large` (431: a header list over max_header_size), `stream_CODE` (streams reset with the HTTP/2 error CODE: a malformed request's `PROTOCOL_ERROR`, a stream over http2_max_streams' `REFUSED_STREAM`…) and `conn_CODE` (connections closed by a GOAWAY with error CODE: a field longer than the header list allows is a `COMPRESSION_ERROR`)"},
	{"fairlead_frontend_limited_total", "counter", "reason", "what the limits per client address refused: `rate_per_source` (requests answered 429 with Retry-After, over rate_per_source and burst_per_source), `max_conns_per_source` (connections closed at accept, over max_conns_per_source)"},
	{"fairlead_bad_requests_total", "counter", "code", "requests the front end refused before any route, or whose body failed: 400 malformed or ambiguous, 405 CONNECT or TRACE, 408 head or body too slow, 413 body too large, 431 head too large, 505 HTTP version"},
	{"fairlead_frontend_connection_errors_total", "counter", "kind", "client connections that ended with an error, once each: `closed` (the client closed mid-request), `reset` (reset mid-request, or broke while the answer was written), `timeout` (read_timeout or header_timeout mid-request, or header_timeout in the middle of a PROXY header), `tls` (the handshake failed), `refused` (the front end refused a request: 400, 413, 431, 505), `limit` (over [frontend] max_conns: answered 503 at accept and closed), `accept` (accepting failed, e.g. out of file descriptors), `other`, `proxy_missing` (a [frontend] proxy_protocol sender's connection without a PROXY header within header_timeout), `proxy_malformed` (with a malformed one, or one it cut off). A keep-alive connection closed, reset or idle between requests, one that sent nothing, and one handed to a tunnel or relay stream are not errors"},
	{"fairlead_tls_handshake_failures_total", "counter", "", "with tls_listen: TLS handshakes that failed (no or a bad client certificate when required, an old protocol version, plain HTTP; a client gone before its hello is not one)"},
	{"fairlead_tls_certificate_not_after_seconds", "gauge", "file or acme", "with tls_listen: each front-end certificate's expiry, Unix seconds, labelled with its file (tls_cert, [[frontend.certs]]) or its [frontend.acme] domain (once obtained): alert before it passes"},
	{"fairlead_acme_certificates_total", "counter", "renewal, result", "[frontend.acme]: certificates obtained (`renewal=\"false\"`) and renewed (`\"true\"`), `result` `ok` or `failed` (each failed attempt; the library retries with back-off, the last good certificate is served meanwhile)"},
	{"fairlead_acme_challenges_answered_total", "counter", "type", "[frontend.acme]: ACME validations answered, `http-01` on listen or `tls-alpn-01` on tls_listen"},
	{"fairlead_acme_failing", "gauge", "name", "[frontend.acme]: 1 while a domain's last attempt to obtain or renew its certificate failed, until one succeeds: alert on it (and on the expiry above)"},
	{"fairlead_admin_unauthorized_total", "counter", "", "admin requests answered 401"},
	{"fairlead_config_reloads_total", "counter", "", "reloads applied"},
	{"fairlead_config_reload_failures_total", "counter", "", "reloads that kept the running config"},
	{"fairlead_upgrades_total", "counter", "result", "binary upgrades (SIGUSR2): ok, a new process took over (counted on across the processes); failed, the new process failed and the old one kept serving"},
	{"fairlead_config_last_reload_successful", "gauge", "", "1 when the last reload attempt left the files in force (applied, or found identical to the running config, as when a bad edit is put back; a reload whose changes partly need a restart counts as 1), 0 when it kept the running config (a config error, a listen address that cannot be bound, a relay that cannot start); 1 at start"},
	{"fairlead_events_total", "counter", "kind", "events published on the event stream, by kind (see Event kinds)"},
	{"fairlead_tunnels_opened_total", "counter", "", "WebSocket tunnels opened"},
	{"fairlead_tunnels_closed_total", "counter", "", "WebSocket tunnels closed"},
	{"fairlead_tunnels_closed_by_reason_total", "counter", "reason", "tunnels closed, by reason: `closed by client` or `closed by server` (that side closed first), `error` (a read or write failed), `idle timeout` (tunnel_idle_timeout), `closed` (by fairlead: server down, in maintenance or removed, leader change, failback, drain), `shutdown` (fairlead stopping)"},
	{"fairlead_tunnel_bytes_total", "counter", "direction", "bytes relayed by tunnels, `to_server` and `to_client`, counted when a tunnel closes"},

	// Pools (label pool).
	{"fairlead_pool_requests_total", "counter", "pool", "requests routed to the pool"},
	{"fairlead_pool_redundancy_lost", "gauge", "pool", "1 while a pool of two servers or more has fewer than two that can serve (up, or a healthy standby: a leader pool whose leader is its last healthy server): the next failure is an outage; 0 otherwise"},
	{"fairlead_pool_retries_total", "counter", "pool", "attempts retried on another server (or on the confirmed leader)"},
	{"fairlead_pool_inflight_failovers_total", "counter", "pool", "leader pools: requests sent to a new leader while they waited for the old one's answer (among the retries)"},
	{"fairlead_pool_errors_total", "counter", "pool, code", "answers fairlead gave itself: `502`, `504`, and unavailable_status (`503` by default)"},
	{"fairlead_pool_unavailable_total", "counter", "pool", "requests no server could take within queue_timeout, whatever unavailable_status says"},
	{"fairlead_pool_queue_full_total", "counter", "pool", "requests turned away at once because max_queue requests were waiting"},
	{"fairlead_pool_waiting", "gauge", "pool", "requests waiting for a server now"},
	{"fairlead_pool_tunnels_opened_total", "counter", "pool", "tunnels opened through the pool"},
	{"fairlead_pool_bytes_total", "counter", "pool, direction", "`in`: request body bytes read from clients; `out`: response body bytes as declared (in-memory length or Content-Length; chunked answers not counted)"},
	{"fairlead_pool_tunnel_bytes_total", "counter", "pool, direction", "bytes relayed by the pool's tunnels, `to_server` and `to_client`, counted when a tunnel closes"},
	{"fairlead_pool_serving_backups", "gauge", "pool", "1 while the backups serve"},
	{"fairlead_pool_failovers_total", "counter", "pool", "switches of the pool's traffic to its backups"},
	{"fairlead_pool_failbacks_total", "counter", "pool", "switches back to the primaries"},
	{"fairlead_pool_pin_failures_total", "counter", "pool", "roundrobin pools: multi-part requests answered 502 because their pinned server was not connected and writable"},
	{"fairlead_pool_sticky_entries", "gauge", "pool", "sticky pools: keys in the sticky table"},
	{"fairlead_pool_sticky_evictions_total", "counter", "pool", "sticky pools: keys evicted for max_entries"},
	{"fairlead_pool_high_watermark", "gauge", "pool", "roundrobin pools: high_watermark (0: no limit)"},
	{"fairlead_pool_high_watermark_bytes", "gauge", "pool", "roundrobin pools: high_watermark_bytes (0: no limit)"},
	{"fairlead_pool_pins", "gauge", "pool", "roundrobin pools with multipart_header: multi-part pins held"},
	{"fairlead_leader_changes_total", "counter", "pool", "leader pools: leader changes"},
	{"fairlead_split_brain_total", "counter", "pool", "leader pools: split brains (the leader answered 200 while another server's latest answer was 200), once each"},
	{"fairlead_request_duration_seconds", "histogram", "pool", "from a request's arrival to its answer's head, fairlead's own 502/503/504 included; for a WebSocket upgrade, to the server's 101"},
	{"fairlead_queue_wait_seconds", "histogram", "pool", "each wait for a server, served or not"},
	{"fairlead_discovery_changes_total", "counter", "pool, provider", "server lists applied from the pool's discovery provider"},
	{"fairlead_discovery_errors_total", "counter", "pool, provider", "failed reads of the registry (the last list stays)"},
	{"fairlead_discovery_servers", "gauge", "pool, provider", "servers in the list in force from the provider"},
	{"fairlead_discovery_last_success_timestamp_seconds", "gauge", "pool, provider", "time of the provider's last answer, Unix seconds"},

	// Servers (labels pool, server = address, name = display name).
	{"fairlead_server_up", "gauge", "pool, server, name", "1 while available (in a leader pool: the leader)"},
	{"fairlead_server_state", "gauge", "pool, server, name, state", "1 for the server's state, 0 for the others: `up`, `standby`, `down`, `drain`, `maint`, `removed` (the words of /api/status and the status page; see ServerStatus.State)"},
	{"fairlead_server_backup", "gauge", "pool, server, name", "1 for a backup"},
	{"fairlead_server_requests_total", "counter", "pool, server, name", "requests sent to the server"},
	{"fairlead_server_failures_total", "counter", "pool, server, name", "attempts and tunnel dials that failed by the server's fault (refused, reset, timed out, no HTTP answer)"},
	{"fairlead_server_in_flight", "gauge", "pool, server, name", "requests sent whose response head has not arrived"},
	{"fairlead_server_in_flight_bytes", "gauge", "pool, server, name", "body bytes of those requests"},
	{"fairlead_server_upstream_conns", "gauge", "pool, server, name", "open upstream connections"},
	{"fairlead_server_tunnels", "gauge", "pool, server, name", "open tunnels"},
	{"fairlead_server_new_tunnels_delayed_total", "counter", "pool, server, name", "upgrades new_tunnels_per_second made wait for the server's next slot before they went on (their wait is in fairlead_queue_wait_seconds)"},
	{"fairlead_server_new_tunnels_limited_total", "counter", "pool, server, name", "upgrades new_tunnels_per_second refused (their slot was past queue_timeout, or max_queue was full): answered unavailable_status with a Retry-After spread over the wait they would have had"},
	{"fairlead_server_slow_start_weight", "gauge", "pool, server, name", "the server's share of new placements under slow_start, from 0 when it became available again to 1 (its full share)"},
	{"fairlead_server_writable", "gauge", "pool, server, name", "roundrobin pools: 1 while below the watermarks"},
	{"fairlead_server_pins", "gauge", "pool, server, name", "roundrobin pools with multipart_header: pins on the server"},
	{"fairlead_check_duration_seconds", "histogram", "pool, server, name", "each probe's latency, failures and timeouts included"},

	// Routes with [routes.auth] (route = index of the [[routes]] entry from 0 in merge order).
	{"fairlead_route_unauthorized_total", "counter", "route, pool", "requests answered 401 for a missing or wrong key"},

	// Relay routes (label relay; topic for the per-topic ones).
	{"fairlead_relay_upstream_sessions", "gauge", "relay", "open upstream events sessions (one per active topic)"},
	{"fairlead_relay_serving_backup", "gauge", "relay", "1 while fetches and sessions go to a server other than the primary"},
	{"fairlead_relay_upstream_switches_total", "counter", "relay", "moves of the relay's upstream between servers"},
	{"fairlead_relay_topics", "gauge", "relay", "topics held (listed and on demand)"},
	{"fairlead_relay_subscribers_all_topics", "gauge", "relay", "open SSE and WebSocket subscribers of every topic (named fairlead_relay_subscribers_total before 2026-12: a gauge must not end in _total)"},
	{"fairlead_relay_requests_total", "counter", "relay, kind", "requests served, by kind: `snapshot`, `sse`, `websocket`, and App Configuration's metering POSTs forwarded, `usage` and `analytics`"},
	{"fairlead_relay_iam_tokens_total", "counter", "relay", "IAM tokens obtained by an App Configuration relay"},
	{"fairlead_relay_iam_failures_total", "counter", "relay", "failed exchanges of an App Configuration relay's API key for an IAM token"},
	{"fairlead_relay_refused_total", "counter", "relay, code", "requests answered with an error, by status (401, 404, 405, 502, 503)"},
	{"fairlead_relay_seed_writes_total", "counter", "relay", "writes of seed_file"},
	{"fairlead_relay_seed_write_errors_total", "counter", "relay", "failed writes of seed_file"},
	{"fairlead_relay_subscribers", "gauge", "relay, topic", "open subscribers of the topic"},
	{"fairlead_relay_snapshot_version", "gauge", "relay, topic", "version of the cached snapshot"},
	{"fairlead_relay_publishes_total", "counter", "relay, topic", "new snapshots pushed to subscribers"},
	{"fairlead_relay_fetches_total", "counter", "relay, topic", "snapshot fetches ended (at start, at a topic's first request, after a change or a reconnection)"},
	{"fairlead_relay_fetch_errors_total", "counter", "relay, topic", "failed snapshot fetches"},
	{"fairlead_relay_drops_total", "counter", "relay, topic", "subscribers dropped for falling behind or not taking writes"},
}

type metricFamily struct{ name, typ, labels, help string }

// adminEndpoints are the paths of the admin listener (Handler.Handle), documented once: the admin and
// metrics reference (ADMIN.md) is generated from this table, and a test fails when Handle serves
// a path missing here.
var adminEndpoints = []adminEndpoint{
	{"GET", "/", "the live status page: one embedded HTML page, no external assets. Every pool and server with its state (up, down, drain, maint, removed; backup tier), the leader, the last check answer and its latency, in-flight requests, open tunnels, sticky keys, request and error rates over the last minutes, and buttons for the actions. It updates live from /events (with `fetch` and `Authorization: Bearer` when an admin token is saved in it). On a listener that is not loopback every path needs credentials, the page too: a browser loads it with Basic auth (user and password_file)"},
	{"GET", "/events", "Server-Sent Events: every event of the event stream (see Event kinds; probe answers only with `?checks=1`, since every snapshot carries each server's last answer) as `event: <kind>`, `id: <seq>`, `data: <JSON>` with fields `seq`, `time`, `kind`, `pool`, `server`, `old`, `status`, `latency_ms`, `detail`; a `snapshot` event (the /api/status document) at connect and every 2 s; `: ping` comments every 15 s. A subscriber that falls 512 events behind is dropped, never slowing fairlead"},
	{"GET", "/healthz", "`200 ok` while the process serves (keepalived's check)"},
	{"GET", "/api/status", "JSON: the config files, every pool, server and relay with their state and counters (fields below). `/status` is the same"},
	{"GET", "/metrics", "Prometheus text format, each family with its `# HELP` and `# TYPE` (families below), and the Go process metrics. Histograms are in seconds, with bounds 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 and +Inf, written once they have a first observation"},
	{"POST", "/api/servers/POOL/SERVER/ACTION", "SERVER is the address or the display name. `drain`: no new traffic, not even sticky clients' (open tunnels stay); `maint`: no traffic, its tunnels are closed; `ready`: back to normal; `probe`: probe it now (without active checks: try a server that live failures took down again now). Logged and published as an `admin_action` event; the answer is the server's status. The operator's state survives reloads that keep the server. Unknown pool or server: 404; unknown action: 400; another method: 405"},
	{"GET", "/debug/pprof/", "Go profiles (`profile?seconds=10` for CPU, `heap`, `goroutine`)"},
}

type adminEndpoint struct{ method, path, doc string }
