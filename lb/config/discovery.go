package config

// A pool's [discovery] table: which provider (zookeeper, dns or file) finds its servers, and that
// provider's keys, validated here; the providers themselves run in the discovery package.

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// With a provider, the pool takes its servers from a registry instead of the config, so that instances
// can come and go without an edit and a restart: "zookeeper" (the registry ThingWorx HA writes, Apache
// Curator service discovery), "dns" (SRV or A/AAAA records: a Kubernetes headless service, Consul DNS) or
// "file" (a watched list). Each new list applies as a server set change, exactly as a reload does: a new
// server takes traffic after its first passing probe, a removed one drains and its tunnels close.
// servers, when given, is the seed used until the provider's first answer; backups stay configured
// backups. When the registry cannot be read the last list stays and serving goes on (logged, counted in
// fairlead_discovery_errors_total); a list with no server empties the pool only after empty_grace. A
// reload that keeps the table keeps the provider and the servers it found; one that changes it starts
// the new provider, the old list serving until its first answer. Every change is logged and published
// as a discovery_changed event (the provider, the count, the servers added and removed); /api/status
// shows each pool's discovery, and /metrics has fairlead_discovery_*.
//
// ZooKeeper. ThingWorx HA registers each platform instance as a child znode of a path, its data the
// instance as JSON ({"name": …, "id": …, "address": "10.0.0.5", "port": 8080, "sslPort": 8443, …}).
// fairlead lists the children of path with a watch and reads each: a Curator instance gives its address
// with its sslPort in a pool whose [tls] is enabled (when it has one, else its port) and its port
// otherwise, and is left out when it says "enabled": false; data that is host:port is taken as it is, and
// a child without data may be named host:port. A child that is none of these is skipped and logged once;
// the others apply. A watch event (an instance registered or deleted) is applied within milliseconds, and
// the path is read again every session_timeout as a safety net. A lost session (a member down, a network
// cut, ZooKeeper restarted or rebuilt empty) keeps the last list; fairlead opens a new session with any
// member that answers (trying every second) and reads the path again. A failed read is logged ("…
// (keeping the last list)"), counted and tried again after a backoff (250 ms doubling up to
// session_timeout). A path that does not exist is such an error, and fairlead watches for its creation; a
// path without children is an empty list.
//
//	[pools.platform.discovery]
//	provider = "zookeeper"
//	zookeeper = ["10.0.0.21:2181", "10.0.0.22:2181", "10.0.0.23:2181"]
//	path = "/services/thingworx"
//	digest_user = "fairlead"
//	digest_password_file = "/etc/fairlead/zookeeper-password"
//
// DNS. fairlead resolves name at start and every resolve_interval, asking resolvers in order, or the
// system's (the nameserver lines of /etc/resolv.conf, port 53, read at every round); the name is taken as
// absolute (no search domain) and nothing is cached. SRV records come first: each gives a server, its
// target's addresses (from the answer's additional section when the resolver puts them there, as
// Kubernetes and Consul do, else asked for as A and AAAA) with the record's port; priority and weight are
// not used, a target "." is skipped. A name without SRV records gives its A and AAAA records with port.
// For a Kubernetes headless service (clusterIP: None): name = "_http._tcp.cx.thingworx.svc.cluster.local"
// (the SRV records of its port named http), or name = "cx.thingworx.svc.cluster.local" with port; for
// Consul: name = "cx.service.consul" with resolvers = ["127.0.0.1:8600"]. An answer with no server
// (NXDOMAIN, no records) is a list like any other. A resolver that times out (after 2 s, or
// resolve_interval if shorter), fails or cannot be reached is skipped for the next; when none answers the
// round fails, logged with each resolver and its reason, and the last list stays. A round is all or
// nothing: an SRV target whose addresses no resolver gives fails it, so a resolver glitch never shrinks the
// pool. A truncated UDP answer is asked again over TCP.
//
//	[pools.cxserver.discovery]
//	provider = "dns"
//	name = "_http._tcp.cx.thingworx.svc.cluster.local"
//
// File. file lists the servers as TOML (servers = ["10.0.0.5:8080", "cx2.internal:8080"]) or JSON
// ({"servers": [...]} or [...]): a .toml or .json name says which; any other is JSON if it starts with {
// or [, else TOML. Anything else in the file (another key or field) is an error. fairlead reads it at
// start and after every change: it watches the file's directory (and a symlink's target's), so an edit in
// place, an editor's save (a temporary file renamed over it) and a Kubernetes ConfigMap update are all
// seen; changes within 200 ms are one read, and it also reads the file every 10 s (NFS, a directory
// created later). Only a changed content applies. Invalid contents (not TOML or JSON, another key, a bad
// address, an empty file: a truncated write must not empty a pool) are logged with the file and the
// reason, counted, and the last list stays. The file need not exist when the config is loaded (-check does
// not read it): while it is missing the seed serves; a file deleted later keeps the last list. servers =
// [] empties the pool after empty_grace. The file is not part of the config: a change to it is no reload.
type Discovery struct {
	// "zookeeper", "dns" or "file"; "": the static servers (every other key of the table needs a
	// provider, and a provider's table takes only its own keys).
	Provider string `toml:"provider"`
	// A list with no server is applied only after this long without a non-empty one, so a registry
	// glitch never empties a pool at once.
	EmptyGrace Duration `toml:"empty_grace"`

	// The ZooKeeper ensemble: host:port of each member; any member that answers serves. Required with
	// provider "zookeeper".
	ZooKeeper []string `toml:"zookeeper"`
	// The znode whose children are the instances (absolute, no trailing /): Curator service instances
	// (JSON) or host:port. Required with provider "zookeeper".
	Path string `toml:"path"`
	// The ZooKeeper session timeout (the ensemble bounds it: 4-40 s by default); also the period of the
	// safety re-read and the longest retry backoff. A read that gets no answer for this long is reported
	// once while it waits on.
	SessionTimeout Duration `toml:"session_timeout"`
	// The user of ZooKeeper digest authentication (as addauth digest user:password in zkCli.sh), for a
	// path whose ACL is digest:user:…; goes with digest_password_file. A child fairlead may not read
	// fails the whole read (the last list stays), so wrong credentials never empty a pool.
	DigestUser string `toml:"digest_user"`
	// The file of the digest password (trimmed), read at start and at every reload and watched (a reload
	// after rotating it starts a new session); a missing or empty file is a config error. Never logged.
	// Goes with digest_user.
	DigestPasswordFile string `toml:"digest_password_file"`

	// The DNS name resolved: SRV records give the servers with their ports, else A/AAAA records with
	// port. Required with provider "dns".
	Name string `toml:"name"`
	// How often name is resolved; a change is in force within this time.
	ResolveInterval Duration `toml:"resolve_interval"`
	// The servers' port for A/AAAA answers (1-65535); without it the name must have SRV records (a round
	// without them is an error).
	Port int `toml:"port"`
	// DNS servers (host:port) asked in order; none: the system's (/etc/resolv.conf).
	Resolvers []string `toml:"resolvers"`

	// The file listing the servers (TOML servers = [...], or JSON {"servers": [...]} or [...]), watched;
	// it need not exist yet. Required with provider "file".
	File string `toml:"file"`

	// DigestPassword is the contents of DigestPasswordFile, read at load. Never logged.
	DigestPassword string `toml:"-"`
}

// ProviderKind is what the config knows of a discovery provider: the keys its table may hold besides
// provider and empty_grace (any other key of the table is an error), and their check.
type ProviderKind struct {
	Keys  []string
	Check func(c *Config, dc *Discovery, add func(key, format string, args ...any))
}

// Providers are the discovery providers by the name of their provider key. The discovery package runs
// them; a test may add one of its own.
var Providers = map[string]ProviderKind{
	"zookeeper": {Keys: []string{"zookeeper", "path", "session_timeout", "digest_user", "digest_password_file"}, Check: checkZooKeeper},
	"dns":       {Keys: []string{"name", "resolve_interval", "port", "resolvers"}, Check: checkDNSDiscovery},
	"file":      {Keys: []string{"file"}, Check: checkFileDiscovery},
}

// discoveryKeys are every key of a [discovery] table, for the check that a provider's table holds only
// its own keys.
var discoveryKeys = []string{"zookeeper", "path", "session_timeout", "digest_user", "digest_password_file",
	"name", "resolve_interval", "port", "resolvers", "file"}

// validateDiscovery checks pool name's [discovery] table.
func (c *Config) validateDiscovery(name string) []string {
	dc := &c.Pools[name].Discovery
	k := "pools." + name + ".discovery."
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at(k+key, format, args...)) }
	if dc.Provider == "" {
		for _, key := range append([]string{"empty_grace"}, discoveryKeys...) {
			if c.isSet(k + key) {
				add(key, "needs provider (\"zookeeper\", \"dns\" or \"file\")")
			}
		}
		return p
	}
	kind, ok := Providers[dc.Provider]
	if !ok {
		add("provider", "unknown provider %q (want \"zookeeper\", \"dns\" or \"file\")", dc.Provider)
		return p
	}
	for _, key := range discoveryKeys {
		if c.isSet(k+key) && !slices.Contains(kind.Keys, key) {
			add(key, "not a key of the %s provider", dc.Provider)
		}
	}
	if dc.EmptyGrace.err != nil {
		add("empty_grace", "bad duration %q: %v", dc.EmptyGrace.raw, dc.EmptyGrace.err)
	} else if dc.EmptyGrace.D < 0 {
		add("empty_grace", "must not be negative")
	}
	kind.Check(c, dc, add)
	return p
}

func checkDNSDiscovery(c *Config, dc *Discovery, add func(key, format string, args ...any)) {
	switch {
	case dc.Name == "":
		add("name", "required: the DNS name to resolve (SRV records, else A/AAAA records with port)")
	case !validDNSName(dc.Name):
		add("name", "bad DNS name %q (labels of 1 to 63 letters, digits, '-' or '_', 253 characters at most)", dc.Name)
	}
	if ri := dc.ResolveInterval; ri.err != nil {
		add("resolve_interval", "bad duration %q: %v", ri.raw, ri.err)
	} else if ri.D <= 0 {
		add("resolve_interval", "must be positive")
	}
	if (dc.Port != 0 || discoveryKeySet(c, dc, "port")) && (dc.Port < 1 || dc.Port > 65535) {
		add("port", "port %d out of range (1 to 65535)", dc.Port)
	}
	for i, r := range dc.Resolvers {
		key := fmt.Sprintf("resolvers.%d", i)
		if err := ValidAddr(r); err != nil {
			add(key, "bad resolver address %q: %v (want host:port, e.g. \"10.0.0.2:53\")", r, err)
		} else if host, port, _ := net.SplitHostPort(r); host == "" || port == "0" {
			add(key, "bad resolver address %q: want host:port with a host and a port (e.g. \"10.0.0.2:53\")", r)
		}
	}
}

// discoveryKeySet reports whether a file set key of the [discovery] table dc (a check function is not
// told its pool).
func discoveryKeySet(c *Config, dc *Discovery, key string) bool {
	for name, pc := range c.Pools {
		if &pc.Discovery == dc {
			return c.isSet("pools." + name + ".discovery." + key)
		}
	}
	return false
}

// validDNSName reports whether name (a trailing dot allowed) is a DNS name: labels of 1 to 63 letters,
// digits, '-' or '_' (SRV owner names such as _http._tcp.cx), at most 253 characters.
func validDNSName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func checkFileDiscovery(_ *Config, dc *Discovery, add func(key, format string, args ...any)) {
	if strings.TrimSpace(dc.File) == "" {
		add("file", "required: the file listing the servers (it need not exist yet)")
	}
}

// checkZooKeeper validates a zookeeper [discovery] table and reads its digest_password_file into
// dc.digestPassword. The file's contents count in the config digest (a reload after rotating the
// password applies it) and never appear in a problem.
func checkZooKeeper(c *Config, dc *Discovery, add func(key, format string, args ...any)) {
	if len(dc.ZooKeeper) == 0 {
		add("zookeeper", "required: the ensemble's addresses (host:port each)")
	}
	for _, a := range dc.ZooKeeper {
		if err := InstanceAddr(a); err != nil {
			add("zookeeper", "bad address %q: %v", a, err)
		}
	}
	if err := checkZNodePath(dc.Path); err != nil {
		add("path", "%v", err)
	}
	st := dc.SessionTimeout
	switch {
	case st.err != nil:
		add("session_timeout", "bad duration %q: %v", st.raw, st.err)
	case st.D < time.Millisecond:
		add("session_timeout", "must be at least 1ms")
	case st.D > time.Hour:
		add("session_timeout", "must be at most 1h (ZooKeeper servers allow 40s by default)")
	}
	switch {
	case dc.DigestUser != "" && dc.DigestPasswordFile == "":
		add("digest_password_file", "digest_user and digest_password_file go together: digest_password_file is missing")
	case dc.DigestUser == "" && dc.DigestPasswordFile != "":
		add("digest_user", "digest_user and digest_password_file go together: digest_user is missing")
	case dc.DigestUser != "":
		if strings.Contains(dc.DigestUser, ":") {
			add("digest_user", "must not contain ':' (ZooKeeper's digest is user:password)")
		}
		data, err := c.readFile("discovery.digest_password_file", dc.DigestPasswordFile) // rotating it applies
		if err != nil {
			add("digest_password_file", "%v", err)
			break
		}
		if dc.DigestPassword = strings.TrimSpace(string(data)); dc.DigestPassword == "" {
			add("digest_password_file", "%s is empty", dc.DigestPasswordFile)
		}
	}
}

// checkZNodePath validates path as ZooKeeper does, and refuses the root and a trailing slash.
func checkZNodePath(path string) error {
	switch {
	case path == "":
		return errors.New("required: the znode whose children are the instances, e.g. \"/services/thingworx\"")
	case path[0] != '/':
		return fmt.Errorf("%q is not absolute (it starts with /)", path)
	case path == "/" || strings.HasSuffix(path, "/"):
		return fmt.Errorf("%q ends with /", path)
	}
	for _, seg := range strings.Split(path[1:], "/") {
		switch seg {
		case "":
			return fmt.Errorf("%q has an empty segment (//)", path)
		case ".", "..":
			return fmt.Errorf("%q has a relative segment %q", path, seg)
		}
	}
	for _, r := range path {
		if r < ' ' || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("%q has a character ZooKeeper does not allow (%U)", path, r)
		}
	}
	return nil
}

// InstanceAddr checks that addr is a usable host:port (a host, a port other than 0).
func InstanceAddr(addr string) error {
	if err := ValidAddr(addr); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "" {
		return errors.New("no host")
	}
	if port == "0" {
		return errors.New("port 0")
	}
	return nil
}
