package lb

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fasthttp/websocket"
)

// Issue 37: an upgrade's attempt ends as a request's does. A connection server whose WebSocket
// handshake hangs, resets or answers with a head that is no HTTP answer, while its /health says 200:
// every device whose key belongs to it still gets its tunnel (the handshake goes to another server;
// the device sees nothing), each such handshake counts against the server, and fall of them in a row
// take it down (server_down, WARN). Before, each device got 504 or 502 after response_timeout at
// every reconnection, for ever, and the server stayed up.
func TestABrokenHandshakeCountsAgainstItsServerAndGoesToAnother(t *testing.T) {
	for _, tc := range []struct {
		fault sim.UpgradeFault
		name  string
	}{{sim.UpgradeHung, "hung"}, {sim.UpgradeReset, "reset"}, {sim.UpgradeMalformed, "malformed head"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 2, 2)
			cx1, cx2 := c.Connections[0], c.Connections[1]
			// Probes every 10 s: a server the live failures took down stays down for the test, which
			// sees its state; they pass all along (only the handshake is broken).
			l, logs := startLB(t, cxConfig(c, `
[pools.cxserver]
response_timeout = "1s"
[pools.cxserver.check]
interval = "10s"
fast_interval = "10s"
fall = 2
`))
			rec := recordEvents(t, l)
			testkit.Eventually(t, "both connection servers up", 5*time.Second, func() bool {
				return mustServerStatus(t, l, "cxserver", cx1.Addr).State == admin.StateUp && mustServerStatus(t, l, "cxserver", cx2.Addr).State == admin.StateUp
			})
			// Eight devices whose keys belong to cx1.
			var devices []string
			for i := 0; len(devices) < 8; i++ {
				if id := fmt.Sprint("device-", i); landsOn(t, l, id) == cx1.Name {
					devices = append(devices, id)
				}
			}
			before := mustServerStatus(t, l, "cxserver", cx1.Addr).Failures

			cx1.SetUpgradeFault(tc.fault)
			for _, id := range devices {
				conn, by := dialAsset(t, l, id)
				if by != cx2.Name {
					t.Errorf("%s: tunnel to %q, want %s", id, by, cx2.Name)
				}
				mustEcho(t, conn, id)
				conn.Close()
			}

			// fall (2) broken handshakes in a row took cx1 down: said, counted, shown.
			testkit.Eventually(t, "cx1's server_down", 5*time.Second, func() bool { return rec.count(event.ServerDown, cx1.Addr) == 1 })
			if line := logLine(logs, "level=WARN", cx1.Addr, "server down", "2 live failures in a row"); line == "" {
				t.Errorf("no WARN line of cx1 down by its live failures:\n%s", logs.all())
			}
			ss := mustServerStatus(t, l, "cxserver", cx1.Addr)
			if ss.State != admin.StateDown || ss.Failures-before != 2 {
				t.Errorf("cx1 is %q with %d new failures, want down with 2", ss.State, ss.Failures-before)
			}
			if n := rec.count(event.ServerDown, cx2.Addr); n != 0 {
				t.Errorf("cx2 went down %d times", n)
			}
			if p := poolStatus(t, l, "cxserver"); p.Retries < 2 {
				t.Errorf("pool retries %d, want the 2 broken handshakes retried", p.Retries)
			}
			if strings.Contains(logs.all(), "fasthttp") {
				t.Errorf("the log names the HTTP library:\n%s", logs.all())
			}
		})
	}
}

// With no other server to take it, a hung handshake is answered 504 after response_timeout, as a
// request's silent server is; a malformed head is unavailable_status (503) once no other server took it
// within queue_timeout, as a request's reset is. Both count against the server.
func TestABrokenHandshakeWithNoOtherServerIsAnswered504Or503(t *testing.T) {
	for _, tc := range []struct {
		fault sim.UpgradeFault
		code  int
	}{{sim.UpgradeHung, 504}, {sim.UpgradeMalformed, 503}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			c := startCluster(t, 1, 1)
			cx1 := c.Connections[0]
			l, _ := startLB(t, cxConfig(c, `
[pools.cxserver]
response_timeout = "500ms"
queue_timeout = "200ms"
[pools.cxserver.check]
interval = "10s"
fast_interval = "10s"
fall = 5
`))
			testkit.Eventually(t, "cx1 up", 5*time.Second, func() bool { return mustServerStatus(t, l, "cxserver", cx1.Addr).State == admin.StateUp })
			cx1.SetUpgradeFault(tc.fault)
			d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
			_, resp, err := d.Dial("ws://"+l.Addr()+"/Thingworx/WS", assetHeader("a1"))
			if err == nil || resp == nil || resp.StatusCode != tc.code {
				status := 0
				if resp != nil {
					status = resp.StatusCode
				}
				t.Fatalf("dial: %v, status %d; want %d", err, status, tc.code)
			}
			if f := mustServerStatus(t, l, "cxserver", cx1.Addr).Failures; f != 1 {
				t.Errorf("cx1 has %d failures, want 1", f)
			}
		})
	}
}
