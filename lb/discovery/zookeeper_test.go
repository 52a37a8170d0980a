package discovery

import (
	"strings"
	"testing"

	"github.com/fairlead/fairlead/lb/discovery/discoverytest"
)

// What a child znode says: host:port, or a Curator service instance. The zookeeper provider itself runs
// against a real ZooKeeper in lb's tests (discovery_zk_test.go), behind a whole load balancer.

func TestZooKeeperInstanceDataIsHostPortOrACuratorServiceInstance(t *testing.T) {
	f := func(name, data string, useTLS bool, want, wantErr string) {
		t.Helper()
		got, err := parseInstance(name, []byte(data), useTLS)
		switch {
		case wantErr == "" && (err != nil || got != want):
			t.Errorf("%q %q tls=%v: %q, %v; want %q", name, data, useTLS, got, err, want)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%q %q tls=%v: %q, %v; want an error with %q", name, data, useTLS, got, err, wantErr)
		}
	}
	f("x", "10.0.0.5:8080", false, "10.0.0.5:8080", "")
	f("x", " twx-a.internal:8443\n", true, "twx-a.internal:8443", "")
	f("10.0.0.6:8080", "", false, "10.0.0.6:8080", "") // no data: the name
	f("x", "", false, "", "no data, and its name is not host:port")
	f("x", "10.0.0.5", false, "", "missing port")
	f("x", "10.0.0.5:0", false, "", "port 0")
	f("x", ":8080", false, "", "no host")
	f("x", "10.0.0.5:99999", false, "", "bad port")

	curator := discoverytest.CuratorInstance("id", "10.0.0.5", 8080, 8443)
	f("x", curator, false, "10.0.0.5:8080", "")
	f("x", curator, true, "10.0.0.5:8443", "")
	f("x", discoverytest.CuratorInstance("id", "10.0.0.5", 8080, 0), true, "10.0.0.5:8080", "")
	f("x", discoverytest.CuratorInstance("id", "fd00::5", 8080, 0), false, "[fd00::5]:8080", "")
	f("x", `{"address":"10.0.0.5","port":null,"sslPort":8443}`, true, "10.0.0.5:8443", "")
	f("x", `{"address":"10.0.0.5","port":null,"sslPort":8443}`, false, "", "only an sslPort, and the pool's [tls] is not enabled")
	f("x", `{"address":"10.0.0.5"}`, false, "", "no port")
	f("x", `{"port":8080}`, false, "", "no address")
	f("x", `{"address":"10.0.0.5","port":8080,"enabled":false}`, false, "", "disabled")
	f("x", `{"address":"10.0.0.5","port":"8080"}`, false, "", "not a Curator service instance")
	f("x", `{"address":"10.0.0.5","port":70000}`, false, "", "bad port")
	f("x", `{"address":"a b","port":8080}`, false, "", "control or space character")
}
