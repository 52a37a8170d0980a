package lb

// TLS termination in the front end (issue #11) through a whole fairlead: HTTPS reaching the leader
// (X-Forwarded-Proto https), wss tunnels over the TLS listener, reloads swapping the certificate or the
// client CA (a bad certificate keeping the old), redirect_https and listen = "". What the front end's
// TLS accepts (versions, ALPN, SNI, client_auth) is lb/frontend's tls_config_test.go; the config errors
// are lb/config's tls_test.go. Every certificate is made at run time by a test CA (bench/sim/certs.go)
// and written to t.TempDir(); the TLS listener's address is chosen free before the config names it.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/fasthttp/websocket"
)

// 1. HTTPS through fairlead.

func TestTLSGetReachesTheLeaderOverAVerifiedChainWithForwardedProtoHTTPS(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c := startCluster(t, 2, 0)
	_, _, tlsAddr, _ := startTLSLB(t, platformConfig(c, "", ""), cert, "")

	// A standard client: net/http with the test CA as its only root.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: env.clientConfig(tlsName)}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + tlsAddr + "/Thingworx/Things")
	if err != nil {
		t.Fatalf("HTTPS GET: %v", err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Fatalf("HTTPS GET: %d from %q, want 200 from the leader %s", resp.StatusCode, resp.Header.Get("X-Served-By"), c.Platforms[0].Name)
	}
	if resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 || !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, cert.cert.Raw) {
		t.Fatalf("the answer did not come over a chain verified against the test CA ending in the configured certificate: %+v", resp.TLS)
	}

	// The platform sees X-Forwarded-Proto: https, once, even when the client claims http.
	for _, claim := range []string{"", "http"} {
		h := http.Header{}
		if claim != "" {
			h.Set("X-Forwarded-Proto", claim)
		}
		r := tlsRequest(tlsAddr, env.clientConfig(tlsName), "/echo-headers", h)
		if r.status != 200 {
			t.Fatalf("GET /echo-headers over TLS: %v", r)
		}
		if got := echoedHeaders(r.body)["x-forwarded-proto"]; len(got) != 1 || got[0] != "https" {
			t.Errorf("over TLS (client sent X-Forwarded-Proto %q) the platform saw X-Forwarded-Proto %q, want [https]", claim, got)
		}
	}
	// (Over plain HTTP it is http: proxy_test.go's TestProxyPassesARequestOnWithoutHopByHopFieldsAndWithXForwarded.)
}

// 2. WebSocket tunnels over TLS.

// tlsCxLB starts a cluster (2 platforms, 2 connection servers) and fairlead with the sticky cxserver
// pool (cxConfig, extra merged over it) and a TLS front end; it returns them, the test CA, the TLS
// address, the front end's certificate and the config directory.
func tlsCxLB(t *testing.T, extra string) (*sim.Cluster, *LB, *tlsEnv, string, *tlsCert, string) {
	t.Helper()
	env, c := newTLSEnv(t, "fairlead test CA"), startCluster(t, 2, 2)
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	l, _, tlsAddr, dir := startTLSLB(t, cxConfig(c, extra), cert, "")
	return c, l, env, tlsAddr, cert, dir
}

// wss:// tunnels reach a connection server, never a platform, and echo 1 MiB messages; an asset lands
// on the connection server its ws:// connection lands on, at every reconnect; 40 idle wss tunnels are
// carried by the tunnel engine's event loops (no goroutine relays any of them) and each still echoes;
// when their server goes down, its tunnels close and their assets reconnect to the other one.
func TestTLSWebSocketTunnelsEchoStickRideTheEventLoopsAndMoveWhenTheirServerIsDown(t *testing.T) {
	c, l, env, tlsAddr, _, _ := tlsCxLB(t, "")
	cfg := env.clientConfig(tlsName)

	conn, by := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader("big"))
	if !strings.HasPrefix(by, "cx") {
		t.Fatalf("the wss tunnel was served by %q, want a connection server", by)
	}
	for i := 0; i < 4; i++ {
		msg := make([]byte, 1<<20)
		rand.Read(msg) //nolint:errcheck
		kind := websocket.BinaryMessage
		if i%2 == 1 {
			kind, msg = websocket.TextMessage, bytes.Repeat([]byte{'a' + byte(i)}, 1<<20)
		}
		wsEcho(t, conn, kind, msg)
	}
	conn.Close()
	for _, asset := range []string{"pump-1", "pump-2", "valve-7", "meter-9"} {
		want := landsOn(t, l, asset)
		for i := 0; i < 20; i++ {
			conn, by := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader(asset))
			conn.Close()
			if by != want {
				t.Fatalf("%s: wss reconnect %d landed on %s; ws:// and the earlier connections landed on %s", asset, i, by, want)
			}
		}
	}

	victim, survivor := c.Connections[0], c.Connections[1]
	var conns, onVictim []*websocket.Conn
	var assets []string // those on the victim
	for i := range 40 {
		a := fmt.Sprintf("edge-%d", i)
		conn, by := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader(a))
		defer conn.Close()
		wsEcho(t, conn, websocket.TextMessage, []byte("first"))
		conns = append(conns, conn)
		if by == victim.Name {
			onVictim, assets = append(onVictim, conn), append(assets, a)
		}
	}
	if n := pumpGoroutines(); n != 0 {
		t.Fatalf("%d goroutines relay the 40 idle wss tunnels, want 0", n)
	}
	for i, conn := range conns {
		wsEcho(t, conn, websocket.BinaryMessage, bytes.Repeat([]byte{byte(i)}, 100<<10))
	}
	if n := platformRequests(c); n != 0 {
		t.Errorf("the platforms got %d requests from WebSocket tunnels", n)
	}
	if len(onVictim) == 0 {
		t.Fatalf("none of 40 assets landed on %s", victim.Name)
	}

	victim.SetHealthy(false) // alive, but its health check fails: fairlead must close its tunnels
	var wg sync.WaitGroup
	for _, conn := range onVictim {
		wg.Go(func() {
			conn.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
			_, _, err := conn.ReadMessage()
			var ne net.Error
			if err == nil {
				t.Error("a wss tunnel to the down server still delivers messages")
			} else if errors.As(err, &ne) && ne.Timeout() {
				t.Error("a wss tunnel to the down server is still open 10 s later")
			}
		})
	}
	wg.Wait()
	testkit.Eventually(t, "fairlead to see the server down", 3*time.Second, func() bool { return !serverAvailable(l, "cxserver", victim.Addr) })
	for _, a := range assets {
		conn, by := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader(a))
		wsEcho(t, conn, websocket.TextMessage, []byte("moved"))
		conn.Close()
		if by != survivor.Name {
			t.Fatalf("%s reconnected over wss to %s, want the survivor %s", a, by, survivor.Name)
		}
	}
}

// A wss tunnel silent for tunnel_idle_timeout is closed by fairlead, while a busy one lives on.
func TestTLSWebSocketIdleTimeoutClosesASilentTunnel(t *testing.T) {
	_, _, env, tlsAddr, _, _ := tlsCxLB(t, "[pools.cxserver]\ntunnel_idle_timeout = \"300ms\"\n")
	cfg := env.clientConfig(tlsName)
	busy, _ := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader("busy"))
	defer busy.Close()
	quiet, _ := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader("quiet"))
	defer quiet.Close()
	closed := make(chan error, 1)
	go func() {
		quiet.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		_, _, err := quiet.ReadMessage()
		closed <- err
	}()
	for {
		wsEcho(t, busy, websocket.TextMessage, []byte("ping")) // the busy tunnel outlives the quiet one
		select {
		case err := <-closed:
			if err == nil || strings.Contains(err.Error(), "timeout") {
				t.Fatalf("silent wss tunnel: %v, want it closed by fairlead after tunnel_idle_timeout", err)
			}
			wsEcho(t, busy, websocket.TextMessage, []byte("still here"))
			return
		default:
		}
	}
}

// 3. Reload.

// keepAliveGet sends GET path on a client's keep-alive TLS connection and reads the answer, which must
// leave the connection open.
func keepAliveGet(conn *tls.Conn, br *bufio.Reader, path string) (int, error) {
	conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, tlsName); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.Close {
		return resp.StatusCode, errors.New("fairlead closed the keep-alive connection")
	}
	return resp.StatusCode, nil
}

// A reload after new certificate files were written at the same paths gives new connections the new
// certificate (and its new name) while an open tunnel and a keep-alive connection serve on. A reload
// whose certificate files are bad (lb/config's TestFrontTLSErrorsNameTheFileAndTheKey: the error names
// the file and the key) fails, and the running certificate stays: new connections get it and are
// served, and the tunnel lives on.
func TestTLSReloadSwapsTheCertificateWithoutDroppingConnectionsAndABadOneKeepsTheOld(t *testing.T) {
	_, l, env, tlsAddr, v1, dir := tlsCxLB(t, "")
	cfg := env.clientConfig(tlsName)
	if r := tlsRequest(tlsAddr, cfg, "/", nil); r.over(v1) != "" {
		t.Fatalf("before the reload: %s, want 200 over the first certificate", r.over(v1))
	}
	tunnel, _ := dialWSS(t, tlsAddr, cfg, "/Thingworx/WS", assetHeader("survivor"))
	defer tunnel.Close()
	wsEcho(t, tunnel, websocket.TextMessage, []byte("before"))
	kc, err := tlsDial(tlsAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kbr := bufio.NewReader(kc)
	if code, err := keepAliveGet(kc, kbr, "/before"); code != 200 || err != nil {
		t.Fatalf("keep-alive request before the reload: %d %v", code, err)
	}

	// New certificate files, same paths: a new serial and a new name.
	v2 := env.issue(t, "frontend", tlsName, "v2."+tlsName, "127.0.0.1")
	if v2.cert.SerialNumber.Cmp(v1.cert.SerialNumber) == 0 {
		t.Fatal("the test CA issued the same serial twice")
	}
	if err := reloadDir(l, dir); err != nil {
		t.Fatalf("reload with a new certificate: %v", err)
	}
	for _, name := range []string{tlsName, "v2." + tlsName} {
		if r := tlsRequest(tlsAddr, env.clientConfig(name), "/", nil); r.over(v2) != "" {
			t.Errorf("a new connection for %s after the reload: %s, want 200 over the new certificate (serial %s)", name, r.over(v2), v2.cert.SerialNumber)
		}
	}
	wsEcho(t, tunnel, websocket.TextMessage, []byte("after the reload"))
	wsEcho(t, tunnel, websocket.BinaryMessage, bytes.Repeat([]byte{7}, 1<<20))
	if code, err := keepAliveGet(kc, kbr, "/after"); code != 200 || err != nil {
		t.Errorf("keep-alive request after the reload: %d %v, want 200 on the same connection", code, err)
	}

	other, err := env.ca.Issue(tlsName, "127.0.0.1") // a valid certificate whose key is not v2's
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name      string
		cert, key []byte
	}{
		{"unparsable certificate", []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"), v2.leaf.KeyPEM},
		{"not PEM at all", []byte("garbage\n"), v2.leaf.KeyPEM},
		{"unparsable key", v2.leaf.CertPEM, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
		{"key not matching the certificate", other.CertPEM, v2.leaf.KeyPEM},
	} {
		mustWriteFile(t, v2.certFile, string(bad.cert))
		mustWriteFile(t, v2.key, string(bad.key))
		if err := reloadDir(l, dir); err == nil {
			t.Fatalf("%s: the reload succeeded, want it to fail", bad.name)
		}
		if r := tlsRequest(tlsAddr, cfg, "/", nil); r.over(v2) != "" {
			t.Errorf("%s: a new connection after the failed reload: %s, want 200 over the previous certificate", bad.name, r.over(v2))
		}
		wsEcho(t, tunnel, websocket.TextMessage, []byte("still here"))
	}
}

// A reload after replacing the client_ca file applies it; refused handshakes count in
// fairlead_tls_handshake_failures_total. (Which clients client_auth refuses: lb/frontend's
// tls_config_test.go.)
func TestTLSReloadReplacesTheClientCA(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	caA, caB := newTLSEnv(t, "clients A"), newTLSEnv(t, "clients B")
	clientCA := caA.writeCA(t, "clients-ca")
	c := startCluster(t, 2, 0)
	l, _, tlsAddr, dir := startTLSLB(t, platformConfig(c, "", ""), cert, fmt.Sprintf("client_ca = %q\nclient_auth = \"require\"\n", clientCA))
	devA, devB := caA.issue(t, "device-a", "device-a"), caB.issue(t, "device-b", "device-b")
	if r := tlsRequest(tlsAddr, env.clientWith(devA), "/", nil); r.status != 200 {
		t.Fatalf("a client of CA A before the reload: %v, want 200", r)
	}
	handshakeFailures := func() float64 { return opMetric(t, l.AdminAddr(), "", "fairlead_tls_handshake_failures_total") }
	before, failures := platformRequests(c), handshakeFailures()
	if r := tlsRequest(tlsAddr, env.clientWith(devB), "/", nil); !r.refused() {
		t.Fatalf("a client of CA B before the reload: %v, want refused", r)
	}
	mustWriteFile(t, clientCA, string(caB.ca.CertPEM))
	if err := reloadDir(l, dir); err != nil {
		t.Fatalf("reload with a new client_ca: %v", err)
	}
	if r := tlsRequest(tlsAddr, env.clientWith(devA), "/", nil); !r.refused() {
		t.Errorf("a client of CA A after the reload: %v, want refused", r)
	}
	var got float64
	if !testkit.Within(3*time.Second, func() bool { got = handshakeFailures(); return got >= failures+2 }) {
		t.Errorf("fairlead_tls_handshake_failures_total went from %v to %v after 2 refused handshakes", failures, got)
	}
	if got := platformRequests(c) - before; got != 0 {
		t.Errorf("refused clients reached the platforms: %d requests", got)
	}
	if r := tlsRequest(tlsAddr, env.clientWith(devB), "/", nil); r.status != 200 {
		t.Errorf("a client of CA B after the reload: %v, want 200", r)
	}
}

// 4. Redirect to HTTPS; HTTPS only. (The Location RedirectHTTPS writes — with or without the Host's
// port, the absolute form's path, the port left out for 443, an IPv6 host, no host — is lb/frontend's
// TestRedirectHTTPSSendsTheSameURIToTheTLSPort.)

func TestTLSRedirectHTTPSSendsPlainRequestsToTheTLSPort(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "example.com", "127.0.0.1")
	c := startCluster(t, 2, 0)
	l, _, tlsAddr, _ := startTLSLB(t, platformConfig(c, "", ""), cert, "redirect_https = true\n")
	_, plainPort, _ := net.SplitHostPort(l.Addr())
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	before := platformRequests(c)
	raw := "GET /Thingworx/x?y=1 HTTP/1.1\r\nHost: example.com:" + plainPort + "\r\n\r\n"
	want := "https://example.com:" + tlsPort + "/Thingworx/x?y=1"
	if r := frontendtest.AnswerTo(t, l.Addr(), raw, frontendtest.AnswerWait); r.Status != http.StatusPermanentRedirect || r.Header.Get("Location") != want {
		t.Errorf("plain GET: %s Location %q, want 308 to %s", r, r.Header.Get("Location"), want)
	}
	if got := platformRequests(c) - before; got != 0 {
		t.Errorf("redirected requests were forwarded: %d", got)
	}
	// HTTPS itself is served.
	if r := tlsRequest(tlsAddr, env.clientConfig("example.com"), "/Thingworx/x?y=1", nil); r.status != 200 || r.by != c.Platforms[0].Name {
		t.Errorf("HTTPS with redirect_https: %v, want 200 from the leader", r)
	}
}

func TestTLSEmptyListenServesHTTPSOnly(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c := startCluster(t, 2, 0)
	plainAddr, files := testkit.Addr(t), platformConfig(c, "", "")
	// The base sets a plain listener; the TLS file turns it off.
	files["10-base.toml"] = strings.Replace(files["10-base.toml"], `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", plainAddr), 1)
	_, _, tlsAddr, _ := startTLSLB(t, files, cert, "listen = \"\"\n")
	if r := tlsRequest(tlsAddr, env.clientConfig(tlsName), "/", nil); r.status != 200 || r.by != c.Platforms[0].Name {
		t.Errorf("HTTPS with listen = \"\": %v, want 200 from the leader", r)
	}
	if conn, err := net.DialTimeout("tcp", plainAddr, time.Second); err == nil {
		conn.Close()
		t.Errorf("with listen = \"\" something listens on the plain address %s set by an earlier file", plainAddr)
	}
	// (Nor is plain HTTP served on the TLS port: lb/frontend's TestTLSHandshakeFailuresAreCountedAndReachNoHandler.)
}
