package lb

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/tunnel"
	"github.com/valyala/fasthttp"
)

// The log: fairlead logs through log/slog, as text (key=value) or JSON lines ([global] log_format), at
// [global] log_level and above. Four kinds of lines share it:
//
//	operational lines   lb.logf("tunnel: ...") and the like: msg is the line, level INFO
//	events              one per event of the stream but probe answers (events.go): msg says what
//	                    happened; kind, pool, server, old and detail are attributes; ERROR for an
//	                    outage (no leader, a pool with no server available), WARN for what needs an
//	                    operator's eye, INFO otherwise (logEvent)
//	the access log      [global] access_log: msg="access", one line per request (type=request) and
//	                    one per tunnel close (type=tunnel); see logRequest, logRefused (a request the
//	                    front end refused, HTTP/2 streams too) and tunnelEnd.log
//	connection errors   what fasthttp would log about a client connection, as kind and client address
//	                    only, rate-limited (lb/frontend): DEBUG, or WARN for accept errors and the
//	                    connection limit
//
// No line holds a byte of a request: the access log never holds the query string (ThingWorx accepts an
// appKey there), a header (so no Authorization, cookie or LeaderCheck credentials) or a body, and
// fasthttp's own lines, which quote the bytes of a request it could not read, never reach the log.

// NewLogger returns the logger for [global] log_format: "json" writes one JSON object per line, anything
// else text lines (key=value), at level and above (nil: INFO). Pass the LevelVar that Options.Level
// names, so that [global] log_level applies to it.
func NewLogger(format string, level slog.Leveler, w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// setDefaults gives New a Logger and a Logf that write to the same place: Logf over Logger, or, for a
// caller that gave only Logf (tests), Logger's text lines (without the time) passed to Logf; and sets
// Level to cfg's [global] log_level.
func (o *Options) setDefaults(cfg *config.Config) {
	if o.Level == nil {
		o.Level = new(slog.LevelVar)
	}
	o.Level.Set(config.LogLevels[cfg.Global.LogLevel]) // "" (a Config not from config.Load): INFO
	switch {
	case o.Logger != nil:
		o.Logf = logfOver(o.Logger)
	case o.Logf != nil:
		o.Logger = slog.New(slog.NewTextHandler(logfWriter(o.Logf), &slog.HandlerOptions{Level: o.Level, ReplaceAttr: withoutTime}))
	default:
		o.Logger = NewLogger(cfg.Global.LogFormat, o.Level, os.Stderr)
		o.Logf = logfOver(o.Logger)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
}

// logfOver returns a printf-style logger writing INFO lines to l.
func logfOver(l *slog.Logger) func(string, ...any) {
	return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
}

// logfWriter passes each line a slog handler writes to a printf-style logger.
type logfWriter func(format string, args ...any)

func (f logfWriter) Write(b []byte) (int, error) {
	n := len(b)
	if n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	f("%s", b)
	return n, nil
}

func withoutTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// accessLog reports whether [global] access_log is on in g (the generation a request started with;
// a reload switches it for the requests after it).
func (g *generation) accessLog() bool { return g.cfg.Global.AccessLog }

// logRequest writes the access log line of a request that fairlead answered or relayed: the client
// address, method, path (never the query string), the index of the [[routes]] entry that matched (-1:
// none), the pool, the address of the server of the last attempt and its display name (as the metrics'
// server and name labels: the address when it has none; both "" when no server), the status (101 for
// an upgrade that became a tunnel), the duration until the answer's head was ready to relay (for a
// tunnel, until the server's 101 arrived), the body bytes each way (see requestBodyBytes and
// responseBodyBytes; -1: a streamed answer without a length) and the retries on other servers. It
// allocates; the caller calls it only with the access log on.
func (px *proxy) logRequest(ctx *fasthttp.RequestCtx, route int, p *Pool, s *Server, took time.Duration, in, out int64, retries int) {
	status := ctx.Response.StatusCode()
	if ctx.Hijacked() {
		status = fasthttp.StatusSwitchingProtocols
	}
	var pool, server, name string
	if p != nil {
		pool = p.name
	}
	if s != nil {
		server, name = s.Addr, s.Name()
	}
	px.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("type", "request"),
		slog.String("client", ctx.RemoteIP().String()),
		slog.String("method", string(ctx.Method())),
		slog.String("path", string(ctx.Path())),
		slog.String("proto", frontend.Protocol(ctx.Conn())),
		slog.Int("route", route),
		slog.String("pool", pool),
		slog.String("server", server),
		slog.String("name", name),
		slog.Int("status", status),
		slog.Float64("duration_ms", milliseconds(took)),
		slog.Int64("req_bytes", in),
		slog.Int64("resp_bytes", out),
		slog.Int("retries", retries),
	)
}

// logRefused writes the access log line of a request the front end refused before any handler read it
// (lb/frontend: the framer's refusals, fasthttp's, HTTP/2's malformed streams), with the access log on:
// the line of logRequest, its method and path as the client sent them ("" where they were not
// readable), no route, pool or server, and for an HTTP/2 stream reset without an answer status 0 and
// reset=CODE.
func (px *proxy) logRefused(r *frontend.RefusedRequest) {
	if !px.gen.Load().accessLog() {
		return
	}
	var client string
	if a, ok := r.Client.(*net.TCPAddr); ok {
		client = a.IP.String()
	}
	attrs := []slog.Attr{
		slog.String("type", "request"),
		slog.String("client", client),
		slog.String("method", r.Method),
		slog.String("path", r.Path),
		slog.String("proto", r.Proto),
		slog.Int("route", -1),
		slog.String("pool", ""),
		slog.String("server", ""),
		slog.Int("status", r.Status),
		slog.Float64("duration_ms", milliseconds(r.Took)),
		slog.Int64("req_bytes", 0),
		slog.Int64("resp_bytes", 0),
		slog.Int("retries", 0),
		slog.String("refused", r.Reason),
	}
	if r.Reset != "" {
		attrs = append(attrs, slog.String("reset", r.Reset))
	}
	px.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}

// milliseconds is d in milliseconds, to the microsecond.
func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// tunnelEnd accounts for a tunnel when it closes: its bytes go to the pool's counters and, with the
// access log on, one line is written. The tunnel engine reports the close to onClose, which may run before
// engine.Add has returned the Tunnel whose counts it needs (a tunnel can end inside Add); whichever of
// added and closed comes second does the accounting, once.
type tunnelEnd struct {
	px     *proxy
	p      *Pool
	s      *Server
	client net.Addr
	local  bool // a proxy_protocol sender's own connection (LOCAL): counted per no source
	opened time.Time
	key    []byte // the sticky key the tunnel holds, nil for none

	mu    sync.Mutex
	t     *tunnel.Tunnel
	why   tunnel.Reason
	ended bool
}

// added records the Tunnel engine.Add returned.
func (e *tunnelEnd) added(t *tunnel.Tunnel) {
	e.mu.Lock()
	e.t = t
	ended := e.ended
	if !ended {
		e.px.live.Store(t, e)
	}
	e.mu.Unlock()
	if ended {
		e.account()
	}
}

// closed records the end of the tunnel (its onClose).
func (e *tunnelEnd) closed(why tunnel.Reason) {
	e.mu.Lock()
	e.why, e.ended = why, true
	t := e.t
	if t != nil {
		e.px.live.Delete(t)
	}
	e.mu.Unlock()
	if t != nil {
		e.account()
	}
}

func (e *tunnelEnd) account() {
	toServer, toClient := e.t.Bytes()
	e.p.m.tunnelBytes[0].Add(toServer)
	e.p.m.tunnelBytes[1].Add(toClient)
	if !e.px.gen.Load().accessLog() {
		return
	}
	var client string
	if a, ok := e.client.(*net.TCPAddr); ok {
		client = a.IP.String()
	}
	e.px.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("type", "tunnel"),
		slog.String("client", client),
		slog.String("pool", e.p.name),
		slog.String("server", e.s.Addr),
		slog.String("name", e.s.Name()),
		slog.Float64("duration_ms", milliseconds(time.Since(e.opened))),
		slog.Uint64("bytes_to_server", toServer),
		slog.Uint64("bytes_to_client", toClient),
		slog.String("reason", e.why.String()),
	)
}

// plural writes a count with its noun in the singular or plural, as every count in a log line, an
// event or the page is written: "1 server", "2 servers", "0 servers".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
