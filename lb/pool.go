package lb

import (
	"context"
	"errors"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// Server is one upstream server of a pool: its bounded connection pool and its counters.
type Server struct {
	Addr   string
	client *fasthttp.HostClient

	requests atomic.Uint64 // requests forwarded (each attempt)
	failures atomic.Uint64 // attempts that ended in a transport error
	tunnels  atomic.Int64  // open tunnels
}

// Pool is a set of servers and the policy that picks one for a request. A Pool belongs to one config
// generation and is immutable apart from its atomics.
//
// Health is written by the pool's checker (leader or rise/fall) and read here through one predicate per
// policy; policies never probe.
type Pool struct {
	name    string
	cfg     *PoolConfig
	servers []*Server
	leader  *healthcheck.Leader  // balance = "leader"
	checker *healthcheck.Checker // other balances

	// balance = "sticky"
	keys      *stickiness.Extractor
	table     *stickiness.Table
	cookieIdx int      // index of the cookie source in keys, -1 without a sticky cookie
	cookieIDs []string // the cookie value naming each server
	rr        atomic.Uint32

	waiting atomic.Int64 // requests waiting for a usable server

	// counters for /status and /metrics
	requests  atomic.Uint64
	retries   atomic.Uint64
	noServer  atomic.Uint64 // 503 after queue_timeout or with a full queue
	bad502    atomic.Uint64
	timeout   atomic.Uint64
	queueFull atomic.Uint64

	tunnelsOpened atomic.Uint64

	stop context.CancelFunc // ends the pool's checks when a reload drops it
}

func newPool(name string, cfg *PoolConfig, logf func(string, ...any), onDown func(p *Pool, server int)) *Pool {
	p := &Pool{name: name, cfg: cfg, cookieIdx: -1}
	for _, addr := range cfg.Servers {
		p.servers = append(p.servers, newServer(addr, cfg))
	}
	ck := cfg.Check
	probe := healthcheck.Probe{
		Servers:      cfg.Servers,
		Path:         ck.Path,
		Credentials:  ck.Credentials,
		Interval:     ck.Interval.D,
		IntervalMax:  ck.IntervalMax.D,
		FastInterval: ck.FastInterval.D,
		Timeout:      ck.Timeout.D,
		Fall:         ck.Fall,
		Logf:         logf,
	}
	if cfg.Balance != "leader" {
		p.checker = healthcheck.NewChecker(healthcheck.CheckerOptions{
			Probe: probe,
			Port:  ck.Port,
			Rise:  ck.Rise,
			OnChange: func(i int, up bool) {
				if !up && onDown != nil {
					onDown(p, i)
				}
			},
		})
	}
	if cfg.Balance == "sticky" {
		p.keys, _ = stickiness.NewExtractor(cfg.Sticky.Keys) // validated with the config
		p.table = stickiness.NewTable(stickiness.TableOptions{
			MaxEntries:  cfg.Sticky.MaxEntries,
			IdleTimeout: cfg.Sticky.IdleTimeout.D,
		})
		if c := cfg.Sticky.Cookie; c != "" {
			p.cookieIdx = slices.Index(cfg.Sticky.Keys, "cookie:"+c)
			for _, s := range p.servers {
				p.cookieIDs = append(p.cookieIDs, serverCookie(s.Addr))
			}
		}
	}
	if cfg.Balance == "leader" {
		p.leader = healthcheck.NewLeader(healthcheck.LeaderOptions{Probe: probe})
	}
	return p
}

func newServer(addr string, cfg *PoolConfig) *Server {
	s := &Server{Addr: addr}
	connectTimeout, idle, nodelay := cfg.ConnectTimeout.D, cfg.ResponseTimeout.D, cfg.NoDelay
	s.client = &fasthttp.HostClient{
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
		RetryIf: func(req *fasthttp.Request) bool { return idempotent(&req.Header) },
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
	return s
}

// serverCookie is the sticky cookie value naming a server: a hash of its address, the same in every
// fairlead with the same config, that does not reveal the address.
func serverCookie(addr string) string {
	h := fnv.New64a()
	h.Write([]byte(addr)) //nolint:errcheck // hash writes never fail
	return strconv.FormatUint(h.Sum64(), 36)
}

// start launches the pool's health checks and sticky table janitor; they stop with ctx or stop.
func (p *Pool) start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	if p.leader != nil {
		p.leader.Start(ctx)
	}
	if p.checker != nil {
		p.checker.Start(ctx)
	}
	if p.table != nil {
		p.table.Start(ctx)
	}
}

// ready is closed when the pool has finished its first round of checks.
func (p *Pool) ready() <-chan struct{} {
	if p.leader != nil {
		return p.leader.Ready()
	}
	return p.checker.Ready()
}

// candidates is a Pool seen as the stickiness.Candidates of its sticky table; the conversion from *Pool
// costs nothing.
type candidates Pool

func (c *candidates) Len() int          { return len(c.servers) }
func (c *candidates) Name(i int) string { return c.servers[i].Addr }
func (c *candidates) Up(i int) bool     { return c.checker.Up(i) }

// Up reports whether server i of a checked pool may take new traffic.
func (p *Pool) Up(i int) bool  { return p.checker.Up(i) }
func (p *Pool) markDown(i int) { p.checker.MarkDown(i) }

// pick returns the server for a request, or -1 if none is usable now. Fast path: one atomic load for a
// leader pool; for a sticky pool a key extraction and a table lookup, without allocating for known keys.
func (p *Pool) pick(ctx *fasthttp.RequestCtx) int {
	if p.leader != nil {
		return p.leader.Current()
	}
	if p.table == nil {
		return p.roundRobin()
	}
	var buf [160]byte
	key, src, ok := p.keys.Key(buf[:0], ctx)
	if !ok {
		return p.roundRobin()
	}
	if src == p.cookieIdx {
		// The sticky cookie names its server directly (as HAProxy's "cookie insert" does); a cookie
		// naming a server that is down or gone falls back to placement by its value.
		v := key[2:]
		for i, id := range p.cookieIDs {
			if string(v) == id && p.Up(i) {
				return i
			}
		}
	}
	return p.table.Place(key, (*candidates)(p))
}

// roundRobin returns the next up server in turn, or -1 if none is up.
func (p *Pool) roundRobin() int {
	n := len(p.servers)
	start := int(p.rr.Add(1))
	for k := 0; k < n; k++ {
		if i := (start + k) % n; p.Up(i) {
			return i
		}
	}
	return -1
}

// errQueueFull means more requests are waiting than max_queue allows.
var errQueueFull = errors.New("queue full")

// wait blocks until pick finds a server or deadline passes (then -1). Requests waiting at once are
// bounded by max_queue; past it wait returns errQueueFull at once. Slow path: only without a leader.
func (p *Pool) wait(ctx *fasthttp.RequestCtx, deadline time.Time) (int, error) {
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
		if i := p.pick(ctx); i >= 0 {
			return i, nil
		}
		d := time.Until(deadline)
		if d <= 0 {
			return -1, nil
		}
		if changed == nil {
			// Checker pools have no change broadcast: look again shortly (slow path, no server up).
			time.Sleep(min(d, 50*time.Millisecond))
			continue
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
