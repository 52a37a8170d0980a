//go:build linux

package main

// Issue 38's load and drain requirements of a binary upgrade, through real processes: HTTP/1.1
// keep-alive and HTTP/2 load across SIGUSR2 with no request failed and no connection attempt refused;
// the old process stops accepting at once, tells its HTTP/2 clients GOAWAY, answers their last
// streams and exits 0 within drain_timeout; the new process's descriptors and goroutines are those
// the old one had with the same clients, and an idle fairlead's once the clients have gone.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// upgradeDrain is the drain_timeout of these tests' fairlead: the old process must be gone within it.
const upgradeDrain = 15 * time.Second

// tlsFront is the TLS front end (HTTP/2 offered) of an upgradable fairlead: its config file and what a
// client needs to reach it.
type tlsFront struct {
	addr   string
	ca     *sim.CA // its certificate's issuer (and the issuer of any other the test needs)
	client *tls.Config
	conf   string // a config file merged over 10-base.toml
}

func newTLSFront(t *testing.T) *tlsFront {
	t.Helper()
	ca, err := sim.NewCA("fairlead upgrade test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(tlsProcName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := leaf.Write(t.TempDir(), "frontend")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFront{addr: testkit.Addr(t), ca: ca, client: &tls.Config{RootCAs: ca.Pool(), ServerName: tlsProcName}}
	var conf testkit.Config
	conf.Table("frontend").Set("tls_listen", f.addr).Set("tls_cert", cert).Set("tls_key", key).Set("http2", true).
		Set("drain_timeout", upgradeDrain.String())
	f.conf = conf.String()
	return f
}

// h2Transport is an HTTP/2-only client transport to f (one connection, reused).
func (f *tlsFront) h2Transport() *http2.Transport {
	return &http2.Transport{TLSClientConfig: f.client.Clone(), StrictMaxConcurrentStreams: true}
}

// keepAliveLoad is clients each sending GETs one after the other to url over a client of its own that
// keeps its connection (HTTP/1.1 keep-alive, or one HTTP/2 connection), until stop. A request error or
// an answer other than 200 with its whole body is a failure. Retries are the transport's own (net/http
// sends an idempotent GET again on a new connection when the one it reused closed): counted, and
// split by whether the request had been written whole before the retry (a request the server may have
// read and dropped) or not.
type keepAliveLoad struct {
	what                             string
	done, failed                     atomic.Int64
	retriesUnwritten, retriesWritten atomic.Int64
	mu                               sync.Mutex
	first                            string
	wg                               sync.WaitGroup
}

func startKeepAliveLoad(what, url string, clients int, transport func() http.RoundTripper, stop <-chan struct{}) *keepAliveLoad {
	ld := &keepAliveLoad{what: what}
	for range clients {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			tr := transport()
			defer func() {
				if c, ok := tr.(interface{ CloseIdleConnections() }); ok {
					c.CloseIdleConnections()
				}
			}()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ld.get(c, url)
			}
		}()
	}
	return ld
}

func (ld *keepAliveLoad) get(c *http.Client, url string) {
	var conns, writtenBeforeRetry int
	wrote := false
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			conns++
			if conns > 1 && wrote {
				writtenBeforeRetry++
			}
			wrote = false
		},
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote = i.Err == nil },
	}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	resp, err := c.Do(req)
	if err == nil {
		var n int64
		n, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != 200 || n != 1000) {
			err = fmt.Errorf("%s with %d bytes, want 200 with 1000", resp.Status, n)
		}
	}
	if conns > 1 {
		ld.retriesWritten.Add(int64(writtenBeforeRetry))
		ld.retriesUnwritten.Add(int64(conns - 1 - writtenBeforeRetry))
	}
	if err != nil {
		ld.failed.Add(1)
		ld.mu.Lock()
		if ld.first == "" {
			ld.first = err.Error()
		}
		ld.mu.Unlock()
		return
	}
	ld.done.Add(1)
}

// check waits for the load's clients to end and fails t for every failed request, and, with
// strict, every request sent again after it was written whole. HTTP/1.1 is strict: a request written
// on a keep-alive connection that the server then closed unanswered may have been read, and only an
// idempotent one can be sent again. HTTP/2 is not: its client sends a request again only when the
// server said it did not process it (a stream above the GOAWAY's last stream, or REFUSED_STREAM,
// RFC 9113 §8.7).
func (ld *keepAliveLoad) check(t *testing.T, strict bool) {
	t.Helper()
	ld.wg.Wait()
	t.Logf("%s: %d requests answered, %d failed; retries: %d before the request was written, %d after",
		ld.what, ld.done.Load(), ld.failed.Load(), ld.retriesUnwritten.Load(), ld.retriesWritten.Load())
	if n := ld.failed.Load(); n != 0 {
		t.Errorf("%s: %d requests failed during the upgrade (first: %s)", ld.what, n, ld.first)
	}
	if n := ld.retriesWritten.Load(); n != 0 && strict {
		t.Errorf("%s: %d requests were written whole, dropped unanswered and sent again", ld.what, n)
	}
}

// Issue 38: HTTP/1.1 keep-alive clients, HTTP/2 clients and new connections keep coming while SIGUSR2
// replaces the process: no request fails and no connection attempt is refused or reset. The old
// process stops accepting at once (it holds no listening socket while it drains), tells its HTTP/2
// client GOAWAY while a slow stream is in flight, answers that stream whole, and exits 0 within
// drain_timeout.
func TestSIGUSR2UnderHTTP1AndHTTP2LoadFailsNoRequestAndTheOldProcessDrains(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	tf := newTLSFront(t)
	p := startUpgradable(t, c, "20-tls.toml", tf.conf)
	old := p.pid()

	// The slow stream: on an HTTP/2 connection of its own, in flight when the new process serves.
	const slowBytes = 256 << 10
	raw, err := tls.Dial("tcp", tf.addr, &tls.Config{RootCAs: tf.client.RootCAs, ServerName: tlsProcName, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cc, err := tf.h2Transport().NewClientConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		body []byte
		err  error
		at   time.Time
	}
	slow := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", "https://"+tf.addr+"/slow?delay=5s&bytes="+strconv.Itoa(slowBytes), nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			slow <- answer{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != 200 {
			err = errors.New(resp.Status)
		}
		slow <- answer{body: b, err: err, at: time.Now()}
	}()
	testkit.Eventually(t, "the slow stream to be open", 5*time.Second, func() bool { return cc.State().StreamsActive == 1 })
	// And a slow HTTP/1.1 request in flight on a keep-alive connection: answered whole, its answer
	// saying the connection closes.
	slow1 := make(chan answer, 1)
	go func() {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		resp, err := c.Get("http://" + p.addr + "/slow?delay=5s&bytes=" + strconv.Itoa(slowBytes))
		if err != nil {
			slow1 <- answer{err: err, at: time.Now()}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != 200 || !resp.Close) {
			err = fmt.Errorf("%s, Connection: close %v; want 200 and the connection closed", resp.Status, resp.Close)
		}
		slow1 <- answer{body: b, err: err, at: time.Now()}
	}()

	stop := make(chan struct{})
	h1 := startKeepAliveLoad("HTTP/1.1 keep-alive", "http://"+p.addr+"/ka?bytes=1000", 4, func() http.RoundTripper {
		return &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
	}, stop)
	h2 := startKeepAliveLoad("HTTP/2", "https://"+tf.addr+"/h2?bytes=1000", 2, func() http.RoundTripper { return tf.h2Transport() }, stop)
	// New connections: plain (connLoad) and TLS, one per request.
	sofar, connWait := connLoad(p.addr, stop)
	tlsConns := startKeepAliveLoad("HTTPS, a connection per request", "https://"+tf.addr+"/c?bytes=1000", 1, func() http.RoundTripper {
		return &http.Transport{DisableKeepAlives: true, TLSClientConfig: tf.client.Clone()}
	}, stop)
	testkit.Eventually(t, "load before the switch", 10*time.Second, func() bool {
		return h1.done.Load() >= 100 && h2.done.Load() >= 100 && sofar() >= 20 && tlsConns.done.Load() >= 20
	})

	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the new process to serve", 30*time.Second, func() bool {
		return p.pid() != old && p.pid() != 0 && strings.Contains(p.logText(), "binary upgrade: the new process serves")
	})
	served := time.Now()
	// The old process stops accepting at once: while its slow stream is still being answered, it holds
	// no listening socket.
	testkit.Eventually(t, "the old process to hold no listening socket", 5*time.Second, func() bool { return listening(old) == 0 })
	select {
	case a := <-slow:
		t.Fatalf("the slow stream ended (%v) before the old process was seen to stop accepting: the test proves nothing; make it slower", a.err)
	default:
	}
	if gone(old) {
		t.Fatal("the old process exited with its slow stream in flight")
	}
	// GOAWAY on the connection with the stream in flight.
	testkit.Eventually(t, "GOAWAY on the old process's HTTP/2 connection", 5*time.Second, func() bool { return cc.State().Closing })
	goaway := time.Now()

	a := <-slow
	if a.err != nil {
		t.Fatalf("the slow stream in flight at the switch: %v", a.err)
	}
	if len(a.body) != slowBytes || !patterned(a.body) {
		t.Errorf("the slow stream's answer: %d bytes (whole and right: %v), want %d", len(a.body), patterned(a.body), slowBytes)
	}
	if a.at.Before(goaway) {
		t.Errorf("the slow stream ended before GOAWAY was seen")
	}
	if a := <-slow1; a.err != nil || len(a.body) != slowBytes || !patterned(a.body) {
		t.Errorf("the slow HTTP/1.1 request in flight at the switch: %v, %d bytes (whole and right: %v), want %d", a.err, len(a.body), patterned(a.body), slowBytes)
	}
	testkit.Eventually(t, "the old process to exit", upgradeDrain+5*time.Second, func() bool { return gone(old) })
	if err := <-p.done; err != nil {
		t.Errorf("the old process exited %v, want 0", err)
	}
	t.Logf("the old process was gone %v after the new one served (drain_timeout %v)", time.Since(served).Round(10*time.Millisecond), upgradeDrain)

	// Load after the switch, on the new process.
	after1, after2, afterC, afterT := h1.done.Load(), h2.done.Load(), sofar(), tlsConns.done.Load()
	testkit.Eventually(t, "load after the switch", 10*time.Second, func() bool {
		return h1.done.Load() >= after1+100 && h2.done.Load() >= after2+100 && sofar() >= afterC+20 && tlsConns.done.Load() >= afterT+20
	})
	close(stop)
	h1.check(t, true)
	h2.check(t, false)
	tlsConns.check(t, true)
	if tries, failed, first := connWait(); failed != 0 {
		t.Errorf("%d of %d connection attempts failed during the switch (first: %s)", failed, tries, first)
	}
}

// listening is how many listening TCP sockets process pid holds (-1 if it cannot be read).
func listening(pid int) int {
	socks := sockets(pid)
	if socks == nil {
		return -1
	}
	n := 0
	for _, s := range socks {
		if s.state == "0A" {
			n++
		}
	}
	return n
}

// tcpSocket is a TCP socket of /proc/net/tcp: its ends and state (0A: listening, 01: established).
type tcpSocket struct{ local, remote, state string }

// sockets is the TCP sockets process pid holds, by descriptor (nil if its descriptors cannot be read).
func sockets(pid int) map[string]tcpSocket {
	byInode := map[string]tcpSocket{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			continue
		}
		for _, ln := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(ln)
			if len(fs) < 10 {
				continue
			}
			byInode[fs[9]] = tcpSocket{local: hexAddr(fs[1]), remote: hexAddr(fs[2]), state: fs[3]}
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]tcpSocket{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			if s, ok := byInode[strings.TrimSuffix(ino, "]")]; ok {
				out[e.Name()] = s
			}
		}
	}
	return out
}

// hexAddr is /proc/net/tcp's 0100007F:1F90 as 127.0.0.1:8080 (IPv4; IPv6 addresses as written).
func hexAddr(s string) string {
	ip, port, ok := strings.Cut(s, ":")
	pn, _ := strconv.ParseUint(port, 16, 16)
	if !ok || len(ip) != 8 {
		return s
	}
	v, _ := strconv.ParseUint(ip, 16, 32)
	return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), pn)
}

// census is what a fairlead process holds: its descriptors by kind and its goroutines.
type census map[string]int

// takeCensus counts process pid's descriptors by kind (listeners; connections accepted on each of the
// front end's and the admin's ports; connections to each kind of server; other TCP sockets; Unix
// sockets; epoll, eventfd, pipes and files) and its goroutines (go_goroutines on its admin).
func takeCensus(pid int, ports map[string]string, servers map[string]string, admin string) census {
	cs := census{}
	socks := sockets(pid)
	for _, s := range socks {
		_, lport, _ := strings.Cut(s.local, ":")
		switch {
		case s.state == "0A":
			cs["listeners"]++
		case ports[lport] != "":
			cs["conns accepted on "+ports[lport]]++
		case servers[s.remote] != "":
			cs["conns to "+servers[s.remote]]++
		default:
			cs["other TCP"]++
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, ok := socks[e.Name()]; ok {
			continue
		}
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		kind := "file"
		switch {
		case strings.HasPrefix(l, "socket:"):
			kind = "unix socket"
		case strings.HasPrefix(l, "anon_inode:"):
			kind = l
		case strings.HasPrefix(l, "pipe:"):
			kind = "pipe"
		}
		cs[kind]++
	}
	v, err := strconv.ParseFloat(testkit.Metric(admin, "go_goroutines"), 64)
	if err != nil {
		v = -1
	}
	cs["goroutines"] = int(v)
	return cs
}

func (cs census) String() string {
	var keys []string
	for k := range cs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, cs[k])
	}
	return strings.TrimSpace(b.String())
}

// differs lists the kinds whose counts in cs and want differ by more than slack allows (its kind's, 0
// for kinds it does not name).
func (cs census) differs(want census, slack map[string]int) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range []census{cs, want} {
		for k := range m {
			if seen[k] {
				continue
			}
			seen[k] = true
			if d := cs[k] - want[k]; d > slack[k] || -d > slack[k] {
				out = append(out, fmt.Sprintf("%s %d, want %d±%d", k, cs[k], want[k], slack[k]))
			}
		}
	}
	sort.Strings(out)
	return out
}

// Issue 38: after a binary upgrade the new process holds what the old one held with the same clients
// (WebSocket tunnels, HTTP/1.1 keep-alive connections, an HTTP/2 connection): the same descriptors,
// kind by kind, and the same goroutines; once the clients have gone, what an idle fairlead holds. No
// handover channel, file or goroutine is left behind.
//
// The slack, unit by unit:
//   - conns to platform: 1 — the upstream keep-alive connection of the GETs (one: each client's GETs
//     are sequential) closes 10s after its last use (lb/upstream.IdleTimeout), so a count may be taken
//     just before or just after (seen: 3 in the idle baseline, the start's readiness GET's connection
//     still open, 2 at the end).
//   - conns to cxserver: 1 — a health probe (200ms interval) may be between its dial and its close.
//   - goroutines: 2 — one for a probe in flight (as above), one for a worker goroutine fasthttp keeps
//     up to 10s after its connection ended (seen: the idle baseline, taken soon after the first
//     tunnel's connection was hijacked, had one more such worker than the new process at the end).
//     The census is taken once two readings in a row agree, which waits out most of them and the
//     HTTP/2 stream workers (10s idle too).
func TestSIGUSR2LeavesTheNewProcessHoldingWhatTheOldHeld(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	tf := newTLSFront(t)
	p := startUpgradable(t, c, "05-cx.toml", cxPool(c), "20-tls.toml", tf.conf)
	portOf := func(a string) string { _, port, _ := net.SplitHostPort(a); return port }
	ports := map[string]string{portOf(p.addr): "listen", portOf(tf.addr): "tls_listen", portOf(p.admin): "admin"}
	servers := map[string]string{}
	for _, a := range testkit.PlatformAddrs(c) {
		servers[a] = "platform"
	}
	for _, a := range testkit.ConnectionAddrs(c) {
		servers[a] = "cxserver"
	}
	slack := map[string]int{"conns to platform": 1, "conns to cxserver": 1, "goroutines": 2}
	// settled takes pid's census until two in a row agree within slack (fasthttp's and HTTP/2's idle
	// workers end after 10s without work), and returns the last.
	settled := func(what string, pid int, want census) census {
		t.Helper()
		var last, cur census
		deadline := time.Now().Add(40 * time.Second)
		for {
			cur = takeCensus(pid, ports, servers, p.admin)
			if last != nil && len(cur.differs(last, slack)) == 0 && (want == nil || len(cur.differs(want, slack)) == 0) {
				return cur
			}
			if time.Now().After(deadline) {
				if want != nil {
					t.Errorf("%s: %s", what, strings.Join(cur.differs(want, slack), "; "))
					t.Logf("%s: its goroutines:\n%s", what, goroutineDump(p.admin))
				}
				t.Logf("%s: %s (not settled)", what, cur)
				return cur
			}
			last = cur
			time.Sleep(500 * time.Millisecond) // between two readings of a count that must hold still
		}
	}
	// The idle baseline: a fairlead whose tunnel engine has started (the first tunnel starts it, with
	// its event loops' epoll and eventfd descriptors and goroutines, and it lasts as long as the
	// process) and holds no client.
	warm, _, err := testkit.DialTunnel(p.addr, "/Thingworx/WS", "asset-warm", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	idle := settled("an idle fairlead", p.pid(), nil)
	t.Logf("idle, before the upgrade: %s", idle)

	const tunnels = 10 // half ws://, half wss:// (their TLS sessions move with them)
	var wss []*websocket.Conn
	for i := range tunnels {
		var ws *websocket.Conn
		var err error
		if i%2 == 0 {
			ws, _, err = testkit.DialTunnel(p.addr, "/Thingworx/WS", "asset-"+strconv.Itoa(i), 5*time.Second)
		} else {
			d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: tf.client.Clone()}
			ws, _, err = d.Dial("wss://"+tf.addr+"/Thingworx/WS", http.Header{"X-Asset-Id": {"asset-" + strconv.Itoa(i)}})
		}
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		wss = append(wss, ws)
	}
	const h1Clients = 3
	h1s := make([]*http.Client, h1Clients)
	for i := range h1s {
		h1s[i] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
	}
	h2c := &http.Client{Timeout: 10 * time.Second, Transport: tf.h2Transport()}
	// use sends a few GETs on each client's connection and a message through each tunnel: the same
	// clients, the same use, before and after the upgrade.
	// The HTTP/1.1 clients sit idle on their keep-alive connections during the switch, and the old
	// process closes them: none of their next requests may be sent and then dropped (keepAliveLoad's
	// strict check).
	h1Use := &keepAliveLoad{what: "idle HTTP/1.1 keep-alive clients"}
	use := func(when string) {
		t.Helper()
		for round := range 3 {
			for i, hc := range h1s {
				h1Use.get(hc, "http://"+p.addr+"/c"+strconv.Itoa(i)+"?bytes=1000")
			}
			if f := h1Use.failed.Load(); f != 0 {
				t.Fatalf("%s: %d HTTP/1.1 requests failed (first: %s)", when, f, h1Use.first)
			}
			resp, err := h2c.Get("https://" + tf.addr + "/h2")
			if err != nil {
				t.Fatalf("%s: the HTTP/2 client: %v", when, err)
			}
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			for i, ws := range wss {
				if err := testkit.Echo(ws, []byte(when+strconv.Itoa(round)), 5*time.Second); err != nil {
					t.Fatalf("%s: tunnel %d: %v", when, i, err)
				}
			}
		}
	}
	use("before")
	held := settled("with the clients, before the upgrade", p.pid(), nil)
	t.Logf("with the clients, before the upgrade: %s", held)

	// Two upgrades in a row: nothing builds up from one process to the next.
	for round := 1; round <= 2; round++ {
		old := p.pid()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return p.pid() != old && p.pid() != 0 && gone(old) })
		use("after") // the HTTP clients reconnect to the new process; the tunnels moved
		now := settled(fmt.Sprintf("with the same clients, after upgrade %d", round), p.pid(), held)
		t.Logf("with the same clients, after upgrade %d: %s", round, now)
	}
	h1Use.check(t, true)

	for _, ws := range wss {
		ws.Close()
	}
	for _, hc := range append(h1s, h2c) {
		hc.CloseIdleConnections()
	}
	gone := settled("the clients gone, after the upgrades", p.pid(), idle)
	t.Logf("the clients gone, after the upgrades: %s", gone)
}

// patterned reports whether b is the simulator's ?bytes=N body: byte i is 'a'+i%26.
func patterned(b []byte) bool {
	for i, c := range b {
		if c != byte('a'+i%26) {
			return false
		}
	}
	return true
}

// goroutineDump is the goroutines of the fairlead whose admin is admin, grouped by stack (Go's
// profiler, debug=1), for a test's failure.
func goroutineDump(admin string) string {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + admin + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
