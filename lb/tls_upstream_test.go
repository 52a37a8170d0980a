package lb

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
)

// Upstream TLS ([pools.NAME.tls], issue #11): the simulated cluster serves TLS with certificates made
// at run time (bench/sim/certs.go), fairlead verifies them with the pool's CA file.

func newTestCA(t *testing.T, name string) *sim.CA {
	t.Helper()
	ca, err := sim.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// tlsSim starts a cluster whose every server serves TLS with a certificate of ca for names. base, if
// not nil, is the rest of the servers' TLS config (client certificates asked for).
func tlsSim(t *testing.T, ca *sim.CA, base *tls.Config, opts sim.Options, names ...string) *sim.Cluster {
	t.Helper()
	leaf, err := ca.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.Certificates = []tls.Certificate{leaf.TLS}
	opts.TLS = cfg
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := testkit.StartCluster(t, opts)
	return c
}

// writeCA writes ca's certificate into dir (a new one if "") and returns its path.
func writeCA(t *testing.T, dir string, ca *sim.CA, name string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	path, err := ca.WriteCA(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsTable is a conf.d file holding [pools.POOL.tls] with enabled = true and the given lines.
func tlsTable(pool string, lines ...string) string {
	return fmt.Sprintf("[pools.%s.tls]\nenabled = true\n%s\n", pool, strings.Join(lines, "\n"))
}

// mustReloadDir loads dir again and reloads l with it, failing the test on an error.
func mustReloadDir(t *testing.T, l *LB, dir string) {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(cfg); err != nil {
		t.Fatal(err)
	}
}

// eventLog records the events of an LB's stream.
type eventLog struct {
	mu sync.Mutex
	ev []event.Event
}

func recordEvents(t *testing.T, l *LB) *eventLog {
	el := &eventLog{}
	t.Cleanup(l.Subscribe(func(e event.Event) {
		el.mu.Lock()
		el.ev = append(el.ev, e)
		el.mu.Unlock()
	}))
	return el
}

func (el *eventLog) has(match func(event.Event) bool) bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	return slices.ContainsFunc(el.ev, match)
}

func TestUpstreamTLSWithAWrongCAFailsEveryCheckLogsTheCertificateErrorAndAnswers503(t *testing.T) {
	ca, other := newTestCA(t, "platform CA"), newTestCA(t, "another CA")
	c := tlsSim(t, ca, nil, sim.Options{Platforms: 2, NoConnections: true}, "127.0.0.1")
	files := platformConfig(c, `queue_timeout = "300ms"`, "")
	files["30-tls.toml"] = tlsTable("platform", fmt.Sprintf("ca_file = %q", writeCA(t, "", other, "other-ca")))
	l, logs := startLB(t, files)
	events := recordEvents(t, l)

	const certErr = "x509: certificate signed by unknown authority"
	for _, p := range c.Platforms {
		line := "healthcheck: pool platform: " + p.Addr + ": TLS certificate verification failed: "
		testkit.Eventually(t, "the log line of "+p.Name, 5*time.Second, func() bool {
			return strings.Contains(logs.all(), line) && strings.Contains(logs.all(), certErr)
		})
		testkit.Eventually(t, "a check_answered event of "+p.Name+" with the certificate error", 5*time.Second, func() bool {
			return events.has(func(e event.Event) bool {
				return e.Kind == event.CheckAnswered && e.Server == p.Addr && strings.Contains(e.Detail, certErr)
			})
		})
	}
	ps := poolStatus(t, l, "platform")
	if ps.Leader != "" {
		t.Errorf("leader %q elected with a wrong CA", ps.Leader)
	}
	for _, s := range ps.Servers {
		if s.State != "down" || s.Available || s.Check == nil || !strings.Contains(s.Check.LastError, certErr) {
			t.Errorf("%s: state %s available %v check %+v, want down with %q", s.Addr, s.State, s.Available, s.Check, certErr)
		}
	}

	start := time.Now()
	if status, _ := get(t, l, "/Thingworx/Things/x"); status != 503 {
		t.Errorf("GET with no verified server: %d, want 503", status)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("503 after %s, want after queue_timeout (300ms)", waited)
	}
	// Nothing reached a platform: neither a LeaderCheck nor the GET.
	for _, p := range c.Platforms {
		if n, r := len(p.Probes()), p.Requests(); n != 0 || r != 0 {
			t.Errorf("%s received %d LeaderChecks and %d requests", p.Name, n, r)
		}
	}
	// Once per run of failures, not at every probe.
	testkit.Eventually(t, "a few more probes", 5*time.Second, func() bool {
		for _, s := range poolStatus(t, l, "platform").Servers {
			if s.Check.Probes < 4 {
				return false
			}
		}
		return true
	})
	for _, p := range c.Platforms {
		if n := strings.Count(logs.all(), "healthcheck: pool platform: "+p.Addr+": TLS"); n != 1 {
			t.Errorf("%s: the TLS failure was logged %d times, want once", p.Name, n)
		}
	}
}

func TestUpstreamTLSInsecureSkipVerifyLogsAWarningAtStartAndAtEachReloadThatKeepsIt(t *testing.T) {
	ca := newTestCA(t, "unknown CA")
	c := tlsSim(t, ca, nil, sim.Options{Platforms: 1, NoConnections: true}, "somewhere.else")
	files := platformConfig(c, "", "")
	files["30-tls.toml"] = tlsTable("platform", "insecure_skip_verify = true")
	dir := testkit.WriteFiles(t, files)
	l, logs := startLBDir(t, dir)

	const warning = `level=WARN msg="pool platform: pools.platform.tls.insecure_skip_verify = true`
	if n := strings.Count(logs.all(), warning); n != 1 {
		t.Fatalf("%d warnings at start, want 1; log:\n%s", n, logs.all())
	}
	// Nothing is verified: an unknown CA and another name pass.
	if status, by := get(t, l, "/x"); status != 200 || by != "platform1" {
		t.Fatalf("GET: %d from %q", status, by)
	}
	writeFile(t, filepath.Join(dir, "40-more.toml"), []byte("[pools.platform]\nresponse_timeout = \"30s\"\n"))
	mustReloadDir(t, l, dir)
	if n := strings.Count(logs.all(), warning); n != 2 {
		t.Fatalf("%d warnings after a reload that keeps it, want 2", n)
	}
}

// The servers speak nothing but TLS, with certificates of a private CA: fairlead verifies them with the
// pool's ca_file, elects the leader over HTTPS and forwards to it; a reload after replacing the CA file
// applies the new one.
func TestUpstreamTLSWithAPrivateCAReachesTheLeaderElectedOverHTTPSAndAReloadAfterReplacingTheCAFileApplies(t *testing.T) {
	ca, other := newTestCA(t, "platform CA"), newTestCA(t, "another CA")
	c := tlsSim(t, ca, nil, sim.Options{Platforms: 2, NoConnections: true}, "127.0.0.1")
	tmp := t.TempDir()
	caFile := writeCA(t, tmp, ca, "platform-ca")
	files := platformConfig(c, `queue_timeout = "300ms"`, "")
	files["30-tls.toml"] = tlsTable("platform", fmt.Sprintf("ca_file = %q", caFile))
	dir := testkit.WriteFiles(t, files)
	l, logs := startLBDir(t, dir)
	if !slices.Contains(l.SecretFiles(), caFile) {
		t.Fatalf("SecretFiles %v does not list the CA file", l.SecretFiles())
	}
	if ps := poolStatus(t, l, "platform"); ps.Leader != c.Platforms[0].Addr {
		t.Fatalf("leader %q, want platform1 %s", ps.Leader, c.Platforms[0].Addr)
	}
	// The LeaderChecks reached the platforms' handlers (over HTTPS: the servers speak nothing else),
	// with the credentials, and platform1 answered 200.
	probes := c.Platforms[0].Probes()
	if len(probes) == 0 || probes[0].Status != 200 || probes[0].Authorization != "Basic "+sim.DefaultCredentials {
		t.Fatalf("platform1's LeaderChecks: %+v", probes)
	}
	if status, by := get(t, l, "/Thingworx/Things/x"); status != 200 || by != "platform1" {
		t.Fatalf("GET through fairlead: %d from %q, want 200 from platform1", status, by)
	}
	if n := poolStatus(t, l, "platform").Servers[0].Conns; n != 1 {
		t.Fatalf("%d upstream connections after a GET, want 1 kept alive", n)
	}
	for i := 0; i < 2; i++ {
		if status, by := get(t, l, "/Thingworx/Things/x"); status != 200 || by != "platform1" {
			t.Fatalf("GET through fairlead: %d from %q, want 200 from platform1", status, by)
		}
	}

	// Only the CA file changes: the reload applies it (the file counts in the digest), the servers get
	// new transports (the old keep-alive connection, verified with the old CA, is not reused) and new
	// probes, which now fail.
	if err := os.WriteFile(caFile, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	mustReloadDir(t, l, dir)
	if strings.Contains(logs.all(), "config unchanged") {
		t.Fatal("a reload after replacing the CA file found nothing to do")
	}
	if n := poolStatus(t, l, "platform").Servers[0].Conns; n != 0 {
		t.Errorf("%d upstream connections right after the reload, want 0 (a new transport)", n)
	}
	testkit.Eventually(t, "the leader lost (3 failed LeaderChecks)", 5*time.Second, func() bool { return poolStatus(t, l, "platform").Leader == "" })
	if !strings.Contains(logs.all(), "x509: certificate signed by unknown authority") {
		t.Error("no certificate error logged")
	}
	if status, _ := get(t, l, "/x"); status != 503 {
		t.Errorf("GET with the wrong CA: %d, want 503", status)
	}

	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	mustReloadDir(t, l, dir)
	testkit.Eventually(t, "platform1 elected again", 5*time.Second, func() bool { return poolStatus(t, l, "platform").Leader == c.Platforms[0].Addr })
	if status, by := get(t, l, "/x"); status != 200 || by != "platform1" {
		t.Fatalf("GET: %d from %q", status, by)
	}
}

func TestUpstreamTLSFailedHandshakeIsAFailedDialAndEvenAPOSTMovesToAnotherServer(t *testing.T) {
	ca, other := newTestCA(t, "platform CA"), newTestCA(t, "another CA")
	good := tlsSim(t, ca, nil, sim.Options{Platforms: 1, PlatformNames: []string{"good"}, NoConnections: true}, "127.0.0.1")
	bad := tlsSim(t, other, nil, sim.Options{Platforms: 1, PlatformNames: []string{"bad"}, NoConnections: true}, "127.0.0.1")
	// No active check: both servers are up until live failures take the bad one down, so requests do
	// meet its handshake.
	cfg := fmt.Sprintf(`
[frontend]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[pools.rr]
balance = "roundrobin"
servers = [%q, %q]
[pools.rr.check]
fall = 100
[[routes]]
pool = "rr"
`, bad.Platforms[0].Addr, good.Platforms[0].Addr)
	l, _ := startLB(t, map[string]string{"10-rr.toml": cfg,
		"30-tls.toml": tlsTable("rr", fmt.Sprintf("ca_file = %q", writeCA(t, "", ca, "platform-ca")))})

	for i := 0; i < 6; i++ {
		resp, err := testClient.Post("http://"+l.Addr()+"/Thingworx/Things/x", "text/plain", strings.NewReader("once"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != "good" {
			t.Fatalf("POST %d: %d from %q, want 200 from good", i, resp.StatusCode, resp.Header.Get("X-Served-By"))
		}
	}
	if r := bad.Platforms[0].Requests(); r != 0 {
		t.Errorf("the server whose certificate does not verify received %d requests", r)
	}
	if s := poolStatus(t, l, "rr").Servers[0]; s.Failures == 0 {
		t.Errorf("%s: no failed attempt counted, so no request met its handshake", s.Addr)
	}
}

func TestUpstreamTLSWebSocketUpgradeToATLSConnectionServerPoolEchoes(t *testing.T) {
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "another CA")
	c := tlsSim(t, ca, nil, sim.Options{Platforms: 2, Connections: 1}, "127.0.0.1")
	bad := tlsSim(t, other, nil, sim.Options{Platforms: 1, Connections: 1}, "127.0.0.1")
	caFile := writeCA(t, "", ca, "cluster-ca")
	// The sticky pool has the server whose certificate does not verify first and no active check, so
	// that some assets are placed on it: their upgrades fail the handshake and go to the other server.
	extra := fmt.Sprintf(`
[pools.cxserver]
servers = [%q, %q]
[pools.cxserver.check]
path = ""
fall = 100
%s
%s
`, bad.Connections[0].Addr, c.Connections[0].Addr,
		tlsTable("platform", fmt.Sprintf("ca_file = %q", caFile)), tlsTable("cxserver", fmt.Sprintf("ca_file = %q", caFile)))
	l, logs := startLB(t, cxConfig(c, extra))

	const assets = 8
	var open []*websocket.Conn
	for i := 0; i < assets; i++ {
		conn, _, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(fmt.Sprintf("edge-%d", i)))
		defer conn.Close()
		msg := []byte(fmt.Sprintf("hello over TLS %d", i))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			t.Fatal(err)
		}
		mt, got, err := conn.ReadMessage()
		if err != nil || mt != websocket.TextMessage || string(got) != string(msg) {
			t.Fatalf("asset %d: echo %q (type %d), %v; want %q", i, got, mt, err, msg)
		}
		open = append(open, conn)
	}
	// The tunnels' TLS sides are on the event loops: no goroutine relays them while they are idle.
	if n := pumpGoroutines(); n != 0 {
		t.Errorf("%d goroutines relay %d idle tunnels to a TLS connection server, want 0", n, assets)
	}
	for _, conn := range open {
		conn.Close()
	}
	if n := c.Connections[0].Upgrades(); n != assets {
		t.Errorf("the verified connection server upgraded %d, want %d", n, assets)
	}
	if n := bad.Connections[0].Upgrades(); n != 0 {
		t.Errorf("the server whose certificate does not verify upgraded %d", n)
	}
	if !strings.Contains(logs.all(), "tunnel: dial "+bad.Connections[0].Addr+": TLS handshake: ") {
		t.Errorf("no failed handshake of an upgrade logged; log:\n%s", logs.all())
	}
}
