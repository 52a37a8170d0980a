package lb

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/acme"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/upstream"
	"github.com/valyala/fasthttp"
)

// The path of a request, top to bottom:
//
//	accept   every byte a client sends is checked by the framer (lb/frontend) before fasthttp parses it:
//	         malformed or ambiguous framing, a head too large or too slow, a body too large are answered
//	         (400, 431, 408, 413, 505) and the connection closed, nothing of them forwarded; fasthttp
//	         (lb.go) calls handle for each request that passed
//	route    the first [[routes]] entry that matches (host, path, upgrade) names a pool; a WebSocket upgrade is checked
//	         (upgrade.go badHandshake) and tunnelled only on a websocket route; [routes.auth] checks the
//	         client's key (routeauth.go)
//	pick     the pool's policy returns an available server, or the request waits (bounded) for one
//	forward  one loop for plain requests and upgrades: the server's bounded client (lb/upstream) streams the
//	         request and the response, or an upgrade becomes a tunnel (upgrade.go); failures before a
//	         response are reported to the health check and retried on another server when that cannot
//	         duplicate a side effect, within one retry budget and one deadline
//	account  counters for /status and /metrics, the pool's duration histogram and byte counts
//	         (metrics.go), and with [global] access_log one line (log.go)

// proxy is the request path: what a request touches and nothing else — the running generation (its
// routes, pools and relays), the front end's refusals and counters, the tunnels, the log. The LB (its
// supervisor, lb.go) builds it, swaps its generation at a reload and stops it; every method of the path
// above is proxy's.
type proxy struct {
	live  sync.Map                   // *tunnel.Tunnel → *tunnelEnd: the open tunnels, for a binary upgrade to hand over
	gen   atomic.Pointer[generation] // the running generation: a request holds the one it started with
	log   *slog.Logger               // the access log and the path's lines (log.go)
	logf  func(string, ...any)
	front *frontend.Front // checks every client byte, answers and counts what it refuses (lb/frontend)
	// tunnels carry the WebSocket tunnels (tunnels.go): they outlive generations, so that tunnels
	// outlive reloads.
	tunnels tunnels
	// http1Requests counts the requests read from HTTP/1.x connections (HTTP/2 streams: h2.Counts).
	http1Requests atomic.Uint64
	// admitted, if set (tests, before traffic), is told each upgrade new_tunnels_per_second admitted:
	// the server and the time of its slot.
	admitted atomic.Pointer[func(s *Server, at time.Time)]
}

// maxAttempts bounds the tries of one request or upgrade across failovers (the deadline bounds it too).
const maxAttempts = 4

// errRefused is what a pool's health check is told when a server's answer says it no longer serves
// (a leader stepping down answers 503).
var errRefused = errors.New("server refused the request (503)")

// headBuffers hold the heads of requests going upstream (appendUpstreamHead), one per request in flight.
var headBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func (px *proxy) handle(ctx *fasthttp.RequestCtx) {
	g := px.gen.Load()
	req := &ctx.Request
	if !frontend.IsStream(ctx.Conn()) { // HTTP/2 streams are counted by px.h2
		px.http1Requests.Add(1)
	}
	if !px.admitSource(ctx, g) {
		return // over rate_per_source: answered 429 (sources.go)
	}
	if refusedMethod(req.Header.Method()) {
		refuseMethod(ctx) // CONNECT or TRACE, in any case: never forwarded
		px.front.Refused(fasthttp.StatusMethodNotAllowed)
		px.logUnrouted(ctx, g)
		return
	}
	if h := req.Header.Host(); len(h) > 0 && !frontend.ValidAuthority(h) {
		// host[:port] without userinfo, as HTTP/2's :authority (lb/frontend): fasthttp lets a port over
		// 65535 and an IPv6 zone through. (An HTTP/1.0 request may have none: headers.go gives it one.)
		px.front.Refused(fasthttp.StatusBadRequest)
		ctx.Error(frontend.RefusalBody(fasthttp.StatusBadRequest, "invalid Host"), fasthttp.StatusBadRequest)
		ctx.SetConnectionClose()
		px.logUnrouted(ctx, g)
		return
	}
	if g.acme != nil && !ctx.IsTLS() && acme.IsChallengePath(ctx.Path()) && g.acme.ServeHTTP01(ctx) {
		px.logUnrouted(ctx, g) // an ACME server's HTTP-01 validation, answered before any redirect
		return
	}
	if ft := g.cfg.Frontend.TLS; ft != nil && g.cfg.Frontend.RedirectHTTPS && !ctx.IsTLS() {
		frontend.RedirectHTTPS(ctx, ft.Port)
		px.logUnrouted(ctx, g)
		return
	}
	// After a request with an Upgrade header the framer no longer checks the connection's bytes: unless
	// the request becomes a tunnel, the connection closes after the answer (lb/frontend).
	upgradeHeader := len(req.Header.Peek(fasthttp.HeaderUpgrade)) > 0
	var host []byte // nil: no route or relay has hosts, and a pattern list of none matches every host
	if g.byHost {
		host = requestHost(&req.Header)
	}
	if len(g.relays) > 0 && px.serveRelay(ctx, g, host, upgradeHeader) {
		return // a relay's path: fairlead answers itself (relays.go)
	}
	upgrade := upgradeHeader && isUpgrade(&req.Header)
	ri := g.route(ctx, host, upgrade)
	if ri < 0 {
		ctx.Error("404 Not Found: no route\n", fasthttp.StatusNotFound)
		px.closeUnlessTunnel(ctx, upgradeHeader)
		px.logUnrouted(ctx, g)
		return
	}
	// Only a websocket route tunnels; elsewhere an upgrade is an ordinary request (its Upgrade and
	// Connection headers are hop-by-hop and removed).
	upgrade = upgrade && g.routes[ri].websocket
	if upgrade {
		if reason := badHandshake(&req.Header); reason != "" {
			px.front.Refused(fasthttp.StatusBadRequest)
			ctx.Error("400 Bad Request: "+reason+"\n", fasthttp.StatusBadRequest)
			ctx.Response.Header.Set("Sec-WebSocket-Version", "13")
			ctx.SetConnectionClose()
			px.logUnrouted(ctx, g)
			return
		}
	}
	p := g.routes[ri].pool
	if !px.routeAuthorized(ctx, g, ri) {
		return // [routes.auth]: no right key, answered 401 (routeauth.go); nothing is forwarded
	}
	p.requests.Add(1)
	hb := headBuffers.Get().(*[]byte)
	out := upstream.Request{Req: req}
	*hb, out.Framing = appendUpstreamHead((*hb)[:0], ctx, forwardSpec{trusted: g.cfg.Frontend.Trusted, auth: g.cfg.RouteAuthOf(ri), upgrade: upgrade})
	out.Head = *hb
	replay, ok := px.makeReplayable(ctx, g)
	var s *Server
	var retries int
	if ok {
		s, retries = px.forward(ctx, p, upgrade, &out, replay)
	}
	headBuffers.Put(hb)
	px.closeUnlessTunnel(ctx, upgradeHeader)

	// account: the answer's head is ready (its body streams once the handler returns).
	took := time.Since(ctx.Time())
	in, outBytes := requestBodyBytes(req, replay), responseBodyBytes(ctx)
	p.m.observe(took, in, outBytes)
	if g.accessLog() {
		px.logRequest(ctx, ri, p, s, took, in, outBytes, retries)
	}
}

// refuseMethod answers a CONNECT or a TRACE: 405 at once with Allow, and the connection closes. Neither
// is forwarded, to any route:
//
//   - CONNECT asks for a tunnel to the authority it names: fairlead is an ingress, not a forward proxy
//     (HAProxy would tunnel it; refusing is the safer choice in front of ThingWorx). What the client
//     sends next may be the bytes of the tunnel it asked for, hence the close.
//   - TRACE asks the server to echo the request back, every field included: the Cookie, Authorization
//     or appKey of a user, which a script in a page cannot read, would come back in a body it can
//     (cross-site tracing). ThingWorx has no use for it; nginx and Tomcat (allowTrace off by default)
//     answer it 405 too, HAProxy forwards it. It is answered like CONNECT: one rule for the methods
//     fairlead refuses.
//
// Methods are case-sensitive (RFC 9110 section 9.1), so "trace" is another method; but a server that
// reads methods in any case would take it for TRACE, so CONNECT and TRACE are refused in any case.
func refuseMethod(ctx *fasthttp.RequestCtx) {
	ctx.Error("405 Method Not Allowed: fairlead forwards no CONNECT or TRACE\n", fasthttp.StatusMethodNotAllowed)
	ctx.Response.Header.Set(fasthttp.HeaderAllow, allowedMethods)
	ctx.SetConnectionClose()
}

// refusedMethod reports whether a request's method is one fairlead refuses: CONNECT or TRACE, in any case.
func refusedMethod(m []byte) bool {
	return eqFold(m, "connect") || eqFold(m, "trace")
}

// allowedMethods is the Allow field of the 405. RFC 9110 section 10.2.1 has Allow list the methods the
// target resource supports; fairlead answers for every resource, so it can only say which methods it
// forwards, and the server behind judges each. It forwards every method but CONNECT and TRACE: any
// token, extension methods (WebDAV's PROPFIND, ...) included. That set has no end to list, so Allow
// lists the methods RFC 9110 and RFC 5789 (PATCH) define that fairlead forwards, which is all of them but
// CONNECT and TRACE: each listed method is forwarded, and no refused one is listed.
const allowedMethods = "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"

// closeUnlessTunnel closes the client connection after the answer to a request with an Upgrade header
// that did not become a tunnel: the framer did not check the bytes after it.
func (px *proxy) closeUnlessTunnel(ctx *fasthttp.RequestCtx, upgradeHeader bool) {
	if upgradeHeader && !ctx.Hijacked() {
		ctx.SetConnectionClose()
	}
}

// clientFailed answers a request whose body could not be read from the client (a framing violation in
// a chunked body, a body over max_body_size, a client silent for read_timeout, a client gone): its
// status, and the connection closes. The server is not at fault: nothing is reported to its check.
func (px *proxy) clientFailed(ctx *fasthttp.RequestCtx, err error) {
	status, reason := frontend.BodyRefusal(ctx.Conn(), err)
	px.front.Refused(status)
	dropAnswer(&ctx.Response)
	ctx.Error(frontend.RefusalBody(status, reason), status)
	ctx.SetConnectionClose()
}

// logUnrouted writes the access log line of a request answered before any route (400, 404, 405).
func (px *proxy) logUnrouted(ctx *fasthttp.RequestCtx, g *generation) {
	if g.accessLog() {
		px.logRequest(ctx, -1, nil, nil, time.Since(ctx.Time()), 0, 0, 0)
	}
}

// How an attempt ended. classify decides it once, from the attempt's error and the answer's status, and
// the forwarding loop acts on it in one place each: account counts it against the server and tells the
// pool's health check, the loop retries it elsewhere or conclude answers the client. Only the server's
// faults are counted against it, reported and retried. A client's fault (its body could not be read:
// gone, too slow, too large, bad framing) is answered to the client and touches no server.
type attemptEnd uint8

const (
	endAnswered   attemptEnd = iota // the server answered (any status but the two below; an upgrade's 101 too)
	endRefused                      // the server answered that it no longer serves (policy.refuses: a leader's 503)
	endSwitched                     // the server answered 101 to a request that did not ask to switch
	endClient                       // the client's fault (*upstream.ClientError)
	endBusy                         // every upstream connection stayed busy for queue_timeout
	endDialFailed                   // no connection (*upstream.DialError): none of the request reached the server
	endTimeout                      // the server was silent for response_timeout
	endFailed                       // the server refused, reset or closed, or answered what is no HTTP answer
	endAbandoned                    // the leader changed while the request waited, before its answer (leaderwatch.go)
)

func classify(err error) attemptEnd {
	if err == nil {
		return endAnswered // the fast path: errors.As's targets below would escape
	}
	var ce *upstream.ClientError
	var de *upstream.DialError
	switch {
	case errors.As(err, &ce):
		return endClient
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return endBusy
	case errors.As(err, &de):
		return endDialFailed
	case err == upstream.ErrAbandoned:
		return endAbandoned
	case isTimeout(err):
		return endTimeout
	}
	return endFailed
}

// classifyAnswer tells the answers that end an attempt otherwise than answered: a 101 nobody asked for,
// and a refusal.
func classifyAnswer(status int, st *poolView) attemptEnd {
	switch {
	case status == fasthttp.StatusSwitchingProtocols:
		return endSwitched
	case st.refuser != nil && st.refuser.refuses(status):
		return endRefused
	}
	return endAnswered
}

// retried reports whether an attempt that ended so may be made again on another server, and whether
// its request reached the server (then only a request that cannot cause a second side effect goes
// again). An abandoned request either did not reach the server (it queued for a connection) or may
// leave it (upstream.Request.MayLeave).
func (e attemptEnd) retried() (ok, reached bool) {
	switch e {
	case endRefused, endTimeout, endFailed:
		return true, true
	case endDialFailed, endAbandoned:
		return true, false
	}
	return false, false
}

// strict reports whether the next attempt after one that ended so must go to another server, not to the
// same one once it passed its checks again, and whether, when none takes the request in time, the
// client gets this attempt's answer (the refusal relayed, 504) rather than unavailable_status. A
// refusing server would refuse again, and a slow answer would only be asked for again.
func (e attemptEnd) strict() bool { return e == endRefused || e == endTimeout }

// forward is the one forwarding loop of plain requests and upgrades. Each attempt goes to the server
// the pool chooses (choose) and ends one way (classify); account counts and reports it, and a server's
// fault goes again, when the request may go again, to another server: at once, or once one takes it
// within the deadline (the same one too once it answered its checks again, unless the end is strict).
// Every wait for a server shares one deadline (queue_timeout, counted from the first wait) and the
// attempts one budget (maxAttempts). A request pinned to its server (a later part of a multi-part
// request) goes there or fails with 502. It returns the server of the last attempt (nil if none was
// made) and the number of retries.
func (px *proxy) forward(ctx *fasthttp.RequestCtx, p *Pool, upgrade bool, out *upstream.Request, replay replayable) (last *Server, retries int) {
	req := &ctx.Request
	n := bodyBytes(&req.Header) // counted in flight with each attempt by pick and await
	if p.leader {
		out.Watch, out.Since = true, ctx.Time().UnixNano()
		out.MayLeave = upstream.Idempotent(&req.Header) && !req.IsBodyStream()
	}
	var deadline time.Time // of every wait for a server: set at the first (slow path only)
	c, st, werr := px.choose(ctx, p, nil, false, n, &deadline)
	for attempt := 1; ; attempt++ {
		if c.s == nil {
			px.noServer(ctx, p, st, c.pinned, werr)
			return
		}
		s := c.s
		if upgrade && !px.admitTunnel(ctx, p, st, s, &deadline) {
			p.end(s, n) // over new_tunnels_per_second past the queue: answered (admission.go)
			return
		}
		last = s
		s.requests.Add(1)

		var sw switching // an upgrade's 101
		var err error
		if upgrade {
			sw, err = px.handshake(ctx, p, st, s, out.Head, n) // upgrade.go
		} else {
			err = px.send(p, s, out, &ctx.Response, n, replay)
		}
		end := classify(err)
		if end == endAnswered && sw.conn == nil {
			end = classifyAnswer(ctx.Response.StatusCode(), st)
		}
		p.account(s, end, err)
		if sw.conn != nil {
			px.handOver(ctx, p, st, s, sw) // the 101 relayed, the tunnel made
			return
		}
		if end != endAnswered && end != endRefused {
			dropAnswer(&ctx.Response) // and the upstream connection a streamed answer holds
		}

		// Retry elsewhere: when the request may go again (its body can be sent again, it is not
		// pinned, the budget is not spent, and it did not reach the server or cannot cause a second
		// side effect).
		if ok, reached := end.retried(); ok && (!reached || upstream.Idempotent(&req.Header)) && replay.ok() && !c.pinned && attempt < maxAttempts {
			if end == endRefused {
				ctx.Response.Body() // keep the answer but free the upstream connection while waiting
			}
			next, nst, nerr := px.choose(ctx, p, s, end.strict(), n, &deadline)
			if next.s != nil || next.pinned || !end.strict() { // strict: only when another server took it
				dropAnswer(&ctx.Response)
				if end == endAbandoned {
					p.inflightMoves.Add(1)
				}
				p.retries.Add(1)
				retries++
				c, st, werr = next, nst, nerr
				continue
			}
		}
		px.conclude(ctx, p, st, s, end, err)
		return
	}
}

// choose returns the server of the next attempt, counted in flight, and the pool's view it was chosen
// in: the policy's pick among the available servers other than failed (the server of the attempt
// before, nil for the first), or the first to be available before the request's deadline (set now if it
// was not yet), failed included once it answered its checks again, unless strict. It returns no server
// when none came in time (the error says whether the queue was full).
func (px *proxy) choose(ctx *fasthttp.RequestCtx, p *Pool, failed *Server, strict bool, n int64, deadline *time.Time) (choice, *poolView, error) {
	st := p.view.Load()
	if !strict {
		if c := st.policy.pick(ctx, st, failed); c.s != nil || c.pinned {
			return c, st, nil
		}
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(st.cfg.QueueTimeout.D)
	}
	c, err := p.await(ctx, failed, time.Now(), *deadline)
	if strict && (c.pinned || c.s == failed) {
		if c.s != nil {
			p.end(c.s, n)
		}
		c = choice{}
	}
	return c, p.view.Load(), err
}

// account is the one place an attempt is counted against its server and told to the pool's health
// check (which alone decides whether the server is down), a plain request's and an upgrade's alike.
func (p *Pool) account(s *Server, end attemptEnd, err error) {
	switch end {
	case endAnswered:
		p.checks.Report(s.target, nil)
	case endRefused:
		// The server says it no longer serves (a leader stepping down): every server is probed now.
		p.checks.Report(s.target, errRefused)
	case endSwitched:
		s.failures.Add(1) // not relayed; the server still serves (its checks say so)
	case endTimeout:
		p.timeout.Add(1)
		fallthrough
	case endDialFailed, endFailed:
		s.failures.Add(1)
		p.checks.Report(s.target, err)
	}
	// endClient, endBusy and endAbandoned are no fault of the server's. An abandoned server is not
	// reported: its checks replaced it already.
}

// conclude answers the client after the last attempt to s, which ended so (err).
func (px *proxy) conclude(ctx *fasthttp.RequestCtx, p *Pool, st *poolView, s *Server, end attemptEnd, err error) {
	req := &ctx.Request
	switch end {
	case endAnswered, endRefused:
		px.answer(ctx, st, s) // a refusal that no other server took over in time is relayed as it is
	case endClient:
		px.clientFailed(ctx, err) // nothing was reported: the server did nothing wrong
	case endBusy:
		unavailable(ctx, p, st) // the server is busy, not failing
	case endTimeout:
		ctx.Error("504 Gateway Timeout\n", fasthttp.StatusGatewayTimeout)
	case endSwitched:
		// Not relayed (the upstream connection is closed by the client).
		p.bad502.Add(1)
		px.logf("proxy: %s answered 101 to %s %s, which did not ask to upgrade", s.label(), req.Header.Method(), req.URI().Path())
		ctx.Response.Reset()
		ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
	case endAbandoned:
		p.bad502.Add(1)
		ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
	default: // endDialFailed, endFailed
		p.bad502.Add(1)
		px.logf("proxy: %s %s to %s failed: %v", req.Header.Method(), req.URI().Path(), s.label(), err)
		ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
	}
}

// noServer answers a request no server took: its pinned server is gone (502), or none was available in
// time (unavailable_status).
func (px *proxy) noServer(ctx *fasthttp.RequestCtx, p *Pool, st *poolView, pinned bool, err error) {
	if pinned {
		p.pinFailures.Add(1)
		p.bad502.Add(1)
		ctx.Error("502 Bad Gateway: the server of this multi-part request is not available\n", fasthttp.StatusBadGateway)
		return
	}
	if errors.Is(err, errQueueFull) {
		p.queueFull.Add(1)
	}
	unavailable(ctx, p, st)
}

// dropAnswer drops what resp holds of an answer (its body, and the upstream connection a streamed body
// holds), keeping what fasthttp's server set on it for the client: the next attempt reads its head
// into it, or fairlead's own answer (ctx.Error) resets it whole.
func dropAnswer(resp *fasthttp.Response) { resp.ResetBody() }

// send forwards a plain request to s, counted in flight (with n body bytes) until the response head
// arrives or the attempt fails. A chunked body counts against s's high_watermark_bytes as it streams.
func (px *proxy) send(p *Pool, s *Server, out *upstream.Request, resp *fasthttp.Response, n int64, replay replayable) error {
	cr := replay.stream
	if cr != nil && n == 0 {
		cr.to = s
	}
	err := s.client.Load().Do(out, resp)
	if cr != nil && cr.to != nil {
		n += cr.counted
		cr.to, cr.counted = nil, 0
	}
	p.end(s, n)
	return err
}

// answer relays a server's answer to a plain request.
func (px *proxy) answer(ctx *fasthttp.RequestCtx, st *poolView, s *Server) {
	prepareResponse(&ctx.Response)
	if name, value := st.cookie(ctx, s); name != "" {
		c := fasthttp.AcquireCookie()
		c.SetKey(name)
		c.SetValue(value)
		c.SetPath("/")
		c.SetHTTPOnly(true)
		ctx.Response.Header.SetCookie(c)
		fasthttp.ReleaseCookie(c)
	}
}

// unavailable answers when no server could take the request in time: unavailable_status (503, with
// Retry-After, unless configured otherwise).
func unavailable(ctx *fasthttp.RequestCtx, p *Pool, st *poolView) {
	p.noServer.Add(1)
	code := st.cfg.UnavailableStatus
	ctx.Error(strconv.Itoa(code)+" "+fasthttp.StatusMessage(code)+": no server available\n", code)
	if code == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// route returns the index of the first route that matches the request, or -1; host is the request's
// (requestHost).
func (g *generation) route(ctx *fasthttp.RequestCtx, host []byte, upgrade bool) int {
	path := ctx.Path()
	for i := range g.routes {
		if g.routes[i].matches(host, path, upgrade) {
			return i
		}
	}
	return -1
}

// requestHost returns the host a request is for, without its port, as routes and relays match it: the
// authority of a target in absolute form ("GET http://host/path", RFC 9112 section 3.2.2: it wins over
// Host), else Host (over HTTP/2, :authority: lb/frontend gives it as Host). A target with userinfo was
// refused before (400); were one here, its "user@host" would match no host pattern. A sub-slice of the
// request; allocates nothing.
func requestHost(h *fasthttp.RequestHeader) []byte {
	a := h.Host()
	if uri := h.RequestURI(); len(uri) > 0 && uri[0] != '/' && uri[0] != '*' {
		if i := bytes.Index(uri, []byte("://")); i > 0 {
			rest := uri[i+3:]
			if end := bytes.IndexAny(rest, "/?#"); end >= 0 {
				rest = rest[:end]
			}
			if len(rest) > 0 {
				a = rest
			}
		}
	}
	return frontend.AuthorityHost(a)
}

type route struct {
	hosts     []string // lower case; none: every host
	paths     []string
	websocket bool // matches only WebSocket upgrades
	pool      *Pool
}

func (r *route) matches(host, path []byte, upgrade bool) bool {
	if r.websocket && !upgrade {
		return false
	}
	if !config.HostMatches(r.hosts, host) {
		return false
	}
	if len(r.paths) == 0 {
		return true
	}
	for _, p := range r.paths {
		if len(path) >= len(p) && string(path[:len(p)]) == p {
			return true
		}
	}
	return false
}

// replayable tracks whether a request's body can be sent again after a failed attempt.
type replayable struct {
	stream *countingReader // nil when the body is in memory (always replayable)
}

// ok reports whether the body can be sent again in full: it is in memory, or no byte of the stream was
// consumed yet (the stream is still at its start).
func (r replayable) ok() bool { return r.stream == nil || r.stream.n == 0 }

// makeReplayable reads small streamed bodies into memory (up to retry_buffer) so that they can be
// replayed, and wraps larger ones to know whether any byte was consumed. It also keeps a streamed body's
// client read deadline moving while bytes arrive, so a long upload is not cut by read_timeout. When a
// small body cannot be read from the client, the client is answered (clientFailed) and ok is false.
func (px *proxy) makeReplayable(ctx *fasthttp.RequestCtx, g *generation) (r replayable, ok bool) {
	req := &ctx.Request
	if !req.IsBodyStream() {
		return replayable{}, true
	}
	size := req.Header.ContentLength()
	if size >= 0 && size <= g.cfg.Frontend.RetryBuffer {
		// Read into a scratch buffer, then copied into the request's own: fasthttp's req.Body() would
		// put a read error's text in the body (and log a warning per request).
		bp := upstream.CopyBuffers.Get().(*[]byte)
		buf := *bp
		if size > len(buf) {
			buf = make([]byte, size)
		}
		_, err := io.ReadFull(req.BodyStream(), buf[:size])
		if err == nil {
			req.SetBody(buf[:size])
		}
		upstream.CopyBuffers.Put(bp)
		if err != nil {
			px.clientFailed(ctx, err)
			return replayable{}, false
		}
		return replayable{}, true
	}
	cr := &countingReader{r: req.BodyStream(), conn: ctx.Conn(), timeout: g.cfg.Frontend.ReadTimeout.D}
	req.SetBodyStream(cr, size)
	return replayable{stream: cr}, true
}

// countingReader counts the bytes read from a client's body stream and pushes the client connection's
// read deadline forward while bytes arrive, so read_timeout bounds silence rather than the whole upload.
// As for upstream reads, the deadline moves only once it fell a quarter of the timeout behind.
// A chunked body also counts its bytes in flight to the server it streams to (to), against
// high_watermark_bytes.
type countingReader struct {
	r        io.Reader
	conn     net.Conn
	timeout  time.Duration
	deadline time.Time
	n        int64
	to       *Server // the server a chunked body streams to, nil otherwise
	counted  int64   // bytes counted in to's inflightBytes
}

func (c *countingReader) Read(b []byte) (int, error) {
	if c.timeout > 0 {
		if want := time.Now().Add(c.timeout); want.Sub(c.deadline) > c.timeout/4 {
			c.conn.SetReadDeadline(want) //nolint:errcheck // a failed read reports it
			c.deadline = want
		}
	}
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.to != nil && n > 0 {
		c.to.inflightBytes.Add(int64(n))
		c.counted += int64(n)
	}
	return n, err
}

// Trailers passes on the trailer fields of the body it reads (an HTTP/2 request's), if any.
func (c *countingReader) Trailers() []byte {
	if t, ok := c.r.(upstream.Trailered); ok {
		return t.Trailers()
	}
	return nil
}

// WriteTo implements io.WriterTo, which fasthttp prefers when it copies a request body upstream.
func (c *countingReader) WriteTo(w io.Writer) (int64, error) { return upstream.CopyThrough(w, c) }
