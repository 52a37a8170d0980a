package appconfig

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

const (
	guid      = "0a1b-sim"
	clientKey = "operator-client-key"
	wait      = 30 * time.Second // bounds a hang only: a node process starts in about a second
)

// startInstance starts a simulated instance on a free port with its own IAM, taking clientKey.
func startInstance(t *testing.T) *sim.AppConfig {
	t.Helper()
	iam, err := sim.StartIAM(testkit.Addr(t), sim.IAMOptions{APIKeys: []string{"ibm-cloud-api-key"}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iam.Close)
	a, err := sim.StartAppConfig("appconfig1", testkit.Addr(t), sim.AppConfigOptions{
		GUID: guid, IAM: iam, ClientKeys: []string{clientKey}, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func TestTheOfficialSDKGetsItsConfigurationAndEveryChangeStraightFromTheSimulatedInstance(t *testing.T) {
	Script(t)
	a := startInstance(t)
	topics := []string{"inventory/dev", "payments/prod"}
	for _, topic := range topics {
		a.Bump(topic)
	}
	const updates = 2
	// Clients 0 and 1 on inventory/dev, 2 and 3 on payments/prod; 3 reports the feature, the others
	// the property.
	args := func(i int) Args {
		coll, env := "inventory", "dev"
		if i >= 2 {
			coll, env = "payments", "prod"
		}
		ar := Args{URL: a.URL(), GUID: guid, APIKey: clientKey, Collection: coll, Environment: env,
			Property: sim.AppConfigProperty, Updates: updates, Timeout: 2 * wait}
		if i == 3 {
			ar.Property, ar.Feature = "", sim.AppConfigFeature
		}
		return ar
	}
	clients := StartN(t, 4, args)
	// value is what client i should report for configuration n.
	value := func(i, n int) string {
		if i == 3 {
			return fmt.Sprint(n%2 == 1) // enabled when n is odd; the entity is in no segment
		}
		return fmt.Sprint(n)
	}

	for i, c := range clients {
		testkit.Eventually(t, fmt.Sprintf("client %d ready", i), wait, func() bool {
			_, ok := c.Find("ready")
			return ok || c.ExitCode() >= 0
		})
		if l, _ := c.Find("ready"); l.Event != "ready" || string(l.Value) != value(i, 1) {
			t.Fatalf("client %d: %+v, want ready with %s", i, c.Lines(), value(i, 1))
		}
	}
	for _, topic := range topics {
		if st := a.Stats().Topics[topic]; st.SSESubscribers != 2 || st.SSESubscribersTotal != 2 {
			t.Fatalf("%s: %+v, want 2 subscribers", topic, st)
		}
	}

	// Each change reaches every client of its topic as one configurationUpdate with the new value.
	for n := 2; n <= 1+updates; n++ {
		for _, topic := range topics {
			if got := a.Bump(topic); got != n {
				t.Fatalf("Bump %s: %d, want %d", topic, got, n)
			}
		}
		for i, c := range clients {
			testkit.Eventually(t, fmt.Sprintf("client %d's update %d", i, n-1), wait, func() bool {
				return len(c.Updates()) >= n-1 || c.ExitCode() >= 0
			})
			u := c.Updates()
			if len(u) != n-1 || u[n-2].N != n-1 || string(u[n-2].Value) != value(i, n) {
				t.Fatalf("client %d after change %d: %+v", i, n, c.Lines())
			}
		}
	}
	for i, c := range clients {
		if code := c.Wait(wait); code != ExitDone || len(c.NotJSON()) != 0 {
			t.Fatalf("client %d: exit %d, stray stdout %q", i, code, c.NotJSON())
		}
	}
	st := a.Stats()
	for _, topic := range topics {
		if ts := st.Topics[topic]; ts.SSESubscribersTotal != 2 || ts.SSEEvents != 2*(1+updates) || ts.Fetches != 0 {
			t.Fatalf("%s: %+v (no reconnect, no REST fetch by the client SDK)", topic, ts)
		}
	}
	if st.Unauthorized != 0 || st.ClientKeyOnTokenPath != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

func TestTheOfficialSDKRejectsSetContextOnAWrongKeyAndTheInstanceCountsIt(t *testing.T) {
	Script(t)
	a := startInstance(t)
	a.Bump("inventory/dev")
	base := Args{URL: a.URL(), GUID: guid, APIKey: "not-the-key", Collection: "inventory", Environment: "dev",
		Property: sim.AppConfigProperty, Timeout: 2 * wait}
	wrongKey := Start(t, base)
	unknownTopic := base
	unknownTopic.APIKey, unknownTopic.Environment = clientKey, "prod"
	unknown := Start(t, unknownTopic)
	missing := base
	missing.APIKey, missing.Property = clientKey, "no-such-property"
	absent := Start(t, missing)

	for _, tc := range []struct {
		c      *Client
		status int
		code   int
	}{{wrongKey, 401, ExitRejected}, {unknown, 404, ExitRejected}, {absent, 0, ExitMissing}} {
		if code := tc.c.Wait(wait); code != tc.code {
			t.Fatalf("%+v: exit %d, want %d; lines %+v", tc.c.Args, code, tc.code, tc.c.Lines())
		}
		if tc.code == ExitRejected {
			if l, ok := tc.c.Find("rejected"); !ok || l.Status != tc.status {
				t.Fatalf("%+v: lines %+v, want rejected with %d", tc.c.Args, tc.c.Lines(), tc.status)
			}
		}
	}
	st := a.Stats()
	if st.Unauthorized != 1 || st.Topics["inventory/dev"].SSESubscribersTotal != 1 {
		t.Fatalf("Stats %+v: want 1 unauthorized, 1 subscriber (the client of a missing property)", st)
	}
}
