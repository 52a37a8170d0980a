package lb

import (
	"fmt"
	"math/rand/v2"
	"sync"

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
	cycle  *rrCycle // the pool's: the cycle goes on across reloads
	hw     int
	hwb    int64
	header string            // multipart_header; "" without pins
	pins   *stickiness.Table // the pins: made by the pool's first policy, taken over by the next
}

// rrCycle is the one round robin: where the cycle of each tier goes on, for the roundrobin policy and
// for the sticky policy's requests without a key. mu makes "writable, then counted in flight" one
// step, so the order is exact under concurrency and a watermark is never overshot.
type rrCycle struct {
	mu sync.Mutex
	at [2]int // per tier: where the cycle goes on
}

func newRoundRobinPolicy(cfg *config.Pool, old policy) policy {
	rp := &roundRobinPolicy{hw: cfg.HighWatermark, hwb: cfg.HighWatermarkBytes, header: cfg.MultipartHeader}
	if o, ok := old.(*roundRobinPolicy); ok {
		rp.cycle, rp.pins = o.cycle, o.pins
	} else {
		rp.cycle, rp.pins = &rrCycle{}, stickiness.NewTable(stickiness.TableOptions{})
	}
	rp.pins.SetLimits(cfg.MultipartMaxPins, cfg.MultipartTTL.D)
	return rp
}

func (rp *roundRobinPolicy) pick(ctx *fasthttp.RequestCtx, st *poolView, except *Server) choice {
	n := bodyBytes(&ctx.Request.Header)
	if rp.header != "" {
		if id := ctx.Request.Header.Peek(rp.header); len(id) > 0 {
			return rp.pickPinned(id, st, except, n)
		}
	}
	return choice{s: rp.cycle.next(st.active(), except, rp.hw, rp.hwb, n)}
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
			if s != nil && s.Available() && rp.cycle.takeIfWritable(s, rp.hw, rp.hwb, n) {
				return choice{s: s, pinned: true}
			}
			rp.pins.Unpin(id)
			return choice{pinned: true}
		}
	}
	s := rp.cycle.next(st.active(), except, rp.hw, rp.hwb, n)
	if s != nil {
		rp.pins.Pin(id, &st.all, st.all.index(s))
	}
	return choice{s: s}
}

// next returns the next available server of t after the last one chosen, other than except, below
// the watermarks hw and hwb (0: none), counted in flight with n body bytes; or nil. Under slow_start a
// server ramping up takes its turn with a probability of its weight, and passes it on otherwise (taken
// only if no other can).
func (c *rrCycle) next(t *tier, except *Server, hw int, hwb, n int64) *Server {
	k := len(t.servers)
	if k == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.at[t.which] % k
	passed := -1 // a server ramping up under slow_start that passed its turn
	for j := 0; j < k; j++ {
		i := (start + j) % k
		if s := t.servers[i]; s != except && s.Available() && s.writable(hw, hwb) {
			if passed < 0 && t.slowStart > 0 {
				if w := t.Weight(i); w < 1 && rand.Float64() >= w {
					passed = i
					continue
				}
			}
			s.begin(n)
			c.at[t.which] = i + 1
			return s
		}
	}
	if passed >= 0 {
		t.servers[passed].begin(n)
		c.at[t.which] = passed + 1
		return t.servers[passed]
	}
	return nil
}

// takeIfWritable counts a request in flight to s if s is below the watermarks.
func (c *rrCycle) takeIfWritable(s *Server, hw int, hwb, n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.writable(hw, hwb) {
		return false
	}
	s.begin(n)
	return true
}

// report: the watermarks, each server's writable, and the pins. A server that left the pool keeps its
// pins: the next part of such an id must fail with 502 (its server is gone, and the others have not
// seen its first parts), which pickPinned does for a pin whose server is not in the pool; the pin is
// dropped then, or expires with multipart_ttl.
func (rp *roundRobinPolicy) report(st *poolView) policyReport {
	r := policyReport{roundRobin: true, hw: rp.hw, hwb: rp.hwb, writable: make([]bool, len(st.servers)), pinHeader: rp.header}
	for i, s := range st.servers {
		r.writable[i] = s.writable(rp.hw, rp.hwb)
	}
	if rp.header != "" {
		r.pins = rp.pins
	}
	return r
}

// serverLabels are the Prometheus labels of a server: its address and its display name.
func serverLabels(s *Server) string { return fmt.Sprintf(`server=%q,name=%q`, s.Addr, s.Name()) }
