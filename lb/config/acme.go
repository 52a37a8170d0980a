package config

// [frontend.acme]: certificates obtained and renewed from an ACME server (RFC 8555), such as Let's
// Encrypt, by github.com/caddyserver/certmagic in package lb/acme. This file validates the keys; the
// running side (the challenges, the certificates served by SNI, renewal) is lb/acme's.

import (
	"crypto/x509"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// LetsEncrypt is the default ACME directory: Let's Encrypt's production one.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// ACME is [frontend.acme]: fairlead obtains a certificate for each of domains from the ACME server at
// directory, answering its challenges itself (TLS-ALPN-01 on tls_listen, HTTP-01 on listen, whichever
// reaches it), serves it on tls_listen by SNI beside the certificates from files (an ACME name is
// served its ACME certificate once there is one, the files' choice until then), renews it well before
// it expires (when the server offers ACME Renewal Information, in the window it suggests; else in the
// last third of its lifetime) and keeps it, with the account, in storage across restarts and binary
// upgrades. No certificate is ever requested for a name outside domains. A failure (the server down,
// a challenge refused) never takes the listener down: the last good certificate stays, with a WARN
// line, a cert_failed event, the status page's certificates table and fairlead_acme_* metrics; the
// next attempt follows the library's back-off (1 minute, then longer). Each certificate's expiry is
// fairlead_tls_certificate_not_after_seconds. An HA pair shares storage (see storage). Changing any of
// these keys on a reload applies at once: the certificates of the new list are served and obtained.
type ACME struct {
	// The ACME server's directory URL (https). Configuring [frontend.acme] accepts that CA's terms of
	// service (subscriber agreement) for the account fairlead registers, as Caddy does.
	Directory string `toml:"directory"`
	// Contact address given to the ACME server for the account (expiry and policy mail); optional.
	Email string `toml:"email"`
	// The DNS names to obtain certificates for, one certificate each; no wildcards (they need DNS-01,
	// which fairlead does not answer) and no IP addresses. Each must reach this fairlead's listen
	// (port 80 for a public ACME server) or tls_listen (port 443) under that name.
	Domains []string `toml:"domains"`
	// The directory where the account, the certificates and their keys are kept (created 0700 if
	// missing; keys are written 0600). Two fairlead instances behind one address (an HA pair) point
	// storage at one shared directory (NFS or the like): the library's lock files there make one
	// instance obtain or renew a name while the other waits and then loads it, and either answers a
	// challenge the other started, whichever the ACME server reaches.
	Storage string `toml:"storage"`
	// PEM file of the CAs that sign the ACME server's own HTTPS certificate, for a private ACME server
	// (step-ca, pebble); unset: the system's roots.
	CARoot string `toml:"ca_root"`
	// How often the certificates are checked for renewal (and a failed renewal retried, with
	// back-off): 1s to 24h.
	RenewCheckInterval Duration `toml:"renew_check_interval"`

	// Roots is CARoot loaded (nil: the system's).
	Roots *x509.CertPool `toml:"-"`
}

// acmeDefaults sets [frontend.acme]'s defaults.
func (c *Config) acmeDefaults() {
	a := c.Frontend.ACME
	if a == nil {
		return
	}
	def(c, &a.Directory, LetsEncrypt)
	def(c, &a.RenewCheckInterval, Duration{D: 10 * time.Minute})
	for i, d := range a.Domains {
		a.Domains[i] = strings.ToLower(strings.TrimSuffix(d, "."))
	}
}

// loadACME validates [frontend.acme] and reads its ca_root.
func (c *Config) loadACME() []string {
	a := c.Frontend.ACME
	if a == nil {
		return nil
	}
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at("frontend.acme."+key, format, args...)) }
	if c.Frontend.TLSListen == "" {
		add("domains", "needs tls_listen (the HTTPS listener that serves the certificates)")
	} else if c.Frontend.Listen != "" && hostOf(c.Frontend.Listen) != hostOf(c.Frontend.TLSListen) {
		// The library answers both challenges on one host: it would bind listen's port on
		// tls_listen's host for itself.
		add("domains", "needs listen and tls_listen on the same host (%q, %q): the ACME challenges are answered on both", hostOf(c.Frontend.Listen), hostOf(c.Frontend.TLSListen))
	}
	if u, err := url.Parse(a.Directory); err != nil || u.Scheme != "https" || u.Host == "" {
		add("directory", "must be an https URL (the ACME server's directory), got %q", a.Directory)
	}
	if len(a.Domains) == 0 {
		add("domains", "needs at least one DNS name to obtain a certificate for")
	}
	for i, d := range a.Domains {
		switch {
		case strings.HasPrefix(d, "*."):
			add("domains", "%q: a wildcard needs the DNS-01 challenge, which fairlead does not answer; list the names", d)
		case isIPLiteral(d):
			add("domains", "%q: an IP address; list DNS names", d)
		case hostPatternProblem(d) != "":
			add("domains", "%q: %s", d, hostPatternProblem(d))
		case !strings.Contains(d, "."):
			add("domains", "%q: not a fully qualified name (a public ACME server issues none for it)", d)
		case slices.Contains(a.Domains[:i], d):
			add("domains", "%q is listed twice", d)
		}
	}
	if a.Storage == "" {
		add("storage", "needs a directory to keep the account and the certificates in")
	}
	if a.Email != "" && (!strings.Contains(a.Email, "@") || strings.ContainsAny(a.Email, " \t<>")) {
		add("email", "%q is not an email address", a.Email)
	}
	if d := a.RenewCheckInterval; d.err != nil {
		add("renew_check_interval", "bad duration %q: %v", d.raw, d.err)
	} else if d.D < time.Second || d.D > 24*time.Hour {
		add("renew_check_interval", "must be 1s to 24h, got %s", d.D)
	}
	if a.CARoot != "" {
		data, err := c.readFile("frontend.acme.ca_root", a.CARoot)
		if err != nil {
			add("ca_root", "%v", err)
		} else {
			a.Roots = x509.NewCertPool()
			if !a.Roots.AppendCertsFromPEM(data) {
				add("ca_root", "%s holds no PEM certificate", a.CARoot)
			}
		}
	}
	return p
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func isIPLiteral(s string) bool {
	_, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return err == nil
}

// Same reports whether two [frontend.acme] tables manage the same certificates the same way (a reload
// that keeps it keeps the running manager and what it is doing).
func (a *ACME) Same(o *ACME) bool {
	if a == nil || o == nil {
		return a == o
	}
	return a.Directory == o.Directory && a.Email == o.Email && slices.Equal(a.Domains, o.Domains) &&
		a.Storage == o.Storage && a.CARoot == o.CARoot && a.RenewCheckInterval.D == o.RenewCheckInterval.D &&
		(a.Roots == nil) == (o.Roots == nil) && (a.Roots == nil || a.Roots.Equal(o.Roots))
}
