package lb

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"
)

// Admission of new tunnels ([pools.NAME] new_tunnels_per_second): each server admits upgrades at a rate,
// with a burst of one second's worth, through golang.org/x/time/rate's reservations: an upgrade over
// the rate reserves the server's next free slot and waits for it in the pool's queue, so the waiters
// of a server are admitted first come first served, exactly at the rate. One whose slot is past the
// request's queue deadline, or that finds max_queue full, gives its slot back and gets
// unavailable_status with a Retry-After spread over the wait it would have had.

// admitter returns s's limiter at r new tunnels per second (burst r), made, or set anew after a reload
// changed r.
func (s *Server) admitter(r int) *rate.Limiter {
	for {
		l := s.admit.Load()
		switch {
		case l == nil:
			if nl := rate.NewLimiter(rate.Limit(r), r); s.admit.CompareAndSwap(nil, nl) {
				return nl
			}
		case l.Limit() != rate.Limit(r):
			l.SetLimit(rate.Limit(r))
			l.SetBurst(r)
			return l
		default:
			return l
		}
	}
}

// admitTunnel admits an upgrade to s under the pool's new_tunnels_per_second: at once, or after waiting
// for s's next slot (within the request's queue deadline, set now if it was not yet, and max_queue).
// false when it could not be admitted in time: the answer (unavailable_status, Retry-After) is written.
func (px *proxy) admitTunnel(ctx *fasthttp.RequestCtx, p *Pool, st *poolView, s *Server, deadline *time.Time) bool {
	r := st.cfg.NewTunnelsPerSecond
	if r <= 0 {
		return true
	}
	now := time.Now()
	res := s.admitter(r).ReserveN(now, 1)
	wait := res.DelayFrom(now)
	if wait == 0 {
		px.noteAdmitted(s, now)
		return true
	}
	if deadline.IsZero() {
		*deadline = now.Add(st.cfg.QueueTimeout.D)
	}
	queued := p.waiting.Add(1)
	defer p.waiting.Add(-1)
	if now.Add(wait).After(*deadline) || queued > int64(st.cfg.MaxQueue) {
		res.CancelAt(now) // the slot goes to the next upgrade
		s.tunnelsLimited.Add(1)
		unavailable(ctx, p, st)
		if st.cfg.UnavailableStatus == fasthttp.StatusServiceUnavailable || st.cfg.UnavailableStatus == fasthttp.StatusTooManyRequests {
			ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(spreadRetry(wait)))
		}
		return false
	}
	s.tunnelsDelayed.Add(1)
	t := time.NewTimer(wait)
	<-t.C
	p.m.queueWait.UpdateDuration(now)
	px.noteAdmitted(s, now.Add(wait))
	return true
}

// noteAdmitted tells the admission hook (tests: LB.admitted) that an upgrade to s was admitted in the
// slot of time at.
func (px *proxy) noteAdmitted(s *Server, at time.Time) {
	if f := px.admitted.Load(); f != nil {
		(*f)(s, at)
	}
}

// spreadRetry is a Retry-After, in whole seconds, drawn evenly over the wait an upgrade would have had
// (at least 1): devices refused in the same moment come back spread over it, as the rate would admit them.
func spreadRetry(wait time.Duration) int {
	return 1 + rand.IntN(max(1, int(math.Ceil(wait.Seconds()))))
}
