package config

// [relays.NAME]: defaults, validation and what a relay compiles to when the config is loaded (its
// templates, topics, upstream headers and auth). The running side is package relay.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairlead/fairlead/lb/httpfield"
	"github.com/fairlead/fairlead/lb/relay/paths"
)

// RelaySpec is a [relays.NAME] table compiled at load. It is part of an immutable Config.
type RelaySpec struct {
	Name     string
	Protocol string // "generic" or "appconfiguration"
	// Path, Snapshot and Events are the templates of protocol = "generic" (nil for "appconfiguration").
	Path, Snapshot, Events *paths.Template
	// Names are the names of a topic's values, in topic-key order: path's, or collection and
	// environment.
	Names []string
	// The App Configuration instance (protocol = "appconfiguration"): GUID, the GUID of each server
	// whose instance is another (GUIDs, by address), the IBM Cloud API key (a credential: never logged)
	// and the IAM service it is exchanged at.
	GUID     string
	GUIDs    map[string]string
	APIKey   string
	IAMURL   string
	Topics   []string        // the listed topics, validated, in config order
	Listed   map[string]bool // the same, as a set
	OnDemand bool
	// Hosts are the relay's host patterns in lower case (HostMatches); none: every host.
	Hosts []string
	// Header is sent on every upstream request: upstream_headers_file's lines and [relays.NAME.auth]
	// upstream_header. A credential: never logged.
	Header http.Header
	Auth   *Auth // nil without [relays.NAME.auth]
	// Fingerprint identifies everything the running relay (hub and upstream) is built from: a reload
	// that keeps it keeps the relay, its sessions and its subscribers.
	Fingerprint string
}

// relayDefaults applies the defaults of every [relays.NAME].
func (c *Config) relayDefaults() {
	for _, r := range c.Relays {
		if r.OnDemand == nil {
			t := true
			r.OnDemand = &t
		}
		def(c, &r.Protocol, "generic")
		def(c, &r.IAMURL, "https://iam.cloud.ibm.com")
		def(c, &r.MaxTopics, 1000)
		def(c, &r.Start, "normal")
		def(c, &r.MaxSubscribers, 10000)
		def(c, &r.SubscriberBuffer, 16)
		defDuration(c, &r.TopicIdleTimeout, 5*time.Minute)
		defDuration(c, &r.KeepAlive, 25*time.Second)
		defDuration(c, &r.WriteTimeout, 10*time.Second)
		defDuration(c, &r.WaitTimeout, 5*time.Second)
		if r.Auth != nil && r.Auth.Header == "" {
			r.Auth.Header = "Authorization"
		}
	}
}

// RelayOnlyPool reports whether pool name is named by a relay and by no [[routes]] entry: its balance
// then defaults to "roundrobin" (a relay does not elect a leader among its servers).
func (c *Config) RelayOnlyPool(name string) bool {
	for _, r := range c.Routes {
		if r.Pool == name {
			return false
		}
	}
	for _, r := range c.Relays {
		if r.Pool == name {
			return true
		}
	}
	return false
}

// validateRelays checks every [relays.NAME], reads its files and compiles it into c.relays. Problems
// name the file and the key, and never hold a file's contents.
func (c *Config) validateRelays() []string {
	var p []string
	c.RelaySpecs = map[string]*RelaySpec{}
	var claims []relayClaim       // what each relay takes, for the overlap check after the loop
	reported := map[string]bool{} // relay-only pools whose ignored keys were checked
	for _, name := range slices.Sorted(maps.Keys(c.Relays)) {
		r := c.Relays[name]
		k := "relays." + name + "."
		n := len(p)
		add := func(key, format string, args ...any) { p = append(p, c.at(k+key, format, args...)) }
		checkDur := func(key string, d Duration) {
			if d.err != nil {
				add(key, "bad duration %q: %v", d.raw, d.err)
			} else if d.D <= 0 {
				add(key, "must be greater than zero")
			}
		}
		spec := &RelaySpec{Name: name, OnDemand: *r.OnDemand, Listed: map[string]bool{}, Header: http.Header{}, Hosts: LowerHosts(r.Hosts)}
		for j, h := range r.Hosts {
			if why := hostPatternProblem(h); why != "" {
				add(fmt.Sprintf("hosts.%d", j), "bad host pattern %q: %s", h, why)
			}
		}
		claim := func(key string, path *paths.Template) {
			if validHosts(r.Hosts) {
				claims = append(claims, relayClaim{name: name, key: k + key, hosts: spec.Hosts, path: path})
			}
		}
		var pc *Pool
		switch {
		case r.Pool == "":
			add("pool", "missing pool")
		case c.Pools[r.Pool] == nil:
			add("pool", "pool %q is not defined in any file", r.Pool)
		default:
			pc = c.Pools[r.Pool]
			if pc.Balance == "leader" {
				add("pool", "pool %q has balance = \"leader\": a relay's pool needs \"roundrobin\" (the default for a pool named by relays only) or \"sticky\"", r.Pool)
			}
			if pc.Discovery.Provider != "" {
				add("pool", "pool %q takes its servers from discovery: a relay's pool needs a static server list", r.Pool)
			}
			if c.RelayOnlyPool(r.Pool) && !reported[r.Pool] {
				reported[r.Pool] = true
				for _, key := range relayIgnoredPoolKeys {
					if k := "pools." + r.Pool + "." + key; c.isSet(k) {
						p = append(p, c.at(k, "has no effect on a pool named by relays only (a relay's upstream sessions and fetches neither queue, pin nor tunnel): remove it, or route requests to the pool"))
					}
				}
			}
		}
		tmpl := func(key, s string) *paths.Template {
			if s == "" {
				add(key, "required")
				return nil
			}
			t, err := paths.ParseTemplate(s)
			if err != nil {
				add(key, "%s", strings.TrimPrefix(err.Error(), "relay: "))
			}
			return t
		}
		spec.Protocol = r.Protocol
		switch r.Protocol {
		case "generic":
			for _, key := range []string{"guid", "guids", "apikey_file", "iam_url"} {
				if c.isSet(k + key) {
					add(key, "only with protocol = \"appconfiguration\"")
				}
			}
			spec.Path, spec.Snapshot, spec.Events = tmpl("path", r.Path), tmpl("snapshot", r.Snapshot), tmpl("events", r.Events)
			if spec.Path != nil {
				spec.Names = spec.Path.Names()
				claim("path", spec.Path)
				for key, t := range map[string]*paths.Template{"snapshot": spec.Snapshot, "events": spec.Events} {
					if t != nil {
						if err := t.CheckExpandable(spec.Path); err != nil {
							add(key, "%s", strings.TrimPrefix(err.Error(), "relay: "))
						}
					}
				}
			}
		case "appconfiguration":
			spec.Names = []string{"collection", "environment"}
			p = append(p, c.validateAppConfiguration(k, r, pc, spec)...)
			claim("protocol", nil)
		default:
			add("protocol", "unknown protocol %q: \"generic\" or \"appconfiguration\"", r.Protocol)
		}
		if spec.Names != nil {
			for i, t := range r.Topics {
				key := fmt.Sprintf("topics.%d", i)
				if _, err := paths.Split(t, len(spec.Names)); err != nil {
					add(key, "%s", strings.TrimPrefix(err.Error(), "relay: "))
				} else if spec.Listed[t] {
					add(key, "topic %q listed twice", t)
				} else {
					spec.Listed[t] = true
					spec.Topics = append(spec.Topics, t)
				}
			}
		}
		if len(r.Topics) == 0 && !*r.OnDemand {
			add("on_demand", "false with no topics: the relay would refuse every request")
		}
		if r.MaxTopics <= 0 {
			add("max_topics", "must be greater than zero, got %d", r.MaxTopics)
		} else if r.MaxTopics < len(r.Topics) {
			add("max_topics", "%d is fewer than the %d listed topics", r.MaxTopics, len(r.Topics))
		}
		if problem := startProblem(r.Start, r.SeedFile != "", "seed_file"); problem != "" {
			add("start", "%s", problem)
		}
		if r.SeedFileWrite && r.SeedFile == "" {
			add("seed_file_write", "needs seed_file")
		}
		if r.MaxSubscribers <= 0 {
			add("max_subscribers", "must be greater than zero, got %d", r.MaxSubscribers)
		}
		if r.SubscriberBuffer <= 0 {
			add("subscriber_buffer", "must be greater than zero, got %d", r.SubscriberBuffer)
		}
		checkDur("topic_idle_timeout", r.TopicIdleTimeout)
		checkDur("keepalive", r.KeepAlive)
		checkDur("write_timeout", r.WriteTimeout)
		checkDur("wait_timeout", r.WaitTimeout)
		headersSum := ""
		if f := r.UpstreamHeadersFile; f != "" {
			data, err := c.readFile(k+"upstream_headers_file", f)
			if err != nil {
				add("upstream_headers_file", "%v", err)
			} else {
				sum := sha256.Sum256(data)
				headersSum = hex.EncodeToString(sum[:])
				for _, problem := range parseUpstreamHeaders(f, data, spec.Header) {
					add("upstream_headers_file", "%s", problem)
				}
				if r.Protocol == "appconfiguration" && spec.Header.Get("Authorization") != "" {
					add("upstream_headers_file", "%s sets Authorization, which carries the relay's IAM token with protocol = \"appconfiguration\"", f)
				}
			}
		}
		if r.Auth != nil {
			if r.Protocol == "appconfiguration" && !strings.EqualFold(r.Auth.Header, "Authorization") {
				add("auth.header", "%q: the App Configuration SDKs send their key in Authorization", r.Auth.Header)
			}
			a, ap := c.loadAuth(k+"auth.", r.Auth)
			p = append(p, ap...)
			spec.Auth = a
			if a != nil && r.Protocol == "appconfiguration" {
				a.RawOrBearer = true // the client SDKs send the key raw, the server SDKs as a bearer token
			}
			if a != nil && a.UpstreamHeader != "" {
				if spec.Header.Get(a.UpstreamHeader) != "" {
					add("auth.upstream_header", "%q is also set by upstream_headers_file", a.UpstreamHeader)
				}
				spec.Header.Set(a.UpstreamHeader, a.UpstreamValue)
				headersSum += "|" + a.UpstreamHeader + ":" + hex.EncodeToString(sha256Sum(a.UpstreamValue))
			}
		}
		if len(p) > n || pc == nil {
			continue
		}
		// The fingerprint: everything the relay's hub and upstream are built from. The auth keys are
		// read per request from the running config and are not part of it.
		rc := *r
		rc.Auth, rc.OnDemand = nil, nil // a pointer would print as an address
		rc.Hosts = nil                  // which requests reach the relay: read per request from the generation's spec
		// (The pool's failback_interval and checks are not: they are the pool's, which a reload
		// updates in place.)
		spec.Fingerprint = fmt.Sprintf("%+v|on_demand=%v|servers=%q|backups=%q|tls=%v,%s|connect=%s|response=%s|headers=%s|apikey=%x",
			rc, *r.OnDemand, pc.Servers, pc.Backups, pc.TLS.Enabled, pc.TLS.sum, pc.ConnectTimeout.D,
			pc.ResponseTimeout.D, headersSum, sha256Sum(spec.APIKey))
		c.RelaySpecs[name] = spec
	}
	return append(p, c.relayOverlaps(claims)...)
}

// A relayClaim is the requests a relay takes, for relayOverlaps: those on its hosts (lower case; none:
// every host) whose path its path template matches, or, with protocol = "appconfiguration" (path nil),
// every path under /apprapp/ (the relay answers 404 for a path or an instance it does not serve).
type relayClaim struct {
	name, key string // the relay, and the key that gives its paths (relays.NAME.path or .protocol)
	hosts     []string
	path      *paths.Template
}

// appConfigPrefix is the first segment of every path an App Configuration relay takes.
const appConfigPrefix = "apprapp"

// overlap returns a request (host and path) that both a and b take, and whether there is one; the
// host is "" when it may be any.
func (a relayClaim) overlap(b relayClaim) (host, path string, ok bool) {
	host, ok = hostsOverlap(a.hosts, b.hosts)
	if !ok {
		return "", "", false
	}
	switch {
	case a.path == nil && b.path == nil:
		path, ok = "/"+appConfigPrefix+"/wsfeature", true
	case a.path == nil:
		path, ok = b.path.Under(appConfigPrefix)
	case b.path == nil:
		path, ok = a.path.Under(appConfigPrefix)
	default:
		path, ok = a.path.Overlap(b.path)
	}
	return host, path, ok
}

// describe says what a relay takes, for a problem: its key's value and its hosts.
func (a relayClaim) describe() string {
	s := `"appconfiguration" (every path under /` + appConfigPrefix + `/)`
	if a.path != nil {
		s = strconv.Quote(a.path.String())
	}
	if len(a.hosts) > 0 {
		return s + " on hosts " + quoted(a.hosts)
	}
	return s + " on every host"
}

// relayOverlaps refuses two relays that take a request in common. Relays have no order (a request
// goes to the first, by name, that takes it), so the other would silently lose it: paths that can be
// the same (as many segments, and at each the same literal or a {name}) are allowed only on hosts that
// never are (lb/relays.go's serveRelay tries a relay's hosts before its path). The problem is the
// later relay's, by name, and names the earlier with its file and a request both take.
func (c *Config) relayOverlaps(claims []relayClaim) []string {
	var p []string
	for j, b := range claims {
		for _, a := range claims[:j] {
			host, path, ok := a.overlap(b)
			if !ok {
				continue
			}
			on := "on any host"
			if host != "" {
				on = "on host " + host
			}
			fix := "give the two relays hosts that never match the same host, or paths that differ"
			if a.path == nil && b.path == nil {
				fix = "give the two relays hosts that never match the same host"
			}
			p = append(p, c.at(b.key, "%s overlaps %s %s (in %s): both take %s %s, which only one would answer; %s",
				b.describe(), a.key, a.describe(), c.fileAt(a.key), path, on, fix))
		}
	}
	return p
}

// validateAppConfiguration checks the keys of a relay with protocol = "appconfiguration" (k is its
// table's prefix, pc its pool, nil when missing) and reads its API key into spec.
func (c *Config) validateAppConfiguration(k string, r *Relay, pc *Pool, spec *RelaySpec) []string {
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at(k+key, format, args...)) }
	for _, key := range []string{"path", "snapshot", "events"} {
		if c.isSet(k + key) {
			add(key, "implied by protocol = \"appconfiguration\": remove it")
		}
	}
	switch {
	case r.GUID == "":
		add("guid", "required with protocol = \"appconfiguration\"")
	case !validGUID(r.GUID):
		add("guid", "%q is not an instance GUID ([A-Za-z0-9-]+)", r.GUID)
	default:
		spec.GUID = r.GUID
	}
	spec.GUIDs = map[string]string{}
	for _, server := range slices.Sorted(maps.Keys(r.GUIDs)) {
		guid := r.GUIDs[server]
		switch {
		case pc != nil && !slices.Contains(pc.Servers, server) && !slices.Contains(pc.Backups, server):
			add("guids", "%q is not a server of pool %q", server, r.Pool)
		case !validGUID(guid):
			add("guids", "%q: %q is not an instance GUID ([A-Za-z0-9-]+)", server, guid)
		default:
			spec.GUIDs[server] = guid
		}
	}
	if r.APIKeyFile == "" {
		add("apikey_file", "required with protocol = \"appconfiguration\"")
	} else if data, err := c.readFile(k+"apikey_file", r.APIKeyFile); err != nil {
		add("apikey_file", "%v", err)
	} else {
		key := strings.TrimSpace(string(data))
		switch {
		case key == "":
			add("apikey_file", "%s is empty", r.APIKeyFile)
		case strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			add("apikey_file", "%s must hold one API key (one line without spaces or control characters)", r.APIKeyFile)
		default:
			spec.APIKey = key
		}
	}
	if u, err := url.Parse(r.IAMURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" {
		add("iam_url", "%q is not an http(s) URL without query", r.IAMURL)
	} else {
		spec.IAMURL = strings.TrimSuffix(r.IAMURL, "/")
	}
	return p
}

// validGUID reports whether s can be an App Configuration instance GUID: letters, digits and dashes.
func validGUID(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
}

// relayIgnoredPoolKeys are the keys of a pool that only proxied requests use: set on a pool named by
// relays only, they would be parsed and ignored, so they are refused. ([pools.NAME.check] applies: it
// is the health check of the relay's servers, a connection opened when it has no path.)
var relayIgnoredPoolKeys = []string{"queue_timeout", "unavailable_status", "max_queue", "max_conns", "high_watermark",
	"high_watermark_bytes", "multipart_header", "multipart_ttl", "multipart_max_pins", "nodelay", "tunnel_idle_timeout",
	"tunnel_close_spread", "failback_close_tunnels", "failback_close_spread", "sticky"}

// sha256Sum is the SHA-256 of s.
func sha256Sum(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// parseUpstreamHeaders parses an upstream_headers_file: one "Name: value" per line, blank lines and
// lines starting with # ignored, into h. A problem names the file and the line number, never a value.
func parseUpstreamHeaders(file string, data []byte, h http.Header) []string {
	var p []string
	n := 0
	for line := range bytes.Lines(data) {
		n++
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(string(line), ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || !validHeaderName(name):
			p = append(p, fmt.Sprintf("%s line %d: want \"Name: value\"", file, n))
		case value == "" || strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			p = append(p, fmt.Sprintf("%s line %d: header %s: the value must be one non-empty line without control characters", file, n, name))
		case reservedRelayHeader(name):
			p = append(p, fmt.Sprintf("%s line %d: header %s is set by fairlead itself on upstream requests", file, n, name))
		case h.Get(name) != "":
			p = append(p, fmt.Sprintf("%s line %d: header %s set twice", file, n, name))
		default:
			h.Set(name, value)
		}
	}
	return p
}

// reservedRelayHeader reports the headers the relay's HTTP and WebSocket clients set themselves.
func reservedRelayHeader(name string) bool {
	f := httpfield.Of(name)
	return f.Framing() || f.HopByHop() || strings.HasPrefix(strings.ToLower(name), "sec-websocket-")
}
