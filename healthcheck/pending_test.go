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
