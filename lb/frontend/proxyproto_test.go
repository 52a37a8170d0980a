package frontend

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
)

// v2Header is a version 2 header: command cmd (0 LOCAL, 1 PROXY), family fam, and addr as its
// address block, its length field saying n.
func v2Header(cmd, fam byte, n int, addr []byte) []byte {
	b := append([]byte{}, v2sig...)
	b = append(b, 0x20|cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(b[14:], uint16(n))
	return append(b, addr...)
}

func v2TCP4(src, dst netip.AddrPort) []byte {
	a := append(src.Addr().AsSlice(), dst.Addr().AsSlice()...)
	a = binary.BigEndian.AppendUint16(a, src.Port())
	a = binary.BigEndian.AppendUint16(a, dst.Port())
	return v2Header(1, 0x11, len(a), a)
}

func v2TCP6(src, dst netip.AddrPort) []byte {
	a := append(src.Addr().AsSlice(), dst.Addr().AsSlice()...)
	a = binary.BigEndian.AppendUint16(a, src.Port())
	a = binary.BigEndian.AppendUint16(a, dst.Port())
	return v2Header(1, 0x21, len(a), a)
}

func TestParseProxyGoodHeaders(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("203.0.113.7:51000"), netip.MustParseAddrPort("10.0.0.1:443")
	src6, dst6 := netip.MustParseAddrPort("[2001:db8::7]:51000"), netip.MustParseAddrPort("[2001:db8::1]:443")
	tlv := append(v2TCP4(src4, dst4), 0x04, 0, 1, 'x') // a TLV (NOOP) after the addresses, skipped
	binary.BigEndian.PutUint16(tlv[14:], 12+4)
	for _, c := range []struct {
		name string
		b    []byte
		src  netip.AddrPort // invalid: the connection's own address
	}{
		{"v1 TCP4", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n"), src4},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 51000 443\r\n"), src6},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN whatever follows\r\n"), netip.AddrPort{}},
		{"v2 TCP4", v2TCP4(src4, dst4), src4},
		{"v2 TCP6", v2TCP6(src6, dst6), src6},
		{"v2 TCP4 with a TLV", tlv, src4},
		{"v2 LOCAL", v2Header(0, 0x00, 0, nil), netip.AddrPort{}},
		{"v2 LOCAL with addresses", v2Header(0, 0x11, 12, make([]byte, 12)), netip.AddrPort{}},
	} {
		body := []byte("GET / HTTP/1.1\r\n")
		b := append(append([]byte{}, c.b...), body...)
		h, more, err := parseProxy(b)
		if err != nil || more || h.src != c.src || h.n != len(c.b) {
			t.Errorf("%s: %+v more=%v err=%v; want src %v, length %d", c.name, h, more, err, c.src, len(c.b))
		}
		for i := range len(c.b) { // every prefix asks for more
			if _, more, err := parseProxy(c.b[:i]); !more || err != nil {
				t.Errorf("%s: its first %d bytes: more=%v err=%v, want more", c.name, i, more, err)
				break
			}
		}
	}
}

func TestParseProxyMalformedAndMissing(t *testing.T) {
	long := "PROXY TCP4 203.0.113.7 10.0.0.1 51000 443" + strings.Repeat(" ", 70) + "\r\n"
	four := v2TCP4(netip.MustParseAddrPort("203.0.113.7:1"), netip.MustParseAddrPort("10.0.0.1:2"))
	short := v2Header(1, 0x21, 12, make([]byte, 12)) // TCP6 whose length does not hold its addresses
	badVer := append([]byte{}, four...)
	badVer[12] = 0x11
	for _, c := range []struct {
		name      string
		b         string
		malformed bool // else missing
	}{
		{"v1 line over 107 bytes", long, true},
		{"v1 unknown family", "PROXY UDP4 203.0.113.7 10.0.0.1 1 2\r\n", true},
		{"v1 missing a port", "PROXY TCP4 203.0.113.7 10.0.0.1 51000\r\n", true},
		{"v1 bad address", "PROXY TCP4 203.0.113.999 10.0.0.1 1 2\r\n", true},
		{"v1 family not the address's", "PROXY TCP6 203.0.113.7 10.0.0.1 1 2\r\n", true},
		{"v1 port over 65535", "PROXY TCP4 203.0.113.7 10.0.0.1 65536 2\r\n", true},
		{"v2 unknown family", string(v2Header(1, 0x41, 0, nil)), true},
		{"v2 UDP", string(v2Header(1, 0x12, 12, make([]byte, 12))), true},
		{"v2 unix", string(v2Header(1, 0x31, 216, make([]byte, 216))), true},
		{"v2 address past its length", string(short), true},
		{"v2 version 1", string(badVer), true},
		{"v2 command 2", string(v2Header(2, 0x11, 12, make([]byte, 12))), true},
		{"HTTP", "GET / HTTP/1.1\r\n\r\n", false},
		{"TLS hello", "\x16\x03\x01\x02\x00\x01", false},
		{"a P that is not PROXY", "POST / HTTP/1.1\r\n", false},
		{"a CR that is not v2", "\r\n\r\nGET", false},
	} {
		_, more, err := parseProxy([]byte(c.b))
		var pm proxyMalformed
		if more || (c.malformed && !errors.As(err, &pm)) || (!c.malformed && err != errProxyMissing) {
			t.Errorf("%s: more=%v err=%v, want malformed=%v", c.name, more, err, c.malformed)
		}
	}
	// A v2 header whose length runs past what arrived is not whole: more (the connection's end or
	// header_timeout ends it, proxyRead.read).
	if _, more, err := parseProxy(v2Header(1, 0x11, 500, make([]byte, 12))); !more || err != nil {
		t.Errorf("a v2 length past its end: more=%v err=%v, want more", more, err)
	}
}

// A v2 LOCAL header (the sender's own connection: its health checks) is accepted whatever its family
// says, UDP, a unix socket, UNSPEC or one no version defines, and whatever its address block holds (even
// one too short for its family): the block is skipped to the length's end and the connection's own
// address stands (haproxy's proxy-protocol.txt, 2.2). The command is checked first: an unknown one is
// malformed whatever the family.
func TestParseProxyV2LocalIsAcceptedWhateverItsFamily(t *testing.T) {
	for _, c := range []struct {
		name string
		fam  byte
		addr []byte
	}{
		{"UNSPEC", 0x00, nil},
		{"UNSPEC with a block", 0x00, []byte{1, 2, 3}},
		{"UDP over IPv4", 0x12, make([]byte, 12)},
		{"UDP over IPv6", 0x22, make([]byte, 36)},
		{"unix stream", 0x31, make([]byte, 216)},
		{"unix datagram", 0x32, make([]byte, 216)},
		{"an unknown family", 0x41, make([]byte, 5)},
		{"an unknown family, no block", 0xff, nil},
		{"TCP over IPv6 with a block too short for it", 0x21, make([]byte, 4)},
		{"TCP over IPv4 without a block", 0x11, nil},
	} {
		hdr := v2Header(0, c.fam, len(c.addr), c.addr)
		b := append(append([]byte{}, hdr...), "GET / HTTP/1.1\r\n"...)
		h, more, err := parseProxy(b)
		if err != nil || more || h.src.IsValid() || h.n != len(hdr) {
			t.Errorf("LOCAL, %s: %+v more=%v err=%v; want accepted, no address, length %d", c.name, h, more, err, len(hdr))
		}
		for i := range len(hdr) { // every prefix asks for more
			if _, more, err := parseProxy(hdr[:i]); !more || err != nil {
				t.Errorf("LOCAL, %s: its first %d bytes: more=%v err=%v, want more", c.name, i, more, err)
				break
			}
		}
		// Read as proxyRead reads it, it ends at the block's end, not a byte further.
		var got []byte
		for {
			got = b[:len(got)+min(proxyNeed(got), len(b)-len(got))]
			if len(got) > len(hdr) {
				t.Fatalf("LOCAL, %s: read %d bytes, past its %d", c.name, len(got), len(hdr))
			}
			if _, more, _ := parseProxy(got); !more {
				break
			}
		}
	}
	for _, fam := range []byte{0x11, 0x41, 0xff} { // command 2, 15: malformed whatever the family
		for _, cmd := range []byte{2, 15} {
			_, more, err := parseProxy(v2Header(cmd, fam, 12, make([]byte, 12)))
			var pm proxyMalformed
			if more || !errors.As(err, &pm) || string(pm) != "v2 command" {
				t.Errorf("command %d, family %#x: more=%v err=%v, want malformed (v2 command)", cmd, fam, more, err)
			}
		}
	}
}

// How a failed header read is counted (proxyErrKind): what is not a header, or nothing within
// header_timeout, proxy_missing; a broken or cut-off header proxy_malformed; a header that stalls
// half-way, timeout; a connection that ends before its first byte, nothing.
func TestProxyErrKind(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	reset := &net.OpError{Op: "read", Err: syscall.ECONNRESET}
	for _, c := range []struct {
		name string
		perr error
		err  error
		n    int
		want ConnKind
	}{
		{"a request", errProxyMissing, nil, 4, ConnProxyMissing},
		{"nothing within header_timeout", nil, timeout, 0, ConnProxyMissing},
		{"a malformed header", proxyMalformed("v1 fields"), nil, 40, ConnProxyMalformed},
		{"cut off", nil, io.EOF, 20, ConnProxyMalformed},
		{"reset inside it", nil, reset, 20, ConnProxyMalformed},
		{"stalled inside it", nil, timeout, 20, ConnTimeout},
		{"a lone P, stalled", nil, timeout, 1, ConnTimeout},
		{"closed before its first byte", nil, io.EOF, 0, NumConnKinds},
		{"reset before its first byte", nil, reset, 0, NumConnKinds},
	} {
		if got := proxyErrKind(c.perr, c.err, c.n); got != c.want {
			t.Errorf("%s: kind %d, want %d", c.name, got, c.want)
		}
	}
}
