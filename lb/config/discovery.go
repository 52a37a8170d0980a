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

// Discovery is a [pools.NAME.discovery] table. Provider "" means none.
type Discovery struct {
	// Provider is "zookeeper", "dns" or "file".
	Provider string `toml:"provider"`
	// EmptyGrace: an empty list is applied only after this long without a non-empty one. Default "30s".
	EmptyGrace Duration `toml:"empty_grace"`

	// ZooKeeper (provider "zookeeper") is the ensemble: host:port of each member; any member that
	// answers serves. Required with that provider.
	ZooKeeper []string `toml:"zookeeper"`
	// Path (zookeeper) is the znode whose children are the instances (absolute, no trailing /): Curator
	// service instances (JSON: address with sslPort in a pool whose [tls] is enabled, else port; left out
	// when "enabled": false) or host:port. A path that does not exist yet is watched for its creation.
	// Required with that provider.
	Path string `toml:"path"`
	// SessionTimeout (zookeeper) is the ZooKeeper session timeout (the ensemble bounds it: 4-40 s by
	// default); also the period of the safety re-read and the longest retry backoff. A lost session
	// keeps the last list; a new session reads the path again.
	SessionTimeout Duration `toml:"session_timeout"`
	// DigestUser (zookeeper) is the user of ZooKeeper digest authentication, for a path whose ACL is
	// digest:user:...; it goes with DigestPasswordFile. A child fairlead may not read fails the whole
	// read (the last list stays), so wrong credentials never empty a pool.
	DigestUser string `toml:"digest_user"`
	// DigestPasswordFile (zookeeper) holds the digest password (trimmed), read at start and at every
	// reload (a reload after rotating it starts a new session); never logged. Goes with DigestUser.
	DigestPasswordFile string `toml:"digest_password_file"`

	// dns: the name resolved every ResolveInterval (SRV records give host and port, else A/AAAA with
	// Port), through Resolvers ("host:port") or the system's.
	Name            string   `toml:"name"`
	ResolveInterval Duration `toml:"resolve_interval"`
	Port            int      `toml:"port"`
	Resolvers       []string `toml:"resolvers"`

	// file: a TOML ({servers = [...]}) or JSON ({"servers": [...]} or [...]) file of servers, watched.
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

// secretFiles are the files the table reads besides the *.toml files (Config.SecretFiles).
func (dc *Discovery) secretFiles() []string {
	if dc.Provider == "zookeeper" && dc.DigestPasswordFile != "" {
		return []string{dc.DigestPasswordFile}
	}
	return nil
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
