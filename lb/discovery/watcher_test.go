package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/config"
)

// The Watcher with a provider the test drives, and a Target that records what it is handed; time under
// testing/synctest. The real providers run through the same Watcher and Target (run, below); lb's tests
// put the lists in force in a pool behind a whole load balancer (discovery_test.go).

// scripted is a provider that reports what the test sends it.
type scripted struct{ reports chan any } // []string: found; error: failed

func (s *scripted) Watch(ctx context.Context, found func([]string), failed func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.reports:
			if err, ok := r.(error); ok {
				failed(err)
			} else {
				found(r.([]string))
			}
		}
	}
}

var (
	scriptedMu sync.Mutex
	scriptedBy = map[string]*scripted{} // by the table's file key
)

func init() {
	Register("scripted", func(dc config.Discovery, _ Options) (Provider, error) {
		scriptedMu.Lock()
		defer scriptedMu.Unlock()
		if s := scriptedBy[dc.File]; s != nil {
			return s, nil
		}
		return nil, errors.New("no scripted provider " + dc.File)
	})
}

// recorder is a Target that records the changes it is handed; take says whether it takes lists.
type recorder struct {
	mu      sync.Mutex
	seed    []string
	take    bool
	changes []Change
}

func (r *recorder) target() Target {
	return Target{
		Lock: &r.mu,
		Seed: func() ([]string, bool) { return r.seed, r.take },
		Apply: func(c Change) {
			r.changes = append(r.changes, c) // under Lock
		},
	}
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.changes {
		out = append(out, c.String())
	}
	return out
}

// startScripted starts a Watcher of a scripted provider with seed and empty_grace, stopped at the end of
// the test; it returns the watcher, the provider's report channel and the target.
func startScripted(t *testing.T, seed []string, grace time.Duration) (*Watcher, chan<- any, *recorder) {
	t.Helper()
	s := &scripted{reports: make(chan any)}
	scriptedMu.Lock()
	scriptedBy[t.Name()] = s
	scriptedMu.Unlock()
	r := &recorder{seed: seed, take: true}
	dc := config.Discovery{Provider: "scripted", File: t.Name(), EmptyGrace: config.Duration{D: grace}}
	w := Start(context.Background(), dc, Options{Pool: "p", Logf: t.Logf}, r.target(), nil)
	t.Cleanup(func() { w.Stop(true) })
	return w, s.reports, r
}

func TestAWatcherHandsItsTargetOnlyListsThatChangeWhatIsInForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, report, r := startScripted(t, []string{"10.0.0.1:80"}, time.Second)
		if !w.Running() || w.List() != nil {
			t.Fatalf("at start: running %v, list %v", w.Running(), w.List())
		}
		report <- []string{"10.0.0.1:80"} // the first answer confirms the seed
		synctest.Wait()
		if got := r.got(); got != nil || !slices.Equal(w.List(), []string{"10.0.0.1:80"}) {
			t.Fatalf("a first answer equal to the seed: changes %q, list %v", got, w.List())
		}
		report <- []string{" 10.0.0.2:80", "10.0.0.1:80", "10.0.0.2:80", ""} // any order, duplicates, blanks
		report <- []string{"10.0.0.1:80", "10.0.0.2:80"}                     // the same list again
		report <- fmt.Errorf("registry unreachable")
		report <- []string{"10.0.0.2:80"}
		synctest.Wait()
		want := []string{
			"scripted: 2 servers (added 10.0.0.2:80; removed none)",
			"scripted: 1 server (added none; removed 10.0.0.1:80)",
		}
		if got := r.got(); !slices.Equal(got, want) {
			t.Fatalf("changes:\n%q\nwant\n%q", got, want)
		}
		s := w.Status()
		if s.Provider != "scripted" || s.Changes != 2 || s.Errors != 1 || s.LastError != "" || s.LastSuccess.IsZero() ||
			!slices.Equal(s.Servers, []string{"10.0.0.2:80"}) || s.EmptyPending {
			t.Fatalf("status %+v", s)
		}
		report <- errors.New("registry unreachable")
		synctest.Wait()
		if s := w.Status(); s.Errors != 2 || s.LastError != "registry unreachable" || !slices.Equal(s.Servers, []string{"10.0.0.2:80"}) {
			t.Fatalf("after an error the last list stays: %+v", s)
		}

		// A target that no longer takes lists (the pool changed its table): nothing is put in force.
		r.mu.Lock()
		r.take = false
		r.mu.Unlock()
		report <- []string{"10.0.0.3:80"}
		synctest.Wait()
		if got := r.got(); len(got) != 2 || !slices.Equal(w.List(), []string{"10.0.0.2:80"}) {
			t.Fatalf("a list the target refused: changes %q, list %v", got, w.List())
		}
		w.Stop(true)
		if w.Running() {
			t.Fatal("running after Stop")
		}
	})
}

func TestAWatcherAppliesAnEmptyListOnlyAfterEmptyGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 30 * time.Second
		w, report, r := startScripted(t, nil, grace)
		report <- []string{"10.0.0.1:80"}
		report <- []string{}
		synctest.Wait()
		if !w.Status().EmptyPending || len(r.got()) != 1 {
			t.Fatalf("an empty list at once: pending %v, changes %q", w.Status().EmptyPending, r.got())
		}
		time.Sleep(grace - time.Millisecond)
		report <- []string{} // still empty: the grace runs from the first empty list
		synctest.Wait()
		if len(r.got()) != 1 {
			t.Fatalf("applied within empty_grace: %q", r.got())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := r.got(); len(got) != 2 || got[1] != "scripted: 0 servers (added none; removed 10.0.0.1:80)" || w.Status().EmptyPending {
			t.Fatalf("at the end of empty_grace: %q, pending %v", got, w.Status().EmptyPending)
		}
		if l := w.List(); l == nil || len(l) != 0 {
			t.Fatalf("the list in force: %#v, want empty", l)
		}

		// Servers back within the grace: the pending empty list is dropped, never applied.
		report <- []string{"10.0.0.1:80"}
		report <- []string{}
		synctest.Wait()
		time.Sleep(grace / 2)
		report <- []string{"10.0.0.1:80"}
		synctest.Wait()
		if w.Status().EmptyPending {
			t.Fatal("still pending after servers came back")
		}
		time.Sleep(2 * grace)
		synctest.Wait()
		if got := r.got(); len(got) != 3 || !slices.Equal(w.List(), []string{"10.0.0.1:80"}) {
			t.Fatalf("a dropped empty list was applied: %q, list %v", got, w.List())
		}

		// Stop drops a pending empty list.
		report <- []string{}
		synctest.Wait()
		w.Stop(true)
		time.Sleep(2 * grace)
		synctest.Wait()
		if got := r.got(); len(got) != 3 {
			t.Fatalf("a stopped watcher applied its pending empty list: %q", got)
		}
	})
}

func TestAWatcherWhoseProviderCannotBeBuiltIsNotRunningAndKeepsTheListItWasGiven(t *testing.T) {
	var logged []string
	logf := func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	dc := config.Discovery{Provider: "scripted", File: "none"}
	w := Start(context.Background(), dc, Options{Pool: "p", Logf: logf}, (&recorder{}).target(), []string{"10.0.0.1:80"})
	w.Stop(true)
	if w.Running() || !slices.Equal(w.List(), []string{"10.0.0.1:80"}) || w.Config().File != "none" {
		t.Fatalf("running %v, list %v", w.Running(), w.List())
	}
	if len(logged) != 1 || logged[0] != "discovery: pool p: no scripted provider none (the pool keeps its servers)" {
		t.Fatalf("log %q", logged)
	}
}

// running is a real provider run through a Watcher whose Target records what it is handed: the list in
// force, the changes and the status are what lb puts in its pool, /api/status and /metrics.
type running struct {
	*Watcher
	r *recorder

	mu   sync.Mutex
	logs []string
}

// run starts dc's provider for pool p through a Watcher with seed (TLS: the pool's [tls] is enabled),
// stopped at the end of the test.
func run(t *testing.T, dc config.Discovery, tls bool, seed ...string) *running {
	t.Helper()
	rn := &running{r: &recorder{seed: seed, take: true}}
	logf := func(format string, args ...any) {
		rn.mu.Lock()
		rn.logs = append(rn.logs, fmt.Sprintf(format, args...))
		rn.mu.Unlock()
	}
	rn.Watcher = Start(context.Background(), dc, Options{Pool: "p", TLS: tls, Logf: logf}, rn.r.target(), nil)
	t.Cleanup(func() { rn.Stop(true) })
	return rn
}

// log returns the lines logged so far.
func (rn *running) log() string {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return strings.Join(rn.logs, "\n")
}

// follows waits until the list in force is want (any order) and fails if that took longer than within.
func (rn *running) follows(t *testing.T, within time.Duration, what string, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	start := time.Now()
	testkit.Eventually(t, what, within+10*time.Second, func() bool {
		l := rn.List()
		return l != nil && slices.Equal(l, want)
	})
	if took := time.Since(start); took > within {
		t.Fatalf("%s took %s, want at most %s", what, took.Round(time.Millisecond), within)
	} else {
		t.Logf("%s: %s", what, took.Round(time.Millisecond))
	}
}
