package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// TLS scenarios: https-small, wss-echo and ws-idle-tls are http-small, ws-echo and ws-idle with the
// clients connecting to the proxy's TLS listener. The proxy terminates TLS (1.2 and 1.3, ALPN
// http/1.1); its upstreams stay plain HTTP. Every peer serves the same certificate: one CA and one leaf
// for 127.0.0.1 and localhost (ECDSA P-256), generated once per bench run with bench/sim's NewCA and
// Issue and written into the run's temporary directory (removed at the end unless -keep; no key is ever
// committed). The clients (wrk, the Go generators) verify nothing more than the run's CA, open one
// connection each with a full handshake and no session resumption. Each peer keeps its plain listener
// beside the TLS one (the readiness checks use it); only the TLS listener is measured.

// tlsNote is the part of the TLS scenarios' summaries that says how they are set up.
const tlsNote = "; over TLS (1.2/1.3, TLS 1.3 cipher suites in Go's order, ALPN http/1.1) to the proxy's TLS listener, " +
	"upstreams plain HTTP; every peer serves the same certificate, generated once per run (ECDSA P-256 leaf for " +
	"127.0.0.1 and localhost)"

func httpsSmallScenario() *scenario {
	return &scenario{
		name:     "https-small",
		summary:  "GET with 64-byte answers over 64 keep-alive HTTPS connections (wrk): req/s, p99 and proxy CPU" + tlsNote,
		metrics:  httpMetrics("req/s"),
		variants: samePeers,
		run: func(rc *runCtx) (*Result, error) {
			return runHTTP(rc, httpLoad{size: 64, conns: rc.plan.HTTPConns, tls: true})
		},
	}
}

func wssEchoScenario() *scenario {
	sc := wsEchoScenario()
	sc.name = "wss-echo"
	sc.summary = "64 wss:// WebSocket connections (each its own X-Asset-Id) echo 64-byte messages back to back " +
		"through the proxy to the connection servers: round trips/s and p99" + tlsNote
	sc.run = func(rc *runCtx) (*Result, error) { return runWSEchoOver(rc, true) }
	sc.metrics = slices.DeleteFunc(sc.metrics, func(m metric) bool { return m.key == ceilingMetric.key }) // plain only
	return sc
}

func wsIdleTLSScenario() *scenario {
	sc := wsIdleScenario()
	sc.name = "ws-idle-tls"
	sc.summary = "N idle WebSocket tunnels opened over TLS (wss://; 8,000; quick: 300): resident memory of the proxy " +
		"per TLS tunnel = (VmRSS with N tunnels − VmRSS before) / N, summed over all its processes; N reached and " +
		"the proxy's open-file limit" + tlsNote
	for i := range sc.metrics {
		if sc.metrics[i].key == "kib_per_tunnel" {
			sc.metrics[i].label = "KiB/TLS tunnel"
		}
	}
	sc.run = func(rc *runCtx) (*Result, error) { return runWSIdleOver(rc, true) }
	return sc
}

// runCerts is the run's certificate, made on first use and shared by every TLS scenario and peer.
type runCerts struct {
	dir  string
	once sync.Once
	err  error
	// certFile and keyFile are the leaf's PEM files, pemFile both in one (HAProxy), caFile the CA.
	certFile, keyFile, pemFile, caFile string
	client                             *tls.Config
}

func newRunCerts(dir string) *runCerts { return &runCerts{dir: dir} }

// get makes the CA and the leaf on the first call and returns them.
func (c *runCerts) get() (*runCerts, error) {
	c.once.Do(func() { c.err = c.make() })
	return c, c.err
}

func (c *runCerts) make() error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	ca, err := sim.NewCA("fairlead-bench CA")
	if err != nil {
		return fmt.Errorf("bench CA: %w", err)
	}
	leaf, err := ca.Issue("127.0.0.1", "localhost")
	if err != nil {
		return fmt.Errorf("bench certificate: %w", err)
	}
	if c.certFile, c.keyFile, err = leaf.Write(c.dir, "server"); err != nil {
		return err
	}
	if c.pemFile, err = leaf.WritePEM(c.dir, "server"); err != nil {
		return err
	}
	if c.caFile, err = ca.WriteCA(c.dir, "ca"); err != nil {
		return err
	}
	c.client = &tls.Config{
		// Every proxy listens on 127.0.0.1: verified against the leaf's IP address (no SNI is sent).
		ServerName: "127.0.0.1",
		RootCAs:    ca.Pool(),
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}
	return nil
}

// TLSAddr is the client-facing HTTPS address ("" without TLS).
func (in *Instance) TLSAddr() string { return in.Setup.TLSListen() }

// startTLSPeer starts the peer like startPeer, with a TLS listener serving the run's certificate, and
// waits until it answers over TLS too (an ordinary GET, or with servingWS a wss:// echo). It returns the
// client TLS configuration trusting the run's CA, and notes what the handshake negotiated.
func (rc *runCtx) startTLSPeer(c *sim.Cluster, ready readiness, mod func(*Setup)) (*Instance, *tls.Config, error) {
	if rc.certs == nil {
		return nil, nil, errors.New("no run certificate (TLS scenario outside Run)")
	}
	certs, err := rc.certs.get()
	if err != nil {
		return nil, nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	in, err := rc.startPeer(c, ready, func(s *Setup) {
		if mod != nil {
			mod(s)
		}
		s.TLSPort, s.TLSCert, s.TLSKey, s.TLSPEM = port, certs.certFile, certs.keyFile, certs.pemFile
	})
	if err != nil {
		return nil, nil, err
	}
	conf := certs.client.Clone()
	addr := in.TLSAddr()
	err = waitFor(10*time.Second, 100*time.Millisecond, func() error {
		if in.Proc.Exited() {
			return errExited
		}
		if ready == servingWS {
			conn, err := wsDialTLS(addr, "/Thingworx/WS", "ready-check", 2*time.Second, 1024, conf)
			if err != nil {
				return err
			}
			defer conn.Close()
			return wsEcho(conn, []byte("ready"), 2*time.Second)
		}
		hc := testkit.NewHTTPConn(addr, 2*time.Second)
		hc.TLS = conf
		defer hc.Close()
		r := hc.Do(testkit.RawRequest("GET", addr, readyPath, nil), false)
		if r.Err == nil && r.Status != 200 {
			r.Err = fmt.Errorf("status %d", r.Status)
		}
		return r.Err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: TLS listener not ready: %v\n%s", rc.peer.Name, err, in.Proc.LogTail(1000))
	}
	if st, err := tlsState(addr, conf); err == nil {
		alpn := st.NegotiatedProtocol
		if alpn == "" {
			alpn = "none"
		}
		rc.note("TLS negotiated with a Go client: %s, %s, %s, ALPN %s", tls.VersionName(st.Version),
			tls.CipherSuiteName(st.CipherSuite), st.CurveID, alpn)
	}
	return in, conf, nil
}

// startWSPeer starts the peer ready for WebSockets (servingWS), with a TLS listener when overTLS, and
// returns the address the clients use and their TLS configuration (nil without TLS).
func (rc *runCtx) startWSPeer(c *sim.Cluster, overTLS bool, mod func(*Setup)) (*Instance, string, *tls.Config, error) {
	if !overTLS {
		in, err := rc.startPeer(c, servingWS, mod)
		if err != nil {
			return nil, "", nil, err
		}
		return in, in.Addr(), nil, nil
	}
	in, conf, err := rc.startTLSPeer(c, servingWS, mod)
	if err != nil {
		return nil, "", nil, err
	}
	return in, in.TLSAddr(), conf, nil
}

// tlsState makes one TLS handshake with addr and returns what it negotiated.
func tlsState(addr string, conf *tls.Config) (tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, conf)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

var (
	reOpensslProto  = regexp.MustCompile(`(?m)^Protocol version:\s*(\S+)`)
	reOpensslCipher = regexp.MustCompile(`(?m)^Ciphersuite:\s*(\S+)`)
	reOpensslGroup  = regexp.MustCompile(`(?m)^Server Temp Key:\s*([^,\s]+)`)
)

// opensslState asks `openssl s_client` what addr negotiates with an OpenSSL client offering its
// defaults and the SNI 127.0.0.1, as wrk does (wrk uses the same library): "TLSv1.3,
// TLS_AES_128_GCM_SHA256, X25519"; "" when openssl is missing or the handshake fails. An OpenSSL client and a Go
// client can get different cipher suites from the same proxy (their preference orders differ).
func opensslState(ctx context.Context, addr string) string {
	bin := lookBin("openssl")
	if bin == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "s_client", "-connect", addr, "-servername", "127.0.0.1", "-brief")
	cmd.Stdin = strings.NewReader("")
	out, _ := cmd.CombinedOutput()
	p, c := reOpensslProto.FindSubmatch(out), reOpensslCipher.FindSubmatch(out)
	if p == nil || c == nil {
		return ""
	}
	st := string(p[1]) + ", " + string(c[1])
	if g := reOpensslGroup.FindSubmatch(out); g != nil {
		st += ", " + string(g[1])
	}
	return st
}
