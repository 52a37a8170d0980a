package config

// The front end's TLS as loaded: the certificates (chosen by SNI among tls_cert and [[frontend.certs]]:
// exact name, then wildcard, else the first) and the client CAs are read when the config is loaded, so
// that a bad file fails the load or the reload naming the file and the key, and the running ones stay.
// TLS 1.2 and 1.3 only, Go's default cipher suites, ALPN http/1.1.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
)

// FrontTLS is the loaded TLS of the front end, part of an immutable Config.
type FrontTLS struct {
	Certs  []tls.Certificate // tls_cert first, then [[frontend.certs]]; certs[0] is the default
	Files  []string          // the certificate file of each
	byName map[string]int    // an exact DNS name (lower case) → index in certs
	wild   map[string]int    // "example.com" for a "*.example.com" name → index
	Config *tls.Config       // what a handshake uses
	Port   string            // tls_listen's port, for redirect_https
}

// loadFrontTLS validates [frontend]'s TLS keys and reads their files into c.Frontend.tls.
func (c *Config) loadFrontTLS() []string {
	fe := &c.Frontend
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at("frontend."+key, format, args...)) }
	if fe.TLSListen == "" {
		for key, set := range map[string]bool{"tls_cert": fe.TLSCert != "", "tls_key": fe.TLSKey != "",
			"certs": len(fe.Certs) > 0, "client_ca": fe.ClientCA != "", "client_auth": fe.ClientAuth != "",
			"redirect_https": fe.RedirectHTTPS, "http2": c.set(&fe.HTTP2) && fe.HTTP2} {
			if set {
				add(key, "needs tls_listen (the HTTPS listener)")
			}
		}
		return p
	}
	ft := &FrontTLS{byName: map[string]int{}, wild: map[string]int{}}
	if _, port, err := net.SplitHostPort(fe.TLSListen); err == nil {
		ft.Port = port
	}
	read := func(key, file string) []byte {
		data, err := c.readFile("frontend."+key, file) // in the config digest: a reload applies a new file
		if err != nil {
			add(key, "%v", err)
			return nil
		}
		return data
	}
	pair := func(certKey, keyKey, certFile, keyFile string) {
		switch {
		case certFile == "" && keyFile == "":
			return
		case certFile == "":
			add(certKey, "missing: %s needs its certificate", keyKey)
			return
		case keyFile == "":
			add(keyKey, "missing: %s needs its key", certKey)
			return
		}
		certPEM, keyPEM := read(certKey, certFile), read(keyKey, keyFile)
		if certPEM == nil || keyPEM == nil {
			return
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// The error says what is wrong (no PEM data, a key that does not parse or match), never the
			// key itself; it is the key's when it says "key".
			if strings.Contains(err.Error(), "key") {
				add(keyKey, "%s (for %s): %v", keyFile, certFile, err)
			} else {
				add(certKey, "%s: %v", certFile, err)
			}
			return
		}
		i := len(ft.Certs)
		ft.Certs, ft.Files = append(ft.Certs, cert), append(ft.Files, certFile)
		for _, name := range cert.Leaf.DNSNames {
			name = strings.ToLower(name)
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				if _, dup := ft.wild[rest]; !dup {
					ft.wild[rest] = i
				}
			} else if _, dup := ft.byName[name]; !dup {
				ft.byName[name] = i
			}
		}
	}
	pair("tls_cert", "tls_key", fe.TLSCert, fe.TLSKey)
	for i, cc := range fe.Certs {
		k := fmt.Sprintf("certs.%d.", i)
		if cc.Cert == "" || cc.Key == "" {
			add(k+"cert", "a [[frontend.certs]] entry needs cert and key")
			continue
		}
		pair(k+"cert", k+"key", cc.Cert, cc.Key)
	}
	if len(ft.Certs) == 0 && len(p) == 0 && fe.ACME == nil {
		add("tls_listen", "needs a certificate: tls_cert and tls_key, [[frontend.certs]] or [frontend.acme]")
	}

	ft.Config = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: ft.certificate,
	}
	if fe.HTTP2 {
		ft.Config.NextProtos = []string{"h2", "http/1.1"}
	}
	switch fe.ClientAuth {
	case "":
		if fe.ClientCA != "" {
			add("client_ca", "needs client_auth (\"require\" or \"verify_if_given\")")
		}
	case "require", "verify_if_given":
		if fe.ClientCA == "" {
			add("client_auth", "needs client_ca (the CAs that sign client certificates)")
			break
		}
		ft.Config.ClientAuth = tls.RequireAndVerifyClientCert
		if fe.ClientAuth == "verify_if_given" {
			ft.Config.ClientAuth = tls.VerifyClientCertIfGiven
		}
		if data := read("client_ca", fe.ClientCA); data != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(data) {
				add("client_ca", "%s holds no PEM certificate", fe.ClientCA)
			}
			ft.Config.ClientCAs = pool
		}
	default:
		add("client_auth", "must be \"require\" or \"verify_if_given\" (or unset), got %q", fe.ClientAuth)
	}
	if fe.RedirectHTTPS && fe.Listen == "" {
		add("redirect_https", "needs listen (the plain listener whose requests it redirects)")
	}
	fe.TLS = ft
	return p
}

// errNoCertificate fails a handshake when no certificate is loaded from files ([frontend.acme] alone)
// and ACME has none for its name yet.
var errNoCertificate = errors.New("no certificate for this name yet")

// certificate chooses the certificate of a handshake by its SNI name.
func (ft *FrontTLS) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if len(ft.Certs) == 0 {
		return nil, errNoCertificate
	}
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if i, ok := ft.byName[name]; ok {
		return &ft.Certs[i], nil
	}
	if dot := strings.IndexByte(name, '.'); dot > 0 {
		if i, ok := ft.wild[name[dot+1:]]; ok {
			return &ft.Certs[i], nil
		}
	}
	return &ft.Certs[0], nil
}

// Same reports whether two [pools.NAME.tls] tables make the same connections: the same keys and the
// same contents of their files.
func (t *PoolTLS) Same(o *PoolTLS) bool {
	return t.Enabled == o.Enabled && t.CAFile == o.CAFile && t.ServerName == o.ServerName &&
		t.InsecureSkipVerify == o.InsecureSkipVerify && t.Cert == o.Cert && t.Key == o.Key && t.sum == o.sum
}

// ClientFor returns the TLS config of connections to the server at addr, or nil for plain TCP. Without
// server_name, the name sent (SNI) and verified is the server's host; an IP address is verified
// against the certificate's IP SANs (and sent as no SNI).
func (t *PoolTLS) ClientFor(addr string) *tls.Config {
	if t.Client == nil {
		return nil
	}
	cfg := t.Client.Clone() // shares the session cache
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}
