package dialer

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/lb/nbio"
)

// TLS dialing ([pools.NAME.tls], issue #11) against servers on 127.0.0.1 whose certificates a private CA
// made at run time issues (bench/sim/certs.go).

func newCA(t *testing.T, name string) *sim.CA {
	t.Helper()
	ca, err := sim.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *sim.CA, names ...string) *sim.Leaf {
	t.Helper()
	leaf, err := ca.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// serveTLS listens on 127.0.0.1 with a certificate of ca for names; base, if not nil, is the rest of
// the server's config (client certificates asked for). Each session that completes its handshake is
// told "hello CN" (CN the common name of the client's certificate, "-" without one) and closed.
func serveTLS(t *testing.T, ca *sim.CA, base *tls.Config, names ...string) string {
	t.Helper()
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.Certificates = []tls.Certificate{issue(t, ca, names...).TLS}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
				defer c.Close()
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
				if tc.Handshake() != nil {
					return
				}
				cn := "-"
				if peer := tc.ConnectionState().PeerCertificates; len(peer) > 0 {
					cn = peer[0].Subject.CommonName
				}
				io.WriteString(tc, "hello "+cn+"\n") //nolint:errcheck
			}()
		}
	}()
	return ln.Addr().String()
}

// greeting dials d and returns the server's greeting, or the error of the dial or of the read (a TLS
// 1.3 server's alert arrives after the client's handshake has completed).
func greeting(d *Dialer) (string, error) {
	c, err := d.Dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func TestDialWithAPrivateCAVerifiesTheServerAndGivesATLSConnection(t *testing.T) {
	ca := newCA(t, "platform CA")
	addr := serveTLS(t, ca, nil, "127.0.0.1")
	d := &Dialer{Addr: addr, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}
	c, err := d.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.(*tls.Conn)
	if !ok {
		t.Fatalf("Dial returned a %T, want a *tls.Conn", c)
	}
	st := tc.ConnectionState()
	if !st.HandshakeComplete || len(st.VerifiedChains) == 0 || !st.VerifiedChains[0][len(st.VerifiedChains[0])-1].Equal(ca.Cert) {
		t.Fatalf("handshake complete %v, verified chains %d: want the server verified up to the private CA", st.HandshakeComplete, len(st.VerifiedChains))
	}
	// A tunnel's connection: TLS over an *nbio.TCPConn, which the tunnel engine can read in evented mode.
	if _, ok := tc.NetConn().(*nbio.TCPConn); !ok {
		t.Errorf("TLS over a %T, want an *nbio.TCPConn", tc.NetConn())
	}
	if got, err := greeting(d); err != nil || got != "hello -" {
		t.Fatalf("greeting %q, %v; want %q", got, err, "hello -")
	}
}

// A failed handshake is a failed dial: an *Error, so that any request, a POST too, may go to another
// server. Its text says TLS and the reason in crypto/tls's words (the health check logs it).
func TestAFailedHandshakeIsAnErrorSayingWhy(t *testing.T) {
	ca, other := newCA(t, "platform CA"), newCA(t, "another CA")
	addr := serveTLS(t, ca, nil, "127.0.0.1")
	named := serveTLS(t, ca, nil, "platform.internal")
	f := func(name string, dial func() (net.Conn, error), want string, wantAs any) {
		t.Helper()
		c, err := dial()
		if err == nil {
			c.Close()
			t.Fatalf("%s: dialled, want an error", name)
		}
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("%s: error %T %v, want a *dialer.Error", name, err, err)
		}
		if err.Error() != want {
			t.Errorf("%s: error %q, want %q", name, err, want)
		}
		if !errors.As(err, wantAs) {
			t.Errorf("%s: error %v does not unwrap to a %T", name, err, wantAs)
		}
	}
	wrongCA := &Dialer{Addr: addr, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: other.Pool(), ServerName: "127.0.0.1"}}
	const unknown = "TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority"
	f("a wrong CA", wrongCA.Dial, unknown, new(x509.UnknownAuthorityError))
	// The upstream client's dial, with its layer under TLS.
	under := func(sock net.Conn, nb *nbio.TCPConn) net.Conn {
		if nb == nil {
			t.Error("DialUnder gave no *nbio.TCPConn for a TCP socket")
		}
		return sock
	}
	f("a wrong CA under the upstream client's layer", func() (net.Conn, error) { return wrongCA.DialUnder(under, false) },
		unknown, new(x509.UnknownAuthorityError))

	// The name verified is ServerName (its callers set the host dialled when none is configured: an IP
	// address is verified against the certificate's IP SANs).
	byIP := &Dialer{Addr: named, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}
	f("a certificate for another name", byIP.Dial,
		"TLS handshake: tls: failed to verify certificate: x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs",
		new(x509.HostnameError))
	otherName := &Dialer{Addr: named, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "platform.example"}}
	f("a server name the certificate lacks", otherName.Dial,
		"TLS handshake: tls: failed to verify certificate: x509: certificate is valid for platform.internal, not platform.example",
		new(x509.HostnameError))
}

func TestServerNameIsTheNameSentAndVerified(t *testing.T) {
	ca := newCA(t, "platform CA")
	sni := make(chan string, 1)
	addr := serveTLS(t, ca, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		sni <- hi.ServerName
		return nil, nil
	}}, "platform.internal")
	d := &Dialer{Addr: addr, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "platform.internal"}}
	if got, err := greeting(d); err != nil || got != "hello -" {
		t.Fatalf("greeting %q, %v; want %q", got, err, "hello -")
	}
	if got := <-sni; got != "platform.internal" {
		t.Errorf("SNI %q, want platform.internal", got)
	}
}

func TestTheClientCertificateIsPresentedToAServerThatRequiresOne(t *testing.T) {
	ca := newCA(t, "platform CA")
	addr := serveTLS(t, ca, &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}, "127.0.0.1")

	// Without one the server refuses the session: its alert ends the dial or, over TLS 1.3 (whose
	// client handshake is over before the server reads the certificate), the first read.
	_, err := greeting(&Dialer{Addr: addr, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}})
	if err == nil || !strings.Contains(err.Error(), "remote error: tls: certificate required") {
		t.Fatalf("without a client certificate: %v, want the server's alert (certificate required)", err)
	}

	client := issue(t, ca, "fairlead")
	d := &Dialer{Addr: addr, Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{client.TLS}}}
	if got, err := greeting(d); err != nil || got != "hello fairlead" {
		t.Fatalf("greeting %q, %v; want the server to have verified fairlead's certificate", got, err)
	}
}

// With InsecureSkipVerify ([pools.NAME.tls] insecure_skip_verify = true) nothing is verified: a server
// whose certificate an unknown CA issued for another name is dialled. (From lb's
// tls_upstream_test.go, #37, which keeps the warning fairlead logs for it.)
func TestInsecureSkipVerifyDialsAServerOfAnUnknownCAForAnotherName(t *testing.T) {
	addr := serveTLS(t, newCA(t, "unknown CA"), nil, "somewhere.else")
	d := &Dialer{Addr: addr, Timeout: 5 * time.Second, TLS: &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}}
	if got, err := greeting(d); err != nil || got != "hello -" {
		t.Fatalf("greeting %q, %v; want %q", got, err, "hello -")
	}
}
