package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func snap(v uint64) *Snapshot {
	return &Snapshot{Version: v, ETag: fmt.Sprintf("%q", fmt.Sprint(v)), Body: []byte(fmt.Sprintf(`{"v":%d}`, v))}
}

// expectClosed fails unless c is closed with nothing left queued.
func expectClosed(t *testing.T, c <-chan Message) {
	t.Helper()
	select {
	case m, ok := <-c:
		if ok {
			t.Fatalf("got %+v, want a closed channel", m)
		}
	default:
		t.Fatal("channel not closed")
	}
}

// expectEmpty fails unless c is open with nothing queued.
func expectEmpty(t *testing.T, c <-chan Message) {
	t.Helper()
	select {
	case m, ok := <-c:
		t.Fatalf("got %+v (open %v), want nothing", m, ok)
	default:
	}
}

func stats(h *Hub, topic string) TopicStats {
	for _, s := range h.Topics() {
		if s.Topic == topic {
			return s
		}
	}
	return TopicStats{}
}

func TestFanOutManySubscribersFourTopics(t *testing.T) {
	h := NewHub(Options{SubscriberBuffer: 4})
	defer h.Close()
	topics := []string{"a/dev", "a/prod", "b/dev", "b/prod"}
	subs := make(map[string][]*Subscriber)
	for i := range 1000 {
		tp := topics[i%len(topics)]
		subs[tp] = append(subs[tp], h.Subscribe(tp, SSE))
	}
	published := make(map[string]*Snapshot)
	for i, tp := range topics {
		published[tp] = snap(uint64(i + 1))
		if !h.Publish(tp, published[tp]) {
			t.Fatalf("Publish(%s) refused", tp)
		}
	}
	for tp, ss := range subs {
		if len(ss) != 250 {
			t.Fatalf("%s: %d subscribers", tp, len(ss))
		}
		for _, s := range ss {
			select {
			case m := <-s.C():
				if m.Snapshot != published[tp] || m.Change != nil {
					t.Fatalf("%s: got %+v, want the topic's snapshot", tp, m)
				}
			default:
				t.Fatalf("%s: subscriber got nothing", tp)
			}
			expectEmpty(t, s.C()) // exactly once, and nothing of the other topics
		}
		if st := stats(h, tp); st.Subscribers != 250 || st.Publishes != 1 || st.Drops != 0 || st.Version != published[tp].Version {
			t.Errorf("%s: stats %+v", tp, st)
		}
	}
}

func TestKinds(t *testing.T) {
	h := NewHub(Options{})
	defer h.Close()
	sse := h.Subscribe("t", SSE)
	ws := h.Subscribe("t", WebSocket)
	both := h.Subscribe("t", WebSocket|Snapshots)
	msg := []byte("changed")
	h.PublishChange("t", msg)
	msg[0] = 'X' // the hub copied it
	s1 := snap(1)
	h.Publish("t", s1)

	expectSnapshot := func(s *Subscriber) {
		t.Helper()
		if m := <-s.C(); m.Snapshot != s1 {
			t.Fatalf("got %+v, want snapshot 1", m)
		}
	}
	expectChange := func(s *Subscriber) []byte {
		t.Helper()
		m := <-s.C()
		if string(m.Change) != "changed" || m.Snapshot != nil {
			t.Fatalf("got %+v, want change", m)
		}
		return m.Change
	}
	expectSnapshot(sse)
	expectEmpty(t, sse.C())
	c1 := expectChange(ws)
	expectEmpty(t, ws.C())
	c2 := expectChange(both)
	expectSnapshot(both)
	if &c1[0] != &c2[0] {
		t.Error("the change message was copied per subscriber, want once")
	}

	// A change for a topic nobody subscribed to does not create it.
	h.PublishChange("nobody", []byte("x"))
	if h.lookup("nobody") != nil {
		t.Error("PublishChange created a topic")
	}
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	const buf = 4
	h := NewHub(Options{SubscriberBuffer: buf})
	defer h.Close()
	slow := h.Subscribe("t", SSE)
	fast := make([]*Subscriber, 10)
	for i := range fast {
		fast[i] = h.Subscribe("t", SSE)
	}
	for v := uint64(1); v <= 3*buf; v++ {
		s := snap(v)
		h.Publish("t", s) // in the test goroutine: it must not block on slow
		for _, f := range fast {
			if m := <-f.C(); m.Snapshot != s {
				t.Fatalf("fast subscriber got %+v at version %d", m, v)
			}
		}
		switch {
		case v <= buf:
			if slow.Dropped() {
				t.Fatalf("slow subscriber dropped after %d publishes, buffer %d", v, buf)
			}
		case v == buf+1:
			if !slow.Dropped() {
				t.Fatalf("slow subscriber not dropped after %d publishes", v)
			}
		}
	}
	// The dropped subscriber still gets what was queued, then the end of its channel.
	for v := uint64(1); v <= buf; v++ {
		if m := <-slow.C(); m.Snapshot.Version != v {
			t.Fatalf("queued message %d: %+v", v, m)
		}
	}
	expectClosed(t, slow.C())
	slow.Close() // harmless after a drop
	if st := stats(h, "t"); st.Drops != 1 || st.Subscribers != len(fast) || st.Publishes != 3*buf {
		t.Errorf("stats %+v", st)
	}
	for _, f := range fast {
		if f.Dropped() {
			t.Error("a fast subscriber was dropped")
		}
	}
}

func TestSubscriberClose(t *testing.T) {
	h := NewHub(Options{})
	defer h.Close()
	a, b := h.Subscribe("t", SSE), h.Subscribe("t", SSE)
	a.Close()
	a.Close() // idempotent
	expectClosed(t, a.C())
	if a.Dropped() {
		t.Error("a closed subscriber reports Dropped")
	}
	h.Publish("t", snap(1))
	if m := <-b.C(); m.Snapshot.Version != 1 {
		t.Fatalf("b got %+v", m)
	}
	expectClosed(t, a.C())
	if st := stats(h, "t"); st.Subscribers != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Closed subscribers are compacted away once they outnumber the live ones, so the set does
// not grow with churn, and the survivors keep receiving.
func TestCompaction(t *testing.T) {
	h := NewHub(Options{})
	defer h.Close()
	var subs []*Subscriber
	for range 1000 {
		subs = append(subs, h.Subscribe("t", SSE))
	}
	for _, s := range subs[:900] {
		s.Close()
	}
	t1 := h.lookup("t")
	if n := len(*t1.subs.Load()); n > 200 {
		t.Errorf("%d entries for 100 live subscribers", n)
	}
	h.Publish("t", snap(1))
	for _, s := range subs[900:] {
		if m := <-s.C(); m.Snapshot.Version != 1 {
			t.Fatalf("got %+v", m)
		}
	}
	for range 10 { // churn
		for _, s := range subs[900:] {
			s.Close()
		}
		subs = subs[:900]
		for range 100 {
			subs = append(subs, h.Subscribe("t", SSE))
		}
	}
	if n := len(*t1.subs.Load()); n > 300 {
		t.Errorf("%d entries for 100 live subscribers after churn", n)
	}
	if st := stats(h, "t"); st.Subscribers != 100 {
		t.Errorf("stats %+v", st)
	}
}

func TestHubClose(t *testing.T) {
	h := NewHub(Options{})
	a, b := h.Subscribe("t1", SSE), h.Subscribe("t2", WebSocket)
	h.Close()
	h.Close() // idempotent
	expectClosed(t, a.C())
	expectClosed(t, b.C())
	if a.Dropped() || b.Dropped() {
		t.Error("Hub.Close marked subscribers dropped")
	}
	a.Close() // harmless
	c := h.Subscribe("t1", SSE)
	expectClosed(t, c.C())
	d := h.Subscribe("new", SSE) // a topic created after Close
	expectClosed(t, d.C())
	if _, err := h.WaitSnapshot(context.Background(), "t1"); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitSnapshot after Close: %v", err)
	}
	ran := false
	h.Refresh("t1", func(context.Context) (*Snapshot, error) { ran = true; return snap(1), nil })
	h.Publish("t1", snap(1)) // harmless
	h.PublishChange("t1", []byte("x"))
	if ran {
		t.Error("Refresh after Close ran a fetch")
	}
}

func TestWaitSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := NewHub(Options{})
		defer h.Close()
		if h.Snapshot("t") != nil {
			t.Fatal("Snapshot of an unknown topic")
		}
		type result struct {
			s   *Snapshot
			err error
		}
		done := make(chan result, 3)
		for range 3 {
			go func() {
				s, err := h.WaitSnapshot(context.Background(), "t")
				done <- result{s, err}
			}()
		}
		synctest.Wait()
		if len(done) != 0 {
			t.Fatal("WaitSnapshot returned before the first Publish")
		}
		s1 := snap(1)
		h.Publish("t", s1)
		for range 3 {
			if r := <-done; r.s != s1 || r.err != nil {
				t.Fatalf("WaitSnapshot = %+v", r)
			}
		}
		// Once there is a snapshot, no waiting, and the latest is returned.
		s2 := snap(2)
		h.Publish("t", s2)
		if s, err := h.WaitSnapshot(context.Background(), "t"); s != s2 || err != nil {
			t.Fatalf("WaitSnapshot = %v, %v", s, err)
		}
		if h.Snapshot("t") != s2 {
			t.Fatal("Snapshot is not the latest")
		}

		// The context is honoured (fake time: the 2 s pass at once).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := h.WaitSnapshot(ctx, "other"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitSnapshot with a timeout: %v", err)
		}
		if time.Since(start) != 2*time.Second {
			t.Errorf("waited %v", time.Since(start))
		}
		// Close releases the waiters.
		go func() {
			_, err := h.WaitSnapshot(context.Background(), "third")
			done <- result{nil, err}
		}()
		synctest.Wait()
		h.Close()
		if r := <-done; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("WaitSnapshot after Close: %v", r.err)
		}
	})
}

func TestPublishRefusesOldVersions(t *testing.T) {
	h := NewHub(Options{})
	defer h.Close()
	s := h.Subscribe("t", SSE)
	for _, tc := range []struct {
		v    uint64
		want bool
	}{{2, true}, {2, false}, {1, false}, {3, true}, {0, false}, {10, true}} {
		if got := h.Publish("t", snap(tc.v)); got != tc.want {
			t.Errorf("Publish(version %d) = %v, want %v", tc.v, got, tc.want)
		}
	}
	for _, v := range []uint64{2, 3, 10} {
		if m := <-s.C(); m.Snapshot.Version != v {
			t.Fatalf("got version %d, want %d", m.Snapshot.Version, v)
		}
	}
	expectEmpty(t, s.C())
	if got := h.Snapshot("t").Version; got != 10 {
		t.Errorf("current version %d", got)
	}
	if st := stats(h, "t"); st.Publishes != 3 || st.Version != 10 {
		t.Errorf("stats %+v", st)
	}
}

func TestRefreshCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := NewHub(Options{OnFetchError: func(topic string, err error) { t.Errorf("fetch error %s: %v", topic, err) }})
		defer h.Close()
		var fetches atomic.Int32
		release := make(chan struct{})
		fetch := func(ctx context.Context) (*Snapshot, error) {
			n := fetches.Add(1)
			<-release
			return snap(uint64(n)), nil
		}
		h.Refresh("t", fetch)
		synctest.Wait() // the first fetch is running and blocked
		if fetches.Load() != 1 {
			t.Fatalf("%d fetches started", fetches.Load())
		}
		for range 3 {
			h.Refresh("t", fetch) // must not block
		}
		release <- struct{}{}
		synctest.Wait() // the first published, the second is running and blocked
		if fetches.Load() != 2 || h.Snapshot("t").Version != 1 {
			t.Fatalf("%d fetches, snapshot %+v", fetches.Load(), h.Snapshot("t"))
		}
		release <- struct{}{}
		synctest.Wait() // nothing more runs
		if fetches.Load() != 2 || h.Snapshot("t").Version != 2 {
			t.Fatalf("%d fetches, snapshot %+v", fetches.Load(), h.Snapshot("t"))
		}
		// Idle again: the next Refresh fetches at once.
		h.Refresh("t", fetch)
		release <- struct{}{}
		synctest.Wait()
		if fetches.Load() != 3 || h.Snapshot("t").Version != 3 {
			t.Fatalf("%d fetches, snapshot %+v", fetches.Load(), h.Snapshot("t"))
		}
		if st := stats(h, "t"); st.Fetches != 3 || st.FetchErrors != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestRefreshErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type report struct {
			topic string
			err   error
		}
		var mu sync.Mutex
		var reports []report
		h := NewHub(Options{OnFetchError: func(topic string, err error) {
			mu.Lock()
			reports = append(reports, report{topic, err})
			mu.Unlock()
		}})
		defer h.Close()
		boom := errors.New("boom")
		h.Refresh("t", func(context.Context) (*Snapshot, error) { return nil, boom })
		synctest.Wait()
		h.Refresh("t", func(context.Context) (*Snapshot, error) { return nil, nil })
		synctest.Wait()
		mu.Lock()
		if len(reports) != 2 || reports[0] != (report{"t", boom}) || reports[1].topic != "t" || !errors.Is(reports[1].err, errNoSnapshot) {
			t.Errorf("reports %+v", reports)
		}
		mu.Unlock()
		if h.Snapshot("t") != nil {
			t.Error("a failed fetch published something")
		}
		if st := stats(h, "t"); st.Fetches != 2 || st.FetchErrors != 2 {
			t.Errorf("stats %+v", st)
		}
		// Close cancels the context of a running fetch.
		h.Refresh("t", func(ctx context.Context) (*Snapshot, error) { <-ctx.Done(); return nil, ctx.Err() })
		synctest.Wait()
		h.Close()
		synctest.Wait()
		mu.Lock()
		if len(reports) != 3 || !errors.Is(reports[2].err, context.Canceled) {
			t.Errorf("reports %+v", reports)
		}
		mu.Unlock()
	})
}

func TestIdleTopics(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h := NewHub(Options{TopicIdleTimeout: 5 * time.Minute, Now: clock})
	defer h.Close()

	a := h.Subscribe("a", SSE)
	h.Publish("b", snap(1)) // a topic that never had a subscriber: idle from its creation
	advance(5 * time.Minute)
	if got := h.IdleTopics(); len(got) != 0 {
		t.Fatalf("at exactly the timeout: %q", got)
	}
	advance(time.Nanosecond)
	if got := h.IdleTopics(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("IdleTopics = %q, want [b]", got)
	}
	a2 := h.Subscribe("a", SSE)
	a.Close()
	advance(time.Hour)
	if got := h.IdleTopics(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("with a subscriber left: %q", got)
	}
	a2.Close() // the last one leaves: the clock starts now
	advance(5 * time.Minute)
	if got := h.IdleTopics(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("IdleTopics = %q", got)
	}
	advance(time.Second)
	if got := h.IdleTopics(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("IdleTopics = %q, want [a b]", got)
	}
	// A GET of the snapshot (Touch) starts the clock again; Touch never creates a topic.
	h.Touch("b")
	advance(5 * time.Minute)
	if got := h.IdleTopics(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a Touch of b: %q, want [a]", got)
	}
	advance(time.Second)
	if got := h.IdleTopics(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("a timeout after the Touch: %q, want [a b]", got)
	}
	h.Touch("nobody")
	if got := h.Topics(); len(got) != 2 {
		t.Fatalf("Touch created a topic: %v", got)
	}
	// A new subscriber makes a topic busy again; a drop counts as leaving.
	h2 := NewHub(Options{SubscriberBuffer: 1, Now: clock})
	defer h2.Close()
	h2.Subscribe("c", SSE)
	h2.Publish("c", snap(1))
	h2.Publish("c", snap(2)) // drops the only subscriber
	advance(5*time.Minute + time.Second)
	if got := h2.IdleTopics(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after a drop: %q", got)
	}
	h2.Subscribe("c", SSE)
	if got := h2.IdleTopics(); len(got) != 0 {
		t.Fatalf("after a new subscriber: %q", got)
	}
}

// TestConcurrent runs publishes, changes, subscribes and closes of the same topics at once,
// for the race detector, and checks that each subscriber sees increasing versions and that
// everything ends closed.
func TestConcurrent(t *testing.T) {
	h := NewHub(Options{SubscriberBuffer: 2})
	topics := []string{"x", "y"}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, tp := range topics {
		wg.Go(func() { // publisher
			for v := uint64(1); v <= 500; v++ {
				h.Publish(tp, snap(v))
				h.PublishChange(tp, []byte("c"))
			}
		})
		wg.Go(func() { // a second publisher racing on versions
			for v := uint64(1); v <= 500; v += 3 {
				h.Publish(tp, snap(v))
			}
		})
	}
	var subscribers sync.WaitGroup
	for i := range 8 {
		subscribers.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				s := h.Subscribe(topics[(i+j)%2], SSE|Changes)
				var last uint64
				for n := 0; n < 5; n++ {
					m, ok := <-s.C()
					if !ok {
						break
					}
					if m.Snapshot != nil {
						if m.Snapshot.Version <= last {
							t.Errorf("version %d after %d", m.Snapshot.Version, last)
						}
						last = m.Snapshot.Version
					}
				}
				if j%2 == 0 {
					s.Close()
				} // else leave it to a drop or to Hub.Close
				_ = h.Topics()
				_ = h.IdleTopics()
				_ = h.Snapshot(topics[0])
			}
		})
	}
	wg.Wait()
	close(stop)
	h.Close()
	subscribers.Wait()
	for _, st := range h.Topics() {
		if st.Subscribers != 0 || st.Version != 500 {
			t.Errorf("after Close: %+v", st)
		}
	}
}

// Publish allocates nothing per subscriber (nor at all, once the topic exists).
func TestPublishDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	h := NewHub(Options{SubscriberBuffer: 128})
	defer h.Close()
	for range 1000 {
		h.Subscribe("t", SSE)
	}
	snaps := make([]*Snapshot, 101)
	for i := range snaps {
		snaps[i] = snap(uint64(i + 1))
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() { h.Publish("t", snaps[i]); i++ }); n != 0 {
		t.Errorf("Publish to 1000 subscribers: %v allocs, want 0", n)
	}
}

func BenchmarkPublish10000(b *testing.B) {
	const buf = 64
	h := NewHub(Options{SubscriberBuffer: buf})
	defer h.Close()
	subs := make([]*Subscriber, 10000)
	for i := range subs {
		subs[i] = h.Subscribe("t", SSE)
	}
	snaps := make([]*Snapshot, b.N)
	for i := range snaps {
		snaps[i] = snap(uint64(i + 1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%buf == 0 { // drain, untimed, before the buffers fill
			b.StopTimer()
			for _, s := range subs {
				for len(s.C()) > 0 {
					<-s.C()
				}
			}
			b.StartTimer()
		}
		h.Publish("t", snaps[i])
	}
	b.StopTimer()
	if st := stats(h, "t"); st.Drops != 0 || st.Publishes != uint64(b.N) {
		b.Fatalf("stats %+v", st)
	}
}

// TestHubSubscribersCountsEveryTopic: Subscribers follows subscriptions, closes, drops and
// Hub.Close across topics.
func TestHubSubscribersCountsEveryTopic(t *testing.T) {
	h := NewHub(Options{SubscriberBuffer: 1})
	var subs []*Subscriber
	for i := range 10 {
		subs = append(subs, h.Subscribe([]string{"a/b", "c/d"}[i%2], SSE))
	}
	if n := h.Subscribers(); n != 10 {
		t.Fatalf("%d subscribers, want 10", n)
	}
	subs[0].Close()
	subs[0].Close() // twice counts once
	subs[1].Close()
	if n := h.Subscribers(); n != 8 {
		t.Fatalf("%d subscribers after 2 closes, want 8", n)
	}
	// Two publishes on a/b with buffers of 1 drop its 4 open subscribers that read nothing.
	h.Publish("a/b", &Snapshot{Version: 1})
	h.Publish("a/b", &Snapshot{Version: 2})
	if n := h.Subscribers(); n != 4 {
		t.Fatalf("%d subscribers after a/b's were dropped, want 4", n)
	}
	h.Close()
	if n := h.Subscribers(); n != 0 {
		t.Fatalf("%d subscribers after Close, want 0", n)
	}
}
