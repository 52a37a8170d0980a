package healthcheck

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// A leader stepping down while it still serves (its LeaderCheck answers 503, other paths 200) gives live
// traffic no error: only LeaderChecks can see it. These tests run a Leader on the fake clock of
// testing/synctest with scripted LeaderCheck answers and realistic intervals (15–20 s steady, 250 ms fast).

// scripted answers the probes of a Leader (Options.script) from a script per server, at once on the fake
// clock, and records them.
type scripted struct {
	mu     sync.Mutex
	script map[string]func(n int) int // address → the status of its n-th probe (from 0)
	probes []scriptedProbe
}

type scriptedProbe struct {
	addr   string
	at     time.Time
	status int
}

func newScripted() *scripted { return &scripted{script: map[string]func(int) int{}} }

// set makes the probes of addr from now on answer f(n), n counting every probe of addr from the first.
func (s *scripted) set(addr string, f func(n int) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script[addr] = f
}

func (s *scripted) get(addr string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.probes {
		if p.addr == addr {
			n++
		}
	}
	status := s.script[addr](n)
	s.probes = append(s.probes, scriptedProbe{addr, time.Now(), status})
	return status, nil
}

// of returns the probes of addr that started in [from, to).
func (s *scripted) of(addr string, from, to time.Time) []scriptedProbe {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []scriptedProbe
	for _, p := range s.probes {
		if p.addr == addr && !p.at.Before(from) && p.at.Before(to) {
			out = append(out, p)
		}
	}
	return out
}

func always(status int) func(int) int { return func(int) int { return status } }

// realisticChecks are the LeaderCheck defaults (interval 15s, interval_max 20s, fast_interval 250ms,
// fall 3), every steady wait 17.5 s, the answers scripted by srv.
func realisticChecks(bus *event.Bus, srv *scripted) Options {
	return Options{
		Pool: "test", Path: "/Thingworx/Admin/HA/LeaderCheck",
		Interval: 15 * time.Second, IntervalMax: 20 * time.Second, FastInterval: 250 * time.Millisecond,
		Timeout: 5 * time.Second, Fall: 3, Bus: bus, Logf: quiet,
		Rand: func() float64 { return 0.5 }, script: srv.get,
	}
}

// startScripted starts l in the bubble, stopped at the end of the test, and waits for its first round.
func startScripted(t *testing.T, l *Leader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.Start(ctx)
	synctest.Wait()
	select {
	case <-l.Ready():
	default:
		t.Fatal("the first round is not over once every server answered")
	}
}

func TestLeaderStepDownWithABackupAnswering200IsFollowedWithinAFewFastIntervalsOfItsFirst200(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScripted()
		ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
		old, next := ts[0], ts[1]
		srv.set(old.Addr(), always(200))
		srv.set(next.Addr(), always(503))
		bus := event.NewBus()
		r := record(t, bus)
		o := realisticChecks(bus, srv)
		l := NewLeader(o, ts)
		t0 := time.Now()
		startScripted(t, l)
		if l.Current() != old {
			t.Fatalf("first round elected %v, want %s", l.Current(), old.Addr())
		}
		// Both servers were probed at t0; their next steady probes are due at t0+17.5s. Probing the
		// leader again at t0+5s moves its next one to t0+22.5s: the backup's steady probe comes first.
		time.Sleep(5 * time.Second)
		l.Probe(old)
		time.Sleep(5 * time.Second)

		// t0+10s: the leader steps down, the backup takes over.
		stepDown := time.Now()
		srv.set(old.Addr(), always(503))
		srv.set(next.Addr(), always(200))
		time.Sleep(time.Minute)
		synctest.Wait()

		oks := srv.of(next.Addr(), stepDown, time.Now())
		if len(oks) == 0 {
			t.Fatal("the backup was never probed after the step-down")
		}
		first200 := oks[0].at
		if want := t0.Add(17500 * time.Millisecond); !first200.Equal(want) {
			t.Fatalf("the backup's first 200 at t0+%v, want its steady probe at t0+17.5s", first200.Sub(t0))
		}
		changes := r.since(0, "", event.LeaderChanged)
		if len(changes) != 2 || changes[1].Server != next.Addr() || changes[1].Old != old.Addr() {
			t.Fatalf("LeaderChanged events %+v, want the first round's and one from %s to %s", changes, old.Addr(), next.Addr())
		}
		switched := changes[1].Time
		if took := switched.Sub(first200); took < 0 || took > 4*o.FastInterval {
			t.Fatalf("the leader changed %v after the backup's first 200, want within 4 fast intervals (%v)",
				took, 4*o.FastInterval)
		}
		// Three non-200 answers of the old leader, no fewer: the last of them made the switch.
		if n := len(srv.of(old.Addr(), stepDown, switched.Add(time.Nanosecond))); n != o.Fall {
			t.Fatalf("the old leader gave %d non-200 answers up to the switch, want fall = %d", n, o.Fall)
		}
		if n := len(srv.of(old.Addr(), stepDown, switched)); n >= o.Fall {
			t.Fatalf("the old leader gave %d non-200 answers before the switch: it came late", n)
		}
		if l.Current() != next || !next.Up() || old.Up() {
			t.Fatalf("current %v, up %v %v; want only %s up", l.Current(), old.Up(), next.Up(), next.Addr())
		}
		if n := l.SplitBrains(); n != 0 {
			t.Fatalf("%d split brains: the backup's 200 while the leader stepped down is none", n)
		}
		// Settled (one leader, the other non-200): probing is back at the steady pace.
		for _, tg := range ts {
			if ps := srv.of(tg.Addr(), switched.Add(time.Nanosecond), switched.Add(o.Interval)); len(ps) != 0 {
				t.Errorf("%s probed %d times within interval after the switch, want the steady pace", tg.Addr(), len(ps))
			}
		}
	})
}

func TestLeaderFlapping200And503AtEveryProbeIsNeverReplacedWhileABackupAnswers200(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScripted()
		ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
		leader, backup := ts[0], ts[1]
		srv.set(leader.Addr(), always(200))
		srv.set(backup.Addr(), always(503))
		bus := event.NewBus()
		r := record(t, bus)
		o := realisticChecks(bus, srv)
		l := NewLeader(o, ts)
		startScripted(t, l)
		if l.Current() != leader {
			t.Fatalf("first round elected %v, want %s", l.Current(), leader.Addr())
		}

		// The leader's LeaderCheck alternates 200 and 503 at every probe; the backup answers 200.
		flap := time.Now()
		srv.set(leader.Addr(), func(n int) int {
			if n%2 == 0 {
				return 200
			}
			return 503
		})
		srv.set(backup.Addr(), always(200))
		const run = 10 * time.Minute // 40 steady intervals, 2,400 fast ones
		time.Sleep(run)
		synctest.Wait()

		if l.Current() != leader || !leader.Up() || backup.Up() {
			t.Fatalf("current %v, up %v %v; the flapping leader %s was replaced", l.Current(), leader.Up(), backup.Up(), leader.Addr())
		}
		if n := l.Changes(); n != 0 || len(r.of("", event.LeaderChanged)) != 1 {
			t.Fatalf("%d leader changes (events %+v), want none (only the first round's event)", n, r.of("", event.LeaderChanged))
		}
		ps := srv.of(leader.Addr(), flap, time.Now())
		// Fast probing all along: a second 200 or a failing leader keep the pool unsettled.
		if min := int(run / o.FastInterval * 9 / 10); len(ps) < min {
			t.Fatalf("the leader was probed %d times in %v, want at least %d (the fast pace)", len(ps), run, min)
		}
		worst, fails := 0, 0
		for _, p := range ps {
			if p.status == 200 {
				fails = 0
			} else {
				fails++
			}
			worst = max(worst, fails)
		}
		if worst >= o.Fall {
			t.Fatalf("the script gave %d non-200 answers in a row, want fewer than fall", worst)
		}
		// One split brain, reported once, not at every probe of the backup.
		if n, evs := l.SplitBrains(), r.of("", event.SplitBrain); n != 1 || len(evs) != 1 {
			t.Fatalf("%d split brains counted, %d reported; want 1 and 1", n, len(evs))
		}

		// The backup steps back (503) and the leader stops flapping: settled, steady pace again.
		srv.set(leader.Addr(), always(200))
		srv.set(backup.Addr(), always(503))
		time.Sleep(time.Second)
		settled := time.Now()
		time.Sleep(o.Interval)
		synctest.Wait()
		for _, tg := range ts {
			if ps := srv.of(tg.Addr(), settled, time.Now()); len(ps) != 0 {
				t.Errorf("%s probed %d times in the interval after the pool settled, want none (steady pace)", tg.Addr(), len(ps))
			}
		}
		if l.Current() != leader || l.Changes() != 0 {
			t.Fatalf("current %v after %d changes, want %s and 0 (the first election is no change)", l.Current(), l.Changes(), leader.Addr())
		}
	})
}
