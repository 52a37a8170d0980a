package lb

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fasthttp/websocket"
)

// startCluster starts a simulated cluster of n platform servers (platform1 leader) and m connection
// servers, closed at the end of the test.
func startCluster(t testing.TB, n, m int) *sim.Cluster {
	t.Helper()
	return testkit.StartCluster(t, sim.Options{Platforms: n, Connections: m, Logf: func(string, ...any) {}})
}

// fastChecks sets leader-check settings short enough for tests in the check table: a switch takes three
// fast intervals.
func fastChecks(check *testkit.Table) *testkit.Table {
	return check.Set("interval", 150*time.Millisecond).Set("interval_max", 200*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", 300*time.Millisecond).Set("fall", 3)
}

// listenAnywhere sets the front end and the admin listeners of conf to ports of the kernel's choosing.
func listenAnywhere(conf *testkit.Config) {
	conf.Table("frontend").Set("listen", "127.0.0.1:0")
	conf.Table("admin").Set("listen", "127.0.0.1:0")
}

// poolConf is the one config builder of lb's tests: a config with pool NAME of balance over servers
// and a route to it (routed true: catch-all; the caller narrows it), returned with the pool's table and
// its [check] table for the test's keys. listen puts the front end and the admin listener on ports of
// the kernel's choosing (false for a file merged over one that does).
func poolConf(name, balance string, servers []string, listen bool) (conf *testkit.Config, pool, check, route *testkit.Table) {
	conf = new(testkit.Config)
	if listen {
		listenAnywhere(conf)
	}
	pool = conf.Table("pools."+name).Set("balance", balance).Set("servers", servers)
	check = pool.Table("pools." + name + ".check")
	return conf, pool, check, conf.Array("routes").Set("pool", name)
}

// platformConfig is a config with one leader pool over the cluster's platform servers. extraPool and
// extraCheck override keys of the [pools.platform] and [pools.platform.check] tables: they go into a
// second file, merged over the first as conf.d files are.
func platformConfig(c *sim.Cluster, extraPool, extraCheck string) map[string]string {
	base, pool, check, _ := poolConf("platform", "leader", testkit.PlatformAddrs(c), true)
	pool.Set("queue_timeout", 2*time.Second)
	fastChecks(check.Set("credentials", sim.DefaultCredentials))
	override := fmt.Sprintf("[pools.platform]\n%s\n[pools.platform.check]\n%s\n", extraPool, extraCheck)
	return map[string]string{"10-base.toml": base.String(), "20-override.toml": override}
}

// minimalConfig is the smallest valid config (as lb/config's tests have it).
const minimalConfig = `
[pools.platform]
servers = ["127.0.0.1:9081", "127.0.0.1:9082"]
[[routes]]
pool = "platform"
`

// logSink collects log lines so tests can assert on them (and keep the output quiet).
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// startLB loads the config files and starts fairlead on them, stopped at the end of the test.
func startLB(t testing.TB, files map[string]string) (*LB, *logSink) {
	t.Helper()
	return startLBDir(t, testkit.WriteFiles(t, files))
}

// startLBDir is startLB on a config directory the test keeps (to edit it and reload).
func startLBDir(t testing.TB, dir string) (*LB, *logSink) {
	t.Helper()
	return startLBOpts(t, dir, Options{})
}

// startLBOpts is startLBDir with options; the log is the test's unless o has a Logf.
func startLBOpts(t testing.TB, dir string, o Options) (*LB, *logSink) {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	if o.Logf == nil {
		o.Logf = logs.logf
	}
	l := New(cfg, o)
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if t.Failed() {
			t.Logf("fairlead log:\n%s", logs.all())
		}
	})
	return l, logs
}

var testClient = &http.Client{Timeout: 10 * time.Second}

// reply is what a client got for one request through fairlead.
type reply struct {
	status int
	proto  string // HTTP/1.1, HTTP/2.0
	by     string // X-Served-By
	header http.Header
	body   string
	err    error
}

func (r reply) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d from %q (%q)", r.status, r.by, strings.TrimSpace(r.body))
}

// request sends method path to fairlead with testClient, with body ("" for none; else with a
// Content-Length) and header pairs (name, value, ...), and reads the whole answer. Unlike testkit.Do
// it never fails the test, so that a goroutine may call it: a failure to send or to read is r.err.
func request(l *LB, method, path, body string, hdr ...string) reply {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+l.Addr()+path, rd)
	if err != nil {
		return reply{err: err}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return replyOf(testClient.Do(req))
}

// replyOf reads and closes the answer of a client's Do.
func replyOf(resp *http.Response, err error) reply {
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, proto: resp.Proto, by: resp.Header.Get("X-Served-By"), header: resp.Header, body: string(b), err: err}
}

// inBackground is request in a goroutine of its own; the reply arrives on the channel.
func inBackground(l *LB, method, path, body string, hdr ...string) <-chan reply {
	ch := make(chan reply, 1)
	go func() { ch <- request(l, method, path, body, hdr...) }()
	return ch
}

// replied reports whether a background request has its reply (without waiting for it).
func replied(ch <-chan reply) bool { return len(ch) > 0 }

// awaitReply waits for a background reply (bounded by the test client's timeout).
func awaitReply(t *testing.T, ch <-chan reply) reply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hang):
		t.Fatalf("no reply after %s", hang)
		return reply{}
	}
}

// mustServe fails the test unless the reply is a 200 from want ("" for any server) and returns the
// server's name.
func mustServe(t *testing.T, what string, r reply, want string) string {
	t.Helper()
	if r.err != nil || r.status != 200 || want != "" && r.by != want {
		w := want
		if w == "" {
			w = "any server"
		}
		t.Fatalf("%s: got %s, want 200 from %s", what, r, w)
	}
	return r.by
}

// concurrentGets sends n GETs of path at once in the background, each on a connection of its own; the
// function returned waits for them and counts the answers by "status X-Served-By".
func concurrentGets(t *testing.T, l *LB, path string, n int) func() map[string]int {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var (
		mu   sync.Mutex
		byOf = map[string]int{}
		wg   sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			r := replyOf(client.Get("http://" + l.Addr() + path))
			if r.err != nil {
				t.Error(r.err)
				return
			}
			mu.Lock()
			byOf[fmt.Sprint(r.status, " ", r.by)]++
			mu.Unlock()
		})
	}
	return func() map[string]int {
		wg.Wait()
		client.CloseIdleConnections()
		return byOf
	}
}

// get sends GET path to fairlead and returns the status and the X-Served-By header.
func get(t *testing.T, l *LB, path string) (int, string) {
	t.Helper()
	r := request(l, "GET", path, "")
	if r.err != nil {
		t.Fatalf("GET %s: %v", path, r.err)
	}
	return r.status, r.by
}

// opAdmin sends method path to the admin listener at addr (host:port) with the Authorization header
// auth ("" for none) and returns the status, the headers and the body.
func opAdmin(t *testing.T, addr, method, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	var hdr []string
	if auth != "" {
		hdr = []string{"Authorization", auth}
	}
	resp, body := testkit.Do(t, testClient, method, "http://"+addr+path, nil, hdr...)
	return resp.StatusCode, resp.Header, body
}

// adminPage returns the body of GET path on the admin listener at addr, sent with auth; the answer must
// be a 200.
func adminPage(t testing.TB, addr, path, auth string) string {
	t.Helper()
	var hdr []string
	if auth != "" {
		hdr = []string{"Authorization", auth}
	}
	resp, body := testkit.Do(t, testClient, http.MethodGet, "http://"+addr+path, nil, hdr...)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return string(body)
}

// apiStatus reads GET /api/status on the admin listener at addr with auth, as an operator's tools do.
func apiStatus(t *testing.T, addr, auth string) admin.Status {
	t.Helper()
	var st admin.Status
	if err := json.Unmarshal([]byte(adminPage(t, addr, "/api/status", auth)), &st); err != nil {
		t.Fatalf("GET /api/status: %v", err)
	}
	return st
}

// findPool returns the entry of pool in l.Status(), and whether it is there.
func findPool(l *LB, pool string) (admin.PoolStatus, bool) {
	for _, p := range l.Status().Pools {
		if p.Name == pool {
			return p, true
		}
	}
	return admin.PoolStatus{}, false
}

// poolStatus returns the /status entry of pool.
func poolStatus(t *testing.T, l *LB, pool string) admin.PoolStatus {
	t.Helper()
	p, ok := findPool(l, pool)
	if !ok {
		t.Fatalf("/status does not list pool %s", pool)
	}
	return p
}

// poolLeader is the leader /status names for pool ("" for none).
func poolLeader(l *LB, pool string) string {
	p, _ := findPool(l, pool)
	return p.Leader
}

// listedServers returns the addresses /status lists for pool.
func listedServers(l *LB, pool string) []string {
	var addrs []string
	p, _ := findPool(l, pool)
	for _, s := range p.Servers {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// serverStatus returns the /status entry of the server at addr in pool; ok is false if the pool does
// not list it.
func serverStatus(l *LB, pool, addr string) (ss admin.ServerStatus, ok bool) {
	p, _ := findPool(l, pool)
	for _, s := range p.Servers {
		if s.Addr == addr {
			return s, true
		}
	}
	return admin.ServerStatus{}, false
}

// mustServerStatus is serverStatus for a server that must be listed.
func mustServerStatus(t *testing.T, l *LB, pool, addr string) admin.ServerStatus {
	t.Helper()
	ss, ok := serverStatus(l, pool, addr)
	if !ok {
		t.Fatalf("/status does not list %s in pool %s", addr, pool)
	}
	return ss
}

// serverAvailable reports whether /status shows the server at addr of pool as available.
func serverAvailable(l *LB, pool, addr string) bool {
	ss, _ := serverStatus(l, pool, addr)
	return ss.Available
}

// metricsAt returns the text of GET /metrics on the admin listener at addr, scraped with auth.
func metricsAt(t testing.TB, addr, auth string) string {
	t.Helper()
	return adminPage(t, addr, "/metrics", auth)
}

// scrapeMetrics returns the text of GET /metrics on l's admin listener.
func scrapeMetrics(t testing.TB, l *LB) string {
	t.Helper()
	return metricsAt(t, l.AdminAddr(), "")
}

// metricValue returns the value of series (a name with its labels, exactly as /metrics writes them) in
// page, and whether page has it.
func metricValue(page, series string) (float64, bool) {
	for _, ln := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(ln, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// mustMetric is metricValue that fails the test when the series is missing.
func mustMetric(t *testing.T, page, series string) float64 {
	t.Helper()
	v, ok := metricValue(page, series)
	if !ok {
		t.Fatalf("/metrics has no %s:\n%s", series, page)
	}
	return v
}

// opMetric returns the value of the /metrics series named exactly series (name and labels), or -1 if
// there is none (or its value does not parse); the scrape goes to addr with auth.
func opMetric(t testing.TB, addr, auth, series string) float64 {
	t.Helper()
	if v, ok := metricValue(metricsAt(t, addr, auth), series); ok {
		return v
	}
	return -1
}

// wantMetrics fails the test unless /metrics has every line of want, exactly.
func wantMetrics(t *testing.T, l *LB, want ...string) {
	t.Helper()
	text := scrapeMetrics(t, l)
	lines := strings.Split(text, "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			name, _, _ := strings.Cut(w, "{")
			var near []string
			for _, ln := range lines {
				if strings.HasPrefix(ln, name) {
					near = append(near, ln)
				}
			}
			t.Errorf("/metrics has no line %q; lines of %s:\n%s", w, name, strings.Join(near, "\n"))
		}
	}
}

// platformRequests is the number of ordinary requests the platforms of c received, all together.
func platformRequests(c *sim.Cluster) int64 {
	var n int64
	for _, p := range c.Platforms {
		n += p.Requests()
	}
	return n
}

// echoedHeaders parses an /echo-headers body: lower-case header name → values, in order.
func echoedHeaders(body string) map[string][]string {
	got := map[string][]string{}
	for _, line := range strings.Split(body, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			k = strings.ToLower(k)
			got[k] = append(got[k], v)
		}
	}
	return got
}

// mergeFiles returns files with the files of each of more added (later names merge over earlier ones).
func mergeFiles(files map[string]string, more ...map[string]string) map[string]string {
	for _, m := range more {
		maps.Copy(files, m)
	}
	return files
}

// mustWriteFile writes content to path (mode 0600), failing the test on an error.
func mustWriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reloadDir loads the config directory again and reloads fairlead with it; a config that does not load
// is a failed reload too (its error is returned).
func reloadDir(l *LB, dir string) error {
	cfg, err := config.Load(dir)
	if err != nil {
		return err
	}
	return l.Reload(cfg)
}

// mustReloadDir is reloadDir for a reload that must succeed.
func mustReloadDir(t testing.TB, l *LB, dir string) {
	t.Helper()
	if err := reloadDir(l, dir); err != nil {
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

// count counts the events of kind about server.
func (el *eventLog) count(kind event.Kind, server string) int {
	el.mu.Lock()
	defer el.mu.Unlock()
	n := 0
	for _, e := range el.ev {
		if e.Kind == kind && e.Server == server {
			n++
		}
	}
	return n
}

// probesSince counts the LeaderCheck answers p gave after since: the 200s if passed, else the others.
func probesSince(p *sim.Platform, since time.Time, passed bool) int {
	n := 0
	for _, pr := range p.Probes() {
		if pr.At.After(since) && (pr.Status == 200) == passed {
			n++
		}
	}
	return n
}

func mustSetState(t *testing.T, p *sim.Platform, s sim.State) {
	t.Helper()
	if err := p.SetState(s); err != nil {
		t.Fatal(err)
	}
}

// logLine returns the first log line containing every part, or "".
func logLine(logs *logSink, parts ...string) string {
	for _, line := range strings.Split(logs.all(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line
		}
	}
	return ""
}

// TLS: a test CA, the front end's certificate and its clients (tls_frontend_test.go, tls_upstream_test.go,
// relays_test.go, h2_test.go, hostile_helpers_test.go's rawFront).

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

// startTLSLB starts fairlead on files with a TLS front end on a free address, its certificate cert
// (more: further [frontend] keys), and returns fairlead, its log, the TLS address and the config
// directory.
func startTLSLB(t testing.TB, files map[string]string, cert *tlsCert, more string) (*LB, *logSink, string, string) {
	t.Helper()
	tlsAddr := testkit.Addr(t)
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, cert, more)
	dir := testkit.WriteFiles(t, files)
	l, logs := startLBDir(t, dir)
	return l, logs, tlsAddr, dir
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

// tlsResult is what one request on a new TLS connection gave: its reply (status 0 when the handshake or
// the exchange failed) and the connection's state.
type tlsResult struct {
	reply
	state tls.ConnectionState
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
		return tlsResult{reply: reply{err: fmt.Errorf("handshake: %w", err)}}
	}
	defer conn.Close()
	r := tlsResult{state: conn.ConnectionState()}
	req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
	req.Host = cmp.Or(cfg.ServerName, addr)
	maps.Copy(req.Header, h)
	if err := req.Write(conn); err != nil {
		r.err = fmt.Errorf("writing the request: %w", err)
	} else if r.reply = replyOf(http.ReadResponse(bufio.NewReader(conn), req)); r.err != nil {
		r.status = 0
	}
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
