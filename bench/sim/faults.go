package sim

import (
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The fault knobs of a platform beyond its State, for the fault suite (bench/faults): a platform-wide
// answer delay (a slow leader), a LeaderCheck that alternates 200 and 503 (a flapping leader), and the
// record of which requests reached a platform, by an id header (so that a test can prove no request
// was delivered twice).

// SetDelay delays every answer of the platform by d, LeaderCheck probes and WebSocket upgrades
// included, as a node whose JVM is overloaded answers everything late; 0 (or less) clears it. The delay
// is taken when a request reaches the handler, after it was counted and its delivery recorded, and is
// cut short (the connection closed without an answer) when the platform goes Dead. A ?delay=D query
// parameter adds to it. Hung and Dead platforms still never answer.
func (p *Platform) SetDelay(d time.Duration) {
	p.delay.Store(int64(max(d, 0)))
	p.logf("%s: delay=%s", p.Name, max(d, 0))
}

// Delay returns the delay set by SetDelay, 0 if none.
func (p *Platform) Delay() time.Duration {
	return time.Duration(p.delay.Load())
}

// SetLeaderCheckFlap makes LeaderCheck probes with the right credentials alternate between 503 and 200
// (true), whatever the state: the first probe after turning it on gets 503, the next 200, and so on, as
// a leader whose HA check flaps does. A status forced with SetLeaderCheckStatus still wins, probes
// without the right credentials still get 401, and Hung or Dead platforms still do not answer. false
// goes back to the state-derived answer.
func (p *Platform) SetLeaderCheckFlap(on bool) {
	p.flapN.Store(0)
	p.flap.Store(on)
	p.logf("%s: leadercheck flap=%v", p.Name, on)
}

// LeaderCheckFlap reports whether SetLeaderCheckFlap is on.
func (p *Platform) LeaderCheckFlap() bool {
	return p.flap.Load()
}

// flapStatus returns the next answer of a flapping LeaderCheck: 503, 200, 503, ...
func (p *Platform) flapStatus() int {
	if p.flapN.Add(1)%2 == 1 {
		return fasthttp.StatusServiceUnavailable
	}
	return fasthttp.StatusOK
}

// delayAnswer waits the delay set by SetDelay; it reports false when the platform stopped meanwhile
// (the caller then drops the connection).
func (p *Platform) delayAnswer() bool {
	return p.sleep(time.Duration(p.delay.Load()))
}

// Deliveries returns, for every value of Options.DeliveryHeader seen on an ordinary request that reached
// this platform's handler (since the start or the last ResetCounters), how many times it arrived. A
// request counts as delivered once its header reached the handler, whatever happened next (an answer, a
// hang, a delay cut short by going Dead). Nil without a DeliveryHeader.
func (p *Platform) Deliveries() map[string]int {
	if p.delivery == nil {
		return nil
	}
	p.delivery.mu.Lock()
	defer p.delivery.mu.Unlock()
	return maps.Clone(p.delivery.ids)
}

// Deliveries returns Platform.Deliveries summed over the cluster's platforms: an id with a count above
// 1 was delivered more than once (to one platform or to several).
func (c *Cluster) Deliveries() map[string]int {
	out := map[string]int{}
	for _, p := range c.Platforms {
		for id, n := range p.Deliveries() {
			out[id] += n
		}
	}
	return out
}

// deliveries records the ids of the requests that reached one platform.
type deliveries struct {
	header []byte
	log    *lineLog // nil without Options.DeliveryLog

	mu  sync.Mutex
	ids map[string]int
}

func newDeliveries(opts *Options, log *lineLog) *deliveries {
	if opts.DeliveryHeader == "" {
		return nil
	}
	return &deliveries{header: []byte(opts.DeliveryHeader), log: log, ids: map[string]int{}}
}

// record notes the request's id, if it carries one, before anything is answered.
func (d *deliveries) record(name string, ctx *fasthttp.RequestCtx) {
	if d == nil {
		return
	}
	v := ctx.Request.Header.PeekBytes(d.header)
	if len(v) == 0 {
		return
	}
	id := string(v)
	d.mu.Lock()
	d.ids[id]++
	d.mu.Unlock()
	d.log.line(name, id)
}

func (d *deliveries) reset() {
	if d == nil {
		return
	}
	d.mu.Lock()
	clear(d.ids)
	d.mu.Unlock()
}

// lineLog is Options.DeliveryLog shared by the platforms of a cluster: one "<platform> <id>\n" line per
// delivery, written in one Write call, so that a file survives the process being killed with every
// delivery recorded before the kill.
type lineLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineLog) line(name, id string) {
	if l == nil {
		return
	}
	b := fmt.Appendf(nil, "%s %s\n", name, id)
	l.mu.Lock()
	_, _ = l.w.Write(b)
	l.mu.Unlock()
}
