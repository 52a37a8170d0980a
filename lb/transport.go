package lb

import (
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// The upstream transport: one bounded fasthttp.HostClient per server.

// newTransport returns the bounded connection pool of the server at addr: at most max_conns
// connections, requests waiting up to queue_timeout for a free one.
func newTransport(addr string, cfg *PoolConfig) *fasthttp.HostClient {
	connectTimeout, idle, nodelay := cfg.ConnectTimeout.D, cfg.ResponseTimeout.D, cfg.NoDelay
	return &fasthttp.HostClient{
		Addr:                addr,
		MaxConns:            cfg.MaxConns,
		MaxConnWaitTimeout:  cfg.QueueTimeout.D,
		MaxIdleConnDuration: 10 * time.Second,
		StreamResponseBody:  true,
		// Large enough that a 16 KiB answer or a 32 KiB slice of an upload is one system call.
		ReadBufferSize:           32 << 10,
		WriteBufferSize:          32 << 10,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		// The client's request may or may not carry a User-Agent; either way it is forwarded as is.
		//
		// The client retries once, on this server, an idempotent request whose reused keep-alive
		// connection turned out closed. Never after a timeout (a silent server gets its 504 after one
		// response_timeout, not five) or a failed dial: the forwarding loop (proxy.go) decides those,
		// and moves to another server.
		MaxIdemponentCallAttempts: 2,
		RetryIfErr: func(req *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
			var de *dialError
			if isTimeout(err) || errors.As(err, &de) {
				return false, false
			}
			return false, idempotent(&req.Header)
		},
		Dial: func(a string) (net.Conn, error) {
			c, err := fasthttp.DialTimeout(a, connectTimeout)
			if err != nil {
				return nil, &dialError{err}
			}
			if tc, ok := c.(*net.TCPConn); ok && !nodelay {
				tc.SetNoDelay(false) //nolint:errcheck // an optimisation only
			}
			return &idleConn{Conn: c, timeout: idle}, nil
		},
	}
}

// sameTransport reports whether two pool configs build identical transports (a reload that changes none
// of these keeps every server's connections).
func sameTransport(a, b *PoolConfig) bool {
	return a.MaxConns == b.MaxConns && a.QueueTimeout.D == b.QueueTimeout.D &&
		a.ConnectTimeout.D == b.ConnectTimeout.D && a.ResponseTimeout.D == b.ResponseTimeout.D &&
		a.NoDelay == b.NoDelay
}

// dialError marks a failure to connect: none of the request's bytes reached the server, so any request
// may be retried.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// idleConn is an upstream connection whose reads time out after a period without data, so that
// response_timeout bounds a silent server without cutting a long download that keeps moving (a fixed
// deadline per response would). Moving a socket deadline costs a runtime timer update, so the deadline is
// pushed only once it has fallen a quarter of the timeout behind: the effective limit of silence is
// between 3/4 of response_timeout and all of it.
type idleConn struct {
	net.Conn
	timeout  time.Duration
	deadline time.Time // the read deadline currently set
}

func (c *idleConn) Read(b []byte) (int, error) {
	if want := time.Now().Add(c.timeout); want.Sub(c.deadline) > c.timeout/4 {
		if err := c.Conn.SetReadDeadline(want); err != nil {
			return 0, err
		}
		c.deadline = want
	}
	return c.Conn.Read(b)
}

func idempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete()
}
