package frontend

// The front end's TLS as lb/config builds it from [frontend] (config.FrontTLS.Config), served by the
// TLS listener with the trivial handler of tls_test.go: only TLS 1.2 and 1.3 are accepted, ALPN gives
// http/1.1 with http2 = false, SNI chooses the certificate among tls_cert and [[frontend.certs]], and
// client_auth ("require", "verify_if_given") with client_ca refuses at the handshake the clients it
// must, which are counted as tls connection errors and reach no handler. (These were lb's
// tls_frontend_test.go, through a whole fairlead and a cluster; lb keeps the whole path: HTTPS reaching
// the leader, reloads, tunnels.)

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
)

// certFile is a certificate issued by a test CA and written as dir/NAME.crt and dir/NAME.key.
type certFile struct {
	cert     *x509.Certificate
	crt, key string
}

// writeCert issues a certificate of ca for names and writes it in dir as file.crt and file.key.
func writeCert(t *testing.T, ca *sim.CA, dir, file string, names ...string) certFile {
	t.Helper()
	leaf, err := ca.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := leaf.Write(dir, file)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(leaf.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return certFile{cert: cert, crt: crt, key: key}
}

// newTestCA is a CA made at run time (bench/sim/certs.go).
func newTestCA(t *testing.T, name string) *sim.CA {
	t.Helper()
	ca, err := sim.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// loadedTLSFront loads a config whose [frontend] has tls_listen and the lines more, and serves the TLS
// configuration lb/config built from it behind f's TLS listener; it returns the address, the front and
// the handler's request count.
func loadedTLSFront(t *testing.T, more string) (string, *Front, *atomic.Int64) {
	t.Helper()
	dir := testkit.WriteFiles(t, map[string]string{"10.toml": "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n" +
		"[[routes]]\npool = \"platform\"\n[frontend]\ntls_listen = \"127.0.0.1:0\"\n" + more + "\n"})
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
	addr, handled := tlsFront(t, f, func() *tls.Config { return cfg.Frontend.TLS.Config })
	return addr, f, handled
}

// certToml is tls_cert and tls_key set to c's files.
func certToml(c certFile) string { return fmt.Sprintf("tls_cert = %q\ntls_key = %q\n", c.crt, c.key) }

// tlsConn opens a TLS connection to addr and completes the handshake.
func tlsConn(addr string, cfg *tls.Config) (*tls.Conn, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, cfg)
	if err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	}
	return conn, err
}

// refusedErr reports whether a GET's error is a refusal, at the handshake or at the first read (with
// TLS 1.3 a server refusing the client's certificate says so after the client's handshake returned),
// rather than a timeout: a refused client is told so, or cut off, not left hanging.
func refusedErr(err error) bool {
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestTLSOnlyVersions12And13AreAccepted(t *testing.T) {
	ca := newTestCA(t, "frontend test CA")
	addr, _, handled := loadedTLSFront(t, certToml(writeCert(t, ca, t.TempDir(), "frontend", testServerName, "127.0.0.1")))
	for _, v := range []struct {
		name string
		ver  uint16
		ok   bool
	}{
		{"TLS 1.0", tls.VersionTLS10, false},
		{"TLS 1.1", tls.VersionTLS11, false},
		{"TLS 1.2", tls.VersionTLS12, true},
		{"TLS 1.3", tls.VersionTLS13, true},
	} {
		conn, err := tlsConn(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: testServerName, MinVersion: v.ver, MaxVersion: v.ver})
		if !v.ok {
			if err == nil {
				t.Errorf("a %s client completed a handshake (version %x), want it refused", v.name, conn.ConnectionState().Version)
				conn.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("a %s client: %v, want a handshake", v.name, err)
			continue
		}
		status, _, err := tlsGetOn(conn)
		if got := conn.ConnectionState().Version; status != 200 || err != nil || got != v.ver {
			t.Errorf("a %s client: %d, %v, version %x; want 200 over %s", v.name, status, err, got, v.name)
		}
		conn.Close()
	}
	if n := handled.Load(); n != 2 {
		t.Errorf("the handler got %d requests, want the 2 of the accepted clients", n)
	}
}

// With http2 = false, a client offering h2 is answered http/1.1 (lb's h2_test.go: with the default, h2).
func TestTLSALPNNegotiatesHTTP11WithoutHTTP2(t *testing.T) {
	ca := newTestCA(t, "frontend test CA")
	addr, _, _ := loadedTLSFront(t, certToml(writeCert(t, ca, t.TempDir(), "frontend", testServerName, "127.0.0.1"))+"http2 = false\n")
	for _, offer := range [][]string{{"http/1.1"}, {"h2", "http/1.1"}} {
		conn, err := tlsConn(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: testServerName, NextProtos: offer})
		if err != nil {
			t.Errorf("offering %v: %v", offer, err)
			continue
		}
		if status, _, err := tlsGetOn(conn); status != 200 || err != nil {
			t.Errorf("offering %v: %d, %v; want 200", offer, status, err)
		}
		if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Errorf("offering %v: negotiated %q, want http/1.1", offer, p)
		}
		conn.Close()
	}
}

func TestTLSSNIChoosesTheCertificate(t *testing.T) {
	ca, dir := newTestCA(t, "frontend test CA"), t.TempDir()
	def := writeCert(t, ca, dir, "default", "default.example", "127.0.0.1")
	a := writeCert(t, ca, dir, "a", "a.example", "127.0.0.1")
	b := writeCert(t, ca, dir, "b", "b.example", "127.0.0.1")
	wild := writeCert(t, ca, dir, "wild", "*.w.example", "127.0.0.1")
	exact := writeCert(t, ca, dir, "exact", "exact.w.example", "127.0.0.1")
	certs := func(cs ...certFile) string {
		var s strings.Builder
		for _, c := range cs {
			fmt.Fprintf(&s, "[[frontend.certs]]\ncert = %q\nkey = %q\n", c.crt, c.key)
		}
		return s.String()
	}

	// check connects with SNI name (none if ""): the certificate presented must be want's and, when
	// verify, verified against the CA for the name.
	check := func(t *testing.T, addr, name string, want certFile, wantName string, verify bool) {
		t.Helper()
		conn, err := tlsConn(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: name, InsecureSkipVerify: !verify})
		if err != nil {
			t.Errorf("server name %q: %v", name, err)
			return
		}
		defer conn.Close()
		cs := conn.ConnectionState()
		if got := cs.PeerCertificates[0]; !bytes.Equal(got.Raw, want.cert.Raw) {
			t.Errorf("server name %q: got the certificate of %v (serial %s), want %s's (%v)", name, got.DNSNames, got.SerialNumber, wantName, want.cert.DNSNames)
			return
		}
		if verify {
			if len(cs.VerifiedChains) == 0 {
				t.Errorf("server name %q: no verified chain", name)
			} else if err := cs.PeerCertificates[0].VerifyHostname(name); err != nil {
				t.Errorf("server name %q: %v", name, err)
			}
		}
	}

	t.Run("tls_cert is the default", func(t *testing.T) {
		addr, _, _ := loadedTLSFront(t, certToml(def)+certs(a, b, wild, exact))
		check(t, addr, "a.example", a, "a", true)
		check(t, addr, "b.example", b, "b", true)
		check(t, addr, "A.EXAMPLE", a, "a", true) // names are case-insensitive
		check(t, addr, "unknown.example", def, "the default", false)
		check(t, addr, "", def, "the default (no SNI)", false)
		check(t, addr, "default.example", def, "the default", true)
		// An exact name beats a wildcard listed before it; a wildcard covers one label.
		check(t, addr, "exact.w.example", exact, "exact", true)
		check(t, addr, "other.w.example", wild, "the wildcard", true)
		check(t, addr, "deep.other.w.example", def, "the default", false)
		// Requests are served over the certificate chosen.
		status, cert, err := tlsGet(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "b.example"})
		if status != 200 || err != nil || !bytes.Equal(cert.Raw, b.cert.Raw) {
			t.Errorf("GET with server name b.example: %d, %v, want 200 over b's certificate", status, err)
		}
	})
	t.Run("without tls_cert the first of frontend.certs is the default", func(t *testing.T) {
		addr, _, _ := loadedTLSFront(t, certs(b, a))
		check(t, addr, "a.example", a, "a", true)
		check(t, addr, "b.example", b, "b", true)
		check(t, addr, "unknown.example", b, "the first of frontend.certs (b)", false)
		check(t, addr, "", b, "the first of frontend.certs (b), no SNI", false)
	})
}

// clientAuthFront serves a front with client_ca (a CA of its own, returned) and client_auth = mode;
// client returns a client config of version ver (0: any) trusting the server, presenting a
// certificate of from (none if nil) whatever CAs the server names as acceptable.
func clientAuthFront(t *testing.T, mode string) (addr string, f *Front, handled *atomic.Int64, ca, clients *sim.CA, client func(from *sim.CA, ver uint16) *tls.Config) {
	t.Helper()
	ca, clients, dir := newTestCA(t, "frontend test CA"), newTestCA(t, "clients CA"), t.TempDir()
	clientCA, err := clients.WriteCA(dir, "clients-ca")
	if err != nil {
		t.Fatal(err)
	}
	addr, f, handled = loadedTLSFront(t, certToml(writeCert(t, ca, dir, "frontend", testServerName, "127.0.0.1"))+
		fmt.Sprintf("client_ca = %q\nclient_auth = %q\n", clientCA, mode))
	client = func(from *sim.CA, ver uint16) *tls.Config { return clientTLS(t, ca, from, ver) }
	return addr, f, handled, ca, clients, client
}

// With client_auth = "require" a client without a certificate of client_ca (none, another CA's, the
// server's own CA's) is refused at the handshake, counted and given nothing; one with such a
// certificate is served.
func TestTLSClientAuthRequire(t *testing.T) {
	addr, f, handled, ca, clients, client := clientAuthFront(t, "require")
	stranger := newTestCA(t, "another CA")
	failures, refusals := f.Errors.Count(ConnTLS), uint64(0)
	for _, v := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no certificate, TLS 1.2", client(nil, tls.VersionTLS12)},
		{"no certificate, TLS 1.3", client(nil, tls.VersionTLS13)},
		{"a certificate from another CA", client(stranger, 0)},
		{"the server's own CA", client(ca, 0)},
	} {
		if status, _, err := tlsGet(addr, v.cfg); !refusedErr(err) {
			t.Errorf("%s: %d, %v; want refused at the handshake", v.name, status, err)
		} else {
			refusals++
		}
	}
	if !testkit.Within(3*time.Second, func() bool { return f.Errors.Count(ConnTLS) >= failures+refusals }) {
		t.Errorf("tls connection errors went from %d to %d after %d refused handshakes", failures, f.Errors.Count(ConnTLS), refusals)
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("refused clients reached the handler: %d requests", n)
	}
	for _, ver := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if status, _, err := tlsGet(addr, client(clients, ver)); status != 200 || err != nil {
			t.Errorf("a client with a certificate from the client CA (version %x): %d, %v; want 200", ver, status, err)
		}
	}
}

// With client_auth = "verify_if_given" a client without a certificate is served, and so is one with a
// certificate of client_ca; one with another CA's is refused at the handshake, counted and given
// nothing.
func TestTLSClientAuthVerifyIfGiven(t *testing.T) {
	addr, f, handled, _, clients, client := clientAuthFront(t, "verify_if_given")
	stranger := newTestCA(t, "another CA")
	if status, _, err := tlsGet(addr, client(nil, 0)); status != 200 || err != nil {
		t.Errorf("no client certificate: %d, %v; want 200", status, err)
	}
	if status, _, err := tlsGet(addr, client(clients, 0)); status != 200 || err != nil {
		t.Errorf("a certificate from the client CA: %d, %v; want 200", status, err)
	}
	before, failures := handled.Load(), f.Errors.Count(ConnTLS)
	for _, ver := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if status, _, err := tlsGet(addr, client(stranger, ver)); !refusedErr(err) {
			t.Errorf("a certificate from another CA (version %x): %d, %v; want refused at the handshake", ver, status, err)
		}
	}
	if !testkit.Within(3*time.Second, func() bool { return f.Errors.Count(ConnTLS) >= failures+2 }) {
		t.Errorf("tls connection errors went from %d to %d after 2 refused handshakes", failures, f.Errors.Count(ConnTLS))
	}
	if n := handled.Load() - before; n != 0 {
		t.Errorf("refused clients reached the handler: %d requests", n)
	}
}
