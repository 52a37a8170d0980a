package testkit

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

// The benchmark's side of the load generator: a keep-alive HTTP/1.1 client on raw connections with
// fasthttp's parser (HTTPConn: no allocation per request), its closed loop (ClosedLoop: N connections,
// each sending as fast as answers come, into a latency histogram) and OpenAll. The closed loop is the
// hot path the benchmark's CPU-per-op and req/s figures rest on: it is kept as a mode of its own rather
// than run through Load's per-request samples, so the load side costs what it always did. Load (load.go)
// uses HTTPConn when LoadOptions.Raw is set.

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

// RawRequest builds the bytes of one HTTP/1.1 request with keep-alive.
func RawRequest(method, host, path string, body []byte, extra ...string) []byte {
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

// HTTPConn is one client keep-alive connection.
type HTTPConn struct {
	addr    string
	conn    net.Conn
	br      *bufio.Reader
	used    bool // a request was answered on it: a failure before any answer byte may be a stale close
	resp    fasthttp.Response
	timeout time.Duration
	// TLS, if set, makes every connection HTTPS (a full handshake per dial: no session resumption).
	TLS *tls.Config
	// cur and aborted let another goroutine cut the connection short (Abort).
	cur     atomic.Pointer[net.Conn]
	aborted atomic.Bool
}

var errAborted = errors.New("aborted")

// Abort makes the request in flight fail at once and any later dial fail; safe from any goroutine.
func (c *HTTPConn) Abort() {
	c.aborted.Store(true)
	if p := c.cur.Load(); p != nil {
		_ = (*p).SetDeadline(time.Now())
	}
}

// NewHTTPConn returns a connection to addr, dialled at its first request; timeout bounds a dial and a
// request.
func NewHTTPConn(addr string, timeout time.Duration) *HTTPConn {
	return &HTTPConn{addr: addr, timeout: timeout}
}

// Close closes the connection; the next request dials again.
func (c *HTTPConn) Close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// Dial connects now (a request dials by itself when it finds no connection).
func (c *HTTPConn) Dial() error {
	if c.aborted.Load() {
		return errAborted
	}
	conn, err := net.DialTimeout("tcp", c.addr, c.timeout)
	if err != nil {
		return err
	}
	if c.TLS != nil {
		tc := tls.Client(conn, c.TLS)
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

// RawResult is the outcome of one request of an HTTPConn.
type RawResult struct {
	Status   int
	ServedBy string // X-Served-By, when asked for
	Retried  bool   // the first attempt hit a keep-alive connection closed before any answer byte
	Err      error
}

var errStale = errors.New("connection closed before any answer byte")

// Do sends raw and reads the answer. Like an ordinary HTTP client (Go's net/http, browsers) it retries
// once on a fresh connection when a reused keep-alive connection fails before any byte of the answer
// arrived, which is how a server closing an idle connection looks; such a retry is reported.
func (c *HTTPConn) Do(raw []byte, wantServedBy bool) RawResult {
	var res RawResult
	for attempt := 0; attempt < 2; attempt++ {
		if c.conn == nil {
			if err := c.Dial(); err != nil {
				res.Err = err
				return res
			}
		}
		reused := c.used
		err := c.roundTrip(raw)
		if err == nil {
			res.Status = c.resp.StatusCode()
			if wantServedBy {
				res.ServedBy = string(c.resp.Header.Peek("X-Served-By"))
			}
			c.used = true
			if c.resp.ConnectionClose() {
				c.Close()
			}
			res.Err = nil
			return res
		}
		c.Close()
		res.Err = err
		if !(errors.Is(err, errStale) && reused) {
			return res
		}
		res.Retried = true
	}
	return res
}

// Answer is the last answer Do read; valid until the next Do.
func (c *HTTPConn) Answer() *fasthttp.Response { return &c.resp }

func (c *HTTPConn) roundTrip(raw []byte) error {
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

// ClosedLoop runs conns connections for dur (or until ctx ends), each sending raw as soon as the
// answer to the previous one came; over HTTPS when tlsConf is not nil.
func ClosedLoop(ctx context.Context, addr string, tlsConf *tls.Config, conns int, dur time.Duration, raw []byte) *LoadStats {
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
			c := NewHTTPConn(addr, 10*time.Second)
			c.TLS = tlsConf
			defer c.Close()
			for ctx.Err() == nil {
				t0 := time.Now()
				r := c.Do(raw, false)
				if r.Retried {
					st.Retried++
				}
				switch {
				case r.Err != nil:
					if ctx.Err() != nil {
						break
					}
					st.Errors++
					time.Sleep(5 * time.Millisecond) // no hot loop against a refusing proxy
				case r.Status >= 200 && r.Status < 300:
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

// OpenAll runs open(i) for every i in [0, n) on workers goroutines, until each has run, the deadline
// passes, ctx ends, or more than maxFailed have failed. It returns how many failed and the first error.
func OpenAll(ctx context.Context, n, workers int, deadline time.Time, maxFailed int64, open func(i int) error) (failed int64, firstErr any) {
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
