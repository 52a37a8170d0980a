package lb

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fasthttp/websocket"
)

// Upstream TLS ([pools.NAME.tls], issue #11) through a whole fairlead: the simulated cluster serves TLS
// with certificates made at run time (bench/sim/certs.go), fairlead verifies them with the pool's CA
// file: the leader elected over HTTPS and a reload replacing the CA file, the insecure_skip_verify
// warning, a failed handshake moving a POST, wss to a TLS connection-server pool. How a dial verifies
// (a wrong CA, another name, insecure_skip_verify, client certificates) is lb/dialer's dialer_test.go.

// tlsSim starts a cluster whose every server serves TLS with a certificate of ca for names.
func tlsSim(t *testing.T, ca *sim.CA, opts sim.Options, names ...string) *sim.Cluster {
	t.Helper()
	leaf, err := ca.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	opts.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return testkit.StartCluster(t, opts)
}

// tlsTable is a conf.d file holding [pools.POOL.tls] with enabled = true and the given lines.
func tlsTable(pool string, lines ...string) string {
	return fmt.Sprintf("[pools.%s.tls]\nenabled = true\n%s\n", pool, strings.Join(lines, "\n"))
}

// The servers speak nothing but TLS, with certificates of a private CA: fairlead verifies them with the
// pool's ca_file, elects the leader over HTTPS and forwards to it. A reload after the CA file is
// replaced by another CA's applies it: new transports; every check fails with the certificate error,
// logged once per run of failures and given in the check_answered events and the pool's status; no
// leader; nothing reaches a platform and a request gets 503 after queue_timeout. With the right CA back,
// the leader is elected again.
func TestUpstreamTLSWithAPrivateCAReachesTheLeaderElectedOverHTTPSAndAReloadReplacingTheCAFileApplies(t *testing.T) {
	pca, other := newTLSEnv(t, "platform CA"), newTLSEnv(t, "another CA")
	c := tlsSim(t, pca.ca, sim.Options{Platforms: 2, NoConnections: true}, "127.0.0.1")
	caFile := pca.writeCA(t, "platform-ca")
	files := platformConfig(c, `queue_timeout = "300ms"`, "")
	files["30-tls.toml"] = tlsTable("platform", fmt.Sprintf("ca_file = %q", caFile))
	dir := testkit.WriteFiles(t, files)
	l, logs := startLBDir(t, dir)
	events := recordEvents(t, l)
	if !slices.Contains(l.SecretFiles(), caFile) {
		t.Fatalf("SecretFiles %v does not list the CA file", l.SecretFiles())
	}
	if ps := poolStatus(t, l, "platform"); ps.Leader != c.Platforms[0].Addr {
		t.Fatalf("leader %q, want platform1 %s", ps.Leader, c.Platforms[0].Addr)
	}
	// The LeaderChecks reached the platforms' handlers (over HTTPS: the servers speak nothing else),
	// with the credentials, and platform1 answered 200.
	if probes := c.Platforms[0].Probes(); len(probes) == 0 || probes[0].Status != 200 || probes[0].Authorization != "Basic "+sim.DefaultCredentials {
		t.Fatalf("platform1's LeaderChecks: %+v", probes)
	}
	for i := 0; i < 3; i++ {
		if status, by := get(t, l, "/Thingworx/Things/x"); status != 200 || by != "platform1" {
			t.Fatalf("GET through fairlead: %d from %q, want 200 from platform1", status, by)
		}
		if n := poolStatus(t, l, "platform").Servers[0].Conns; n != 1 {
			t.Fatalf("%d upstream connections after a GET, want 1 kept alive", n)
		}
	}

	// Only the CA file changes: the reload applies it (the file counts in the digest), the servers get
	// new transports (the old keep-alive connection, verified with the old CA, is not reused) and new
	// probes, which now fail.
	mustWriteFile(t, caFile, string(other.ca.CertPEM))
	mustReloadDir(t, l, dir)
	if strings.Contains(logs.all(), "config unchanged") {
		t.Fatal("a reload after replacing the CA file found nothing to do")
	}
	if n := poolStatus(t, l, "platform").Servers[0].Conns; n != 0 {
		t.Errorf("%d upstream connections right after the reload, want 0 (a new transport)", n)
	}
	testkit.Eventually(t, "the leader lost (3 failed LeaderChecks)", 5*time.Second, func() bool { return poolStatus(t, l, "platform").Leader == "" })
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
	// A standby is down once fall LeaderChecks in a row have failed.
	testkit.Eventually(t, "every server down with the certificate error", 5*time.Second, func() bool {
		return !slices.ContainsFunc(poolStatus(t, l, "platform").Servers, func(s admin.ServerStatus) bool {
			return s.State != "down" || s.Available || s.Check == nil || !strings.Contains(s.Check.LastError, certErr)
		})
	})
	ps := poolStatus(t, l, "platform")
	var probes, requests [2]int64
	for i, p := range c.Platforms {
		probes[i], requests[i] = int64(len(p.Probes())), p.Requests()
	}
	start := time.Now()
	if status, _ := get(t, l, "/Thingworx/Things/x"); status != 503 {
		t.Errorf("GET with no verified server: %d, want 503", status)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("503 after %s, want after queue_timeout (300ms)", waited)
	}
	// Once per run of failures, not at every probe; and nothing reached a platform, neither a
	// LeaderCheck nor the GET.
	testkit.Eventually(t, "a few more probes", 5*time.Second, func() bool {
		for i, s := range poolStatus(t, l, "platform").Servers {
			if s.Check.Probes < ps.Servers[i].Check.Probes+3 {
				return false
			}
		}
		return true
	})
	for i, p := range c.Platforms {
		if n, r := int64(len(p.Probes())), p.Requests(); n != probes[i] || r != requests[i] {
			t.Errorf("%s received %d LeaderChecks and %d requests with the wrong CA", p.Name, n-probes[i], r-requests[i])
		}
		if n := strings.Count(logs.all(), "healthcheck: pool platform: "+p.Addr+": TLS"); n != 1 {
			t.Errorf("%s: the TLS failure was logged %d times, want once", p.Name, n)
		}
	}

	mustWriteFile(t, caFile, string(pca.ca.CertPEM))
	mustReloadDir(t, l, dir)
	testkit.Eventually(t, "platform1 elected again", 5*time.Second, func() bool { return poolStatus(t, l, "platform").Leader == c.Platforms[0].Addr })
	if status, by := get(t, l, "/x"); status != 200 || by != "platform1" {
		t.Fatalf("GET: %d from %q", status, by)
	}
}

// insecure_skip_verify = true is warned about at start and at each reload that keeps it; nothing is
// verified (lb/dialer's TestInsecureSkipVerifyDialsAServerOfAnUnknownCAForAnotherName).
func TestUpstreamTLSInsecureSkipVerifyLogsAWarningAtStartAndAtEachReloadThatKeepsIt(t *testing.T) {
	c := tlsSim(t, newTLSEnv(t, "unknown CA").ca, sim.Options{Platforms: 1, NoConnections: true}, "somewhere.else")
	files := platformConfig(c, "", "")
	files["30-tls.toml"] = tlsTable("platform", "insecure_skip_verify = true")
	dir := testkit.WriteFiles(t, files)
	l, logs := startLBDir(t, dir)
	const warning = `level=WARN msg="pool platform: pools.platform.tls.insecure_skip_verify = true`
	if n := strings.Count(logs.all(), warning); n != 1 {
		t.Fatalf("%d warnings at start, want 1; log:\n%s", n, logs.all())
	}
	if status, by := get(t, l, "/x"); status != 200 || by != "platform1" {
		t.Fatalf("GET: %d from %q", status, by)
	}
	mustWriteFile(t, filepath.Join(dir, "40-more.toml"), "[pools.platform]\nresponse_timeout = \"30s\"\n")
	mustReloadDir(t, l, dir)
	if n := strings.Count(logs.all(), warning); n != 2 {
		t.Fatalf("%d warnings after a reload that keeps it, want 2", n)
	}
}

// A handshake that fails (the server's certificate is not the CA's) is a failed dial: every request,
// a POST too, goes to the other server, and the failure counts against the first.
func TestUpstreamTLSFailedHandshakeIsAFailedDialAndEvenAPOSTMovesToAnotherServer(t *testing.T) {
	pca, other := newTLSEnv(t, "platform CA"), newTLSEnv(t, "another CA")
	good := tlsSim(t, pca.ca, sim.Options{Platforms: 1, PlatformNames: []string{"good"}, NoConnections: true}, "127.0.0.1")
	bad := tlsSim(t, other.ca, sim.Options{Platforms: 1, PlatformNames: []string{"bad"}, NoConnections: true}, "127.0.0.1")
	// No active check: both servers are up until live failures take the bad one down, so requests do
	// meet its handshake.
	cfg := fmt.Sprintf("[frontend]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[pools.rr]\nbalance = \"roundrobin\"\n"+
		"servers = [%q, %q]\n[pools.rr.check]\nfall = 100\n[[routes]]\npool = \"rr\"\n", bad.Platforms[0].Addr, good.Platforms[0].Addr)
	l, _ := startLB(t, map[string]string{"10-rr.toml": cfg, "30-tls.toml": tlsTable("rr", fmt.Sprintf("ca_file = %q", pca.writeCA(t, "platform-ca")))})
	for i := 0; i < 6; i++ {
		if r := request(l, "POST", "/Thingworx/Things/x", "once", "Content-Type", "text/plain"); r.err != nil || r.status != 200 || r.by != "good" {
			t.Fatalf("POST %d: %s, want 200 from good", i, r)
		}
	}
	if r := bad.Platforms[0].Requests(); r != 0 {
		t.Errorf("the server whose certificate does not verify received %d requests", r)
	}
	if s := poolStatus(t, l, "rr").Servers[0]; s.Failures == 0 {
		t.Errorf("%s: no failed attempt counted, so no request met its handshake", s.Addr)
	}
}

// WebSocket upgrades to a sticky pool of TLS connection servers: those placed on a server whose
// certificate does not verify fail its handshake (logged) and go to the other; every tunnel echoes and,
// idle, is carried by the event loops (no goroutine relays it).
func TestUpstreamTLSWebSocketUpgradeToATLSConnectionServerPoolEchoes(t *testing.T) {
	cca, other := newTLSEnv(t, "cluster CA"), newTLSEnv(t, "another CA")
	c := tlsSim(t, cca.ca, sim.Options{Platforms: 2, Connections: 1}, "127.0.0.1")
	bad := tlsSim(t, other.ca, sim.Options{Platforms: 1, Connections: 1}, "127.0.0.1")
	caFile := fmt.Sprintf("ca_file = %q", cca.writeCA(t, "cluster-ca"))
	// The sticky pool has the server whose certificate does not verify first and no active check, so
	// that some assets are placed on it: their upgrades fail the handshake and go to the other server.
	extra := fmt.Sprintf("[pools.cxserver]\nservers = [%q, %q]\n[pools.cxserver.check]\npath = \"\"\nfall = 100\n%s\n%s\n",
		bad.Connections[0].Addr, c.Connections[0].Addr, tlsTable("platform", caFile), tlsTable("cxserver", caFile))
	l, logs := startLB(t, cxConfig(c, extra))
	const assets = 8
	for i := 0; i < assets; i++ {
		conn, _ := dialAsset(t, l, fmt.Sprintf("edge-%d", i))
		wsEcho(t, conn, websocket.TextMessage, []byte(fmt.Sprintf("hello over TLS %d", i)))
	}
	if n := pumpGoroutines(); n != 0 {
		t.Errorf("%d goroutines relay %d idle tunnels to a TLS connection server, want 0", n, assets)
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
