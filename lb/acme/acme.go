// Package acme runs [frontend.acme]: certificates obtained from an ACME server (RFC 8555) for the
// configured domains, renewed before they expire and kept in a storage directory, with
// github.com/caddyserver/certmagic (Caddy's own) doing the protocol, the storage, its locks and the
// renewal schedule (ARI when the server offers it). fairlead answers the challenges on its own
// listeners: HTTP-01 on listen (ServeHTTP01, before routing), TLS-ALPN-01 on tls_listen (Certificate,
// from the running generation's GetCertificate; lb/frontend closes such a connection after its
// handshake). A certificate is only ever asked for a name in domains: Manage lists them, on-demand
// issuance is never enabled, and Certificate consults the library only for those names. What happens
// is told through Hooks (a log line and an event each) and counted (WriteMetrics, Status).
package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/lb/config"
)

// ALPN is the protocol an ACME server offers, alone, in a TLS-ALPN-01 validation's handshake.
const ALPN = acmez.ACMETLS1Protocol // the library's (lb/frontend, which must not depend on it, names it too)

// Hooks are how a Manager tells what happens: Obtained after a certificate was obtained or renewed
// and stored, Failed after an attempt failed (the last good certificate, if any, still served; the
// next attempt follows the library's back-off).
type Hooks struct {
	Obtained func(name string, renewal bool, notAfter time.Time)
	Failed   func(name string, renewal bool, err error)
	// Warn gets the library's own warnings and errors that no event reports, as one line each (log.go).
	Warn func(line string)
}

// Manager is one [frontend.acme]: its certificates, their renewal and the challenges. It lives across
// reloads that keep the table the same (config.ACME.Same) and is replaced otherwise.
type Manager struct {
	cfg    *config.ACME
	addrs  [2]string // the listen and tls_listen it answers challenges on
	cache  *certmagic.Cache
	magic  *certmagic.Config
	issuer *certmagic.ACMEIssuer
	hooks  Hooks
	ctx    context.Context
	cancel context.CancelFunc

	obtained, renewed, obtainFailed, renewFailed atomic.Uint64
	http01, tlsALPN01                            atomic.Uint64

	closeOnce sync.Once

	mu     sync.Mutex
	status map[string]*NameStatus
}

// NameStatus is what the status page and /api/status show of one domain.
type NameStatus struct {
	Name      string    `json:"name"`                 // the domain
	NotAfter  time.Time `json:"not_after"`            // the served certificate's expiry (zero: none yet)
	Obtained  time.Time `json:"obtained"`             // when this process last obtained or renewed it (zero: loaded from storage, or none)
	LastError string    `json:"last_error,omitempty"` // the last failed attempt's error, until one succeeds
	FailedAt  time.Time `json:"failed_at"`            // when it failed (zero: none since the last success)

	failedSerial string // the serial of the certificate served when it failed: another one since is a recovery
}

// New makes the Manager of c; it obtains nothing before Manage. httpAddr and tlsAddr are the
// front end's listen and tls_listen addresses (httpAddr "" when there is none: HTTP-01 is then not
// offered); the library is told their ports so that it answers the challenges through them.
func New(c *config.ACME, httpAddr, tlsAddr string, h Hooks) (*Manager, error) {
	// The challenges are answered on fairlead's listeners: the library is told their host and ports
	// (it dials what it cannot bind, and finds fairlead there). config.Load refuses listen and
	// tls_listen on different hosts with [frontend.acme].
	iss := certmagic.ACMEIssuer{
		CA: c.Directory, Email: c.Email, TrustedRoots: c.Roots,
		// The CA's terms of service (subscriber agreement) are accepted for the account, as Caddy
		// does: configuring [frontend.acme] is the operator's agreement (README: Certificates).
		Agreed:               true,
		DisableHTTPChallenge: httpAddr == "",
	}
	host, port, err := net.SplitHostPort(tlsAddr)
	if err != nil {
		return nil, fmt.Errorf("tls_listen %q: %v", tlsAddr, err)
	}
	iss.ListenHost = host
	iss.AltTLSALPNPort, _ = strconv.Atoi(port)
	if httpAddr != "" {
		_, hport, err := net.SplitHostPort(httpAddr)
		if err != nil {
			return nil, fmt.Errorf("listen %q: %v", httpAddr, err)
		}
		iss.AltHTTPPort, _ = strconv.Atoi(hport)
	}
	if c.Directory == config.LetsEncrypt {
		iss.TestCA = certmagic.LetsEncryptStagingCA // after a failure, the next attempt is tried there first
	}

	m := &Manager{cfg: c, addrs: [2]string{httpAddr, tlsAddr}, hooks: h, status: map[string]*NameStatus{}}
	for _, d := range c.Domains {
		m.status[d] = &NameStatus{Name: d}
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	log := newLibraryLogger(h.Warn)
	iss.Logger = log
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		RenewCheckInterval: c.RenewCheckInterval.D,
		Logger:             log,
	})
	m.magic = certmagic.New(m.cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: c.Storage},
		OnEvent: m.onEvent,
		Logger:  log,
	})
	m.issuer = certmagic.NewACMEIssuer(m.magic, iss)
	m.magic.Issuers = []certmagic.Issuer{m.issuer}
	return m, nil
}

// LoadStored puts the certificates kept in storage in memory, so that they are served from the first
// handshake (before Manage, which renews them and obtains the missing ones in the background). It
// reads storage only; a name without a stored certificate is left to Manage.
func (m *Manager) LoadStored() {
	for _, d := range m.cfg.Domains {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		m.magic.CacheManagedCertificate(ctx, d) //nolint:errcheck // none stored yet: Manage obtains it
		cancel()
	}
}

// Manage obtains the missing certificates and renews them, in the background; call it once the
// listeners are bound (the library would otherwise bind their ports itself to answer a challenge).
// Storage that cannot be written is a failure of every domain (said now, not at the first attempt,
// which the library would fail without an event).
func (m *Manager) Manage() error {
	if err := m.checkStorage(); err != nil {
		for _, d := range m.cfg.Domains {
			m.failed(d, false, err)
		}
	}
	return m.magic.ManageAsync(m.ctx, m.cfg.Domains)
}

// checkStorage writes, reads and deletes a key in storage.
func (m *Manager) checkStorage() error {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	key := fmt.Sprintf("fairlead/check-%d", os.Getpid())
	if err := m.magic.Storage.Store(ctx, key, []byte("ok")); err != nil {
		return fmt.Errorf("storage %s cannot be written: %w", m.cfg.Storage, err)
	}
	if _, err := m.magic.Storage.Load(ctx, key); err != nil {
		return fmt.Errorf("storage %s cannot be read: %w", m.cfg.Storage, err)
	}
	m.magic.Storage.Delete(ctx, key) //nolint:errcheck // a leftover check key is harmless
	return nil
}

// Close stops the renewals and any attempt under way; it returns at once (a maintenance pass under
// way, an OCSP fetch or a slow storage, ends in the background). Closing twice is closing once.
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		m.cancel()
		go m.cache.Stop()
	})
}

// Runs reports whether m runs table c with the challenges on httpAddr and tlsAddr: a reload that
// keeps all three keeps m.
func (m *Manager) Runs(c *config.ACME, httpAddr, tlsAddr string) bool {
	return m.cfg.Same(c) && m.addrs == [2]string{httpAddr, tlsAddr}
}

// manages reports whether name (lower case, no trailing dot) is one of the domains: a key of status,
// which is not changed after New (only its entries, under mu).
func (m *Manager) manages(name string) bool { return m.status[name] != nil }

// Certificate is the certificate of a handshake for one of the domains, or of a TLS-ALPN-01
// validation; ok is false when the handshake is neither (the certificates from files choose) or when
// there is no certificate for its name yet.
func (m *Manager) Certificate(hello *tls.ClientHelloInfo) (cert *tls.Certificate, ok bool, err error) {
	if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ALPN {
		if !m.manages(normal(hello.ServerName)) {
			return nil, true, errors.New("acme-tls/1 for a name outside [frontend.acme] domains")
		}
		cert, err = m.magic.GetCertificate(hello)
		if err == nil {
			m.tlsALPN01.Add(1)
		}
		return cert, true, err
	}
	name := normal(hello.ServerName)
	if !m.manages(name) {
		return nil, false, nil
	}
	if c := m.cached(name); c != nil {
		return &c.Certificate, true, nil
	}
	return nil, false, nil
}

// Default is the certificate of a handshake without a name for domains when no file gives one: the
// first domain's (nil while there is none).
func (m *Manager) Default() *tls.Certificate {
	if c := m.cached(m.cfg.Domains[0]); c != nil {
		return &c.Certificate
	}
	return nil
}

// cached is the library's certificate for name in memory (never an attempt to obtain one).
func (m *Manager) cached(name string) *certmagic.Certificate {
	var best *certmagic.Certificate
	for _, c := range m.cache.AllMatchingCertificates(name) {
		if c.Leaf == nil {
			continue
		}
		if best == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			best = &c
		}
	}
	return best
}

func normal(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// IsChallengePath reports whether path is an HTTP-01 validation's.
func IsChallengePath(path []byte) bool {
	return len(path) > len(challengePrefix) && string(path[:len(challengePrefix)]) == challengePrefix
}

const challengePrefix = "/.well-known/acme-challenge/"

// ServeHTTP01 answers an HTTP-01 validation request for one of the domains with its key
// authorization, when this instance or one sharing its storage started that challenge; it reports
// whether it answered (false: the request goes on as any other).
func (m *Manager) ServeHTTP01(ctx *fasthttp.RequestCtx) bool {
	if !ctx.IsGet() || !IsChallengePath(ctx.Path()) {
		return false
	}
	host := string(ctx.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !m.manages(normal(host)) {
		return false
	}
	// The library answers net/http requests: what it reads of one is its method, host and path.
	r := (&http.Request{Method: http.MethodGet, Host: host, URL: &url.URL{Path: string(ctx.Path())},
		Header: http.Header{}, RemoteAddr: ctx.RemoteAddr().String()}).WithContext(ctx)
	w := &answer{h: http.Header{}}
	if !m.issuer.HandleHTTPChallenge(w, r) {
		return false
	}
	m.http01.Add(1)
	ctx.SetStatusCode(w.code())
	if ct := w.h.Get("Content-Type"); ct != "" {
		ctx.SetContentType(ct)
	}
	ctx.SetBody(w.body)
	ctx.SetConnectionClose()
	return true
}

// answer is the net/http ResponseWriter an HTTP-01 answer is written to.
type answer struct {
	h      http.Header
	status int
	body   []byte
}

func (a *answer) Header() http.Header         { return a.h }
func (a *answer) Write(b []byte) (int, error) { a.body = append(a.body, b...); return len(b), nil }
func (a *answer) WriteHeader(code int)        { a.status = code }
func (a *answer) code() int {
	if a.status == 0 {
		return http.StatusOK
	}
	return a.status
}

// onEvent is the library's event handler: it keeps the status and the counters and calls the hooks.
func (m *Manager) onEvent(ctx context.Context, ev string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch ev {
	case "cert_obtained":
		if renewal {
			m.renewed.Add(1)
		} else {
			m.obtained.Add(1)
		}
		notAfter := m.storedNotAfter(ctx, data["certificate_path"]) // (not in the cache yet)
		m.mu.Lock()
		if st := m.status[name]; st != nil {
			st.Obtained, st.LastError, st.FailedAt = time.Now(), "", time.Time{}
		}
		m.mu.Unlock()
		if m.hooks.Obtained != nil {
			m.hooks.Obtained(name, renewal, notAfter)
		}
	case "cert_failed":
		if renewal {
			m.renewFailed.Add(1)
		} else {
			m.obtainFailed.Add(1)
		}
		err, _ := data["error"].(error)
		if err == nil {
			err = errors.New("failed")
		}
		m.failed(name, renewal, err)
	}
	return nil
}

// failed records a failed attempt for name and calls the hook.
func (m *Manager) failed(name string, renewal bool, err error) {
	serial := ""
	if c := m.cached(name); c != nil {
		serial = c.Leaf.SerialNumber.String()
	}
	m.mu.Lock()
	if st := m.status[name]; st != nil {
		st.LastError, st.FailedAt, st.failedSerial = err.Error(), time.Now(), serial
	}
	m.mu.Unlock()
	if m.hooks.Failed != nil {
		m.hooks.Failed(name, renewal, err)
	}
}

// storedNotAfter is the expiry of the certificate stored at key (zero when it cannot be read).
func (m *Manager) storedNotAfter(ctx context.Context, key any) time.Time {
	k, _ := key.(string)
	if k == "" {
		return time.Time{}
	}
	data, err := m.magic.Storage.Load(ctx, k)
	if err != nil {
		return time.Time{}
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return time.Time{}
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}
	}
	return c.NotAfter
}

// Status is each domain's state, in the order of domains.
func (m *Manager) Status() []NameStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]NameStatus, 0, len(m.cfg.Domains))
	for _, d := range m.cfg.Domains {
		st := m.status[d]
		if c := m.cached(d); c != nil {
			st.NotAfter = c.Leaf.NotAfter
			if st.LastError != "" && c.Leaf.SerialNumber.String() != st.failedSerial {
				// Another certificate since the failure, without an obtained event of this instance: its
				// HA peer obtained or renewed it into the shared storage, and this one loaded it.
				st.LastError, st.FailedAt = "", time.Time{}
			}
		}
		out = append(out, *st)
	}
	return out
}

// WriteMetrics writes the fairlead_acme_* series and each certificate's expiry.
func (m *Manager) WriteMetrics(w io.Writer) {
	metrics.WriteCounterUint64(w, `fairlead_acme_certificates_total{renewal="false",result="ok"}`, m.obtained.Load())
	metrics.WriteCounterUint64(w, `fairlead_acme_certificates_total{renewal="false",result="failed"}`, m.obtainFailed.Load())
	metrics.WriteCounterUint64(w, `fairlead_acme_certificates_total{renewal="true",result="ok"}`, m.renewed.Load())
	metrics.WriteCounterUint64(w, `fairlead_acme_certificates_total{renewal="true",result="failed"}`, m.renewFailed.Load())
	metrics.WriteCounterUint64(w, `fairlead_acme_challenges_answered_total{type="http-01"}`, m.http01.Load())
	metrics.WriteCounterUint64(w, `fairlead_acme_challenges_answered_total{type="tls-alpn-01"}`, m.tlsALPN01.Load())
	for _, st := range m.Status() {
		failing := uint64(0)
		if st.LastError != "" {
			failing = 1
		}
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`fairlead_acme_failing{name=%q}`, st.Name), failing)
		if !st.NotAfter.IsZero() {
			metrics.WriteGaugeUint64(w, fmt.Sprintf(`fairlead_tls_certificate_not_after_seconds{acme=%q}`, st.Name), uint64(st.NotAfter.Unix()))
		}
	}
}
