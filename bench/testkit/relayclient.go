package testkit

// Clients of a relay route as tests use them, whoever serves the route (package lb's whole path, or
// package relay's Route alone): Server-Sent Events streams on their own connections, WebSocket change
// messages, the simulator's snapshot bodies, and the simulated config servers' counters.

import (
	"bufio"
	"bytes"
	"encoding/json"
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

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fasthttp/websocket"
)

// StartRelaySim starts n config servers requiring RelayUpstreamKey (config1 first), on addrs where
// given.
func StartRelaySim(t testing.TB, n int, addrs ...string) *sim.Cluster {
	t.Helper()
	return StartCluster(t, sim.Options{Platforms: 1, NoConnections: true, ConfigServers: n, ConfigAddrs: addrs,
		ConfigAPIKey: RelayUpstreamKey, Logf: func(string, ...any) {}})
}

// ConfigAddrs returns the addresses of the cluster's config servers.
func ConfigAddrs(c *sim.Cluster) []string {
	var a []string
	for _, s := range c.Configs {
		a = append(a, s.Addr)
	}
	return a
}

// Publish publishes data on topic on every config server of c and returns the new version.
func Publish(t testing.TB, c *sim.Cluster, topic, data string) uint64 {
	t.Helper()
	v, err := c.PublishConfig(topic, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Sessions returns the open upstream sessions of topic at config server s.
func Sessions(s *sim.ConfigServer, topic string) int { return s.Stats().Topics[topic].Sessions }

// Fetches returns the snapshot fetches of topic counted at config server s.
func Fetches(s *sim.ConfigServer, topic string) int64 { return s.Stats().Topics[topic].Fetches }

// AllSessions returns the open upstream sessions of every topic at config server s.
func AllSessions(s *sim.ConfigServer) int {
	n := 0
	for _, ts := range s.Stats().Topics {
		n += ts.Sessions
	}
	return n
}

// OneSessionPerTopic reports whether s holds exactly one session for each of topics and no other.
func OneSessionPerTopic(s *sim.ConfigServer, topics ...string) bool {
	st := s.Stats().Topics
	for _, tp := range topics {
		if st[tp].Sessions != 1 {
			return false
		}
	}
	return AllSessions(s) == len(topics)
}

// RelaySnapshot is the simulator's snapshot body, as a relay serves it.
type RelaySnapshot struct {
	Topic   string          `json:"topic"`
	Version uint64          `json:"version"`
	Server  string          `json:"server"`
	Data    json.RawMessage `json:"data"`
}

// SnapshotOf decodes a simulator's snapshot body.
func SnapshotOf(t testing.TB, body []byte) RelaySnapshot {
	t.Helper()
	var s RelaySnapshot
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("not a snapshot: %v: %q", err, body)
	}
	return s
}

// An SSE is one Server-Sent Events subscriber on its own connection. It runs no goroutine: events
// wait in the socket until Next reads them, so a test can hold thousands.
type SSE struct {
	Conn net.Conn
	body *bufio.Reader
	Raw  bytes.Buffer // every body byte read
}

// Event is one event of a stream.
type Event struct {
	ID, Event, Data string
}

// DialSSE opens an SSE stream on path with header pairs (name, value, ...) and fails the test unless
// it is answered 200 text/event-stream. The stream is closed at cleanup.
func DialSSE(t testing.TB, addr, path string, hdr ...string) *SSE {
	t.Helper()
	s, resp, err := TrySSE(addr, path, nil, hdr...)
	if err != nil {
		t.Fatalf("SSE %s: %v", path, err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("SSE %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { s.Conn.Close() })
	return s
}

// TrySSE sends the SSE request and reads the answer's head; dial, if set, opens the connection.
func TrySSE(addr, path string, dial func() (net.Conn, error), hdr ...string) (*SSE, *http.Response, error) {
	if dial == nil {
		dial = func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }
	}
	conn, err := dial()
	if err != nil {
		return nil, nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n", path, addr)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, b.String()); err != nil {
		conn.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{}) //nolint:errcheck
	return &SSE{Conn: conn, body: bufio.NewReader(resp.Body)}, resp, nil
}

// Next reads the next event (comments skipped) within timeout; io.EOF when the stream ended.
func (s *SSE) Next(timeout time.Duration) (Event, error) {
	s.Conn.SetReadDeadline(time.Now().Add(timeout)) //nolint:errcheck
	ev, err := ReadEvent(s.body, func(line string) { s.Raw.WriteString(line) })
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return ev, err
}

// ReadEvent reads one Server-Sent Event from r, comments skipped; each line read, as read, is given
// to raw (when set). The error is the read's.
func ReadEvent(r *bufio.Reader, raw func(line string)) (Event, error) {
	var ev Event
	var data []string
	seen := false
	for {
		line, err := r.ReadString('\n')
		if raw != nil {
			raw(line)
		}
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if seen {
				ev.Data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		default:
			seen = true
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "id":
				ev.ID = value
			case "event":
				ev.Event = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

// WaitVersion reads events until a snapshot event with an id of at least v, and returns it.
func (s *SSE) WaitVersion(t testing.TB, v uint64, timeout time.Duration) Event {
	t.Helper()
	ev, err := s.NextSnapshot(v, timeout)
	if err != nil {
		t.Fatalf("SSE: waiting for version %d: %v (read so far: %q)", v, err, Tail(s.Raw.String(), 400))
	}
	return ev
}

// NextSnapshot reads events until a snapshot event with an id of at least v, or an error.
func (s *SSE) NextSnapshot(v uint64, timeout time.Duration) (Event, error) {
	deadline := time.Now().Add(timeout)
	for {
		ev, err := s.Next(time.Until(deadline))
		if err != nil {
			return ev, err
		}
		if id, _ := strconv.ParseUint(ev.ID, 10, 64); ev.Event == "snapshot" && id >= v {
			return ev, nil
		}
	}
}

// RelayChange is the simulator's change message, relayed to WebSocket clients as sent.
type RelayChange struct {
	Topic   string `json:"topic"`
	Version uint64 `json:"version"`
}

// DialWS opens a WebSocket on url with header h; it is closed at cleanup.
func DialWS(t testing.TB, url string, h http.Header) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial(url, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("WebSocket %s: %v (status %d)", url, err, status)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ReadChange reads the next change message within timeout.
func ReadChange(c *websocket.Conn, timeout time.Duration) (RelayChange, []byte, error) {
	c.SetReadDeadline(time.Now().Add(timeout)) //nolint:errcheck
	mt, b, err := c.ReadMessage()
	if err != nil {
		return RelayChange{}, nil, err
	}
	var ch RelayChange
	if err := json.Unmarshal(b, &ch); err != nil || mt != websocket.TextMessage {
		return ch, b, fmt.Errorf("change message: type %d %q (%v)", mt, b, err)
	}
	return ch, b, nil
}

// WaitChange reads change messages until one of topic at version v or later.
func WaitChange(t testing.TB, c *websocket.Conn, topic string, v uint64, timeout time.Duration) RelayChange {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ch, _, err := ReadChange(c, time.Until(deadline))
		if err != nil {
			t.Fatalf("WebSocket: waiting for %s version %d: %v", topic, v, err)
		}
		if ch.Topic == topic && ch.Version >= v {
			return ch
		}
	}
}

// DeadlinePassed reports a read deadline that passed.
func DeadlinePassed(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// HeaderRecorder is an upstream that records the headers of every request it gets; it serves the
// snapshot and events endpoints of the test relay's templates as the simulator does, without an API
// key check.
type HeaderRecorder struct {
	Addr    string
	mu      sync.Mutex
	headers []http.Header
	fail    map[string]int // topics whose snapshot is answered with this status ("*": every topic)
}

// StartHeaderRecorder starts a HeaderRecorder on 127.0.0.1 that answers the snapshots of the topics
// of fail with their status; it stops at cleanup.
func StartHeaderRecorder(t testing.TB, fail map[string]int) *HeaderRecorder {
	t.Helper()
	hr := &HeaderRecorder{fail: fail}
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc("/config/", func(w http.ResponseWriter, r *http.Request) {
		hr.record(r)
		code := hr.fail[strings.TrimPrefix(r.URL.Path, "/config/")]
		if code == 0 {
			code = hr.fail["*"]
		}
		if code != 0 {
			http.Error(w, "no", code)
			return
		}
		w.Header().Set("ETag", `"1"`)
		fmt.Fprintf(w, `{"topic":%q,"version":1,"server":"recorder","data":{}}`, strings.TrimPrefix(r.URL.Path, "/config/"))
	})
	mux.HandleFunc("/events/", func(w http.ResponseWriter, r *http.Request) {
		hr.record(r)
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	hr.Addr = ln.Addr().String()
	return hr
}

func (hr *HeaderRecorder) record(r *http.Request) {
	h := r.Header.Clone()
	h.Set("X-Recorded-Path", r.URL.Path)
	hr.mu.Lock()
	hr.headers = append(hr.headers, h)
	hr.mu.Unlock()
}

// Paths returns the paths of the requests, in order.
func (hr *HeaderRecorder) Paths() []string {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	var p []string
	for _, h := range hr.headers {
		p = append(p, h.Get("X-Recorded-Path"))
	}
	return p
}

// All returns the headers of the requests, in order.
func (hr *HeaderRecorder) All() []http.Header {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return append([]http.Header(nil), hr.headers...)
}

// RelayClientSees is all a client of the relay route at addr gets for topic: a GET (which must answer
// 200), a GET of an on-demand topic, an SSE stream and a WebSocket, each sent with the header pairs hdr,
// then the change it publishes in c as both streams deliver it. It returns every header and body,
// each under a "== what" line, for tests that no secret reaches a client.
func RelayClientSees(t testing.TB, c *sim.Cluster, addr, topic string, hdr ...string) []byte {
	t.Helper()
	var seen bytes.Buffer
	dump := func(what string, h http.Header, body []byte) {
		fmt.Fprintf(&seen, "== %s\n", what)
		h.Write(&seen) //nolint:errcheck // a bytes.Buffer
		seen.Write(body)
	}
	resp, body := Do(t, http.DefaultClient, http.MethodGet, "http://"+addr+"/relay/"+topic, nil, hdr...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /relay/%s: %d %q", topic, resp.StatusCode, body)
	}
	dump("GET", resp.Header, body)
	resp, body = Do(t, http.DefaultClient, http.MethodGet, "http://"+addr+"/relay/on/demand", nil, hdr...)
	dump("GET of an on-demand topic", resp.Header, body)
	sse := DialSSE(t, addr, "/relay/"+topic, hdr...)
	sse.WaitVersion(t, 1, 5*time.Second)
	wh := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		wh.Set(hdr[i], hdr[i+1])
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, wsResp, err := d.Dial("ws://"+addr+"/relay/"+topic, wh)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	dump("WebSocket handshake", wsResp.Header, nil)
	v := Publish(t, c, topic, `{"k":1}`)
	sse.WaitVersion(t, v, 5*time.Second)
	_, msg, err := ReadChange(ws, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	dump("WebSocket message", nil, msg)
	dump("SSE stream", nil, sse.Raw.Bytes())
	return seen.Bytes()
}
