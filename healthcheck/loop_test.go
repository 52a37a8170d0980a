package healthcheck

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
)

func TestLoopRunsAtOnceThenAfterEachWaitOnKickAndRecomputesOnWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		kick, wake := make(chan struct{}, 1), make(chan struct{}, 1)
		t0 := time.Now()

		var mu sync.Mutex
		var calls []time.Duration // when fn ran, since t0
		var waits []time.Duration // what next returns, in turn; then an hour
		next := func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			if len(waits) == 0 {
				return time.Hour
			}
			d := waits[0]
			waits = waits[1:]
			return d
		}
		setWaits := func(ds ...time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			waits = ds
		}
		fn := func() {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, time.Since(t0))
		}
		f := func(what string, want ...time.Duration) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(calls, want) {
				t.Fatalf("%s: fn ran at %v, want %v", what, calls, want)
			}
		}
		const ms = time.Millisecond
		sleepUntil := func(d time.Duration) { time.Sleep(t0.Add(d).Sub(time.Now())) }

		setWaits(10*ms, 20*ms, 30*ms)
		done := make(chan struct{})
		go func() {
			defer close(done)
			Loop(ctx, kick, wake, next, fn)
		}()
		f("at the start", 0)
		sleepUntil(60*ms - 1)
		f("before the third wait ended", 0, 10*ms, 30*ms)
		sleepUntil(60 * ms)
		f("after the waits next returned", 0, 10*ms, 30*ms, 60*ms)

		// The wait is now an hour. A kick runs fn at once.
		sleepUntil(100 * ms)
		kick <- struct{}{}
		f("after a kick", 0, 10*ms, 30*ms, 60*ms, 100*ms)

		// A wake recomputes the wait, from now, without running fn.
		sleepUntil(150 * ms)
		setWaits(5*ms, time.Hour)
		wake <- struct{}{}
		f("at a wake", 0, 10*ms, 30*ms, 60*ms, 100*ms)
		sleepUntil(155 * ms)
		f("after the recomputed wait", 0, 10*ms, 30*ms, 60*ms, 100*ms, 155*ms)

		// A wake whose recomputed wait is over runs fn at once.
		sleepUntil(200 * ms)
		setWaits(-time.Second)
		wake <- struct{}{}
		f("at a wake with an elapsed wait", 0, 10*ms, 30*ms, 60*ms, 100*ms, 155*ms, 200*ms)

		// A negative wait after fn runs it again at once.
		sleepUntil(300 * ms)
		setWaits(-time.Second, time.Hour)
		kick <- struct{}{}
		f("after a negative wait", 0, 10*ms, 30*ms, 60*ms, 100*ms, 155*ms, 200*ms, 300*ms, 300*ms)

		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Loop did not return when ctx was cancelled")
		}
		if time.Since(t0) != 300*ms {
			t.Fatalf("fake clock at %v, want 300ms", time.Since(t0))
		}
	})
}

func TestLoopRunsWithoutKickOrWakeChannels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			Loop(ctx, nil, nil, func() time.Duration { return time.Second }, func() { n++ })
		}()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n != 4 {
			t.Fatalf("fn ran %d times in 3s with a 1s wait, want 4", n)
		}
		cancel()
		<-done
	})
}

func TestSteadyPaceStaysWithinIntervalAndIntervalMax(t *testing.T) {
	f := func(interval, intervalMax time.Duration, r float64, want time.Duration) {
		t.Helper()
		o := Options{Interval: interval, IntervalMax: intervalMax, Rand: func() float64 { return r }}
		got := o.steady()
		if got < interval || got > intervalMax || want != 0 && got != want {
			t.Errorf("steady() with [%v, %v] and Rand %v = %v, want %v in the range", interval, intervalMax, r, got, want)
		}
	}
	f(time.Second, 2*time.Second, 0, time.Second)
	f(time.Second, 2*time.Second, 0.5, 1500*time.Millisecond)
	f(time.Second, 2*time.Second, 0.999, 0) // 1.999s but for rounding
	f(time.Second, 2*time.Second, 0.9999999999999999, 0)
	f(time.Second, time.Second, 0.999, time.Second)
	f(50*time.Millisecond, 60*time.Millisecond, 0.5, 55*time.Millisecond)
}

// A settled leader pool (a leader answering 200, the others non-200) is probed at the steady pace: every
// wait between two probes of a server within [interval, interval_max], drawn at random (the default Rand),
// so that the servers' probes do not stay in step.
func TestASettledLeaderPoolIsProbedWithinIntervalAndIntervalMaxWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScripted()
		ts := targets("10.0.0.1:8080", "10.0.0.2:8080")
		srv.set(ts[0].Addr(), always(200))
		srv.set(ts[1].Addr(), always(503))
		o := realisticChecks(event.NewBus(), srv)
		o.Rand = nil // math/rand/v2
		l := NewLeader(o, ts)
		t0 := time.Now()
		startScripted(t, l)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		for _, tg := range ts {
			ps := srv.of(tg.Addr(), t0, time.Now())
			if len(ps) < int(10*time.Minute/o.IntervalMax) {
				t.Fatalf("%s: %d probes in 10 minutes, want one every [%v, %v]", tg.Addr(), len(ps), o.Interval, o.IntervalMax)
			}
			lo, hi := time.Duration(1<<62), time.Duration(0)
			for i := 1; i < len(ps); i++ {
				d := ps[i].at.Sub(ps[i-1].at)
				if d < o.Interval || d > o.IntervalMax {
					t.Errorf("%s: probes %d and %d are %v apart, want within [%v, %v]", tg.Addr(), i-1, i, d, o.Interval, o.IntervalMax)
				}
				lo, hi = min(lo, d), max(hi, d)
			}
			// Over 30 draws, a spread under a quarter of the range is no random jitter.
			if hi-lo < (o.IntervalMax-o.Interval)/4 {
				t.Errorf("%s: waits %v..%v: no jitter", tg.Addr(), lo, hi)
			}
		}
		if l.Current() != ts[0] {
			t.Fatalf("current %v, want %s", l.Current(), ts[0].Addr())
		}
	})
}

func TestCheckerProbesFastWhileAServerIsDownOrFailing(t *testing.T) {
	o := fastChecks(nil, "/health")
	o.Interval, o.IntervalMax = time.Second, 2*time.Second
	o.Rand = func() float64 { return 0.25 }
	steady := 1250 * time.Millisecond
	tg := NewTarget("10.0.0.1:8443")
	c := NewChecker(o, []*Target{tg})
	f := func(what string, want time.Duration) {
		t.Helper()
		if got := c.pace(tg); got != want {
			t.Errorf("%s: pace %v, want %v", what, got, want)
		}
	}
	f("never probed", o.FastInterval)
	c.answer(tg, time.Now(), 200, nil)
	f("up", steady)
	c.Report(tg, errRefused)
	f("a live failure", o.FastInterval)
	c.Report(tg, nil)
	f("a live success", steady)
	c.answer(tg, time.Now(), 503, nil)
	f("a failed probe", o.FastInterval)
	c.answer(tg, time.Now(), 200, nil)
	f("a passing probe", steady)
	for range o.Fall {
		c.answer(tg, time.Now(), 0, errRefused)
	}
	f("down", o.FastInterval)
	c.answer(tg, time.Now(), 200, nil)
	f("one pass of rise", o.FastInterval)
	c.answer(tg, time.Now(), 200, nil)
	f("back up", steady)
}
