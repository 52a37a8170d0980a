package main

// TLS termination in a real fairlead process (issue #11): certificate files reloaded by SIGHUP and by
// the config watcher without dropping tunnels, a bad certificate refused with the old one kept, and TLS
// config errors at -check. Certificates are made at run time by a test CA (bench/sim/certs.go).

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// tlsProcName is the DNS name of the front end's certificates (which also hold 127.0.0.1).
const tlsProcName = "fairlead.example"

// tlsProc is a fairlead process with a TLS front end whose certificate files are certFile and keyFile.
type tlsProc struct {
	*proc
	t                 *testing.T
	tlsAddr           string
	ca                *sim.CA
	certDir           string
	certFile, keyFile string
}

// startTLSProc runs fairlead with a plain and a TLS front end (certificate first), a leader pool over
// the cluster's platforms and the sticky cxserver pool (cxPool) routed first, and waits until both
// listeners serve.
func startTLSProc(t *testing.T, c *sim.Cluster) (*tlsProc, *sim.Leaf) {
	t.Helper()
	ca, err := sim.NewCA("fairlead test CA")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tlsProc{tlsAddr: testkit.Addr(t), ca: ca, certDir: t.TempDir(), t: t}
	first := tp.issue("v1." + tlsProcName)
	var conf testkit.Config
	conf.Table("frontend").Set("tls_listen", tp.tlsAddr).Set("tls_cert", tp.certFile).Set("tls_key", tp.keyFile)
	conf.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c)[:2])
	conf.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials).Set("interval", "200ms")
	conf.Array("routes").Set("pool", "platform")
	tp.proc = &proc{testkit.StartFairlead(t, map[string]string{"00-cx.toml": cxPool(c), "10-base.toml": conf.String()})}
	tp.Eventually("the TLS listener to serve the first certificate", func() bool { return tp.serves(first) })
	return tp, first
}

// issue issues a certificate for tlsProcName, extra and 127.0.0.1 and writes it over the certificate
// files.
func (tp *tlsProc) issue(extra string) *sim.Leaf {
	tp.t.Helper()
	leaf, err := tp.ca.Issue(tlsProcName, extra, "127.0.0.1")
	if err != nil {
		tp.t.Fatal(err)
	}
	if tp.certFile, tp.keyFile, err = leaf.Write(tp.certDir, "frontend"); err != nil {
		tp.t.Fatal(err)
	}
	return leaf
}

func (tp *tlsProc) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: tp.ca.Pool(), ServerName: tlsProcName}
}

// peer handshakes with the TLS listener and returns the certificate it presented (nil on failure).
func (tp *tlsProc) peer() *x509.Certificate {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: tp.clientConfig()}
	conn, err := d.Dial("tcp", tp.tlsAddr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	if cs := conn.(*tls.Conn).ConnectionState(); len(cs.PeerCertificates) > 0 {
		return cs.PeerCertificates[0]
	}
	return nil
}

// serves reports whether a new TLS connection gets leaf's certificate.
func (tp *tlsProc) serves(leaf *sim.Leaf) bool {
	c := tp.peer()
	return c != nil && bytes.Equal(c.Raw, leaf.TLS.Certificate[0])
}

func (tp *tlsProc) describePeer() string {
	c := tp.peer()
	if c == nil {
		return "no handshake"
	}
	return fmt.Sprintf("CN=%q DNS=%v serial=%s", c.Subject.CommonName, c.DNSNames, c.SerialNumber)
}

// get sends GET path over a new TLS connection and returns the status (0 on failure).
func (tp *tlsProc) get(path string) int {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tp.clientConfig(), DisableKeepAlives: true}}
	resp, err := client.Get("https://" + tp.tlsAddr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// tunnel opens a wss:// tunnel to /Thingworx/WS for asset.
func (tp *tlsProc) tunnel(asset string) *websocket.Conn {
	tp.t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: tp.clientConfig()}
	conn, resp, err := d.Dial("wss://"+tp.tlsAddr+"/Thingworx/WS", http.Header{"X-Asset-Id": {asset}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		tp.t.Fatalf("wss dial: %v (status %d)", err, status)
	}
	return conn
}

// tlsEcho checks that msg comes back through the tunnel.
func tlsEcho(t *testing.T, conn *websocket.Conn, msg string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("tunnel write %q: %v", msg, err)
	}
	if _, got, err := conn.ReadMessage(); err != nil || string(got) != msg {
		t.Fatalf("tunnel echo of %q: %q %v", msg, got, err)
	}
}

func TestTLSSIGHUPReloadsCertificatesKeepsTunnelsAndABadCertificateKeepsTheOld(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	tp, _ := startTLSProc(t, c)
	tunnel := tp.tunnel("survivor")
	defer tunnel.Close()
	tlsEcho(t, tunnel, "before")

	// A new certificate in the same files, then SIGHUP.
	second := tp.issue("v2." + tlsProcName)
	tp.Cmd.Process.Signal(syscall.SIGHUP) //nolint:errcheck
	tp.Eventually("new connections to get the new certificate", func() bool { return tp.serves(second) })
	tlsEcho(t, tunnel, "after the reload")
	if got := tp.get("/"); got != 200 {
		t.Fatalf("HTTPS GET after the reload: %d", got)
	}
	if got := tp.Metric("fairlead_config_last_reload_successful"); got != "1" {
		t.Errorf("fairlead_config_last_reload_successful = %q after the certificate reload, want 1", got)
	}

	// A broken certificate file: the reload fails naming the file and key, the old certificate stays.
	if err := os.WriteFile(tp.certFile, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tp.Cmd.Process.Signal(syscall.SIGHUP) //nolint:errcheck
	tp.Eventually("the failed reload to show", func() bool { return tp.Metric("fairlead_config_last_reload_successful") == "0" })
	// The log comes through a pipe: its line may arrive a moment after the metric changed.
	tp.Eventually("the log to name frontend.tls_cert and the file", func() bool {
		log := tp.Log.String()
		return strings.Contains(log, "frontend.tls_cert") && strings.Contains(log, tp.certFile)
	})
	if !tp.serves(second) {
		t.Errorf("after the failed reload a new connection got %s, want the previous certificate", tp.describePeer())
	}
	if got := tp.get("/"); got != 200 {
		t.Errorf("HTTPS GET after the failed reload: %d", got)
	}
	tlsEcho(t, tunnel, "after the failed reload")

	// Fixed: the next SIGHUP applies it.
	third := tp.issue("v3." + tlsProcName)
	tp.Cmd.Process.Signal(syscall.SIGHUP) //nolint:errcheck
	tp.Eventually("the fixed certificate to be served", func() bool {
		return tp.serves(third) && tp.Metric("fairlead_config_last_reload_successful") == "1"
	})
	tlsEcho(t, tunnel, "after the fix")
}

func TestTLSCertificateFileEditIsPickedUpWithoutASignal(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	tp, _ := startTLSProc(t, c)
	tunnel := tp.tunnel("survivor")
	defer tunnel.Close()
	// The watch starts once fairlead serves: an edit made before it follows the certificate files is
	// not seen, so the edit is made again (well apart from the 300 ms debounce) until it applies.
	var second *sim.Leaf
	var wrote time.Time
	tp.Eventually("the certificate edit to be applied", func() bool {
		if time.Since(wrote) > time.Second {
			second, wrote = tp.issue("v2."+tlsProcName), time.Now()
		}
		return tp.serves(second)
	})
	tlsEcho(t, tunnel, "after the edit")
	if got := tp.get("/"); got != 200 {
		t.Errorf("HTTPS GET after the edit: %d", got)
	}
}

func TestTLSConfigErrorsAtCheckExit2NamingFileAndKey(t *testing.T) {
	ca, err := sim.NewCA("fairlead test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(tlsProcName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	certFile, keyFile, err := leaf.Write(certDir, "frontend")
	if err != nil {
		t.Fatal(err)
	}
	base := "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\n"
	tlsKeys := func(cert, key string) string {
		return fmt.Sprintf("[frontend]\ntls_listen = \"127.0.0.1:8443\"\ntls_cert = %q\ntls_key = %q\n", cert, key)
	}

	dir := testkit.WriteFiles(t, map[string]string{"10-base.toml": base, "20-tls.toml": tlsKeys(certFile, keyFile)})
	if out, errOut, code := runFairlead(t, "-check", "-config", dir); code != 0 || !strings.Contains(out, "config ok") {
		t.Fatalf("a valid TLS config: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	missing := filepath.Join(certDir, "missing.crt")
	broken := filepath.Join(certDir, "broken.crt")
	if err := os.WriteFile(broken, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct{ name, bad, key, file string }{
		{"a missing certificate file", tlsKeys(missing, keyFile), "frontend.tls_cert", missing},
		{"an unparsable certificate file", tlsKeys(broken, keyFile), "frontend.tls_cert", broken},
		{"listen = \"\" without tls_listen", "[frontend]\nlisten = \"\"\n", "frontend.listen", ""},
	} {
		dir := testkit.WriteFiles(t, map[string]string{"10-base.toml": base, "20-bad.toml": v.bad})
		for _, args := range [][]string{{"-check", "-config", dir}, {"-config", dir}} {
			_, errOut, code := runFairlead(t, args...)
			want := filepath.Join(dir, "20-bad.toml") + ": " + v.key
			if code != 2 || !strings.Contains(errOut, want) || !strings.Contains(errOut, v.file) {
				t.Errorf("%s (%v): exit %d, stderr %q; want exit 2 naming %q and %s", v.name, args, code, errOut, want, strconv.Quote(v.file))
			}
		}
	}
}
