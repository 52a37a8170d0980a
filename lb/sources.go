package lb

import (
	"bytes"
	"net/netip"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Limits per client address ([frontend] rate_per_source, burst_per_source): each request of an address
// over its rate gets 429 with Retry-After and reaches nothing (frontend.Sources keeps the buckets;
// max_conns_per_source is applied at accept, lb/frontend).

var (
	retryAfterHeader = []byte("Retry-After")
	tooManyBody      = []byte("429 Too Many Requests: over this client address's rate_per_source\n")
)

// admitSource takes the request from its client address's bucket; false when it is over
// rate_per_source, once the 429 is answered and logged.
func (px *proxy) admitSource(ctx *fasthttp.RequestCtx, g *generation) bool {
	if g.cfg.Frontend.RatePerSource <= 0 {
		return true // off: the request path pays one config read
	}
	ok, retry := px.front.Sources().Admit(sourceAddr(ctx, g.cfg.Frontend.Trusted))
	if ok {
		return true
	}
	var n [20]byte
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.Response.Header.SetBytesKV(retryAfterHeader, strconv.AppendInt(n[:0], int64(retry), 10))
	ctx.SetBody(tooManyBody)
	px.closeUnlessTunnel(ctx, len(ctx.Request.Header.Peek(fasthttp.HeaderUpgrade)) > 0)
	px.logUnrouted(ctx, g)
	return false
}

// sourceAddr is a request's client address for the limits per source: the connection's, or, from a
// proxy in trusted, the last X-Forwarded-For address that is not a trusted proxy's (the one the
// nearest untrusted hop connected from); the connection's when there is none.
func sourceAddr(ctx *fasthttp.RequestCtx, trusted []netip.Prefix) netip.Addr {
	a, _ := netip.AddrFromSlice(ctx.RemoteIP())
	a = a.Unmap()
	if !inTrusted(a, trusted) {
		return a
	}
	from := a
	for _, v := range ctx.Request.Header.PeekAll(fasthttp.HeaderXForwardedFor) {
		for len(v) > 0 { // every address, left to right: the last untrusted one wins
			var item []byte
			if i := bytes.IndexByte(v, ','); i >= 0 {
				item, v = v[:i], v[i+1:]
			} else {
				item, v = v, nil
			}
			if x, err := netip.ParseAddr(string(bytes.TrimSpace(item))); err == nil && !inTrusted(x.Unmap(), trusted) {
				from = x.Unmap()
			}
		}
	}
	return from
}

func inTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
