package healthcheck

import (
	"context"
	"log"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// CheckerOptions configures a Checker: the rise/fall health check of an ordinary pool (connection
// servers, sticky HTTP pools). 2xx and 3xx answers pass. An empty Path disables active probing: servers
// are up unless MarkDown takes one down, and then it is tried again after Interval. FastInterval is the
// probe period of a server that is down or changing state.
type CheckerOptions struct {
	Probe
	// Port, if non-zero, replaces each server's port for probes (connection servers may answer health
	// checks on a port of their own).
	Port int
	// Rise consecutive passes bring a down server back up.
	Rise int
	// OnChange is called (from a checker goroutine, or from MarkDown's caller) when a server goes up or
	// down. It must not block for long.
	OnChange func(server int, up bool)
}

// Checker tracks which servers of a pool are up. Up is lock-free and allocation-free: selection policies
// call it on every request.
type Checker struct {
	o         CheckerOptions
	servers   []*checkedServer
	ready     chan struct{}
	readyOnce sync.Once
	pending   atomic.Int32 // servers whose first probe has not answered yet
}

type checkedServer struct {
	addr  string
	probe *prober
	up    atomic.Bool
	wake  chan struct{}

	mu         sync.Mutex // guards the counters below
	run, fails int
	lastStatus int
	lastErr    string
	lastProbe  time.Time
	probes     uint64
	first      bool // the first answer decides the initial state; rise/fall apply afterwards
}

// NewChecker returns a Checker for o; every server starts up. Start begins probing.
func NewChecker(o CheckerOptions) *Checker {
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	c := &Checker{o: o, ready: make(chan struct{})}
	for _, addr := range o.Servers {
		s := &checkedServer{addr: addr, wake: make(chan struct{}, 1), first: true}
		probeAddr := addr
		if o.Port != 0 {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				probeAddr = net.JoinHostPort(host, strconv.Itoa(o.Port))
			}
		}
		s.probe = newProber(probeAddr, &o.Probe)
		s.up.Store(true)
		c.servers = append(c.servers, s)
	}
	if o.Path == "" || len(c.servers) == 0 {
		c.markReady()
	}
	c.pending.Store(int32(len(c.servers)))
	return c
}

// Start launches one goroutine per server; they stop with ctx.
func (c *Checker) Start(ctx context.Context) {
	for i := range c.servers {
		go c.loop(ctx, i)
	}
	if c.o.Path != "" {
		go func() {
			t := time.NewTimer(c.o.Timeout + 100*time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				c.markReady()
			case <-c.ready:
			case <-ctx.Done():
			}
		}()
	}
}

func (c *Checker) markReady() { c.readyOnce.Do(func() { close(c.ready) }) }

// Ready is closed once every server answered its first probe (bounded by Timeout).
func (c *Checker) Ready() <-chan struct{} { return c.ready }

// Up reports whether server i may take new traffic.
func (c *Checker) Up(i int) bool { return c.servers[i].up.Load() }

// MarkDown takes server i down at once, because a live connection to it failed (passive check). It
// comes back through the active probes (rise passes), or after Interval when probing is disabled.
func (c *Checker) MarkDown(i int) {
	s := c.servers[i]
	s.mu.Lock()
	s.run, s.first = 0, false
	s.mu.Unlock()
	if s.up.CompareAndSwap(true, false) {
		c.o.Logf("healthcheck: %s is down (connection failed)", s.addr)
		if c.o.OnChange != nil {
			c.o.OnChange(i, false)
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (c *Checker) loop(ctx context.Context, i int) {
	s := c.servers[i]
	var timer *time.Timer
	if c.o.Path != "" {
		timer = time.NewTimer(0)
	} else {
		timer = time.NewTimer(time.Hour)
		timer.Stop()
	}
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
			if c.o.Path == "" {
				// Passive only: try the server again after Interval.
				timer.Reset(c.o.Interval)
			} else {
				timer.Reset(c.o.FastInterval)
			}
			continue
		case <-timer.C:
		}
		if c.o.Path == "" {
			c.setUp(i, true, "retry after passive failure")
			continue
		}
		start := time.Now()
		c.probeOnce(i)
		timer.Reset(time.Until(start.Add(c.delay(s))))
	}
}

// delay is the wait until the next probe: the random steady pace for a healthy server, FastInterval for
// one that is down or changing state.
func (c *Checker) delay(s *checkedServer) time.Duration {
	s.mu.Lock()
	steady := s.up.Load() && s.fails == 0
	s.mu.Unlock()
	if !steady {
		return c.o.FastInterval
	}
	return c.o.Interval + time.Duration(c.o.Rand()*float64(c.o.IntervalMax-c.o.Interval))
}

func (c *Checker) probeOnce(i int) {
	defer func() {
		if r := recover(); r != nil {
			c.o.Logf("healthcheck: probe of %s panicked: %v", c.servers[i].addr, r)
		}
	}()
	s := c.servers[i]
	status, err := s.probe.get()
	pass := err == nil && status >= 200 && status < 400

	s.mu.Lock()
	s.probes++
	s.lastProbe, s.lastStatus = time.Now(), status
	s.lastErr = ""
	if err != nil {
		s.lastErr = err.Error()
	}
	first := s.first
	s.first = false
	if pass {
		s.run++
		s.fails = 0
	} else {
		s.run = 0
		s.fails++
	}
	up := s.up.Load()
	next := up
	switch {
	case first:
		next = pass
	case up && s.fails >= c.o.Fall:
		next = false
	case !up && s.run >= c.o.Rise:
		next = true
	}
	s.mu.Unlock()

	if next != up {
		what := "status " + strconv.Itoa(status)
		if err != nil {
			what = err.Error()
		}
		c.setUp(i, next, what)
	}
	if first && c.pending.Add(-1) == 0 {
		c.markReady()
	}
}

func (c *Checker) setUp(i int, up bool, why string) {
	s := c.servers[i]
	if !s.up.CompareAndSwap(!up, up) {
		return
	}
	state := "down"
	if up {
		state = "up"
	}
	c.o.Logf("healthcheck: %s is %s (%s)", s.addr, state, why)
	if c.o.OnChange != nil {
		c.o.OnChange(i, up)
	}
}

// Status returns a snapshot of every server's check state.
func (c *Checker) Status() []ServerStatus {
	out := make([]ServerStatus, len(c.servers))
	for i, s := range c.servers {
		s.mu.Lock()
		out[i] = ServerStatus{Addr: s.addr, Up: s.up.Load(), LastStatus: s.lastStatus, LastError: s.lastErr,
			LastProbe: s.lastProbe, Run: s.run, Fails: s.fails, Probes: s.probes}
		s.mu.Unlock()
	}
	return out
}
