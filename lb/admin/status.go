package admin

import (
	"time"

	"github.com/fairlead/fairlead/healthcheck"
)

// The status document: GET /api/status, and the snapshots of /events. Package lb fills it (Backend.
// Status); the doc comments of its fields are the reference's (ADMIN.md), so they say what an operator
// reads in each.

// Status is the JSON document of GET /status.
type Status struct {
	// Process is the fairlead process that serves: its version, PID and since when, and the process it
	// took over from by a binary upgrade (SIGUSR2).
	Process ProcessStatus `json:"process"`
	// ConfigFiles are the files the running config was read from, in merge order.
	ConfigFiles []string `json:"config_files"`
	// Alarms are the conditions that must not be missed, while they last, at most one per pool: a
	// leader pool without a leader ("no_leader"), a pool without an available server ("no_server"),
	// both critical; a pool of two servers or more left with one that can serve ("redundancy_lost",
	// a warning: it serves, but its next failure is an outage). Critical ones first. Empty when all is
	// well.
	Alarms []Alarm `json:"alarms"`
	// LastReloadFailed is the last reload when it failed and no reload was applied since (the
	// running config stays); omitted otherwise.
	LastReloadFailed *ReloadFailure `json:"last_reload_failed,omitempty"`
	// Pools are every pool: leader pools first, then the others, in the config files' order.
	Pools []PoolStatus `json:"pools"`
	// Relays are the relay routes ([relays.NAME]), by name; omitted when there are none.
	Relays []RelayStatus `json:"relays,omitempty"`
	// Certificates are every certificate tls_listen serves: from files (tls_cert, [[frontend.certs]])
	// in the config's order, then each [frontend.acme] domain's; omitted without tls_listen.
	Certificates []CertStatus `json:"certificates,omitempty"`
	// Events are the last events (at most 500; all kinds but check_answered), oldest first, as
	// /events sends them but for a detail longer than 512 bytes, which is cut. /events' first snapshot carries them; its later snapshots have null here
	// (the stream sends each event as it happens).
	Events []StreamEvent `json:"events"`
}

// ProcessStatus is the fairlead process that serves.
type ProcessStatus struct {
	Version string    `json:"version"` // fairlead's version (fairlead_build_info)
	PID     int       `json:"pid"`     // its process ID
	Since   time.Time `json:"since"`   // when it began to serve
	// UpgradedFrom is the process it took over from by a binary upgrade; omitted after a start of its own.
	UpgradedFrom *Predecessor `json:"upgraded_from,omitempty"`
}

// Predecessor is the old process of a binary upgrade.
type Predecessor struct {
	Version string `json:"version"` // its version
	PID     int    `json:"pid"`     // its process ID (it has exited)
}

// Alarm is a condition an operator must not miss, present while it lasts.
type Alarm struct {
	// Kind is "no_leader" (a leader pool has no leader: its requests wait, then fail), "no_server"
	// (a pool has no available server) or "redundancy_lost" (a pool of two servers or more has one
	// left that can serve: a leader pool whose leader is its last healthy server, its standbys down;
	// any other pool down to one server, backups included).
	Kind string `json:"kind"`
	// Severity is "critical" (no_leader, no_server: the pool does not serve; the page shows it red)
	// or "warning" (redundancy_lost: it serves; amber).
	Severity string    `json:"severity"`
	Pool     string    `json:"pool"`  // the pool
	Since    time.Time `json:"since"` // when fairlead first saw it (to the second)
}

// StateChange is a server's last change of State.
type StateChange struct {
	From string    `json:"from"` // the state before
	To   string    `json:"to"`   // the state after (the current one)
	Time time.Time `json:"time"` // when fairlead first saw the new state (to the second)
}

// ReloadFailure is a reload that kept the running configuration.
type ReloadFailure struct {
	Time   time.Time `json:"time"`   // when it failed
	Detail string    `json:"detail"` // the config error
}

// RateHistory is a pool's requests and errors per step over the last hour, oldest first.
type RateHistory struct {
	// StepSeconds is the step (10); Start the beginning of the first step. Step i covers
	// [Start + i*step, Start + (i+1)*step); the last step is the current one, counted up to Through.
	StepSeconds int       `json:"step_seconds"`
	Start       time.Time `json:"start"`
	Through     time.Time `json:"through"`
	// Requests and Errors are the pool's requests and errors (PoolStatus.Requests, Errors) counted in
	// each step.
	Requests []uint64 `json:"requests"`
	Errors   []uint64 `json:"errors"`
}

// PoolStatus describes one pool.
type PoolStatus struct {
	Name    string `json:"name"`    // the NAME of [pools.NAME]
	Balance string `json:"balance"` // "leader", "sticky" or "roundrobin"
	// Waiting is the requests waiting for a server now.
	Waiting int64 `json:"waiting"`
	// Requests counts the requests routed to the pool; Retries the attempts retried on another server
	// (or on the confirmed leader).
	Requests uint64 `json:"requests"`
	Retries  uint64 `json:"retries"`
	// InflightFailovers counts the requests sent to a new leader while they waited for the old one's
	// answer (balance = "leader"; among the retries; leaderwatch.go).
	InflightFailovers uint64 `json:"inflight_failovers,omitempty"`
	// Errors counts the answers fairlead gave itself: 502, 504 and unavailable_status (the sum of
	// fairlead_pool_errors_total).
	Errors uint64 `json:"errors"`
	// Leader is the elected leader's address (balance = "leader"; "" while none is known), with the
	// number of leader changes (LeaderChanges) and split brains (SplitBrains) seen.
	Leader        string `json:"leader,omitempty"`
	LeaderChanges uint64 `json:"leader_changes,omitempty"`
	SplitBrains   uint64 `json:"split_brains,omitempty"`
	// StickyEntries is the number of keys in the sticky table (balance = "sticky").
	StickyEntries int `json:"sticky_entries,omitempty"`
	// Serving is the tier that takes traffic: "primaries", or "backups" after a failover. Failovers and
	// Failbacks count the switches.
	Serving   string `json:"serving"`
	Failovers uint64 `json:"failovers"`
	Failbacks uint64 `json:"failbacks"`
	// HighWatermark and HighWatermarkBytes are a roundrobin pool's watermarks (0: no limit).
	HighWatermark      int   `json:"high_watermark,omitempty"`
	HighWatermarkBytes int64 `json:"high_watermark_bytes,omitempty"`
	// MultipartHeader, Pins and PinFailures: a roundrobin pool's multi-part pins, and the requests
	// that failed with 502 because their pinned server was not connected and writable.
	MultipartHeader string `json:"multipart_header,omitempty"`
	Pins            int    `json:"pins,omitempty"`
	PinFailures     uint64 `json:"pin_failures,omitempty"`
	// NewTunnelsPerSecond is the pool's new_tunnels_per_second (omitted when 0: no limit): the new
	// tunnels each server admits per second; servers[].tunnels_delayed and tunnels_limited say what it
	// made wait and refused.
	NewTunnelsPerSecond int `json:"new_tunnels_per_second,omitempty"`
	// TunnelsOpened counts the tunnels the pool opened (fairlead_pool_tunnels_opened_total): the page
	// shows the rate at which it admits them.
	TunnelsOpened uint64 `json:"tunnels_opened"`
	// Check is the pool's active health check: "leader" (LeaderCheck, balance = "leader"), "http"
	// (check.path), "connect" (a relay's pool without a check path: a connection opened) or
	// "passive" (none: live failures take a server down, servers[].check.passive_failures).
	Check string `json:"check"`
	// Rates are the pool's requests and errors per 10 s over the last hour (/events' later snapshots
	// carry the last few steps only).
	Rates *RateHistory `json:"rates,omitempty"`
	// Discovery is the pool's service discovery (nil without a provider).
	Discovery *DiscoveryStatus `json:"discovery,omitempty"`
	// Servers are the pool's servers: primaries, then backups, then servers a reload removed that still
	// drain.
	Servers []ServerStatus `json:"servers"`
}

// DiscoveryStatus describes a pool's service discovery provider.
type DiscoveryStatus struct {
	Provider string `json:"provider"` // "zookeeper", "dns" or "file"
	// Servers is the list in force from the provider (null before its first answer: the seed serves).
	Servers []string `json:"servers"`
	// Changes and Errors count the lists applied and the failed reads of the registry; LastSuccess is
	// the time of the provider's last answer, LastError the last failed read since then ("" if none).
	Changes     uint64    `json:"changes"`
	Errors      uint64    `json:"errors"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// EmptyPending: the provider lists no server; it is applied at the end of empty_grace.
	EmptyPending bool `json:"empty_pending,omitempty"`
}

// ServerStatus describes one server of a pool.
type ServerStatus struct {
	Addr string `json:"addr"` // host:port, as configured or discovered
	// Name is the display name ([pools.NAME.names]; the address by default).
	Name string `json:"name"`
	// Tier is "primary" or "backup".
	Tier string `json:"tier"`
	// State is one of (the same words as fairlead_server_state and the status page):
	// "up": takes traffic (passes its checks in the tier serving; in a leader pool: the leader);
	// "standby": healthy but not serving (in a leader pool a server that answers its check but not
	// 200, i.e. not the leader; elsewhere a backup that passes its checks while the primaries serve);
	// "down": no answer, refused, or failing its checks (or fall live failures in a row);
	// "drain" or "maint": put there by an operator; "removed": draining after a server set change.
	State string `json:"state"`
	// Since is when the server entered State, LastChange its last change of State (omitted before
	// the first), both as fairlead saw them, to the second; a restart forgets them.
	Since      time.Time    `json:"since,omitzero"`
	LastChange *StateChange `json:"last_change,omitempty"`
	// AdminState is the operator's state: "ready", "drain" or "maint" (admin actions).
	AdminState string `json:"admin_state"`
	// Available is the one predicate the policies read: passes its checks (in a leader pool: is the
	// leader), in the pool, not drained or in maintenance.
	Available bool `json:"available"`
	// Writable: below the pool's watermarks (always true without them). A roundrobin pool sends new
	// requests only to servers that are available and writable.
	Writable bool `json:"writable"`
	// Requests counts the requests sent to the server; Failures the attempts that failed by its fault.
	Requests uint64 `json:"requests"`
	Failures uint64 `json:"failures"`
	// InFlight is the requests sent whose response head has not arrived; InFlightBytes their body bytes.
	InFlight      int64 `json:"in_flight"`
	InFlightBytes int64 `json:"in_flight_bytes"`
	Pins          int   `json:"pins,omitempty"` // multi-part pins on the server (roundrobin pools)
	Conns         int   `json:"conns"`          // open upstream connections
	Tunnels       int64 `json:"tunnels"`        // open tunnels
	// TunnelsDelayed and TunnelsLimited count the upgrades new_tunnels_per_second made wait for the
	// server's next slot, and refused (unavailable_status).
	TunnelsDelayed uint64 `json:"tunnels_delayed,omitempty"`
	TunnelsLimited uint64 `json:"tunnels_limited,omitempty"`
	// InFlightSince, while InFlight is not 0, is since when none of the server's requests in flight
	// has ended (answered or given up): the later of the moment its in-flight count last rose from 0
	// and the moment one of them last ended. A server that answers shows a recent time however busy;
	// a hung one the time its first unanswered request was sent, the oldest waiting on it. It is not
	// each request's age, which would take a list per server on the request path: one slow request
	// among answered ones does not show. Omitted when nothing is in flight.
	InFlightSince time.Time `json:"in_flight_since,omitzero"`
	// Ramp is the server's share of new placements while slow_start ramps it up after it became
	// available, from 0 to 1 (omitted once it has its full share).
	Ramp float64 `json:"ramp,omitempty"`
	// Check is the server's health check state.
	Check *healthcheck.ServerStatus `json:"check,omitempty"`
}

// CertStatus is one certificate the HTTPS listener serves.
type CertStatus struct {
	// Source is "file" (File names it) or "acme" (obtained for Names[0] from [frontend.acme]'s directory).
	Source string   `json:"source"`
	File   string   `json:"file,omitempty"`
	Names  []string `json:"names"` // the DNS names it is served for (an ACME one before it is obtained: its domain)
	// NotAfter is its expiry; zero for an ACME domain without a certificate yet.
	NotAfter time.Time `json:"not_after"`
	// Obtained is, for an ACME one, when this process last obtained or renewed it (zero: loaded from
	// storage, or none yet).
	Obtained time.Time `json:"obtained"`
	// LastError is, for an ACME one, the last failed attempt's error, until an attempt succeeds (the
	// last good certificate is served meanwhile); omitted when none.
	LastError string `json:"last_error,omitempty"`
	// FailedAt is when that attempt failed (zero: none since the last success).
	FailedAt time.Time `json:"failed_at"`
}

// RelayStatus describes a running relay.
type RelayStatus struct {
	Name string `json:"name"` // the NAME of [relays.NAME]
	// Hosts are the host patterns it answers (its hosts key, lower case); omitted: every host.
	Hosts []string `json:"hosts,omitempty"`
	// Protocol is "generic" or "appconfiguration"; GUID the App Configuration instance the SDKs name.
	Protocol string `json:"protocol"`
	GUID     string `json:"guid,omitempty"`
	Path     string `json:"path,omitempty"` // the client-facing path template (protocol = "generic")
	Pool     string `json:"pool"`           // the pool of upstream servers
	// Start is the start mode; Seeded tells whether a fast start filled the cache from seed_file.
	Start  string `json:"start"`
	Seeded bool   `json:"seeded"`
	// Upstream is the server fetches and sessions go to: the pool's choice (its first available
	// server, primaries first; the pool's status shows its servers' health and its failovers);
	// ServingBackup tells whether it is a backup; Switches counts the moves of the sessions to another
	// server (failovers and failbacks).
	Upstream      string `json:"upstream"`
	ServingBackup bool   `json:"serving_backup"`
	Switches      uint64 `json:"switches"`
	// Sessions is the open upstream events sessions (one per active topic).
	Sessions int `json:"sessions"`
	// Subscribers is the open SSE and WebSocket subscribers of every topic.
	Subscribers int64 `json:"subscribers"`
	// Requests counts the requests served by kind ("snapshot", "sse", "websocket", and App
	// Configuration's metering POSTs forwarded, "usage" and "analytics"); Refused counts the requests
	// answered with an error, by status.
	Requests map[string]uint64 `json:"requests"`
	Refused  map[string]uint64 `json:"refused"`
	// SeedWrites and SeedWriteErrors count the writes of seed_file (seed_file_write).
	SeedWrites      uint64 `json:"seed_writes,omitempty"`
	SeedWriteErrors uint64 `json:"seed_write_errors,omitempty"`
	// IAM, for an App Configuration relay, describes its tokens (never a token).
	IAM *IAMStatus `json:"iam,omitempty"`
	// Topics are the topics held, listed and on demand.
	Topics []TopicStatus `json:"topics"`
}

// IAMStatus describes the IAM tokens of an App Configuration relay.
type IAMStatus struct {
	// URL is the IAM service (iam_url).
	URL string `json:"url"`
	// TokenExpires is when the current token expires (absent without one); it is renewed when 80% of
	// its life has passed, and after the upstream refused it.
	TokenExpires time.Time `json:"token_expires,omitzero"`
	// Tokens counts the tokens obtained; Failures the exchanges that failed.
	Tokens   uint64 `json:"tokens"`
	Failures uint64 `json:"failures"`
}

// TopicStatus describes one topic of a relay.
type TopicStatus struct {
	Topic string `json:"topic"` // the path's values joined by "/"
	// Listed: in the relay's topics (else accepted on demand). Watched: it has an upstream session
	// (an idle topic has none until its next request).
	Listed      bool   `json:"listed"`
	Watched     bool   `json:"watched"`
	Subscribers int    `json:"subscribers"` // open SSE and WebSocket subscribers
	Version     uint64 `json:"version"`     // version of the cached snapshot
	// Seed: the cached snapshot is still the one of the seed file.
	Seed        bool      `json:"seed,omitempty"`
	Fetched     time.Time `json:"fetched,omitzero"` // when the cached snapshot was fetched
	Publishes   uint64    `json:"publishes"`        // new snapshots pushed to subscribers
	Fetches     uint64    `json:"fetches"`          // snapshot fetches ended
	FetchErrors uint64    `json:"fetch_errors"`     // failed snapshot fetches
	Drops       uint64    `json:"drops"`            // subscribers dropped for falling behind
}
