package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// serveEnv is a fasthttp server whose handler calls Serve for the topic made of the last two
// segments of the request path.
type serveEnv struct {
	hub    *Hub
	addr   string
	client *http.Client // for plain requests; its idle connections are closed at cleanup
}

func startServe(t *testing.T, hopts Options, sopts ServeOptions, wait time.Duration) *serveEnv {
	t.Helper()
	hub := NewHub(hopts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			parts := strings.Split(strings.Trim(string(ctx.Path()), "/"), "/")
			if len(parts) < 2 {
				ctx.Error("bad path", fasthttp.StatusNotFound)
				return
			}
			topic := parts[len(parts)-2] + "/" + parts[len(parts)-1]
			reqCtx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			Serve(ctx, reqCtx, hub, topic, sopts)
		},
		// As fairlead's front end runs: hijacked connections are the streams' own.
		KeepHijackedConns: sopts.KeepHijacked,
		ReduceMemoryUsage: sopts.KeepHijacked,
	}
	return &serveEnv{hub: hub, addr: ln.Addr().String(), client: serveForTest(t, srv, ln, hub.Close, 5*time.Second)}
}

// serveForTest serves srv on ln until the test ends, then closes the streams (closeStreams, so that
// Shutdown does not wait for them) and shuts srv down; it returns a client of srv with timeout.
func serveForTest(t testing.TB, srv *fasthttp.Server, ln net.Listener, closeStreams func(), timeout time.Duration) *http.Client {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		closeStreams()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		<-done
	})
	return &http.Client{Transport: tr, Timeout: timeout}
}

func (e *serveEnv) url(topic string) string { return "http://" + e.addr + "/relay/" + topic }

func (e *serveEnv) do(t *testing.T, method, topic string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url(topic), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func bigSnap(v uint64, body []byte) *Snapshot {
	return &Snapshot{Version: v, ETag: fmt.Sprintf(`"%d"`, v), Body: body}
}

func TestServeGetWaitsForFirstSnapshot(t *testing.T) {
	e := startServe(t, Options{}, ServeOptions{}, 5*time.Second)
	type result struct {
		resp *http.Response
		body []byte
	}
	got := make(chan result, 1)
	go func() {
		resp, err := e.client.Get(e.url("a/b"))
		if err != nil {
			got <- result{}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		got <- result{resp, body}
	}()
	// The waiting GET creates the topic.
	testkit.Eventually(t, "the GET waits", 3*time.Second, func() bool { return len(e.hub.Topics()) == 1 })
	select {
	case r := <-got:
		t.Fatalf("GET answered before any snapshot: %+v", r.resp)
	default:
	}
	e.hub.Publish("a/b", snap(1))
	select {
	case r := <-got:
		if r.resp == nil || r.resp.StatusCode != 200 || string(r.body) != `{"v":1}` {
			t.Fatalf("got %+v %q", r.resp, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GET not answered after the first publish")
	}

	short := startServe(t, Options{}, ServeOptions{}, 50*time.Millisecond)
	resp, _ := short.do(t, "GET", "a/b")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("got %d Retry-After %q, want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The SSE stream waits the same way and fails the same way.
	resp, _ = short.do(t, "GET", "a/b", "Accept", "text/event-stream")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("SSE: got %d Retry-After %q, want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := stats(short.hub, "a/b").Subscribers; n != 0 {
		t.Fatalf("%d subscribers left after the failed SSE request", n)
	}
}

func TestServeGet(t *testing.T) {
	e := startServe(t, Options{}, ServeOptions{}, time.Second)
	e.hub.Publish("a/b", snap(7))

	resp, body := e.do(t, "GET", "a/b")
	if resp.StatusCode != 200 || string(body) != `{"v":7}` {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
	for k, want := range map[string]string{"ETag": `"7"`, "Content-Type": "application/json", "Cache-Control": "no-cache"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	for _, inm := range []string{`"7"`, `W/"7"`, `"3", "7"`, `*`} {
		resp, body = e.do(t, "GET", "a/b", "If-None-Match", inm)
		if resp.StatusCode != 304 || len(body) != 0 || resp.Header.Get("ETag") != `"7"` {
			t.Fatalf("If-None-Match %s: %d %q ETag %q", inm, resp.StatusCode, body, resp.Header.Get("ETag"))
		}
	}
	resp, body = e.do(t, "GET", "a/b", "If-None-Match", `"6"`)
	if resp.StatusCode != 200 || string(body) != `{"v":7}` {
		t.Fatalf("stale If-None-Match: %d %q", resp.StatusCode, body)
	}

	resp, body = e.do(t, "POST", "a/b")
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}

	// HEAD over raw TCP, followed by a GET on the same connection: a body sent after the
	// HEAD response would be read as the start of the GET response.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "HEAD /relay/a/b HTTP/1.1\r\nHost: x\r\n\r\nGET /relay/a/b HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	head, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if head.StatusCode != 200 || head.Header.Get("ETag") != `"7"` {
		t.Fatalf("HEAD: %d ETag %q", head.StatusCode, head.Header.Get("ETag"))
	}
	next, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("reading the GET after the HEAD: %v", err)
	}
	body, _ = io.ReadAll(next.Body)
	if next.StatusCode != 200 || string(body) != `{"v":7}` {
		t.Fatalf("GET after HEAD: %d %q", next.StatusCode, body)
	}
}

// sseEvent is one event, or one comment, of an SSE stream.
type sseEvent struct {
	id, event string
	data      []string
	comment   string
}

// sseClient opens an SSE stream and parses it into events on the returned channel, which is
// closed when the stream ends.
func (e *serveEnv) sseClient(t *testing.T, topic string, hdr ...string) (*http.Response, <-chan sseEvent) {
	t.Helper()
	req, err := http.NewRequest("GET", e.url(topic), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithCancel(context.Background())
	req = req.WithContext(ctx)
	tr := &http.Transport{DisableCompression: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("SSE: status %d", resp.StatusCode)
	}
	ch := make(chan sseEvent, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		wg.Wait()
		tr.CloseIdleConnections()
	})
	go func() {
		defer wg.Done()
		defer close(ch)
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if ev.id != "" || ev.event != "" || ev.data != nil {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ch <- sseEvent{comment: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = append(ev.data, line[6:])
			default:
				t.Errorf("unexpected SSE line %q", line)
			}
		}
	}()
	return resp, ch
}

// nextEvent returns the next event of ch that is not a comment.
func nextEvent(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("SSE stream ended")
			}
			if ev.comment != "" {
				continue
			}
			return ev
		case <-timeout:
			t.Fatal("no SSE event within 5s")
		}
	}
}

func expectSnapshotEvent(t *testing.T, ev sseEvent, version uint64, data ...string) {
	t.Helper()
	if ev.id != strconv.FormatUint(version, 10) || ev.event != "snapshot" || strings.Join(ev.data, "|") != strings.Join(data, "|") {
		t.Fatalf("got event %+v, want id %d event snapshot data %q", ev, version, data)
	}
}

func TestServeSSE(t *testing.T) {
	e := startServe(t, Options{}, ServeOptions{}, time.Second)
	e.hub.Publish("a/b", snap(1))
	resp, ch := e.sseClient(t, "a/b")
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	expectSnapshotEvent(t, nextEvent(t, ch), 1, `{"v":1}`)
	e.hub.Publish("a/b", snap(2))
	expectSnapshotEvent(t, nextEvent(t, ch), 2, `{"v":2}`)
	e.hub.Publish("a/b", &Snapshot{Version: 3, ETag: `"3"`, Body: []byte("{\n  \"v\": 3\r\n}")})
	expectSnapshotEvent(t, nextEvent(t, ch), 3, "{", `  "v": 3`, "}")

	// Resuming at the current version: no resend, the next event is the next publish.
	_, ch2 := e.sseClient(t, "a/b", "Last-Event-ID", "3")
	e.hub.Publish("a/b", snap(4))
	expectSnapshotEvent(t, nextEvent(t, ch2), 4, `{"v":4}`)
	expectSnapshotEvent(t, nextEvent(t, ch), 4, `{"v":4}`)

	// Resuming at an older version: the current snapshot is resent.
	_, ch3 := e.sseClient(t, "a/b", "Last-Event-ID", "2")
	expectSnapshotEvent(t, nextEvent(t, ch3), 4, `{"v":4}`)

	// Hub.Close ends the streams.
	e.hub.Close()
	for _, c := range []<-chan sseEvent{ch, ch2, ch3} {
		select {
		case ev, ok := <-c:
			if ok {
				t.Fatalf("got %+v after Hub.Close, want the end of the stream", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("stream not ended by Hub.Close")
		}
	}
}

func TestServeSSEKeepAliveAndClientClose(t *testing.T) {
	e := startServe(t, Options{}, ServeOptions{KeepAlive: 50 * time.Millisecond}, time.Second)
	e.hub.Publish("a/b", snap(1))
	resp, ch := e.sseClient(t, "a/b", "Last-Event-ID", "1")
	timeout := time.After(5 * time.Second)
	// ": ok" opens the stream at once; keep-alives follow every 50ms.
	for got := 0; got < 2; {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("stream ended")
			}
			if ev.comment == "" {
				t.Fatalf("got %+v, want only keep-alive comments", ev)
			}
			if ev.comment == "keep-alive" {
				got++
			}
		case <-timeout:
			t.Fatal("not two keep-alive comments within 5s")
		}
	}
	if n := stats(e.hub, "a/b").Subscribers; n != 1 {
		t.Fatalf("%d subscribers, want 1", n)
	}
	resp.Body.Close()
	// The next keep-alives fail once the client is gone, which ends the stream.
	testkit.Eventually(t, "the closed client is unsubscribed", 5*time.Second, func() bool {
		return stats(e.hub, "a/b").Subscribers == 0
	})
}

func TestServeSSESlowConsumer(t *testing.T) {
	e := startServe(t, Options{SubscriberBuffer: 2}, ServeOptions{WriteTimeout: 2 * time.Second}, time.Second)
	body := bytes.Repeat([]byte("x"), 256<<10)
	e.hub.Publish("a/b", bigSnap(1, body))

	// The slow client sends its request and never reads.
	slow, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(slow, "GET /relay/a/b HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")

	_, fast := e.sseClient(t, "a/b")
	if ev := nextEvent(t, fast); ev.id != "1" || len(ev.data) != 1 || len(ev.data[0]) != len(body) {
		t.Fatalf("first event: id %q, %d data lines", ev.id, len(ev.data))
	}
	testkit.Eventually(t, "both clients subscribed", 3*time.Second, func() bool { return stats(e.hub, "a/b").Subscribers == 2 })

	// Publish until the slow client is dropped, pacing on the fast one: it must see every
	// version.
	v := uint64(1)
	for stats(e.hub, "a/b").Drops == 0 {
		if v > 400 {
			t.Fatal("slow client not dropped after 400 snapshots of 256 KiB")
		}
		v++
		e.hub.Publish("a/b", bigSnap(v, body))
		ev := nextEvent(t, fast)
		if ev.id != strconv.FormatUint(v, 10) || len(ev.data) != 1 || len(ev.data[0]) != len(body) {
			t.Fatalf("fast client: got id %q (%d data lines), want %d", ev.id, len(ev.data), v)
		}
	}
	for i := 0; i < 3; i++ {
		v++
		e.hub.Publish("a/b", bigSnap(v, body))
		if ev := nextEvent(t, fast); ev.id != strconv.FormatUint(v, 10) {
			t.Fatalf("fast client after the drop: got id %q, want %d", ev.id, v)
		}
	}
	st := stats(e.hub, "a/b")
	if st.Drops != 1 || st.Subscribers != 1 {
		t.Fatalf("drops %d subscribers %d, want 1 and 1", st.Drops, st.Subscribers)
	}
	t.Logf("slow client dropped at version %d", v-3)
}

// wsDial opens a WebSocket to topic at e.
func (e *serveEnv) wsDial(t *testing.T, topic string, readBuffer int) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	if readBuffer > 0 {
		d.NetDial = func(network, addr string) (net.Conn, error) {
			c, err := net.Dial(network, addr)
			if err == nil {
				_ = c.(*net.TCPConn).SetReadBuffer(readBuffer)
			}
			return c, err
		}
	}
	c, resp, err := d.Dial("ws://"+e.addr+"/relay/"+topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Cleanup(func() { c.Close() })
	return c
}

// expectCloseCode reads c until it fails and checks that it was closed with code.
func expectCloseCode(t *testing.T, c *websocket.Conn, code int) *websocket.CloseError {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != code {
			t.Fatalf("got %v, want close code %d", err, code)
		}
		return ce
	}
}

func TestServeWebSocketFanOut(t *testing.T) {
	e := startServe(t, Options{}, ServeOptions{}, time.Second)
	const n = 100
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = e.wsDial(t, "a/b", 0)
	}
	// Clients are subscribed before their handshake completes.
	if got := stats(e.hub, "a/b").Subscribers; got != n {
		t.Fatalf("%d subscribers, want %d", got, n)
	}
	msgs := []string{`{"change":1}`, `{"change":2}`, `{"change":3}`, `end`}
	for _, m := range msgs {
		e.hub.PublishChange("a/b", []byte(m))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			// The "end" sentinel right after the third message shows none came twice.
			for _, want := range msgs {
				typ, got, err := c.ReadMessage()
				if err != nil || typ != websocket.TextMessage || string(got) != want {
					errs <- fmt.Errorf("client %d: got %d %q %v, want text %q", i, typ, got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A client that closes is unsubscribed.
	_ = conns[0].WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	conns[0].Close()
	conns[1].Close() // without a close frame
	testkit.Eventually(t, "closed clients unsubscribed", 5*time.Second, func() bool { return stats(e.hub, "a/b").Subscribers == n-2 })

	// Hub.Close closes the others with 1001.
	e.hub.Close()
	expectCloseCode(t, conns[2], websocket.CloseGoingAway)
	expectCloseCode(t, conns[n-1], websocket.CloseGoingAway)
}

func TestServeWebSocketSlowConsumer(t *testing.T) {
	e := startServe(t, Options{SubscriberBuffer: 2}, ServeOptions{WriteTimeout: 5 * time.Second}, time.Second)
	slow := e.wsDial(t, "a/b", 0)
	fast := e.wsDial(t, "a/b", 0)
	msg := bytes.Repeat([]byte("y"), 256<<10)
	_ = fast.SetReadDeadline(time.Now().Add(8 * time.Second))
	sent := 0
	for stats(e.hub, "a/b").Drops == 0 {
		if sent == 400 {
			t.Fatal("slow client not dropped after 400 messages of 256 KiB")
		}
		sent++
		e.hub.PublishChange("a/b", msg)
		if _, got, err := fast.ReadMessage(); err != nil || len(got) != len(msg) {
			t.Fatalf("fast client: message %d: %d bytes, %v", sent, len(got), err)
		}
	}
	if st := stats(e.hub, "a/b"); st.Drops != 1 || st.Subscribers != 1 {
		t.Fatalf("drops %d subscribers %d, want 1 and 1", st.Drops, st.Subscribers)
	}
	// Once it reads, the slow client gets what was in flight, then close code 1013.
	if ce := expectCloseCode(t, slow, websocket.CloseTryAgainLater); ce.Text != "slow consumer" {
		t.Fatalf("close reason %q, want %q", ce.Text, "slow consumer")
	}
	t.Logf("slow client dropped after %d messages", sent)
}

func TestServeWebSocketPing(t *testing.T) {
	e := startServe(t, Options{}, ServeOptions{KeepAlive: 50 * time.Millisecond}, time.Second)
	c := e.wsDial(t, "a/b", 0)
	pings := make(chan struct{}, 16)
	c.SetPingHandler(func(string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return nil
	})
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	for i := 0; i < 2; i++ {
		select {
		case <-pings:
		case <-time.After(5 * time.Second):
			t.Fatalf("ping %d not received within 5s", i+1)
		}
	}
}

// TestServeWebSocketHandshakeOnTheHijackedConnection: the upgrade is answered on the hijacked
// connection, with or without fasthttp keeping it; a frame the client sends together with its
// handshake (already in fasthttp's buffer) is not lost; a bad handshake gets 400 before any
// hijack.
func TestServeWebSocketHandshakeOnTheHijackedConnection(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepHijacked %v", keep), func(t *testing.T) {
			e := startServe(t, Options{}, ServeOptions{KeepHijacked: keep}, time.Second)
			e.hub.Publish("a/b", &Snapshot{Version: 1, Body: []byte(`{}`)})
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The handshake and a masked ping ("hi") in one write.
			ping := []byte{0x89, 0x82, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2}
			req := "GET /relay/a/b HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
			if _, err := c.Write(append([]byte(req), ping...)); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols ||
				resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
				t.Fatalf("handshake answered %s, accept %q", resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
			}
			// The pong of the ping sent with the handshake: an unmasked pong frame carrying "hi".
			pong := make([]byte, 4)
			if _, err := io.ReadFull(br, pong); err != nil {
				t.Fatalf("no pong for the ping sent with the handshake: %v", err)
			}
			if !bytes.Equal(pong, []byte{0x8a, 2, 'h', 'i'}) {
				t.Fatalf("got % x, want a pong with \"hi\"", pong)
			}
			e.hub.PublishChange("a/b", []byte(`{"version":2}`))
			msg := make([]byte, 2+len(`{"version":2}`))
			if _, err := io.ReadFull(br, msg); err != nil || string(msg[2:]) != `{"version":2}` {
				t.Fatalf("change message % x, %v", msg, err)
			}

			// A handshake of another version: 400 with the version fairlead speaks, no upgrade.
			c2, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			fmt.Fprint(c2, strings.Replace(req, "Version: 13", "Version: 8", 1))
			c2.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
			resp2, err := http.ReadResponse(bufio.NewReader(c2), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp2.StatusCode != http.StatusBadRequest || resp2.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Fatalf("a version 8 handshake: %s, Sec-WebSocket-Version %q", resp2.Status, resp2.Header.Get("Sec-WebSocket-Version"))
			}
		})
	}
}
