package healthcheck

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// Issue 36: a hung leader stayed "up, 200 2.6 s ago" on the status page while its probe waited for an
// answer. The probe in progress is in the status, and overdue once it has waited longer than a server
// that works takes (OverdueAfter: 1 s with the LeaderCheck's 5 s timeout), long before the timeout and
// fall failed probes end the leader's term.
func TestAProbeWithoutAnAnswerIsPendingAndOverdueAfterASecondWhileTheLeaderStaysUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScripted()
		ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
		leader := ts[0]
		srv.set(leader.Addr(), always(200))
		srv.set(ts[1].Addr(), always(503))
		o := realisticChecks(event.NewBus(), srv)
		hung, ended := make(chan struct{}), make(chan struct{})
		defer close(ended)
		o.script = func(addr string) (int, error) {
			select {
			case <-hung:
				if addr == leader.Addr() {
					select {
					case <-time.After(o.Timeout):
					case <-ended:
					}
					return 0, errors.New("no answer: timed out after 5s")
				}
			default:
			}
			return srv.get(addr)
		}
		l := NewLeader(o, ts)
		t0 := time.Now()
		startScripted(t, l)
		status := func() ServerStatus { t.Helper(); return l.Status()[0] }
		if st := status(); !st.PendingSince.IsZero() || st.Overdue || st.LastStatus != 200 {
			t.Fatalf("answered at once: %+v, want no probe pending", st)
		}

		close(hung)
		next := t0.Add(17500 * time.Millisecond) // the steady pace of realisticChecks
		// f checks the status at at after the first probe without an answer was sent: the probe pending
		// was sent at since after it.
		f := func(at, since time.Duration, wantOverdue bool) {
			t.Helper()
			time.Sleep(time.Until(next.Add(at)))
			synctest.Wait()
			st := status()
			if !st.PendingSince.Equal(next.Add(since)) || st.Overdue != wantOverdue {
				t.Fatalf("%v after the probe was sent: %+v, want a probe pending since %v, overdue %v", at, st, next.Add(since), wantOverdue)
			}
			if !leader.Up() {
				t.Fatalf("%v after the probe was sent: the leader's term ended at its first probe without an answer", at)
			}
		}
		f(500*time.Millisecond, 0, false)
		f(OverdueAfter(o.Timeout), 0, false)
		f(OverdueAfter(o.Timeout)+time.Millisecond, 0, true)
		if st := status(); st.LastStatus != 200 || st.LastError != "" {
			t.Fatalf("pending: %+v, want the answer before (200) as the last one", st)
		}
		// The timeout ends the probe (a failed one); the next goes at once (its fast interval has
		// passed) and is overdue a second later in turn.
		f(o.Timeout, o.Timeout, false)
		if st := status(); st.LastError == "" || st.Fails != 1 {
			t.Fatalf("after the timeout: %+v, want its error and 1 failure", st)
		}
		f(o.Timeout+OverdueAfter(o.Timeout)+time.Millisecond, o.Timeout, true)
	})
}

func TestOverdueAfterIsASecondOrHalfTheTimeout(t *testing.T) {
	f := func(timeout, want time.Duration) {
		t.Helper()
		if got := OverdueAfter(timeout); got != want {
			t.Errorf("OverdueAfter(%v) = %v, want %v", timeout, got, want)
		}
	}
	f(5*time.Second, time.Second)
	f(2*time.Second, time.Second)
	f(time.Second, 500*time.Millisecond)
	f(300*time.Millisecond, 150*time.Millisecond)
}

// Issue 36: a standby that stops answering is said (server_down) fall fast intervals after the first
// LeaderCheck that sees it, not fall steady waits later (with the defaults, 0.75 s instead of up to a
// minute), and the leader is not disturbed.
func TestADeadStandbyIsDownFallFastIntervalsAfterTheFirstProbeThatSeesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScripted()
		ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
		standby := ts[1].Addr()
		srv.set(ts[0].Addr(), always(200))
		srv.set(standby, always(503))
		bus := event.NewBus()
		var down []time.Time
		bus.Subscribe(func(e event.Event) {
			if e.Kind == event.ServerDown && e.Server == standby {
				down = append(down, time.Now())
			}
		})
		o := realisticChecks(bus, srv)
		dead := make(chan struct{})
		o.script = func(addr string) (int, error) {
			status, err := srv.get(addr) // recorded (srv.of)
			select {
			case <-dead:
				if addr == standby {
					return 0, errors.New("connection refused")
				}
			default:
			}
			return status, err
		}
		l := NewLeader(o, ts)
		t0 := time.Now()
		startScripted(t, l)
		close(dead)
		first := t0.Add(17500 * time.Millisecond) // the next steady probe sees it
		time.Sleep(time.Until(first.Add(time.Duration(o.Fall-1)*o.FastInterval + time.Millisecond)))
		synctest.Wait()
		if len(down) != 1 || down[0].After(first.Add(time.Duration(o.Fall-1)*o.FastInterval)) {
			t.Fatalf("server_down at %v after the first failed probe, want one at %v", offsets(down, first), time.Duration(o.Fall-1)*o.FastInterval)
		}
		if !ts[0].Up() || l.Changes() != 0 {
			t.Fatal("the leader changed")
		}
		// Once down, the standby is probed at the steady pace again (no probe storm on a dead server).
		before := len(srv.of(standby, first, first.Add(time.Minute)))
		time.Sleep(time.Until(first.Add(time.Minute)))
		synctest.Wait()
		if n := len(srv.of(standby, first, first.Add(time.Minute))) - before; n > 4 {
			t.Fatalf("%d probes of the down standby in the minute after, want the steady pace", n)
		}
	})
}

// offsets are the times ts as durations after from.
func offsets(ts []time.Time, from time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(from)
	}
	return out
}
