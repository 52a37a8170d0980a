package lb

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The path of a request, top to bottom:
//
//	accept   fasthttp.Server (lb.go) calls handle for each request
//	check    ambiguous framing gets 400 and the connection is closed, nothing is forwarded
//	route    the first [[routes]] entry that matches names a pool
//	pick     the pool's policy returns a server, or the request waits (bounded) for one
//	forward  the server's bounded HostClient streams the request and the response; failures before a
//	         response are retried on the (new) leader when that cannot duplicate a side effect
//	account  counters for /status and /metrics

// maxAttempts bounds the tries of one request across failovers (the deadline bounds it too).
const maxAttempts = 4

func (lb *LB) handle(ctx *fasthttp.RequestCtx) {
	g := lb.gen.Load()

	if ambiguousFraming(&ctx.Request) {
		lb.badRequests.Add(1)
		ctx.Error("400 Bad Request: ambiguous message framing (Content-Length with Transfer-Encoding)\n", fasthttp.StatusBadRequest)
		ctx.SetConnectionClose()
		return
	}

	req := &ctx.Request
	upgrade := isUpgrade(&req.Header)
	p := g.route(ctx, upgrade)
	if p == nil {
		ctx.Error("404 Not Found: no route\n", fasthttp.StatusNotFound)
		return
	}
	p.requests.Add(1)

	prepareRequest(req, ctx.RemoteIP(), ctx.IsTLS())
	replay := lb.makeReplayable(ctx, g)

	i := p.pick(ctx)
	var deadline time.Time // computed only on the slow paths
	for attempt := 1; ; attempt++ {
		if i < 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(p.cfg.QueueTimeout.D)
			}
			var err error
			if i, err = p.wait(ctx, deadline); i < 0 {
				if errors.Is(err, errQueueFull) {
					p.queueFull.Add(1)
				}
				p.noServer.Add(1)
				serviceUnavailable(ctx)
				return
			}
		}
		if upgrade {
			lb.upgrade(ctx, p, i)
			return
		}
		s := p.servers[i]
		s.requests.Add(1)
		err := s.client.Do(req, &ctx.Response)
		if err == nil {
			if ctx.Response.StatusCode() == fasthttp.StatusServiceUnavailable && p.leader != nil {
				// The leader answered 503: it may be stepping down, so every server is probed now.
				// An idempotent request is held until the checks settle and retried if the leader
				// changed; otherwise (and for any other request) the original answer is relayed.
				p.leader.Trigger()
				if idempotent(&req.Header) && replay.ok() && attempt < maxAttempts {
					ctx.Response.Body() // keep the answer but free the upstream connection while waiting
					if deadline.IsZero() {
						deadline = time.Now().Add(p.cfg.QueueTimeout.D)
					}
					if next := p.settle(i, time.Now(), deadline); next >= 0 && next != i {
						ctx.Response.Reset()
						p.retries.Add(1)
						i = next
						continue
					}
				}
			}
			prepareResponse(&ctx.Response)
			if p.cookieIdx >= 0 {
				p.setCookie(ctx, i)
			}
			return
		}

		s.failures.Add(1)
		ctx.Response.Reset()
		if p.leader != nil {
			// Live traffic to the leader was refused, reset or timed out: probe every server now.
			p.leader.Trigger()
		}
		var de *dialError
		dialFailed := errors.As(err, &de)
		switch {
		case isTimeout(err) && !dialFailed:
			p.timeout.Add(1)
			ctx.Error("504 Gateway Timeout\n", fasthttp.StatusGatewayTimeout)
			return
		case errors.Is(err, fasthttp.ErrNoFreeConns):
			// Every upstream connection stayed busy for queue_timeout.
			p.noServer.Add(1)
			serviceUnavailable(ctx)
			return
		}
		// A refused dial reached no byte of the server: any request may go again. Otherwise only a
		// request that cannot cause a second side effect, and whose body can be sent again.
		retryable := (dialFailed || idempotent(&req.Header)) && replay.ok()
		if !retryable || attempt == maxAttempts {
			p.bad502.Add(1)
			lb.logf("proxy: %s %s to %s failed: %v", req.Header.Method(), req.URI().Path(), s.Addr, err)
			ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
			return
		}
		if p.leader != nil {
			if deadline.IsZero() {
				deadline = time.Now().Add(p.cfg.QueueTimeout.D)
			}
			i = p.settle(i, time.Now(), deadline)
		} else {
			if dialFailed {
				p.markDown(i)
			}
			i = p.pick(ctx)
		}
		p.retries.Add(1)
	}
}

// setCookie sets the sticky cookie naming server i unless the client already sent it.
func (p *Pool) setCookie(ctx *fasthttp.RequestCtx, i int) {
	name := p.cfg.Sticky.Cookie
	if string(ctx.Request.Header.Cookie(name)) == p.cookieIDs[i] {
		return
	}
	c := fasthttp.AcquireCookie()
	c.SetKey(name)
	c.SetValue(p.cookieIDs[i])
	c.SetPath("/")
	c.SetHTTPOnly(true)
	ctx.Response.Header.SetCookie(c)
	fasthttp.ReleaseCookie(c)
}

// serviceUnavailable answers when no server could take the request in time.
func serviceUnavailable(ctx *fasthttp.RequestCtx) {
	ctx.Error("503 Service Unavailable: no server available\n", fasthttp.StatusServiceUnavailable)
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// route returns the pool of the first route that matches the request, or nil.
func (g *generation) route(ctx *fasthttp.RequestCtx, upgrade bool) *Pool {
	path := ctx.Path()
	for i := range g.routes {
		r := &g.routes[i]
		if r.matches(path, upgrade) {
			return r.pool
		}
	}
	return nil
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
// client read deadline moving while bytes arrive, so a long upload is not cut by read_timeout.
func (lb *LB) makeReplayable(ctx *fasthttp.RequestCtx, g *generation) replayable {
	req := &ctx.Request
	if !req.IsBodyStream() {
		return replayable{}
	}
	size := req.Header.ContentLength()
	if size >= 0 && size <= g.cfg.Frontend.RetryBuffer {
		req.Body() // reads the stream into the request's own buffer
		return replayable{}
	}
	cr := &countingReader{r: req.BodyStream(), conn: ctx.Conn(), timeout: g.cfg.Frontend.ReadTimeout.D}
	req.SetBodyStream(cr, size)
	return replayable{stream: cr}
}

// countingReader counts the bytes read from a client's body stream and pushes the client connection's
// read deadline forward while bytes arrive, so read_timeout bounds silence rather than the whole upload.
// As for upstream reads, the deadline moves only once it fell a quarter of the timeout behind.
type countingReader struct {
	r        io.Reader
	conn     net.Conn
	timeout  time.Duration
	deadline time.Time
	n        int64
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
	return n, err
}

// copyBuffers are the buffers large bodies are copied through: fasthttp copies in 4 KiB steps, which
// costs a read and a write system call every 4 KiB; 64 KiB steps cost 16 times fewer.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// WriteTo implements io.WriterTo, which fasthttp prefers when it copies a request body upstream.
func (c *countingReader) WriteTo(w io.Writer) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	var written int64
	for {
		n, err := c.Read(buf)
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
