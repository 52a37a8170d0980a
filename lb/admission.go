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

// admitTokens is what s's limiter holds at at: the new tunnels it may admit at once, negative when
// upgrades wait for slots reserved ahead. ok is false when s has no limiter or its burst is whole
// (nothing to hand over).
func (s *Server) admitTokens(at time.Time) (tokens float64, ok bool) {
	l := s.admit.Load()
	if l == nil || l.Limit() <= 0 {
		return 0, false
	}
	tokens = l.TokensAt(at)
	return tokens, tokens < float64(l.Burst())
}

// restoreAdmitter gives s, which has admitted nothing yet, a limiter at r new tunnels per second that
// holds what another process's held at at (tokens), refilled at r from at to now: the upgrades an old
// process of a binary upgrade admitted, or reserved slots for, count here as if admitted here. It
// returns the tokens it holds at now; nothing is done (r's full burst) when s has a limiter already.
func (s *Server) restoreAdmitter(r int, tokens float64, at, now time.Time) float64 {
	burst := float64(r)
	want := min(burst, tokens+max(now.Sub(at), 0).Seconds()*burst)
	if r <= 0 || want >= burst {
		return burst
	}
	l := rate.NewLimiter(rate.Limit(r), r)
	// rate.Limiter sets its tokens only by reserving whole ones: reserve n = ceil(burst - want) at a
	// moment t0 early enough that the rate refills the fraction by now (burst - n + (now-t0)·r = want),
	// in reservations of at most a burst each (more than a burst is slots reserved ahead).
	n := math.Ceil(burst - want)
	t0 := now.Add(-time.Duration((n - (burst - want)) / burst * float64(time.Second)))
	for left := int(n); left > 0; left -= r {
		l.ReserveN(t0, min(left, r))
	}
	if !s.admit.CompareAndSwap(nil, l) {
		return s.admit.Load().TokensAt(now)
	}
	return l.TokensAt(now)
}
