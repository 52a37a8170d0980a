package frontend

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// proxyNeed never asks for a byte past a header's end, whatever arrived after it (the client's first
// TLS record, a request): a reader that hands over all it is asked for, up to what it holds, stops at
// the header's last byte: in a few reads (at most 8 here), but for v1's UNKNOWN followed by more than its
// CRLF, whose rest has no format to go by and is read two bytes at a time.
func TestProxyNeedReadsAHeaderToItsEndAndNoFurther(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("203.0.113.7:51000"), netip.MustParseAddrPort("10.0.0.1:443")
	src6, dst6 := netip.MustParseAddrPort("[2001:db8:ffff::7]:51000"), netip.MustParseAddrPort("[2001:db8::1]:443")
	tlv := append(v2TCP4(src4, dst4), 0x04, 0, 200)
	tlv = append(tlv, make([]byte, 200)...) // a NOOP TLV of 200 bytes
	tlv[14], tlv[15] = 0, 12+3+200
	for _, h := range [][]byte{
		[]byte("PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n"),
		[]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"),
		[]byte("PROXY TCP6 2001:db8:ffff::7 2001:db8::1 51000 443\r\n"),
		[]byte("PROXY TCP6 ::1 ::2 1 2\r\n"),
		[]byte("PROXY UNKNOWN\r\n"),
		[]byte("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"),
		v2TCP4(src4, dst4), v2TCP6(src6, dst6), tlv, v2Header(0, 0x00, 0, nil),
	} {
		stream := append(append([]byte{}, h...), "\x16\x03\x01\x02\x00GET / HTTP/1.1\r\n"...)
		var buf []byte
		reads := 0
		for {
			need := proxyNeed(buf)
			n := min(need, len(stream)-len(buf))
			buf = stream[:len(buf)+n]
			reads++
			if len(buf) > len(h) {
				t.Fatalf("%q: read %d bytes, past its %d", h, len(buf), len(h))
			}
			hh, more, err := parseProxy(buf)
			if err != nil {
				t.Fatalf("%q: %v", h, err)
			}
			if !more {
				if hh.n != len(h) || len(buf) != len(h) {
					t.Fatalf("%q: a header of %d bytes after %d read, want %d", h, hh.n, len(buf), len(h))
				}
				break
			}
		}
		limit := 8
		if bytes.HasPrefix(h, []byte("PROXY UNKNOWN ")) {
			limit = 1 + (v1Max-proxyMin+1)/2
		}
		if reads > limit {
			t.Errorf("%q: %d reads, want at most %d", h, reads, limit)
		}
	}
}

// A TLS connection from a proxy_protocol sender is captured from its PROXY header's end, as any other
// from its first byte: its session is taken over from crypto/tls when it is idle at a hand-over, and it
// moves with it and with its client, the header's, to another front end (TLS 1.3 and 1.2, v1 and v2 headers),
// as a plain one does; the other front end sees that client (RemoteAddr) and counts it by it
// (max_conns_per_source), and so does a third after a second hand-over. A sender's own connection
// (LOCAL) moves as the sender's, counted by none.
func TestIdleConnectionsFromAProxySenderMoveWithTheirClientAndTLSSession(t *testing.T) {
	server, configs := idleTLS(t)
	sender := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	fronts := func(name string, tlsConfig *tls.Config) [3]*idleFront {
		var fs [3]*idleFront
		for i, n := range []string{"old", "new", "third"} {
			fs[i] = startIdleFrontOn(t, name+" "+n, 100, tlsConfig)
			fs[i].f.SetProxyProtocol(sender)
		}
		return fs
	}
	type conn struct {
		cl   *client
		src  netip.AddrPort // invalid: LOCAL
		what string
	}
	for _, ln := range []struct {
		name string
		cfg  *tls.Config
	}{{"plain", nil}, {"TLS 1.3", configs["TLS 1.3"]}, {"TLS 1.2", configs["TLS 1.2 AES-GCM"]}} {
		fs := fronts(ln.name, nil)
		if ln.cfg != nil {
			fs = fronts(ln.name, server)
		}
		var conns []conn
		for i, v := range []string{"v1", "v2", "v2 LOCAL"} {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}), uint16(4000+i))
			var h []byte
			switch v {
			case "v1":
				h = fmt.Appendf(nil, "PROXY TCP4 %s 10.0.0.1 %d 443\r\n", src.Addr(), src.Port())
			case "v2":
				h = v2TCP4(src, netip.MustParseAddrPort("10.0.0.1:443"))
			default:
				h, src = v2Header(0, 0x00, 0, nil), netip.AddrPort{}
			}
			raw, err := net.Dial("tcp", fs[0].addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Write(h); err != nil {
				t.Fatal(err)
			}
			var cl *client
			if ln.cfg == nil {
				raw.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
				cl = &client{c: raw, br: bufio.NewReader(raw)}
				t.Cleanup(func() { raw.Close() })
			} else {
				cl = tlsClientOn(t, raw, ln.cfg)
			}
			conns = append(conns, conn{cl, src, ln.name + " " + v})
		}
		want := func(c conn) string {
			if !c.src.IsValid() {
				return c.cl.c.LocalAddr().String() // LOCAL: the sender's own
			}
			return c.src.String()
		}
		check := func(by string, fi *idleFront) {
			t.Helper()
			for _, c := range conns {
				r := c.cl.get(t, "/by/"+by)
				if r.StatusCode != 200 || r.Header.Get("X-Served-By") != ln.name+" "+by || r.Close || r.Header.Get("X-Client") != want(c) {
					t.Errorf("%s: %d by %q (close %v) for %s, want 200 by %s for %s, kept alive", c.what, r.StatusCode,
						r.Header.Get("X-Served-By"), r.Close, r.Header.Get("X-Client"), ln.name+" "+by, want(c))
				}
			}
			for _, c := range conns {
				if c.src.IsValid() {
					if got := fi.f.Sources().Conns(c.src.Addr()); got != 1 {
						t.Errorf("%s: %s counts %d connections of %s, want 1", c.what, by, got, c.src.Addr())
					}
				}
			}
			if got := fi.f.Sources().Conns(netip.MustParseAddr("127.0.0.1")); got != 0 {
				t.Errorf("%s: %s counts %d connections of the sender, want none", ln.name, by, got)
			}
		}
		check("old", fs[0])
		waitIdle(t, fs[0].f, len(conns))
		moveProxied(t, fs[0], fs[1], conns[2].cl.c.LocalAddr().String(), ln.cfg != nil)
		check("new", fs[1])
		waitIdle(t, fs[1].f, len(conns))
		moveProxied(t, fs[1], fs[2], conns[2].cl.c.LocalAddr().String(), ln.cfg != nil)
		check("third", fs[2])
	}
}

// moveProxied hands over from's idle connections to to, each with its client and (https) its TLS
// session, local the client of the one sender's own.
func moveProxied(t *testing.T, from, to *idleFront, local string, https bool) {
	t.Helper()
	from.ln.Close()
	given, kept := from.f.HandOverIdle(5 * time.Second)
	if len(given) != 3 || kept != 0 {
		t.Fatalf("given %d, kept %d; want 3, 0", len(given), kept)
	}
	for _, ic := range given {
		if (ic.TLS != nil) != https || ic.File == nil {
			t.Fatalf("given a connection with socket %v, TLS session %v; want one, and a session %v", ic.File != nil, ic.TLS != nil, https)
		}
		if ic.Local != (ic.Client.String() == local) {
			t.Errorf("%s given with LOCAL %v", ic.Client, ic.Local)
		}
	}
	to.adopt(t, given)
}

// A TLS connection's socket, once its PROXY header was read, has its TLS session captured from the
// header's end: its handshake's records are counted from there, none of the header taken for one, and
// the session is taken over from crypto/tls (tlsrecord.TakeOver, as the tunnel engine takes a wss://
// tunnel's), fairlead's record layer then carrying its messages both ways.
func TestATLSConnectionAfterAProxyHeaderIsCaptured(t *testing.T) {
	server, configs := idleTLS(t)
	f := New(Limits{MaxHeader: 8 << 10, HeaderTimeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	f.SetProxyProtocol([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
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
	defer cc.Close()
	src := netip.MustParseAddrPort("192.0.2.33:777")
	cc.Write(v2TCP4(src, netip.MustParseAddrPort("10.0.0.1:443"))) //nolint:errcheck
	client := tls.Client(cc, configs["TLS 1.3"])
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	shook := make(chan error, 1)
	go func() { shook <- client.Handshake() }()
	if err := sc.(tlsFrontConn).Handshake(); err != nil {
		sc.Close()
		t.Fatal(err)
	}
	if err := <-shook; err != nil {
		t.Fatal(err)
	}
	fc := sc.(tlsFrontConn).frontConn
	defer fc.tc.NetConn().Close() // the socket only: crypto/tls must not write once its session is taken over
	nb, ok := fc.tc.NetConn().(*nbio.TCPConn)
	if !ok {
		t.Fatalf("the TLS connection is over %T, want the socket's nbio wrapper", fc.tc.NetConn())
	}
	got, ok := nb.TLSCaptured()
	if !ok || got.ClientSecret == nil || got.ServerSecret == nil || !got.Whole {
		t.Fatalf("captured %v: secrets %v %v, whole %v; want its session", ok, got.ClientSecret != nil, got.ServerSecret != nil, got.Whole)
	}
	if sc.RemoteAddr().String() != src.String() || fc.tc.RemoteAddr().String() != src.String() {
		t.Errorf("RemoteAddr %s (TLS %s), want the header's %s", sc.RemoteAddr(), fc.tc.RemoteAddr(), src)
	}
	if !fc.listable || !fc.listed {
		t.Errorf("listable %v, listed %v: it may be idle at a hand-over", fc.listable, fc.listed)
	}
	own, left := tlsrecord.TakeOver(fc.tc, nb, make([]byte, 4096))
	if own == nil || len(left) != 0 {
		t.Fatalf("taken over: %v, %d bytes left with crypto/tls; want the session, nothing left", own != nil, len(left))
	}
	if own.RemoteAddr().String() != src.String() {
		t.Errorf("the record layer's RemoteAddr %s, want the header's %s", own.RemoteAddr(), src)
	}
	own.SetDeadline(time.Now().Add(5 * time.Second))    //nolint:errcheck
	client.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	for _, dir := range [][2]net.Conn{{client, own}, {own, client}} {
		wrote := make(chan error, 1)
		go func() { _, err := dir[0].Write([]byte("ping")); wrote <- err }()
		b := make([]byte, 4)
		if _, err := io.ReadFull(dir[1], b); err != nil || !bytes.Equal(b, []byte("ping")) {
			t.Fatalf("read %q, %v", b, err)
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
	}
}
