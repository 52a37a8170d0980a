// Package config is fairlead's configuration: the schema (every TOML key, documented where it is
// defined), the merge of conf.d's files in lexical order (merge.go), the defaults (defaults.go), the
// validation that names the file and the key of every problem (validate.go, and per concern: tls.go,
// auth.go, relay.go, discovery.go), and the reading of secret and certificate files, which are part of
// a loaded Config and of its digest, so that a reload after editing only such a file applies.
//
// A loaded Config is immutable: a reload loads a new one, and lb swaps it in whole.
package config

import (
	"crypto/tls"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Config is the whole configuration as the operator wrote it, merged from every file of conf.d and with
// defaults applied. A loaded Config is never modified: a reload builds a new one.
//
// Every key is documented where it is defined, in words an operator reads: conf.d/REFERENCE.md is
// generated from these comments and from the defaults the code applies (defaults.go), so a comment never
// restates a default. conf.d/ shows each key commented with its default.
type Config struct {
	Global   Global           `toml:"global"`
	Frontend Frontend         `toml:"frontend"`
	Admin    Admin            `toml:"admin"`
	Pools    map[string]*Pool `toml:"pools"`
	Routes   []Route          `toml:"routes"`
	// Relay routes: a path template whose topics fairlead serves itself, from one upstream session per
	// topic, cached snapshots and fan-out to WebSocket and SSE subscribers.
	Relays map[string]*Relay `toml:"relays"`

	// Files are the files the config was read from, in the order they were merged.
	Files []string `toml:"-"`
	// PoolOrder names the pools in the order their [pools.NAME] tables first appear in Files (the
	// status page and /api/status list them so, leader pools first). A Config built in code may leave
	// it empty: PoolNames then sorts the names.
	PoolOrder []string `toml:"-"`
	// origin maps a dotted key ("pools.platform.check.interval", "routes.2.pool") to the file that set it.
	origin map[string]string
	// Digest identifies the bytes of every file read, so that a reload of unchanged files is skipped.
	Digest string `toml:"-"`
	// filesRead are the files readFile read, in order (SecretFiles).
	filesRead []string
	// AdminToken and AdminPassword are the contents of [admin] token_file and password_file, read when
	// the config is loaded (a reload reads them again). Never logged.
	AdminToken, AdminPassword string `toml:"-"`
	// routeAuth holds, by route index, what [routes.auth] files held when the config was loaded: the
	// SHA-256 of each client key and the upstream credential (nil for a route without auth). Never
	// logged (auth.go).
	routeAuth []*Auth
	// RelaySpecs holds what each [RelaySpecs.NAME] compiles to when the config is loaded: its templates, topics,
	// upstream headers (a credential: never logged) and auth (relay.go).
	RelaySpecs map[string]*RelaySpec `toml:"-"`
}

// Process-wide settings.
type Global struct {
	// Where fairlead saves, per pool, its balance, its leader (leader pools), each server's health (up
	// or down), its sticky table and its multi-part pins (each key with its server and idle time), for a
	// fast start. JSON,
	// written every 5 s when something changed (a placement, a health or leader change, a reload; an
	// unchanged state once a minute) and once more at exit, replaced atomically (a temporary file in the
	// same directory, fsync, rename) and readable by its owner only (mode 0600): it holds no
	// credentials, but sticky keys may be session cookies or asset ids. A failed write logs one warning
	// and fairlead serves on. "" saves nothing. Read at start: a change needs a restart.
	StateFile string `toml:"state_file"`
	// A state file written longer ago than this is stale: a fast start ignores it and starts normally.
	StateMaxAge Duration `toml:"state_max_age"`
	// "normal": the front end opens once every pool's first round of probes has answered (bounded by
	// the check timeout). "fast": fairlead reads state_file before the first probe and opens at once: a
	// leader pool's remembered leader is the elected leader, a remembered-up server of another pool is
	// up, and sticky keys and multi-part pins return to their tables (keys of servers no longer in the pool, or idle past
	// idle_timeout counting the time fairlead was down, are dropped); the probes go out at once and the
	// usual rules apply (a remembered leader is replaced after fall non-200 answers, a remembered-up
	// server goes down after fall failures, servers not in the file start unknown). A missing,
	// unreadable, corrupt or stale file logs a warning naming the file and the reason and falls back to
	// a normal start. A pool missing from the file, whose balance changed, whose remembered leader left
	// the pool, or that had no leader (or no server up) waits for its first round; its sticky keys are
	// still restored if its balance is unchanged. Needs a restart.
	Start string `toml:"start"`
	// "text" (key=value lines) or "json" (one JSON object per line), written to standard error through
	// log/slog; events carry kind, pool, server, old and detail. Needs a restart.
	LogFormat string `toml:"log_format"`
	// The least level logged: "debug", "info", "warn" or "error" (the README says what each level
	// carries). "debug" adds the client connection errors of the front end, each kind at most once every
	// 10 s: msg="frontend: connection error" kind=closed client=203.0.113.7 suppressed=199 (the kind,
	// the client's IP address and how many lines of that kind were held back, nothing else; the admin
	// listener's as "admin:", without the counter). A reload applies it at once.
	LogLevel string `toml:"log_level"`
	// msg=access lines: type=request with client method path proto (http/1.1 or h2) route pool server name status duration_ms
	// req_bytes resp_bytes retries (server the address and name the display name of the server that
	// answered, as the metrics' labels: the address when it has no name; route -1 and pool "" when no
	// route matched, status 101 for a tunnel, resp_bytes -1 for a streamed answer without
	// Content-Length); type=tunnel at each tunnel close with client pool server name duration_ms
	// bytes_to_server bytes_to_client reason; type=relay for
	// each request of a relay route with client method path relay topic kind status duration_ms (kind
	// snapshot, sse or websocket; a stream's line is written when it starts, status 101 for a
	// WebSocket). Requests the front end refuses are logged too, with the method and path the client sent
	// ("" where the request line was not readable), the real duration, route -1, and refused=REASON; an
	// HTTP/2 stream reset without an answer has status 0 and reset=CODE (PROTOCOL_ERROR, REFUSED_STREAM…).
	// 401s of single-point auth are logged too. Never the
	// query string, a header (Authorization, cookies), check credentials or a body. A reload turns it
	// on or off at once.
	AccessLog bool `toml:"access_log"`
}

// Where clients connect, and what the front end accepts from them. A new listen or tls_listen address
// applies at a reload (it is bound before anything else applies, a bind failure fails the reload, and
// the old listener closes without cutting its connections); trusted_proxies, redirect_https, the limits
// per source (rate_per_source, burst_per_source, max_conns_per_source), the
// certificates and the client CAs (tls_cert, tls_key, [[frontend.certs]], client_ca, client_auth) apply
// at once; the other keys, and adding or removing a listener, need a restart.
//
// Every byte a client sends runs through a byte-level HTTP/1.1 framer (RFC 9112) before it is parsed,
// so that nothing a server behind fairlead could read differently is forwarded. Refused with 400:
// Content-Length with Transfer-Encoding, two Content-Lengths, a Content-Length that is not digits, a
// Transfer-Encoding other than exactly chunked (or two, or in HTTP/1.0), obs-fold, bare LF or CR,
// whitespace before a colon, NUL and other control bytes, field names that are not tokens, HTTP/1.1
// without exactly one non-empty Host, a Host that is not host[:port] (no userinfo, a port up to 65535,
// no IPv6 zone), a malformed request line, a request target with a byte RFC 3986
// does not allow (controls, space, DEL, bytes over 0x7e, and " # < > \ ^ ` { | }: what Tomcat refuses
// by default; HAProxy refuses only # of these; [ ] and a % that begins no %XX pass), bad chunk sizes
// (not hex, empty, over 15 digits, whitespace before them or before the line's CRLF), chunk extensions
// outside the chunk-ext grammar of RFC 9112 §7.1.1 (5;a=b and 5 ; a = "x y" pass, 5;a b c and 5;a="open
// do not), a chunk-size line over 4096 bytes, chunk data not followed by CRLF. A Content-Length goes
// upstream as its number, without whitespace or leading zeros. CONNECT and TRACE, in any case, get 405
// with Allow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH (fairlead is no forward proxy, and TRACE
// would echo a user's credentials back; every other method, extension methods included, is forwarded,
// and Allow lists the standard ones); an HTTP version other than 1.0 and 1.1 gets 505. A violation holds
// back the whole message it is in: complete pipelined requests before it are served, then the answer
// comes and the connection closes (the client's unsent bytes are drained for up to 0.5 s first, so that
// the answer is not lost to a reset). After a request with an Upgrade field the framer stops (the bytes
// may be WebSocket frames); unless that request becomes a tunnel, its connection closes after the
// answer. Refusals are counted in fairlead_bad_requests_total{code} and, with access_log, logged.
type Frontend struct {
	// The address (host:port) of the plain HTTP listener. "" serves HTTPS only (needs tls_listen).
	Listen string `toml:"listen"`
	// The longest silence while a request's head or body is read: a body that stops arriving gets 408
	// and its upstream request is cut before its end (the server is not blamed).
	ReadTimeout Duration `toml:"read_timeout"`
	// Closes a client keep-alive connection idle this long between requests.
	IdleTimeout Duration `toml:"idle_timeout"`
	// Concurrent client connections served over HTTP (a connection that became a tunnel or a relay
	// stream no longer counts). Over it a new connection gets 503 from the accept loop and is closed at
	// once, holding no goroutine (logged at WARN, rate-limited, and counted as kind limit).
	MaxConns int `toml:"max_conns"`
	// Requests per second each client address may make (0: no limit), an HTTP/2 stream and a WebSocket
	// upgrade each one: over it a request is answered 429 with Retry-After (the whole seconds until the
	// address may make one again) and nothing is forwarded. The address is the connection's, or, from a
	// client in trusted_proxies, the last X-Forwarded-For address that is not one. Devices behind one NAT
	// share an address: size it for the devices behind the largest NAT (e.g. 2,000 devices reconnecting
	// over about a minute need about 35) or leave it off for such networks. Applies at once on a reload.
	RatePerSource int `toml:"rate_per_source"`
	// The requests an address may make at once before rate_per_source paces it (its bucket); 0: as many
	// as rate_per_source. Applies at once on a reload.
	BurstPerSource int `toml:"burst_per_source"`
	// Connections each client address may have open at once (0: no limit), tunnels included: over it a
	// new connection is closed at accept, before any byte is read (counted). The address is the
	// connection's (X-Forwarded-For is not read yet); a proxy in trusted_proxies is exempt. From a
	// proxy_protocol sender it is the address its PROXY header carries, counted once the header is read
	// (and closed then if over). A connection moved at a binary upgrade (idle, or its tunnel) is counted
	// in the new process by the same address, whatever the count (it is never closed for it): one from a
	// proxy_protocol sender by the client its PROXY header carried, not the sender (a LOCAL one by none).
	// Applies at once on a reload to new connections (those open before it was set are not counted).
	MaxConnsPerSource int `toml:"max_conns_per_source"`
	// Request body limit in bytes; 0: none. Over it 413: a Content-Length is refused before anything is
	// forwarded, a chunked body as its chunk sizes add up past the limit (its upstream request is cut
	// before its end).
	MaxBodySize int64 `toml:"max_body_size"`
	// At SIGTERM or SIGINT fairlead stops accepting, lets in-flight requests finish for up to this
	// long, closes the tunnels (spread over each pool's tunnel_close_spread) and exits 0.
	DrainTimeout Duration `toml:"drain_timeout"`
	// The address of the HTTPS listener, beside listen or alone, served by the same front end (framer,
	// routes, stickiness, retries, access log) with X-Forwarded-Proto: https. TLS 1.2 and 1.3, Go's
	// default cipher suites, ALPN h2 (with http2) then http/1.1; the handshake runs before the first read, bounded by
	// header_timeout, and one that fails closes the connection without an answer. Needs a certificate:
	// tls_cert and tls_key, or [[frontend.certs]]. WebSocket upgrades over TLS are tunnelled like plain
	// ones, by the same epoll relay: their records are read only when the socket is readable, and an
	// idle one holds no goroutine and no buffer.
	TLSListen string `toml:"tls_listen"`
	// PEM file of the default certificate, chain first, with tls_key. Certificates, keys and client_ca
	// are read when the config is loaded and watched: a new one applies at the next handshake without
	// touching open connections or tunnels; a bad one fails the reload, naming the file and the key
	// ("frontend.tls_cert: … tls: private key does not match public key"), and the running certificates
	// stay. Alert on fairlead_tls_certificate_not_after_seconds.
	TLSCert string `toml:"tls_cert"`
	// PEM file of tls_cert's private key.
	TLSKey string `toml:"tls_key"`
	// More certificates, chosen by SNI ([[frontend.certs]] entries).
	Certs []Cert `toml:"certs"`
	// Certificates obtained and renewed by ACME ([frontend.acme], acme.go).
	ACME *ACME `toml:"acme"`
	// PEM file of the CAs that sign client certificates (mutual TLS); goes with client_auth.
	ClientCA string `toml:"client_ca"`
	// "require": a client without a valid certificate fails the handshake; "verify_if_given": a
	// certificate is checked if one is sent. Goes with client_ca.
	ClientAuth string `toml:"client_auth"`
	// Offers HTTP/2 on tls_listen (ALPN h2 before http/1.1). Each stream is one request through the same
	// path as HTTP/1.1 (routes, auth, pools, retries, access log, metrics), forwarded as HTTP/1.1 from
	// the validated fields only; trailers pass both ways; WebSocket upgrades stay HTTP/1.1 (no extended
	// CONNECT is offered). max_header_size bounds a stream's head as it bounds an HTTP/1.1 head (431 over
	// it, the connection serving on), read_timeout its body's silence, idle_timeout a connection without
	// streams (and one whose client stops reading); frames are at most 16 KiB; at exit (drain_timeout) clients are told GOAWAY and their streams in flight
	// answered. false answers ALPN with http/1.1 only. A reload applies it to new connections.
	HTTP2 bool `toml:"http2"`
	// The streams an HTTP/2 client may have open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS),
	// 1 to 1000. More are refused (REFUSED_STREAM, counted); a client that opens and resets streams
	// faster than it lets them finish is closed whatever this is (rapid reset, CVE-2023-44487).
	HTTP2MaxStreams int `toml:"http2_max_streams"`
	// Answers every plain HTTP request with a 308 to the same URI over HTTPS (on tls_listen's port,
	// none for 443); nothing is forwarded.
	RedirectHTTPS bool `toml:"redirect_https"`
	// TLS is the loaded TLS (tls.go), nil without TLSListen.
	TLS *FrontTLS `toml:"-"`
	// Request line and header fields (and a chunked body's trailer section), in bytes, 1024 to 1048576;
	// larger gets 431. It is also the read buffer a connection holds while a request is read (pooled
	// between requests): raise it only for clients that need it.
	MaxHeaderSize int `toml:"max_header_size"`
	// A request's head (line and header fields) must arrive within this time of its first byte, else 408
	// and the connection closes (slowloris). "0s": only read_timeout.
	HeaderTimeout Duration `toml:"header_timeout"`
	// CIDRs (or addresses) of proxies in front of fairlead: their X-Forwarded-For is appended to and
	// their other X-Forwarded-* and Forwarded fields are kept. From any other client these fields are
	// removed first, so that it cannot pass for another address or scheme; X-Forwarded-For, -Proto and
	// -Host are set from the connection either way.
	TrustedProxies []string `toml:"trusted_proxies"`
	// Trusted is TrustedProxies parsed (validate.go).
	Trusted []netip.Prefix `toml:"-"`
	// CIDRs (or addresses) of L4 load balancers that speak the PROXY protocol (AWS NLB, GCP's TCP proxy,
	// Azure's Private Link service, HAProxy's send-proxy): a connection from one must start with a PROXY
	// header, version 1 (text) or 2 (binary: TCP over IPv4 or IPv6; LOCAL, the balancer's own health
	// checks, keeps the connection's address whatever family it names), within header_timeout, on listen
	// and on tls_listen (the header comes before the TLS ClientHello). Without one the connection is
	// closed, nothing forwarded (kind proxy_missing of fairlead_frontend_connection_errors_total); a
	// malformed one (a v1 line over 107 bytes, an unknown family, a v2 length past its end) or one cut
	// off is closed too (kind proxy_malformed), and one that stalls half-way past header_timeout (kind
	// timeout); none is logged as bytes. The address it carries is the client's everywhere:
	// X-Forwarded-For (trusted_proxies is asked about that client, not the sender), the sticky source
	// key, rate_per_source and max_conns_per_source (counted once the header is read), and the access
	// log. From any other address a PROXY header is never believed: it is not HTTP, 400. Connections
	// from other addresses are not read for a header. Any host in a listed range can pass for any client
	// (its X-Forwarded-For, the limits per source, the sticky source key): list only the balancers' own
	// addresses or subnets that hold nothing else, never a whole VPC; a /0 prefix is refused. (An AWS
	// NLB can instead preserve client IPs, preserve_client_ip.enabled: then no PROXY header is needed.)
	// Applies at once on a reload, to new connections.
	ProxyProtocol []string `toml:"proxy_protocol"`
	// ProxyFrom is ProxyProtocol parsed (validate.go).
	ProxyFrom []netip.Prefix `toml:"-"`
	// The largest request body (bytes, with a Content-Length) held in memory so that a failed request
	// can be replayed on another server. Larger or chunked bodies stream and are replayed only when
	// none of their bytes were read yet.
	RetryBuffer int `toml:"retry_buffer"`
}

// More certificates for tls_listen, chosen by the SNI name of the handshake: an exact DNS name, then a
// wildcard (*.example.com), else the default, which is tls_cert, or else the first entry. A [[table]]
// ends the [frontend] table: write these entries after every other [frontend] key.
type Cert struct {
	Cert string `toml:"cert"` // PEM file of the certificate, chain first
	Key  string `toml:"key"`  // PEM file of its private key
}

// The admin listener: the status page, /events, /api/status, /metrics, /healthz, the runtime actions
// and /debug/pprof (all of it in lb/admin/ADMIN.md). Keep it on loopback or a private address.
type Admin struct {
	// The address of the admin listener; "" disables it. A listener that is not on a loopback address
	// needs token_file, or user and password_file. A new address applies at a reload; turning the
	// listener on or off needs a restart.
	Listen string `toml:"listen"`
	// A file holding a bearer token (Authorization: Bearer <token>). With a token or a user configured,
	// every action (POST) needs credentials, and so does every path when the listener is not loopback;
	// wrong or missing credentials get 401 (compared in constant time). Read at start and at every
	// reload, watched; never logged.
	TokenFile string `toml:"token_file"`
	// The Basic auth user, with password_file (either credential admits).
	User string `toml:"user"`
	// A file holding user's Basic auth password; read at start and at every reload, watched; never
	// logged.
	PasswordFile string `toml:"password_file"`
}

// A set of upstream servers and how to choose among them. A reload that keeps a pool's balance changes
// its server set only: a server whose address stays keeps its health, leader role, sticky keys, tunnels,
// upstream connections and counters; a new one gets traffic after its first passing probe; a removed one
// drains. Changed check keys restart the probes with the servers' state kept; changed connection keys
// (max_conns, timeouts, nodelay, [tls]) give each server a new connection pool.
type Pool struct {
	// The selection policy. "leader": everything to the one server elected by the LeaderCheck (200 =
	// leader; replaced after fall non-200 answers). "sticky": each key (asset, session) stays on one
	// server; a new key is placed by rendezvous hashing over the available servers, so two fairleads
	// with the same config place it alike. "roundrobin": each request to the next server, in config
	// order, that is connected (passes its checks) and writable (below its watermarks), as the
	// ThingWorx connectors balance; choosing and counting are one step, so the order is exact and a
	// watermark is never overshot. A pool named only by relays defaults to "roundrobin".
	Balance string `toml:"balance"`
	// The upstream addresses (host:port), the primaries. Required, non-empty, unless [discovery] has a
	// provider: then it is the seed, used until the provider's first answer.
	Servers []string `toml:"servers"`
	// Servers that take no traffic while any primary is available. When none is, the pool's policy
	// runs over the backups (a failover, published on the event stream and counted), and traffic
	// returns to the primaries as soon as one passes its checks again (a failback); sticky keys placed
	// on a backup are placed anew at their next connection. In a leader pool a backup is elected only
	// when no primary's latest LeaderCheck answered 200, and the change back follows the leader rules:
	// a backup that leads stays until it gives fall non-200 answers, even if a primary answers 200
	// meanwhile.
	Backups []string `toml:"backups"`
	// While the backups serve, each primary is probed at least this often (needs backups).
	FailbackInterval Duration `toml:"failback_interval"`
	// At a failback, closes the tunnels on the backups, spread over failback_close_spread, so that
	// devices reconnect to the primaries; the spreading stops if the backups take over again. false: they
	// stay until they end. Needs backups; not for leader pools, whose tunnels close at every leader
	// change.
	FailbackCloseTunnels bool `toml:"failback_close_tunnels"`
	// The time over which those closes are spread, so that the devices do not all reconnect at once
	// (needs failback_close_tunnels).
	FailbackCloseSpread Duration `toml:"failback_close_spread"`
	// Display names of servers in logs, /api/status (name) and metrics (the name label), one
	// "host:port" = "name" per server or backup of the pool, unique in the pool. A server without one
	// is shown by its address. Admin actions accept either.
	Names map[string]string `toml:"names"`
	// How long a request may wait for an available server (a leader; in a roundrobin pool a connected
	// and writable one) or a free upstream connection before it gets unavailable_status. It also bounds
	// the hold of a request that is retried after a failure.
	QueueTimeout Duration `toml:"queue_timeout"`
	// The status (4xx or 5xx) of fairlead's answer when no server could take a request within
	// queue_timeout, or max_queue requests already wait; 503 carries Retry-After: 1. 500 reproduces the
	// ThingWorx connectors.
	UnavailableStatus int `toml:"unavailable_status"`
	// Roundrobin pools: a server with this many requests in flight (sent, response head not yet
	// arrived) is unwritable and skipped, not taken down; 0: no limit. Keep it at most max_conns: above
	// that, requests wait for an upstream connection instead of moving on.
	HighWatermark int `toml:"high_watermark"`
	// Roundrobin pools: a server with this many request-body bytes in flight (a request's
	// Content-Length, or a chunked body's bytes as they stream) is unwritable; 0: no limit.
	HighWatermarkBytes int64 `toml:"high_watermark_bytes"`
	// Roundrobin pools: the request header carrying a multi-part id. The first request with an id is
	// balanced as usual and pins the id to its server; later requests with the id go to that server
	// while it is connected and writable, and otherwise get 502 at once and the pin is dropped (the next
	// part is balanced anew). They are never sent elsewhere (the other servers have not seen the first
	// parts) nor retried. "": no pins.
	MultipartHeader string `toml:"multipart_header"`
	// A pin is forgotten this long after its last use, exactly (needs multipart_header).
	MultipartTTL Duration `toml:"multipart_ttl"`
	// Bound on the pins; the longest unused go first (needs multipart_header).
	MultipartMaxPins int `toml:"multipart_max_pins"`
	// Requests waiting at once in this pool; more get unavailable_status at once.
	MaxQueue int `toml:"max_queue"`
	// New tunnels (WebSocket upgrades) each server of the pool admits per second; 0: no limit. A burst
	// of one second's worth passes at once; past it an upgrade waits in the pool's queue (queue_timeout,
	// max_queue), first come first served per server, until the rate admits it. One that would wait past
	// queue_timeout, or finds max_queue full, gets unavailable_status at once, its Retry-After spread over
	// the wait it would have had (devices refused together do not come back in the same second).
	// Protects connection servers from reconnect storms (a server that died, and its devices all
	// reconnecting to the others); plain requests are not counted. Applies at once on a reload.
	NewTunnelsPerSecond int `toml:"new_tunnels_per_second"`
	// A server that becomes available — up again after it was down, added by a reload or by discovery,
	// back from maintenance or drain — gets a share of the new placements (new sticky keys, round-robin
	// turns, requests without a key) that grows linearly from nothing to its full share over this time;
	// keys already placed on it, and the leader of a leader pool, are not affected. Not applied to the
	// servers at fairlead's own start. "0s": a server takes its full share at once. Two fairleads may
	// see a server come back a moment apart: during the ramp they may place a new key differently.
	SlowStart Duration `toml:"slow_start"`
	// Upstream connections fairlead opens to each server: keep-alive connections, reused most recent
	// first and closed after 10 s unused; requests over the cap wait, first come first served, for up to
	// queue_timeout.
	MaxConns int `toml:"max_conns"`
	// Dialing a server; with [tls], its handshake too (a failed handshake is a failed dial).
	ConnectTimeout Duration `toml:"connect_timeout"`
	// The longest silence from a server while fairlead waits for or reads its response: 504 if nothing
	// came yet, unless the request is idempotent and another server takes over.
	ResponseTimeout Duration `toml:"response_timeout"`
	// Sets TCP_NODELAY on upstream connections. Off, Nagle's algorithm never delays a request written in
	// one piece (fasthttp writes a request and a body under 32 KiB in one system call), and fairlead
	// measured about 20% more small requests per second; set it for upstreams fed large streamed bodies
	// in many small writes that need each pushed at once.
	NoDelay bool `toml:"nodelay"`
	// Closes a tunnel (an upgraded connection) with no bytes either way for this long; "0s": never.
	TunnelIdleTimeout Duration `toml:"tunnel_idle_timeout"`
	// Spreads the closing of many tunnels at once (a server down, in maintenance or removed, a leader
	// change, the drain at exit) evenly over this time, so that devices do not all reconnect in the same
	// second; until its turn a tunnel to a failed server may sit on a dead connection. "0s": all at once.
	TunnelCloseSpread Duration `toml:"tunnel_close_spread"`
	// The active health check of the pool's servers.
	Check Check `toml:"check"`
	// The sticky table of balance = "sticky".
	Sticky Sticky `toml:"sticky"`
	// TLS to the pool's servers; without it, plain HTTP.
	TLS PoolTLS `toml:"tls"`
	// Service discovery: the pool's servers come from a registry instead of servers.
	Discovery Discovery `toml:"discovery"`
}

// With enabled = true fairlead speaks TLS (1.2 or 1.3) to every server of the pool: proxied requests,
// WebSocket upgrades and health checks (LeaderChecks included, on the check port if one is set). The
// handshake is part of the dial, bounded by connect_timeout: a failed one sends any request (a POST too)
// and any upgrade to another server at once. A probe whose handshake fails has failed: with a wrong CA no
// server passes its checks, /api/status shows the error as the check's last answer, and the log names the
// server and the reason once per run of such failures ("healthcheck: pool platform: 10.0.0.5:8443: TLS
// certificate verification failed: tls: failed to verify certificate: x509: certificate signed by unknown
// authority"; a server refusing fairlead's client certificate: "the server refused the TLS session:
// remote error: tls: certificate required").
//
// The files are read when the config is loaded (at start and at every reload) and watched: a missing or
// bad one (no certificate in ca_file, a key that does not match cert) is a config error naming the file
// and the key, and a reload keeps the running config; a reload after replacing one gives the pool's
// servers new upstream connections and restarts their probes, keeping their health and tunnels. Every
// key but enabled needs enabled.
//
//	[pools.platform.tls]
//	enabled = true
//	ca_file = "/etc/fairlead/platform-ca.pem"
//	server_name = "platform.internal"
type PoolTLS struct {
	// Speaks TLS to every server of the pool (and to its check port).
	Enabled bool `toml:"enabled"`
	// PEM bundle of the CAs that verify the servers' certificates; "": the system roots.
	CAFile string `toml:"ca_file"`
	// The name sent as SNI and verified in the servers' certificates; "": each server's host (an IP
	// address is verified against the certificate's IP SANs; DNS discovery finds IP:port servers, so a
	// pool with it needs server_name).
	ServerName string `toml:"server_name"`
	// Accepts any certificate: no verification at all (not with ca_file). Logged as a warning at start
	// and at each reload that keeps it.
	InsecureSkipVerify bool `toml:"insecure_skip_verify"`
	// PEM file of a client certificate (chain first), presented to servers that ask for one (mutual
	// TLS); goes with key.
	Cert string `toml:"cert"`
	// PEM file of the client certificate's private key; goes with cert.
	Key string `toml:"key"`

	// Client is the TLS config built from the keys and files at load (nil when Enabled is false);
	// sum identifies the files' contents (loadPoolTLS, validate.go).
	Client *tls.Config `toml:"-"`
	sum    string
}

// Where the sticky key comes from and how long it is kept. A known key whose server is available goes
// there; a new key, or one whose server is not available, is placed by rendezvous (highest random
// weight) hashing over the available servers' addresses, so losing a server moves only its own keys and
// two fairleads with the same config place alike without sharing state. When a server goes down or
// leaves the pool its tunnels close and its devices reconnect elsewhere; when it comes back, keys placed
// meanwhile stay where they are until they go idle.
type Sticky struct {
	// The sources of the key, tried in order; the first present wins: "header:NAME", "query:NAME",
	// "cookie:NAME", "source" (the client's IP address).
	Keys []string `toml:"keys"`
	// A cookie fairlead sets (on the 101 of a WebSocket, or on an HTTP answer) naming the chosen server
	// (a hash of its address), so that cookie-keeping clients stick by it; keys must list
	// "cookie:<cookie>". "": no cookie.
	Cookie string `toml:"cookie"`
	// Forgets a key with no open tunnel (and no request) for this long.
	IdleTimeout Duration `toml:"idle_timeout"`
	// Bound on the table (sharded); the longest-idle keys go first.
	MaxEntries int `toml:"max_entries"`
}

// The active probe of every server of the pool. Defaults differ between leader pools (the ThingWorx
// LeaderCheck) and other pools (a rise/fall health check). A leader pool's checks elect the leader (the
// README's "The leader"); another pool's take a server down after fall failures in a row — failed probes,
// or live requests whose connection was refused, reset or timed out — and close its tunnels. Fewer live
// failures only retry the client on another server and probe the failing one at once. A reload that
// changes these keys restarts the probes with the servers' state kept. Servers a reload adds are probed at
// once and can be elected by the same rules; a leader a reload removes is replaced at once by the server
// with the longest run of 200s.
type Check struct {
	// The path probed with GET. Leader pools: 200 is a leader answer, anything else (other codes, a
	// timeout, a refusal) is not. Other pools: 2xx and 3xx pass; "" means no active probe (a server is
	// taken down after fall live failures in a row and tried again after interval), except in a pool
	// named by relays only, whose "" probes by opening a connection (accepted passes).
	Path string `toml:"path"`
	// The port probes go to instead of each server's own (connection servers may answer health checks on
	// a port of their own); 0: the server's port.
	Port int `toml:"port"`
	// Base64 of "user:password", sent as "Authorization: Basic <credentials>", as ThingWorx's
	// LoadBalancerBase64EncodedCredentials. "": no Authorization field. Never logged. Not with
	// credentials_file.
	Credentials string `toml:"credentials"`
	// A file holding the credentials instead, so that the password is in no *.toml file: the same
	// value as credentials (base64 of "user:password", the LoadBalancerBase64EncodedCredentials of
	// ThingWorx's platform-settings.json, not the plain "user:password"), on one line; surrounding white
	// space is ignored. Read at start and at every reload, and watched like the *.toml files: rewriting
	// only this file applies the new credentials (the probes restart, the servers' state kept). "": none.
	// Not with credentials. Never logged.
	CredentialsFile string `toml:"credentials_file"`
	// Lower bound of the random wait between two probes of one server in steady state.
	Interval Duration `toml:"interval"`
	// Upper bound of that wait (the default is interval × 4/3).
	IntervalMax Duration `toml:"interval_max"`
	// The probe period of every server of a leader pool while the leader fails or is unknown or another
	// server answers 200 (a few extra LeaderChecks per failover: a step-down moves traffic within about
	// 1 s of the first LeaderCheck that sees it), and of a server of another pool while it is down or
	// changing state (a down primary of a pool with backups: at most failback_interval). In a leader
	// pool a live failure (refused, reset, timed out, a 503) probes every server at once; such triggers
	// closer together than fast_interval/4 (at least 50 ms, at most 500 ms) are merged.
	FastInterval Duration `toml:"fast_interval"`
	// Bounds one probe; a probe that times out counts as a failure (for a LeaderCheck, a non-200
	// answer).
	Timeout Duration `toml:"timeout"`
	// Leader pools: consecutive non-200 answers after which the leader is replaced. Other pools:
	// failures in a row (failed probes, or live requests refused, reset or timed out) that take a server
	// down.
	Fall int `toml:"fall"`
	// Consecutive passes that bring a down server back (not for leader pools, where the 200 answer
	// itself decides).
	Rise int `toml:"rise"`
}

// Routes are tried in order; the first that matches names the pool. A request matches a route when its
// host matches one of hosts (a route without hosts matches every host), its path starts with one of
// paths, as a string ("/a" matches "/a/b" and "/ab"; a route without paths matches every path), and a
// websocket = true route only when the request is a WebSocket upgrade. Relay routes ([relays.NAME]) are
// matched before every [[routes]] entry.
//
// Hosts. The request's host is its Host header (HTTP/2: :authority; a request in absolute form: the
// target's authority) without its port and without one trailing dot, compared without case. A pattern
// is a host name ("twx.example.com"), an IPv4 address, a bracketed IPv6 address ("[2001:db8::1]"), or
// "*." and a name, whose * stands for exactly one label, as in certificates: "*.example.org" matches
// "a.example.org" but neither "example.org" nor "a.b.example.org". A request whose host matches no route
// gets 404, as one whose path matches none; an HTTP/1.0 request without Host matches only routes without
// hosts. -check refuses a pattern that is empty, has a port, a * other
// than as the whole first label, an empty label or a character not allowed in a host name (letters,
// digits, "-" and "."), naming its file and key (routes.N.hosts.M).
//
//	[[routes]]
//	pool = "platform-test"
//	hosts = ["twx-test.example.com", "*.test.example.org"]
//
// A route that the routes before it shadow completely could never match — a websocket = true route
// after a catch-all would silently send devices to the platform — so it is a config error naming the
// route and the routes that take its requests, each with its file:
//
//	conf.d/30-cx.toml: routes.1: never matches (paths "/Thingworx/WS", websocket only): routes.0 (every path, in conf.d/20-platform.toml) comes before it and matches every request it could; put routes.1 first or narrow the paths of routes.0
//
// The rule: route B is shadowed when each of its prefixes ("/" without paths), for each of its host
// patterns (every host without hosts), starts with a prefix of some earlier route A that takes every
// kind of request B takes (A is not websocket = true, or B is too) on that host pattern (A has no hosts,
// or one of its patterns is B's, or is "*.x" where B's is a name of one label more under x or "*.x"
// itself); different prefixes and hosts of B may be covered by different earlier routes. A partial overlap is
// allowed. Put specific routes before the catch-all, as conf.d does. A generic relay never shadows a
// route: its path template matches paths of a fixed number of segments only, so longer paths under the
// route's prefix still reach the route. An App Configuration relay takes every path under /apprapp/ on
// its hosts, before any route: a route it always takes is refused the same way, naming the relay.
type Route struct {
	// The pool that serves matching requests. Required.
	Pool string `toml:"pool"`
	// Host patterns ("twx.example.com", "*.example.org": see above); none matches every host.
	Hosts []string `toml:"hosts"`
	// Path prefixes; none matches every path.
	Paths []string `toml:"paths"`
	// Matches only WebSocket upgrades (Upgrade: websocket), so that ordinary requests never reach the
	// pool. An upgrade is tunnelled only on such a route and with a valid opening handshake (GET, a
	// Sec-WebSocket-Key of 16 bytes in base64, Sec-WebSocket-Version: 13; else 400); on any other route
	// it is forwarded as an ordinary request (Upgrade and Connection removed) and its connection closes
	// after the answer.
	WebSocket bool `toml:"websocket"`
	// The route's single-point auth ([routes.auth] after this [[routes]] entry): clients present a key
	// fairlead defines, fairlead removes it and injects the upstream credential that only it holds, so
	// that devices never hold the platform's application key. Without it no key is asked.
	Auth *RouteAuth `toml:"auth"`
}

// The route is found first, then the key is checked, before anything is forwarded or dialled (WebSocket
// upgrades included). The presented key is hashed (SHA-256) and compared with every key's hash in
// constant time, with no early exit; only the hashes are kept. A missing or wrong key gets 401 (a short
// body; WWW-Authenticate: Bearer realm="fairlead" when header is Authorization), nothing reaches a server,
// and it is counted in fairlead_route_unauthorized_total and, with access_log, logged with its route and
// pool. An admitted request has the key's header removed and upstream_header set to the contents of
// upstream_value_file (replacing any the client sent), and goes on as any other.
//
// Both files are read when the config is loaded (-check, start, every reload) and watched, and their
// contents count in the config digest, so editing a keys file applies it; a missing or empty file is a
// config error naming the file and the key. Their contents never appear in logs, errors, /api/status,
// /events or answers.
//
//	[[routes]]
//	pool = "platform"
//	paths = ["/Thingworx/Things"]
//	[routes.auth]
//	keys_file = "/etc/fairlead/client-keys"
//	header = "appKey"
//	upstream_header = "appKey"
//	upstream_value_file = "/etc/fairlead/platform-appkey"
type RouteAuth struct {
	// The file of client keys, one per line; blank lines and lines starting with # are ignored. Required,
	// with at least one key.
	KeysFile string `toml:"keys_file"`
	// The request header carrying the client's key. "Authorization" means "Authorization: Bearer
	// <key>"; any other header (such as "appKey", as ThingWorx devices send it) carries the key as its
	// whole value.
	Header string `toml:"header"`
	// The header set on every admitted request, replacing any the client sent, to the contents of
	// upstream_value_file; goes with it. "": nothing injected.
	UpstreamHeader string `toml:"upstream_header"`
	// The file holding upstream_header's value (trimmed), such as the platform's application key; goes
	// with upstream_header.
	UpstreamValueFile string `toml:"upstream_value_file"`
}

// A relay route serves configuration snapshots and their changes to many SDK clients from one upstream
// WebSocket per topic and a cache of each topic's latest snapshot, however many clients there are.
//
// Topics. path = "/relay/{collection}/{environment}" maps /relay/inventory/dev to the topic
// "inventory/dev"; each {name} is one path segment of [A-Za-z0-9._-] (not . or ..), and a path that does
// not match goes on to [[routes]]. Listed topics are always accepted; with on_demand another topic is
// fetched at its first request (the upstream's 404 is the client's 404; no answer is 503) and joins the
// relay, up to max_topics.
//
// Clients. GET (or HEAD) is the cached snapshot: 200 application/json, ETag: "<version>", Cache-Control:
// no-cache, and 304 for a matching If-None-Match — never a fetch per request. With Accept:
// text/event-stream it is an SSE stream: the current snapshot first (not resent if Last-Event-ID is
// already its version), then every new one as id: <version>, event: snapshot, data: <body>, and keep-alive
// comments every keepalive. A WebSocket upgrade (terminated by fairlead) receives every upstream change
// message exactly as sent, and pings every keepalive. Other methods get 405. Until a topic's first
// snapshot arrives, requests wait up to wait_timeout, then get 503 with Retry-After: 1.
//
// Upstream. One events WebSocket per active topic, to a server of the pool (see pool); each message is
// relayed to the WebSocket subscribers and triggers one snapshot fetch; changes that arrive during a fetch
// are coalesced into one more, so a burst costs at most two fetches. Every (re)connection fetches again,
// so nothing missed while disconnected is lost: SSE subscribers get the new snapshot, and WebSocket
// subscribers, whose missed change messages cannot be replayed, are closed with 1012 "resync" (their
// clients reconnect and fetch). A session that ends (the upstream drops it, or answers no ping for 2 ×
// keepalive + connect_timeout) reconnects, with backoff (250 ms doubling to 10 s) while it keeps failing.
// Versions come from the body's "version" field, else the ETag's number, else a local counter; only newer
// versions are published.
//
// Slow subscribers. Fan-out never blocks: each subscriber has a queue of subscriber_buffer messages
// written by its own connection; one that falls further behind is dropped (SSE: "event: dropped", then
// the stream ends and the client reconnects with Last-Event-ID; WebSocket: close 1013 "slow consumer"), and
// so is one whose socket takes nothing for write_timeout (over HTTP/2: whose flow-control window stays shut
// for it; the stream is reset). An SSE stream over HTTP/1.1 does not read its client: a client that went
// away is noticed at the next write (an event or the keep-alive comment); over HTTP/2 a stream the client
// resets, or whose connection closes, ends at once.
//
// Reloads. A relay whose keys, pool servers, TLS, timeouts and upstream headers are unchanged keeps
// running across a reload: sessions, cache and subscribers stay (its auth keys apply at once). A changed
// relay is rebuilt: its streams end (SSE ends, WebSockets close 1001) and clients reconnect. A reload that
// adds or changes a relay with start = "normal" fetches its listed topics first and, failing, keeps the
// running config.
//
//	[pools.appconfig]
//	servers = ["10.0.0.21:8443"]
//	backups = ["10.0.0.22:8443"]
//	[pools.appconfig.tls]
//	enabled = true
//
//	[relays.appconfig]
//	pool = "appconfig"
//	path = "/relay/{collection}/{environment}"
//	snapshot = "/config/{collection}/{environment}"
//	events = "/events/{collection}/{environment}"
//	topics = ["inventory/dev", "inventory/prod"]
//	upstream_headers_file = "/etc/fairlead/appconfig-upstream.headers"
//	start = "fast"
//	seed_file = "/var/lib/fairlead/appconfig-seed.json"
//	seed_file_write = true
//	[relays.appconfig.auth]
//	keys_file = "/etc/fairlead/appconfig-client-keys"
type Relay struct {
	// The pool of upstream servers, the one judge of their health. Fetches and sessions go to one server
	// at a time, its first available one (its servers in order, its backups only while no primary can
	// take them), and move when that choice changes: the pool's checks and the relay's failures (refused
	// or timed-out dials, dropped sessions) take a server down, and the failover and the failback are the
	// pool's, published and counted like any pool's. Its tls, connect_timeout (dial and handshake),
	// response_timeout (a fetch), failback_interval and [check] apply. Not a leader pool nor one with
	// discovery; a pool named by relays only defaults to balance = "roundrobin", and the keys only
	// proxied requests use (such as queue_timeout, max_conns, the watermarks, multipart_* and tunnel_*)
	// are refused on it. Required.
	Pool string `toml:"pool"`
	// What the relay speaks to its clients and its upstream. "generic": the paths of path, snapshot and
	// events below; every message of a topic's events WebSocket signals a change; SSE events are named
	// "snapshot". "appconfiguration": IBM Cloud App Configuration, so that its official SDKs work through
	// the relay unmodified, pointed at fairlead (overrideServiceUrl): the SDKs' REST configuration
	// fetches (GET /apprapp/feature/v1/instances/{guid}/config?action=sdkConfig&collection_id=&environment_id=,
	// and the older …/collections/{c}/config?environment_id=), their wsfeature WebSocket
	// (/apprapp/wsfeature?instance_id=&collection_id=&environment_id=: "test message" every keepalive and
	// a change frame after each new configuration is cached) and the client SDKs' SSE
	// (…/environments/{e}/sse/subscribe?collection_id=: event Registration at connect, SSEConfig_payload
	// after each change) are answered from the cache; their usage and analytics POSTs are forwarded to
	// the instance in use with the relay's IAM token. A topic is "collection/environment". path,
	// snapshot and events are implied (giving them is an error); guid and apikey_file are required. A
	// client SDK whose stream is answered anything but 200 never tries again: a listed topic's stream
	// opens even before its first configuration (sent as Registration when it comes), and
	// max_subscribers should leave room for every device.
	Protocol string `toml:"protocol"`
	// The client-facing path template: "/"-separated literal and {name} segments, at least one {name}.
	// A topic is the values joined with "/". Required with protocol = "generic".
	Path string `toml:"path"`
	// Host patterns, as a [[routes]] entry's hosts: the relay answers only requests whose host matches
	// one of them (a request on another host goes on to [[routes]]). None: every host.
	//
	// Two relays may take the same paths only on hosts that never meet, such as a test and a
	// production cluster behind one ingress (test.example.com and prod.example.com, each its relay on
	// path "/relay/{collection}/{environment}"): relays have no order, so when a request could go to
	// either (paths of as many segments with, at each, the same literal or a {name}, on hosts of which
	// one matches both: both without hosts, one without, the same name in any case, or "*.example.com"
	// and "a.example.com"), the later relay by name is a config error naming both by file and key and a
	// request both take. An App Configuration relay takes every path under /apprapp/ (404 for an
	// instance or path it does not serve): two of them, even of other instances, need such hosts too.
	Hosts []string `toml:"hosts"`
	// The upstream path of a topic's snapshot (GET), using only path's names. Required with protocol =
	// "generic".
	Snapshot string `toml:"snapshot"`
	// The upstream path of a topic's events WebSocket, whose every message signals a change, using only
	// path's names. Required with protocol = "generic".
	Events string `toml:"events"`
	// protocol = "appconfiguration": the App Configuration instance (its GUID) the SDKs name and the
	// relay's upstream serves; a request naming another gets 404. Required with that protocol.
	GUID string `toml:"guid"`
	// protocol = "appconfiguration": the instance GUID of a server of the pool whose instance is not
	// guid (a backup instance in another region), by server address: "eu-gb.apprapp.cloud.ibm.com:443"
	// = "9z8y…". The upstream requests to that server name its GUID; the SDKs keep naming guid.
	GUIDs map[string]string `toml:"guids"`
	// protocol = "appconfiguration": a file holding the IBM Cloud API key (one line), exchanged at
	// iam_url for IAM access tokens, which the relay sends upstream as "Authorization: Bearer …" and
	// renews before they expire and after a 401. The key and the tokens are never logged nor shown; the
	// SDKs hold only the keys of [relays.NAME.auth]. Read at load and at every reload. Required with that
	// protocol.
	APIKeyFile string `toml:"apikey_file"`
	// protocol = "appconfiguration": the IAM service: POST {iam_url}/identity/token exchanges the API key
	// for a token.
	IAMURL string `toml:"iam_url"`
	// Topics (path's values joined by "/", such as "inventory/dev"; with protocol = "appconfiguration",
	// "collection/environment") fetched at start and always accepted.
	Topics []string `toml:"topics"`
	// Accepts topics not listed: the first request fetches the snapshot and opens the topic's session.
	// false answers 404 for them and fetches nothing.
	OnDemand *bool `toml:"on_demand"`
	// Topics held at once, listed and on demand (at least the listed ones); a request for one more
	// on-demand topic gets 503.
	MaxTopics int `toml:"max_topics"`
	// "normal": every listed topic is fetched (and its session opened) before the front end opens; a
	// failure stops fairlead (exit 1) naming the relay and the topic. "fast": seed_file fills the cache
	// and the front end opens at once; fresh snapshots replace the seed in the background (the first
	// fetched one whatever the versions; identical content is not pushed again) and are pushed. A missing
	// or corrupt seed file is logged and requests wait for the first fetches.
	Start string `toml:"start"`
	// The JSON file of snapshots a fast start serves first (needed by start = "fast" and by
	// seed_file_write): {"relay", "written", "topics": {"inventory/dev": {"version": 7, "etag": "\"7\"",
	// "json": {...}}}} ("body": "..." instead of "json" for a body that is not compact JSON).
	SeedFile string `toml:"seed_file"`
	// fairlead writes seed_file itself from its latest snapshots, atomically, within 2 s of a new
	// snapshot and at exit.
	SeedFileWrite bool `toml:"seed_file_write"`
	// A file of headers sent on every upstream fetch and events upgrade, one "Name: value" per line
	// (blank lines and # comments ignored): typically the upstream API key, which clients never see.
	// Read at load and at every reload; never logged.
	UpstreamHeadersFile string `toml:"upstream_headers_file"`
	// SSE and WebSocket subscribers of the relay at once (every topic); one more gets 503 with
	// Retry-After: 1. Relay streams leave the HTTP server once they start, so [frontend] max_conns does
	// not count them.
	MaxSubscribers int `toml:"max_subscribers"`
	// Messages that may wait for one subscriber; one that falls further behind is dropped, never
	// slowing the others.
	SubscriberBuffer int `toml:"subscriber_buffer"`
	// Closes the upstream session of a topic with no subscriber and no GET for this long; an on-demand
	// topic is then forgotten, a listed one keeps its snapshot and is fetched again at its next request.
	TopicIdleTimeout Duration `toml:"topic_idle_timeout"`
	// The interval of SSE keep-alive comments and WebSocket pings on idle streams, and of the pings on
	// the upstream sessions (one silent for 2 × keepalive + the pool's connect_timeout is dialled again).
	KeepAlive Duration `toml:"keepalive"`
	// Drops a streaming subscriber whose socket accepts nothing for this long.
	WriteTimeout Duration `toml:"write_timeout"`
	// How long a request waits for a topic's first snapshot (an on-demand topic, a fast start without
	// seed); then 503 with Retry-After: 1.
	WaitTimeout Duration `toml:"wait_timeout"`
	// The relay's single-point auth ([relays.NAME.auth]), the keys of [routes.auth]: a request without
	// one of keys_file's keys gets 401 and touches nothing; upstream_header and upstream_value_file add
	// one more upstream header, as upstream_headers_file does. With protocol = "appconfiguration" the key
	// is the one the SDKs are given as their API key: it comes in Authorization, raw (the client SDKs) or
	// as "Bearer <key>", and header can only be Authorization.
	Auth *RouteAuth `toml:"auth"`
}

// Duration is a TOML string in Go syntax ("250ms", "15s"). A bad value is kept and reported by
// validation with the file and key, so that every error of a config is listed at once.
type Duration struct {
	D   time.Duration
	raw string
	err error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (d *Duration) UnmarshalText(b []byte) error {
	d.raw = string(b)
	d.D, d.err = time.ParseDuration(d.raw)
	if d.err == nil && d.D < 0 {
		d.err = errors.New("must not be negative")
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.D.String()), nil }

// Error lists every problem found in a configuration. Each line names the file and the key.
type Error struct{ Problems []string }

func (e *Error) Error() string { return strings.Join(e.Problems, "\n") }

// Load reads path (a directory whose *.toml files are merged in lexical order, or one file),
// applies defaults and validates the result. The error is a *Error listing every problem.
func Load(path string) (*Config, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, &Error{Problems: []string{err.Error()}}
	}
	c := &Config{Files: files, origin: map[string]string{}}
	var problems []string
	for _, f := range files {
		problems = append(problems, c.mergeFile(f)...)
	}
	c.applyDefaults()
	if problems = append(problems, c.validate()...); len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return c, nil
}

// SecretFiles returns the files a config read besides its *.toml files, in the order it read them: every
// file a key names (certificates, keys and client CAs, token and password files, keys files, upstream
// value and header files, a relay's API key, discovery passwords), as readFile read them. A change to
// one of them is a config change (the command watches them).
func (c *Config) SecretFiles() []string { return slices.Clone(c.filesRead) }

// PoolNames lists the pools for display: leader pools first, then the others, each group in the
// order of PoolOrder (the config files' order); pools PoolOrder does not name follow, by name.
func (c *Config) PoolNames() []string {
	names := make([]string, 0, len(c.Pools))
	for _, n := range c.PoolOrder {
		if _, ok := c.Pools[n]; ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	rest := len(names)
	for n := range c.Pools {
		if !slices.Contains(names[:rest], n) {
			names = append(names, n)
		}
	}
	slices.Sort(names[rest:])
	slices.SortStableFunc(names, func(a, b string) int {
		la, lb := c.Pools[a].Balance == "leader", c.Pools[b].Balance == "leader"
		switch {
		case la && !lb:
			return -1
		case lb && !la:
			return 1
		}
		return 0
	})
	return names
}
