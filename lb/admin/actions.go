package admin

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/valyala/fasthttp"
)

// Admin actions, like HAProxy's runtime API: POST /api/servers/POOL/SERVER/ACTION, SERVER being the
// address or the display name. The Backend carries them out (Backend.Act): each is logged and
// published on the event stream (admin_action), and the operator's state survives reloads that keep
// the server. The answer is the server's status as JSON.

// An Action is what an operator does to a server.
type Action string

// The actions.
const (
	Drain Action = "drain" // no new traffic (not even sticky clients'); open tunnels stay
	Maint Action = "maint" // no traffic; its tunnels are closed (spread over the pool's tunnel_close_spread)
	Ready Action = "ready" // back to normal: traffic as its health checks allow
	Probe Action = "probe" // probe it now (without active checks: try a server that live failures took down again now)
)

// Errors of Backend.Act: the handler answers ErrNoServer with 404 and ErrUnknownAction with 400.
var (
	ErrNoServer      = errors.New("no such server in the pool")
	ErrUnknownAction = errors.New("unknown action")
)

// serveAction is POST /api/servers/rest.
func (h *Handler) serveAction(ctx *fasthttp.RequestCtx, rest string) {
	if !ctx.IsPost() {
		ctx.Error("405 Method Not Allowed: actions are POSTs\n", fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set(fasthttp.HeaderAllow, fasthttp.MethodPost)
		return
	}
	pool, rest, _ := strings.Cut(rest, "/")
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		ctx.Error("404 Not Found: want /api/servers/POOL/ADDRESS/ACTION\n", fasthttp.StatusNotFound)
		return
	}
	server, action := rest[:i], rest[i+1:]
	st, err := h.b.Act(pool, server, Action(action), ctx.RemoteIP().String())
	switch {
	case errors.Is(err, ErrNoServer):
		ctx.Error("404 Not Found: no server "+server+" in pool "+pool+"\n", fasthttp.StatusNotFound)
		return
	case errors.Is(err, ErrUnknownAction):
		ctx.Error("400 Bad Request: unknown action "+action+" (want drain, maint, ready or probe)\n", fasthttp.StatusBadRequest)
		return
	case err != nil:
		ctx.Error("500 Internal Server Error: "+err.Error()+"\n", fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("application/json")
	json.NewEncoder(ctx).Encode(st) //nolint:errcheck
}
