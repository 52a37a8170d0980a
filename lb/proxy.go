package lb

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/valyala/fasthttp"
)

// The path of a request, top to bottom:
//
//	accept   every byte a client sends is checked by the framer (lb/frontend) before fasthttp parses it:
//	         malformed or ambiguous framing, a head too large or too slow, a body too large are answered
//	         (400, 431, 408, 413, 505) and the connection closed, nothing of them forwarded; fasthttp
//	         (lb.go) calls handle for each request that passed
//	route    the first [[routes]] entry that matches names a pool; a WebSocket upgrade is checked
//	         (upgrade.go badHandshake) and tunnelled only on a websocket route; [routes.auth] checks the
//	         client's key (routeauth.go)
//	pick     the pool's policy returns an available server, or the request waits (bounded) for one
//	forward  one loop for plain requests and upgrades: the server's bounded upstream client (upstream.go) streams the
//	         request and the response, or an upgrade becomes a tunnel (upgrade.go); failures before a
//	         response are reported to the health check and retried on another server when that cannot
//	         duplicate a side effect, within one retry budget and one deadline
//	account  counters for /status and /metrics, the pool's duration histogram and byte counts
//	         (metrics.go), and with [global] access_log one line (log.go)

// maxAttempts bounds the tries of one request or upgrade across failovers (the deadline bounds it too).
const maxAttempts = 4

// errRefused is what a pool's health check is told when a server's answer says it no longer serves
// (a leader stepping down answers 503).
var errRefused = errors.New("server refused the request (503)")

// headBuffers hold the heads of requests going upstream (appendUpstreamHead), one per request in flight.
var headBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func (lb *LB) handle(ctx *fasthttp.RequestCtx) {
	g := lb.gen.Load()
	req := &ctx.Request
	if req.Header.IsConnect() {
		refuseConnect(ctx) // fairlead is no forward proxy
		lb.front.Refused(fasthttp.StatusMethodNotAllowed)
		lb.logUnrouted(ctx, g)
		return
	}
	if ft := g.cfg.Frontend.TLS; ft != nil && g.cfg.Frontend.RedirectHTTPS && !ctx.IsTLS() {
		frontend.RedirectHTTPS(ctx, ft.Port)
		lb.logUnrouted(ctx, g)
		return
	}
	// After a request with an Upgrade header the framer no longer checks the connection's bytes: unless
	// the request becomes a tunnel, the connection closes after the answer (lb/frontend).
	upgradeHeader := len(req.Header.Peek(fasthttp.HeaderUpgrade)) > 0
	if len(g.relays) > 0 && lb.serveRelay(ctx, g, upgradeHeader) {
		return // a relay's path: fairlead answers itself (relayroute.go)
	}
	upgrade := upgradeHeader && isUpgrade(&req.Header)
	ri := g.route(ctx, upgrade)
	if ri < 0 {
		ctx.Error("404 Not Found: no route\n", fasthttp.StatusNotFound)
		lb.closeUnlessTunnel(ctx, upgradeHeader)
		lb.logUnrouted(ctx, g)
		return
	}
	// Only a websocket route tunnels; elsewhere an upgrade is an ordinary request (its Upgrade and
	// Connection headers are hop-by-hop and removed).
	upgrade = upgrade && g.routes[ri].websocket
	if upgrade {
		if reason := badHandshake(&req.Header); reason != "" {
			lb.front.Refused(fasthttp.StatusBadRequest)
			ctx.Error("400 Bad Request: "+reason+"\n", fasthttp.StatusBadRequest)
			ctx.Response.Header.Set("Sec-WebSocket-Version", "13")
			ctx.SetConnectionClose()
			lb.logUnrouted(ctx, g)
			return
		}
	}
	p := g.routes[ri].pool
	if !lb.routeAuthorized(ctx, g, ri) {
		return // [routes.auth]: no right key, answered 401 (routeauth.go); nothing is forwarded
	}
	p.requests.Add(1)
	hb := headBuffers.Get().(*[]byte)
	out := outbound{req: req}
	*hb, out.framing = appendUpstreamHead((*hb)[:0], ctx, forwardSpec{trusted: g.cfg.Frontend.Trusted, auth: g.cfg.RouteAuthOf(ri), upgrade: upgrade})
	out.head = *hb
	replay, ok := lb.makeReplayable(ctx, g)
	var s *Server
	var retries int
	if ok {
		s, retries = lb.forward(ctx, p, upgrade, &out, replay)
	}
	headBuffers.Put(hb)
	lb.closeUnlessTunnel(ctx, upgradeHeader)

	// account: the answer's head is ready (its body streams once the handler returns).
	took := time.Since(ctx.Time())
	in, outBytes := requestBodyBytes(req, replay), responseBodyBytes(ctx)
	p.m.observe(took, in, outBytes)
	if g.accessLog() {
		lb.logRequest(ctx, ri, p, s, took, in, outBytes, retries)
	}
}

// refuseConnect answers a CONNECT: 405 at once, and the connection closes (what the client sends next
// may be the bytes of the tunnel it asked for). fairlead is an ingress, not a forward proxy: nothing is
// forwarded (HAProxy would tunnel it; refusing is the safer choice in front of ThingWorx).
func refuseConnect(ctx *fasthttp.RequestCtx) {
	ctx.Error("405 Method Not Allowed: fairlead does not tunnel CONNECT\n", fasthttp.StatusMethodNotAllowed)
	ctx.Response.Header.Set(fasthttp.HeaderAllow, allowedMethods)
	ctx.SetConnectionClose()
}

// allowedMethods is the Allow field of a refused CONNECT: the methods fairlead forwards (any other token
// is forwarded too; these are the ones RFC 9110 and RFC 5789 define, CONNECT excepted).
const allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// closeUnlessTunnel closes the client connection after the answer to a request with an Upgrade header
// that did not become a tunnel: the framer did not check the bytes after it.
func (lb *LB) closeUnlessTunnel(ctx *fasthttp.RequestCtx, upgradeHeader bool) {
	if upgradeHeader && !ctx.Hijacked() {
		ctx.SetConnectionClose()
	}
}

// clientFailed answers a request whose body could not be read from the client (a framing violation in
// a chunked body, a body over max_body_size, a client silent for read_timeout, a client gone): its
// status, and the connection closes. The server is not at fault: nothing is reported to its check.
func (lb *LB) clientFailed(ctx *fasthttp.RequestCtx, err error) {
	status, reason := fasthttp.StatusBadRequest, "the request body could not be read"
	fe := frontend.Claim(ctx.Conn())
	switch {
	case fe != nil:
		status, reason = fe.Status, fe.Reason
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, reason = fasthttp.StatusRequestEntityTooLarge, "request body too large"
	case isTimeout(err):
		status, reason = fasthttp.StatusRequestTimeout, "the request body stopped arriving"
	}
	lb.front.Refused(status)
	dropAnswer(&ctx.Response)
	ctx.Error(frontend.RefusalBody(status, reason), status)
	ctx.SetConnectionClose()
}

// logUnrouted writes the access log line of a request answered before any route (400, 404, 405).
func (lb *LB) logUnrouted(ctx *fasthttp.RequestCtx, g *generation) {
	if g.accessLog() {
		lb.logRequest(ctx, -1, nil, nil, time.Since(ctx.Time()), 0, 0, 0)
	}
}

// How an attempt ended. classify decides it once, from the attempt's error, and the forwarding loop acts
// on it: only the server's faults are counted against it, reported to its health check and retried
// elsewhere. A client's fault (its body could not be read: gone, too slow, too large, bad framing) is
// answered to the client and touches no server.
type attemptEnd uint8

const (
	endAnswered   attemptEnd = iota // the server answered (any status)
	endClient                       // the client's fault (*clientError)
	endBusy                         // every upstream connection stayed busy for queue_timeout
	endDialFailed                   // no connection (*dialError): none of the request reached the server
	endTimeout                      // the server was silent for response_timeout
	endFailed                       // the server refused, reset or closed, or answered what is no HTTP answer
	endAbandoned                    // the leader changed while the request waited, before its answer (leaderwatch.go)
)

func classify(err error) attemptEnd {
	if err == nil {
		return endAnswered // the fast path: errors.As's targets below would escape
	}
	var ce *clientError
	var de *dialError
	switch {
	case errors.As(err, &ce):
		return endClient
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return endBusy
	case errors.As(err, &de):
		return endDialFailed
	case err == errAbandoned:
		return endAbandoned
	case isTimeout(err):
		return endTimeout
	}
	return endFailed
}

// forward is the one forwarding loop of plain requests and upgrades. Each attempt goes to the server the
// policy picks and ends one way (classify). A server's fault is reported to the pool's health check
// (which alone decides whether the server is down) and, when the request may go again, the next attempt
// goes to another available server, or to the same one once it answered its checks again. Every wait
// for a server shares one deadline (queue_timeout, counted from the first wait) and the attempts one
// budget (maxAttempts). A request pinned to its server (a later part of a multi-part request) goes there
// or fails with 502. It returns the server of the last attempt (nil if none was made) and the number of
// retries.
func (lb *LB) forward(ctx *fasthttp.RequestCtx, p *Pool, upgrade bool, out *outbound, replay replayable) (last *Server, retries int) {
	req := &ctx.Request
	st := p.state.Load()
	var (
		failed             *Server   // the server of the last failed attempt
		failedAt, deadline time.Time // computed only on the slow paths
	)
	n := bodyBytes(&req.Header) // counted in flight with each attempt by pick and await
	if p.leader {
		out.watch, out.since = true, ctx.Time().UnixNano()
		out.mayLeave = idempotent(&req.Header) && !req.IsBodyStream()
	}
	c := st.policy.pick(ctx, st, nil)
	for attempt := 1; ; attempt++ {
		if c.s == nil && !c.pinned {
			if deadline.IsZero() {
				deadline = time.Now().Add(st.cfg.QueueTimeout.D)
			}
			var err error
			if c, err = p.await(ctx, failed, failedAt, deadline); c.s == nil && !c.pinned {
				if errors.Is(err, errQueueFull) {
					p.queueFull.Add(1)
				}
				unavailable(ctx, p, st)
				return
			}
			st = p.state.Load()
		}
		s := c.s
		if s == nil {
			p.pinFailures.Add(1)
			p.bad502.Add(1)
			ctx.Error("502 Bad Gateway: the server of this multi-part request is not available\n", fasthttp.StatusBadGateway)
			return
		}
		last = s
		s.requests.Add(1)
		// again reports whether the request may go to another server after this attempt: it cannot cause
		// a second side effect (or did not reach the server), its body can be sent again, it is not
		// pinned, and the budget is not spent.
		again := func(reached bool) bool {
			return (!reached || idempotent(&req.Header)) && replay.ok() && !c.pinned && attempt < maxAttempts
		}

		var err error
		if upgrade {
			var conn net.Conn
			if conn, err = lb.dialUpgrade(s, st.cfg); err == nil {
				p.health.Report(s.health, nil)
				lb.exchange(ctx, p, st, s, conn, out.head)
			}
			p.end(s, n)
			if err == nil {
				return
			}
		} else {
			err = lb.send(p, s, out, &ctx.Response, n, replay)
		}

		end := classify(err)
		switch end {
		case endAnswered:
			if ctx.Response.StatusCode() == fasthttp.StatusSwitchingProtocols {
				// A server switching protocols on a request that did not ask to: not relayed (the
				// upstream connection is closed by the client).
				s.failures.Add(1)
				p.bad502.Add(1)
				lb.logf("proxy: %s answered 101 to %s %s, which did not ask to upgrade", s.label(), req.Header.Method(), req.URI().Path())
				ctx.Response.Reset()
				ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
				return
			}
			if !st.policy.refuses(ctx.Response.StatusCode()) {
				p.health.Report(s.health, nil)
				lb.answer(ctx, st, s)
				return
			}
			// The server says it no longer serves (a leader stepping down): every server is probed
			// now. An idempotent request is held until the checks settle and retried if another
			// server took over; otherwise (and for any other request) the answer is relayed.
			p.health.Report(s.health, errRefused)
			if again(true) {
				ctx.Response.Body() // keep the answer but free the upstream connection while waiting
				if next, ok := lb.another(ctx, p, st, s, n, &deadline); ok {
					dropAnswer(&ctx.Response)
					p.retries.Add(1)
					retries++
					c, st = next, p.state.Load()
					continue
				}
			}
			lb.answer(ctx, st, s)
			return
		case endClient:
			lb.clientFailed(ctx, err) // nothing is reported: the server did nothing wrong
			return
		case endAbandoned:
			// The leader changed while this request waited for its answer, none of which came (or while
			// it queued for a connection): it goes to the new leader at once. The old leader is not
			// reported: its checks replaced it already.
			dropAnswer(&ctx.Response)
			if replay.ok() && attempt < maxAttempts {
				p.inflightMoves.Add(1)
				p.retries.Add(1)
				retries++
				failed, failedAt = s, time.Now()
				st = p.state.Load()
				c = st.policy.pick(ctx, st, s)
				continue
			}
			p.bad502.Add(1)
			ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
			return
		case endBusy:
			// Every upstream connection stayed busy for queue_timeout: the server is busy, not failing.
			unavailable(ctx, p, st)
			return
		case endTimeout:
			// A server silent for response_timeout. An idempotent request goes again to another server
			// that takes over within queue_timeout (a hung leader replaced after its checks time out
			// too), never to the same one: a slow answer would only be asked for again.
			s.failures.Add(1)
			dropAnswer(&ctx.Response)
			p.health.Report(s.health, err)
			p.timeout.Add(1)
			if again(true) {
				if next, ok := lb.another(ctx, p, st, s, n, &deadline); ok {
					p.retries.Add(1)
					retries++
					c, st = next, p.state.Load()
					continue
				}
			}
			ctx.Error("504 Gateway Timeout\n", fasthttp.StatusGatewayTimeout)
			return
		}

		// The server failed: a refused dial (no byte of the request reached it: any request may go
		// again), or a reset, a close or a bad answer (only a request that cannot cause a second side
		// effect goes again).
		s.failures.Add(1)
		dropAnswer(&ctx.Response)
		p.health.Report(s.health, err)
		if !again(end != endDialFailed) {
			p.bad502.Add(1)
			lb.logf("proxy: %s %s to %s failed: %v", req.Header.Method(), req.URI().Path(), s.label(), err)
			ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
			return
		}
		p.retries.Add(1)
		retries++
		failed, failedAt = s, time.Now()
		c = st.policy.pick(ctx, st, failed)
	}
}

// another waits, within the request's deadline (set now if it was not yet), for a server other than s
// to take the request, as a pool does after a failure its checks are settling: the choice, counted in
// flight, or false.
func (lb *LB) another(ctx *fasthttp.RequestCtx, p *Pool, st *poolState, s *Server, n int64, deadline *time.Time) (choice, bool) {
	if deadline.IsZero() {
		*deadline = time.Now().Add(st.cfg.QueueTimeout.D)
	}
	next, _ := p.await(ctx, s, time.Now(), *deadline)
	switch {
	case next.s == nil:
		return choice{}, false
	case next.s != s && !next.pinned:
		return next, true
	}
	p.end(next.s, n)
	return choice{}, false
}

// dropAnswer drops what resp holds of an answer (its body, and the upstream connection a streamed body
// holds), keeping what fasthttp's server set on it for the client: the next attempt reads its head
// into it, or fairlead's own answer (ctx.Error) resets it whole.
func dropAnswer(resp *fasthttp.Response) { resp.ResetBody() }

// send forwards a plain request to s, counted in flight (with n body bytes) until the response head
// arrives or the attempt fails. A chunked body counts against s's high_watermark_bytes as it streams.
func (lb *LB) send(p *Pool, s *Server, out *outbound, resp *fasthttp.Response, n int64, replay replayable) error {
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
func (lb *LB) answer(ctx *fasthttp.RequestCtx, st *poolState, s *Server) {
	prepareResponse(&ctx.Response)
	if name, value := st.policy.cookie(ctx, s); name != "" {
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
func unavailable(ctx *fasthttp.RequestCtx, p *Pool, st *poolState) {
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

// route returns the index of the first route that matches the request, or -1.
func (g *generation) route(ctx *fasthttp.RequestCtx, upgrade bool) int {
	path := ctx.Path()
	for i := range g.routes {
		if g.routes[i].matches(path, upgrade) {
			return i
		}
	}
	return -1
}

type route struct {
	paths     []string
	websocket bool // matches only WebSocket upgrades
	pool      *Pool
}

func (r *route) matches(path []byte, upgrade bool) bool {
	if r.websocket && !upgrade {
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
func (lb *LB) makeReplayable(ctx *fasthttp.RequestCtx, g *generation) (r replayable, ok bool) {
	req := &ctx.Request
	if !req.IsBodyStream() {
		return replayable{}, true
	}
	size := req.Header.ContentLength()
	if size >= 0 && size <= g.cfg.Frontend.RetryBuffer {
		// Read into a scratch buffer, then copied into the request's own: fasthttp's req.Body() would
		// put a read error's text in the body (and log a warning per request).
		bp := copyBuffers.Get().(*[]byte)
		buf := *bp
		if size > len(buf) {
			buf = make([]byte, size)
		}
		_, err := io.ReadFull(req.BodyStream(), buf[:size])
		if err == nil {
			req.SetBody(buf[:size])
		}
		copyBuffers.Put(bp)
		if err != nil {
			lb.clientFailed(ctx, err)
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

// copyBuffers are the buffers large bodies are copied through: fasthttp copies in 4 KiB steps, which
// costs a read and a write system call every 4 KiB; 64 KiB steps cost 16 times fewer.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// WriteTo implements io.WriterTo, which fasthttp prefers when it copies a request body upstream.
func (c *countingReader) WriteTo(w io.Writer) (int64, error) { return copyThrough(w, c) }

// copyThrough copies r to w in copyBuffers steps until r's EOF: the WriteTo of a reader (io.Copy would
// call that WriteTo again).
func copyThrough(w io.Writer, r io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	var written int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, werr
			}
		}
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}
