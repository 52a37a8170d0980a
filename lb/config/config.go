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
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Config is the whole configuration as the operator wrote it, merged from every file of conf.d and with
// defaults applied. A loaded Config is never modified: a reload builds a new one.
//
// Every key is documented here with its default; conf.d/ shows each of them commented.
type Config struct {
	Global   Global           `toml:"global"`
	Frontend Frontend         `toml:"frontend"`
	Admin    Admin            `toml:"admin"`
	Pools    map[string]*Pool `toml:"pools"`
	Routes   []Route          `toml:"routes"`
	// Relays are relay routes (run by lb): a path template whose topics fairlead serves itself from
	// one upstream session per topic, cached snapshots and fan-out to WebSocket and SSE subscribers.
	Relays map[string]*Relay `toml:"relays"`

	// Files are the files the config was read from, in the order they were merged.
	Files []string `toml:"-"`
	// origin maps a dotted key ("pools.platform.check.interval", "routes.2.pool") to the file that set it.
	origin map[string]string
	// Digest identifies the bytes of every file read, so that a reload of unchanged files is skipped.
	Digest string `toml:"-"`
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

// Global is the [global] table: process-wide settings.
type Global struct {
	// StateFile, if set, is where fairlead persists each pool's leader, server health and sticky table,
	// written atomically (temp file + rename) at most every few seconds and at exit. Default "" (none).
	StateFile string `toml:"state_file"`
	// StateMaxAge: a state file older than this is stale and ignored at a fast start. Default "1h".
	StateMaxAge Duration `toml:"state_max_age"`
	// Start is "normal" (wait for the first round of probes before serving) or "fast" (load StateFile
	// and serve at once with the remembered leaders and sticky placements while probes confirm in the
	// background; a missing, stale or corrupt state file falls back to a normal start). Default "normal".
	Start string `toml:"start"`
	// LogFormat is "text" or "json" (log/slog). Default "text".
	LogFormat string `toml:"log_format"`
	// LogLevel is the least level logged: "debug", "info", "warn" or "error". "debug" adds the
	// rate-limited lines of client connection errors (lb). A reload applies it at once.
	// Default "info".
	LogLevel string `toml:"log_level"`
	// AccessLog writes one line per request and per tunnel close (route, pool, server, status,
	// duration, bytes, retries). Default false.
	AccessLog bool `toml:"access_log"`
}

// Frontend is the [frontend] table: where clients connect.
type Frontend struct {
	// Listen is the TCP address of the client-facing HTTP listener. Default "127.0.0.1:8080".
	Listen string `toml:"listen"`
	// ReadTimeout bounds reading one request's headers (and a non-streamed body). Default "30s".
	ReadTimeout Duration `toml:"read_timeout"`
	// IdleTimeout closes a client keep-alive connection idle this long between requests. Default "60s".
	IdleTimeout Duration `toml:"idle_timeout"`
	// MaxConns caps concurrent client connections; over it new connections are refused. Default 20000.
	MaxConns int `toml:"max_conns"`
	// MaxBodySize caps a request body in bytes; bigger bodies get 413. 0 means no limit. Default 0.
	MaxBodySize int64 `toml:"max_body_size"`
	// DrainTimeout bounds the wait for in-flight requests at SIGTERM: fairlead stops accepting, lets
	// them finish for up to this long, then closes the tunnels and exits 0. Default "10s".
	DrainTimeout Duration `toml:"drain_timeout"`
	// TLSListen is the address of the HTTPS listener, beside Listen (which may then be "" to serve HTTPS
	// only). It needs a certificate: TLSCert and TLSKey, or Certs. Default "" (no HTTPS).
	TLSListen string `toml:"tls_listen"`
	// TLSCert and TLSKey are PEM files of the default certificate (chain first) and its key.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// Certs are more certificates, chosen by the SNI name of the handshake (exact DNS name, then a
	// wildcard); the first certificate (TLSCert, else Certs[0]) is the default.
	Certs []Cert `toml:"certs"`
	// ClientCA is a PEM file of the CAs that sign client certificates; ClientAuth is "require" (a
	// client without a valid certificate fails the handshake) or "verify_if_given". Default none.
	ClientCA   string `toml:"client_ca"`
	ClientAuth string `toml:"client_auth"`
	// RedirectHTTPS answers every plain HTTP request with a 308 to the same URI over HTTPS (on
	// TLSListen's port). Default false.
	RedirectHTTPS bool `toml:"redirect_https"`
	// TLS is the loaded TLS (tls.go), nil without TLSListen.
	TLS *FrontTLS `toml:"-"`
	// MaxHeaderSize caps a request's line and header fields (and a chunked body's trailer section), in
	// bytes; larger gets 431. Default 8192.
	MaxHeaderSize int `toml:"max_header_size"`
	// HeaderTimeout bounds receiving a request's head from its first byte; a slower head (slowloris)
	// gets 408 and the connection closes. Default "10s".
	HeaderTimeout Duration `toml:"header_timeout"`
	// TrustedProxies are the CIDRs of proxies in front of fairlead whose X-Forwarded-For is appended to
	// and whose X-Forwarded-Proto, X-Forwarded-Host and other X-Forwarded-* and Forwarded headers are
	// kept; from any other client they are removed and replaced. Default none.
	TrustedProxies []string `toml:"trusted_proxies"`
	// Trusted is TrustedProxies parsed (validate.go).
	Trusted []netip.Prefix `toml:"-"`
	// RetryBuffer is the largest request body (bytes, with a Content-Length) held in memory so that a failed
	// request can be replayed on the new leader. Larger or chunked bodies stream and are retried only when
	// none of their bytes were read. Default 65536.
	RetryBuffer int `toml:"retry_buffer"`
}

// Cert is a [[frontend.certs]] entry: a PEM certificate (chain first) and its key.
type Cert struct {
	Cert string `toml:"cert"` // PEM file of the certificate, chain first
	Key  string `toml:"key"`  // PEM file of its private key
}

// Admin is the [admin] table: status and metrics endpoints.
type Admin struct {
	// Listen is the address of the admin HTTP listener (/status, /metrics, /healthz). "" disables it.
	// Default "127.0.0.1:8404".
	Listen string `toml:"listen"`
	// TokenFile holds a bearer token ("Authorization: Bearer <token>"); User and PasswordFile a Basic
	// user and password. Either admits: they are required for admin actions (POST), and for every admin
	// path when Listen is not a loopback address (such a listener needs one of them). Default none.
	TokenFile    string `toml:"token_file"`
	User         string `toml:"user"`
	PasswordFile string `toml:"password_file"`
}

// Pool is one [pools.NAME] table: a set of upstream servers and how to choose among them.
type Pool struct {
	// Balance is the selection policy: "leader" sends everything to the one server that answers the
	// leader check with 200; "sticky" keeps each key (asset, session) on one server, placing new keys by
	// rendezvous hashing over the healthy servers; "roundrobin" sends each request to the next server,
	// in config order, that is connected (passes its checks) and writable (below its watermarks), as the
	// ThingWorx connectors do. Default "leader".
	Balance string `toml:"balance"`
	// Servers are the upstream addresses (host:port), the primaries. Required, non-empty.
	Servers []string `toml:"servers"`
	// Backups are servers that take no traffic while any primary is usable (passes its checks). When
	// none is, the balance runs over the backups, and traffic returns to the primaries as soon as one
	// passes its checks again. In a leader pool a backup is elected only when no primary answers 200,
	// and the change back follows the leader rules: a backup that leads stays until it gives fall
	// non-200 answers, even if a primary answers 200 meanwhile. Default none.
	Backups []string `toml:"backups"`
	// FailbackInterval bounds the wait between two probes of a primary while traffic is on backups
	// (needs backups). Default "15s".
	FailbackInterval Duration `toml:"failback_interval"`
	// FailbackCloseTunnels closes the tunnels on backups once a primary is usable again, spread over
	// FailbackCloseSpread, so that devices reconnect to the primaries (needs backups; not for leader
	// pools, whose tunnels close whenever the leader changes). Default false: they stay until they end.
	FailbackCloseTunnels bool `toml:"failback_close_tunnels"`
	// FailbackCloseSpread is the time over which those closes are spread, so that the devices do not
	// all reconnect at once (needs failback_close_tunnels). Default "5s".
	FailbackCloseSpread Duration `toml:"failback_close_spread"`
	// Names are display names of servers for logs, /status and metrics: address → name. Default: the
	// address.
	Names map[string]string `toml:"names"`
	// QueueTimeout is how long a request may wait for a usable server (a leader; in a roundrobin pool a
	// connected and writable one) or a free upstream connection before it gets UnavailableStatus.
	// Default "5s".
	QueueTimeout Duration `toml:"queue_timeout"`
	// UnavailableStatus is the status of the answer when no server could take a request within
	// QueueTimeout (503 carries Retry-After: 1). 500 reproduces the ThingWorx connectors. Default 503.
	UnavailableStatus int `toml:"unavailable_status"`
	// HighWatermark makes a server of a roundrobin pool unwritable (skipped) while this many requests
	// to it are in flight (sent, response head not yet arrived). Default 0: no limit.
	HighWatermark int `toml:"high_watermark"`
	// HighWatermarkBytes makes a server of a roundrobin pool unwritable while the request-body bytes
	// in flight to it reach this many (a request's Content-Length, or a chunked body's bytes as they
	// stream). Default 0: no limit.
	HighWatermarkBytes int64 `toml:"high_watermark_bytes"`
	// MultipartHeader names the request header carrying a multi-part id (roundrobin pools): the first
	// request with an id is balanced as usual and pins the id to its server; later requests with the
	// id go to that server while it is connected and writable, and otherwise fail with 502 (the pin is
	// dropped). They are never retried elsewhere. Default "" (no pins).
	MultipartHeader string `toml:"multipart_header"`
	// MultipartTTL forgets a pin this long after its last use (needs multipart_header). Default "5m".
	MultipartTTL Duration `toml:"multipart_ttl"`
	// MultipartMaxPins bounds the pins; the longest-unused go first (needs multipart_header).
	// Default 100000.
	MultipartMaxPins int `toml:"multipart_max_pins"`
	// MaxQueue caps the requests waiting at once in this pool; over it requests get UnavailableStatus at once. Default 10000.
	MaxQueue int `toml:"max_queue"`
	// MaxConns caps the upstream connections fairlead opens to each server. Default 512.
	MaxConns int `toml:"max_conns"`
	// ConnectTimeout bounds dialing a server. Default "3s".
	ConnectTimeout Duration `toml:"connect_timeout"`
	// ResponseTimeout bounds waiting for a server's response headers; past it the client gets 504.
	// Default "60s".
	ResponseTimeout Duration `toml:"response_timeout"`
	// NoDelay sets TCP_NODELAY on upstream connections. Default false: Nagle's algorithm stays on, which
	// never delays a request written in one piece (fasthttp writes a request and a body under 32 KiB in
	// one system call) and measured ~20% more small requests per second through fairlead; set it for
	// upstreams that receive large streamed bodies in many small writes and need each pushed at once.
	NoDelay bool `toml:"nodelay"`
	// TunnelIdleTimeout closes an upgraded connection (WebSocket tunnel) with no bytes either way for
	// this long; "0s" never does. Default "10m".
	TunnelIdleTimeout Duration `toml:"tunnel_idle_timeout"`
	// TunnelCloseSpread spreads the closing of many tunnels at once (a server down, in maintenance or
	// removed, a leader change, a drain at exit) evenly over this time, so that devices do not all
	// reconnect in the same second; until its turn a tunnel to a failed server may stay open on a dead
	// connection. Default "0s": all at once.
	TunnelCloseSpread Duration `toml:"tunnel_close_spread"`
	// Check is the active health check.
	Check Check `toml:"check"`
	// Sticky configures balance = "sticky".
	Sticky Sticky `toml:"sticky"`
	// TLS makes fairlead speak TLS to the pool's servers: proxied requests, WebSocket upgrades and
	// health checks. Default off (plain HTTP).
	TLS PoolTLS `toml:"tls"`
	// Discovery, with a provider, takes the pool's servers from a registry (discovery.go); Servers is
	// then an optional seed used until its first answer.
	Discovery Discovery `toml:"discovery"`
}

// PoolTLS is a [pools.NAME.tls] table: TLS to the servers of a pool (issue #11). The files are
// read and parsed when the config is loaded (at start and at every reload), so a bad one is a config
// error and a reload keeps the running config; their contents count in the config digest, so a
// reload after replacing one applies it. Every key but Enabled needs Enabled.
type PoolTLS struct {
	// Enabled speaks TLS to every server of the pool (and to its check port). Default false.
	Enabled bool `toml:"enabled"`
	// CAFile is a PEM bundle of the CA certificates that verify the servers' certificates.
	// Default "": the system roots.
	CAFile string `toml:"ca_file"`
	// ServerName is sent as SNI and is the name the servers' certificates are verified against.
	// Default "": each server's host (an IP address is verified against the certificate's IP SANs).
	ServerName string `toml:"server_name"`
	// InsecureSkipVerify accepts any certificate: no verification at all (not with CAFile). Logged as a
	// warning at start and at each reload that keeps it. Default false.
	InsecureSkipVerify bool `toml:"insecure_skip_verify"`
	// Cert and Key are the PEM files of a client certificate and its key, presented to servers that
	// ask for one (mutual TLS). The two go together. Default none.
	Cert string `toml:"cert"`
	Key  string `toml:"key"`

	// Client is the TLS config built from the keys and files at load (nil when Enabled is false);
	// sum identifies the files' contents (loadPoolTLS, validate.go).
	Client *tls.Config `toml:"-"`
	sum    string
}

// Sticky is a [pools.NAME.sticky] table.
type Sticky struct {
	// Keys are the sources of the stickiness key, tried in order; the first one present wins:
	// "header:NAME", "query:NAME", "cookie:NAME", "source" (client IP). Default ["source"].
	Keys []string `toml:"keys"`
	// Cookie, if set, is a cookie fairlead sets (on the 101 of a WebSocket, or on an HTTP response) naming
	// the chosen server, so that cookie-keeping clients stick by it; Keys must list "cookie:<Cookie>".
	// Default "" (no cookie).
	Cookie string `toml:"cookie"`
	// IdleTimeout forgets a key with no open tunnel (and no request) for this long. Default "10m".
	IdleTimeout Duration `toml:"idle_timeout"`
	// MaxEntries bounds the table; the longest-idle keys go first. Default 1000000.
	MaxEntries int `toml:"max_entries"`
}

// Check is a [pools.NAME.check] table: the active probe of every server of the pool.
type Check struct {
	// Path is probed with GET. Default "/Thingworx/Admin/HA/LeaderCheck" for leader pools; for other
	// pools default "" (no active probe: a server is taken down after fall live connections to it fail
	// in a row, and tried again after interval), and a path enables rise/fall probing where 2xx/3xx pass.
	Path string `toml:"path"`
	// Port, if set, is the port probes go to instead of each server's own (connection servers may answer
	// health checks on a port of their own). Default 0 (the server's port).
	Port int `toml:"port"`
	// Credentials is base64 of "user:password", sent as "Authorization: Basic <credentials>" exactly as
	// ThingWorx's LoadBalancerBase64EncodedCredentials. Never logged. Default "" (no Authorization header).
	Credentials string `toml:"credentials"`
	// Interval and IntervalMax bound the random wait between two probes of one server in steady state.
	// Defaults "15s" for leader pools, "5s" for others, and IntervalMax = Interval*4/3.
	Interval    Duration `toml:"interval"`
	IntervalMax Duration `toml:"interval_max"`
	// FastInterval is the probe period of every server of a leader pool while the leader is failing or
	// unknown or another server answers 200, and of a server of another pool while it is down or
	// changing state. Default "250ms".
	FastInterval Duration `toml:"fast_interval"`
	// Timeout bounds one probe; a probe that times out counts as a non-200 answer. Default "5s" for
	// leader pools, "2s" for others.
	Timeout Duration `toml:"timeout"`
	// Fall is the number of consecutive non-200 answers after which the leader is replaced (leader
	// pools, default 3), or consecutive failures that take a server down (other pools, default 2): failed
	// probes, or live requests whose connection was refused, reset or timed out. Fewer live failures
	// only retry the client on another server and probe the failing one at once; they close no tunnel.
	Fall int `toml:"fall"`
	// Rise is the number of consecutive passes that bring a down server back (not for leader pools,
	// where the 200 answer itself decides). Default 2.
	Rise int `toml:"rise"`
}

// Route is one [[routes]] entry. Routes are tried in order; the first that matches names the pool.
// A route that the routes before it shadow completely (every request it could match is matched by one
// of them first) is a config error naming both (shadowedBy, validate.go).
type Route struct {
	// Pool is the name of the pool that serves matching requests. Required.
	Pool string `toml:"pool"`
	// Paths are optional path prefixes; a route with none matches every path.
	Paths []string `toml:"paths"`
	// WebSocket, if true, makes the route match only WebSocket upgrades (Upgrade: websocket), so that
	// ordinary requests never reach its pool. Default false (the route matches every request).
	WebSocket bool `toml:"websocket"`
	// Auth, if set ([routes.auth] after this [[routes]] entry), is the route's single-point auth:
	// clients present a key fairlead defines, fairlead removes it and injects the upstream credential
	// that only fairlead holds. Default none (no key asked).
	Auth *RouteAuth `toml:"auth"`
}

// RouteAuth is a [routes.auth] table (auth.go). A request on the route without one of the
// keys of KeysFile gets 401 and nothing of it is forwarded; with one, the key's header is removed and
// UpstreamHeader is set to the contents of UpstreamValueFile. Both files are read when the config is
// loaded (at start and at every reload); their contents never appear in logs, errors or /status.
type RouteAuth struct {
	// KeysFile holds the client keys, one per line; blank lines and lines starting with # are ignored.
	// Required, with at least one key.
	KeysFile string `toml:"keys_file"`
	// Header is the request header carrying the client's key. "Authorization" means
	// "Authorization: Bearer <key>"; any other header carries the key as its whole value.
	// Default "Authorization".
	Header string `toml:"header"`
	// UpstreamHeader is the header set on every admitted request, replacing any the client sent, to the
	// contents of UpstreamValueFile (trimmed). The two go together. Default none (nothing injected).
	UpstreamHeader    string `toml:"upstream_header"`
	UpstreamValueFile string `toml:"upstream_value_file"`
}

// Relay is one [relays.NAME] table (relay.go; lb runs it): clients GET a topic's cached
// snapshot, or subscribe to it over Server-Sent Events or WebSocket, at Path; fairlead keeps one
// upstream WebSocket per active topic (Events), fetches the topic's snapshot (Snapshot) once per change
// signalled there and pushes it to every subscriber. Relays are matched before [[routes]].
type Relay struct {
	// Pool names the pool of upstream servers: its servers are the primary first, then the others, then
	// its backups, in order; its tls, connect_timeout, response_timeout and failback_interval apply.
	// Fetches and sessions go to one server at a time and all move to the next at once when it fails;
	// the primary is retried every failback_interval and everything moves back when it answers. A pool
	// named by relays only defaults to balance = "roundrobin". Required.
	Pool string `toml:"pool"`
	// Path is the client-facing path template: literal segments and {name} segments, each {name} one
	// non-empty path segment; a topic is the values joined with "/" ("/relay/{collection}/{environment}"
	// and /relay/inventory/dev give "inventory/dev"). Required.
	Path string `toml:"path"`
	// Snapshot is the upstream path of a topic's snapshot (GET), using only Path's names. Required.
	Snapshot string `toml:"snapshot"`
	// Events is the upstream path of a topic's events WebSocket, whose every message signals a change,
	// using only Path's names. Required.
	Events string `toml:"events"`
	// Topics are fetched at start (start = "normal": before the front end opens) and always accepted.
	// Default none.
	Topics []string `toml:"topics"`
	// OnDemand accepts topics not listed in Topics: the first request fetches the snapshot (404 if the
	// upstream has none) and opens the topic's session. false answers 404 for them. Default true.
	OnDemand *bool `toml:"on_demand"`
	// MaxTopics bounds the topics held at once (listed and on demand); a request for one more on-demand
	// topic gets 503. Default 1000.
	MaxTopics int `toml:"max_topics"`
	// Start is "normal" (every listed topic fetched before the front end opens; a failure stops fairlead
	// with an error naming the topic) or "fast" (SeedFile fills the cache, the front end opens at once
	// and fresh snapshots replace the seed in the background and are pushed). Default "normal".
	Start string `toml:"start"`
	// SeedFile is the JSON file of snapshots a fast start serves first (needed by start = "fast", and by
	// seed_file_write). Default "".
	SeedFile string `toml:"seed_file"`
	// SeedFileWrite makes fairlead write SeedFile from its latest snapshots (atomically, a few seconds
	// after a change and at exit). Default false.
	SeedFileWrite bool `toml:"seed_file_write"`
	// UpstreamHeadersFile holds headers sent on every upstream fetch and events upgrade, one "Name:
	// value" per line (blank lines and # comments ignored): typically the upstream API key, which
	// clients never see. Read at load and at every reload; never logged. Default "".
	UpstreamHeadersFile string `toml:"upstream_headers_file"`
	// MaxSubscribers bounds the SSE and WebSocket subscribers of the relay at once (every topic); one
	// more gets 503 with Retry-After. Relay streams do not count in [frontend] max_conns (they leave the
	// HTTP server once they start). Default 10000.
	MaxSubscribers int `toml:"max_subscribers"`
	// SubscriberBuffer is how many messages may wait for a subscriber; one that falls further behind is
	// dropped (SSE: "event: dropped" then the stream ends; WebSocket: close 1013), never slowing the
	// others. Default 16.
	SubscriberBuffer int `toml:"subscriber_buffer"`
	// TopicIdleTimeout closes the upstream session of a topic with no subscriber and no GET for this
	// long (an on-demand topic is then forgotten; a listed one is fetched again at its next request).
	// Default "5m".
	TopicIdleTimeout Duration `toml:"topic_idle_timeout"`
	// KeepAlive is the interval of SSE keep-alive comments and WebSocket pings on idle streams, and of
	// the pings on the upstream events sessions (one silent for 2*keepalive + the pool's connect_timeout
	// is taken for dead and dialled again). Default "25s".
	KeepAlive Duration `toml:"keepalive"`
	// WriteTimeout drops a streaming subscriber whose socket accepts nothing for this long.
	// Default "10s".
	WriteTimeout Duration `toml:"write_timeout"`
	// WaitTimeout bounds the wait of a request for a topic's first snapshot (on-demand topics, a fast
	// start without seed); past it the answer is 503 with Retry-After. Default "5s".
	WaitTimeout Duration `toml:"wait_timeout"`
	// Auth ([relays.NAME.auth]) is the relay's single-point auth, the keys of [routes.auth]: clients
	// present one of keys_file's keys in header; upstream_header and upstream_value_file, if set, add
	// one more upstream header. Default none.
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

// SecretFiles returns the files a config reads besides its *.toml files ([frontend] certificates, keys
// and client CAs, [admin] token_file and password_file, [routes.auth] keys_file and
// upstream_value_file, [pools.NAME.tls] ca_file, cert and key): a change to one of them is a config
// change (the command watches them).
func (c *Config) SecretFiles() []string {
	files := c.Frontend.tlsFiles()
	for _, f := range []string{c.Admin.TokenFile, c.Admin.PasswordFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	for _, r := range c.Routes {
		if r.Auth == nil {
			continue
		}
		for _, f := range []string{r.Auth.KeysFile, r.Auth.UpstreamValueFile} {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Pools)) {
		files = append(files, c.Pools[name].Discovery.secretFiles()...) // discovery.go
		if t := &c.Pools[name].TLS; t.Enabled {
			for _, f := range []string{t.CAFile, t.Cert, t.Key} {
				if f != "" {
					files = append(files, f)
				}
			}
		}
	}
	return files
}
