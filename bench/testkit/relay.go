package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// The test relay: relay "appconfig" over pool "appconfig", the simulator's config service behind it.
const (
	// RelayUpstreamKey is the API key the simulated config servers require (sim.Options.ConfigAPIKey)
	// and the relay's upstream headers file sends.
	RelayUpstreamKey = "up-sekret-5ac0e3"
	// RelayClientKey is the key a client of the relay presents in RelayClientHeader.
	RelayClientKey    = "client-key-0b3f"
	RelayClientHeader = "X-Client-Key"
)

// RelayTopics are the listed topics of the test relay.
var RelayTopics = []string{"inventory/dev", "inventory/prod", "payments/dev", "payments/prod"}

// Relay describes a config of the test relay: [frontend] and [admin] on Listen and Admin (default
// 127.0.0.1:0), pool "appconfig" of Servers (the first the server, the others its backups) with
// PoolExtra's lines, relay "appconfig" with the path templates of the config service, Topics (default
// RelayTopics), the upstream headers file and RelayExtra's lines, and, unless Open, client auth by
// RelayClientKey in RelayClientHeader.
type Relay struct {
	Listen, Admin         string
	Servers               []string
	Topics                []string
	PoolExtra, RelayExtra string // more lines of [pools.appconfig] and [relays.appconfig]
	Open                  bool   // no [relays.appconfig.auth]
	Dir                   string // where the secrets files go (up.hdr, keys); default a temporary directory
}

// Config writes the upstream headers file and the client keys file into Dir and returns the config as
// TOML.
func (r Relay) Config(t testing.TB) string {
	t.Helper()
	if r.Dir == "" {
		r.Dir = t.TempDir()
	}
	headers, keys := RelaySecrets(t, r.Dir)
	var c Config
	c.Table("frontend").Set("listen", or(r.Listen, "127.0.0.1:0"))
	c.Table("admin").Set("listen", or(r.Admin, "127.0.0.1:0"))
	c.Table("pools.appconfig").Set("servers", r.Servers[:1]).Set("backups", r.Servers[1:]).Lines(r.PoolExtra)
	topics := r.Topics
	if topics == nil {
		topics = RelayTopics
	}
	c.Table("relays.appconfig").Set("pool", "appconfig").
		Set("path", "/relay/{collection}/{environment}").
		Set("snapshot", "/config/{collection}/{environment}").
		Set("events", "/events/{collection}/{environment}").
		Set("topics", topics).
		Set("upstream_headers_file", headers).Lines(r.RelayExtra)
	if !r.Open {
		c.Table("relays.appconfig.auth").Set("keys_file", keys).Set("header", RelayClientHeader)
	}
	return c.String()
}

// RelaySecrets writes the upstream headers file (RelayUpstreamKey as a bearer token) and the client
// keys file (RelayClientKey) into dir and returns their paths.
func RelaySecrets(t testing.TB, dir string) (headers, keys string) {
	t.Helper()
	headers, keys = filepath.Join(dir, "up.hdr"), filepath.Join(dir, "keys")
	if err := os.WriteFile(headers, []byte("# the upstream API key\nAuthorization: Bearer "+RelayUpstreamKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, []byte(RelayClientKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return headers, keys
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
