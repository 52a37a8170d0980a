package admin

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"strings"

	"github.com/valyala/fasthttp"
)

// statusPage is the live status page: one HTML file with its CSS and JavaScript inline and no other
// asset, so that it works where the admin listener has no way out. It draws every pool and server from
// the snapshots of GET /events, updates as events arrive, and sends the admin actions with fetch.
//
//go:embed ui/index.html
var statusPage []byte

// statusPageCSP lets the page run its own script (by its hash, so that no other script or inline
// event handler runs, should markup ever get into the page), use inline styles and talk to this
// listener only: nothing loads from elsewhere.
var statusPageCSP = func() string {
	page := string(statusPage)
	start, end := strings.Index(page, "<script>"), strings.Index(page, "</script>")
	if start < 0 || end < start {
		panic("lb/admin/ui/index.html: no <script> element")
	}
	sum := sha256.Sum256([]byte(page[start+len("<script>") : end]))
	return "default-src 'none'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; " +
		"frame-ancestors 'none'"
}()

// servePage is GET /.
func servePage(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Error("405 Method Not Allowed\n", fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, HEAD") // after Error, which resets the response
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	ctx.Response.Header.Set("Content-Security-Policy", statusPageCSP)
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.SetBody(statusPage)
}
