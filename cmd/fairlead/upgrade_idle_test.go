//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// rawConn is a client's keep-alive connection to fairlead, written and read byte by byte: the test sees
// that the socket stays the same.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// dialRawTLS is dialRaw over TLS (crypto/tls, HTTP/1.1), its handshake done.
func dialRawTLS(t *testing.T, addr string, cfg *tls.Config) *rawConn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// get sends a GET on the connection and reads its answer.
func (rc *rawConn) get(t *testing.T, what string) *http.Response {
	t.Helper()
	r, _ := rc.getPath(t, "/", what)
	return r
}

// getPath sends a GET of path on the connection and reads its answer and body.
func (rc *rawConn) getPath(t *testing.T, path, what string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(rc.c, "GET "+path+" HTTP/1.1\r\nHost: fairlead\r\n\r\n"); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return rc.answerBody(t, what)
}

func (rc *rawConn) answer(t *testing.T, what string) *http.Response {
	t.Helper()
	r, _ := rc.answerBody(t, what)
	return r
}

func (rc *rawConn) answerBody(t *testing.T, what string) (*http.Response, string) {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", what, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: the answer's body: %v", what, err)
	}
	return resp, string(body)
}

// open reports whether fairlead left the connection open: a short read finds nothing, not its end.
func (rc *rawConn) open() error {
	rc.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) //nolint:errcheck
	_, err := rc.br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	if err == nil {
		return errors.New("a byte nobody asked for")
	}
	return err
}

// Issue 38: idle keep-alive connections move to the new process of a binary upgrade, plain ones and
// HTTPS ones (tls_listen) with their TLS sessions. Clients hold keep-alive connections, idle; after
// SIGUSR2, once the new process serves and the old one is gone, each sends its next requests on the
// same connection (none was closed; an HTTPS one on the same TLS connection, with no new handshake)
// and the new process answers them (its request count rises by them; the old one no longer exists),
// forwarding an HTTPS one's as HTTPS (X-Forwarded-Proto). A client in the middle of a request at the
// switch, plain or HTTPS, gets its answer from the old process, with Connection: close, and a clean
// close. Twice in a row: a connection moved once moves again (an HTTPS one's session is fairlead's
// record layer's by then).
func TestSIGUSR2MovesIdleKeepAliveConnectionsToTheNewProcessOnTheirSockets(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	tf := newTLSFront(t)
	tlsAddr := tf.addr
	p := startUpgradable(t, c, "20-tls.toml", tf.conf)
	tls13, tls12 := tf.client.Clone(), tf.client.Clone() // HTTP/1.1 (ALPN), not h2
	tls13.MinVersion, tls13.NextProtos = tls.VersionTLS13, []string{"http/1.1"}
	tls12.MaxVersion, tls12.NextProtos = tls.VersionTLS12, []string{"http/1.1"}
	const n, nTLS = 10, 6
	var idle []*rawConn
	https := map[*rawConn]bool{}
	for i := range n + nTLS {
		var rc *rawConn
		switch {
		case i < n:
			rc = dialRaw(t, p.addr)
		case i%2 == 0:
			rc = dialRawTLS(t, tlsAddr, tls13)
		default:
			rc = dialRawTLS(t, tlsAddr, tls12)
		}
		https[rc] = i >= n
		if r := rc.get(t, "first request "+strconv.Itoa(i)); r.StatusCode != 200 || r.Close {
			t.Fatalf("first request %d: %d (close %v)", i, r.StatusCode, r.Close)
		}
		idle = append(idle, rc)
	}
	for round := 1; round <= 2; round++ {
		mid, midTLS := dialRaw(t, p.addr), dialRawTLS(t, tlsAddr, tls13)
		for _, m := range []*rawConn{mid, midTLS} {
			if r := m.get(t, "a mid client's first request"); r.StatusCode != 200 {
				t.Fatalf("round %d: a mid client's first request: %d", round, r.StatusCode)
			}
			io.WriteString(m.c, "GET / HTTP/1.1\r\nHost: fair") //nolint:errcheck // the rest after the switch
		}

		old := p.pid()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		handed := strconv.Itoa(n+nTLS) + " idle keep-alive connections handed over"
		testkit.Eventually(t, "the old process to hand the idle connections over", 30*time.Second, func() bool {
			return strings.Count(p.logText(), handed) == round
		})

		// The requests under way stay in the old process, which answers them and closes.
		for _, m := range []*rawConn{mid, midTLS} {
			io.WriteString(m.c, "lead\r\n\r\n") //nolint:errcheck
			if r := m.answer(t, "the request under way at the switch"); r.StatusCode != 200 || !r.Close {
				t.Errorf("round %d: the request under way at the switch (https %v): %d (close %v), want 200 with Connection: close",
					round, m == midTLS, r.StatusCode, r.Close)
			}
			if err := m.open(); err != io.EOF {
				t.Errorf("round %d: after the answer to the request under way (https %v): %v, want the connection closed", round, m == midTLS, err)
			}
		}

		testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return p.pid() != old && gone(old) })
		if round == 1 {
			if err := <-p.done; err != nil {
				t.Errorf("the old process exited %v, want 0", err)
			}
		}
		testkit.Eventually(t, "the new process to say it took the idle connections over", 10*time.Second, func() bool {
			return strings.Count(p.logText(), strconv.Itoa(n+nTLS)+" idle keep-alive connections taken over") == round
		})
		var st struct {
			Process struct {
				PID int `json:"pid"`
			} `json:"process"`
		}
		resp, err := http.Get("http://" + p.admin + "/api/status")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st) //nolint:errcheck // checked below
		resp.Body.Close()
		if st.Process.PID != p.pid() || st.Process.PID == old {
			t.Fatalf("round %d: /api/status: PID %d, want the new process's %d", round, st.Process.PID, p.pid())
		}
		const counted = `fairlead_frontend_requests_total{protocol="http/1.1"}`
		before, _ := strconv.Atoi(testkit.Metric(p.admin, counted))

		for i, rc := range idle {
			if err := rc.open(); err != nil {
				t.Fatalf("round %d: client %d (https %v): its idle connection after the switch: %v, want it open", round, i, https[rc], err)
			}
			for k := range 2 {
				what := "round " + strconv.Itoa(round) + ": client " + strconv.Itoa(i) + " (https " + strconv.FormatBool(https[rc]) +
					"), request " + strconv.Itoa(k+1) + " on the same connection"
				r, body := rc.getPath(t, "/echo-headers", what)
				if r.StatusCode != 200 || r.Close {
					t.Errorf("%s: %d (close %v), want 200 kept alive", what, r.StatusCode, r.Close)
				}
				proto := "http"
				if https[rc] {
					proto = "https"
				}
				if !strings.Contains(body, "X-Forwarded-Proto: "+proto+"\n") {
					t.Errorf("%s: forwarded without X-Forwarded-Proto: %s:\n%s", what, proto, body)
				}
			}
		}
		if after, _ := strconv.Atoi(testkit.Metric(p.admin, counted)); after-before != 2*(n+nTLS) {
			t.Errorf("round %d: the new process (PID %d) served %d requests, want the %d sent on the moved connections",
				round, p.pid(), after-before, 2*(n+nTLS))
		}
	}
}

// rawKeepAliveLoad sends GETs from each of clients goroutines, each on one keep-alive connection that it
// opens again only when fairlead closes it after an answer that said so (Connection: close), until stop.
// It counts the requests answered 200, and those that failed: refused, reset, closed without their
// answer, answered otherwise, or closed without Connection: close. Its connections are plain, or TLS
// with tlsConfig if not nil.
func rawKeepAliveLoad(addr string, tlsConfig *tls.Config, clients int, stop <-chan struct{}) (sofar func() int64, wait func() (ok, failed int64, first string)) {
	var answered, failed atomic.Int64
	var mu sync.Mutex
	var firstErr string
	fail := func(err string) {
		failed.Add(1)
		mu.Lock()
		if firstErr == "" {
			firstErr = err
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var br *bufio.Reader
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c == nil {
					var err error
					if tlsConfig != nil {
						c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tlsConfig)
					} else {
						c, err = net.Dial("tcp", addr)
					}
					if err != nil {
						fail("dial: " + err.Error())
						c = nil
						continue
					}
					br = bufio.NewReader(c)
				}
				c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: fairlead\r\n\r\n"); err != nil {
					fail("write: " + err.Error())
					c.Close()
					c = nil
					continue
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					fail("no answer: " + err.Error())
					c.Close()
					c = nil
					continue
				}
				io.Copy(io.Discard, resp.Body) //nolint:errcheck
				resp.Body.Close()
				if resp.StatusCode != 200 {
					fail("status " + resp.Status)
				} else {
					answered.Add(1)
				}
				if resp.Close {
					if _, err := br.ReadByte(); err != io.EOF {
						fail("after an answer with Connection: close, not the end: " + fmt.Sprint(err))
					}
					c.Close()
					c = nil
				}
			}
		}()
	}
	return answered.Load, func() (int64, int64, string) { wg.Wait(); return answered.Load(), failed.Load(), firstErr }
}

// Issue 38: HTTP/1.1 keep-alive clients sending requests without a pause through a binary upgrade see
// no failure, plain and HTTPS (their TLS sessions moving with the idle connections): each request is
// answered 200 by one process or the other, and a connection ends only after an answer that says so.
func TestKeepAliveLoadThroughAnUpgradeFailsNoRequest(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	tf := newTLSFront(t)
	tlsAddr := tf.addr
	p := startUpgradable(t, c, "20-tls.toml", tf.conf)
	tlsConfig := tf.client.Clone()
	tlsConfig.NextProtos = []string{"http/1.1"}
	for round := 1; round <= 2; round++ {
		stop := make(chan struct{})
		sofar, wait := rawKeepAliveLoad(p.addr, nil, 4, stop)
		sofarTLS, waitTLS := rawKeepAliveLoad(tlsAddr, tlsConfig, 4, stop)
		testkit.Eventually(t, "load before the switch", 10*time.Second, func() bool { return sofar() >= 100 && sofarTLS() >= 100 })
		old := p.pid()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return p.pid() != old && gone(old) })
		after, afterTLS := sofar(), sofarTLS()
		testkit.Eventually(t, "load after the switch", 10*time.Second, func() bool { return sofar() >= after+100 && sofarTLS() >= afterTLS+100 })
		close(stop)
		if ok, failed, first := wait(); failed != 0 {
			t.Errorf("round %d: %d of %d plain requests failed through the upgrade (first: %s)", round, failed, ok+failed, first)
		}
		if ok, failed, first := waitTLS(); failed != 0 {
			t.Errorf("round %d: %d of %d HTTPS requests failed through the upgrade (first: %s)", round, failed, ok+failed, first)
		}
	}
	for _, line := range strings.Split(p.logText(), "\n") {
		if strings.Contains(line, "idle keep-alive connections") {
			t.Log(line) // how many moved, how many were answered and closed by the old process
		}
	}
}
