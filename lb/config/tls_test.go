package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// poolTLS is a [pools.POOL.tls] table with enabled = true and the given lines.
func poolTLS(pool string, lines ...string) string {
	return fmt.Sprintf("[pools.%s.tls]\nenabled = true\n%s\n", pool, strings.Join(lines, "\n"))
}

func TestPoolTLSErrorsNameTheFileAndTheKey(t *testing.T) {
	ca, err := sim.NewCA("CA")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	caFile, err := ca.WriteCA(tmp, "ca")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ca.Issue("fairlead-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Issue("fairlead-b")
	if err != nil {
		t.Fatal(err)
	}
	certA, keyA, err := a.Write(tmp, "a")
	if err != nil {
		t.Fatal(err)
	}
	_, keyB, err := b.Write(tmp, "b")
	if err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(tmp, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(tmp, "missing.pem")

	f := func(table, want string) {
		t.Helper()
		files := map[string]string{"10-base.toml": `
[pools.platform]
servers = ["127.0.0.1:9081"]
[[routes]]
pool = "platform"
`, "20-platform.toml": table}
		_, err := Load(testkit.WriteFiles(t, files))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s: error %v, want an *Error", table, err)
		}
		if !slices.ContainsFunc(ce.Problems, func(p string) bool {
			return strings.HasSuffix(strings.SplitN(p, ": ", 2)[0], "20-platform.toml") && strings.Contains(p, want)
		}) {
			t.Errorf("%s:\nproblems %q\nwant one from 20-platform.toml containing %q", table, ce.Problems, want)
		}
		if strings.Contains(err.Error(), "PRIVATE KEY-----") || strings.Contains(err.Error(), strings.Split(string(a.KeyPEM), "\n")[1]) {
			t.Errorf("a key's contents in the error: %v", err)
		}
	}
	q := func(key, v string) string { return fmt.Sprintf("%s = %q", key, v) }

	// Keys of the table without enabled = true: parsed, so not silently ignored.
	f("[pools.platform.tls]\n"+q("ca_file", caFile), "pools.platform.tls.ca_file: needs enabled = true")
	f("[pools.platform.tls]\nenabled = false\ninsecure_skip_verify = false", "pools.platform.tls.insecure_skip_verify: needs enabled = true")
	f("[pools.platform.tls]\n"+q("server_name", "x"), "pools.platform.tls.server_name: needs enabled = true")
	f("[pools.platform.tls]\n"+q("cert", certA)+"\n"+q("key", keyA), "pools.platform.tls.cert: needs enabled = true")
	// Files.
	f(poolTLS("platform", q("ca_file", missing)), "pools.platform.tls.ca_file: open "+missing+": no such file or directory")
	f(poolTLS("platform", q("ca_file", garbage)), "pools.platform.tls.ca_file: "+garbage+": no PEM certificate in it")
	f(poolTLS("platform", q("ca_file", keyA)), `pools.platform.tls.ca_file: `+keyA+`: PEM block 1 is a "PRIVATE KEY", not a CERTIFICATE`)
	f(poolTLS("platform", q("cert", certA)), "pools.platform.tls.key: cert and key go together: key is missing")
	f(poolTLS("platform", q("key", keyA)), "pools.platform.tls.cert: cert and key go together: cert is missing")
	f(poolTLS("platform", q("cert", certA), q("key", missing)), "pools.platform.tls.key: open "+missing)
	f(poolTLS("platform", q("cert", certA), q("key", keyB)), "pools.platform.tls.cert: "+certA+" with key "+keyB+": tls: private key does not match public key")
	f(poolTLS("platform", q("cert", garbage), q("key", keyA)), "pools.platform.tls.cert: "+garbage+" with key "+keyA+": tls: failed to find any PEM data in certificate input")
	// Keys.
	f(poolTLS("platform", q("ca_file", caFile), "insecure_skip_verify = true"), "pools.platform.tls.ca_file: not used with insecure_skip_verify = true")
	f(poolTLS("platform", q("server_name", "platform.internal:443")), `pools.platform.tls.server_name: bad server name "platform.internal:443"`)
	f(poolTLS("platform", "verify = false"), "pools.platform.tls.verify: unknown key")

	// And a good table loads.
	files := map[string]string{"10.toml": "[pools.platform]\nservers = [\"127.0.0.1:9081\"]\n[[routes]]\npool = \"platform\"\n",
		"20.toml": poolTLS("platform", q("ca_file", caFile), q("server_name", "platform.internal"), q("cert", certA), q("key", keyA))}
	cfg, err := Load(testkit.WriteFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Pools["platform"].TLS.Client
	if tc == nil || tc.RootCAs == nil || tc.ServerName != "platform.internal" || len(tc.Certificates) != 1 || tc.InsecureSkipVerify {
		t.Fatalf("client TLS config %+v", tc)
	}
	if want := []string{caFile, certA, keyA}; !slices.Equal(cfg.SecretFiles(), want) {
		t.Errorf("SecretFiles %v, want %v", cfg.SecretFiles(), want)
	}
}

// Without server_name the name sent and verified is each server's host (an IP address verified against
// the certificate's IP SANs); with it, that name for every server of the pool.
func TestPoolTLSVerifiesTheServersHostUnlessServerNameIsSet(t *testing.T) {
	f := func(lines, addr, want string) {
		t.Helper()
		cfg, err := Load(testkit.WriteFiles(t, map[string]string{"10.toml": minimalConfig, "20.toml": poolTLS("platform", lines)}))
		if err != nil {
			t.Fatal(err)
		}
		tc := cfg.Pools["platform"].TLS.ClientFor(addr)
		if tc == nil || tc.ServerName != want {
			t.Errorf("%q, server %s: client TLS config %+v, want ServerName %q", lines, addr, tc, want)
		}
	}
	f("", "127.0.0.1:8443", "127.0.0.1")
	f("", "platform-a.internal:8443", "platform-a.internal")
	f("", "[::1]:8443", "::1")
	f(`server_name = "platform.internal"`, "127.0.0.1:8443", "platform.internal")
	f(`server_name = "platform.internal"`, "platform-a.internal:8443", "platform.internal")
}

// A bad [frontend] TLS key or file fails the load with a *Error naming the file of the config and the
// key (and the certificate file at fault); a valid TLS front end loads. (From lb's
// tls_frontend_test.go, #37, with the file checks of its bad-certificate reload: the reload's error is
// this one, and lb keeps that the old certificate stays.)
func TestFrontTLSErrorsNameTheFileAndTheKey(t *testing.T) {
	ca, err := sim.NewCA("fairlead test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string) (string, string) {
		leaf, err := ca.Issue("fairlead.example", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		crt, key, err := leaf.Write(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return crt, key
	}
	crt, key := write("frontend")
	_, otherKey := write("other") // a valid key that is not crt's
	clientCA, err := ca.WriteCA(dir, "clients-ca")
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	badCert := file("bad.crt", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
	notPEM := file("garbage.crt", "garbage\n")
	badKey := file("bad.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	front := func(lines ...string) string {
		return "[frontend]\ntls_listen = \"127.0.0.1:0\"\n" + strings.Join(lines, "\n") + "\n"
	}
	q := func(key, v string) string { return fmt.Sprintf("%s = %q", key, v) }
	tlsOK := front(q("tls_cert", crt), q("tls_key", key))

	// Each want is a list of alternatives (the error names one of them); all wants must hold.
	f := func(name, extra string, want ...[]string) {
		t.Helper()
		_, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": minimalConfig, "20-bad.toml": extra}))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want an *Error", name, err)
			return
		}
		for _, w := range want {
			if !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(err.Error(), s) }) {
				t.Errorf("%s: error %q names none of %q", name, err, w)
			}
		}
	}
	one := func(s string) []string { return []string{s} }
	bad := "20-bad.toml: "

	// The valid config the cases break: it loads.
	if _, err := Load(testkit.WriteFiles(t, map[string]string{"10-base.toml": minimalConfig, "20-tls.toml": tlsOK +
		fmt.Sprintf("client_ca = %q\nclient_auth = \"require\"\nredirect_https = true\n", clientCA)})); err != nil {
		t.Fatalf("a valid TLS config: %v", err)
	}

	f("tls_listen without a certificate", front(), one(bad+"frontend.tls_listen"))
	f("tls_cert without tls_key", front(q("tls_cert", crt)), []string{bad + "frontend.tls_key", bad + "frontend.tls_cert"})
	f("tls_key without tls_cert", front(q("tls_key", key)), []string{bad + "frontend.tls_key", bad + "frontend.tls_cert"})
	f("a missing certificate file", front(q("tls_cert", missing), q("tls_key", key)), one(bad+"frontend.tls_cert"), one(missing))
	f("a missing certificate file in frontend.certs", front("[[frontend.certs]]", q("cert", missing), q("key", key)),
		one(bad+"frontend.certs."), one(missing))
	f("client_auth without client_ca", tlsOK+"client_auth = \"require\"\n", []string{bad + "frontend.client_auth", bad + "frontend.client_ca"})
	f("a bad client_auth value", tlsOK+fmt.Sprintf("client_ca = %q\nclient_auth = \"sometimes\"\n", clientCA), one(bad+"frontend.client_auth"))
	f("listen = \"\" without tls_listen", "[frontend]\nlisten = \"\"\n", one(bad+"frontend.listen"))
	f("a bad tls_listen address", strings.Replace(tlsOK, `"127.0.0.1:0"`, `"localhost"`, 1), one(bad+"frontend.tls_listen"))
	// The certificate files a reload reads again (lb's
	// TestTLSReloadSwapsTheCertificateWithoutDroppingConnectionsAndABadOneKeepsTheOld).
	f("an unparsable certificate", front(q("tls_cert", badCert), q("tls_key", key)), one("frontend.tls_cert"), one(badCert))
	f("a certificate file that is not PEM", front(q("tls_cert", notPEM), q("tls_key", key)), one("frontend.tls_cert"), one(notPEM))
	f("an unparsable key", front(q("tls_cert", crt), q("tls_key", badKey)), one("frontend.tls_key"), one(badKey))
	f("a key not matching the certificate", front(q("tls_cert", crt), q("tls_key", otherKey)),
		[]string{"frontend.tls_cert", "frontend.tls_key"}, []string{crt, otherKey})
}
