package lb

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/stickiness"
	"github.com/valyala/fasthttp"
)

// roundRobinPolicy is balance = "roundrobin", the policy of the ThingWorx connectors (Azure IoT Hub
// Connector, eMessage Connector, Connection Server) over active-active platform instances: each request
// goes to the next server of a circular list (config order) that is connected (Server.Available) and
// writable (below high_watermark requests and high_watermark_bytes body bytes in flight); a server that
// is not is skipped and the cycle goes on after the server chosen. Choosing and counting the request
// in flight happen under one lock, so the order is exact under concurrency and a watermark is never
// overshot.
//
// With multipart_header, the first request carrying an id is balanced as usual and pins the id to its
// server; later requests with the id go to that server while it is connected and writable, and
// otherwise fail (choice.pinned without a server): the other servers have not seen the first parts.
type roundRobinPolicy struct {
	cursor *rrCursor // the pool's: the cycle goes on across reloads
	hw     int
	hwb    int64
	header string            // multipart_header; "" without pins
	pins   *stickiness.Table // the pool's
}

// rrCursor is where the cycle of each tier goes on; mu also makes "writable, then counted in flight"
// one step.
type rrCursor struct {
	mu   sync.Mutex
	next [2]int // per tier
}

func newRoundRobinPolicy(p *Pool, cfg *config.Pool) policy {
	if p.pins == nil {
		p.pins = stickiness.NewTable(stickiness.TableOptions{})
	}
	p.pins.SetLimits(cfg.MultipartMaxPins, cfg.MultipartTTL.D)
	return &roundRobinPolicy{cursor: &p.cursor, hw: cfg.HighWatermark, hwb: cfg.HighWatermarkBytes,
		header: cfg.MultipartHeader, pins: p.pins}
}

func (rp *roundRobinPolicy) pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice {
	n := bodyBytes(&ctx.Request.Header)
	if rp.header != "" {
		if id := ctx.Request.Header.Peek(rp.header); len(id) > 0 {
			return rp.pickPinned(id, st, except, n)
		}
	}
	return choice{s: rp.next(st.active(), except, n)}
}

// pickPinned routes a request of multi-part id.
func (rp *roundRobinPolicy) pickPinned(id []byte, st *poolView, except *Server, n int64) choice {
	if i, ok := rp.pins.Lookup(id, &st.all); ok {
		var s *Server
		if i >= 0 {
			s = st.servers[i]
		}
		// A pin to except was made by this very request, which failed there before any answer and is
		// being retried (a pinned request is never retried): it is placed anew below.
		if s == nil || s != except {
			if s != nil && s.Available() && rp.takeIfWritable(s, n) {
				return choice{s: s, pinned: true}
			}
			rp.pins.Unpin(id)
			return choice{pinned: true}
		}
	}
	s := rp.next(st.active(), except, n)
	if s != nil {
		rp.pins.Pin(id, &st.all, st.all.index(s))
	}
	return choice{s: s}
}

// next returns the next connected and writable server of t after the last one chosen, other than
// except, counted in flight; or nil.
func (rp *roundRobinPolicy) next(t *tier, except *Server, n int64) *Server {
	k := len(t.servers)
	if k == 0 {
		return nil
	}
	c := rp.cursor
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.next[t.which] % k
	passed := -1 // a server ramping up under slow_start that passed its turn (taken if no other can)
	for j := 0; j < k; j++ {
		i := (start + j) % k
		if s := t.servers[i]; s != except && s.Available() && s.writable(rp.hw, rp.hwb) {
			if passed < 0 && t.slowStart > 0 {
				if w := t.Weight(i); w < 1 && rand.Float64() >= w {
					passed = i
					continue
				}
			}
			s.begin(n)
			c.next[t.which] = i + 1
			return s
		}
	}
	if passed >= 0 {
		t.servers[passed].begin(n)
		c.next[t.which] = passed + 1
		return t.servers[passed]
	}
	return nil
}

// takeIfWritable counts a request in flight to s if s is writable.
func (rp *roundRobinPolicy) takeIfWritable(s *Server, n int64) bool {
	c := rp.cursor
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.writable(rp.hw, rp.hwb) {
		return false
	}
	s.begin(n)
	return true
}

func (rp *roundRobinPolicy) refuses(int) bool                                      { return false }
func (rp *roundRobinPolicy) cookie(*fasthttp.RequestCtx, *Server) (string, string) { return "", "" }
func (rp *roundRobinPolicy) hold(*fasthttp.RequestCtx, *Server) func()             { return nil }

// removed keeps the pins to s: the next part of such an id must fail with 502 (its server is gone, and
// the others have not seen its first parts), which pickPinned does for a pin whose server is not in the
// pool; the pin is dropped then, or expires with multipart_ttl.
func (rp *roundRobinPolicy) removed(*Server) {}

func (rp *roundRobinPolicy) describe(ps *admin.PoolStatus, st *poolView) {
	ps.HighWatermark, ps.HighWatermarkBytes = rp.hw, rp.hwb
	for i := range ps.Servers {
		ps.Servers[i].Writable = st.servers[i].writable(rp.hw, rp.hwb)
	}
	if rp.header == "" {
		return
	}
	ps.MultipartHeader = rp.header
	ps.Pins = rp.pins.Len()
	counts := rp.pins.CountByServer()
	for i := range ps.Servers {
		ps.Servers[i].Pins = counts[ps.Servers[i].Addr]
	}
}

func (rp *roundRobinPolicy) writeMetrics(w io.Writer, l string, st *poolView) {
	metrics.WriteGaugeUint64(w, "fairlead_pool_high_watermark{"+l+"}", uint64(rp.hw))
	metrics.WriteGaugeUint64(w, "fairlead_pool_high_watermark_bytes{"+l+"}", uint64(rp.hwb))
	var counts map[string]int
	if rp.header != "" {
		metrics.WriteGaugeUint64(w, "fairlead_pool_pins{"+l+"}", uint64(rp.pins.Len()))
		counts = rp.pins.CountByServer()
	}
	for _, s := range st.servers {
		sl := l + "," + serverLabels(s)
		metrics.WriteGaugeUint64(w, "fairlead_server_writable{"+sl+"}", boolGauge(s.writable(rp.hw, rp.hwb)))
		if counts != nil {
			metrics.WriteGaugeUint64(w, "fairlead_server_pins{"+sl+"}", uint64(counts[s.Addr]))
		}
	}
}

// serverLabels are the Prometheus labels of a server: its address and its display name.
func serverLabels(s *Server) string { return fmt.Sprintf(`server=%q,name=%q`, s.Addr, s.Name()) }
