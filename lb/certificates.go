package lb

// The certificates tls_listen serves: those read from files (lb/config's FrontTLS, per generation)
// and those [frontend.acme] obtains (lb/acme's Manager, which lives across reloads that keep the
// table the same). Here they meet: the handshake's certificate (an ACME domain's once obtained, else
// the files' choice), the challenges' place on the listeners, the manager's lifecycle over reloads,
// its events, and the certificates in /api/status.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/acme"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
)

// acmeFor is the manager of cfg's [frontend.acme]: old when it runs the same table on the same
// listeners (it goes on), a
// new one not yet managing (fresh: Manage it once the listeners are bound), or nil without the table.
func (lb *LB) acmeFor(cfg *config.Config, old *acme.Manager) (m *acme.Manager, fresh bool, err error) {
	a := cfg.Frontend.ACME
	switch {
	case a == nil:
		return nil, false, nil
	case old != nil && old.Runs(a, cfg.Frontend.Listen, cfg.Frontend.TLSListen):
		return old, false, nil
	}
	m, err = acme.New(a, cfg.Frontend.Listen, cfg.Frontend.TLSListen, acme.Hooks{
		Obtained: func(name string, renewal bool, notAfter time.Time) {
			what := "obtained"
			if renewal {
				what = "renewed"
			}
			lb.bus.Publish(event.Event{Kind: event.CertObtained, Server: name,
				Detail: fmt.Sprintf("certificate for %s %s, valid until %s", name, what, notAfter.UTC().Format(time.RFC3339))})
		},
		Failed: func(name string, renewal bool, err error) {
			what := "obtain"
			if renewal {
				what = "renew"
			}
			lb.bus.Publish(event.Event{Kind: event.CertFailed, Server: name,
				Detail: fmt.Sprintf("could not %s the certificate for %s (the last good one, if any, is served; retried with back-off): %v", what, name, err)})
		},
		Warn: func(line string) { lb.log.Warn(line) },
	})
	if err != nil {
		return nil, false, fmt.Errorf("%s: frontend.acme: %w", cfg.FileOf("frontend.acme"), err)
	}
	return m, true, nil
}

// startACME makes g's manager obtain and renew, when it is new (fresh), and closes the one it
// replaces (prev, unless the same).
func (lb *LB) startACME(g *generation, prev *acme.Manager, fresh bool) {
	if prev != nil && prev != g.acme {
		prev.Close()
	}
	if g.acme == nil || !fresh {
		return
	}
	if err := g.acme.Manage(); err != nil {
		lb.bus.Publish(event.Event{Kind: event.CertFailed, Detail: "frontend.acme: " + err.Error()})
	}
}

// withACME sets g's manager and the TLS configuration of its handshakes: the files' alone without
// [frontend.acme]; with it, an ACME domain gets its certificate once there is one (and an ACME
// server's TLS-ALPN-01 validation its challenge certificate), every other name the files' choice,
// and a handshake without a name for them the first domain's when no file gives one.
func (g *generation) withACME(m *acme.Manager) {
	g.acme = m
	ft := g.cfg.Frontend.TLS
	if ft == nil {
		return
	}
	g.tls = ft.Config
	if m == nil {
		return
	}
	c := ft.Config.Clone()
	c.NextProtos = append(slices.Clip(c.NextProtos), acme.ALPN)
	if c.ClientAuth == tls.RequireAndVerifyClientCert {
		// An ACME server's TLS-ALPN-01 validation has no client certificate: a certificate is asked
		// for and verified if given, and required of every other handshake.
		c.ClientAuth = tls.VerifyClientCertIfGiven
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 && cs.NegotiatedProtocol != acme.ALPN {
				return errNoClientCert
			}
			return nil
		}
	}
	files := ft.Config.GetCertificate
	c.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert, ok, err := m.Certificate(hello); ok {
			return cert, err
		}
		if len(ft.Certs) == 0 {
			if cert := m.Default(); cert != nil {
				return cert, nil
			}
		}
		return files(hello)
	}
	g.tls = c
}

var errNoClientCert = errors.New("tls: client_auth = \"require\": the client sent no certificate")

// certificateDocuments are the certificates of g in /api/status: the files' then the ACME domains'.
func (g *generation) certificateDocuments() []admin.CertStatus {
	ft := g.cfg.Frontend.TLS
	if ft == nil {
		return nil
	}
	var out []admin.CertStatus
	for i, c := range ft.Certs {
		names := c.Leaf.DNSNames
		for _, ip := range c.Leaf.IPAddresses {
			names = append(names, ip.String())
		}
		out = append(out, admin.CertStatus{Source: "file", File: ft.Files[i], Names: names, NotAfter: c.Leaf.NotAfter})
	}
	if g.acme != nil {
		for _, st := range g.acme.Status() {
			out = append(out, admin.CertStatus{Source: "acme", Names: []string{st.Name}, NotAfter: st.NotAfter,
				Obtained: st.Obtained, LastError: st.LastError, FailedAt: st.FailedAt})
		}
	}
	return out
}
