package main

// The official IBM App Configuration JavaScript client SDK (npm, unmodified, bench/appconfig), in many
// Node processes, through a fairlead process whose relay speaks App Configuration to simulated
// instances and IAM (bench/sim): configurations and changes reach every process with one upstream
// session and one fetch per change per topic and one IAM token; a wrong key is refused and sends
// nothing upstream; the backup instance serves while the primary is down, and the primary again after
// failback_interval; a fast start serves the seed file with the instances and IAM unreachable; the
// API key is never in a log, the status, the events or an answer.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/appconfig"
	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

const (
	sdkAPIKey    = "ibm-cloud-apikey-0c4a"
	sdkClientKey = "operator-sdk-key-77b1"
	sdkGUID      = "guid-us-south"
	sdkBackupID  = "guid-eu-gb"
	sdkWait      = 30 * time.Second // bounds a hang only
)

var sdkTopics = []string{"inventory/dev", "payments/prod"}

// sdkEnv is testkit's App Configuration environment: an IAM, a primary and a backup instance holding
// sdkTopics.
type sdkEnv struct {
	*testkit.AppConfigEnv
	iam             *sim.IAM
	primary, backup *sim.AppConfig
}

func startSDKEnv(t *testing.T) *sdkEnv {
	t.Helper()
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: sdkAPIKey, ClientKey: sdkClientKey,
		GUID: sdkGUID, BackupGUID: sdkBackupID, Topics: sdkTopics, Heartbeat: 500 * time.Millisecond})
	return &sdkEnv{AppConfigEnv: env, iam: env.IAM, primary: env.Primary, backup: env.Backup}
}

// relayConfig is the relay's config; relayExtra holds more lines of [relays.ibm].
func (e *sdkEnv) relayConfig(relayExtra string) string {
	var c testkit.Config
	e.Relay(&c, "", `keepalive = "1s"`+"\n"+relayExtra)
	return c.String()
}

// sdkClients starts n SDK processes against fairlead, alternating over sdkTopics, each reporting the
// simulated configuration's version property until killed.
func sdkClients(t *testing.T, f *testkit.Fairlead, n int, key string) []*appconfig.Client {
	return appconfig.StartN(t, n, func(i int) appconfig.Args {
		c, env, _ := strings.Cut(sdkTopics[i%len(sdkTopics)], "/")
		return appconfig.Args{URL: "http://" + f.Addr, GUID: sdkGUID, APIKey: key, Collection: c, Environment: env,
			Property: sim.AppConfigProperty, Updates: appconfig.NoUpdateLimit, Timeout: 4 * sdkWait}
	})
}

// waitValue waits until every client of topic i%2 reports value (ready or an update).
func waitValue(t *testing.T, clients []*appconfig.Client, topic string, value int) {
	t.Helper()
	for i, c := range clients {
		if sdkTopics[i%len(sdkTopics)] != topic {
			continue
		}
		testkit.Eventually(t, fmt.Sprintf("client %d to report %d", i, value), sdkWait, func() bool {
			ls := c.Lines()
			return len(ls) > 0 && string(ls[len(ls)-1].Value) == fmt.Sprint(value) || c.ExitCode() >= 0
		})
		if c.ExitCode() >= 0 {
			t.Fatalf("client %d exited %d: %+v\n%s", i, c.ExitCode(), c.Lines(), c.Stderr.String())
		}
	}
}

func TestTheOfficialClientSDKWorksThroughTheRelayUnmodified(t *testing.T) {
	appconfig.Script(t)
	e := startSDKEnv(t)
	f := testkit.StartFairlead(t, map[string]string{"10-ibm.toml": e.relayConfig("")})
	f.Eventually("the relay's sessions", func() bool {
		s := e.primary.Stats()
		return s.Topics[sdkTopics[0]].WSSessions == 1 && s.Topics[sdkTopics[1]].WSSessions == 1
	})
	before := e.primary.Stats()
	events := streamInto(t, "http://"+f.Admin+"/events")

	const n = 6
	clients := sdkClients(t, f, n, sdkClientKey)
	for _, tp := range sdkTopics {
		waitValue(t, clients, tp, 1)
	}
	for range 2 {
		for _, tp := range sdkTopics {
			waitValue(t, clients, tp, e.primary.Bump(tp))
		}
	}
	for i, c := range clients {
		if u := c.Updates(); len(u) != 2 {
			t.Errorf("client %d: %d configurationUpdates, want 2: %+v", i, len(u), c.Lines())
		}
	}
	after := e.primary.Stats()
	for _, tp := range sdkTopics {
		b, a := before.Topics[tp], after.Topics[tp]
		if a.WSSessions != 1 || a.WSSessionsTotal != b.WSSessionsTotal || a.SSESubscribersTotal != 0 {
			t.Errorf("%s upstream: %+v, want the one session the relay had before the clients", tp, a)
		}
		if got := a.Fetches - b.Fetches; got != 2 {
			t.Errorf("%s: %d fetches for 2 changes and %d clients, want 2", tp, got, n/2)
		}
	}
	if s := e.iam.Stats(); s.Issued != 1 {
		t.Errorf("IAM issued %d tokens, want 1", s.Issued)
	}
	if after.ClientKeyOnTokenPath != 0 || after.MeteringWithClientKey != 0 || after.Unauthorized != 0 {
		t.Errorf("upstream saw client keys or refused: %+v", after)
	}

	// A wrong key: setContext rejects with 401; nothing goes upstream.
	wrong := sdkClients(t, f, 1, "not-the-key")[0]
	if code := wrong.Wait(sdkWait); code != appconfig.ExitRejected {
		t.Fatalf("a wrong key: exit %d, %+v", code, wrong.Lines())
	}
	if l, _ := wrong.Find("rejected"); l.Status != 401 {
		t.Errorf("a wrong key: %+v, want rejected with 401", wrong.Lines())
	}
	if s := e.primary.Stats(); s.Unauthorized != 0 || s.Topics[sdkTopics[0]].Fetches != after.Topics[sdkTopics[0]].Fetches {
		t.Errorf("a refused client reached the instance: %+v", s)
	}

	// The primary down: its sessions move to the backup instance (its own guid), whose changes reach
	// every client; back up, the primary serves again after failback_interval.
	e.primary.Stop()
	f.Eventually("the sessions on the backup instance", func() bool {
		s := e.backup.Stats()
		return s.Topics[sdkTopics[0]].WSSessions == 1 && s.Topics[sdkTopics[1]].WSSessions == 1
	})
	for _, tp := range sdkTopics {
		for e.backup.Stats().Topics[tp].Version <= e.primary.Stats().Topics[tp].Version {
			e.backup.Bump(tp)
		}
		waitValue(t, clients, tp, e.backup.Stats().Topics[tp].Version)
	}
	if err := e.primary.Start(); err != nil {
		t.Fatal(err)
	}
	f.Eventually("the sessions back on the primary", func() bool {
		s := e.primary.Stats()
		return s.Topics[sdkTopics[0]].WSSessions == 1 && s.Topics[sdkTopics[1]].WSSessions == 1 &&
			e.backup.Stats().Topics[sdkTopics[0]].WSSessions == 0
	})
	for _, tp := range sdkTopics {
		for e.primary.Stats().Topics[tp].Version <= e.backup.Stats().Topics[tp].Version {
			e.primary.Bump(tp)
		}
		waitValue(t, clients, tp, e.primary.Stats().Topics[tp].Version)
	}
	if s := e.backup.Stats(); s.Unauthorized != 0 || s.ClientKeyOnTokenPath != 0 {
		t.Errorf("the backup instance: %+v", s)
	}
	if f.MetricInt(`fairlead_pool_failovers_total{pool="ibm"}`) < 1 || f.MetricInt(`fairlead_pool_failbacks_total{pool="ibm"}`) < 1 {
		t.Errorf("failovers %d, failbacks %d", f.MetricInt(`fairlead_pool_failovers_total{pool="ibm"}`),
			f.MetricInt(`fairlead_pool_failbacks_total{pool="ibm"}`))
	}

	// The API key and the tokens: nowhere an operator or a client looks.
	status := httpGet(t, "http://"+f.Admin+"/api/status")
	if !strings.Contains(events.String(), "failover") || !strings.Contains(status, `"appconfiguration"`) {
		t.Errorf("the events (%d bytes) carry no failover, or the status no App Configuration relay", len(events.String()))
	}
	for what, text := range map[string]string{"log": f.Log.String(), "status": status, "events": events.String()} {
		if strings.Contains(text, sdkAPIKey) || strings.Contains(text, "eyJ") || strings.Contains(text, sdkClientKey) {
			t.Errorf("a secret in the %s", what)
		}
	}
}

func TestAFastStartServesTheSeedToTheSDKWithTheInstancesAndIAMUnreachable(t *testing.T) {
	appconfig.Script(t)
	e := startSDKEnv(t)
	seed := filepath.Join(t.TempDir(), "seed.json")
	// A first run writes the seed file.
	first := testkit.StartFairlead(t, map[string]string{"10-ibm.toml": e.relayConfig(
		fmt.Sprintf("start = \"fast\"\nseed_file = %q\nseed_file_write = true", seed))})
	first.Eventually("the seed file", func() bool {
		b, err := os.ReadFile(seed)
		return err == nil && strings.Contains(string(b), "payments/prod") && strings.Contains(string(b), "inventory/dev")
	})
	first.Stop(10 * time.Second)
	// Everything upstream gone: the second run serves the seed.
	e.primary.Stop()
	e.backup.Stop()
	e.iam.Stop()
	f := testkit.StartFairlead(t, map[string]string{"10-ibm.toml": e.relayConfig(
		fmt.Sprintf("start = \"fast\"\nseed_file = %q", seed))})
	clients := sdkClients(t, f, 2, sdkClientKey)
	for _, tp := range sdkTopics {
		waitValue(t, clients, tp, 1)
	}
	// IAM and the primary back: the relay gets a token, and the next change reaches the clients.
	if err := e.iam.Start(); err != nil {
		t.Fatal(err)
	}
	if err := e.primary.Start(); err != nil {
		t.Fatal(err)
	}
	f.Eventually("the relay's sessions", func() bool { return e.primary.Stats().Topics[sdkTopics[0]].WSSessions == 1 })
	waitValue(t, clients, sdkTopics[0], e.primary.Bump(sdkTopics[0]))
}

// streamInto reads the stream at url into a buffer until the end of the test.
func streamInto(t *testing.T, url string) *testkit.SyncBuffer {
	t.Helper()
	buf := &testkit.SyncBuffer{}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	go io.Copy(buf, resp.Body) //nolint:errcheck // ends with the body
	return buf
}

// httpGet GETs url and returns the body.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
