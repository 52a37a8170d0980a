package healthcheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/dialer"
	"github.com/valyala/fasthttp"
)

// Options configures a Checker or a Leader: what every probe sends, where, how often, and what a run of
// answers means. Durations must be positive; the config loader validates them.
type Options struct {
	// Pool names the pool in events and logs.
	Pool string
	// Path is probed with GET. "" disables active probing (a Checker then relies on live traffic alone),
	// unless Connect is set.
	Path string
	// Connect, with an empty Path, probes by opening a connection (and, with TLS, completing the
	// handshake): a server that accepts it passes (Checker only). It is the check of a pool whose servers
	// fairlead reaches with its own protocol (a relay's upstream), where no path is known to answer.
	Connect bool
	// Credentials is base64 of user:password, sent as "Authorization: Basic <Credentials>"; "" sends none.
	// It is never logged.
	Credentials string
	// Port, if non-zero, replaces each server's port for probes.
	Port int
	// TLS, if set, sends probes over HTTPS with this client config (the servers' CAs, a client
	// certificate); an empty ServerName is each probed server's host. A probe whose handshake fails has
	// failed; a TLS failure (a certificate that does not verify, a server refusing the session, a server
	// not speaking TLS) is logged naming the server, once per run of the same failure. nil probes over
	// plain HTTP.
	TLS *tls.Config
	// Interval and IntervalMax bound the random steady-state wait between two probes of one server.
	Interval, IntervalMax time.Duration
	// FastInterval is the probe period while things are failing or changing: a Leader's leader is
	// failing or unknown, or another server answers 200; a Checker's server is down, changing state, or
	// failing live traffic.
	FastInterval time.Duration
	// Timeout bounds one probe; a probe that times out has failed.
	Timeout time.Duration
	// Fall consecutive failures take a server down (a leader: fall non-200 answers end its term).
	Fall int
	// Rise consecutive passes bring a down server back (Checker only).
	Rise int
	// FailbackInterval, if non-zero, bounds the wait between two probes of a primary server while
	// traffic is on backups: a down primary of a Checker (or, without active probing, its retry), and
	// every primary of a Leader whose leader is a backup. Traffic returns to a primary as soon as its
	// checks pass again.
	FailbackInterval time.Duration
	// Bus receives the events; nil publishes nowhere.
	Bus *event.Bus
	// Logf logs what events do not carry (a failing leader's answers, a panicking probe). Default log.Printf.
	Logf func(format string, args ...any)
	// Rand returns a number in [0, 1) for probe jitter. Default math/rand/v2.Float64.
	Rand func() float64

	// script, if set, answers every probe instead of an HTTP GET (status, or 0 and an error), given the
	// probed address: tests script servers under testing/synctest, whose fake clock sockets would not
	// follow. Update keeps it.
	script func(addr string) (int, error)
}

// probes reports whether the servers are probed at all (else only live traffic judges them).
func (o *Options) probes() bool { return o.Path != "" || o.Connect }

func (o *Options) setDefaults() {
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Bus == nil {
		o.Bus = event.NewBus()
	}
}

// failback bounds d by FailbackInterval for a primary target.
func (o *Options) failback(t *Target, d time.Duration) time.Duration {
	if o.FailbackInterval > 0 && !t.backup.Load() {
		return min(d, o.FailbackInterval)
	}
	return d
}

// steady is a random wait in [Interval, IntervalMax]: probes of many servers do not fall in step.
func (o *Options) steady() time.Duration {
	return o.Interval + time.Duration(o.Rand()*float64(o.IntervalMax-o.Interval))
}

// Loop calls fn at once, then each time the wait that next returns (computed after fn) has passed. A
// signal on kick runs fn now; one on wake recomputes the wait. It returns when ctx is done. It is the
// one timer loop of fairlead's periodic work: every prober, and the sticky table's janitor.
func Loop(ctx context.Context, kick, wake <-chan struct{}, next func() time.Duration, fn func()) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-kick:
			timer.Stop()
		case <-wake:
			timer.Stop()
			if d := next(); d > 0 {
				timer.Reset(d)
				continue
			}
		}
		fn()
		timer.Reset(max(next(), 0))
	}
}

// judge is what a Checker or a Leader makes of answers.
type judge interface {
	// answer takes one probe's answer of t, publishing what it changes.
	answer(t *Target, start time.Time, status int, err error)
	// pace is the wait from t's latest probe start to its next one.
	pace(t *Target) time.Duration
	// firstRoundOver ends the first round (every first-round target answered, or the timeout passed).
	firstRoundOver()
}

// group is what Checker and Leader share: the set of targets, one probe loop per target, the first
// round, and applying a server set change or new options while running.
type group struct {
	j    judge
	pool string // Options.Pool, Bus and Logf: fixed for the group's life
	bus  *event.Bus
	logf func(format string, args ...any)

	mu      sync.Mutex
	o       Options   // guarded by mu: Update replaces it
	targets []*Target // config order
	ctx     context.Context
	pending map[*Target]bool // first-round targets that have not answered yet

	ready     chan struct{}
	readyOnce sync.Once
}

func (g *group) init(j judge, o Options, targets []*Target) {
	o.setDefaults()
	g.j, g.o, g.targets = j, o, slices.Clone(targets)
	g.pool, g.bus, g.logf = o.Pool, o.Bus, o.Logf
	g.ready = make(chan struct{})
	g.pending = map[*Target]bool{}
	for _, t := range targets {
		g.pending[t] = true
	}
}

// Start launches the probe loops; they stop with ctx. The first probe of every server goes at once.
func (g *group) Start(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ctx = ctx
	for _, t := range g.targets {
		g.startLocked(t)
	}
	if !g.o.probes() || len(g.pending) == 0 {
		go g.j.firstRoundOver()
		return
	}
	limit := g.o.Timeout + 100*time.Millisecond // plus a little for scheduling
	go func() {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-t.C:
			g.j.firstRoundOver()
		case <-g.ready:
		case <-ctx.Done():
		}
	}()
}

// Probe asks for an immediate probe of t (an operator's re-probe); a target of another group is ignored.
func (g *group) Probe(t *Target) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Contains(g.targets, t) {
		signal(t.kick)
	}
}

// Ready is closed once the first round of probes has answered (bounded by the probe timeout).
func (g *group) Ready() <-chan struct{} { return g.ready }

func (g *group) markReady() { g.readyOnce.Do(func() { close(g.ready) }) }

// answeredFirst records that t answered; it reports whether that completed the first round.
func (g *group) answeredFirstLocked(t *Target) bool {
	if !g.pending[t] {
		return false
	}
	delete(g.pending, t)
	return len(g.pending) == 0
}

func (g *group) startLocked(t *Target) {
	if g.ctx == nil || !g.o.probes() {
		return
	}
	ctx, cancel := context.WithCancel(g.ctx)
	t.stop = cancel
	pr := newProber(probeAddr(t.addr, g.o.Port), &g.o)
	next := func() time.Duration {
		return time.Until(time.Unix(0, t.lastStart.Load()).Add(g.j.pace(t)))
	}
	go Loop(ctx, t.kick, t.wake, next, func() { g.probe(ctx, t, pr) })
}

func (g *group) stopLocked(t *Target) {
	if t.stop != nil {
		t.stop()
		t.stop = nil
	}
	if t.retry != nil {
		t.retry.Stop()
		t.retry = nil
	}
}

func (g *group) probe(ctx context.Context, t *Target, pr *prober) {
	defer func() {
		t.inProgress.Store(0) // (a panicking probe included)
		// A checker must never take the process down; log and carry on with the next probe.
		if r := recover(); r != nil {
			g.logf("healthcheck: probe of %s panicked: %v", t.addr, r)
		}
	}()
	start := time.Now()
	t.lastStart.Store(start.UnixNano())
	t.inProgress.Store(start.UnixNano())
	status, err := pr.get()
	t.inProgress.Store(0) // answered (or failed): status and err are the latest answer
	if ctx.Err() != nil {
		return // stopped meanwhile: a removed server, or new options
	}
	pr.noteTLS(g, err)
	g.j.answer(t, start, status, err)
	if t.awaited.Load() > 0 && t.lastPassAt.Load() == start.UnixNano() {
		g.bus.Wake(g.pool) // a request waits for this server to answer for itself (AwaitPass)
	}
	e := event.Event{Kind: event.CheckAnswered, Server: t.addr, Status: status, Latency: time.Since(start)}
	if err != nil {
		e.Detail = err.Error()
	}
	g.publish(e)
}

// setLocked applies a server set change: targets kept keep their loops, removed ones stop, added ones
// start probing at once. It returns the removed targets, and whether removing them ended the first
// round (the caller then calls firstRoundOver once it released the lock).
func (g *group) setLocked(targets []*Target) (removed []*Target, roundDone bool) {
	waiting := len(g.pending)
	for _, t := range g.targets {
		if !slices.Contains(targets, t) {
			g.stopLocked(t)
			delete(g.pending, t)
			removed = append(removed, t)
		}
	}
	for _, t := range targets {
		if !slices.Contains(g.targets, t) {
			g.startLocked(t)
		}
	}
	g.targets = slices.Clone(targets)
	return removed, waiting > 0 && len(g.pending) == 0 && g.ctx != nil
}

// updateLocked applies new options (another path, interval, timeout, fall...): every probe loop restarts
// with them, and every server keeps its state. Pool, Bus and Logf stay as they were.
func (g *group) updateLocked(o Options) {
	o.Pool, o.Bus, o.Logf = g.pool, g.bus, g.logf
	if o.Rand == nil {
		o.Rand = g.o.Rand
	}
	if o.script == nil {
		o.script = g.o.script
	}
	for _, t := range g.targets {
		g.stopLocked(t)
	}
	g.o = o
	for _, t := range g.targets {
		g.startLocked(t)
	}
}

// Status returns a snapshot of every server's check state, in config order.
func (g *group) Status() []ServerStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]ServerStatus, len(g.targets))
	now := time.Now()
	for i, t := range g.targets {
		out[i] = t.status(now, g.o.Timeout)
	}
	return out
}

func (g *group) publish(e event.Event) {
	e.Pool = g.pool
	g.bus.Publish(e)
}

// prober sends the probes of one server: GET <Path> with the Basic credentials, bounded by Timeout.
// It is used by one goroutine at a time.
type prober struct {
	addr    string // where probes go (host:port)
	path    string
	auth    string // "Basic <credentials>", or "" for none
	timeout time.Duration
	client  *fasthttp.HostClient
	script  func(addr string) (int, error) // Options.script: a test's answers
	tls     *tls.Config                    // Options.TLS for this server; nil: plain HTTP
	alert   atomic.Pointer[error]          // a TLS alert the server sent during the latest probe
	tlsLog  string                         // the TLS failure last logged; "" once a probe got past TLS
}

func newProber(addr string, o *Options) *prober {
	pr := &prober{addr: addr, path: o.Path, timeout: o.Timeout, script: o.script}
	if o.Credentials != "" {
		pr.auth = "Basic " + o.Credentials
	}
	if o.TLS != nil {
		pr.tls = o.TLS.Clone()
		if pr.tls.ServerName == "" {
			pr.tls.ServerName, _, _ = net.SplitHostPort(addr)
		}
	}
	timeout := o.Timeout
	pr.client = &fasthttp.HostClient{
		Addr:                addr,
		Name:                "fairlead-check",
		MaxConns:            2,
		ReadTimeout:         timeout,
		WriteTimeout:        timeout,
		MaxIdleConnDuration: o.IntervalMax + time.Second,
		Dial:                pr.dial,
		// An answer it cannot read is an error without the answer's bytes: the error is the
		// probe's detail in events and the log.
		SecureErrorLogMessage: true,
	}
	return pr
}

// dial connects to the server, over TLS when the pool has it. The handshake runs here, not through the
// HostClient's IsTLS, so that the connection can report the alerts a server sends after it: with TLS
// 1.3 a server refuses a missing or unknown client certificate only after the client's side of the
// handshake is over, and fasthttp reports any error on a response's first byte as "the server closed
// connection".
func (pr *prober) dial(addr string) (net.Conn, error) {
	c, err := (&dialer.Dialer{Addr: addr, Timeout: pr.timeout, TLS: pr.tls}).Dial() // the dialer traffic uses
	if err != nil || pr.tls == nil {
		return c, err
	}
	return &alertConn{Conn: c, alert: &pr.alert}, nil
}

// alertConn is a probe's TLS connection: it keeps the alert that ends a read (remote error: tls: ...).
type alertConn struct {
	net.Conn
	alert *atomic.Pointer[error]
}

func (c *alertConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "remote error" {
		c.alert.Store(&err)
	}
	return n, err
}

// noteTLS logs a probe's TLS failure naming the server: once per run of the same failure, so that a
// wrong CA is said clearly without a line at every probe. Any other outcome ends the run.
func (pr *prober) noteTLS(g *group, err error) {
	why := tlsFailure(err)
	if why != "" && why != pr.tlsLog {
		g.logf("healthcheck: pool %s: %s: %s", g.pool, pr.addr, why)
	}
	pr.tlsLog = why
}

// tlsFailure describes err if TLS failed it ("" otherwise): a certificate that does not verify (an
// unknown authority, another name, expired), an alert from the server (a client certificate it
// requires or refuses), or a server that does not speak TLS.
func tlsFailure(err error) string {
	if err == nil {
		return ""
	}
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
		op      *net.OpError
	)
	switch {
	case errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid):
		return "TLS certificate verification failed: " + err.Error()
	case errors.As(err, &op) && op.Op == "remote error":
		return "the server refused the TLS session: " + err.Error()
	case errors.As(err, &record):
		return "the server does not speak TLS: " + err.Error()
	}
	return ""
}

// get sends one probe and returns the answer's status, or 0 and the error (a timeout included). A
// connect probe (no path) returns 0 and nil once the connection is open.
func (pr *prober) get() (int, error) {
	if pr.script != nil {
		return pr.script(pr.addr)
	}
	if pr.path == "" {
		c, err := pr.dial(pr.addr)
		if err != nil {
			return 0, err
		}
		return 0, c.Close()
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(pr.path)
	req.Header.SetHost(pr.addr)
	req.Header.SetMethod(fasthttp.MethodGet)
	if pr.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, pr.auth)
	}
	resp.SkipBody = true
	pr.alert.Store(nil)
	if err := pr.client.DoTimeout(req, resp, pr.timeout); err != nil {
		if alert := pr.alert.Swap(nil); alert != nil {
			return 0, *alert // what the server said rather than "the server closed connection"
		}
		return 0, probeError(err, pr.timeout)
	}
	return resp.StatusCode(), nil
}

// probeError says in words what became of a probe that got no answer, without the HTTP library's
// names (they reach the log, the events and /status): a timeout is not an answer. A timeout of 0 is
// not said (a live request's, whose limit the health check does not know).
func probeError(err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		if timeout <= 0 {
			return errors.New("no answer: timed out")
		}
		return fmt.Errorf("no answer: timed out after %s", timeout)
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return errors.New("no answer: the server closed the connection")
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return errors.New("no answer: the previous probes still wait")
	}
	// A failed connect says why in the system's words ("connection refused"), not the library's
	// ("error when dialing ADDR: dial tcp ADDR: connect: …").
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" && oe.Err != nil {
		why := oe.Err
		var se *os.SyscallError
		if errors.As(why, &se) {
			why = se.Err
		}
		return fmt.Errorf("no connection: %v", why)
	}
	if msg := err.Error(); strings.HasPrefix(msg, "fasthttp: ") {
		return errors.New(strings.TrimPrefix(msg, "fasthttp: "))
	}
	return err
}
