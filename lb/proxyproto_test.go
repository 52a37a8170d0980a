package lb

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"
)

// ppV1 is a PROXY version 1 line naming src as the client.
func ppV1(src netip.AddrPort) []byte {
	fam, dst := "TCP4", "10.0.0.1"
	if src.Addr().Is6() {
		fam, dst = "TCP6", "2001:db8::1"
	}
	return fmt.Appendf(nil, "PROXY %s %s %s %d 443\r\n", fam, src.Addr(), dst, src.Port())
}

// ppV2 is a PROXY version 2 header naming src as the client; local: the LOCAL command instead.
func ppV2(src netip.AddrPort, local bool) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	if local {
		return append(b, 0x20, 0x00, 0, 0)
	}
	dst := netip.MustParseAddr("10.0.0.1")
	fam := byte(0x11)
	if src.Addr().Is6() {
		dst, fam = netip.MustParseAddr("2001:db8::1"), 0x21
	}
	a := append(src.Addr().AsSlice(), dst.AsSlice()...)
	a = binary.BigEndian.AppendUint16(a, src.Port())
	a = binary.BigEndian.AppendUint16(a, 443)
	b = append(b, 0x21, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a)))
	return append(b, a...)
}

// ppConn dials addr from the local address from (127.0.0.1 or another loopback address), writes
// header, and over TLS (cfg not nil) shakes hands.
func ppConn(t *testing.T, addr, from string, header []byte, cfg *tls.Config) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if _, err := conn.Write(header); err != nil {
		return nil, err
	}
	if cfg == nil {
		return conn, nil
	}
	tc := tls.Client(conn, cfg)
	return tc, tc.Handshake()
}

// ppDo sends raw (a request) over a connection ppConn makes and reads the answer: nil when the
// connection closed without one.
func ppDo(t *testing.T, addr, from string, header []byte, cfg *tls.Config, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := ppConn(t, addr, from, header, cfg)
	if err != nil {
		return nil, ""
	}
	if _, err := io.WriteString(conn, raw); err != nil {
		return nil, ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, ""
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

const ppEcho = "GET /echo-headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

// proxy_protocol = ["127.0.0.1/32"]: connections from 127.0.0.1 start with a PROXY header, v1 or v2,
// on both listeners, and the address it carries is the client's for X-Forwarded-For, the sticky
// source key and rate_per_source; LOCAL keeps the connection's. Without a header, or with a malformed
// one, the connection closes, counted, nothing forwarded. From 127.0.0.2 (not listed) a PROXY header is
// not believed: 400 on the plain listener, a failed handshake on the TLS one, nothing forwarded.
func TestProxyProtocolFromListedAndUnlistedSenders(t *testing.T) {
	c := startCluster(t, 1, 2)
	files := cxConfig(c, "")
	env, tlsAddr := ppTLSFront(t, files, "proxy_protocol = [\"127.0.0.1/32\"]\nrate_per_source = 3\nheader_timeout = \"1s\"\n")
	clock := &testkit.Clock{} // rate_per_source's: stopped, the buckets refill only when the test says
	l, _ := startLBOpts(t, testkit.WriteFiles(t, files), Options{Now: clock.Now})
	leader := c.Platforms[0]
	cand := testCandidates(testkit.ConnectionAddrs(c))
	place := func(key string) string {
		return c.Connections[stickiness.NewTable(stickiness.TableOptions{}).Place([]byte(key), cand)].Name
	}
	listeners := []struct {
		name, addr string
		cfg        *tls.Config
	}{{"plain", l.Addr(), nil}, {"tls", tlsAddr, env.clientConfig(tlsName)}}
	versions := []struct {
		name string
		hdr  func(netip.AddrPort) []byte
	}{{"v1", ppV1}, {"v2", func(a netip.AddrPort) []byte { return ppV2(a, false) }}}
	n := 0
	for _, ln := range listeners {
		for _, v := range versions {
			for _, fam := range []string{"203.0.113.%d", "2001:db8::%d"} {
				n++
				src := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf(fam, n)), 40000)
				name := fmt.Sprintf("%s %s %s", ln.name, v.name, src.Addr())
				// X-Forwarded-For is the carried address (the first of its 3 requests).
				resp, body := ppDo(t, ln.addr, "127.0.0.1", v.hdr(src), ln.cfg, ppEcho)
				if resp == nil || resp.StatusCode != 200 {
					t.Fatalf("%s: %v, want 200", name, resp)
				}
				if got := echoedHeaders(body)["x-forwarded-for"]; len(got) != 1 || got[0] != src.Addr().String() {
					t.Errorf("%s: the leader saw X-Forwarded-For %q, want %s", name, got, src.Addr())
				}
				// The sticky source key is the carried address (a WebSocket upgrade to the sticky pool).
				ws := "GET /Thingworx/WS HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
					"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
				resp, _ = ppDo(t, ln.addr, "127.0.0.1", v.hdr(src), ln.cfg, ws)
				if resp == nil || resp.StatusCode != 101 {
					t.Fatalf("%s: the upgrade: %v, want 101", name, resp)
				}
				if by, want := resp.Header.Get("X-Served-By"), place("s:"+src.Addr().String()); by != want {
					t.Errorf("%s: the upgrade landed on %s, want %s (its source key s:%s)", name, by, want, src.Addr())
				}
				// rate_per_source = 3 is per carried address: its 3rd request passes, its 4th is 429.
				if resp, _ := ppDo(t, ln.addr, "127.0.0.1", v.hdr(src), ln.cfg, ppEcho); resp == nil || resp.StatusCode != 200 {
					t.Errorf("%s: its third request: %v, want 200", name, resp)
				}
				before := leader.Requests()
				if resp, _ := ppDo(t, ln.addr, "127.0.0.1", v.hdr(src), ln.cfg, ppEcho); resp == nil || resp.StatusCode != 429 {
					t.Errorf("%s: its fourth request: %v, want 429 (rate_per_source of its carried address)", name, resp)
				}
				if leader.Requests() != before {
					t.Errorf("%s: the 429 was forwarded", name)
				}
			}
		}
	}
	errs := l.px.front.Errors
	for _, ln := range listeners {
		// LOCAL (the balancer's health check) keeps the connection's address, whatever family it names
		// (here a unix socket's, its 216-byte address block skipped).
		unix := append(ppV2(netip.AddrPort{}, true), make([]byte, 216)...)
		unix[13], unix[14], unix[15] = 0x31, 0, 216
		for _, local := range [][]byte{ppV2(netip.AddrPort{}, true), unix} {
			clock.Advance(time.Second) // 127.0.0.1's rate_per_source bucket refilled
			resp, body := ppDo(t, ln.addr, "127.0.0.1", local, ln.cfg, ppEcho)
			if resp == nil || resp.StatusCode != 200 || strings.Join(echoedHeaders(body)["x-forwarded-for"], ",") != "127.0.0.1" {
				t.Errorf("%s LOCAL %#x: %v %q, want 200 with X-Forwarded-For 127.0.0.1", ln.name, local[13], resp, echoedHeaders(body)["x-forwarded-for"])
			}
		}
		before := leader.Requests()
		// No header from a listed sender: closed, counted.
		missing, malformed := errs.Count(frontend.ConnProxyMissing), errs.Count(frontend.ConnProxyMalformed)
		first := []byte("GET /echo-headers HTTP/1.1\r\nHost: x\r\n\r\n")
		if ln.cfg != nil {
			first = nil // the ClientHello comes first
		}
		if resp, _ := ppDo(t, ln.addr, "127.0.0.1", first, ln.cfg, ppEcho); resp != nil {
			t.Errorf("%s without a header: %d, want the connection closed", ln.name, resp.StatusCode)
		}
		if got := errs.Count(frontend.ConnProxyMissing); got != missing+1 {
			t.Errorf("%s without a header: proxy_missing %d, want %d", ln.name, got, missing+1)
		}
		// Malformed headers: closed, counted by kind.
		long := []byte("PROXY TCP4 203.0.113.9 10.0.0.1 1 2" + strings.Repeat(" ", 80) + "\r\n")
		family := ppV2(netip.MustParseAddrPort("203.0.113.9:1"), false)
		family[13] = 0x41
		past := ppV2(netip.MustParseAddrPort("203.0.113.9:1"), false)
		binary.BigEndian.PutUint16(past[14:], 200) // its length runs past its end: the sender closes
		for i, bad := range [][]byte{long, family, past} {
			conn, err := ppConn(t, ln.addr, "127.0.0.1", bad, nil)
			if err == nil {
				conn.(*net.TCPConn).CloseWrite() //nolint:errcheck
				if n, _ := io.Copy(io.Discard, conn); n != 0 {
					t.Errorf("%s malformed %d: %d bytes answered, want none", ln.name, i, n)
				}
			}
		}
		if got := errs.Count(frontend.ConnProxyMalformed); got != malformed+3 {
			t.Errorf("%s malformed headers: proxy_malformed %d, want %d", ln.name, got, malformed+3)
		}
		// From 127.0.0.2, not listed: the header is not believed (on the TLS listener it is read as
		// the ClientHello, and the handshake fails: counted as tls).
		for _, v := range versions {
			failed := errs.Count(frontend.ConnTLS)
			resp, _ := ppDo(t, ln.addr, "127.0.0.2", v.hdr(netip.MustParseAddrPort("203.0.113.66:1")), ln.cfg, ppEcho)
			switch {
			case ln.cfg == nil && (resp == nil || resp.StatusCode != 400):
				t.Errorf("%s %s from an unlisted address: %v, want 400", ln.name, v.name, resp)
			case ln.cfg != nil && resp != nil:
				t.Errorf("%s %s from an unlisted address: %d, want the handshake failed", ln.name, v.name, resp.StatusCode)
			case ln.cfg != nil:
				// The client may see the server's alert before the server has counted its failure.
				testkit.Eventually(t, ln.name+" "+v.name+" from an unlisted address: a tls handshake failure counted",
					3*time.Second, func() bool { return errs.Count(frontend.ConnTLS) == failed+1 })
			}
		}
		if ln.cfg == nil && errs.Count(frontend.ConnTLS) != 0 {
			t.Errorf("plain: %d tls handshake failures counted, want none", errs.Count(frontend.ConnTLS))
		}
		if leader.Requests() != before {
			t.Errorf("%s: %d requests forwarded from the refused connections, want none", ln.name, leader.Requests()-before)
		}
	}
}

// max_conns_per_source counts a proxy_protocol sender's connections per the client each header names
// (not per the sender): two clients each have their connection, a client's second one is closed once
// its header is read, nothing forwarded.
func TestProxyProtocolMaxConnsPerSourceCountsTheCarriedAddress(t *testing.T) {
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	files["30-extra.toml"] = "[frontend]\nproxy_protocol = [\"127.0.0.1\"]\nmax_conns_per_source = 1\n"
	l, _ := startLB(t, files)
	keep := func(src string) (*bufio.Reader, net.Conn) {
		conn, err := ppConn(t, l.Addr(), "127.0.0.1", ppV1(netip.MustParseAddrPort(src)), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "GET /echo-headers HTTP/1.1\r\nHost: x\r\n\r\n") //nolint:errcheck
		r := bufio.NewReader(conn)
		return r, conn
	}
	for _, src := range []string{"203.0.113.1:1000", "203.0.113.2:1000"} {
		r, _ := keep(src)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s's first connection: %v %v, want 200 (kept open)", src, resp, err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
	}
	before := c.Platforms[0].Requests()
	r, _ := keep("203.0.113.1:1001")
	if resp, err := http.ReadResponse(r, nil); err == nil {
		t.Errorf("203.0.113.1's second connection: %d, want it closed (max_conns_per_source = 1)", resp.StatusCode)
	}
	if n := l.px.front.Sources().ConnLimited.Load(); n != 1 {
		t.Errorf("%d connections counted over max_conns_per_source, want 1", n)
	}
	if c.Platforms[0].Requests() != before {
		t.Errorf("the refused connection's request was forwarded")
	}
}

// Through a proxy_protocol sender, on both listeners: a WebSocket tunnel carries its messages (by
// epoll, ws and wss), and the access log's request and tunnel lines name the client the
// header carried.
func TestProxyProtocolTunnelsAndTheAccessLogSeeTheCarriedClient(t *testing.T) {
	c := startCluster(t, 1, 2)
	files := cxConfig(c, "[global]\naccess_log = true\n")
	env, tlsAddr := ppTLSFront(t, files, "proxy_protocol = [\"127.0.0.1/32\"]\n")
	l, logs := startLBDir(t, testkit.WriteFiles(t, files))
	for i, ln := range []struct {
		name, url string
		cfg       *tls.Config
	}{{"plain", "ws://" + l.Addr(), nil}, {"tls", "wss://" + tlsAddr, env.clientConfig(tlsName)}} {
		src := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", i+1)), 5000)
		dial := func(_ context.Context, _, addr string) (net.Conn, error) {
			return ppConn(t, addr, "127.0.0.1", ppV2(src, false), ln.cfg)
		}
		d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
		if ln.cfg != nil {
			d.NetDialTLSContext = dial
		} else {
			d.NetDialContext = dial
		}
		conn, _, err := d.Dial(ln.url+"/Thingworx/WS", assetHeader(fmt.Sprintf("pp-%d", i)))
		if err != nil {
			t.Fatalf("%s: %v", ln.name, err)
		}
		mustEcho(t, conn, "through the balancer")
		// Relayed by epoll, as any tunnel (its socket, once its header was read), holding no goroutine:
		// a TLS one's session captured from the header's end and taken over by the engine.
		if n := pumpGoroutines(); n != 0 {
			t.Errorf("%s: %d pump goroutines, want none (relayed by epoll)", ln.name, n)
		}
		conn.Close()
		testkit.Eventually(t, "the tunnel line", 3*time.Second, func() bool { return len(accessLines(t, logs, "tunnel")) == i+1 })
		if got := accessLines(t, logs, "tunnel")[i]["client"]; got != src.Addr().String() {
			t.Errorf("%s: the tunnel line's client %q, want %s", ln.name, got, src.Addr())
		}
		reqs := accessLines(t, logs, "request")
		if got := reqs[len(reqs)-1]["client"]; got != src.Addr().String() {
			t.Errorf("%s: the upgrade's request line's client %q, want %s", ln.name, got, src.Addr())
		}
	}
}

// A reload applies proxy_protocol at once, to new connections, without a restart: before it a PROXY
// line is a bad request (400); after it the header is read and its client is the one forwarded; once
// removed again a PROXY line is a bad request again.
func TestProxyProtocolAppliesAtOnceOnAReload(t *testing.T) {
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	l, _ := startLB(t, files)
	hdr := ppV1(netip.MustParseAddrPort("192.0.2.44:3000"))
	if resp, _ := ppDo(t, l.Addr(), "127.0.0.1", hdr, nil, ppEcho); resp == nil || resp.StatusCode != 400 {
		t.Fatalf("before the reload: %v, want 400", resp)
	}
	reloadWith(t, l, opCopy(files, "30-pp.toml", "[frontend]\nproxy_protocol = [\"127.0.0.0/8\"]\n"))
	resp, body := ppDo(t, l.Addr(), "127.0.0.1", hdr, nil, ppEcho)
	if resp == nil || resp.StatusCode != 200 || strings.Join(echoedHeaders(body)["x-forwarded-for"], ",") != "192.0.2.44" {
		t.Fatalf("after the reload: %v %q, want 200 for 192.0.2.44", resp, echoedHeaders(body)["x-forwarded-for"])
	}
	reloadWith(t, l, files)
	if resp, _ := ppDo(t, l.Addr(), "127.0.0.1", hdr, nil, ppEcho); resp == nil || resp.StatusCode != 400 {
		t.Fatalf("once removed: %v, want 400", resp)
	}
}

// Over HTTP/2 (tls_listen, ALPN h2) behind a proxy_protocol sender, each stream's X-Forwarded-For is
// the carried client.
func TestProxyProtocolHTTP2StreamsForwardTheCarriedClient(t *testing.T) {
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	env, tlsAddr := ppTLSFront(t, files, "proxy_protocol = [\"127.0.0.1/32\"]\n")
	startLBDir(t, testkit.WriteFiles(t, files))
	src := netip.MustParseAddrPort("[2001:db8::42]:7000")
	tr := &http2.Transport{DialTLSContext: func(_ context.Context, _, addr string, cfg *tls.Config) (net.Conn, error) {
		return ppConn(t, addr, "127.0.0.1", ppV2(src, false), cfg)
	}, TLSClientConfig: env.clientConfig(tlsName)}
	defer tr.CloseIdleConnections()
	for i := range 2 { // two streams on one connection
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + tlsAddr + "/echo-headers")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("stream %d: %s %d, want HTTP/2 200", i, resp.Proto, resp.StatusCode)
		}
		if got := echoedHeaders(string(body))["x-forwarded-for"]; len(got) != 1 || got[0] != src.Addr().String() {
			t.Errorf("stream %d: X-Forwarded-For %q, want %s", i, got, src.Addr())
		}
	}
}

// A listed sender's connection that stalls before its PROXY header is whole is closed once
// header_timeout passes, on both listeners, nothing answered nor forwarded, and counted: one that sent
// nothing as proxy_missing (no header within header_timeout), one that sent part of a header (v1 or v2)
// as timeout (as a request head that stalls). Only the close is waited for, within a generous bound.
func TestProxyProtocolHeaderTimeoutClosesAStalledSender(t *testing.T) {
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	_, tlsAddr := ppTLSFront(t, files, "proxy_protocol = [\"127.0.0.1/32\"]\nheader_timeout = \"300ms\"\n")
	l, _ := startLBDir(t, testkit.WriteFiles(t, files))
	errs := l.px.front.Errors
	leader := c.Platforms[0]
	v2 := ppV2(netip.MustParseAddrPort("203.0.113.9:1"), false)
	for _, ln := range []struct{ name, addr string }{{"plain", l.Addr()}, {"tls", tlsAddr}} {
		for _, s := range []struct {
			name string
			sent []byte
			kind frontend.ConnKind
		}{
			{"nothing", nil, frontend.ConnProxyMissing},
			{"half a v1 header", []byte("PROXY TCP4 203.0.113.9 10.0.0"), frontend.ConnTimeout},
			{"half a v2 header", v2[:20], frontend.ConnTimeout},
			{"a v2 header's first byte", v2[:1], frontend.ConnTimeout},
		} {
			name := ln.name + ", " + s.name
			before := errs.Count(s.kind)
			reqs := leader.Requests()
			conn, err := ppConn(t, ln.addr, "127.0.0.1", s.sent, nil) // its deadline: 10s from now
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			n, err := io.Copy(io.Discard, conn)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("%s: %v after %d bytes, want the connection closed by fairlead (header_timeout 300ms)", name, err, n)
				continue
			}
			if n != 0 {
				t.Errorf("%s: %d bytes answered, want none", name, n)
			}
			if got := errs.Count(s.kind); got != before+1 {
				t.Errorf("%s: %s %d, want %d", name, s.kind, got, before+1)
			}
			if leader.Requests() != reqs {
				t.Errorf("%s: a request was forwarded", name)
			}
		}
	}
	if n := errs.Count(frontend.ConnProxyMalformed) + errs.Count(frontend.ConnTLS); n != 0 {
		t.Errorf("%d connections counted as proxy_malformed or tls, want none (each stalled)", n)
	}
}

// trusted_proxies is asked about the client a PROXY header carries, not about its sender: a carried
// client in trusted_proxies has its X-Forwarded-For appended to (and its X-Forwarded-Proto kept); one
// that is not has them replaced, though the sender itself (127.0.0.1) is listed in trusted_proxies
// too. Over v1 and v2, on both listeners.
func TestProxyProtocolTrustedProxiesApplyToTheCarriedClient(t *testing.T) {
	c := startCluster(t, 1, 0)
	files := platformConfig(c, "", "")
	env, tlsAddr := ppTLSFront(t, files, "proxy_protocol = [\"127.0.0.1/32\"]\ntrusted_proxies = [\"127.0.0.1/32\", \"198.51.100.0/24\", \"2001:db8:77::/48\"]\n")
	l, _ := startLBDir(t, testkit.WriteFiles(t, files))
	const forged = "GET /echo-headers HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: gopher\r\nConnection: close\r\n\r\n"
	for _, ln := range []struct {
		name, addr, proto string
		cfg               *tls.Config
	}{{"plain", l.Addr(), "http", nil}, {"tls", tlsAddr, "https", env.clientConfig(tlsName)}} {
		for _, v := range []struct {
			name string
			hdr  func(netip.AddrPort) []byte
		}{{"v1", ppV1}, {"v2", func(a netip.AddrPort) []byte { return ppV2(a, false) }}} {
			for _, cl := range []struct {
				src      string
				trusted  bool
				xff, xfp string
			}{
				{"198.51.100.7:4000", true, "6.6.6.6, 198.51.100.7", "gopher"},
				{"[2001:db8:77::5]:4000", true, "6.6.6.6, 2001:db8:77::5", "gopher"},
				{"203.0.113.8:4000", false, "203.0.113.8", ln.proto},
				{"[2001:db8:78::5]:4000", false, "2001:db8:78::5", ln.proto},
			} {
				name := fmt.Sprintf("%s %s, carried client %s (trusted %v)", ln.name, v.name, cl.src, cl.trusted)
				resp, body := ppDo(t, ln.addr, "127.0.0.1", v.hdr(netip.MustParseAddrPort(cl.src)), ln.cfg, forged)
				if resp == nil || resp.StatusCode != 200 {
					t.Errorf("%s: %v, want 200", name, resp)
					continue
				}
				got := echoedHeaders(body)
				if x := got["x-forwarded-for"]; len(x) != 1 || x[0] != cl.xff {
					t.Errorf("%s: the leader saw X-Forwarded-For %q, want %q", name, x, cl.xff)
				}
				if x := got["x-forwarded-proto"]; len(x) != 1 || x[0] != cl.xfp {
					t.Errorf("%s: the leader saw X-Forwarded-Proto %q, want %q", name, x, cl.xfp)
				}
			}
		}
	}
}

// ppTLSFront adds to files a TLS front end on a free address with a certificate for tlsName and the
// [frontend] lines extra (proxy_protocol and the like), and returns its CA and the address.
func ppTLSFront(t *testing.T, files map[string]string, extra string) (env *tlsEnv, tlsAddr string) {
	t.Helper()
	env = newTLSEnv(t, "proxy protocol CA")
	tlsAddr = testkit.Addr(t)
	files["40-tls.toml"] = tlsFrontendToml(tlsAddr, env.issue(t, "front", tlsName), extra)
	return env, tlsAddr
}
