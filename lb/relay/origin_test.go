package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/relay/paths"
	"github.com/fasthttp/websocket"
)

var upstreamTopics = []string{"inventory/dev", "inventory/prod", "users/dev", "users/prod"}

// logBuf collects log lines, for checks that no secret leaks into them.
type logBuf struct {
	mu    sync.Mutex
	lines []string
	t     *testing.T
}

func (l *logBuf) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func startConfig(t *testing.T, name string, opts sim.ConfigOptions) *sim.ConfigServer {
	t.Helper()
	s, err := sim.StartConfigServer(name, "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// listPool is a Pool of servers in an order the test sets, without health of its own (the load
// balancer's pools, which judge the servers, are tested through package lb): Choose returns the
// first server not tried; set changes the order, as a pool's choice changes; the reports are kept.
type listPool struct {
	mu      sync.Mutex
	servers []string
	changed chan struct{}
	reports map[string][]error
}

func newListPool(servers ...string) *listPool {
	return &listPool{servers: servers, changed: make(chan struct{}), reports: map[string][]error{}}
}

func (p *listPool) Choose(tried []string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.servers {
		if !slices.Contains(tried, s) {
			return s
		}
	}
	return ""
}

func (p *listPool) Report(server string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reports[server] = append(p.reports[server], err)
}

func (p *listPool) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// set makes servers the pool's order and wakes the waiters of Changed.
func (p *listPool) set(servers ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.servers = servers
	close(p.changed)
	p.changed = make(chan struct{})
}

// failures returns how many failures and successes were reported of server.
func (p *listPool) failures(server string) (failed, ok int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, err := range p.reports[server] {
		if err != nil {
			failed++
		} else {
			ok++
		}
	}
	return failed, ok
}

// upstreamOpts returns options for the simulator's config servers, with small intervals, over a
// listPool of servers.
func upstreamOpts(t *testing.T, logs *logBuf, servers ...string) OriginOptions {
	t.Helper()
	snapshot, err := paths.ParseTemplate("/config/{collection}/{environment}")
	if err != nil {
		t.Fatal(err)
	}
	events, err := paths.ParseTemplate("/events/{collection}/{environment}")
	if err != nil {
		t.Fatal(err)
	}
	return OriginOptions{
		Pool:     newListPool(servers...),
		Snapshot: snapshot,
		Events:   events,
		Names:    []string{"collection", "environment"},
		Backoff:  20 * time.Millisecond,
		Timeout:  2 * time.Second,
		Logf:     logs.logf,
	}
}

// sessions returns the open sessions of each topic at s.
func sessions(s *sim.ConfigServer, topics ...string) []int {
	st := s.Stats()
	out := make([]int, len(topics))
	for i, topic := range topics {
		out[i] = st.Topics[topic].Sessions
	}
	return out
}

func allEqual(ns []int, want int) bool {
	for _, n := range ns {
		if n != want {
			return false
		}
	}
	return true
}

// expectChange reads sub until it has seen a change message for version and the snapshot of
// version, and returns that snapshot.
func expectChange(t *testing.T, sub *Subscriber, topic string, version uint64) *Snapshot {
	t.Helper()
	wantChange := fmt.Sprintf(`{"topic":%q,"version":%d}`, topic, version)
	var change bool
	var snap *Snapshot
	timeout := time.After(3 * time.Second)
	for !change || snap == nil {
		select {
		case m, ok := <-sub.C():
			if !ok {
				t.Fatalf("%s: subscriber closed (dropped %v)", topic, sub.Dropped())
			}
			switch {
			case m.Change != nil:
				if string(m.Change) == wantChange {
					change = true
				}
			case m.Snapshot.Version == version:
				snap = m.Snapshot
			case m.Snapshot.Version > version:
				t.Fatalf("%s: got snapshot version %d, want %d", topic, m.Snapshot.Version, version)
			}
		case <-timeout:
			t.Fatalf("%s: change %v, snapshot %v: not both within 3s for version %d", topic, change, snap != nil, version)
		}
	}
	return snap
}

func TestUpstreamFanOut(t *testing.T) {
	srv := startConfig(t, "config1", sim.ConfigOptions{})
	h := NewHub(Options{SubscriberBuffer: 64})
	defer h.Close()
	var logs logBuf
	u := NewOrigin(h, upstreamOpts(t, &logs, srv.Addr))
	defer u.Close()

	subs := map[string][]*Subscriber{}
	for i := range 200 {
		topic := upstreamTopics[i%len(upstreamTopics)]
		subs[topic] = append(subs[topic], h.Subscribe(topic, Snapshots|Changes))
	}
	for _, topic := range upstreamTopics {
		u.Watch(topic)
		u.Watch(topic) // idempotent
	}
	testkit.Eventually(t, "4 sessions and 4 snapshots", 3*time.Second, func() bool {
		for _, topic := range upstreamTopics {
			if h.Snapshot(topic) == nil {
				return false
			}
		}
		return allEqual(sessions(srv, upstreamTopics...), 1) && u.Sessions() == 4
	})
	if s := h.Snapshot("users/dev"); s.Version != 1 || s.ETag != `"1"` || !bytes.Contains(s.Body, []byte(`"server":"config1"`)) {
		t.Fatalf("first snapshot %+v (body %s)", s, s.Body)
	}

	const topic = "inventory/dev"
	before := srv.Stats()
	v, err := srv.Publish(topic, []byte(`{"color":"blue"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range subs[topic] {
		s := expectChange(t, sub, topic, v)
		if !bytes.Contains(s.Body, []byte(`"data":{"color":"blue"}`)) {
			t.Fatalf("snapshot body %s", s.Body)
		}
	}
	time.Sleep(100 * time.Millisecond) // let a stray second fetch show up, if any
	after := srv.Stats()
	for _, tp := range upstreamTopics {
		want := before.Topics[tp].Fetches
		if tp == topic {
			want++
		}
		if got := after.Topics[tp].Fetches; got != want {
			t.Errorf("%s: %d fetches, want %d", tp, got, want)
		}
		if st := after.Topics[tp]; st.Sessions != 1 || st.SessionsTotal != 1 {
			t.Errorf("%s: %d sessions, %d in total, want 1 and 1", tp, st.Sessions, st.SessionsTotal)
		}
	}
	// The subscribers of the other topics got their first snapshot only.
	for _, tp := range upstreamTopics[1:] {
		for _, sub := range subs[tp] {
			for len(sub.C()) > 0 {
				if m := <-sub.C(); m.Change != nil || m.Snapshot.Version != 1 {
					t.Fatalf("%s: unexpected %+v", tp, m)
				}
			}
		}
	}
	if u.Current() != srv.Addr {
		t.Fatalf("current %s, want %s", u.Current(), srv.Addr)
	}
}

func TestUpstreamAPIKey(t *testing.T) {
	const key = "s3cret-upstream-key"
	srv := startConfig(t, "config1", sim.ConfigOptions{APIKey: key})
	h := NewHub(Options{})
	defer h.Close()

	var logs logBuf
	opts := upstreamOpts(t, &logs, srv.Addr)
	opts.Header = http.Header{"Authorization": {"Bearer " + key}}
	u := NewOrigin(h, opts)
	defer u.Close()
	u.Watch("inventory/dev")
	testkit.Eventually(t, "an authorized session", 3*time.Second, func() bool {
		return h.Snapshot("inventory/dev") != nil && allEqual(sessions(srv, "inventory/dev"), 1)
	})
	if srv.Stats().Unauthorized != 0 {
		t.Fatalf("unauthorized %d with the key", srv.Stats().Unauthorized)
	}

	var badLogs logBuf
	bad := NewOrigin(h, upstreamOpts(t, &badLogs, srv.Addr))
	defer bad.Close()
	bad.Watch("users/dev")
	testkit.Eventually(t, "retries answered 401", 3*time.Second, func() bool { return srv.Stats().Unauthorized >= 3 })
	if n := srv.Stats().Topics["users/dev"].Sessions; n != 0 || bad.Sessions() != 0 {
		t.Fatalf("sessions without the key: %d at the server, %d at the manager", n, bad.Sessions())
	}
	if failed, ok := bad.opts.Pool.(*listPool).failures(srv.Addr); failed != 0 || ok == 0 {
		t.Fatalf("the 401s were reported as %d failures and %d answers, want only answers", failed, ok)
	}
	_, err := bad.Fetch(context.Background(), "users/dev")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("fetch without the key: %v", err)
	}
	if !strings.Contains(badLogs.String(), "401") {
		t.Fatalf("the 401s are not logged: %q", badLogs.String())
	}
	bad.Close()
	u.Close()
	for _, s := range []string{logs.String(), badLogs.String(), err.Error()} {
		if strings.Contains(s, key) {
			t.Fatalf("the key leaked: %q", s)
		}
	}
}

// TestUpstreamSessionsFollowThePoolsChoiceAndReportTheirFailures: when the pool's choice changes,
// every session moves to the new choice (and back, at a failback); a server that stops is reported
// failing by the sessions and fetches that tried it.
func TestUpstreamSessionsFollowThePoolsChoiceAndReportTheirFailures(t *testing.T) {
	s1 := startConfig(t, "config1", sim.ConfigOptions{})
	s2 := startConfig(t, "config2", sim.ConfigOptions{})
	publish := func(topic, data string) uint64 {
		t.Helper()
		v1, err := s1.Publish(topic, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		v2, err := s2.Publish(topic, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if v1 != v2 {
			t.Fatalf("versions %d and %d", v1, v2)
		}
		return v1
	}
	for _, topic := range upstreamTopics {
		publish(topic, `{"n":1}`)
	}
	h := NewHub(Options{SubscriberBuffer: 64})
	defer h.Close()
	subs := map[string]*Subscriber{}
	for _, topic := range upstreamTopics {
		subs[topic] = h.Subscribe(topic, Snapshots|Changes)
	}
	var logs logBuf
	opts := upstreamOpts(t, &logs, s1.Addr, s2.Addr)
	pool := opts.Pool.(*listPool)
	u := NewOrigin(h, opts)
	defer u.Close()
	for _, topic := range upstreamTopics {
		u.Watch(topic)
	}
	testkit.Eventually(t, "4 sessions on the primary", 3*time.Second, func() bool {
		return allEqual(sessions(s1, upstreamTopics...), 1) && u.Sessions() == 4
	})

	s1.Stop()
	testkit.Eventually(t, "the sessions' failures on the stopped server reported", 3*time.Second, func() bool {
		failed, _ := pool.failures(s1.Addr)
		return failed >= 4
	})
	pool.set(s2.Addr, s1.Addr) // the pool's health took s1 down: its choice is s2
	// (The sessions may be there already: a failed dial tries the pool's next choice at once.)
	testkit.Eventually(t, "4 sessions on the backup, following the pool's choice", 3*time.Second, func() bool {
		return allEqual(sessions(s2, upstreamTopics...), 1) && u.Sessions() == 4 && u.Current() == s2.Addr
	})
	const topic = "users/prod"
	v := publish(topic, `{"n":2}`)
	s := expectChange(t, subs[topic], topic, v)
	if !bytes.Contains(s.Body, []byte(`"server":"config2"`)) {
		t.Fatalf("snapshot not from the backup: %s", s.Body)
	}

	if err := s1.Start(); err != nil {
		t.Fatal(err)
	}
	pool.set(s1.Addr, s2.Addr) // its checks pass again: a failback
	testkit.Eventually(t, "sessions back on the primary", 3*time.Second, func() bool {
		return allEqual(sessions(s1, upstreamTopics...), 1) && allEqual(sessions(s2, upstreamTopics...), 0) && u.Sessions() == 4
	})
	if u.Current() != s1.Addr || u.Switches() != 2 {
		t.Fatalf("current %s after %d switches, want the primary %s after 2", u.Current(), u.Switches(), s1.Addr)
	}
	v = publish(topic, `{"n":3}`)
	s = expectChange(t, subs[topic], topic, v)
	if !bytes.Contains(s.Body, []byte(`"server":"config1"`)) {
		t.Fatalf("snapshot not from the primary: %s", s.Body)
	}
}

// upstreamGoroutines returns the stacks of the goroutines running Upstream code.
func upstreamGoroutines() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	var out []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "relay.(*Upstream)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// ownGoroutines counts the goroutines, less the ones fasthttp keeps on its own after a server
// stops (its date updater, its worker pools' cleaners, which end within 10s): they belong to the
// simulated upstream, not to the code under test.
func ownGoroutines() (int, string) {
	var own []string
	for _, g := range testkit.Goroutines() {
		if !strings.Contains(g, "created by github.com/valyala/fasthttp.") {
			own = append(own, g)
		}
	}
	return len(own), strings.Join(own, "\n\n")
}

func TestUpstreamUnwatchClose(t *testing.T) {
	base, _ := ownGoroutines()
	srv, err := sim.StartConfigServer("config1", "127.0.0.1:0", sim.ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	h := NewHub(Options{})
	var logs logBuf
	u := NewOrigin(h, upstreamOpts(t, &logs, srv.Addr))
	for _, topic := range upstreamTopics {
		u.Watch(topic)
	}
	testkit.Eventually(t, "4 sessions", 3*time.Second, func() bool {
		return allEqual(sessions(srv, upstreamTopics...), 1) && u.Sessions() == 4
	})
	u.Unwatch("users/dev")
	u.Unwatch("users/dev")
	if n := u.Sessions(); n != 3 {
		t.Fatalf("%d sessions after Unwatch, want 3", n)
	}
	testkit.Eventually(t, "the session closed at the server", 3*time.Second, func() bool {
		return allEqual(sessions(srv, "users/dev"), 0)
	})
	u.Watch("users/dev")
	testkit.Eventually(t, "the session open again", 3*time.Second, func() bool {
		return allEqual(sessions(srv, "users/dev"), 1) && u.Sessions() == 4
	})

	u.Close()
	u.Close()
	if g := upstreamGoroutines(); g != "" {
		t.Fatalf("goroutines left after Close:\n%s", g)
	}
	if n := u.Sessions(); n != 0 {
		t.Fatalf("%d sessions after Close", n)
	}
	testkit.Eventually(t, "no session at the server", 3*time.Second, func() bool {
		return allEqual(sessions(srv, upstreamTopics...), 0)
	})
	u.Watch("users/dev") // after Close: nothing
	if _, err := u.Fetch(context.Background(), "users/dev"); err != ErrUpstreamClosed {
		t.Fatalf("Fetch after Close: %v", err)
	}
	h.Close()
	srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, stacks := ownGoroutines()
		if n <= base {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before:\n%s", n, base, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUpstreamFetch(t *testing.T) {
	srv := startConfig(t, "config2", sim.ConfigOptions{})
	v, err := srv.Publish("inventory/dev", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	h := NewHub(Options{})
	defer h.Close()
	var logs logBuf

	t.Run("VersionFromJSON", func(t *testing.T) {
		u := NewOrigin(h, upstreamOpts(t, &logs, srv.Addr))
		defer u.Close()
		s, err := u.Fetch(context.Background(), "inventory/dev")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Topic   string          `json:"topic"`
			Version uint64          `json:"version"`
			Data    json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(s.Body, &doc); err != nil {
			t.Fatalf("body %s: %v", s.Body, err)
		}
		if s.Version != v || doc.Version != v || s.ETag != fmt.Sprintf(`"%d"`, v) || string(doc.Data) != `{"a":1}` || s.Fetched.IsZero() {
			t.Fatalf("snapshot %+v, body %s, want version %d", s, s.Body, v)
		}
		if _, err := u.Fetch(context.Background(), "no-such-topic"); err == nil {
			t.Fatal("fetch of an invalid topic succeeded")
		}
	})

	t.Run("FailoverOnRefused", func(t *testing.T) {
		dead := testkit.Addr(t)
		opts := upstreamOpts(t, &logs, dead, srv.Addr)
		u := NewOrigin(h, opts)
		defer u.Close()
		s, err := u.Fetch(context.Background(), "inventory/dev")
		if err != nil {
			t.Fatal(err)
		}
		if s.Version != v {
			t.Fatalf("version %d, want %d", s.Version, v)
		}
		pool := opts.Pool.(*listPool)
		if f, ok := pool.failures(dead); f != 1 || ok != 0 {
			t.Fatalf("the refused server was reported %d times failing, %d answering; want once failing", f, ok)
		}
		if f, ok := pool.failures(srv.Addr); f != 0 || ok != 1 {
			t.Fatalf("the server that answered was reported %d times failing, %d answering; want once answering", f, ok)
		}
	})

	t.Run("FailoverOn5xx", func(t *testing.T) {
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}))
		defer bad.Close()
		opts := upstreamOpts(t, &logs, bad.Listener.Addr().String(), srv.Addr)
		u := NewOrigin(h, opts)
		defer u.Close()
		s, err := u.Fetch(context.Background(), "inventory/dev")
		if err != nil || s.Version != v {
			t.Fatalf("snapshot %+v, err %v", s, err)
		}
		if f, ok := opts.Pool.(*listPool).failures(bad.Listener.Addr().String()); f != 0 || ok != 0 {
			t.Fatalf("the 503 was reported as %d failures and %d answers, want neither: an answer, not counted against its server", f, ok)
		}
	})

	t.Run("AllDown", func(t *testing.T) {
		u := NewOrigin(h, upstreamOpts(t, &logs, testkit.Addr(t), testkit.Addr(t)))
		defer u.Close()
		if _, err := u.Fetch(context.Background(), "inventory/dev"); err == nil {
			t.Fatal("fetch with every server down succeeded")
		}
		empty := upstreamOpts(t, &logs)
		none := NewOrigin(h, empty)
		defer none.Close()
		if _, err := none.Fetch(context.Background(), "inventory/dev"); err != ErrNoServer {
			t.Fatalf("fetch from a pool without an available server: %v, want ErrNoServer", err)
		}
	})

	t.Run("VersionFromETagOrCounter", func(t *testing.T) {
		etag := `W/"41"`
		var mu sync.Mutex
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if etag != "" {
				w.Header().Set("ETag", etag)
			}
			fmt.Fprint(w, "plain text")
		}))
		defer plain.Close()
		u := NewOrigin(h, upstreamOpts(t, &logs, plain.Listener.Addr().String()))
		defer u.Close()
		s, err := u.Fetch(context.Background(), "inventory/dev")
		if err != nil || s.Version != 41 || s.ETag != `"41"` || string(s.Body) != "plain text" {
			t.Fatalf("snapshot %+v, err %v", s, err)
		}
		mu.Lock()
		etag = ""
		mu.Unlock()
		s1, err1 := u.Fetch(context.Background(), "inventory/dev")
		s2, err2 := u.Fetch(context.Background(), "inventory/dev")
		if err1 != nil || err2 != nil || s2.Version <= s1.Version {
			t.Fatalf("counter versions: %+v %v, %+v %v", s1, err1, s2, err2)
		}
	})
}

// TestUpstreamHungSessionIsRedialled: an upstream that accepts the events session and then says
// nothing, not even a pong, is taken for dead after 2*KeepAlive+Timeout and dialled again; one
// that answers pings keeps its session.
func TestUpstreamHungSessionIsRedialled(t *testing.T) {
	for _, answers := range []bool{false, true} {
		t.Run(fmt.Sprintf("answers pings %v", answers), func(t *testing.T) {
			var mu sync.Mutex
			upgrades := 0
			up := websocket.Upgrader{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasPrefix(r.URL.Path, "/events/") {
					fmt.Fprint(w, `{"version":1}`)
					return
				}
				c, err := up.Upgrade(w, r, nil)
				if err != nil {
					return
				}
				defer c.Close()
				mu.Lock()
				upgrades++
				mu.Unlock()
				if !answers {
					<-r.Context().Done() // hung: reads nothing, so no pong goes back
					return
				}
				for { // reading answers pings with pongs (the default ping handler)
					if _, _, err := c.NextReader(); err != nil {
						return
					}
				}
			}))
			t.Cleanup(srv.Close)
			logs := &logBuf{t: t}
			opts := upstreamOpts(t, logs, strings.TrimPrefix(srv.URL, "http://"))
			opts.KeepAlive, opts.Timeout = 50*time.Millisecond, 100*time.Millisecond
			h := NewHub(Options{})
			u := NewOrigin(h, opts)
			t.Cleanup(func() { u.Close(); h.Close() })
			u.Watch("inventory/dev")
			count := func() int { mu.Lock(); defer mu.Unlock(); return upgrades }
			testkit.Eventually(t, "the first session", 2*time.Second, func() bool { return count() >= 1 })
			if !answers {
				testkit.Eventually(t, "the hung session redialled", 3*time.Second, func() bool { return count() >= 2 })
				return
			}
			// Six keep-alive periods: a session whose pongs arrive stays the one session.
			deadline := time.Now().Add(6 * opts.KeepAlive)
			for time.Now().Before(deadline) {
				if n := count(); n != 1 {
					t.Fatalf("%d sessions opened for a live upstream, want 1", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestUpstreamResyncsAfterAGap: a change made while the events session is down has no message
// to relay, so after the reconnection the topic's WebSocket subscribers are closed as Resynced
// (their clients reconnect and fetch), while snapshot subscribers get the new snapshot; a
// reconnection without a change resyncs no one.
func TestUpstreamResyncsAfterAGap(t *testing.T) {
	s1 := startConfig(t, "config1", sim.ConfigOptions{})
	const topic = "inventory/dev"
	if _, err := s1.Publish(topic, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	h := NewHub(Options{SubscriberBuffer: 64})
	defer h.Close()
	var logs logBuf
	u := NewOrigin(h, upstreamOpts(t, &logs, s1.Addr))
	defer u.Close()
	u.Watch(topic)
	if err := u.WaitSession(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the first snapshot", 3*time.Second, func() bool { return h.Snapshot(topic) != nil })

	// A gap without a change: nobody is resynced.
	ws := h.Subscribe(topic, WebSocket)
	s1.Stop()
	testkit.Eventually(t, "the session to end", 3*time.Second, func() bool { return u.Sessions() == 0 })
	if err := s1.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the session back", 3*time.Second, func() bool { return u.Sessions() == 1 })
	v := h.Snapshot(topic).Version
	fetches := func() uint64 { return h.Topics()[0].Fetches }
	f := fetches()
	testkit.Eventually(t, "the refresh after the reconnection", 3*time.Second, func() bool {
		return fetches() > f || h.Topics()[0].Fetches >= 2
	})
	if ws.Resynced() {
		t.Fatal("a reconnection without a change resynced a subscriber")
	}

	// A change during the gap: the WebSocket subscriber is resynced, the snapshot is newer.
	snaps := h.Subscribe(topic, SSE)
	s1.Stop()
	testkit.Eventually(t, "the session to end", 3*time.Second, func() bool { return u.Sessions() == 0 })
	v2, err := s1.Publish(topic, []byte(`{"n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the WebSocket subscriber resynced", 3*time.Second, func() bool { return ws.Resynced() })
	if _, open := <-ws.C(); open {
		t.Fatal("a resynced subscriber's channel is open")
	}
	if v2 <= v {
		t.Fatalf("version %d after %d", v2, v)
	}
	select {
	case m := <-snaps.C():
		if m.Snapshot == nil || m.Snapshot.Version != v2 {
			t.Fatalf("the snapshot subscriber got %+v, want version %d", m, v2)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the snapshot subscriber got nothing")
	}
	if snaps.Resynced() {
		t.Fatal("a snapshot subscriber was resynced")
	}
	if !strings.Contains(logs.String(), "told to resync") {
		t.Errorf("no log line for the resync:\n%s", logs.String())
	}
}

// TestUpstreamSessionsCloseWhenThePoolHasNoServerAvailable: a pool without an available server has
// judged every session's server down; the sessions are closed (a server that went away may leave a
// connection silent until the keep-alive gives up) and come back when the pool has one again.
func TestUpstreamSessionsCloseWhenThePoolHasNoServerAvailable(t *testing.T) {
	srv := startConfig(t, "config1", sim.ConfigOptions{})
	h := NewHub(Options{})
	defer h.Close()
	var logs logBuf
	opts := upstreamOpts(t, &logs, srv.Addr)
	pool := opts.Pool.(*listPool)
	u := NewOrigin(h, opts)
	defer u.Close()
	for _, topic := range upstreamTopics {
		u.Watch(topic)
	}
	testkit.Eventually(t, "4 sessions", 3*time.Second, func() bool {
		return allEqual(sessions(srv, upstreamTopics...), 1) && u.Sessions() == 4
	})
	pool.set() // every server down by the pool's verdict
	testkit.Eventually(t, "the sessions closed", 3*time.Second, func() bool {
		return allEqual(sessions(srv, upstreamTopics...), 0) && u.Sessions() == 0
	})
	pool.set(srv.Addr)
	testkit.Eventually(t, "the sessions back", 3*time.Second, func() bool {
		return allEqual(sessions(srv, upstreamTopics...), 1) && u.Sessions() == 4
	})
}
