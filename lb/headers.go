package lb

import (
	"bytes"
	"net"

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
// It does not allocate in the common case.
func prepareRequest(req *fasthttp.Request, remote net.IP, tls bool) {
	h := &req.Header
	stripConnectionHeaders(h.Peek(fasthttp.HeaderConnection), h.DelBytes)
	h.Del(fasthttp.HeaderConnection)
	h.ResetConnectionClose()
	for _, k := range hopByHop {
		h.Del(k)
	}
	// fasthttp's server already answered "100 Continue" to the client; the upstream gets the body at once.
	h.Del(fasthttp.HeaderExpect)

	var buf [128]byte
	xff := buf[:0]
	if prior := h.Peek(fasthttp.HeaderXForwardedFor); len(prior) > 0 {
		xff = append(xff, prior...)
		xff = append(xff, ", "...)
	}
	if b, ok := stickiness.AppendIP(xff, remote); ok {
		xff = b
	} else {
		xff = append(xff, "unknown"...)
	}
	h.SetBytesV(fasthttp.HeaderXForwardedFor, xff)
	if tls {
		h.Set(fasthttp.HeaderXForwardedProto, "https")
	} else {
		h.Set(fasthttp.HeaderXForwardedProto, "http")
	}
	if host := h.Host(); len(host) > 0 {
		h.SetBytesV(fasthttp.HeaderXForwardedHost, host)
	}
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

// ambiguousFraming reports a request whose body length could be read two ways: Transfer-Encoding
// together with Content-Length (RFC 9112 6.3: a classic request smuggling vector). fasthttp itself
// rejects two Content-Length headers. Only chunked requests need the scan of the raw headers.
func ambiguousFraming(req *fasthttp.Request) bool {
	if req.Header.ContentLength() != -1 {
		return false
	}
	raw := req.Header.RawHeaders()
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if i := bytes.IndexByte(line, ':'); i >= 0 && bytes.EqualFold(bytes.TrimSpace(line[:i]), []byte("Content-Length")) {
			return true
		}
	}
	return false
}
