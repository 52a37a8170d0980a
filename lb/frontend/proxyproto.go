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
)

// The PROXY protocol ([frontend] proxy_protocol): an L4 load balancer in front of fairlead (AWS NLB,
// Azure Load Balancer, GCP's TCP proxy, HAProxy) opens each connection with a header naming the
// client it carries. A connection from a listed address must start with one, version 1 (a text line)
// or 2 (binary: TCP over IPv4 or IPv6, or LOCAL, the balancer's own health checks, which keep the
// connection's address), within header_timeout; without one it is closed before anything is read as
// HTTP or TLS, and counted (proxy_missing); a malformed one is closed and counted (proxy_malformed).
// Neither is ever logged as bytes. A connection from any other address is not read for a header at
// all: a PROXY line there is a request line that is not HTTP, 400. The header is read in the
// connection's own goroutine (the accept loop never waits for it), under TLS's handshake and under
// the framer, and the connection's RemoteAddr is then the client's: X-Forwarded-For, the sticky source
// key, the limits per source, the access log and /events all see it. max_conns_per_source counts such
// a connection once its header names its client (at accept, only the balancer's address is known).
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

// proxyHeader is a parsed header: src is the client's address, invalid for LOCAL (or v1's UNKNOWN,
// or v2's UNSPEC family): the connection's own address stands.
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
	if cmd > 1 {
		return h, false, proxyMalformed("v2 command")
	}
	if n < need {
		return h, false, proxyMalformed("v2 address past its length")
	}
	if len(b) < 16+n {
		return h, true, nil
	}
	h.n = 16 + n
	if cmd == 0 || need == 0 { // LOCAL, or an unspecified family: the connection's own address
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

// proxyConn is a connection from a proxy_protocol sender: its first Read reads the header (bounded by
// header_timeout), and from then on RemoteAddr is the client the header names. Used from the
// connection's serving goroutine (RemoteAddr and Close from any).
type proxyConn struct {
	net.Conn
	front    *Front
	done     bool
	err      error
	rest     []byte // what was read past the header, returned first
	deadline time.Time
	src      atomic.Pointer[net.TCPAddr]
	release  func() // uncounts it from its client's connections (max_conns_per_source), or nil
}

func (c *proxyConn) RemoteAddr() net.Addr {
	if a := c.src.Load(); a != nil {
		return a
	}
	return c.Conn.RemoteAddr()
}

func (c *proxyConn) Read(p []byte) (int, error) {
	if !c.done {
		c.done = true
		c.err = c.readHeader()
	}
	if c.err != nil {
		return 0, c.err
	}
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *proxyConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

func (c *proxyConn) SetDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

func (c *proxyConn) Close() error {
	if c.release != nil {
		c.release()
	}
	return c.Conn.Close()
}

// readHeader reads and parses the header; an error closes the connection (Read returns io.EOF, after
// the error was counted: nothing of it is logged but its kind and the sender's address).
func (c *proxyConn) readHeader() error {
	d := c.front.lim.HeaderTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	t := time.Now().Add(d)
	if !c.deadline.IsZero() && c.deadline.Before(t) {
		t = c.deadline
	}
	c.Conn.SetReadDeadline(t) //nolint:errcheck // a failed read reports it
	buf := make([]byte, 0, 256)
	var h proxyHeader
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, 16+65535-len(buf))...)[:len(buf)] // a v2 header with TLVs
		}
		n, err := c.Conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		hh, more, perr := parseProxy(buf)
		if perr == nil && !more {
			h = hh
			break
		}
		if perr != nil || err != nil {
			var kind ConnKind
			var pm proxyMalformed
			switch {
			case errors.As(perr, &pm):
				kind = ConnProxyMalformed
			case perr == nil && len(buf) > 0 && errors.Is(err, io.EOF):
				kind = ConnProxyMalformed // it ended inside its header (a v2 length past its end)
			case len(buf) == 0 && !isTimeout(err):
				return io.EOF // closed before its first byte: a port probe, not an error
			default:
				kind = ConnProxyMissing // something else than a header, or none within header_timeout
			}
			c.front.Errors.note(kind, c.Conn.RemoteAddr())
			return io.EOF
		}
	}
	c.rest = buf[h.n:]
	c.Conn.SetReadDeadline(c.deadline) //nolint:errcheck
	if !h.src.IsValid() {
		return nil // LOCAL: the balancer's own
	}
	c.src.Store(net.TCPAddrFromAddrPort(h.src))
	if c.front.sources != nil {
		release, ok := c.front.sources.countAddr(h.src.Addr().Unmap(), false)
		if !ok {
			return io.EOF // over max_conns_per_source (counted)
		}
		c.release = release
	}
	return nil
}

// proxied returns the proxyConn of a plain connection from a proxy_protocol sender, else nil.
func (c *frontConn) proxied() *proxyConn {
	pc, _ := c.Conn.(*proxyConn)
	return pc
}

// read reports whether the header was read without error and what was read past it was returned.
func (c *proxyConn) read() bool { return c.done && c.err == nil && len(c.rest) == 0 }
