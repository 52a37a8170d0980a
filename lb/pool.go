package lb

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/valyala/fasthttp"
)

// Server is one upstream server of a pool: its bounded connection pool and its counters.
type Server struct {
	Addr   string
	client *fasthttp.HostClient

	requests atomic.Uint64 // requests forwarded (each attempt)
	failures atomic.Uint64 // attempts that ended in a transport error
}

// Pool is a set of servers and the policy that picks one for a request. A Pool belongs to one config
// generation and is immutable apart from its atomics.
type Pool struct {
	Name    string
	cfg     *PoolConfig
	servers []*Server
	leader  *healthcheck.Leader // for balance = "leader"

	waiting atomic.Int64 // requests waiting for a usable server

	// counters for /status and /metrics
	requests  atomic.Uint64
	retries   atomic.Uint64
	noServer  atomic.Uint64 // 503 after queue_timeout or with a full queue
	bad502    atomic.Uint64
	timeout   atomic.Uint64
	queueFull atomic.Uint64
}

func newPool(name string, cfg *PoolConfig, logf func(string, ...any)) *Pool {
	p := &Pool{Name: name, cfg: cfg}
	for _, addr := range cfg.Servers {
		p.servers = append(p.servers, newServer(addr, cfg))
	}
	if cfg.Balance == "leader" {
		ck := cfg.Check
		p.leader = healthcheck.NewLeader(healthcheck.LeaderOptions{
			Servers:      cfg.Servers,
			Path:         ck.Path,
			Credentials:  ck.Credentials,
			Interval:     ck.Interval.D,
			IntervalMax:  ck.IntervalMax.D,
			FastInterval: ck.FastInterval.D,
			Timeout:      ck.Timeout.D,
			Fall:         ck.Fall,
			Logf:         logf,
		})
	}
	return p
}

func newServer(addr string, cfg *PoolConfig) *Server {
	s := &Server{Addr: addr}
	connectTimeout, idle := cfg.ConnectTimeout.D, cfg.ResponseTimeout.D
	s.client = &fasthttp.HostClient{
		Addr:                     addr,
		MaxConns:                 cfg.MaxConns,
		MaxConnWaitTimeout:       cfg.QueueTimeout.D,
		MaxIdleConnDuration:      10 * time.Second,
		StreamResponseBody:       true,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		// The client's request may or may not carry a User-Agent; either way it is forwarded as is.
		RetryIf: func(req *fasthttp.Request) bool { return idempotent(&req.Header) },
		Dial: func(a string) (net.Conn, error) {
			c, err := fasthttp.DialTimeout(a, connectTimeout)
			if err != nil {
				return nil, &dialError{err}
			}
			return &idleConn{Conn: c, timeout: idle}, nil
		},
	}
	return s
}

// start launches the pool's health checks; they stop with ctx.
func (p *Pool) start(ctx context.Context) {
	if p.leader != nil {
		p.leader.Start(ctx)
	}
}

// ready is closed when the pool has finished its first round of checks.
func (p *Pool) ready() <-chan struct{} {
	if p.leader != nil {
		return p.leader.Ready()
	}
	c := make(chan struct{})
	close(c)
	return c
}

// pick returns the server for a request, or -1 if none is usable now. Fast path: one atomic load.
func (p *Pool) pick() int {
	if p.leader != nil {
		return p.leader.Current()
	}
	return 0
}

// errQueueFull means more requests are waiting than max_queue allows.
var errQueueFull = errors.New("queue full")

// wait blocks until pick finds a server or deadline passes (then -1). Requests waiting at once are
// bounded by max_queue; past it wait returns errQueueFull at once. Slow path: only without a leader.
func (p *Pool) wait(deadline time.Time) (int, error) {
	if n := p.waiting.Add(1); n > int64(p.cfg.MaxQueue) {
		p.waiting.Add(-1)
		return -1, errQueueFull
	}
	defer p.waiting.Add(-1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var changed <-chan struct{}
		if p.leader != nil {
			changed = p.leader.Changed()
		}
		if i := p.pick(); i >= 0 {
			return i, nil
		}
		d := time.Until(deadline)
		if d <= 0 || changed == nil {
			return -1, nil
		}
		if timer == nil {
			timer = time.NewTimer(d)
		}
		select {
		case <-changed:
		case <-timer.C:
			return -1, nil
		}
	}
}

// settle waits, after server i failed a request (refused, reset or 503), for the leader checks to tell
// what happened: the leader changed (returns the new one, or -1 if none is known yet when the deadline
// passes) or server i answered a LeaderCheck with 200 after the failure (returns i). Pools without a
// leader return i at once.
func (p *Pool) settle(i int, failedAt, deadline time.Time) int {
	if p.leader == nil {
		return i
	}
	p.leader.Trigger()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		changed := p.leader.Changed()
		cur := p.leader.Current()
		if cur >= 0 && cur != i {
			return cur
		}
		if cur == i && p.leader.Confirmed(i, failedAt) {
			return i
		}
		select {
		case <-changed:
		case <-timer.C:
			return p.leader.Current()
		}
	}
}

// dialError marks a failure to connect: none of the request's bytes reached the server, so any request
// may be retried.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// idleConn is an upstream connection whose reads time out after a period without data, so that
// response_timeout bounds a silent server without cutting a long download that keeps moving (a fixed
// deadline per response would).
type idleConn struct {
	net.Conn
	timeout time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func idempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete()
}
