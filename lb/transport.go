package lb

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// The upstream transport: one bounded fasthttp.HostClient per server.
//
// TLS to a pool's servers ([pools.NAME.tls]): the HostClient has IsTLS and the pool's TLSConfig (send
// gives each request the https scheme, which IsTLS requires), but Dial runs the handshake itself. Left
// to the HostClient, the handshake would happen at the first write (with no WriteTimeout set), unbounded
// by connect_timeout, and its failure would be an error of the request rather than of the dial. Here it
// is bounded by connect_timeout, and a failed handshake is a failed dial (*dialError: no byte of the
// request reached the server, any request may go to another server). The *tls.Conn that Dial returns
// has a Handshake method, so the HostClient takes it as the TLS connection it is and adds no layer of
// its own. The idleConn read deadline sits under TLS, on the socket.

// newTransport returns the bounded connection pool of the server at addr: at most max_conns
// connections, requests waiting up to queue_timeout for a free one.
func newTransport(addr string, cfg *PoolConfig) *fasthttp.HostClient {
	connectTimeout, idle, nodelay := cfg.ConnectTimeout.D, cfg.ResponseTimeout.D, cfg.NoDelay
	tlsConfig := cfg.TLS.clientFor(addr)
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
		// TLS (see above): Dial runs the handshake.
		IsTLS:     tlsConfig != nil,
		TLSConfig: tlsConfig,
		Dial: func(a string) (net.Conn, error) {
			c, err := fasthttp.DialDualStackTimeout(a, connectTimeout) // IPv6 servers too (discovery may find them)
			if err != nil {
				return nil, &dialError{err}
			}
			if tc, ok := c.(*net.TCPConn); ok && !nodelay {
				tc.SetNoDelay(false) //nolint:errcheck // an optimisation only
			}
			if tlsConfig == nil {
				return &idleConn{Conn: c, timeout: idle}, nil
			}
			ic := &idleConn{Conn: c} // no read deadline of its own during the handshake
			tc, err := handshakeTLS(ic, tlsConfig, connectTimeout)
			if err != nil {
				return nil, &dialError{err}
			}
			ic.timeout = idle // before the connection is handed over: no other goroutine reads it yet
			return tc, nil
		},
	}
}

// sameTransport reports whether two pool configs build identical transports (a reload that changes none
// of these keeps every server's connections).
func sameTransport(a, b *PoolConfig) bool {
	return a.MaxConns == b.MaxConns && a.QueueTimeout.D == b.QueueTimeout.D &&
		a.ConnectTimeout.D == b.ConnectTimeout.D && a.ResponseTimeout.D == b.ResponseTimeout.D &&
		a.NoDelay == b.NoDelay && a.TLS.same(&b.TLS)
}

// same reports whether two [pools.NAME.tls] tables make the same connections: the same keys and the
// same contents of their files.
func (t *PoolTLSConfig) same(o *PoolTLSConfig) bool {
	return t.Enabled == o.Enabled && t.CAFile == o.CAFile && t.ServerName == o.ServerName &&
		t.InsecureSkipVerify == o.InsecureSkipVerify && t.Cert == o.Cert && t.Key == o.Key && t.sum == o.sum
}

// clientFor returns the TLS config of connections to the server at addr, or nil for plain TCP. Without
// server_name, the name sent (SNI) and verified is the server's host; an IP address is verified
// against the certificate's IP SANs (and sent as no SNI).
func (t *PoolTLSConfig) clientFor(addr string) *tls.Config {
	if t.client == nil {
		return nil
	}
	cfg := t.client.Clone() // shares the session cache
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}

// handshakeTLS runs the client handshake over conn within timeout. On failure conn is closed and the
// error says it is TLS ("TLS handshake: tls: failed to verify certificate: x509: ...").
func handshakeTLS(conn net.Conn, cfg *tls.Config, timeout time.Duration) (*tls.Conn, error) {
	tc := tls.Client(conn, cfg)
	err := tc.SetDeadline(time.Now().Add(timeout))
	if err == nil {
		err = tc.Handshake()
	}
	if err == nil {
		err = tc.SetDeadline(time.Time{})
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
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
// between 3/4 of response_timeout and all of it. Under TLS it is the layer under the *tls.Conn, so
// that it times the socket itself.
type idleConn struct {
	net.Conn
	timeout  time.Duration // 0 while a TLS handshake runs under its own deadline
	deadline time.Time     // the read deadline currently set
}

func (c *idleConn) Read(b []byte) (int, error) {
	if want := time.Now().Add(c.timeout); c.timeout > 0 && want.Sub(c.deadline) > c.timeout/4 {
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
