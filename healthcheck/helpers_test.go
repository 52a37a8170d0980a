package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// errRefused stands for a live request's transport failure in Report.
var errRefused = errors.New("connection refused")

func quiet(string, ...any) {}

// fastChecks are check options with short intervals, for probes of the simulator over real sockets. The
// timeout is generous: a probe of a healthy local server that is slow under load must not count as a
// failure.
func fastChecks(bus *event.Bus, path string) Options {
	return Options{
		Pool: "test", Path: path,
		Interval: 50 * time.Millisecond, IntervalMax: 60 * time.Millisecond, FastInterval: 50 * time.Millisecond,
		Timeout: time.Second, Fall: 3, Rise: 2, Bus: bus, Logf: quiet,
	}
}

// startSim starts a simulated cluster on 127.0.0.1, closed at the end of the test.
func startSim(t *testing.T, o sim.Options) *sim.Cluster {
	t.Helper()
	o.Logf = quiet
	return testkit.StartCluster(t, o)
}

// starter is a Checker or a Leader.
type starter interface {
	Start(ctx context.Context)
	Ready() <-chan struct{}
}

// start starts g's probes, stopped at the end of the test, and waits for its first round.
func start(t *testing.T, g starter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g.Start(ctx)
	select {
	case <-g.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("timed out after 5s waiting for the first round of probes")
	}
}

// recorder keeps every event published on a bus.
type recorder struct {
	mu  sync.Mutex
	evs []event.Event
}

// record subscribes a recorder to bus until the end of the test.
func record(t *testing.T, bus *event.Bus) *recorder {
	r := &recorder{}
	t.Cleanup(bus.Subscribe(r.add))
	return r
}

func (r *recorder) add(e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
}

// mark is the position of the next event, for since.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.evs)
}

// since returns the events from position from on whose kind is one of kinds (any kind if none) and, if
// server is not "", whose Server is server.
func (r *recorder) since(from int, server string, kinds ...event.Kind) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.evs[from:] {
		if (len(kinds) == 0 || slices.Contains(kinds, e.Kind)) && (server == "" || e.Server == server) {
			out = append(out, e)
		}
	}
	return out
}

// of returns every event of server (any server if "") whose kind is one of kinds.
func (r *recorder) of(server string, kinds ...event.Kind) []event.Event {
	return r.since(0, server, kinds...)
}

// findStatus returns the status of the target with address addr among sts; ok is false if there is none.
func findStatus(sts []ServerStatus, addr string) (st ServerStatus, ok bool) {
	for _, st := range sts {
		if st.Addr == addr {
			return st, true
		}
	}
	return ServerStatus{}, false
}

// statusOf is findStatus for the test's goroutine: it fails the test if addr has no status.
func statusOf(t *testing.T, sts []ServerStatus, addr string) ServerStatus {
	t.Helper()
	st, ok := findStatus(sts, addr)
	if !ok {
		t.Fatalf("no status for %s in %+v", addr, sts)
	}
	return st
}

func targets(addrs ...string) []*Target {
	ts := make([]*Target, len(addrs))
	for i, a := range addrs {
		ts[i] = NewTarget(a)
	}
	return ts
}

// logLines collects what a Checker or a Leader logs (Options.Logf).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
