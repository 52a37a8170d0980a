package harness

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The Go load generators: a keep-alive HTTP/1.1 client on raw connections (used where wrk is missing or
// a scenario needs per-request detail), a closed loop (N connections, each sending as fast as answers
// come) and a paced open-ish loop (a steady request rate, as the failover and reload scenarios need).

// Hist is a latency histogram with logarithmic buckets (2% wide) from 1µs to about 100 s.
type Hist struct {
	counts [hbuckets]uint64
	n      uint64
}

const (
	hbuckets = 960
	hgrowth  = 1.02
)

var hlog = math.Log(hgrowth)

// Add records one latency.
func (h *Hist) Add(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = int(math.Log(us) / hlog)
	}
	if i >= hbuckets {
		i = hbuckets - 1
	}
	h.counts[i]++
	h.n++
}

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Quantile returns the q-quantile (0..1), the upper bound of its bucket; 0 when empty.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(math.Pow(hgrowth, float64(i+1)) * float64(time.Microsecond))
		}
	}
	return 0
}

// rawRequest builds the bytes of one HTTP/1.1 request with keep-alive.
func rawRequest(method, host, path string, body []byte, extra ...string) []byte {
	b := fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: fairlead-bench\r\n", method, path, host)
	for i := 0; i+1 < len(extra); i += 2 {
		b = fmt.Appendf(b, "%s: %s\r\n", extra[i], extra[i+1])
	}
	if body != nil {
		b = fmt.Appendf(b, "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n", len(body))
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}

// httpConn is one client keep-alive connection.
type httpConn struct {
	addr    string
	conn    net.Conn
	br      *bufio.Reader
	used    bool // a request was answered on it: a failure before any answer byte may be a stale close
	resp    fasthttp.Response
	timeout time.Duration
	// tls, if set, makes every connection HTTPS (a full handshake per dial: no session resumption).
	tls *tls.Config
	// cur and aborted let another goroutine cut the connection short (abort).
	cur     atomic.Pointer[net.Conn]
	aborted atomic.Bool
}

var errAborted = errors.New("aborted")

// abort makes the request in flight fail at once and any later dial fail; safe from any goroutine.
func (c *httpConn) abort() {
	c.aborted.Store(true)
	if p := c.cur.Load(); p != nil {
		_ = (*p).SetDeadline(time.Now())
	}
}

func newHTTPConn(addr string, timeout time.Duration) *httpConn {
	return &httpConn{addr: addr, timeout: timeout}
}

func (c *httpConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *httpConn) dial() error {
	if c.aborted.Load() {
		return errAborted
	}
	conn, err := net.DialTimeout("tcp", c.addr, c.timeout)
	if err != nil {
		return err
	}
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		_ = tc.SetDeadline(time.Now().Add(c.timeout))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return fmt.Errorf("tls handshake: %w", err)
		}
		conn = tc
	}
	c.conn, c.used = conn, false
	c.cur.Store(&conn)
	if c.aborted.Load() {
		_ = conn.SetDeadline(time.Now())
	}
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	return nil
}

// result of one request.
type reqResult struct {
	status   int
	servedBy string
	retried  bool // the first attempt hit a keep-alive connection closed before any answer byte
	err      error
}

var errStale = errors.New("connection closed before any answer byte")

// do sends raw and reads the answer. Like an ordinary HTTP client (Go's net/http, browsers) it retries
// once on a fresh connection when a reused keep-alive connection fails before any byte of the answer
// arrived, which is how a server closing an idle connection looks; such a retry is reported.
func (c *httpConn) do(raw []byte, wantServedBy bool) reqResult {
	var res reqResult
	for attempt := 0; attempt < 2; attempt++ {
		if c.conn == nil {
			if err := c.dial(); err != nil {
				res.err = err
				return res
			}
		}
		reused := c.used
		err := c.roundTrip(raw)
		if err == nil {
			res.status = c.resp.StatusCode()
			if wantServedBy {
				res.servedBy = string(c.resp.Header.Peek("X-Served-By"))
			}
			c.used = true
			if c.resp.ConnectionClose() {
				c.close()
			}
			res.err = nil
			return res
		}
		c.close()
		res.err = err
		if !(errors.Is(err, errStale) && reused) {
			return res
		}
		res.retried = true
	}
	return res
}

func (c *httpConn) roundTrip(raw []byte) error {
	_ = c.conn.SetDeadline(time.Now().Add(c.timeout))
	if _, err := c.conn.Write(raw); err != nil {
		return fmt.Errorf("%w: %v", errStale, err)
	}
	if _, err := c.br.Peek(1); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return err
		}
		return fmt.Errorf("%w: %v", errStale, err)
	}
	c.resp.Reset()
	return c.resp.Read(c.br)
}

// LoadStats sums a closed-loop run.
type LoadStats struct {
	Requests uint64 // answered with 2xx
	Non2xx   uint64
	Errors   uint64
	Retried  uint64
	Elapsed  time.Duration
	Hist     Hist
}

// closedLoopTLS is closedLoop over HTTPS when tlsConf is not nil.
func closedLoopTLS(ctx context.Context, addr string, tlsConf *tls.Config, conns int, dur time.Duration, raw []byte) *LoadStats {
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var mu sync.Mutex
	total := &LoadStats{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &LoadStats{}
			c := newHTTPConn(addr, 10*time.Second)
			c.tls = tlsConf
			defer c.close()
			for ctx.Err() == nil {
				t0 := time.Now()
				r := c.do(raw, false)
				if r.retried {
					st.Retried++
				}
				switch {
				case r.err != nil:
					if ctx.Err() != nil {
						break
					}
					st.Errors++
					time.Sleep(5 * time.Millisecond) // no hot loop against a refusing proxy
				case r.status >= 200 && r.status < 300:
					st.Requests++
					st.Hist.Add(time.Since(t0))
				default:
					st.Non2xx++
				}
			}
			mu.Lock()
			total.Requests += st.Requests
			total.Non2xx += st.Non2xx
			total.Errors += st.Errors
			total.Retried += st.Retried
			total.Hist.Merge(&st.Hist)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	return total
}

// sample is one request of a paced run.
type sample struct {
	start, end time.Time
	status     int
	servedBy   string
	retried    bool
	err        error
}

func (s sample) ok() bool { return s.err == nil && s.status == 200 }

// pacedLoad sends GETs at about rate req/s spread over workers connections until Stop (or maxDur
// passes). A worker whose request is held longer than its slot skips the missed slots, so a stall lowers
// the rate rather than piling requests up afterwards.
type pacedLoad struct {
	mu         sync.Mutex
	samples    []sample
	conns      []*httpConn
	aborting   bool
	unfinished int
	stop       chan struct{}
	done       chan struct{}
}

func startPaced(addr string, workers, rate int, maxDur time.Duration, path string) *pacedLoad {
	pl := &pacedLoad{stop: make(chan struct{}), done: make(chan struct{})}
	raw := rawRequest("GET", addr, path, nil)
	period := time.Duration(float64(time.Second) * float64(workers) / float64(rate))
	deadline := time.Now().Add(maxDur)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := newHTTPConn(addr, 10*time.Second)
			defer c.close()
			pl.mu.Lock()
			pl.conns = append(pl.conns, c)
			pl.mu.Unlock()
			next := time.Now().Add(period * time.Duration(w) / time.Duration(workers))
			for {
				if d := time.Until(next); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-pl.stop:
					case <-t.C:
					}
					t.Stop()
				}
				select {
				case <-pl.stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				s := sample{start: time.Now()}
				r := c.do(raw, true)
				s.end = time.Now()
				s.status, s.servedBy, s.retried, s.err = r.status, r.servedBy, r.retried, r.err
				pl.mu.Lock()
				if pl.aborting {
					pl.unfinished++
					pl.mu.Unlock()
					return
				}
				pl.samples = append(pl.samples, s)
				pl.mu.Unlock()
				if r.err != nil {
					time.Sleep(5 * time.Millisecond)
				}
				next = next.Add(period)
				if now := time.Now(); next.Before(now) {
					next = now
				}
			}
		}(w)
	}
	go func() { wg.Wait(); close(pl.done) }()
	return pl
}

// Snapshot returns a copy of the samples finished so far, in completion order.
func (pl *pacedLoad) Snapshot() []sample {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return append([]sample(nil), pl.samples...)
}

// Stop ends the run: it waits up to grace for the requests in flight, then closes their connections;
// requests cut short that way are not samples, only counted (unfinished).
func (pl *pacedLoad) Stop(grace time.Duration) (ss []sample, unfinished int) {
	close(pl.stop)
	select {
	case <-pl.done:
	case <-time.After(grace):
		pl.mu.Lock()
		pl.aborting = true
		conns := pl.conns
		pl.mu.Unlock()
		for _, c := range conns {
			c.abort()
		}
		<-pl.done
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return append([]sample(nil), pl.samples...), pl.unfinished
}

// summarize counts a set of samples.
type pacedSummary struct {
	Sent, OK, Failed, Retried int
	FirstErr                  string
}

func summarize(ss []sample) pacedSummary {
	var p pacedSummary
	for _, s := range ss {
		p.Sent++
		if s.retried {
			p.Retried++
		}
		if s.ok() {
			p.OK++
			continue
		}
		p.Failed++
		if p.FirstErr == "" {
			if s.err != nil {
				p.FirstErr = s.err.Error()
			} else {
				p.FirstErr = fmt.Sprintf("status %d", s.status)
			}
		}
	}
	return p
}

// openAll runs open(i) for every i in [0, n) on workers goroutines, until each has run, the deadline
// passes, ctx ends, or more than maxFailed have failed. It returns how many failed and the first error.
func openAll(ctx context.Context, n, workers int, deadline time.Time, maxFailed int64, open func(i int) error) (failed int64, firstErr any) {
	var fails atomic.Int64
	var first atomic.Value
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || time.Now().After(deadline) || ctx.Err() != nil || fails.Load() > maxFailed {
					return
				}
				if err := open(i); err != nil {
					fails.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	return fails.Load(), first.Load()
}
