package lb

// TLS on the front end: an HTTPS listener (tls_listen) beside the plain one, served by the same
// fasthttp.Server and checked by the same framer (framing.go) once decrypted. Certificates are chosen
// by SNI among tls_cert and [[frontend.certs]] (exact name, then wildcard, else the first); client
// certificates are asked for with client_ca + client_auth. The certificates and CAs are read when the
// config is loaded (a bad file fails the load or the reload, naming the file and the key, and the
// running ones stay) and every handshake takes the running generation's: a reload replaces them
// without touching open connections. TLS 1.2 and 1.3 only, Go's default cipher suites, ALPN http/1.1.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// frontTLS is the loaded TLS of the front end, part of an immutable Config.
type frontTLS struct {
	certs  []tls.Certificate // tls_cert first, then [[frontend.certs]]; certs[0] is the default
	files  []string          // the certificate file of each
	byName map[string]int    // an exact DNS name (lower case) → index in certs
	wild   map[string]int    // "example.com" for a "*.example.com" name → index
	conf   *tls.Config       // what a handshake uses
	port   string            // tls_listen's port, for redirect_https
}

// loadFrontTLS validates [frontend]'s TLS keys and reads their files into c.Frontend.tls.
func (c *Config) loadFrontTLS() []string {
	fe := &c.Frontend
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at("frontend."+key, format, args...)) }
	if fe.TLSListen == "" {
		for key, set := range map[string]bool{"tls_cert": fe.TLSCert != "", "tls_key": fe.TLSKey != "",
			"certs": len(fe.Certs) > 0, "client_ca": fe.ClientCA != "", "client_auth": fe.ClientAuth != "",
			"redirect_https": fe.RedirectHTTPS} {
			if set {
				add(key, "needs tls_listen (the HTTPS listener)")
			}
		}
		return p
	}
	ft := &frontTLS{byName: map[string]int{}, wild: map[string]int{}}
	if _, port, err := net.SplitHostPort(fe.TLSListen); err == nil {
		ft.port = port
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
		i := len(ft.certs)
		ft.certs, ft.files = append(ft.certs, cert), append(ft.files, certFile)
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
	if len(ft.certs) == 0 && len(p) == 0 {
		add("tls_listen", "needs a certificate: tls_cert and tls_key, or [[frontend.certs]]")
	}

	ft.conf = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: ft.certificate,
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
		ft.conf.ClientAuth = tls.RequireAndVerifyClientCert
		if fe.ClientAuth == "verify_if_given" {
			ft.conf.ClientAuth = tls.VerifyClientCertIfGiven
		}
		if data := read("client_ca", fe.ClientCA); data != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(data) {
				add("client_ca", "%s holds no PEM certificate", fe.ClientCA)
			}
			ft.conf.ClientCAs = pool
		}
	default:
		add("client_auth", "must be \"require\" or \"verify_if_given\" (or unset), got %q", fe.ClientAuth)
	}
	if fe.RedirectHTTPS && fe.Listen == "" {
		add("redirect_https", "needs listen (the plain listener whose requests it redirects)")
	}
	fe.tls = ft
	return p
}

// certificate chooses the certificate of a handshake by its SNI name.
func (ft *frontTLS) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if i, ok := ft.byName[name]; ok {
		return &ft.certs[i], nil
	}
	if dot := strings.IndexByte(name, '.'); dot > 0 {
		if i, ok := ft.wild[name[dot+1:]]; ok {
			return &ft.certs[i], nil
		}
	}
	return &ft.certs[0], nil
}

// tlsFiles are the files of the front end's TLS (the config watcher follows them).
func (fe *FrontendConfig) tlsFiles() []string {
	var files []string
	for _, f := range []string{fe.TLSCert, fe.TLSKey, fe.ClientCA} {
		if f != "" {
			files = append(files, f)
		}
	}
	for _, cc := range fe.Certs {
		files = append(files, cc.Cert, cc.Key)
	}
	return files
}

// tlsListener wraps the HTTPS listener: every accepted connection becomes a TLS server connection
// with the running generation's configuration, under a frontConn (framing.go).
func (lb *LB) tlsListener(ln net.Listener) net.Listener {
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			ft := lb.gen.Load().cfg.Frontend.tls
			if ft == nil { // a reload removed tls_listen: the listener stays until a restart, serving nothing
				return nil, errNoTLS
			}
			return ft.conf, nil
		},
	}
	return &frontListener{Listener: ln, lb: lb, tls: base}
}

var errNoTLS = errors.New("tls_listen is no longer configured")

// tlsFrontConn is a frontConn over TLS: fasthttp sees the TLS connection state through it
// (RequestCtx.IsTLS, X-Forwarded-Proto: https).
type tlsFrontConn struct{ *frontConn }

func (c tlsFrontConn) Handshake() error                     { return c.handshake() }
func (c tlsFrontConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// frontOf returns the frontConn under a connection fasthttp hands to the handler, or nil.
func frontOf(c net.Conn) *frontConn {
	switch fc := c.(type) {
	case *frontConn:
		return fc
	case tlsFrontConn:
		return fc.frontConn
	}
	return nil
}

// handshake runs a TLS connection's handshake once (fasthttp asks for it before the first read, to
// learn the ALPN protocol; Read asks too), bounded by header_timeout (10s when unset). A failed
// handshake (no client certificate when one is required, an old protocol version, plain HTTP) is a
// connection error of kind tls, and the connection then reads EOF: it closes without an answer. A
// client that went away before its hello (a port probe) is not a failure.
func (c *frontConn) handshake() error {
	if c.shook {
		return c.hsErr
	}
	c.shook = true
	d := c.f.lim.headerTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	c.tc.SetDeadline(time.Now().Add(d)) //nolint:errcheck // a failed handshake reports it
	if c.hsErr = c.tc.Handshake(); c.hsErr != nil {
		if !errors.Is(c.hsErr, io.EOF) {
			c.noteError(connTLS)
		}
		return c.hsErr
	}
	c.tc.SetWriteDeadline(time.Time{}) //nolint:errcheck
	c.sockDeadline = c.deadline
	c.Conn.SetReadDeadline(c.deadline) //nolint:errcheck
	return nil
}

// redirectHTTPS answers a plain request with a 308 to the same URI over HTTPS, on tls_listen's port
// (none for 443).
func redirectHTTPS(ctx *fasthttp.RequestCtx, ft *frontTLS) {
	host := string(ctx.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		ctx.Error("400 Bad Request: HTTPS only, and no Host to redirect to\n", fasthttp.StatusBadRequest)
		return
	}
	if strings.IndexByte(host, ':') >= 0 { // a bare IPv6 address
		host = "[" + host + "]"
	}
	loc := "https://" + host
	if ft.port != "" && ft.port != "443" {
		loc += ":" + ft.port
	}
	loc += string(ctx.URI().RequestURI()) // path and query, also of an absolute-form request target
	ctx.Error("308 Permanent Redirect: use HTTPS\n", fasthttp.StatusPermanentRedirect)
	ctx.Response.Header.Set(fasthttp.HeaderLocation, loc)
}
