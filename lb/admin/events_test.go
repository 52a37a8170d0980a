package admin

// GET /events over real sockets, from a Handler over a testBackend whose events come from a real
// event.Bus: what a client reads, how many streams run, how a slow one is dropped, how Close ends
// them. That a running fairlead publishes a real leader change there is package lb's test.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck/event"
)

// sseMsg is one message of an event stream: a dispatched event (event, id, data, retry) or a comment.
type sseMsg struct {
	event, id, data, retry string
	comment                string
}

// sseClient reads one /events stream into msgs; done is closed when the stream ends, with err saying
// how (io.EOF: the server ended it cleanly).
type sseClient struct {
	header http.Header
	msgs   chan sseMsg
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// openEvents opens GET /events on the admin listener; the stream is closed at the end of the test.
func (e *adminEnv) openEvents(t *testing.T) *sseClient {
	t.Helper()
	return e.openEventsAt(t, "/events")
}

func (e *adminEnv) openEventsAt(t *testing.T, path string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// No client timeout: it would cut the stream.
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	c := &sseClient{header: resp.Header, msgs: make(chan sseMsg, 1<<14), done: make(chan struct{}), cancel: cancel}
	go c.read(resp.Body)
	t.Cleanup(func() {
		cancel()
		<-c.done
	})
	return c
}

func (c *sseClient) read(body io.ReadCloser) {
	defer close(c.done)
	defer body.Close()
	r := bufio.NewReader(body)
	var m sseMsg
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			c.err = err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			if line == "" {
				if m != (sseMsg{}) {
					c.msgs <- m
				}
				m = sseMsg{}
			} else {
				c.msgs <- sseMsg{comment: value}
			}
		case "event":
			m.event = value
		case "id":
			m.id = value
		case "data":
			m.data = value
		case "retry":
			m.retry = value
		}
	}
}

// next returns the next message that match accepts, failing the test if none comes within timeout.
func (c *sseClient) next(t *testing.T, timeout time.Duration, what string, match func(sseMsg) bool) sseMsg {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-c.msgs:
			if match(m) {
				return m
			}
		case <-c.done:
			// What was read before the end is still in msgs.
			select {
			case m := <-c.msgs:
				if match(m) {
					return m
				}
				continue
			default:
			}
			t.Fatalf("waiting for %s: the stream ended (%v)", what, c.err)
		case <-deadline:
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

// nextEvent returns the next message of the given event name.
func (c *sseClient) nextEvent(t *testing.T, timeout time.Duration, event string) sseMsg {
	t.Helper()
	return c.next(t, timeout, "event "+event, func(m sseMsg) bool { return m.event == event })
}

// ended waits for the stream to end and returns how it did.
func (c *sseClient) ended(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		t.Fatalf("the stream did not end within %s", timeout)
		return nil
	}
}

func decodeEvent(t *testing.T, m sseMsg) StreamEvent {
	t.Helper()
	var e StreamEvent
	if err := json.Unmarshal([]byte(m.data), &e); err != nil {
		t.Fatalf("event data %q: %v", m.data, err)
	}
	return e
}

func decodeSnapshot(t *testing.T, m sseMsg) Status {
	t.Helper()
	var st Status
	if err := json.Unmarshal([]byte(m.data), &st); err != nil {
		t.Fatalf("snapshot data %q: %v", m.data, err)
	}
	return st
}

// runningStreams counts the /events streams whose writer still runs (it holds the subscription).
func runningStreams() int {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2) //nolint:errcheck
	return strings.Count(b.String(), "admin.(*stream).run(")
}

func TestEventsDeliverALeaderChangeNamingTheNewLeaderToEverySubscriber(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{})
	p1, p2 := "127.0.0.1:9001", "127.0.0.1:9002"
	subs := []*sseClient{e.openEvents(t), e.openEvents(t)}
	for _, s := range subs {
		if ct, cc := s.header.Get("Content-Type"), s.header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-cache" {
			t.Fatalf("Content-Type %q, Cache-Control %q; want text/event-stream, no-cache", ct, cc)
		}
		st := decodeSnapshot(t, s.nextEvent(t, 2*time.Second, "snapshot"))
		if len(st.Pools) != 1 || st.Pools[0].Leader != p1 {
			t.Fatalf("first snapshot: pools %+v; want pool platform led by %s", st.Pools, p1)
		}
	}

	e.b.Publish(event.Event{Kind: event.LeaderChanged, Pool: "platform", Server: p2, Old: p1})
	for i, s := range subs {
		m := s.nextEvent(t, 5*time.Second, "leader_changed")
		ev := decodeEvent(t, m)
		if ev.Kind != "leader_changed" || ev.Pool != "platform" || ev.Server != p2 || ev.Old != p1 || ev.Severity != "ok" {
			t.Fatalf("subscriber %d: leader_changed %+v; want platform, server %s, old %s, severity ok", i, ev, p2, p1)
		}
		if m.id == "" || m.id != jsonNumber(ev.Seq) || ev.Time.IsZero() {
			t.Fatalf("subscriber %d: id %q, seq %d, time %s: want the id to be the seq and a time", i, m.id, ev.Seq, ev.Time)
		}
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestEventsStartWithASnapshotAtOnceAndSendHeartbeatsWhileIdle(t *testing.T) {
	// No periodic snapshot in this test: the one that comes is the one sent on connect.
	e := startAdmin(t, newTestBackend(nil), Options{SnapshotEvery: time.Hour, PingEvery: 50 * time.Millisecond})

	s := e.openEvents(t)
	if m := s.next(t, 2*time.Second, "the first message", func(sseMsg) bool { return true }); m.retry != "2000" {
		t.Fatalf("first message %+v; want the retry delay", m)
	}
	st := decodeSnapshot(t, s.next(t, 2*time.Second, "the snapshot", func(sseMsg) bool { return true }))
	if len(st.Pools) != 1 || len(st.Pools[0].Servers) != 2 || st.Pools[0].Servers[0].Check == nil {
		t.Fatalf("snapshot %+v; want the platform pool with its two servers and their checks", st)
	}
	for i := 0; i < 3; i++ {
		if m := s.next(t, 2*time.Second, "a heartbeat", func(sseMsg) bool { return true }); m.comment != "ping" {
			t.Fatalf("got %+v while idle; want only heartbeats (: ping)", m)
		}
	}
}

func TestEventsCarryProbeAnswersOnlyWhenAskedFor(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{})
	plain, checks := e.openEvents(t), e.openEventsAt(t, "/events?checks=1")
	plain.nextEvent(t, 2*time.Second, "snapshot")
	checks.nextEvent(t, 2*time.Second, "snapshot")

	e.b.Publish(event.Event{Kind: event.CheckAnswered, Pool: "platform", Server: "127.0.0.1:9001", Status: 200,
		Latency: 1500 * time.Microsecond})
	ev := decodeEvent(t, checks.nextEvent(t, 5*time.Second, "check_answered"))
	if ev.Pool != "platform" || ev.Server != "127.0.0.1:9001" || ev.Status != 200 || ev.LatencyMs != 1.5 {
		t.Errorf("check_answered %+v; want the pool, the server, its answer and the probe's latency", ev)
	}
	// By then the plain stream has had the same probe to send, and sent none of it.
	e.b.Publish(event.Event{Kind: event.AdminAction, Pool: "platform", Detail: "marker"})
	m := plain.next(t, 5*time.Second, "the marker", func(m sseMsg) bool { return m.event != "" && m.event != "snapshot" })
	if m.event != "admin_action" {
		t.Errorf("without ?checks=1 the stream sent %+v", m)
	}
}

func TestEventsSendSnapshotsPeriodicallyAndTheStreamEndsWhenTheClientGoesAway(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{SnapshotEvery: 100 * time.Millisecond, PingEvery: time.Hour})
	before := runningStreams()

	s := e.openEvents(t)
	for i := 0; i < 3; i++ {
		s.nextEvent(t, 2*time.Second, "snapshot")
	}
	if n := runningStreams(); n != before+1 {
		t.Fatalf("%d streams running; want %d", n, before+1)
	}
	s.cancel()
	testkit.Eventually(t, "the stream to end on the server", 5*time.Second, func() bool { return runningStreams() == before })
}

func TestASlowEventsSubscriberIsDroppedWithoutSlowingFairleadOrTheOtherSubscribers(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{})
	before := runningStreams()

	// The slow subscriber asks for the stream and never reads it (until the end of the test).
	slow, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("GET /events HTTP/1.1\r\nHost: fairlead\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	good := e.openEvents(t)
	good.nextEvent(t, 2*time.Second, "snapshot")
	testkit.Eventually(t, "both streams to run", 2*time.Second, func() bool { return runningStreams() == before+2 })

	// Publish in batches that the good subscriber keeps up with, until the slow one is dropped. Publish
	// must not wait for a subscriber: a blocked one would hold the publisher (a health check, a reload)
	// for ever, so a bound well above the time a batch takes shows it does not.
	detail := strings.Repeat("x", 16<<10)
	const batch = EventsBuffer / 8
	dropped := false
	for round := 0; round < 200 && !dropped; round++ {
		start := time.Now()
		for i := 0; i < batch-1; i++ {
			e.b.Publish(event.Event{Kind: event.AdminAction, Pool: "platform", Detail: detail})
		}
		end := fmt.Sprintf("end of batch %d", round)
		e.b.Publish(event.Event{Kind: event.AdminAction, Pool: "platform", Detail: end})
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("publishing %d events took %s with a subscriber that does not read", batch, d)
		}
		good.next(t, 10*time.Second, end, func(m sseMsg) bool { return strings.Contains(m.data, `"detail":"`+end+`"`) })
		dropped = runningStreams() == before+1
	}
	if !dropped {
		testkit.Eventually(t, "the slow subscriber to be dropped", 3*time.Second, func() bool { return runningStreams() == before+1 })
	}

	// The admin listener and the other subscriber go on.
	start := time.Now()
	if code, _, _ := e.do(t, http.MethodGet, "/api/status", ""); code != http.StatusOK || time.Since(start) > time.Second {
		t.Fatalf("/api/status: %d in %s", code, time.Since(start))
	}
	e.b.Publish(event.Event{Kind: event.AdminAction, Pool: "platform", Detail: "after"})
	good.next(t, 5*time.Second, "the event after the drop", func(m sseMsg) bool {
		return m.event == "admin_action" && strings.Contains(m.data, `"detail":"after"`)
	})

	// The slow subscriber's connection was closed: reading it now gets what was sent, then its end.
	slow.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	n, err := io.Copy(io.Discard, slow)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("reading the slow subscriber's stream after %d bytes: %v; want its end", n, err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// Close, then the server's shutdown, as fairlead's Close does them.
func TestEventsStreamsEndCleanlyAndAtOnceWhenFairleadCloses(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{})
	before := runningStreams()

	subs := []*sseClient{e.openEvents(t), e.openEvents(t)}
	for _, s := range subs {
		s.nextEvent(t, 2*time.Second, "snapshot")
	}
	start := time.Now()
	e.stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %s with two event streams open", d)
	}
	for i, s := range subs {
		if err := s.ended(t, 2*time.Second); err != io.EOF {
			t.Errorf("subscriber %d: the stream ended with %v; want a clean end (EOF)", i, err)
		}
	}
	testkit.Eventually(t, "no stream to run", 2*time.Second, func() bool { return runningStreams() == before })
}

func TestTheEventsAndThePageAnswerOnlyReads(t *testing.T) {
	e := startAdmin(t, newTestBackend(nil), Options{})
	f := func(method, path, wantAllow string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+e.addr+path, nil)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != wantAllow {
			t.Errorf("%s %s: %s, Allow %q; want 405, Allow %q", method, path, resp.Status, resp.Header.Get("Allow"), wantAllow)
		}
	}
	f(http.MethodPost, "/events", "GET")
	f(http.MethodHead, "/events", "GET")
	f(http.MethodPost, "/", "GET, HEAD")
	f(http.MethodDelete, "/", "GET, HEAD")
}
