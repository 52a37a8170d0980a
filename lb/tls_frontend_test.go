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
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/fasthttp/websocket"
)

// tlsName is the DNS name of the front end's certificate in most tests (the certificates also hold
// 127.0.0.1, the address the clients connect to).
const tlsName = "fairlead.example"

// tlsEnv is a test CA and a directory of certificate files.
type tlsEnv struct {
	ca  *sim.CA
	dir string
}

func newTLSEnv(t testing.TB, caName string) *tlsEnv {
	t.Helper()
	ca, err := sim.NewCA(caName)
	if err != nil {
		t.Fatal(err)
	}
	return &tlsEnv{ca: ca, dir: t.TempDir()}
}

// tlsCert is an issued certificate and where its files are.
type tlsCert struct {
	leaf          *sim.Leaf
	cert          *x509.Certificate
	certFile, key string
}

// issue issues a leaf for names and writes it as dir/file.crt and dir/file.key (replacing any earlier
// files of that name).
func (e *tlsEnv) issue(t testing.TB, file string, names ...string) *tlsCert {
	t.Helper()
	leaf, err := e.ca.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.Write(e.dir, file)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(leaf.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return &tlsCert{leaf: leaf, cert: cert, certFile: certFile, key: keyFile}
}

// writeCA writes the CA certificate as dir/name.crt.
func (e *tlsEnv) writeCA(t testing.TB, name string) string {
	t.Helper()
	path, err := e.ca.WriteCA(e.dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// clientConfig verifies the front end's chain against the CA, for serverName.
func (e *tlsEnv) clientConfig(serverName string) *tls.Config {
	return &tls.Config{RootCAs: e.ca.Pool(), ServerName: serverName}
}

// clientWith is clientConfig(tlsName) presenting dev's certificate whatever CAs the server names as
// acceptable (crypto/tls would otherwise send none when the issuer is not among them).
func (e *tlsEnv) clientWith(dev *tlsCert) *tls.Config {
	cfg := e.clientConfig(tlsName)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &dev.leaf.TLS, nil }
	return cfg
}

// tlsFrontendToml is a config file setting [frontend] tls_listen, tls_cert and tls_key (when cert is
// not nil) and the lines of more (further [frontend] keys, then any [[frontend.certs]] tables).
func tlsFrontendToml(tlsAddr string, cert *tlsCert, more string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[frontend]\ntls_listen = %q\n", tlsAddr)
	if cert != nil {
		fmt.Fprintf(&b, "tls_cert = %q\ntls_key = %q\n", cert.certFile, cert.key)
	}
	b.WriteString(more)
	b.WriteString("\n")
	return b.String()
}

// tlsPlatformLB starts a cluster of two platforms (platform1 leader) and fairlead with a TLS front end
// on a free address, its certificate cert; more is added to the [frontend] of the TLS file. It returns
// the cluster, fairlead, the TLS address and the config directory.
func tlsPlatformLB(t testing.TB, cert *tlsCert, more string) (*sim.Cluster, *LB, string, string) {
	t.Helper()
	c := startCluster(t, 2, 0)
	tlsAddr := testkit.Addr(t)
	files := platformConfig(c, "", "")
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, cert, more)
	dir := testkit.WriteFiles(t, files)
	l, _ := startLBDir(t, dir)
	return c, l, tlsAddr, dir
}

// tlsDial opens a TLS connection to addr and completes the handshake (5 s at most).
func tlsDial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: cfg}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := conn.(*tls.Conn)
	tc.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	return tc, nil
}

// tlsResult is what one request on a new TLS connection gave.
type tlsResult struct {
	status int // 0 when the handshake or the exchange failed
	header http.Header
	body   []byte
	state  tls.ConnectionState
	err    error // the failure, when status is 0
}

// over says whether r is a 200 over want's certificate: "" if so, else what it was.
func (r tlsResult) over(want *tlsCert) string {
	if p := r.state.PeerCertificates; r.status == 200 && len(p) > 0 && bytes.Equal(p[0].Raw, want.cert.Raw) {
		return ""
	} else if len(p) > 0 {
		return fmt.Sprintf("%v over the certificate of %v, serial %s", r, p[0].DNSNames, p[0].SerialNumber)
	}
	return r.String()
}

func (r tlsResult) String() string {
	if r.status == 0 {
		return fmt.Sprintf("no answer: %v", r.err)
	}
	return fmt.Sprintf("%d from %q", r.status, r.header.Get("X-Served-By"))
}

// refused reports whether the attempt failed at the handshake or at the first read with an error other
// than a timeout (a refused client is told so, or cut off, rather than left hanging).
func (r tlsResult) refused() bool {
	if r.status != 0 || r.err == nil {
		return false
	}
	var ne net.Error
	return !(errors.As(r.err, &ne) && ne.Timeout())
}

// tlsRequest sends one request (GET path with headers h) on a new TLS connection to addr and reads the
// answer. The handshake is completed first, then the request written and the answer read: with TLS 1.3
// a server that refuses the client's certificate says so only after the client's handshake returned.
func tlsRequest(addr string, cfg *tls.Config, path string, h http.Header) tlsResult {
	conn, err := tlsDial(addr, cfg)
	if err != nil {
		return tlsResult{err: fmt.Errorf("handshake: %w", err)}
	}
	defer conn.Close()
	r := tlsResult{state: conn.ConnectionState()}
	req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
	req.Host = cfg.ServerName
	if req.Host == "" {
		req.Host = addr
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if err := req.Write(conn); err != nil {
		r.err = fmt.Errorf("writing the request: %w", err)
		return r
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		r.err = fmt.Errorf("reading the answer: %w", err)
		return r
	}
	defer resp.Body.Close()
	if r.body, err = io.ReadAll(resp.Body); err != nil {
		r.err = fmt.Errorf("reading the body: %w", err)
		return r
	}
	r.status, r.header = resp.StatusCode, resp.Header
	return r
}

// dialWSS opens a wss:// tunnel through fairlead's TLS listener and returns it with the name of the
// connection server.
func dialWSS(t testing.TB, tlsAddr string, cfg *tls.Config, path string, h http.Header) (*websocket.Conn, string) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: cfg}
	conn, resp, err := d.Dial("wss://"+tlsAddr+path, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial wss://%s%s: %v (status %d)", tlsAddr, path, err, status)
	}
	return conn, resp.Header.Get("X-Served-By")
}

// wsEcho sends data as one message of kind and checks that it comes back intact.
func wsEcho(t testing.TB, conn *websocket.Conn, kind int, data []byte) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if err := conn.WriteMessage(kind, data); err != nil {
		t.Fatalf("writing a %d-byte message: %v", len(data), err)
	}
	gotKind, got, err := conn.ReadMessage()
	if err != nil {
		t.Fatalf("reading the echo of a %d-byte message: %v", len(data), err)
	}
	if gotKind != kind || !bytes.Equal(got, data) {
		t.Fatalf("a message of type %d and %d bytes came back as type %d with %d bytes", kind, len(data), gotKind, len(got))
	}
}

// 1. HTTPS through fairlead.

func TestTLSGetReachesTheLeaderOverAVerifiedChainWithForwardedProtoHTTPS(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c, _, tlsAddr, _ := tlsPlatformLB(t, cert, "")

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
		if got := hostileEchoed(r.body)["x-forwarded-proto"]; len(got) != 1 || got[0] != "https" {
			t.Errorf("over TLS (client sent X-Forwarded-Proto %q) the platform saw X-Forwarded-Proto %q, want [https]", claim, got)
		}
	}
	// (Over plain HTTP it is http: hostile_test.go's TestHostileXForwardedHeadersFromAnUntrustedClientAreReplaced.)
}

// 2. WebSocket tunnels over TLS.

// tlsCxLB starts a cluster (2 platforms, 2 connection servers) and fairlead with the sticky cxserver
// pool (cxConfig, extra merged over it) and a TLS front end; it returns them, the test CA, the TLS
// address, the front end's certificate and the config directory.
func tlsCxLB(t *testing.T, extra string) (*sim.Cluster, *LB, *tlsEnv, string, *tlsCert, string) {
	t.Helper()
	env := newTLSEnv(t, "fairlead test CA")
	c := startCluster(t, 2, 2)
	tlsAddr, cert := testkit.Addr(t), env.issue(t, "frontend", tlsName, "127.0.0.1")
	files := cxConfig(c, extra)
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, cert, "")
	dir := testkit.WriteFiles(t, files)
	l, _ := startLBDir(t, dir)
	return c, l, env, tlsAddr, cert, dir
}

// pumpGoroutines counts the goroutines of streamed tunnels (tunnel's pump, two per streamed tunnel):
// none when every tunnel is on the event loops.
func pumpGoroutines() int {
	n := 0
	for _, g := range testkit.Goroutines() {
		if strings.Contains(g, "tunnel.(*Engine).pump(") {
			n++
		}
	}
	return n
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
		plain, want, _ := dialWS(t, l, "/Thingworx/WS", assetHeader(asset))
		plain.Close()
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
	if n := c.Platforms[0].Requests() + c.Platforms[1].Requests(); n != 0 {
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

// reloadDir loads the config directory again and reloads fairlead with it; a config that does not load
// is a failed reload too (its error is returned).
func reloadDir(l *LB, dir string) error {
	cfg, err := config.Load(dir)
	if err != nil {
		return err
	}
	return l.Reload(cfg)
}

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
		if err := errors.Join(os.WriteFile(v2.certFile, bad.cert, 0o644), os.WriteFile(v2.key, bad.key, 0o600)); err != nil {
			t.Fatal(err)
		}
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
	c, l, tlsAddr, dir := tlsPlatformLB(t, cert, fmt.Sprintf("client_ca = %q\nclient_auth = \"require\"\n", clientCA))
	devA, devB := caA.issue(t, "device-a", "device-a"), caB.issue(t, "device-b", "device-b")
	if r := tlsRequest(tlsAddr, env.clientWith(devA), "/", nil); r.status != 200 {
		t.Fatalf("a client of CA A before the reload: %v, want 200", r)
	}
	handshakeFailures := func() float64 { return hostileMetric(t, l, "fairlead_tls_handshake_failures_total") }
	before, failures := hostilePlatformRequests(c), handshakeFailures()
	if r := tlsRequest(tlsAddr, env.clientWith(devB), "/", nil); !r.refused() {
		t.Fatalf("a client of CA B before the reload: %v, want refused", r)
	}
	if err := os.WriteFile(clientCA, caB.ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
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
	if got := hostilePlatformRequests(c) - before; got != 0 {
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
	c, l, tlsAddr, _ := tlsPlatformLB(t, cert, "redirect_https = true\n")
	_, plainPort, _ := net.SplitHostPort(l.Addr())
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	before := hostilePlatformRequests(c)
	raw := "GET /Thingworx/x?y=1 HTTP/1.1\r\nHost: example.com:" + plainPort + "\r\n\r\n"
	want := "https://example.com:" + tlsPort + "/Thingworx/x?y=1"
	if r := frontendtest.AnswerTo(t, l.Addr(), raw, frontendtest.AnswerWait); r.Status != http.StatusPermanentRedirect || r.Header.Get("Location") != want {
		t.Errorf("plain GET: %s Location %q, want 308 to %s", r, r.Header.Get("Location"), want)
	}
	if got := hostilePlatformRequests(c) - before; got != 0 {
		t.Errorf("redirected requests were forwarded: %d", got)
	}
	// HTTPS itself is served.
	if r := tlsRequest(tlsAddr, env.clientConfig("example.com"), "/Thingworx/x?y=1", nil); r.status != 200 || r.header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Errorf("HTTPS with redirect_https: %v, want 200 from the leader", r)
	}
}

func TestTLSEmptyListenServesHTTPSOnly(t *testing.T) {
	env := newTLSEnv(t, "fairlead test CA")
	cert := env.issue(t, "frontend", tlsName, "127.0.0.1")
	c := startCluster(t, 2, 0)
	plainAddr, tlsAddr := testkit.Addr(t), testkit.Addr(t)
	files := platformConfig(c, "", "")
	// The base sets a plain listener; the TLS file turns it off.
	files["10-base.toml"] = strings.Replace(files["10-base.toml"], `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", plainAddr), 1)
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, cert, "listen = \"\"\n")
	startLB(t, files)
	if r := tlsRequest(tlsAddr, env.clientConfig(tlsName), "/", nil); r.status != 200 || r.header.Get("X-Served-By") != c.Platforms[0].Name {
		t.Errorf("HTTPS with listen = \"\": %v, want 200 from the leader", r)
	}
	if conn, err := net.DialTimeout("tcp", plainAddr, time.Second); err == nil {
		conn.Close()
		t.Errorf("with listen = \"\" something listens on the plain address %s set by an earlier file", plainAddr)
	}
	// (Nor is plain HTTP served on the TLS port: lb/frontend's TestTLSHandshakeFailuresAreCountedAndReachNoHandler.)
}
