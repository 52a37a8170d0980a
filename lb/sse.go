package lb

import "github.com/valyala/fasthttp"

// serveEvents is GET /events. Placeholder while the event feed is written (issue #9).
func (lb *LB) serveEvents(ctx *fasthttp.RequestCtx) {
	ctx.Error("501 Not Implemented\n", fasthttp.StatusNotImplemented)
}
