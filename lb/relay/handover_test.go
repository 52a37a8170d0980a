package relay

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// moveStreams detaches from's streams and adopts them in to, as a binary upgrade does between two
// processes; it returns how many moved. A stream over TLS moves with its session (want: each does),
// resumed by fairlead's record layer.
func moveStreams(t *testing.T, from, to *Route, wantTLS bool) int {
	t.Helper()
	moved, stayed := from.DetachStreams(5 * time.Second)
	if stayed != 0 {
		t.Errorf("%d streams stayed", stayed)
	}
	for _, m := range moved {
		if (m.TLS != nil) != wantTLS {
			t.Fatalf("a %s stream moved with a TLS session %v, want %v", m.Kind, m.TLS != nil, wantTLS)
		}
		var conn net.Conn
		var err error
		if m.TLS != nil {
			conn, err = tlsrecord.Resume(m.File, *m.TLS)
		} else {
			conn, err = net.FileConn(m.File)
			m.File.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := to.Adopt(*m, conn, nil); err != nil {
			conn.Close()
			t.Fatal(err)
		}
	}
	return len(moved)
}

// captureListener is the front end's HTTPS listener as far as a relay stream's move needs it: each
// connection a TLS server connection over an nbio socket that captures its session (nbio's
// CaptureTLS), its handshake done at Accept.
type captureListener struct {
	net.Listener
	config *tls.Config
}

func (l captureListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		nb, err := nbio.NewTCPConn(c.(*net.TCPConn))
		if err != nil {
			c.Close()
			continue
		}
		nb.CaptureTLS(true)
		tc := tls.Server(nb, nb.TLSSession().Config(l.config, nil, nil))
		tc.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if err := tc.Handshake(); err != nil {
			c.Close()
			continue
		}
		tc.SetDeadline(time.Time{}) //nolint:errcheck
		nb.HandshakeDone()
		return tc, nil
	}
}

// newCaptureListener listens on 127.0.0.1 with a certificate of a new CA, capturing each connection's
// TLS session as the front end does; the clients' config trusts it. The test's cleanup closes it.
func newCaptureListener(t *testing.T) (captureListener, *tls.Config) {
	t.Helper()
	ca, err := sim.NewCA("relay test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return captureListener{Listener: ln, config: &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}}, &tls.Config{RootCAs: ca.Pool()}
}

// startRouteTLS is startRoute over HTTPS; the clients' config trusts its certificate.
func startRouteTLS(t *testing.T, files map[string]string, name string) (*routeEnv, *tls.Config) {
	t.Helper()
	cl, client := newCaptureListener(t)
	rr, pool, logs := newRoute(t, files, name)
	if err := rr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			var kb [256]byte
			if req, ok := rr.Match(ctx, kb[:0]); ok {
				rr.Serve(ctx, req)
			}
		},
		KeepHijackedConns: true,
	}
	e := &routeEnv{rr: rr, pool: pool, logs: logs, addr: cl.Addr().String(),
		client: serveForTest(t, srv, cl, rr.Close, 10*time.Second)}
	return e, client
}

// Issue 38: an SSE stream and a WebSocket move from one relay to another (the relays of two
// processes on the same upstream) while changes are published every few milliseconds and the
// WebSocket's client sends frames: the SSE stream's events arrive whole, each a newer version than
// the one before, up to the last; the WebSocket gets every change message once, in order, none
// missing; neither connection ends, and the client's frames after the move are read by the new
// relay (its close is answered).
func TestStreamsMoveBetweenRelaysWithChangesFlowingNothingLostRepeatedOrCut(t *testing.T) {
	testStreamsMove(t, false)
}

// Issue 38: the same over HTTPS: the streams move with their TLS sessions (TLS 1.2 for the SSE
// stream, 1.3 for the WebSocket), taken over from crypto/tls with the client's frames flowing, then
// once more from fairlead's record layer to a third relay.
func TestHTTPSStreamsMoveBetweenRelaysWithTheirTLSSessions(t *testing.T) {
	testStreamsMove(t, true)
}

func testStreamsMove(t *testing.T, https bool) {
	c := testkit.StartRelaySim(t, 1)
	const topic = "inventory/dev"
	files := routeFiles(t, testkit.ConfigAddrs(c), "keepalive = \"50ms\"\n")
	var old, next, third *routeEnv
	var sse *testkit.SSE
	var ws *websocket.Conn
	if https {
		var clientTLS *tls.Config
		old, clientTLS = startRouteTLS(t, files, "appconfig")
		next = startRoute(t, files, "appconfig")
		third = startRoute(t, files, "appconfig")
		var err error
		sse, _, err = testkit.TrySSE(old.addr, "/relay/"+topic, func() (net.Conn, error) {
			cfg := clientTLS.Clone()
			cfg.MaxVersion = tls.VersionTLS12
			return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", old.addr, cfg)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sse.Conn.Close() })
		cfg := clientTLS.Clone()
		cfg.MinVersion = tls.VersionTLS13
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, TLSClientConfig: cfg}
		ws, _, err = d.Dial("wss://"+old.addr+"/relay/"+topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
	} else {
		old, next = startRoute(t, files, "appconfig"), startRoute(t, files, "appconfig")
		sse = testkit.DialSSE(t, old.addr, "/relay/"+topic)
		ws = old.ws(t, "/relay/"+topic)
	}
	firstEv := sse.WaitVersion(t, 1, 5*time.Second)
	testkit.Eventually(t, "two streams", 5*time.Second, func() bool { return old.rr.opts.Streams.Len() == 2 })

	// The client sends frames all along (the relay reads and discards them): the move stops the
	// relay's reading between two of them.
	stopSending := make(chan struct{})
	var sending sync.WaitGroup
	sending.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopSending:
				return
			case <-time.After(time.Millisecond):
			}
			ws.SetWriteDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
			if err := ws.WriteMessage(websocket.TextMessage, []byte("client frame "+strconv.Itoa(i))); err != nil {
				return
			}
		}
	})
	// The changes, every 5ms, before, during and after the move.
	var last atomic.Uint64
	stopPublishing := make(chan struct{})
	var publishing sync.WaitGroup
	publishing.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stopPublishing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			last.Store(testkit.Publish(t, c, topic, `{"n":`+strconv.Itoa(n)+`}`))
		}
	})
	// The readers: every SSE event and every change message, whole and checked, until an error.
	sseIDs, wsVersions := make(chan uint64, 10000), make(chan uint64, 10000)
	sseErr, wsErr := make(chan error, 1), make(chan error, 1)
	go func() {
		for {
			ev, err := sse.Next(time.Minute)
			if err != nil {
				sseErr <- err
				return
			}
			id, _ := strconv.ParseUint(ev.ID, 10, 64)
			var s RelaySnapshotForTest
			if ev.Event != "snapshot" || json.Unmarshal([]byte(ev.Data), &s) != nil || s.Version != id {
				sseErr <- &net.AddrError{Err: "a cut or foreign event: " + ev.ID + " " + ev.Event + ": " + ev.Data}
				return
			}
			sseIDs <- id
		}
	}()
	go func() {
		for {
			ch, _, err := testkit.ReadChange(ws, time.Minute)
			if err != nil {
				wsErr <- err
				return
			}
			wsVersions <- ch.Version
		}
	}()
	// upTo collects what a reader got until version v.
	upTo := func(what string, got <-chan uint64, failed <-chan error, v uint64) (all []uint64) {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for len(all) == 0 || all[len(all)-1] < v {
			select {
			case n := <-got:
				all = append(all, n)
			case err := <-failed:
				t.Fatalf("%s: %v after %v", what, err, all)
			case <-timeout:
				t.Fatalf("%s: %v, want up to version %d", what, all, v)
			}
		}
		return all
	}

	time.Sleep(300 * time.Millisecond) // changes flowing through the old relay
	if n := moveStreams(t, old.rr, next.rr, https); n != 2 {
		t.Fatalf("%d streams moved, want 2", n)
	}
	time.Sleep(300 * time.Millisecond) // and through the new one
	final := next
	if third != nil { // and once more, from fairlead's record layer
		if n := moveStreams(t, next.rr, third.rr, true); n != 2 {
			t.Fatalf("%d streams moved again, want 2", n)
		}
		time.Sleep(300 * time.Millisecond)
		final = third
	}
	close(stopPublishing)
	publishing.Wait()
	v := last.Load()
	close(stopSending)
	sending.Wait()
	first, _ := strconv.ParseUint(firstEv.ID, 10, 64)
	ids := upTo("SSE", sseIDs, sseErr, v)
	for i, id := range ids {
		if i == 0 && id <= first || i > 0 && id <= ids[i-1] {
			t.Fatalf("SSE: version %d after %d (each newer than the one before): %v", id, max(first, ids[max(i-1, 0)]), ids)
		}
	}
	changes := upTo("WebSocket", wsVersions, wsErr, v)
	for i := 1; i < len(changes); i++ {
		if changes[i] != changes[i-1]+1 {
			t.Fatalf("WebSocket: change %d after %d (every change once, in order): %v", changes[i], changes[i-1], changes)
		}
	}
	if ids[len(ids)-1] != v || changes[len(changes)-1] != v {
		t.Errorf("the last version: SSE %d, WebSocket %d, want %d", ids[len(ids)-1], changes[len(changes)-1], v)
	}
	t.Logf("%d SSE events, %d change messages, up to version %d", len(ids), len(changes), v)
	if old.rr.opts.Streams.Len() != 0 || final.rr.opts.Streams.Len() != 2 {
		t.Errorf("streams: %d in the old relay, %d in the last, want 0 and 2", old.rr.opts.Streams.Len(), final.rr.opts.Streams.Len())
	}
	// The new relay reads the client's frames: a close is answered.
	ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(5*time.Second)) //nolint:errcheck
	select {
	case err := <-wsErr:
		if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			t.Errorf("after the close: %v, want the new relay's answer (1000)", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the new relay did not answer the close")
	}
}

// RelaySnapshotForTest is the simulator's snapshot body, as far as the test reads it.
type RelaySnapshotForTest struct {
	Version uint64 `json:"version"`
}

// The reader's view of a client's frames: between two frames only at their ends, whatever the
// bytes' split, with lengths of 7, 16 and 64 bits, and not inside a fragmented message.
func TestFramesFollowsTheClientsFramesAcrossAnySplit(t *testing.T) {
	frame := func(fin bool, op byte, n int) []byte {
		b := []byte{op, 0x80}
		if fin {
			b[0] |= 0x80
		}
		switch {
		case n < 126:
			b[1] |= byte(n)
		case n < 1<<16:
			b[1] |= 126
			b = binary.BigEndian.AppendUint16(b, uint16(n))
		default:
			b[1] |= 127
			b = binary.BigEndian.AppendUint64(b, uint64(n))
		}
		b = append(b, 1, 2, 3, 4) // the mask
		return append(b, make([]byte, n)...)
	}
	var stream []byte
	var ends []int // where a frame ends between two messages
	add := func(b []byte, between bool) {
		stream = append(stream, b...)
		if between {
			ends = append(ends, len(stream))
		}
	}
	add(frame(true, 1, 5), true)
	add(frame(true, 10, 0), true) // a pong
	add(frame(true, 2, 300), true)
	add(frame(false, 1, 3), false) // a message in fragments, a ping between them
	add(frame(true, 9, 2), false)
	add(frame(true, 0, 4), true)
	add(frame(true, 1, 70000), true)
	for _, step := range []int{1, 2, 3, 7, 64, 1000, len(stream)} {
		var f frames
		var got []int
		for i := 0; i < len(stream); i += step {
			end := min(i+step, len(stream))
			f.scan(stream[i:end])
			if f.between() {
				got = append(got, end)
			} else if slices.Contains(ends, end) {
				t.Fatalf("step %d: not between two frames at %d", step, end)
			}
		}
		for _, p := range got {
			if !slices.Contains(ends, p) {
				t.Fatalf("step %d: between two frames at %d, inside one (ends %v)", step, p, ends)
			}
		}
		if len(got) == 0 || got[len(got)-1] != len(stream) {
			t.Fatalf("step %d: not between two frames at the end", step)
		}
	}
}

// Issue 38, App Configuration: a client SDK's SSE stream and a server SDK's wsfeature WebSocket move
// to another relay (whose versions are its own counts: the two compare the configurations) with a
// change published between the old relay's stop and the new one's start. The SSE stream gets it as
// SSEConfig_payload (not a new Registration), the WebSocket one change frame for it; then one of
// each per change, none repeated, and the heartbeats go on.
func TestAppConfigurationStreamsMoveWithAChangeMadeDuringTheMove(t *testing.T) {
	const topic = "payments/prod"
	env := testkit.StartAppConfigEnv(t, testkit.AppConfigEnvOptions{APIKey: acAPIKey, ClientKey: acClientKey,
		GUID: acGUID, Topics: acTopics, ExpiresIn: time.Hour})
	var c testkit.Config
	c.Table("frontend").Set("listen", "127.0.0.1:0")
	env.Relay(&c, `response_timeout = "2s"`, `keepalive = "200ms"`)
	files := map[string]string{"10-ibm.toml": c.String()}
	old := &acRoute{routeEnv: startRoute(t, files, "ibm"), env: env}
	next := startRoute(t, files, "ibm")
	testkit.Eventually(t, "both relays' sessions", 10*time.Second, func() bool {
		return env.Primary.Stats().Topics[topic].WSSessions == 2
	})
	sse := testkit.DialSSE(t, old.addr, "/apprapp/feature/v1/instances/"+acGUID+"/environments/prod/sse/subscribe?collection_id=payments",
		"Authorization", acClientKey)
	if ev, err := sse.Next(5 * time.Second); err != nil || ev.Event != "Registration" || testkit.AppConfigVersion(t, []byte(ev.Data)) != 1 {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	ws, _, err := old.dialWSFeature(t, acGUID, topic, acClientKey)
	if err != nil {
		t.Fatal(err)
	}
	changeFrames, wsErr := make(chan string, 100), make(chan error, 1)
	go func() {
		for {
			ws.SetReadDeadline(time.Now().Add(time.Minute)) //nolint:errcheck
			_, msg, err := ws.ReadMessage()
			if err != nil {
				wsErr <- err
				return
			}
			if string(msg) != "test message" {
				changeFrames <- string(msg)
			}
		}
	}()
	nextChange := func(when string) {
		t.Helper()
		select {
		case <-changeFrames:
		case err := <-wsErr:
			t.Fatalf("%s: the WebSocket ended: %v", when, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change frame", when)
		}
	}
	nextPayload := func(when string, n int) {
		t.Helper()
		ev, err := sse.Next(10 * time.Second)
		if err != nil || ev.Event != "SSEConfig_payload" || testkit.AppConfigVersion(t, []byte(ev.Data)) != n {
			t.Fatalf("%s: %+v, %v; want SSEConfig_payload of %d", when, ev, err, n)
		}
	}
	testkit.Eventually(t, "two streams", 5*time.Second, func() bool { return old.rr.opts.Streams.Len() == 2 })
	n := env.Primary.Bump(topic)
	nextPayload("before the move", n)
	nextChange("before the move")

	moved, stayed := old.rr.DetachStreams(5 * time.Second)
	if len(moved) != 2 || stayed != 0 {
		t.Fatalf("%d moved, %d stayed, want 2 and 0", len(moved), stayed)
	}
	n = env.Primary.Bump(topic) // between the old relay's stop and the new one's start
	testkit.Eventually(t, "the new relay to have the change", 10*time.Second, func() bool {
		s := next.rr.hub.Snapshot(topic)
		return s != nil && testkit.AppConfigVersion(t, s.Body) == n
	})
	for _, m := range moved {
		conn, err := net.FileConn(m.File)
		m.File.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := next.rr.Adopt(*m, conn, nil); err != nil {
			t.Fatal(err)
		}
	}
	nextPayload("the change made during the move", n)
	nextChange("the change made during the move")
	n = env.Primary.Bump(topic)
	nextPayload("after the move", n)
	nextChange("after the move")
	time.Sleep(time.Second) // five heartbeats: no change frame repeated among them
	select {
	case m := <-changeFrames:
		t.Errorf("a change frame more: %q", m)
	case err := <-wsErr:
		t.Fatalf("the WebSocket ended: %v", err)
	default:
	}
}

// Issue 38: a relay whose session opened after the last change message a WebSocket was sent (the
// new process of an upgrade, started after it) takes the WebSocket over with a change published
// during the move: the change comes once, then the next, and nothing more.
func TestAWebSocketMovedToARelayStartedAfterItsLastChangeGetsTheChangeOfTheMoveOnce(t *testing.T) {
	c := testkit.StartRelaySim(t, 1)
	const topic = "inventory/dev"
	files := routeFiles(t, testkit.ConfigAddrs(c), "")
	old := startRoute(t, files, "appconfig")
	ws := old.ws(t, "/relay/"+topic)
	sse := testkit.DialSSE(t, old.addr, "/relay/"+topic)
	sse.WaitVersion(t, 1, 5*time.Second)
	testkit.Eventually(t, "two streams", 5*time.Second, func() bool { return old.rr.opts.Streams.Len() == 2 })
	v := testkit.Publish(t, c, topic, `{"n":2}`)
	testkit.WaitChange(t, ws, topic, v, 5*time.Second)
	sse.WaitVersion(t, v, 5*time.Second)

	next := startRoute(t, files, "appconfig") // its session opens after the change the client was sent
	testkit.Eventually(t, "the new relay's session", 5*time.Second, func() bool {
		return next.rr.origin.Sessions() == len(testkit.RelayTopics)
	})
	moved, stayed := old.rr.DetachStreams(5 * time.Second)
	if len(moved) != 2 || stayed != 0 {
		t.Fatalf("%d moved, %d stayed, want 2 and 0", len(moved), stayed)
	}
	during := testkit.Publish(t, c, topic, `{"n":3}`)
	testkit.Eventually(t, "the new relay to have the change", 5*time.Second, func() bool {
		s := next.rr.hub.Snapshot(topic)
		return s != nil && s.Version == during
	})
	for _, m := range moved {
		conn, err := net.FileConn(m.File)
		m.File.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := next.rr.Adopt(*m, conn, nil); err != nil {
			t.Fatal(err)
		}
	}
	after := testkit.Publish(t, c, topic, `{"n":4}`)
	for _, want := range []uint64{during, after} {
		ch, raw, err := testkit.ReadChange(ws, 5*time.Second)
		if err != nil || ch.Version != want {
			t.Fatalf("change message %q, %v; want version %d", raw, err, want)
		}
		if ev := sse.WaitVersion(t, want, 5*time.Second); ev.ID != strconv.FormatUint(want, 10) {
			t.Fatalf("SSE event %s, want version %d", ev.ID, want)
		}
	}
	if ch, raw, err := testkit.ReadChange(ws, 1500*time.Millisecond); err == nil {
		t.Errorf("a change message more: %q (%+v)", raw, ch)
	}
}

// The hub's side of a WebSocket taken over: SubscribeAfter returns the change messages after the last
// one the client was sent (the newest of equal ones), or all those kept (the latest 32) when it is
// not among them; what is published after it goes to the subscriber.
func TestSubscribeAfterReturnsTheChangesAfterTheLastOneSent(t *testing.T) {
	h := NewHub(Options{})
	defer h.Close()
	h.Publish("t", snap(1))
	for _, m := range []string{"a", "b", "a", "c"} {
		h.PublishChange("t", []byte(m))
	}
	str := func(ms [][]byte) (out []string) {
		for _, m := range ms {
			out = append(out, string(m))
		}
		return out
	}
	s, latest, found := h.SubscribeAfter("t", Changes, []byte("a"))
	if !found || !slices.Equal(str(latest), []string{"c"}) {
		t.Errorf("after a: %v %v, want [c] found", str(latest), found)
	}
	if _, latest, found := h.SubscribeAfter("t", Changes, []byte("z")); found || !slices.Equal(str(latest), []string{"a", "b", "a", "c"}) {
		t.Errorf("after z: %v %v, want all four, not found", str(latest), found)
	}
	h.PublishChange("t", []byte("d"))
	if m := <-s.C(); string(m.Change) != "d" {
		t.Errorf("then %q, want d", m.Change)
	}
	for i := range 40 {
		h.PublishChange("t", []byte(strconv.Itoa(i)))
	}
	if _, latest, found := h.SubscribeAfter("t", Changes, []byte("c")); found || len(latest) != historyLen || string(latest[historyLen-1]) != "39" {
		t.Errorf("after 40 more: found %v, %d kept (the last %q), want %d up to 39", found, len(latest), latest[len(latest)-1], historyLen)
	}
}

// Resubscribe swaps a subscriber for one of another kind with no message lost or repeated: what the
// old one had queued is returned, it is closed, and the new one gets what follows.
func TestResubscribeReturnsWhatWasQueuedAndMissesNothing(t *testing.T) {
	h := NewHub(Options{})
	defer h.Close()
	h.Publish("t", snap(1))
	s := h.Subscribe("t", Changes|Snapshots)
	h.PublishChange("t", []byte("x"))
	h.Publish("t", snap(2))
	ns, queued := h.Resubscribe(s, Changes)
	if len(queued) != 2 || string(queued[0].Change) != "x" || queued[1].Snapshot == nil || queued[1].Snapshot.Version != 2 {
		t.Fatalf("queued %+v, want x then snapshot 2", queued)
	}
	expectClosed(t, s.C())
	h.PublishChange("t", []byte("y"))
	h.Publish("t", snap(3)) // not wanted any more
	if m := <-ns.C(); string(m.Change) != "y" {
		t.Errorf("then %+v, want y", m)
	}
	expectEmpty(t, ns.C())
	if n := stats(h, "t").Subscribers; n != 1 {
		t.Errorf("%d subscribers, want 1", n)
	}
	if again, q := h.Resubscribe(s, Changes); again != s || q != nil {
		t.Error("a closed subscriber was resubscribed")
	}
}

// A WebSocket the old relay sent no change message yet: moved, it gets each change published after
// the move once; moved while a change is published, it cannot be told whether it missed it, and is
// told to resync (close 1012), as after a gap in the relay's upstream session.
func TestAWebSocketSentNoChangeYetIsWatchedAfterTheMove(t *testing.T) {
	c := testkit.StartRelaySim(t, 1)
	const topic = "inventory/dev"
	files := routeFiles(t, testkit.ConfigAddrs(c), "")
	old, next := startRoute(t, files, "appconfig"), startRoute(t, files, "appconfig")
	move := func(during func()) {
		t.Helper()
		moved, _ := old.rr.DetachStreams(5 * time.Second)
		if len(moved) != 1 {
			t.Fatalf("%d moved, want 1", len(moved))
		}
		during()
		conn, err := net.FileConn(moved[0].File)
		moved[0].File.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := next.rr.Adopt(*moved[0], conn, nil); err != nil {
			t.Fatal(err)
		}
	}
	ws := old.ws(t, "/relay/"+topic)
	testkit.Eventually(t, "the stream", 5*time.Second, func() bool { return old.rr.opts.Streams.Len() == 1 })
	move(func() {})
	for range 2 {
		v := testkit.Publish(t, c, topic, `{}`)
		if ch, raw, err := testkit.ReadChange(ws, 5*time.Second); err != nil || ch.Version != v {
			t.Fatalf("change message %q, %v; want version %d", raw, err, v)
		}
	}
	if _, raw, err := testkit.ReadChange(ws, time.Second); err == nil {
		t.Errorf("a change message more: %q", raw)
	}

	ws = old.ws(t, "/relay/"+topic)
	testkit.Eventually(t, "the stream", 5*time.Second, func() bool { return old.rr.opts.Streams.Len() == 1 })
	move(func() {
		v := testkit.Publish(t, c, topic, `{}`)
		testkit.Eventually(t, "the new relay to have the change", 5*time.Second, func() bool { return next.rr.hub.Snapshot(topic).Version == v })
	})
	if _, _, err := testkit.ReadChange(ws, 5*time.Second); !websocket.IsCloseError(err, websocket.CloseServiceRestart) {
		t.Errorf("moved during a change: %v, want close 1012 (resync)", err)
	}
}

// Issue 38: what crypto/tls read of a stream's client and held (plaintext the stream has not read
// yet: a WebSocket's next frames) moves with its session and comes first in the new process, then the
// client's next record; and crypto/tls, closing the connection in the old process, sends the client
// nothing (no close_notify): the session goes on.
func TestAStreamsTLSSessionMovesWithThePlaintextCryptoTLSHeld(t *testing.T) {
	cl, trust := newCaptureListener(t)
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := cl.Accept()
			accepted <- c
		}()
		cfg := trust.Clone()
		cfg.MinVersion, cfg.MaxVersion = version, version
		client, err := tls.Dial("tcp", cl.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		server, ok := (<-accepted).(*tls.Conn)
		if !ok {
			t.Fatal("no connection accepted")
		}
		// One record of two frames' bytes; the stream reads the first only: crypto/tls holds the rest.
		if _, err := client.Write([]byte("first|second")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("first|"))
		server.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if _, err := io.ReadFull(server, got); err != nil || string(got) != "first|" {
			t.Fatalf("read %q %v", got, err)
		}
		server.SetReadDeadline(time.Time{}) //nolint:errcheck

		ss := NewStreams()
		h := ss.add(server, "inventory/dev", "websocket")
		handed := make(chan bool, 1)
		go func() {
			<-h.detaching()
			stays := h.hand(server, Resume{Version: 7})
			server.Close() // as the stream's writer does when it returns
			handed <- stays
		}()
		moved, stayed := ss.Detach(5 * time.Second)
		if len(moved) != 1 || stayed != 0 || <-handed {
			t.Fatalf("%d moved, %d stayed, want 1 and 0", len(moved), stayed)
		}
		m := moved[0]
		if m.TLS == nil || m.TLS.Version != version || string(m.TLS.Plain) != "second" || m.Resume.Version != 7 {
			t.Fatalf("moved: TLS %v, version %x, plaintext held %q, want %x and %q", m.TLS != nil, m.TLS.Version, m.TLS.Plain, version, "second")
		}
		conn, err := tlsrecord.Resume(m.File, *m.TLS)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := client.Write([]byte("|third")); err != nil {
			t.Fatal(err)
		}
		got = make([]byte, len("second|third"))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != "second|third" {
			t.Fatalf("the new process read %q %v, want %q", got, err, "second|third")
		}
		if _, err := conn.Write([]byte("answer")); err != nil {
			t.Fatal(err)
		}
		got = make([]byte, len("answer"))
		client.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		if _, err := io.ReadFull(client, got); err != nil || string(got) != "answer" {
			t.Fatalf("the client read %q %v, want the new process's answer (and no close_notify before it)", got, err)
		}
	}
}

// splitWrites is a connection whose next write sends its first bytes only, and keeps the rest until
// flush: a record that arrives in parts.
type splitWrites struct {
	net.Conn
	split int
	rest  []byte
}

func (s *splitWrites) Write(b []byte) (int, error) {
	if s.split > 0 && len(b) > s.split {
		s.rest = append([]byte(nil), b[s.split:]...)
		b, s.split = b[:s.split], 0
		if _, err := s.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(b) + len(s.rest), nil
	}
	return s.Conn.Write(b)
}

func (s *splitWrites) flush() error {
	_, err := s.Conn.Write(s.rest)
	return err
}

// Issue 38: a stream whose session crypto/tls keeps (it holds part of a record: the rest is still on
// its way) does not move: Detach counts it as staying, the stream is told to go on, and crypto/tls
// reads the record whole once the rest comes.
func TestAStreamWhoseTLSSessionCryptoTLSKeepsStays(t *testing.T) {
	cl, trust := newCaptureListener(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := cl.Accept()
		accepted <- c
	}()
	raw, err := net.Dial("tcp", cl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sw := &splitWrites{Conn: raw}
	cfg := trust.Clone()
	cfg.ServerName = "127.0.0.1"
	client := tls.Client(sw, cfg)
	defer client.Close()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	server, ok := (<-accepted).(*tls.Conn)
	if !ok {
		t.Fatal("no connection accepted")
	}
	defer server.Close()
	sw.split = 3 // of the record's 5-byte header
	if _, err := client.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	server.SetReadDeadline(time.Now().Add(200 * time.Millisecond)) //nolint:errcheck
	if n, err := server.Read(buf); !isTimeout(err) {
		t.Fatalf("read %q %v before the record's rest came, want a timeout", buf[:n], err)
	}

	ss := NewStreams()
	h := ss.add(server, "inventory/dev", "sse")
	handed := make(chan bool, 1)
	go func() {
		<-h.detaching()
		handed <- h.hand(server, Resume{Version: 7})
	}()
	moved, stayed := ss.Detach(5 * time.Second)
	if len(moved) != 0 || stayed != 1 || !<-handed {
		t.Fatalf("%d moved, %d stayed, want 0 and 1, the stream told to go on", len(moved), stayed)
	}
	if err := sw.flush(); err != nil {
		t.Fatal(err)
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "frame" {
		t.Fatalf("crypto/tls read %q %v, want %q", buf[:n], err, "frame")
	}
	if _, err := server.Write([]byte("event")); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if n, err := client.Read(buf); err != nil || string(buf[:n]) != "event" {
		t.Fatalf("the client read %q %v, want %q", buf[:n], err, "event")
	}
}
