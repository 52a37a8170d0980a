package testkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// AppConfigEnv is a simulated IBM Cloud IAM and two App Configuration instances, a primary and a
// backup with a GUID of its own, each holding Topics (bumped once), for tests of a relay with
// protocol = "appconfiguration"; the IBM Cloud API key and the SDKs' key are in files of Dir.
type AppConfigEnv struct {
	IAM             *sim.IAM
	Primary, Backup *sim.AppConfig
	// APIKeyFile holds APIKey (apikey_file), KeysFile ClientKey ([relays.NAME.auth] keys_file).
	APIKeyFile, KeysFile string
	Opts                 AppConfigEnvOptions
}

// AppConfigEnvOptions configure StartAppConfigEnv; every field has a default.
type AppConfigEnvOptions struct {
	APIKey, ClientKey string        // default "ibm-cloud-apikey-51d2", "sdk-key-9e1f"
	GUID, BackupGUID  string        // default "guid-primary", "guid-backup"
	Topics            []string      // default inventory/dev and payments/prod
	ExpiresIn         time.Duration // IAM's tokens (default 1h)
	Heartbeat         time.Duration // the instances' "test message" interval (default 300ms)
}

// StartAppConfigEnv starts the environment, closed at the end of the test.
func StartAppConfigEnv(t testing.TB, o AppConfigEnvOptions) *AppConfigEnv {
	t.Helper()
	o.APIKey = or(o.APIKey, "ibm-cloud-apikey-51d2")
	o.ClientKey = or(o.ClientKey, "sdk-key-9e1f")
	o.GUID, o.BackupGUID = or(o.GUID, "guid-primary"), or(o.BackupGUID, "guid-backup")
	if o.Topics == nil {
		o.Topics = []string{"inventory/dev", "payments/prod"}
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 300 * time.Millisecond
	}
	e := &AppConfigEnv{Opts: o}
	var err error
	if e.IAM, err = sim.StartIAM(Addr(t), sim.IAMOptions{APIKeys: []string{o.APIKey}, ExpiresIn: o.ExpiresIn}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.IAM.Close)
	start := func(name, guid string) *sim.AppConfig {
		a, err := sim.StartAppConfig(name, Addr(t), sim.AppConfigOptions{GUID: guid, IAM: e.IAM, Heartbeat: o.Heartbeat})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		for _, tp := range o.Topics {
			a.Bump(tp)
		}
		return a
	}
	e.Primary, e.Backup = start("primary", o.GUID), start("backup", o.BackupGUID)
	dir := t.TempDir()
	e.APIKeyFile, e.KeysFile = filepath.Join(dir, "apikey"), filepath.Join(dir, "keys")
	for f, body := range map[string]string{e.APIKeyFile: o.APIKey, e.KeysFile: o.ClientKey} {
		if err := os.WriteFile(f, []byte(body+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Relay adds pool and relay "ibm" over the two instances to c: the pool with fast checks (a server
// down after 2 failures, up after 1 success) and pool extra keys, the relay with its instance, topics,
// key files and IAM, and relayExtra's lines.
func (e *AppConfigEnv) Relay(c *Config, poolExtra, relayExtra string) {
	c.Table("pools.ibm").Set("servers", []string{e.Primary.Addr}).Set("backups", []string{e.Backup.Addr}).
		Set("failback_interval", time.Second).Set("connect_timeout", time.Second).Lines(poolExtra)
	c.Table("pools.ibm.check").Set("interval", 200*time.Millisecond).Set("fast_interval", 100*time.Millisecond).
		Set("timeout", 300*time.Millisecond).Set("fall", 2).Set("rise", 1)
	c.Table("relays.ibm").Set("pool", "ibm").Set("protocol", "appconfiguration").Set("guid", e.Opts.GUID).
		Set("topics", e.Opts.Topics).Set("apikey_file", e.APIKeyFile).Set("iam_url", e.IAM.URL()).Lines(relayExtra)
	c.Table("relays.ibm.guids").Set(e.Backup.Addr, e.Opts.BackupGUID)
	c.Table("relays.ibm.auth").Set("keys_file", e.KeysFile)
}

// AppConfigVersion returns the value of the simulated configuration's version property
// (sim.AppConfigProperty) in an sdkConfig document (environments[0]) or a flat one; -1 if there is
// none.
func AppConfigVersion(t testing.TB, body []byte) int {
	t.Helper()
	var doc struct {
		Environments []struct {
			Properties []struct {
				ID    string `json:"property_id"`
				Value int    `json:"value"`
			} `json:"properties"`
		} `json:"environments"`
		Properties []struct {
			ID    string `json:"property_id"`
			Value int    `json:"value"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("not JSON: %v: %q", err, body)
	}
	props := doc.Properties
	if len(doc.Environments) > 0 {
		props = doc.Environments[0].Properties
	}
	for _, p := range props {
		if p.ID == sim.AppConfigProperty {
			return p.Value
		}
	}
	return -1
}

// AppConfigPath returns the client path of the configuration (sdkConfig form) of topic on instance
// guid.
func AppConfigPath(guid, topic string) string {
	c, env, _ := strings.Cut(topic, "/")
	return "/apprapp/feature/v1/instances/" + guid + "/config?action=sdkConfig&collection_id=" + c + "&environment_id=" + env
}
