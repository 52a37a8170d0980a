package testkit

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

// TestPebbleIssuesACertificateForAnHTTP01Answer runs the kit's pebble and obtains a certificate for
// a.test with golang.org/x/crypto/acme, answering HTTP-01 from a net/http server on the port pebble
// validates against; the chain verifies against pebble's /roots/0, lives as long as asked, and the kit
// counts one order, one validation and one issuance for a.test and none for another name. After a
// restart the directory answers again (a new CA), and the issuance of the first run is still counted.
func TestPebbleIssuesACertificateForAnHTTP01Answer(t *testing.T) {
	httpAddr := Addr(t)
	_, port, _ := net.SplitHostPort(httpAddr)
	httpPort, _ := strconv.Atoi(port)
	peb := StartPebble(t, PebbleConfig{HTTPPort: httpPort, Validity: 45 * time.Second})

	// The HTTP-01 answers, served where pebble looks for them.
	var mu sync.Mutex
	answers := map[string]string{}
	var asked []string // the Host of each challenge request
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body, ok := answers[r.URL.Path]
		asked = append(asked, r.Host)
		mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body)) //nolint:errcheck
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accountKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	// The ACME client trusts the directory through the CA file, as a fairlead config would name it.
	caFile, err := os.ReadFile(peb.ServerCAFile())
	if err != nil || !bytes.Equal(caFile, peb.ServerCAPEM()) {
		t.Fatalf("ServerCAFile does not hold ServerCAPEM (%v)", err)
	}
	trust := x509.NewCertPool()
	trust.AppendCertsFromPEM(caFile)
	acmeHTTP := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trust}}}
	t.Cleanup(acmeHTTP.CloseIdleConnections)
	client := &acme.Client{Key: accountKey, DirectoryURL: peb.DirectoryURL, HTTPClient: acmeHTTP}
	if _, err := client.Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
		t.Fatalf("registering: %v\n%s", err, Tail(peb.Log(), 3000))
	}
	var dir struct{ RenewalInfo string }
	if b, err := peb.fetch(peb.DirectoryURL); err != nil || json.Unmarshal(b, &dir) != nil || dir.RenewalInfo == "" {
		t.Fatalf("pebble's directory offers no renewalInfo (ARI): %v", err)
	}
	der := obtainCert(ctx, t, peb, client, "a.test", "http-01", func(chal *acme.Challenge) {
		body, err := client.HTTP01ChallengeResponse(chal.Token)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		answers[client.HTTP01ChallengePath(chal.Token)] = body
		mu.Unlock()
	})
	mu.Lock()
	if len(asked) == 0 || !strings.HasPrefix(asked[0], "a.test") {
		t.Errorf("challenge requests came for hosts %q, want a.test", asked)
	}
	mu.Unlock()

	// The chain verifies against pebble's root, for a.test, and lives as long as asked.
	leaf, err := x509.ParseCertificate(der[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "a.test", Roots: peb.RootPool(), Intermediates: poolOf(t, der[1:])}); err != nil {
		t.Fatalf("the certificate does not verify against /roots/0: %v", err)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life < 40*time.Second || life > 50*time.Second {
		t.Errorf("certificate lives %s, want 45s", life)
	}

	// Counted: one order, one validation, one issuance, all for a.test.
	if n := peb.Orders(); n != 1 {
		t.Errorf("Orders() = %d, want 1", n)
	}
	if n := peb.Validations("a.test"); n != 1 {
		t.Errorf("Validations(a.test) = %d, want 1", n)
	}
	if n := peb.Validations("b.test"); n != 0 {
		t.Errorf("Validations(b.test) = %d, want 0", n)
	}
	issued := peb.Issued()
	if len(issued) != 1 {
		t.Fatalf("Issued() has %d certificates, want 1", len(issued))
	}
	if issued[0].Serial != leaf.SerialNumber.Text(16) || len(issued[0].Names) != 1 || issued[0].Names[0] != "a.test" {
		t.Errorf("Issued()[0] = serial %s names %q, want serial %x names [a.test]", issued[0].Serial, issued[0].Names, leaf.SerialNumber)
	}
	if !issued[0].NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("Issued()[0].NotAfter = %s, want %s", issued[0].NotAfter, leaf.NotAfter)
	}
	if n := peb.IssuedFor("A.test"); n != 1 {
		t.Errorf("IssuedFor(A.test) = %d, want 1", n)
	}
	if n := peb.IssuedFor("b.test"); n != 0 {
		t.Errorf("IssuedFor(b.test) = %d, want 0", n)
	}

	// ARI: the management listener moves the suggested window, and renewalInfo answers it.
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der[0]})
	peb.SetRenewalInfo(leafPEM, start, start.Add(time.Minute))
	// The ARI certificate id (RFC 9773): base64url of the issuer's key id and of the serial's DER.
	serialDER, _ := asn1.Marshal(leaf.SerialNumber)
	certID := base64.RawURLEncoding.EncodeToString(leaf.AuthorityKeyId) + "." +
		base64.RawURLEncoding.EncodeToString(serialDER[2:]) // the INTEGER's content octets
	var ri struct {
		SuggestedWindow struct{ Start, End time.Time }
	}
	if b, err := peb.fetch(strings.TrimSuffix(dir.RenewalInfo, "/") + "/" + certID); err != nil || json.Unmarshal(b, &ri) != nil {
		t.Fatalf("renewalInfo: %v", err)
	}
	if !ri.SuggestedWindow.Start.Equal(start) {
		t.Errorf("renewalInfo window starts %s, want %s", ri.SuggestedWindow.Start, start)
	}

	// Down: the directory refuses connections; restarted: it serves with a new root, and the count
	// keeps the first run's certificate.
	oldRoot := string(peb.RootPEM())
	peb.Stop()
	if _, err := peb.HTTPClient().Get(peb.DirectoryURL); err == nil {
		t.Error("the directory answered while pebble was stopped")
	}
	peb.Start()
	if string(peb.RootPEM()) == oldRoot {
		t.Error("a restarted pebble has the same root")
	}
	if n := peb.IssuedFor("a.test"); n != 1 {
		t.Errorf("after a restart IssuedFor(a.test) = %d, want 1", n)
	}
	peb.Restart()
	if _, err := peb.fetch(peb.DirectoryURL); err != nil {
		t.Errorf("the directory after Restart: %v", err)
	}
	if n, m := peb.IssuedFor("a.test"), peb.Orders(); n != 1 || m != 1 {
		t.Errorf("after two restarts IssuedFor(a.test) = %d, Orders() = %d, want 1 and 1", n, m)
	}
}

// obtainCert orders a certificate for name from peb with client (registered), answers the challenge of
// type typ with answer (which puts the response in place) and returns the chain, leaf first.
func obtainCert(ctx context.Context, t *testing.T, peb *Pebble, client *acme.Client, name, typ string, answer func(*acme.Challenge)) [][]byte {
	t.Helper()
	order, err := client.AuthorizeOrder(ctx, acme.DomainIDs(name))
	if err != nil {
		t.Fatalf("ordering: %v\n%s", err, Tail(peb.Log(), 3000))
	}
	if len(order.AuthzURLs) != 1 {
		t.Fatalf("order has %d authorizations, want 1", len(order.AuthzURLs))
	}
	authz, err := client.GetAuthorization(ctx, order.AuthzURLs[0])
	if err != nil {
		t.Fatal(err)
	}
	if authz.Status != acme.StatusPending {
		t.Fatalf("authorization is %q, want pending (PEBBLE_AUTHZREUSE=0)", authz.Status)
	}
	var chal *acme.Challenge
	for _, c := range authz.Challenges {
		if c.Type == typ {
			chal = c
		}
	}
	if chal == nil {
		t.Fatalf("no %s challenge offered", typ)
	}
	answer(chal)
	if _, err := client.Accept(ctx, chal); err != nil {
		t.Fatal(err)
	}
	if _, err := client.WaitAuthorization(ctx, authz.URI); err != nil {
		t.Fatalf("authorization: %v\n%s", err, Tail(peb.Log(), 3000))
	}
	if order, err = client.WaitOrder(ctx, order.URI); err != nil {
		t.Fatal(err)
	}
	certKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, certKey)
	if err != nil {
		t.Fatal(err)
	}
	der, _, err := client.CreateCertFromOrder(ctx, order, csr, true)
	if err != nil {
		t.Fatalf("finalizing: %v\n%s", err, Tail(peb.Log(), 3000))
	}
	return der
}

// TestPebbleValidatesTLSALPN01OnTheTLSPort checks the kit's TLSPort: pebble connects there for
// tls-alpn-01 (SNI the name, ALPN acme-tls/1), and the certificate is issued and counted.
func TestPebbleValidatesTLSALPN01OnTheTLSPort(t *testing.T) {
	tlsAddr := Addr(t)
	_, port, _ := net.SplitHostPort(tlsAddr)
	tlsPort, _ := strconv.Atoi(port)
	peb := StartPebble(t, PebbleConfig{TLSPort: tlsPort})

	var mu sync.Mutex
	var chalCert *tls.Certificate
	var sni []string
	ln, err := tls.Listen("tcp", tlsAddr, &tls.Config{
		NextProtos: []string{"acme-tls/1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			mu.Lock()
			defer mu.Unlock()
			sni = append(sni, hello.ServerName)
			return chalCert, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
				c.(*tls.Conn).Handshake()                      //nolint:errcheck
				c.Close()
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accountKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	client := &acme.Client{Key: accountKey, DirectoryURL: peb.DirectoryURL, HTTPClient: peb.HTTPClient()}
	if _, err := client.Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
		t.Fatalf("registering: %v\n%s", err, Tail(peb.Log(), 3000))
	}
	der := obtainCert(ctx, t, peb, client, "b.test", "tls-alpn-01", func(chal *acme.Challenge) {
		c, err := client.TLSALPN01ChallengeCert(chal.Token, "b.test")
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		chalCert = &c
		mu.Unlock()
	})
	leaf, err := x509.ParseCertificate(der[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "b.test", Roots: peb.RootPool(), Intermediates: poolOf(t, der[1:])}); err != nil {
		t.Fatalf("the certificate does not verify against /roots/0: %v", err)
	}
	mu.Lock()
	if len(sni) == 0 || sni[0] != "b.test" {
		t.Errorf("tls-alpn-01 handshakes came with SNI %q, want b.test", sni)
	}
	mu.Unlock()
	if n, m := peb.IssuedFor("b.test"), peb.Validations("b.test"); n != 1 || m != 1 {
		t.Errorf("IssuedFor(b.test) = %d, Validations(b.test) = %d, want 1 and 1", n, m)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life < 89*24*time.Hour {
		t.Errorf("with no Validity the certificate lives %s, want pebble's default 90 days", life)
	}
}

func poolOf(t *testing.T, ders [][]byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, d := range ders {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			t.Fatal(err)
		}
		pool.AddCert(c)
	}
	return pool
}

// TestFindPebbleBinaryLooksInGoBin checks that the kit finds a go-installed pebble that is not on PATH
// (a fresh machine where .ci/run ran go install, whose GOPATH/bin is on nobody's PATH): with PATH
// holding only go's own directory it is found in $(go env GOBIN) or $(go env GOPATH)/bin.
func TestFindPebbleBinaryLooksInGoBin(t *testing.T) {
	findPebbleBinary(t, "pebble") // skips when it is not installed at all
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	out, err := exec.Command(goBin, "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	gobin, gopath, _ := strings.Cut(string(out), "\n")
	dirs := map[string]bool{}
	if g := strings.TrimSpace(gobin); g != "" {
		dirs[g] = true
	}
	for _, gp := range filepath.SplitList(strings.TrimSpace(gopath)) {
		dirs[filepath.Join(gp, "bin")] = true
	}
	if dirs[filepath.Dir(goBin)] {
		t.Skip("go's own directory is GOBIN: nothing to tell apart")
	}
	t.Setenv("PATH", filepath.Dir(goBin))
	got := findPebbleBinary(t, "pebble")
	if !dirs[filepath.Dir(got)] {
		t.Errorf("found %s, want it in one of %v", got, dirs)
	}
}

// TestCIRunInstallsThePebbleTheKitIsWrittenFor checks that .ci/run installs both binaries at the kit's
// PebbleVersion, so that the version the kit names in its skip message is the one CI runs.
func TestCIRunInstallsThePebbleTheKitIsWrittenFor(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"pebble", "pebble-challtestsrv"} {
		want := "github.com/letsencrypt/pebble/v2/cmd/" + cmd + "@" + PebbleVersion + " "
		if !strings.Contains(string(b), want) {
			t.Errorf(".ci/run does not go install %q", strings.TrimSpace(want))
		}
	}
}
