package lb

import (
	"context"
	"errors"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/healthcheck/event"
)

// A leader pool's requests in flight when the leader changes, and a leader that hangs.
//
// In-flight failover. When a leader pool has a new leader (the LeaderChecks elected another, after the
// old one stepped down, failed or hung), its requests still waiting for an answer from another server
// are looked at: those that may go again (idempotent: GET, HEAD, OPTIONS, PUT, DELETE, RFC 9110 section 9.2.2; their
// body in memory) and have received no byte of an answer are abandoned and sent to the new leader at
// once, without waiting out response_timeout (fairlead_pool_inflight_failovers_total counts them). A
// request still queued for a connection to the old leader goes to the new one too (none of it was sent).
// Any other request (a POST, an upload that streamed) is never sent twice: it ends by its own
// response_timeout (504). The abandoned request's read is cut by moving its socket's read deadline to
// now; the connection is closed. An answer whose first bytes came just as the leader changed is read on.
//
// Hung leader. A leader that accepts requests and never answers is replaced only by its LeaderChecks,
// fall failed probes in a row, each failing after [check] timeout. With live traffic it is noticed
// sooner: once a request has waited [check] timeout for its answer while no answer at all came from the
// leader for as long, the pool's health check is told (one live failure), which probes every server at
// once and then every fast_interval while the leader fails. Worst case with the defaults (interval 15-20
// s, timeout 5 s, fall 3, fast_interval 250 ms): the hung leader is replaced about 5 + 1 + 3 x 5 + 2 x
// 0.25 = 21.5 s after its first unanswered request (without traffic, up to 20 + 15.5 s after it hung),
// and its waiting GETs are answered by the new leader then, instead of after response_timeout (60 s).

// leaderChanged sends the requests waiting on the other servers of a leader pool to its new leader (the
// bus calls it on every event). Only once there is a new leader: while there is none, the old one may
// still answer what it has (a leader stepping down finishes its requests); when one is elected after a
// time without, the requests still waiting on the old one go then.
func (lb *LB) leaderChanged(e event.Event) {
	if e.Kind != event.LeaderChanged || e.Server == "" {
		return
	}
	p := lb.px.gen.Load().pools[e.Pool]
	if p == nil {
		return
	}
	for _, s := range p.view.Load().servers {
		if s.Addr != e.Server {
			s.client.Load().Abandon()
		}
	}
}

// errNoAnswer is what a leader pool's health check is told of a leader that answers nothing.
var errNoAnswer = errors.New("a request waited [check] timeout for its answer, and no answer came")

// watchLeader tells the health check of a leader pool, once a second at most, that its leader answers
// nothing while requests wait (see above).
func (p *Pool) watchLeader(ctx context.Context) {
	healthcheck.Loop(ctx, nil, nil, func() time.Duration { return time.Second }, func() {
		st := p.view.Load()
		lp, ok := st.policy.(*leaderPolicy)
		if !ok {
			return
		}
		cur := lp.leader.Current()
		for _, s := range st.servers {
			if s.target == cur && s.client.Load().Unanswered(time.Now(), st.cfg.Check.Timeout.D) {
				p.checks.Report(s.target, errNoAnswer)
			}
		}
	})
}
