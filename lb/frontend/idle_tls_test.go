package frontend

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Idle HTTPS keep-alive connections at a hand-over (idle.go): their TLS sessions go with their sockets.

// idleTLS returns a server configuration (a certificate for testServerName, ALPN http/1.1, as lb's) and
// a client configuration for each of the TLS versions and suites a session moves with: TLS 1.3, and
// TLS 1.2 with AES-GCM and with ChaCha20-Poly1305.
func idleTLS(t *testing.T) (server *tls.Config, clients map[string]*tls.Config) {
	t.Helper()
	ca, err := sim.NewCA("idle test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testServerName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	base := func() *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: testServerName, NextProtos: []string{"http/1.1"}}
	}
	tls13, gcm, chacha := base(), base(), base()
	tls13.MinVersion = tls.VersionTLS13
	gcm.MaxVersion, gcm.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	chacha.MaxVersion, chacha.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305}
	return server, map[string]*tls.Config{"TLS 1.3": tls13, "TLS 1.2 AES-GCM": gcm, "TLS 1.2 ChaCha20": chacha}
}

// dialAny dials a raw keep-alive HTTP/1.1 client: plain, or over TLS with cfg (its handshake done).
func dialAny(t *testing.T, addr string, cfg *tls.Config) *client {
	t.Helper()
	if cfg == nil {
		return dialClient(t, addr)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return tlsClientOn(t, raw, cfg)
}

// tlsClientOn makes a TLS client of raw and runs its handshake.
func tlsClientOn(t *testing.T, raw net.Conn, cfg *tls.Config) *client {
	t.Helper()
	c := tls.Client(raw, cfg)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return &client{c: c, br: bufio.NewReader(c)}
}

// moveIdle hands over from's idle connections to to, from's listener closed as lb does first, and checks
// that every one was given, with its TLS session.
func moveIdle(t *testing.T, from, to *idleFront, want int) {
	t.Helper()
	from.ln.Close()
	given, kept := from.f.HandOverIdle(5 * time.Second)
	if len(given) != want || kept != 0 {
		t.Fatalf("given %d, kept %d; want %d, 0", len(given), kept, want)
	}
	for _, ic := range given {
		if ic.File == nil || ic.Client == nil || ic.TLS == nil {
			t.Fatalf("given a connection with no socket, client or TLS session (%v %v %v)", ic.File != nil, ic.Client, ic.TLS != nil)
		}
	}
	to.adopt(t, given)
}

// checkServed checks an answer: 200 by the front end named by, over TLS, to the server name asked for,
// kept alive.
func checkServed(t *testing.T, what string, r *http.Response, by string) {
	t.Helper()
	if r.StatusCode != 200 || r.Header.Get("X-Served-By") != by || r.Close || r.Header.Get("X-TLS") != "true" ||
		r.Header.Get("X-SNI") != testServerName {
		t.Errorf("%s: %d by %q (close %v, TLS %q, server name %q), want 200 by %s over TLS to %s, kept alive", what,
			r.StatusCode, r.Header.Get("X-Served-By"), r.Close, r.Header.Get("X-TLS"), r.Header.Get("X-SNI"), by, testServerName)
	}
}

// Idle HTTPS keep-alive connections move to another front end on their sockets with their TLS sessions:
// each client's next requests, on the TLS connection it had (no new handshake), are answered by the
// other front end, which sees a TLS connection (RequestCtx.IsTLS, the server name asked for) and counts
// it against max_conns_per_source; a connection whose handshake is done and that sent nothing yet moves
// too. They move on again from the second front end to a third, their sessions now carried by
// fairlead's record layer. A connection in the middle of a request is answered by the first and closed.
func TestIdleHTTPSKeepAliveConnectionsMoveWithTheirTLSSessions(t *testing.T) {
	server, configs := idleTLS(t)
	old, next, third := startIdleFrontOn(t, "old", 0, server), startIdleFrontOn(t, "new", 100, server), startIdleFrontOn(t, "third", 100, server)
	var clients []*client
	var names []string
	for name, cfg := range configs {
		for i := range 2 {
			cl := dialAny(t, old.addr, cfg)
			checkServed(t, "first request", cl.get(t, fmt.Sprintf("/first/%d", i)), "old")
			clients = append(clients, cl)
			names = append(names, fmt.Sprintf("%s client %d", name, i))
		}
	}
	for name, cfg := range configs { // connected, handshake done, nothing sent yet
		clients = append(clients, dialAny(t, old.addr, cfg))
		names = append(names, name+" client that sent nothing")
	}
	mid := dialAny(t, old.addr, configs["TLS 1.3"])                                                         // a request under way: its handler reads its body
	io.WriteString(mid.c, "POST /mid HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n") //nolint:errcheck // the rest later
	<-old.inBody
	n := len(clients)
	waitIdle(t, old.f, n)

	moveIdle(t, old, next, n)
	for i, cl := range clients {
		r := cl.get(t, "/next")
		checkServed(t, names[i]+", next request on its connection", r, "new")
		if got := r.Header.Get("X-Client"); got != cl.c.LocalAddr().String() {
			t.Errorf("%s: the new front end sees %s, the client is %s", names[i], got, cl.c.LocalAddr())
		}
		checkServed(t, names[i]+", a third request", cl.get(t, "/again"), "new")
	}
	if got := next.f.Sources().Conns(netip.MustParseAddr("127.0.0.1")); got != n {
		t.Errorf("max_conns_per_source counts %d connections of 127.0.0.1 in the new front end, want %d", got, n)
	}

	waitIdle(t, next.f, n)
	moveIdle(t, next, third, n) // the sessions are the record layer's now
	for i, cl := range clients {
		checkServed(t, names[i]+", after a second hand-over", cl.get(t, "/third"), "third")
		checkServed(t, names[i]+", after a second hand-over, again", cl.get(t, "/third/again"), "third")
	}
	if got := third.f.Sources().Conns(netip.MustParseAddr("127.0.0.1")); got != n {
		t.Errorf("max_conns_per_source counts %d connections of 127.0.0.1 in the third front end, want %d", got, n)
	}

	io.WriteString(mid.c, "2\r\ncd\r\n0\r\n\r\n") //nolint:errcheck
	r := mid.read(t, "the request under way")
	if r.StatusCode != 200 || r.Header.Get("X-Served-By") != "old" || !r.Close || r.Header.Get("X-TLS") != "true" {
		t.Errorf("the request under way: %d by %q (close %v, TLS %q), want 200 by old over TLS with Connection: close",
			r.StatusCode, r.Header.Get("X-Served-By"), r.Close, r.Header.Get("X-TLS"))
	}
	mid.closedAfter(t, "the request under way")
}

// Requests sent at any moment around a hand-over of HTTPS connections are each answered once, by one
// front end or the other, none lost or answered twice (requestsAroundAHandOver): a connection that
// goes idle as the hand-over runs, and whose client's next request crypto/tls may hold already, is
// given only when it holds none.
func TestHTTPSRequestsAroundAHandOverAreEachAnsweredOnce(t *testing.T) {
	server, configs := idleTLS(t)
	for _, name := range []string{"TLS 1.3", "TLS 1.2 AES-GCM"} {
		t.Run(name, func(t *testing.T) { requestsAroundAHandOver(t, server, configs[name]) })
	}
}

// holdConn is a client's socket that can hold back the end of what it is given to write (hold): a TLS
// client's record then reaches the server in part, until release.
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	keep int    // how many bytes of the next write to hold back (0: none)
	held []byte // held back
}

func (c *holdConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keep > 0 && len(b) > c.keep {
		cut := len(b) - c.keep
		c.held = append(c.held, b[cut:]...)
		c.keep = 0
		if _, err := c.Conn.Write(b[:cut]); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *holdConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// Telling whether an HTTPS connection is idle costs its Read nothing either: a keep-alive request read
// through the front end's TLS connection allocates nothing more than one read from its session,
// crypto/tls's or, once handed over, fairlead's record layer's (the test's client, crypto/tls,
// allocates in its Write).
func TestIdleTrackingOfHTTPSConnectionsAllocatesNothing(t *testing.T) {
	server, configs := idleTLS(t)
	f := New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := f.TLSListener(raw, func() *tls.Config { return server })
	defer ln.Close()
	cc, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := tls.Client(cc, configs["TLS 1.3"])
	defer client.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	shook := make(chan error, 1)
	go func() { shook <- client.Handshake() }()
	if err := sc.(tlsFrontConn).Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-shook; err != nil {
		t.Fatal(err)
	}
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 4096)
	read := func(c net.Conn) func() {
		return func() {
			client.Write(req) //nolint:errcheck
			for got := 0; got < len(req); {
				n, err := c.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
		}
	}
	read(sc)()
	if fc := sc.(tlsFrontConn).frontConn; fc.hand.Load() != handBusy || !fc.listed {
		t.Fatalf("an HTTPS connection: hand %d, listed %v", fc.hand.Load(), fc.listed)
	}
	// The test's client is crypto/tls's, whose Write allocates: what the front end adds is measured
	// (not under the race detector, which allocates on its own).
	noMore := func(what string, c, session net.Conn) {
		t.Helper()
		if raceEnabled {
			return
		}
		base := testing.AllocsPerRun(200, read(session))
		if n := testing.AllocsPerRun(200, read(c)); n != base {
			t.Errorf("%.1f allocations per keep-alive request read through the front end over %s, %.1f without it; want no more", n, what, base)
		}
	}
	noMore("crypto/tls", sc, sc.(tlsFrontConn).tc)

	// The same connection handed over to a second front end, its session resumed by the record layer.
	raw.Close()
	woken := make(chan error, 1)
	go func() { // idle: taken below, its Read ends and fasthttp would close it
		_, err := sc.Read(buf)
		if err == io.EOF {
			err = sc.Close()
		}
		woken <- err
	}()
	waitIdle(t, f, 1)
	given, kept := f.HandOverIdle(5 * time.Second)
	if err := <-woken; err != nil || len(given) != 1 || kept != 0 {
		t.Fatalf("given %d, kept %d (%v)", len(given), kept, err)
	}
	rc, err := tlsrecord.Resume(given[0].File, *given[0].TLS)
	if err != nil {
		t.Fatal(err)
	}
	next := New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
	raw2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2 := next.TLSListener(raw2, func() *tls.Config { return server })
	defer ln2.Close()
	if err := Inject(ln2, rc); err != nil {
		t.Fatal(err)
	}
	sc2, err := ln2.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc2.Close()
	read(sc2)()
	if fc := sc2.(tlsFrontConn).frontConn; fc.rec == nil || !fc.listed {
		t.Fatalf("the connection handed over: record layer %v, listed %v", fc.rec != nil, fc.listed)
	}
	noMore("the record layer", sc2, sc2.(tlsFrontConn).rec)
}
