package frontend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/nbio"
)

// The PROXY protocol ([frontend] proxy_protocol): an L4 load balancer in front of fairlead (AWS NLB,
// GCP's TCP proxy, Azure's Private Link service, HAProxy) opens each connection with a header naming
// the client it carries. A connection from a listed address must start with one, version 1 (a text line)
// or 2 (binary: TCP over IPv4 or IPv6, or LOCAL, the balancer's own health checks, which keep the
// connection's address whatever family they name), within header_timeout. Without one it is closed
// before anything is read as HTTP or TLS, and counted (proxy_missing); a malformed one, or one the
// sender ends inside its header, is closed and counted (proxy_malformed); one that stalls inside its
// header past header_timeout is closed and counted as a stalled request head is (timeout). None is
// ever logged as bytes. A connection from any other address is not read for a header at all: a PROXY
// line there is a request line that is not HTTP, 400. The header is read in the connection's own
// goroutine (the accept loop never waits for it), from the socket before TLS's handshake and the
// framer, to its last byte and no further (proxyRead), and the connection's RemoteAddr is then the
// client's: X-Forwarded-For (trusted_proxies is asked about that client, not the sender), the sticky
// source key, the limits per source and the access log all see it. max_conns_per_source counts such a
// connection once its header names its client (at accept, only the balancer's address is known). From
// then on it is as any other connection: a TLS one's session is captured, a WebSocket tunnel (ws or
// wss) is relayed by the tunnel engine, and at a binary upgrade its tunnel or, idle, the connection
// itself moves to the new process with its client's address, which the new process goes on using and
// counting it by.
//
// No served Go module parses it (github.com/pires/go-proxyproto is not served here), so it is parsed
// here: the two versions' fixed formats, nothing more (v2's TLVs are skipped).

// v2sig is the 12 bytes a version 2 header starts with.
var v2sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// v1Max is the longest version 1 line, CRLF included.
const v1Max = 107

// errProxyMissing is a connection from a listed address that did not start with a PROXY header (or
// not within header_timeout); a *proxyMalformed is one whose header is malformed.
var errProxyMissing = errors.New("frontend: no PROXY header")

type proxyMalformed string

func (e proxyMalformed) Error() string { return "frontend: malformed PROXY header: " + string(e) }

// proxyHeader is a parsed header: src is the client's address, invalid for LOCAL (any family), v1's
// UNKNOWN or v2's UNSPEC family: the connection's own address stands.
type proxyHeader struct {
	src netip.AddrPort
	n   int // the header's length in bytes
}

// parseProxy parses the header at the start of b. It returns more true when b is a prefix of a header
// that may still be whole with more bytes; errProxyMissing when b does not start like one; a
// proxyMalformed when it does but breaks the format.
func parseProxy(b []byte) (h proxyHeader, more bool, err error) {
	if len(b) == 0 {
		return h, true, nil
	}
	switch b[0] {
	case 'P':
		return parseProxyV1(b)
	case '\r':
		return parseProxyV2(b)
	}
	return h, false, errProxyMissing
}

func parseProxyV1(b []byte) (h proxyHeader, more bool, err error) {
	const prefix = "PROXY "
	if k := min(len(b), len(prefix)); string(b[:k]) != prefix[:k] {
		return h, false, errProxyMissing
	}
	end := bytes.Index(b[:min(len(b), v1Max)], []byte("\r\n"))
	if end < 0 {
		if len(b) >= v1Max {
			return h, false, proxyMalformed("v1 line over 107 bytes")
		}
		return h, true, nil
	}
	h.n = end + 2
	f := bytes.Split(b[len(prefix):end], []byte(" "))
	switch string(f[0]) {
	case "UNKNOWN":
		return h, false, nil // the rest of the line is to be ignored
	case "TCP4", "TCP6":
	default:
		return h, false, proxyMalformed("v1 unknown family")
	}
	if len(f) != 5 {
		return h, false, proxyMalformed("v1 fields")
	}
	src, err1 := netip.ParseAddr(string(f[1]))
	dst, err2 := netip.ParseAddr(string(f[2]))
	sp, err3 := parsePort(f[3])
	_, err4 := parsePort(f[4])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || src.Zone() != "" || src.Is4() != dst.Is4() ||
		src.Is4() != (string(f[0]) == "TCP4") {
		return h, false, proxyMalformed("v1 address")
	}
	h.src = netip.AddrPortFrom(src, sp)
	return h, false, nil
}

// parsePort parses a v1 port: 0 to 65535 in decimal, without a leading zero.
func parsePort(b []byte) (uint16, error) {
	if len(b) == 0 || len(b) > 5 || (b[0] == '0' && len(b) > 1) {
		return 0, errors.New("bad port")
	}
	n, err := strconv.ParseUint(string(b), 10, 16)
	return uint16(n), err
}

func parseProxyV2(b []byte) (h proxyHeader, more bool, err error) {
	if k := min(len(b), len(v2sig)); !bytes.Equal(b[:k], v2sig[:k]) {
		return h, false, errProxyMissing
	}
	if len(b) < 16 {
		return h, true, nil
	}
	if b[12]>>4 != 2 {
		return h, false, proxyMalformed("v2 version")
	}
	cmd, fam := b[12]&0xf, b[13]
	n := int(binary.BigEndian.Uint16(b[14:16]))
	if cmd > 1 {
		return h, false, proxyMalformed("v2 command")
	}
	if cmd == 0 {
		// LOCAL (the sender's own connection, a health check): accepted whatever its family says, its
		// address block skipped unread, the connection's own address standing (the spec, haproxy's
		// proxy-protocol.txt, 2.2: a receiver must accept it and ignore the family).
		if len(b) < 16+n {
			return h, true, nil
		}
		h.n = 16 + n
		return h, false, nil
	}
	var need int
	switch fam {
	case 0x00: // UNSPEC
	case 0x11: // TCP over IPv4
		need = 12
	case 0x21: // TCP over IPv6
		need = 36
	default:
		return h, false, proxyMalformed("v2 unknown family")
	}
	if n < need {
		return h, false, proxyMalformed("v2 address past its length")
	}
	if len(b) < 16+n {
		return h, true, nil
	}
	h.n = 16 + n
	if need == 0 { // PROXY with an unspecified family: the connection's own address
		return h, false, nil
	}
	a := b[16:]
	if fam == 0x11 {
		h.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[0:4])), binary.BigEndian.Uint16(a[8:10]))
	} else {
		h.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[0:16])), binary.BigEndian.Uint16(a[32:34]))
	}
	return h, false, nil
}

// SetProxyProtocol sets the senders whose connections start with a PROXY header (proxy_protocol):
// it applies to the connections accepted from then on. None: no connection is read for one.
func (f *Front) SetProxyProtocol(from []netip.Prefix) {
	if len(from) == 0 {
		f.proxyFrom.Store(nil)
		return
	}
	f.proxyFrom.Store(&from)
}

// proxied reports whether c comes from a proxy_protocol sender.
func (f *Front) proxied(c net.Conn) bool {
	from := f.proxyFrom.Load()
	if from == nil {
		return false
	}
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	a := ta.AddrPort().Addr().Unmap()
	for _, p := range *from {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// proxyRead is a proxy_protocol sender's connection's PROXY header, read from the socket itself (its
// nbio wrapper, under TLS and the framer) by the connection's first Read, or before its TLS handshake
// (frontConn.readProxy): to its last byte and never further (proxyNeed), so that what follows is the
// socket's, read as any other connection's. A TLS connection's handshake then runs over the socket as
// any other's, its session captured (nbio's CaptureTLS from the header's end on): a wss:// tunnel is
// relayed by the tunnel engine with its session taken over, and an idle keep-alive connection moves at
// a binary upgrade with its session, as the others do. The client the header names is the socket's
// RemoteAddr from then on (nbio's SetRemoteAddr): the TLS connection, the record layer over it and
// whoever takes the socket see it. done, err and local are the serving goroutine's.
type proxyRead struct {
	sock  *nbio.TCPConn
	done  bool
	err   error
	local bool // a LOCAL header (or v1's UNKNOWN): the sender's own connection, counted per no source
	// release uncounts it from its client's connections (max_conns_per_source), once; closed is set by
	// the connection's Close, which may run in another goroutine than the header's read.
	release atomic.Pointer[func()]
	closed  atomic.Bool
}

// proxyMin is the length of the shortest header ("PROXY UNKNOWN\r\n"; a v2 one has 16 bytes at least).
const proxyMin = 15

// proxyNeed is how many bytes may be read after b, the start of a header that parseProxy found not
// whole, without reading past its end: what its format still needs at the least. A v2 header says its
// length in its first 16 bytes; a v1 line is read by what its fields still need (an IPv4 address 7
// bytes at the least, an IPv6 one 2, a port 1, the spaces between and the CRLF), a few reads for a
// line that arrived whole.
func proxyNeed(b []byte) int {
	if len(b) < proxyMin {
		return proxyMin - len(b)
	}
	if b[0] == '\r' { // v2
		if len(b) < 16 {
			return 16 - len(b)
		}
		return 16 + int(binary.BigEndian.Uint16(b[14:16])) - len(b)
	}
	if b[len(b)-1] == '\r' {
		return 1
	}
	f := bytes.Split(b[len("PROXY "):], []byte(" "))
	addr := 0
	switch string(f[0]) {
	case "TCP4":
		addr = 7
	case "TCP6":
		addr = 2
	}
	need := 2 // CRLF
	if addr > 0 && len(f) <= 5 {
		least := [5]int{0, addr, addr, 1, 1} // the family, the addresses and the ports
		k := len(f) - 1                      // the field under way
		need += max(0, least[k]-len(f[k]))
		for j := k + 1; j < 5; j++ {
			need += 1 + least[j]
		}
	}
	return max(1, min(need, v1Max-len(b)))
}

// read reads the header within header_timeout (or before deadline, fasthttp's, if earlier); an error
// closes the connection (io.EOF, after it was counted by proxyErrKind: nothing of it is logged but its
// kind and the sender's address).
func (p *proxyRead) read(f *Front, deadline time.Time) error {
	d := f.lim.HeaderTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	t := time.Now().Add(d)
	if !deadline.IsZero() && deadline.Before(t) {
		t = deadline
	}
	p.sock.SetReadDeadline(t) //nolint:errcheck // a failed read reports it
	buf := make([]byte, 0, v1Max)
	var h proxyHeader
	for {
		need := proxyNeed(buf)
		if len(buf)+need > cap(buf) { // a v2 header with TLVs
			buf = append(buf, make([]byte, need)...)[:len(buf)]
		}
		n, err := p.sock.Read(buf[len(buf) : len(buf)+need])
		buf = buf[:len(buf)+n]
		hh, more, perr := parseProxy(buf)
		if perr == nil && !more && hh.n != len(buf) {
			perr = proxyMalformed("read past its end") // proxyNeed's mistake: never so
		}
		if perr == nil && !more {
			h = hh
			break
		}
		if perr != nil || err != nil {
			if k := proxyErrKind(perr, err, len(buf)); k != NumConnKinds {
				f.Errors.note(k, p.sock.RemoteAddr())
			}
			return io.EOF
		}
	}
	if !h.src.IsValid() {
		p.local = true // LOCAL: the balancer's own
		return nil
	}
	p.sock.SetRemoteAddr(net.TCPAddrFromAddrPort(h.src))
	if f.sources != nil {
		release, ok := f.sources.countAddr(h.src.Addr().Unmap(), false)
		if !ok {
			return io.EOF // over max_conns_per_source (counted)
		}
		if release != nil {
			p.release.Store(&release)
			if p.closed.Load() { // closed meanwhile (Shutdown): its Close found nothing to release
				p.close()
			}
		}
	}
	return nil
}

// proxyErrKind is the kind of a failed header read, counted once the connection is closed: perr what
// parseProxy found of the n bytes read, err the read's error.
//
//	proxy_malformed  the bytes break the format, or the connection ended (or broke) inside a header
//	proxy_missing    the bytes are not a header (a request, a ClientHello), or none came within
//	                 header_timeout
//	timeout          header_timeout passed inside a header: part of one came, not the rest (a sender that
//	                 stalls, as a request head that stalls is a timeout; a lone "P" may be either)
//
// A connection that ends before its first byte is none of them (a port probe, a balancer's TCP health
// check): not counted, kind none (NumConnKinds).
func proxyErrKind(perr, err error, n int) ConnKind {
	var pm proxyMalformed
	switch {
	case errors.As(perr, &pm):
		return ConnProxyMalformed
	case perr != nil:
		return ConnProxyMissing // something else than a header
	case n == 0 && isTimeout(err):
		return ConnProxyMissing // nothing within header_timeout
	case n == 0:
		return NumConnKinds // closed before its first byte
	case isTimeout(err):
		return ConnTimeout
	}
	return ConnProxyMalformed // it ended inside its header (a v2 length past its end)
}

// close uncounts the connection from its client's connections, once (its Close, or the end of the
// tunnel that took its socket).
func (p *proxyRead) close() {
	p.closed.Store(true)
	if r := p.release.Swap(nil); r != nil {
		(*r)()
	}
}

// readProxy reads c's PROXY header, once, before anything else is read of it; a TLS connection's
// session is captured from the header's end on (CaptureTLS), as any other's from its first byte.
func (c *frontConn) readProxy() error {
	p := c.px
	p.done = true
	if p.err = p.read(c.front, c.deadline); p.err != nil {
		return p.err
	}
	if c.tc != nil {
		p.sock.CaptureTLS(true)
		return nil
	}
	c.sockDeadline = c.wanted()
	return c.Conn.SetReadDeadline(c.sockDeadline)
}

// ProxyLocal reports whether c, a front end connection (or what UnwrapHijacked returned), came through a
// proxy_protocol sender with a LOCAL header: the sender's own, its address the sender's, counted per no
// source.
func ProxyLocal(c net.Conn) bool {
	fc := frontOf(c)
	return fc != nil && fc.px != nil && fc.px.local
}
