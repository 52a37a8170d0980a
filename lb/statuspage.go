package lb

import "github.com/valyala/fasthttp"

// servePage is GET /. Placeholder while the status page is written (issue #9).
func (lb *LB) servePage(ctx *fasthttp.RequestCtx) {
	ctx.Error("501 Not Implemented\n", fasthttp.StatusNotImplemented)
}
