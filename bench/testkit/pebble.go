package testkit

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// PebbleVersion is the version of Let's Encrypt's test ACME server (pebble and pebble-challtestsrv)
// that .ci/run installs and the kit is written against.
const PebbleVersion = "v2.10.3"

// PebbleConfig is what a test chooses of a Pebble.
type PebbleConfig struct {
	// HTTPPort and TLSPort are where pebble's validation authority connects (on 127.0.0.1, every name
	// resolving there) for HTTP-01 and TLS-ALPN-01 challenges: fairlead's listen and tls_listen ports.
	// 0: a port nothing listens on (that challenge type then always fails).
	HTTPPort, TLSPort int
	// Validity is the lifetime of the certificates pebble issues (whole seconds; its one profile,
	// "default", so every order gets it); 0: pebble's default, 90 days. A renewal test asks for
	// 30-60 s.
	Validity time.Duration
	// AuthzReuse is the percentage of orders for which pebble reuses a name's valid authorization
	// instead of asking for a new challenge (pebble's PEBBLE_AUTHZREUSE, its default 50). The kit's
	// default, 0, makes every order answer a challenge: deterministic, and a renewal is validated
	// again.
	AuthzReuse int
}

// A Pebble is Let's Encrypt's test ACME server (RFC 8555, with ARI) run as real processes for a test:
// pebble itself and pebble-challtestsrv as its DNS server, which resolves every name to 127.0.0.1
// (A only: no AAAA answers), so pebble validates challenges against the test's listeners on the
// ports of its PebbleConfig. Both listen on free loopback ports and are killed at the end of the
// test. pebble's directory is served over HTTPS with a certificate the kit generated (ServerCAPEM);
// the certificates it issues chain to a root it generates at each start (RootPEM). Pebble never
// rejects a good nonce and never sleeps before validating (PEBBLE_WFE_NONCEREJECT=0,
// PEBBLE_VA_NOSLEEP=1). Its state (accounts, orders, certificates, its CA) is in memory only: Stop
// and Start (or Restart) give a new CA that knows no account — the ACME server of the same address
// reset, as after a crash.
type Pebble struct {
	t   testing.TB
	cfg PebbleConfig

	Dir          string // pebble.json, the directory's certificate and key, pebble.log and challtestsrv.log
	Addr         string // pebble's ACME listener (HTTPS)
	Management   string // pebble's management listener (HTTPS, same certificate): /roots/0 etc.
	DNS          string // pebble-challtestsrv's DNS server (UDP and TCP)
	DirectoryURL string // https://Addr/dir, the ACME directory

	serverCA []byte // PEM of the CA that signed the directory's certificate
	client   *http.Client

	pebbleBin string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	issued   map[string]PebbleIssuance // by serial as pebble logs it (lowercase), across runs
	runStart int64                     // the size of pebble.log when the current run started
}

// A PebbleIssuance is one certificate pebble issued.
type PebbleIssuance struct {
	Serial              string // the certificate's serial number, SerialNumber.Text(16)
	Order               string // pebble's order id
	Names               []string
	NotBefore, NotAfter time.Time
	PEM                 []byte // the leaf
}

// findPebbleBinary finds name on PATH, then in $(go env GOBIN) and $(go env GOPATH)/bin (where go
// install puts it), or skips the test when it is nowhere (.ci/run installs it).
func findPebbleBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	var dirs []string
	if goBin, err := exec.LookPath("go"); err == nil {
		if out, err := exec.Command(goBin, "env", "GOBIN", "GOPATH").Output(); err == nil {
			// Two lines, GOBIN (often empty) and GOPATH (a list).
			if goBin, goPath, ok := strings.Cut(string(out), "\n"); ok {
				if goBin = strings.TrimSpace(goBin); goBin != "" {
					dirs = append(dirs, goBin)
				}
				for _, gp := range filepath.SplitList(strings.TrimSpace(goPath)) {
					dirs = append(dirs, filepath.Join(gp, "bin"))
				}
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Skipf("%s is not installed (go install github.com/letsencrypt/pebble/v2/cmd/%s@%s, as .ci/run does)",
		name, name, PebbleVersion)
	return ""
}

// StartPebble starts pebble-challtestsrv and pebble for the test and waits until pebble serves its
// directory and its root, or skips the test when they are not installed.
func StartPebble(t testing.TB, cfg PebbleConfig) *Pebble {
	t.Helper()
	challBin := findPebbleBinary(t, "pebble-challtestsrv")
	pebbleBin := findPebbleBinary(t, "pebble")
	if cfg.Validity != 0 && cfg.Validity < time.Second {
		t.Fatalf("testkit: pebble's certificate validity is in whole seconds, not %s", cfg.Validity)
	}
	p := &Pebble{t: t, cfg: cfg, Dir: t.TempDir(), pebbleBin: pebbleBin,
		issued: map[string]PebbleIssuance{}}
	p.Addr, p.Management = Addr(t), Addr(t)
	p.DNS = udpAndTCPAddr(t)
	p.DirectoryURL = "https://" + p.Addr + "/dir"

	// The directory's own certificate: a CA and a leaf for 127.0.0.1 and localhost.
	caPEM, certPEM, keyPEM := pebbleServerCert(t)
	p.serverCA = caPEM
	write := func(name string, b []byte) string {
		path := filepath.Join(p.Dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("server-ca.pem", caPEM)
	certFile := write("server-cert.pem", append(certPEM, caPEM...))
	keyFile := write("server-key.pem", keyPEM)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	p.client = &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}

	// The config: one profile, so that an order that names none cannot get a random one.
	var conf struct {
		Pebble map[string]any `json:"pebble"`
	}
	profile := map[string]any{"description": "the test's certificates"}
	if cfg.Validity > 0 {
		profile["validityPeriod"] = int64(cfg.Validity / time.Second)
	}
	httpPort, tlsPort := cfg.HTTPPort, cfg.TLSPort
	if httpPort == 0 {
		httpPort = freePortT(t)
	}
	if tlsPort == 0 {
		tlsPort = freePortT(t)
	}
	conf.Pebble = map[string]any{
		"listenAddress":                  p.Addr,
		"managementListenAddress":        p.Management,
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       httpPort,
		"tlsPort":                        tlsPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"keyAlgorithm":                   "ecdsa",
		"profiles":                       map[string]any{"default": profile},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	write("pebble.json", b)

	// challtestsrv: DNS only. Its HTTP-01, HTTPS-01, TLS-ALPN-01 and DoH servers are off, so they
	// never hold a port of the test's; its management listener is on a free port of its own.
	chall := exec.Command(challBin,
		"-dnsserver", p.DNS, "-management", Addr(t),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "",
		"-defaultIPv4", "127.0.0.1", "-defaultIPv6", "")
	challDone := startLogged(t, chall, filepath.Join(p.Dir, "challtestsrv.log"))
	t.Cleanup(func() {
		chall.Process.Kill() //nolint:errcheck
		<-challDone
	})
	Eventually(t, "pebble-challtestsrv to answer DNS", 10*time.Second, func() bool {
		select {
		case <-challDone:
			t.Fatalf("pebble-challtestsrv exited:\n%s", readFile(filepath.Join(p.Dir, "challtestsrv.log")))
		default:
		}
		return resolvesLocal(p.DNS)
	})

	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start runs pebble (again, after Stop: same addresses and config, a new CA and no accounts) and waits
// until it serves its directory and its root.
func (p *Pebble) Start() {
	t := p.t
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		t.Fatal("testkit: pebble is already running")
	}
	logPath := filepath.Join(p.Dir, "pebble.log")
	if fi, err := os.Stat(logPath); err == nil {
		p.runStart = fi.Size()
	}
	cmd := exec.Command(p.pebbleBin, "-config", filepath.Join(p.Dir, "pebble.json"), "-dnsserver", p.DNS)
	cmd.Env = append(os.Environ(),
		"PEBBLE_VA_NOSLEEP=1",
		"PEBBLE_WFE_NONCEREJECT=0",
		"PEBBLE_AUTHZREUSE="+strconv.Itoa(p.cfg.AuthzReuse),
	)
	done := startLogged(t, cmd, logPath)
	p.cmd, p.done = cmd, done
	ok := Within(15*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("pebble exited:\n%s", readFile(logPath))
		default:
		}
		return p.get(p.DirectoryURL) == nil && p.get("https://"+p.Management+"/roots/0") == nil
	})
	if !ok {
		t.Fatalf("pebble did not serve its directory within 15s:\n%s", readFile(logPath))
	}
}

// Stop kills pebble (as a crash would; the ACME server is then down: its addresses refuse
// connections). It first records the certificates this run issued, which die with it. Safe to call
// when it is not running.
func (p *Pebble) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.resolveLocked()    //nolint:errcheck // what it cannot look up now is lost with the run
	p.cmd.Process.Kill() //nolint:errcheck
	<-p.done
	p.cmd = nil
}

// Restart is Stop then Start.
func (p *Pebble) Restart() {
	p.t.Helper()
	p.Stop()
	p.Start()
}

// ServerCAPEM is the PEM of the CA of pebble's own HTTPS listeners: what an ACME client must trust to
// reach DirectoryURL. ServerCAFile is the same in a file.
func (p *Pebble) ServerCAPEM() []byte { return bytes.Clone(p.serverCA) }

// ServerCAFile is the path of a file holding ServerCAPEM.
func (p *Pebble) ServerCAFile() string { return filepath.Join(p.Dir, "server-ca.pem") }

// HTTPClient is an HTTP client that trusts ServerCAPEM (for an ACME client's HTTPClient).
func (p *Pebble) HTTPClient() *http.Client { return p.client }

// RootPEM is the PEM of the root that pebble's current run signs certificates with (its management
// interface's /roots/0; the chain it serves with a certificate ends below it). It changes at each
// Start.
func (p *Pebble) RootPEM() []byte {
	p.t.Helper()
	b, err := p.fetch("https://" + p.Management + "/roots/0")
	if err != nil {
		p.t.Fatalf("testkit: pebble's root: %v", err)
	}
	return b
}

// RootPool is a pool of RootPEM alone, to verify a certificate pebble issued.
func (p *Pebble) RootPool() *x509.CertPool {
	p.t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.RootPEM()) {
		p.t.Fatal("testkit: pebble's /roots/0 holds no certificate")
	}
	return pool
}

// The lines of pebble's log the kit counts (pebble v2.10's wording).
var (
	issuedLine     = regexp.MustCompile(`Issued certificate serial ([0-9a-fA-F]+) for order (\S+)`)
	orderLine      = regexp.MustCompile(`Added order "[^"]*" to the db`)
	validationLine = regexp.MustCompile(`Pulled a task from the Tasks queue: .*?Identifier:acme\.Identifier\{Type:"[^"]*", Value:"([^"]*)"\}`)
)

// Issued is every certificate pebble issued since StartPebble, across restarts, in order of issue.
// Each comes from pebble's log line "Issued certificate serial S for order O" and, for its names and
// dates, from the certificate itself at the management listener's /cert-status-by-serial/S.
func (p *Pebble) Issued() []PebbleIssuance {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		if err := p.resolveLocked(); err != nil {
			p.t.Fatalf("testkit: pebble logged a certificate its management listener does not give: %v", err)
		}
	}
	var out []PebbleIssuance
	for _, m := range issuedLine.FindAllStringSubmatch(p.logLocked(), -1) {
		if is, ok := p.issued[strings.ToLower(m[1])]; ok {
			out = append(out, is)
		}
	}
	return out
}

// IssuedFor is the number of certificates pebble issued that name name (among their DNS names).
func (p *Pebble) IssuedFor(name string) int {
	p.t.Helper()
	n := 0
	for _, is := range p.Issued() {
		for _, dn := range is.Names {
			if strings.EqualFold(dn, name) {
				n++
				break
			}
		}
	}
	return n
}

// Orders is the number of orders (for any names) pebble created since StartPebble, across restarts:
// its "Added order" log lines. An order that names a name outside a client's domains shows here even
// if the client never answers its challenges.
func (p *Pebble) Orders() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(orderLine.FindAllStringIndex(p.logLocked(), -1))
}

// Validations is the number of challenge validations pebble started for name (the client answered a
// challenge of an authorization for it), across restarts: its "Pulled a task" log lines.
func (p *Pebble) Validations(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range validationLine.FindAllStringSubmatch(p.logLocked(), -1) {
		if strings.EqualFold(m[1], name) {
			n++
		}
	}
	return n
}

// SetRenewalInfo makes pebble's ARI answer (renewalInfo) for the certificate certPEM (a leaf it issued
// in its current run) the window start-end: a test moves the suggested renewal to now.
func (p *Pebble) SetRenewalInfo(certPEM []byte, start, end time.Time) {
	p.t.Helper()
	window, _ := json.Marshal(map[string]any{"suggestedWindow": map[string]string{
		"start": start.UTC().Format(time.RFC3339), "end": end.UTC().Format(time.RFC3339)}})
	body, _ := json.Marshal(map[string]string{"Certificate": string(certPEM), "ARIResponse": string(window)})
	resp, err := p.client.Post("https://"+p.Management+"/set-renewal-info/", "application/json", bytes.NewReader(body))
	if err != nil {
		p.t.Fatalf("testkit: pebble's set-renewal-info: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		p.t.Fatalf("testkit: pebble's set-renewal-info: %s: %s", resp.Status, b)
	}
}

// Log is pebble's output so far, all runs (for a failed test's message).
func (p *Pebble) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logLocked()
}

func (p *Pebble) logLocked() string { return readFile(filepath.Join(p.Dir, "pebble.log")) }

// resolveLocked looks up, at the running pebble, the certificates its current run logged that the
// kit has not recorded yet.
func (p *Pebble) resolveLocked() error {
	log := p.logLocked()
	if int64(len(log)) < p.runStart {
		return nil
	}
	var errs []error
	for _, m := range issuedLine.FindAllStringSubmatch(log[p.runStart:], -1) {
		serial := strings.ToLower(m[1])
		if _, ok := p.issued[serial]; ok {
			continue
		}
		is, err := p.certBySerial(serial)
		if err != nil {
			errs = append(errs, fmt.Errorf("serial %s: %w", serial, err))
			continue
		}
		is.Order = m[2]
		p.issued[serial] = is
	}
	return errors.Join(errs...)
}

func (p *Pebble) certBySerial(serial string) (PebbleIssuance, error) {
	b, err := p.fetch("https://" + p.Management + "/cert-status-by-serial/" + serial)
	if err != nil {
		return PebbleIssuance{}, err
	}
	var st struct{ Certificate string }
	if err := json.Unmarshal(b, &st); err != nil {
		return PebbleIssuance{}, err
	}
	blk, _ := pem.Decode([]byte(st.Certificate))
	if blk == nil {
		return PebbleIssuance{}, fmt.Errorf("no certificate for serial %s", serial)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return PebbleIssuance{}, err
	}
	return PebbleIssuance{Serial: c.SerialNumber.Text(16), Names: c.DNSNames, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
		PEM: pem.EncodeToMemory(blk)}, nil
}

func (p *Pebble) get(url string) error {
	_, err := p.fetch(url)
	return err
}

func (p *Pebble) fetch(url string) ([]byte, error) {
	resp, err := p.client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, nil
}

// startLogged starts cmd with its output appended to path, dying with the test binary, and returns a
// channel closed once it has exited.
func startLogged(t testing.TB, cmd *exec.Cmd, path string) chan struct{} {
	t.Helper()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = DieWithTest()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck
	return done
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func freePortT(t testing.TB) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// udpAndTCPAddr is Addr for a server on both UDP and TCP (a DNS server): a reserved port whose UDP
// side is free too.
func udpAndTCPAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		addr := Addr(t)
		if c, err := net.ListenPacket("udp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	t.Fatal("testkit: no port free on both UDP and TCP")
	return ""
}

// resolvesLocal asks the DNS server at addr for an A record of a made-up name over UDP and reports
// whether the answer holds 127.0.0.1 (a hand-made query: the kit links no DNS library).
func resolvesLocal(addr string) bool {
	c, err := net.DialTimeout("udp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck
	// Header: id 0x1234, RD, one question; then "probe.test." A IN.
	q := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		5, 'p', 'r', 'o', 'b', 'e', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1}
	if _, err := c.Write(q); err != nil {
		return false
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil || n < 12 || buf[0] != 0x12 || buf[1] != 0x34 {
		return false
	}
	// An answer, and after the question an rdata of length 4 that is 127.0.0.1.
	return buf[7] > 0 && n > len(q) && bytes.Contains(buf[len(q):n], []byte{0, 4, 127, 0, 0, 1})
}

// pebbleServerCert makes a CA and, signed by it, a certificate for 127.0.0.1, ::1 and localhost, valid
// for a day: pebble's HTTPS listeners'. It returns their PEMs and the leaf's key's.
func pebbleServerCert(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testkit pebble server CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
