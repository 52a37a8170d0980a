package lb

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// hopByHop are the headers that describe one connection, not the message (RFC 9110 section 7.6.1), and so
// are never forwarded. Transfer-Encoding and Content-Length framing is redone by fasthttp on each side.
var hopByHop = []string{
	"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
	"Upgrade",
}

// prepareRequest turns the client's request into the upstream request in place: hop-by-hop headers
// (and every header the Connection header names) are removed, X-Forwarded-* are set, and the upstream
// connection is kept alive whatever the client asked. Host is left as the client sent it.
//
// X-Forwarded-For, -Proto and -Host are set from the connection. A client in trusted (the
// trusted_proxies CIDRs) is a proxy in front of fairlead: its X-Forwarded-For is appended to and its
// other X-Forwarded-* and Forwarded headers are kept (X-Forwarded-Proto and -Host only set when it sent
// none). From any other client every X-Forwarded-* and Forwarded header is removed first, so that it
// cannot pass for another address or scheme. It does not allocate in the common case.
func prepareRequest(req *fasthttp.Request, remote net.IP, tls bool, trusted []netip.Prefix) {
	h := &req.Header
	stripConnectionHeaders(h.Peek(fasthttp.HeaderConnection), h.DelBytes)
	h.Del(fasthttp.HeaderConnection)
	h.ResetConnectionClose()
	for _, k := range hopByHop {
		h.Del(k)
	}
	// fasthttp's server already answered "100 Continue" to the client; the upstream gets the body at once.
	h.Del(fasthttp.HeaderExpect)

	proxy := isTrusted(remote, trusted)
	if !proxy {
		stripForwarded(h)
	}
	var buf [128]byte
	xff := buf[:0]
	if prior := h.Peek(fasthttp.HeaderXForwardedFor); proxy && len(prior) > 0 {
		xff = append(xff, prior...)
		xff = append(xff, ", "...)
	}
	if b, ok := stickiness.AppendIP(xff, remote); ok {
		xff = b
	} else {
		xff = append(xff, "unknown"...)
	}
	h.SetBytesV(fasthttp.HeaderXForwardedFor, xff)
	if !proxy || len(h.Peek(fasthttp.HeaderXForwardedProto)) == 0 {
		if tls {
			h.Set(fasthttp.HeaderXForwardedProto, "https")
		} else {
			h.Set(fasthttp.HeaderXForwardedProto, "http")
		}
	}
	if host := h.Host(); len(host) > 0 && (!proxy || len(h.Peek(fasthttp.HeaderXForwardedHost)) == 0) {
		h.SetBytesV(fasthttp.HeaderXForwardedHost, host)
	}
}

// isTrusted reports whether remote is in one of the trusted prefixes.
func isTrusted(remote net.IP, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	a, ok := netip.AddrFromSlice(remote)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// stripForwarded removes every X-Forwarded-* and Forwarded header. The raw header block is scanned
// first, so that a request without any (nearly all) costs one pass over bytes and no deletion.
func stripForwarded(h *fasthttp.RequestHeader) {
	raw := h.RawHeaders()
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		name := line[:colon]
		if hasPrefixFold(name, "x-forwarded-") || (len(name) == len("forwarded") && hasPrefixFold(name, "forwarded")) {
			h.DelBytes(name)
		}
	}
}

func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if b[i]|0x20 != prefix[i] && b[i] != prefix[i] {
			return false
		}
	}
	return true
}

// prepareResponse removes hop-by-hop headers from an upstream response before it is relayed. The
// upstream's wish to close its own connection must not close the client's.
func prepareResponse(resp *fasthttp.Response) {
	h := &resp.Header
	stripConnectionHeaders(h.Peek(fasthttp.HeaderConnection), h.DelBytes)
	h.Del(fasthttp.HeaderConnection)
	h.ResetConnectionClose()
	for _, k := range hopByHop {
		h.Del(k)
	}
}

// stripConnectionHeaders deletes every header named in a Connection header value (RFC 9110 7.6.1),
// except the connection options close and keep-alive, which are not header names.
func stripConnectionHeaders(v []byte, del func([]byte)) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) == 0 || bytes.EqualFold(tok, []byte("close")) || bytes.EqualFold(tok, []byte("keep-alive")) {
			continue
		}
		del(tok)
	}
}
