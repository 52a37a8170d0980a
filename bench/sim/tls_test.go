package sim_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/fairlead/fairlead/bench/sim"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("sim test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// tlsCluster starts a cluster serving TLS with a certificate for 127.0.0.1 from ca; cfg, if not nil, is
// completed with the certificate and used (to ask for client certificates).
func tlsCluster(t *testing.T, ca *CA, opts Options, cfg *tls.Config) *Cluster {
	t.Helper()
	leaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.Certificates = []tls.Certificate{leaf.TLS}
	opts.TLS = cfg
	return startCluster(t, opts)
}

// httpsClient returns a client trusting only roots, presenting certs.
func httpsClient(t *testing.T, roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 3 * time.Second}
}

func TestTLSOptionServesEveryPlatformAndConnectionServerPortOverTLS(t *testing.T) {
	ca := newCA(t)
	c := tlsCluster(t, ca, Options{Platforms: 2, Connections: 1, ConnectionHealthAddrs: []string{"127.0.0.1:0"}}, nil)
	cl := httpsClient(t, ca.Pool())
	p1, p2, cx := c.Platforms[0], c.Platforms[1], c.Connections[0]

	for _, tc := range []struct {
		p    *Platform
		want int
	}{{p1, 200}, {p2, 503}} {
		resp, _ := get(t, cl, "https://"+tc.p.Addr+DefaultLeaderCheckPath, "Authorization", testAuth)
		if resp.StatusCode != tc.want || resp.TLS == nil {
			t.Errorf("%s LeaderCheck over HTTPS: %d (TLS %v), want %d over TLS", tc.p.Name, resp.StatusCode, resp.TLS != nil, tc.want)
		}
	}
	resp, body := get(t, cl, "https://"+p1.Addr+"/Thingworx/x")
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != p1.Name || body != "hello from platform1\n" {
		t.Errorf("ordinary GET over HTTPS: %d %q %q", resp.StatusCode, resp.Header.Get("X-Served-By"), body)
	}
	for _, addr := range []string{cx.Addr, cx.HealthAddr} {
		if resp, body := get(t, cl, "https://"+addr+"/health"); resp.StatusCode != 200 || body != "ok\n" {
			t.Errorf("/health on %s over HTTPS: %d %q", addr, resp.StatusCode, body)
		}
	}

	// Plain HTTP reaches no handler on any of the ports.
	plain := newClient(t, 2*time.Second)
	for _, addr := range []string{p1.Addr, cx.Addr, cx.HealthAddr} {
		if resp, err := plain.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest { // a TLS server may answer a plain request 400
				t.Errorf("plain HTTP to %s answered %d", addr, resp.StatusCode)
			}
		}
	}
	// A client that does not trust the CA fails the handshake.
	if _, err := httpsClient(t, x509.NewCertPool()).Get("https://" + p1.Addr + "/"); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the CA: %v, want a certificate error", err)
	}

	// WebSockets over TLS: the connection server and a platform echo.
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	for _, addr := range []string{cx.Addr, p1.Addr} {
		conn, resp, err := d.Dial("wss://"+addr+"/Thingworx/WS", nil)
		if err != nil {
			t.Fatalf("wss://%s: %v", addr, err)
		}
		if resp.Header.Get("X-Served-By") == "" {
			t.Errorf("wss://%s: no X-Served-By on the 101", addr)
		}
		echo(t, conn, websocket.TextMessage, []byte("over tls"))
		conn.Close()
	}

	// A platform that dies and comes back serves TLS again.
	if err := p2.SetState(Dead); err != nil {
		t.Fatal(err)
	}
	if err := p2.SetState(Leader); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, cl, "https://"+p2.Addr+DefaultLeaderCheckPath, "Authorization", testAuth); resp.StatusCode != 200 {
		t.Errorf("%s back as leader over HTTPS: %d", p2.Name, resp.StatusCode)
	}
	// So does a connection server killed and restarted.
	if err := cx.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cx.Restart(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, cl, "https://"+cx.Addr+"/health"); resp.StatusCode != 200 {
		t.Errorf("%s restarted: /health %d", cx.Name, resp.StatusCode)
	}
}

func TestTLSOptionCanRequireClientCertificates(t *testing.T) {
	ca := newCA(t)
	c := tlsCluster(t, ca, Options{Platforms: 1, NoConnections: true},
		&tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()})
	client, err := ca.Issue("fairlead")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + c.Platforms[0].Addr + DefaultLeaderCheckPath
	req := func(cl *http.Client) (int, error) {
		r, _ := http.NewRequest(http.MethodGet, url, nil)
		r.Header.Set("Authorization", testAuth)
		resp, err := cl.Do(r)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if _, err := req(httpsClient(t, ca.Pool())); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: %v, want the server's \"certificate required\" alert", err)
	}
	if status, err := req(httpsClient(t, ca.Pool(), client.TLS)); err != nil || status != 200 {
		t.Errorf("with a client certificate: %d, %v", status, err)
	}
}
