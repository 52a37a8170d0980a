package healthcheck

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/healthcheck/event"

	"github.com/fairlead/fairlead/bench/sim"
)

// Probes over TLS (Options.TLS, [pools.NAME.tls]): a probe whose handshake fails has failed, and the log
// says why, naming the server, in words an operator acts on.

// httpsServer serves 200 over TLS with a certificate of ca for names; base, if not nil, is the rest of
// its config (client certificates asked for).
func httpsServer(t *testing.T, ca *sim.CA, base *tls.Config, names ...string) string {
	t.Helper()
	leaf, err := ca.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	s.TLS = &tls.Config{}
	if base != nil {
		s.TLS = base.Clone()
	}
	s.TLS.Certificates = []tls.Certificate{leaf.TLS}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

func TestAProbeWhoseTLSHandshakeFailsHasFailedAndTheLogSaysWhy(t *testing.T) {
	ca, err := sim.NewCA("platform CA")
	if err != nil {
		t.Fatal(err)
	}
	named := httpsServer(t, ca, nil, "platform.internal")
	strict := httpsServer(t, ca, &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}, "127.0.0.1")
	client, err := ca.Issue("fairlead")
	if err != nil {
		t.Fatal(err)
	}
	f := func(name, addr string, cfg *tls.Config, wantUp bool, wantLog ...string) {
		t.Helper()
		bus := event.NewBus()
		logs := &logLines{}
		o := fastChecks(bus, "/health")
		o.TLS, o.Logf = cfg, logs.logf
		tg := NewTarget(addr)
		start(t, NewChecker(o, []*Target{tg}))
		if tg.Up() != wantUp {
			t.Errorf("%s: up %v after the first probe, want %v", name, tg.Up(), wantUp)
		}
		for _, w := range wantLog {
			if !strings.Contains(logs.all(), w) {
				t.Errorf("%s: log %q\nwant %q in it", name, logs.all(), w)
			}
		}
		if len(wantLog) == 0 && logs.all() != "" {
			t.Errorf("%s: logged %q, want nothing", name, logs.all())
		}
	}
	// Without server_name the name verified is the server's host, 127.0.0.1: not in the certificate.
	f("a certificate for another name", named, &tls.Config{RootCAs: ca.Pool()}, false,
		"healthcheck: pool test: "+named+": TLS certificate verification failed: ",
		"x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs")
	f("server_name, the certificate's name", named, &tls.Config{RootCAs: ca.Pool(), ServerName: "platform.internal"}, true)
	// A server requiring a client certificate refuses a session without one.
	f("no client certificate", strict, &tls.Config{RootCAs: ca.Pool()}, false,
		"healthcheck: pool test: "+strict+": the server refused the TLS session: ", "certificate required")
	f("a client certificate", strict, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}}, true)
}
