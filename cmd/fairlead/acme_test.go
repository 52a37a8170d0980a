package main

// [frontend.acme] in a real fairlead process against a real ACME server: Let's Encrypt's pebble, with
// pebble-challtestsrv as its DNS resolving every name to 127.0.0.1 (testkit.StartPebble; .ci/run
// installs both). pebble validates its challenges on fairlead's own listeners: HTTP-01 on listen,
// TLS-ALPN-01 on tls_listen.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

	"github.com/chromedp/chromedp"
	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/bench/testkit/browser"
)

// acmeProc is a fairlead process with [frontend.acme] in front of a simulated cluster.
type acmeProc struct {
	*testkit.Fairlead
	t               *testing.T
	listen, tlsAddr string // listen "" for an HTTPS-only front end
	pebble          *testkit.Pebble
	storage         string
	file            *sim.Leaf // the certificate from files (nil: [frontend.acme] alone)
	roots           *x509.CertPool
	clientCert      *tls.Certificate // sent in every handshake when set (client_auth)
}

const fileCertName = "files.fairlead.test"

// acmeSetup chooses a front end's addresses and starts pebble validating on them (withPlain false:
// no plain listener, pebble's HTTP-01 port then being one nothing listens on; tlsValidation false:
// pebble's TLS-ALPN-01 port one nothing listens on).
func acmeSetup(t *testing.T, withPlain, tlsValidation bool, validity time.Duration) (listen, tlsAddr string, pb *testkit.Pebble) {
	t.Helper()
	tlsAddr = testkit.Addr(t)
	cfg := testkit.PebbleConfig{Validity: validity}
	if withPlain {
		listen = testkit.Addr(t)
		cfg.HTTPPort = portOf(t, listen)
	}
	if tlsValidation {
		cfg.TLSPort = portOf(t, tlsAddr)
	}
	return listen, tlsAddr, testkit.StartPebble(t, cfg)
}

func portOf(t *testing.T, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// acmeConfig is the config of an acmeProc: a leader pool over c's platforms, the front end on listen
// and tlsAddr, a certificate file for fileCertName when file is set, and [frontend.acme] for domains
// from pb's directory (directory "" for pb's).
func acmeConfig(t *testing.T, c *sim.Cluster, listen, tlsAddr, admin, directory string, pb *testkit.Pebble, storage string, file *sim.Leaf, domains ...string) string {
	t.Helper()
	var conf testkit.Config
	fe := conf.Table("frontend").Set("listen", listen).Set("tls_listen", tlsAddr)
	if file != nil {
		cert, key, err := file.Write(t.TempDir(), "front")
		if err != nil {
			t.Fatal(err)
		}
		fe.Set("tls_cert", cert).Set("tls_key", key)
	}
	if directory == "" {
		directory = pb.DirectoryURL
	}
	conf.Table("frontend.acme").Set("directory", directory).Set("ca_root", pb.ServerCAFile()).
		Set("email", "ops@fairlead.test").Set("storage", storage).Set("domains", domains).Set("renew_check_interval", "1s")
	conf.Table("admin").Set("listen", admin)
	conf.Table("pools.platform").Set("servers", testkit.PlatformAddrs(c)[:2])
	conf.Table("pools.platform.check").Set("credentials", sim.DefaultCredentials).Set("interval", "200ms")
	conf.Array("routes").Set("pool", "platform")
	return conf.String()
}

// startACMEProc runs fairlead on an acmeConfig and waits until it serves (its certificates may not be
// obtained yet).
func startACMEProc(t *testing.T, c *sim.Cluster, listen, tlsAddr string, pb *testkit.Pebble, storage string, file *sim.Leaf, domains ...string) *acmeProc {
	t.Helper()
	admin := testkit.Addr(t)
	dir := testkit.WriteFiles(t, map[string]string{"10-acme.toml": acmeConfig(t, c, listen, tlsAddr, admin, "", pb, storage, file, domains...)})
	addr := listen
	if addr == "" {
		addr = tlsAddr
	}
	p := &acmeProc{Fairlead: testkit.RunFairlead(t, dir, addr, admin), t: t, listen: listen, tlsAddr: tlsAddr, pebble: pb, storage: storage, file: file}
	p.WaitServing()
	return p
}

func fileLeaf(t *testing.T) *sim.Leaf {
	t.Helper()
	ca, err := sim.NewCA("fairlead test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(fileCertName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// peer handshakes with tls_listen for SNI name (none for "") and returns the chain presented, not
// verified (nil when the handshake fails).
func (p *acmeProc) peer(name string) []*x509.Certificate {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second},
		Config: &tls.Config{ServerName: name, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, GetClientCertificate: p.sendCert}}
	conn, err := d.Dial("tcp", p.tlsAddr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates
}

// sendCert gives the server clientCert when asked (none when unset).
func (p *acmeProc) sendCert(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if p.clientCert == nil {
		return &tls.Certificate{}, nil
	}
	return p.clientCert, nil
}

// acmeLeaf is the certificate tls_listen serves for name when pebble's current root verifies it for
// name, else nil.
func (p *acmeProc) acmeLeaf(name string) *x509.Certificate {
	chain := p.peer(name)
	if len(chain) == 0 {
		return nil
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if p.roots == nil {
		p.roots = p.pebble.RootPool() // kept: pebble may be stopped later
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{DNSName: name, Roots: p.roots, Intermediates: inter}); err != nil {
		return nil
	}
	return chain[0]
}

// waitACME waits until tls_listen serves a certificate from pebble for each name and returns them.
func (p *acmeProc) waitACME(names ...string) []*x509.Certificate {
	p.t.Helper()
	out := make([]*x509.Certificate, len(names))
	testkit.Eventually(p.t, "certificates from pebble for "+strings.Join(names, ", "), 30*time.Second, func() bool {
		for i, n := range names {
			if out[i] = p.acmeLeaf(n); out[i] == nil {
				return false
			}
		}
		return true
	})
	return out
}

// servesFile reports whether tls_listen serves the certificate from files for SNI name.
func (p *acmeProc) servesFile(name string) bool {
	chain := p.peer(name)
	return len(chain) > 0 && p.file != nil && string(chain[0].Raw) == string(p.file.TLS.Certificate[0])
}

// status is /api/status's certificates.
func (p *acmeProc) certificates() []certDoc {
	p.t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/api/status")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Certificates []certDoc `json:"certificates"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		p.t.Fatal(err)
	}
	return st.Certificates
}

type certDoc struct {
	Source    string    `json:"source"`
	File      string    `json:"file"`
	Names     []string  `json:"names"`
	NotAfter  time.Time `json:"not_after"`
	Obtained  time.Time `json:"obtained"`
	LastError string    `json:"last_error"`
}

func (p *acmeProc) metric(series string) int64 { return p.MetricInt(series) }

// getVia sends GET over TLS with Host name, verifying the certificate for name against pebble's root.
func (p *acmeProc) getVia(name string) int { return p.getTrusting(name, name, p.roots) }

// getViaFile is getVia verifying the certificate from files instead.
func (p *acmeProc) getViaFile(name string) int {
	pool := x509.NewCertPool()
	pool.AddCert(p.file.TLS.Leaf)
	return p.getTrusting(name, fileCertName, pool)
}

// getTrusting sends GET over TLS with Host host, verifying the certificate for serverName (also the
// SNI) against roots, and returns the status (0 on failure).
func (p *acmeProc) getTrusting(host, serverName string, roots *x509.CertPool) int {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{ServerName: serverName, RootCAs: roots, GetClientCertificate: p.sendCert}}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+p.tlsAddr+"/Thingworx/Things", nil)
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// fairlead obtains one certificate per domain from the ACME server, answering HTTP-01 on listen (TLS-
// ALPN-01 cannot reach it here), serves each by SNI beside the certificate from files, never asks for
// a name outside domains, and shows them in its metrics and /api/status.
func TestACMEObtainsACertificatePerDomainOverHTTP01AndServesItBySNI(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	listen, tlsAddr, pb := acmeSetup(t, true, false, 0)
	p := startACMEProc(t, c, listen, tlsAddr, pb, t.TempDir(), fileLeaf(t), "twx.fairlead.test", "devices.fairlead.test")

	certs := p.waitACME("twx.fairlead.test", "devices.fairlead.test")
	if certs[0].SerialNumber.Cmp(certs[1].SerialNumber) == 0 {
		t.Fatal("both names got one certificate; want one per domain")
	}
	if got := p.getVia("twx.fairlead.test"); got != http.StatusOK {
		t.Errorf("GET over TLS with the ACME certificate: %d, want 200 from the leader", got)
	}
	// A name outside domains gets the certificate from files, and nothing is ever asked for it, not
	// even when a client sends an HTTP-01 path for it; no SNI gets the files' default too.
	orders := pb.Orders()
	req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/.well-known/acme-challenge/abcdefgh", nil)
	req.Host = "evil.fairlead.test"
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	for _, name := range []string{"evil.fairlead.test", fileCertName, ""} {
		if !p.servesFile(name) {
			t.Errorf("SNI %q: not the certificate from files", name)
		}
	}
	if n, v := pb.IssuedFor("evil.fairlead.test"), pb.Validations("evil.fairlead.test"); n != 0 || v != 0 || pb.Orders() != orders {
		t.Errorf("for a name outside domains: %d certificates, %d validations, %d new orders", n, v, pb.Orders()-orders)
	}
	if n := len(pb.Issued()); n != 2 {
		t.Errorf("pebble issued %d certificates, want 2 (one per domain)", n)
	}

	for series, want := range map[string]int64{
		`fairlead_acme_certificates_total{renewal="false",result="ok"}`:        2,
		`fairlead_acme_certificates_total{renewal="false",result="failed"}`:    0,
		`fairlead_acme_failing{name="twx.fairlead.test"}`:                      0,
		`fairlead_events_total{kind="cert_obtained"}`:                          2,
		`fairlead_acme_challenges_answered_total{type="tls-alpn-01"}`:          0,
		`fairlead_tls_certificate_not_after_seconds{acme="twx.fairlead.test"}`: certs[0].NotAfter.Unix(),
	} {
		if got := p.metric(series); got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
	if got := p.metric(`fairlead_acme_challenges_answered_total{type="http-01"}`); got < 2 {
		t.Errorf("HTTP-01 answers: %d, want at least one per domain", got)
	}
	docs := p.certificates()
	if len(docs) != 3 || docs[0].Source != "file" || docs[1].Source != "acme" || docs[2].Source != "acme" {
		t.Fatalf("/api/status certificates: %+v, want the file's then two ACME ones", docs)
	}
	if docs[1].Names[0] != "twx.fairlead.test" || !docs[1].NotAfter.Equal(certs[0].NotAfter) || docs[1].Obtained.IsZero() || docs[1].LastError != "" {
		t.Errorf("/api/status certificate of twx.fairlead.test: %+v", docs[1])
	}
	if !strings.Contains(p.Log.String(), "certificate for twx.fairlead.test obtained, valid until") {
		t.Errorf("no log line of the certificate obtained")
	}

	// A reload that keeps [frontend.acme] and the listeners keeps its manager: no order, the counts go on
	// (a new manager would start them from 0), the same certificates served.
	orders = pb.Orders()
	if err := os.WriteFile(filepath.Join(p.Dir, "05-more.toml"), []byte("[[routes]]\npool = \"platform\"\npaths = [\"/more\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reloads := p.metric("fairlead_config_reloads_total")
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.Eventually("the reload", func() bool { return p.metric("fairlead_config_reloads_total") == reloads+1 })
	if got := p.metric(`fairlead_acme_certificates_total{renewal="false",result="ok"}`); got != 2 || pb.Orders() != orders {
		t.Errorf("after a reload keeping [frontend.acme]: %d obtained by the manager in force, %d new orders", got, pb.Orders()-orders)
	}
	if got := p.acmeLeaf("twx.fairlead.test"); got == nil || got.SerialNumber.Cmp(certs[0].SerialNumber) != 0 {
		t.Errorf("after the reload: not the same certificate")
	}
}

// Without a plain listener, fairlead answers TLS-ALPN-01 on tls_listen, and with no certificate from
// files a handshake for another name or none gets the first domain's (as the files' first is their
// default), and nothing is asked for that name.
func TestACMEAnswersTLSALPN01OnTheHTTPSListenerAlone(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	_, tlsAddr, pb := acmeSetup(t, false, true, 0)
	p := startACMEProc(t, c, "", tlsAddr, pb, t.TempDir(), nil, "edge.fairlead.test")
	cert := p.waitACME("edge.fairlead.test")[0]
	if got := p.metric(`fairlead_acme_challenges_answered_total{type="tls-alpn-01"}`); got < 1 {
		t.Errorf("TLS-ALPN-01 answers: %d, want at least 1", got)
	}
	if got := p.metric(`fairlead_acme_challenges_answered_total{type="http-01"}`); got != 0 {
		t.Errorf("HTTP-01 answers: %d without a plain listener", got)
	}
	orders := pb.Orders()
	for _, name := range []string{"", "other.fairlead.test"} {
		if chain := p.peer(name); len(chain) == 0 || chain[0].SerialNumber.Cmp(cert.SerialNumber) != 0 {
			t.Errorf("SNI %q did not get the only certificate", name)
		}
	}
	if got := p.getVia("edge.fairlead.test"); got != http.StatusOK {
		t.Errorf("GET over TLS: %d", got)
	}
	if n, v := pb.IssuedFor("other.fairlead.test"), pb.Validations("other.fairlead.test"); n != 0 || v != 0 || pb.Orders() != orders {
		t.Errorf("for a name outside domains: %d certificates, %d validations, %d new orders", n, v, pb.Orders()-orders)
	}
}

// With client_auth = "require", fairlead still answers TLS-ALPN-01 (the ACME server sends no client
// certificate) while every other handshake must send one.
func TestACMEAnswersTLSALPN01WhenClientCertificatesAreRequired(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	_, tlsAddr, pb := acmeSetup(t, false, true, 0)
	const name = "edge.fairlead.test"
	ca, err := sim.NewCA("device CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(t.TempDir(), "device-ca")
	if err != nil {
		t.Fatal(err)
	}
	device, err := ca.Issue("device-1")
	if err != nil {
		t.Fatal(err)
	}
	admin := testkit.Addr(t)
	dir := testkit.WriteFiles(t, map[string]string{
		"10-acme.toml": acmeConfig(t, c, "", tlsAddr, admin, "", pb, t.TempDir(), nil, name),
		"20-mtls.toml": fmt.Sprintf("[frontend]\nclient_ca = %q\nclient_auth = \"require\"\n", caFile)})
	p := &acmeProc{Fairlead: testkit.RunFairlead(t, dir, tlsAddr, admin), t: t, tlsAddr: tlsAddr, pebble: pb, clientCert: &device.TLS}
	p.WaitServing()
	// Obtained without a handshake of ours: the validations' handshakes are the only ones, and none
	// failed (over TLS 1.3 a validator would not even notice a refusal, which comes after its Finished).
	testkit.Eventually(t, "the certificate obtained", 30*time.Second, func() bool {
		return p.metric(`fairlead_acme_certificates_total{renewal="false",result="ok"}`) == 1
	})
	if got := p.metric("fairlead_tls_handshake_failures_total"); got != 0 {
		t.Errorf("%d handshakes failed: the validations were refused for want of a client certificate", got)
	}
	p.waitACME(name)
	if got := p.metric(`fairlead_acme_challenges_answered_total{type="tls-alpn-01"}`); got < 1 {
		t.Errorf("TLS-ALPN-01 answers: %d", got)
	}
	if got := p.getVia(name); got != http.StatusOK {
		t.Errorf("GET with a device certificate: %d, want 200", got)
	}
	p.clientCert = nil
	if got := p.getVia(name); got != 0 {
		t.Errorf("GET without a client certificate: %d, want a failed handshake", got)
	}
}

// A restart reuses the stored certificate without asking again; the certificate is renewed before it
// expires; an ACME server down at renewal leaves the last good certificate served, with a WARN line,
// a cert_failed event, fairlead_acme_failing and the status's last error.
func TestACMERenewsKeepsItsCertificateAcrossARestartAndServesTheLastGoodOneWhenTheServerIsDown(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	listen, tlsAddr, pb := acmeSetup(t, true, true, 20*time.Second)
	storage := t.TempDir()
	const name = "twx.fairlead.test"
	p := startACMEProc(t, c, listen, tlsAddr, pb, storage, nil, name)
	first := p.waitACME(name)[0]

	// A restart on the same storage: the stored certificate, no new order.
	p.Stop(10 * time.Second)
	orders := pb.Orders()
	p = startACMEProc(t, c, listen, tlsAddr, pb, storage, nil, name)
	if got := p.acmeLeaf(name); got == nil || got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("after a restart: not the stored certificate")
	}
	if pb.Orders() != orders || p.metric(`fairlead_acme_certificates_total{renewal="false",result="ok"}`) != 0 {
		t.Fatalf("the restart asked for a certificate again (orders %d → %d)", orders, pb.Orders())
	}

	// Renewal, well before it expires.
	var renewed *x509.Certificate
	testkit.Eventually(t, "the certificate renewed", 30*time.Second, func() bool {
		renewed = p.acmeLeaf(name)
		return renewed != nil && renewed.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	if !time.Now().Before(first.NotAfter) {
		t.Errorf("renewed only after the first certificate expired (%s)", first.NotAfter)
	}
	if got := p.metric(`fairlead_acme_certificates_total{renewal="true",result="ok"}`); got != 1 {
		t.Errorf("renewals counted: %d, want 1", got)
	}

	// The ACME server goes down before the next renewal: the renewed certificate stays served.
	pb.Stop()
	testkit.Eventually(t, "the failed renewal to show", 30*time.Second, func() bool {
		return p.metric(`fairlead_acme_failing{name="`+name+`"}`) == 1
	})
	if got := p.acmeLeaf(name); got == nil || got.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Errorf("while renewal fails: not the last good certificate")
	}
	if p.metric(`fairlead_acme_certificates_total{renewal="true",result="failed"}`) < 1 || p.metric(`fairlead_events_total{kind="cert_failed"}`) < 1 {
		t.Errorf("the failed renewal is not counted")
	}
	docs := p.certificates()
	if len(docs) != 1 || docs[0].LastError == "" || !docs[0].NotAfter.Equal(renewed.NotAfter) {
		t.Errorf("/api/status certificates while renewal fails: %+v", docs)
	}
	if lines := linesWith(p.Log.String(), "could not renew the certificate for "+name); len(lines) == 0 || !strings.Contains(lines[0], "WARN") {
		t.Errorf("no WARN line of the failed renewal: %q", lines)
	}
	if got := p.getVia(name); got != http.StatusOK {
		t.Errorf("GET while renewal fails: %d", got)
	}
}

// An ACME server down at start: fairlead serves (the certificate from files for every name), says so
// (WARN, cert_failed, fairlead_acme_failing), and a reload that points [frontend.acme] at a server
// that answers obtains the certificate at once.
func TestACMEServerDownAtStartKeepsTheListenerAndAReloadObtainsAtOnce(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	listen, tlsAddr, pb := acmeSetup(t, true, true, 0)
	const name = "twx.fairlead.test"
	admin := testkit.Addr(t)
	storage := t.TempDir()
	file := fileLeaf(t)
	down := "https://" + testkit.Addr(t) + "/dir" // nothing listens there
	dir := testkit.WriteFiles(t, map[string]string{"10-acme.toml": acmeConfig(t, c, listen, tlsAddr, admin, down, pb, storage, file, name)})
	p := &acmeProc{Fairlead: testkit.RunFairlead(t, dir, listen, admin), t: t, listen: listen, tlsAddr: tlsAddr, pebble: pb, storage: storage, file: file}
	p.WaitServing()
	p.Eventually("the failure to show", func() bool { return p.metric(`fairlead_acme_failing{name="`+name+`"}`) == 1 })
	if !p.servesFile(name) {
		t.Errorf("while the ACME server is down: not the certificate from files")
	}
	if p.getViaFile(name) != http.StatusOK {
		t.Errorf("while the ACME server is down, GET over TLS failed")
	}
	if lines := linesWith(p.Log.String(), "could not obtain the certificate for "+name); len(lines) == 0 || !strings.Contains(lines[0], "WARN") {
		t.Errorf("no WARN line of the failure: %q", lines)
	}
	if docs := p.certificates(); len(docs) != 2 || docs[1].LastError == "" || !docs[1].NotAfter.IsZero() {
		t.Errorf("/api/status certificates: %+v", docs)
	}
	// The status page's Certificates table says so, in red, beside the file's certificate.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := browser.Open(t, ctx)
	b.Do("open the status page", chromedp.Navigate("http://"+admin+"/"))
	b.WaitFor(10*time.Second, "the ACME domain failing on the page", fmt.Sprintf(
		`(() => { const r = document.querySelector('#certs tr[data-cert=%q][data-source="acme"]'); return r !== null && r.textContent.includes("not obtained yet") && r.textContent.includes("failing since") && r.querySelector("td.bad") !== null && document.querySelector('#certs tr[data-source="file"]') !== null })()`, name))

	if err := os.WriteFile(filepath.Join(dir, "10-acme.toml"), []byte(acmeConfig(t, c, listen, tlsAddr, admin, "", pb, storage, file, name)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitACME(name)
	if got := p.metric(`fairlead_acme_failing{name="` + name + `"}`); got != 0 {
		t.Errorf("fairlead_acme_failing = %d once obtained", got)
	}

	// A reload without [frontend.acme]: the name gets the files' certificate again, and the ACME series
	// and the status entry go.
	conf := acmeConfig(t, c, listen, tlsAddr, admin, "", pb, storage, file, name)
	start, end := strings.Index(conf, "[frontend.acme]"), strings.Index(conf, "[admin]")
	if err := os.WriteFile(filepath.Join(dir, "10-acme.toml"), []byte(conf[:start]+conf[end:]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.Eventually("the files' certificate for "+name+" again", func() bool { return p.servesFile(name) })
	if docs := p.certificates(); len(docs) != 1 || docs[0].Source != "file" {
		t.Errorf("/api/status certificates without [frontend.acme]: %+v", docs)
	}
	if m := p.Metric(`fairlead_tls_certificate_not_after_seconds{acme="` + name + `"}`); m != "" {
		t.Errorf("an expiry series for the ACME certificate after its table went: %s", m)
	}
}
