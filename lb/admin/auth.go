package admin

import (
	"crypto/subtle"
	"encoding/base64"
	"strings"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/valyala/fasthttp"
)

// Admin access. The listener is on loopback by default, where reading needs no credentials. With
// [admin] token_file ("Authorization: Bearer <token>") or user and password_file (Basic), every action
// (any method but GET and HEAD) needs them, and so does every path when the listener is not loopback
// (config validation refuses such a listener without credentials). Wrong or missing credentials get 401
// and nothing else. Comparisons take constant time; secrets are never logged.

// access reports whether the request may go on under cfg, the config in force; if not, it has
// answered 401.
func (h *Handler) access(ctx *fasthttp.RequestCtx, cfg *config.Config) bool {
	reading := ctx.IsGet() || ctx.IsHead()
	configured := cfg.AdminToken != "" || cfg.AdminPassword != ""
	if !configured || reading && config.LoopbackAddr(cfg.Admin.Listen) {
		return true
	}
	if credentialsOK(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), cfg) {
		return true
	}
	h.unauthorized.Add(1)
	ctx.Error("401 Unauthorized\n", fasthttp.StatusUnauthorized) // resets the response: headers after it
	if cfg.AdminPassword != "" {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Basic realm="fairlead admin"`)
	} else {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="fairlead admin"`)
	}
	return false
}

// credentialsOK checks an Authorization header against the configured token and Basic user.
func credentialsOK(auth []byte, cfg *config.Config) bool {
	scheme, cred, _ := strings.Cut(string(auth), " ")
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Bearer") && cfg.AdminToken != "":
		return subtle.ConstantTimeCompare([]byte(cred), []byte(cfg.AdminToken)) == 1
	case strings.EqualFold(scheme, "Basic") && cfg.AdminPassword != "":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return false
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		u := subtle.ConstantTimeCompare([]byte(user), []byte(cfg.Admin.User))
		p := subtle.ConstantTimeCompare([]byte(pass), []byte(cfg.AdminPassword))
		return u&p == 1
	}
	return false
}
