package lb

// A relay with protocol = "appconfiguration" through a running fairlead, in front of simulated App
// Configuration instances and IAM (bench/sim): what lb adds to the relay (package relay's tests hold
// the protocol itself: the SDKs' shapes, the streams, metering, IAM tokens, the move to the backup
// instance with its own guid when the pool's choice moves): route auth of the SDKs' keys. lb's health
// check moving a relay's pool to its backup is TestRelayStartsOnTheBackupMovesToItWithinASecond... .
// The official JS client SDK runs against a fairlead process in cmd/fairlead.

import (
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

const (
	acAPIKey    = "ibm-cloud-apikey-51d2"
	acClientKey = "sdk-key-9e1f"
	acGUID      = "guid-primary"
	acBackupID  = "guid-backup"
)

var acTopics = []string{"inventory/dev", "payments/prod"}

// acEnv is testkit's App Configuration environment (a simulated IAM, a primary and a backup
// instance holding acTopics) and a relay in front of it.
type acEnv struct {
	*testkit.AppConfigEnv
	iam             *sim.IAM
	primary, backup *sim.AppConfig
	l               *LB
	logs            *logSink
}

// startAppConfigRelay starts the environment; expiresIn is the life of IAM's tokens, relayExtra more
// lines of [relays.ibm].
func startAppConfigRelay(t *testing.T, expiresIn time.Duration, relayExtra string) *acEnv {
	t.Helper()
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, BackupGUID: acBackupID, Topics: acTopics, ExpiresIn: expiresIn})
	e := &acEnv{AppConfigEnv: env, iam: env.IAM, primary: env.Primary, backup: env.Backup}
	var c testkit.Config
	listenAnywhere(&c)
	env.Relay(&c, `response_timeout = "2s"`, `keepalive = "400ms"`+"\n"+relayExtra)
	e.l, e.logs = startLB(t, map[string]string{"10-ibm.toml": c.String()})
	// Settled: each topic fetched at start and again once its session connected.
	testkit.Eventually(t, "the relay's sessions and fetches", 10*time.Second, func() bool {
		for _, tp := range acTopics {
			if st := e.primary.Stats().Topics[tp]; st.WSSessions != 1 || st.Fetches < 2 {
				return false
			}
		}
		return true
	})
	return e
}

// Route auth of an App Configuration relay: the client SDK's raw key is admitted (the stream the
// relay serves is tested in lb/relay), a wrong key is refused before anything reaches the instance.
func TestAppConfigurationRelayAdmitsTheSDKsKeyAndRefusesAWrongOneBeforeTheInstance(t *testing.T) {
	e := startAppConfigRelay(t, time.Hour, "")
	path := "/apprapp/feature/v1/instances/" + acGUID + "/environments/prod/sse/subscribe?collection_id=payments"
	sse := testkit.DialSSE(t, e.l.Addr(), path, "Authorization", acClientKey) // raw, as the client SDK sends it
	ev, err := sse.Next(5 * time.Second)
	if err != nil || ev.Event != "Registration" || testkit.AppConfigVersion(t, []byte(ev.Data)) != 1 {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	// A wrong key: 401, nothing upstream.
	before := e.primary.Stats()
	_, resp, err := testkit.TrySSE(e.l.Addr(), path, nil, "Authorization", "not-a-key")
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("a wrong key: %v, %v", resp, err)
	}
	if after := e.primary.Stats(); after.Unauthorized != before.Unauthorized || after.Topics["payments/prod"].Fetches != before.Topics["payments/prod"].Fetches {
		t.Error("a refused client reached the instance")
	}
}
