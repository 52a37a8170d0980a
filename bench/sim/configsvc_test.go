package sim_test

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// configCluster starts a cluster of one platform and n config servers, with opts' other fields.
func configCluster(t *testing.T, n int, opts Options) *Cluster {
	t.Helper()
	opts.Platforms, opts.NoConnections, opts.ConfigServers = 1, true, n
	return startCluster(t, opts)
}

// snapshot is the answer of GET /config/<topic>.
type snapshot struct {
	Topic   string          `json:"topic"`
	Version uint64          `json:"version"`
	Server  string          `json:"server"`
	Data    json.RawMessage `json:"data"`
}

// fetch GETs the snapshot of topic from s with the given header pairs; it decodes the body on a 200.
func fetch(t *testing.T, cl *http.Client, s *ConfigServer, topic string, hdr ...string) (*http.Response, snapshot) {
	t.Helper()
	resp, body := get(t, cl, "http://"+s.Addr+"/config/"+topic, hdr...)
	var snap snapshot
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &snap); err != nil {
			t.Fatalf("GET %s/config/%s: %s in %q", s.Name, topic, err, body)
		}
	}
	return resp, snap
}

// change is a session's change message.
type change struct {
	Topic   string `json:"topic"`
	Version uint64 `json:"version"`
}

// readChange reads the next change message of conn within 5s.
func readChange(t *testing.T, conn *websocket.Conn) change {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	mt, b, err := conn.ReadMessage()
	if err != nil {
		t.Fatalf("reading a change message: %s", err)
	}
	var ch change
	if err := json.Unmarshal(b, &ch); mt != websocket.TextMessage || err != nil {
		t.Fatalf("change message: type %d %q (%v)", mt, b, err)
	}
	return ch
}

// topicStats returns s's stats of topic (zero if the topic is not known).
func topicStats(s *ConfigServer, topic string) ConfigTopicStats {
	return s.Stats().Topics[topic]
}

func TestConfigSnapshot(t *testing.T) {
	c := configCluster(t, 1, Options{})
	s := c.Configs[0]
	if c.Config("config1") != s || c.Config("config2") != nil || s.Name != "config1" {
		t.Fatal("Config lookup is wrong")
	}
	cl := newClient(t, 3*time.Second)

	// A topic never published exists at version 1 with the default document.
	resp, snap := fetch(t, cl, s, "app/prod")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("ETag") != `"1"` ||
		resp.Header.Get("X-Served-By") != "config1" {
		t.Fatalf("GET app/prod: %d %v", resp.StatusCode, resp.Header)
	}
	if snap.Topic != "app/prod" || snap.Version != 1 || snap.Server != "config1" ||
		string(snap.Data) != `{"collection":"app","environment":"prod"}` {
		t.Fatalf("default snapshot %+v (data %s)", snap, snap.Data)
	}
	if st := topicStats(s, "app/prod"); st != (ConfigTopicStats{Version: 1, Fetches: 1}) {
		t.Fatalf("stats after one fetch: %+v", st)
	}

	v, err := s.Publish("app/prod", []byte(`{"feature":{"on":true},"n":[1,2]}`))
	if err != nil || v != 2 {
		t.Fatalf("Publish: %d, %v", v, err)
	}
	resp, snap = fetch(t, cl, s, "app/prod")
	if resp.Header.Get("ETag") != `"2"` || snap.Version != 2 || string(snap.Data) != `{"feature":{"on":true},"n":[1,2]}` {
		t.Fatalf("after Publish: ETag %s, %+v (data %s)", resp.Header.Get("ETag"), snap, snap.Data)
	}
	// nil data keeps the document; the version still moves.
	if v, err := s.Publish("app/prod", nil); err != nil || v != 3 {
		t.Fatalf("Publish(nil): %d, %v", v, err)
	}
	if _, snap = fetch(t, cl, s, "app/prod"); snap.Version != 3 || string(snap.Data) != `{"feature":{"on":true},"n":[1,2]}` {
		t.Fatalf("after Publish(nil): %+v (data %s)", snap, snap.Data)
	}
	// A topic's first publish follows its implicit version 1.
	if v, err := s.Publish("app.v2/stage-1_b", []byte(`[1]`)); err != nil || v != 2 {
		t.Fatalf("first Publish of a new topic: %d, %v", v, err)
	}
	for _, tc := range []struct{ topic, data string }{
		{"app", `{}`}, {"app/prod/x", `{}`}, {"/prod", `{}`}, {"app/", `{}`}, {"a b/c", `{}`}, {"a/b%", `{}`},
		{"app/prod", `{"unterminated":`}, {"app/prod", `nope`},
	} {
		if _, err := s.Publish(tc.topic, []byte(tc.data)); err == nil {
			t.Errorf("Publish(%q, %q): want an error", tc.topic, tc.data)
		}
	}

	// Another topic is independent of app/prod.
	if _, snap = fetch(t, cl, s, "other/env"); snap.Version != 1 || string(snap.Data) != `{"collection":"other","environment":"env"}` {
		t.Fatalf("other/env: %+v (data %s)", snap, snap.Data)
	}
	for _, path := range []string{"/", "/config", "/config/app", "/config/app/", "/config/app/prod/x", "/config//prod",
		"/config/a%20b/prod", "/config/a%2Fb/prod", "/configs/app/prod", "/events/app", "/health"} {
		if resp, _ := get(t, cl, "http://"+s.Addr+path); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr+"/config/app/prod", strings.NewReader("{}"))
	if resp, err := cl.Do(req); err != nil || resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST /config/app/prod: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, _ := get(t, cl, "http://"+s.Addr+"/events/app/prod"); resp.StatusCode != 400 {
		t.Fatalf("GET /events without an upgrade: %d, want 400", resp.StatusCode)
	}
	st := s.Stats()
	if !st.Up || st.Addr != s.Addr || st.Name != "config1" || st.Unauthorized != 0 || len(st.Topics) != 3 ||
		st.Topics["app/prod"] != (ConfigTopicStats{Version: 3, Fetches: 3}) || st.Topics["other/env"].Fetches != 1 {
		t.Fatalf("Stats %+v", st)
	}

	s.ResetCounters()
	if st := topicStats(s, "app/prod"); st != (ConfigTopicStats{Version: 3}) {
		t.Fatalf("stats after ResetCounters: %+v", st)
	}
}

func TestConfigSessionsFanOutPerTopic(t *testing.T) {
	c := configCluster(t, 2, Options{})
	s1, s2 := c.Configs[0], c.Configs[1]
	const perTopic = 25
	topics := []string{"app/prod", "app/test"}
	conns := map[string][]*websocket.Conn{}
	for _, topic := range topics {
		for range perTopic {
			conn, resp := dialWS(t, s1.Addr, "/events/"+topic, nil)
			if resp.Header.Get("X-Served-By") != "config1" {
				t.Fatalf("101 without X-Served-By: %v", resp.Header)
			}
			conns[topic] = append(conns[topic], conn)
		}
	}
	for _, topic := range topics {
		testkit.Eventually(t, topic+" sessions", 5*time.Second, func() bool {
			return topicStats(s1, topic) == ConfigTopicStats{Version: 1, Sessions: perTopic, SessionsTotal: perTopic}
		})
	}

	// A publish reaches every session of its topic and none of the other's: each app/test session's first
	// message is app/test's own.
	for want := uint64(2); want <= 3; want++ {
		if v, err := s1.Publish("app/prod", []byte(`{"v":1}`)); err != nil || v != want {
			t.Fatalf("Publish: %d, %v; want %d", v, err, want)
		}
		for _, conn := range conns["app/prod"] {
			if ch := readChange(t, conn); ch != (change{"app/prod", want}) {
				t.Fatalf("app/prod session got %+v, want version %d", ch, want)
			}
		}
	}
	if v, err := s1.Publish("app/test", nil); err != nil || v != 2 {
		t.Fatalf("Publish app/test: %d, %v", v, err)
	}
	for _, conn := range conns["app/test"] {
		if ch := readChange(t, conn); ch != (change{"app/test", 2}) {
			t.Fatalf("app/test session got %+v", ch)
		}
	}

	// Cluster.PublishConfig gives every server the same version, one above the highest, and the same
	// document; config2's sessions get it too.
	sub2, _ := dialWS(t, s2.Addr, "/events/app/prod", nil)
	testkit.Eventually(t, "config2 session", 5*time.Second, func() bool { return topicStats(s2, "app/prod").Sessions == 1 })
	v, err := c.PublishConfig("app/prod", []byte(`{"v":2}`))
	if err != nil || v != 4 {
		t.Fatalf("PublishConfig: %d, %v; want 4", v, err)
	}
	if ch := readChange(t, sub2); ch != (change{"app/prod", 4}) {
		t.Fatalf("config2 session got %+v", ch)
	}
	if ch := readChange(t, conns["app/prod"][7]); ch != (change{"app/prod", 4}) {
		t.Fatalf("config1 session got %+v", ch)
	}
	cl := newClient(t, 3*time.Second)
	for _, s := range c.Configs {
		if _, snap := fetch(t, cl, s, "app/prod"); snap.Version != 4 || string(snap.Data) != `{"v":2}` || snap.Server != s.Name {
			t.Fatalf("%s after PublishConfig: %+v (data %s)", s.Name, snap, snap.Data)
		}
	}
	if v, err := c.PublishConfig("app/prod", nil); err != nil || v != 5 || topicStats(s1, "app/prod").Version != 5 ||
		topicStats(s2, "app/prod").Version != 5 {
		t.Fatalf("second PublishConfig: %d, %v", v, err)
	}
	if _, err := c.PublishConfig("bad topic", nil); err == nil {
		t.Fatal("PublishConfig with a bad topic: want an error")
	}

	// A client that closes ends its session; the total stays.
	_ = conns["app/test"][0].WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	conns["app/test"][0].Close()
	conns["app/test"][1].Close() // no close message: the connection just goes
	testkit.Eventually(t, "two sessions to end", 5*time.Second, func() bool {
		return topicStats(s1, "app/test") == ConfigTopicStats{Version: 2, Sessions: perTopic - 2, SessionsTotal: perTopic}
	})
	// Pings are answered and client messages ignored: the session still gets changes afterwards.
	conn := conns["app/test"][2]
	pong := make(chan string, 1)
	conn.SetPongHandler(func(data string) error { pong <- data; return nil })
	if err := conn.WriteControl(websocket.PingMessage, []byte("hi"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := conn.WriteMessage(websocket.TextMessage, []byte("ignored")); err != nil {
		t.Fatal(err)
	}
	// The pong and the change messages are written by different goroutines of the server, in no set
	// order; reading a change message handles the control frames that came before it.
	deadline := time.Now().Add(3 * time.Second)
	for want := uint64(3); ; want++ {
		if _, err := s1.Publish("app/test", nil); err != nil {
			t.Fatal(err)
		}
		if ch := readChange(t, conn); ch != (change{"app/test", want}) {
			t.Fatalf("after a ping and a message: %+v, want version %d", ch, want)
		}
		select {
		case data := <-pong:
			if data != "hi" {
				t.Fatalf("pong %q", data)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no pong")
		}
	}
}

func TestConfigAPIKey(t *testing.T) {
	c := configCluster(t, 1, Options{ConfigAPIKey: "s3cret"})
	s := c.Configs[0]
	cl := newClient(t, 3*time.Second)
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second}
	for _, auth := range []string{"", "Bearer nope", "Bearer s3cret2", "bearer s3cret", "Basic s3cret"} {
		var hdr []string
		if auth != "" {
			hdr = []string{"Authorization", auth}
		}
		resp, _ := fetch(t, cl, s, "app/prod", hdr...)
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("GET with %q: %d %v", auth, resp.StatusCode, resp.Header)
		}
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		conn, resp, err := d.Dial("ws://"+s.Addr+"/events/app/prod", h)
		if err == nil {
			conn.Close()
			t.Fatalf("upgrade with %q succeeded", auth)
		}
		if resp == nil || resp.StatusCode != 401 {
			t.Fatalf("upgrade with %q: %v %v", auth, resp, err)
		}
	}
	// Nothing but the count happened: no topic became known.
	if st := s.Stats(); st.Unauthorized != 10 || len(st.Topics) != 0 {
		t.Fatalf("stats after refusals: %+v", st)
	}
	// A bad path is a 404 whatever the key.
	if resp, _ := get(t, cl, "http://"+s.Addr+"/config/app"); resp.StatusCode != 404 {
		t.Fatalf("bad path without a key: %d", resp.StatusCode)
	}

	resp, snap := fetch(t, cl, s, "app/prod", "Authorization", "Bearer s3cret")
	if resp.StatusCode != 200 || snap.Version != 1 {
		t.Fatalf("GET with the key: %d %+v", resp.StatusCode, snap)
	}
	conn, _ := dialWS(t, s.Addr, "/events/app/prod", http.Header{"Authorization": {"Bearer s3cret"}})
	testkit.Eventually(t, "the session", 5*time.Second, func() bool { return topicStats(s, "app/prod").Sessions == 1 })
	if _, err := s.Publish("app/prod", nil); err != nil {
		t.Fatal(err)
	}
	if ch := readChange(t, conn); ch != (change{"app/prod", 2}) {
		t.Fatalf("change %+v", ch)
	}
	if st := s.Stats(); st.Unauthorized != 10 || st.Topics["app/prod"] != (ConfigTopicStats{Version: 2, Fetches: 1, Sessions: 1, SessionsTotal: 1}) {
		t.Fatalf("stats %+v", st)
	}
	s.ResetCounters()
	if st := s.Stats(); st.Unauthorized != 0 || st.Topics["app/prod"] != (ConfigTopicStats{Version: 2, Sessions: 1}) {
		t.Fatalf("stats after ResetCounters %+v", st)
	}
}

func TestConfigStopStart(t *testing.T) {
	c := configCluster(t, 2, Options{})
	s, other := c.Configs[0], c.Configs[1]
	cl := newClient(t, 3*time.Second)
	fetch(t, cl, s, "app/prod")
	conn, _ := dialWS(t, s.Addr, "/events/app/prod", nil)
	otherConn, _ := dialWS(t, other.Addr, "/events/app/prod", nil)
	testkit.Eventually(t, "the sessions", 5*time.Second, func() bool {
		return topicStats(s, "app/prod").Sessions == 1 && topicStats(other, "app/prod").Sessions == 1
	})

	s.Stop()
	if s.Up() || s.Stats().Up {
		t.Fatal("Up after Stop")
	}
	// Stop has waited for the sessions to end; the client sees its connection close at once.
	if st := topicStats(s, "app/prod"); st.Sessions != 0 || st.SessionsTotal != 1 {
		t.Fatalf("stats after Stop: %+v", st)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, _, err := conn.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("read on a stopped server's session: %v, want a connection error", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the close was seen after %s", d)
	}
	if nc, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		nc.Close()
		t.Fatal("dial succeeded after Stop")
	}
	s.Stop() // no-op

	// The other server goes on; a stopped one still takes a cluster publish (its store is replicated).
	if v, err := c.PublishConfig("app/prod", []byte(`{"while":"down"}`)); err != nil || v != 2 {
		t.Fatalf("PublishConfig while config1 is down: %d, %v", v, err)
	}
	if ch := readChange(t, otherConn); ch != (change{"app/prod", 2}) {
		t.Fatalf("config2 session got %+v", ch)
	}

	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal("second Start:", err)
	}
	if !s.Up() {
		t.Fatal("not Up after Start")
	}
	cl2 := newClient(t, 3*time.Second) // the first client's keep-alive connection was closed
	if _, snap := fetch(t, cl2, s, "app/prod"); snap.Version != 2 || string(snap.Data) != `{"while":"down"}` {
		t.Fatalf("after Start: %+v (data %s)", snap, snap.Data)
	}
	conn2, _ := dialWS(t, s.Addr, "/events/app/prod", nil)
	testkit.Eventually(t, "a new session", 5*time.Second, func() bool { return topicStats(s, "app/prod").Sessions == 1 })
	if v, err := s.Publish("app/prod", nil); err != nil || v != 3 {
		t.Fatalf("Publish: %d, %v", v, err)
	}
	if ch := readChange(t, conn2); ch != (change{"app/prod", 3}) {
		t.Fatalf("new session got %+v", ch)
	}
	// The counters survived.
	if st := topicStats(s, "app/prod"); st != (ConfigTopicStats{Version: 3, Fetches: 2, Sessions: 1, SessionsTotal: 2}) {
		t.Fatalf("stats after Start: %+v", st)
	}

	c.Close()
	if err := s.Start(); err == nil {
		t.Fatal("Start after Close: want an error")
	}
	_ = conn2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, _, err := conn2.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("session survived Close: %v", err)
	}
}

// TestConfigSubscriberThatDoesNotReadIsClosedWithoutDelayingOthers: a client that never reads has its
// socket buffers filled by large publishes (a change message does not carry the document, so the topic
// has long segments: about 8 KiB per message); its session's writer blocks and the session is closed a
// second later, while every Publish returns at once and a healthy session of the same topic gets each
// version before the next publish.
func TestConfigSubscriberThatDoesNotReadIsClosedWithoutDelayingOthers(t *testing.T) {
	c := configCluster(t, 1, Options{})
	s := c.Configs[0]
	topic := strings.Repeat("c", 4000) + "/" + strings.Repeat("e", 4000)

	stuck, _ := dialWS(t, s.Addr, "/events/"+topic, nil)
	healthy, _ := dialWS(t, s.Addr, "/events/"+topic, nil)
	testkit.Eventually(t, "two sessions", 5*time.Second, func() bool { return topicStats(s, topic).Sessions == 2 })

	var latest atomic.Uint64
	readerDone := make(chan error, 1)
	go func() {
		for {
			_, b, err := healthy.ReadMessage()
			if err != nil {
				readerDone <- err
				return
			}
			var ch change
			if err := json.Unmarshal(b, &ch); err != nil {
				readerDone <- err
				return
			}
			latest.Store(ch.Version)
		}
	}()

	// Publish, each time waiting until the healthy session has the version, until the stuck session is
	// closed.
	data := []byte(`{"blob":"` + strings.Repeat("x", 64<<10) + `"}`)
	var slowest time.Duration
	publishes := 0
	deadline := time.Now().Add(8 * time.Second)
	for topicStats(s, topic).Sessions == 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the stuck session is still open after %d publishes", publishes)
		}
		start := time.Now()
		v, err := s.Publish(topic, data)
		if err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(start))
		publishes++
		for latest.Load() < v {
			select {
			case err := <-readerDone:
				t.Fatalf("healthy session: %v", err)
			default:
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("the healthy session did not get version %d within 2s (it has %d)", v, latest.Load())
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if slowest > 250*time.Millisecond {
		t.Errorf("the slowest of %d publishes took %s", publishes, slowest)
	}
	t.Logf("%d publishes until the stuck session was closed; slowest %s", publishes, slowest)
	if st := topicStats(s, topic); st.Sessions != 1 || st.SessionsTotal != 2 {
		t.Fatalf("stats %+v", st)
	}
	// The stuck client, reading at last, finds the messages that fit in the buffers and then the close.
	_ = stuck.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, _, err := stuck.ReadMessage()
		if err == nil {
			continue
		}
		if isTimeout(err) {
			t.Fatalf("the stuck client's connection was not closed: %v", err)
		}
		break
	}
	// The healthy session goes on.
	v, err := s.Publish(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the healthy session to get the last version", 5*time.Second, func() bool { return latest.Load() == v })
}

// callBody sends method with body to the control API and returns status and body.
func callBody(t *testing.T, cl *http.Client, c *Cluster, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.ControlAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %s", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestConfigControlAPI(t *testing.T) {
	c := configCluster(t, 2, Options{ControlAddr: "127.0.0.1:0"})
	s1, s2 := c.Configs[0], c.Configs[1]
	cl := newClient(t, 5*time.Second)

	code, body := callBody(t, cl, c, http.MethodPost, "/config/publish/app/prod", `{"flag": true}`)
	if code != 200 || body != `{"topic":"app/prod","version":2}`+"\n" {
		t.Fatalf("publish: %d %q", code, body)
	}
	for _, s := range c.Configs {
		if _, snap := fetch(t, cl, s, "app/prod"); snap.Version != 2 || string(snap.Data) != `{"flag":true}` {
			t.Fatalf("%s after publish: %+v (data %s)", s.Name, snap, snap.Data)
		}
	}
	// Without a body the document stays; GET works as POST does.
	if code, body := call(t, cl, c, http.MethodGet, "/config/publish/app/prod"); code != 200 || body != `{"topic":"app/prod","version":3}`+"\n" {
		t.Fatalf("publish without a body: %d %q", code, body)
	}
	if _, snap := fetch(t, cl, s2, "app/prod"); snap.Version != 3 || string(snap.Data) != `{"flag":true}` {
		t.Fatalf("after an empty publish: %+v (data %s)", snap, snap.Data)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodPost, "/config/publish/app/prod", `{"flag":`, 400},
		{http.MethodPost, "/config/publish/app/prod", `flag`, 400},
		{http.MethodPost, "/config/publish/a%20b/prod", `{}`, 400},
		{http.MethodPut, "/config/publish/app/prod", `{}`, 405},
		{http.MethodPost, "/config/publish/app", `{}`, 404},
		{http.MethodPost, "/config/config9/down", ``, 404},
		{http.MethodPost, "/config/config1/explode", ``, 400},
		{http.MethodDelete, "/config/reset", ``, 405},
	} {
		if code, body := callBody(t, cl, c, tc.method, tc.path, tc.body); code != tc.want || strings.Count(body, "\n") != 1 {
			t.Errorf("%s %s %q: %d %q, want %d and one line", tc.method, tc.path, tc.body, code, body, tc.want)
		}
	}
	if v := topicStats(s1, "app/prod").Version; v != 3 {
		t.Fatalf("a refused publish moved the version to %d", v)
	}

	// Down and up.
	code, body = call(t, cl, c, http.MethodPost, "/config/config2/down")
	if code != 200 || s2.Up() || !strings.Contains(body, `"name":"config2"`) || !strings.Contains(body, `"up":false`) {
		t.Fatalf("down: %d %q", code, body)
	}
	if nc, err := net.DialTimeout("tcp", s2.Addr, time.Second); err == nil {
		nc.Close()
		t.Fatal("config2 still listening after down")
	}
	if code, body := call(t, cl, c, http.MethodGet, "/config/config2/up"); code != 200 || !s2.Up() || !strings.Contains(body, `"up":true`) {
		t.Fatalf("up: %d %q", code, body)
	}

	// The status lists the config servers with their topics.
	_, raw := call(t, cl, c, http.MethodGet, "/status")
	for _, field := range []string{`"configs":[`, `"name":"config1"`, `"addr":"` + s2.Addr + `"`, `"up":true`,
		`"unauthorized":0`, `"topics":{"app/prod":{"version":3,"fetches":1,"sessions":0,"sessions_total":0}}`} {
		if !strings.Contains(raw, field) {
			t.Fatalf("/status lacks %s: %s", field, raw)
		}
	}
	st := status(t, cl, c)
	if len(st.Configs) != 2 || st.Configs[1].Name != "config2" || st.Configs[0].Topics["app/prod"].Fetches != 1 {
		t.Fatalf("status configs %+v", st.Configs)
	}

	// Reset zeroes the counters of every config server and answers their stats.
	code, body = call(t, cl, c, http.MethodPost, "/config/reset")
	var reset []ConfigStats
	if err := json.Unmarshal([]byte(body), &reset); code != 200 || err != nil || len(reset) != 2 ||
		reset[0].Topics["app/prod"] != (ConfigTopicStats{Version: 3}) {
		t.Fatalf("reset: %d %q (%v)", code, body, err)
	}
	for _, s := range c.Configs {
		if st := topicStats(s, "app/prod"); st.Fetches != 0 {
			t.Fatalf("%s after reset: %+v", s.Name, st)
		}
	}

	// Without config servers: an empty list, and a publish has nowhere to go.
	c0 := startCluster(t, Options{Platforms: 1, NoConnections: true, ControlAddr: "127.0.0.1:0"})
	if _, raw := call(t, cl, c0, http.MethodGet, "/status"); !strings.Contains(raw, `"configs":[]`) {
		t.Fatalf("/status without config servers: %s", raw)
	}
	if code, _ := call(t, cl, c0, http.MethodPost, "/config/publish/app/prod"); code != 404 {
		t.Fatalf("publish without config servers: %d", code)
	}
	if _, err := c0.PublishConfig("app/prod", nil); err == nil {
		t.Fatal("PublishConfig without config servers: want an error")
	}
}

func TestConfigOptions(t *testing.T) {
	if _, err := Start(Options{ConfigServers: -1}); err == nil {
		t.Fatal("want an error for a negative count")
	}
	if _, err := Start(Options{ConfigServers: 1, ConfigAddrs: []string{"", ""}}); err == nil {
		t.Fatal("want an error for too many addresses")
	}
	// ConfigAddrs alone give the count.
	c := startCluster(t, Options{Platforms: 1, NoConnections: true, ConfigAddrs: []string{"", "127.0.0.1:0"}, ControlAddr: "127.0.0.1:0"})
	if len(c.Configs) != 2 || c.Configs[1].Name != "config2" || c.Configs[0].Addr == c.Configs[1].Addr {
		t.Fatalf("configs %+v", c.Configs)
	}
	var sb strings.Builder
	c.WriteSummary(&sb)
	want := "platform1 platform " + c.Platforms[0].Addr + " state=leader\n" +
		"config1 config " + c.Configs[0].Addr + "\n" +
		"config2 config " + c.Configs[1].Addr + "\n" +
		"control " + c.ControlAddr + "\n"
	if sb.String() != want {
		t.Fatalf("summary:\n%s\nwant:\n%s", sb.String(), want)
	}
	if none := startCluster(t, Options{Platforms: 1, NoConnections: true}); len(none.Configs) != 0 {
		t.Fatal("config servers by default")
	}

	// A config address in use fails Start and leaves nothing running: the platform's port is free again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	platformAddr := ln.Addr().String()
	ln.Close()
	if _, err := Start(Options{Platforms: 1, NoConnections: true, PlatformAddrs: []string{platformAddr},
		ConfigAddrs: []string{c.Configs[0].Addr}}); err == nil {
		t.Fatal("want an error for a config address in use")
	}
	ln, err = net.Listen("tcp", platformAddr)
	if err != nil {
		t.Fatalf("the platform of a failed Start still listens: %v", err)
	}
	ln.Close()
}

func TestConfigOverTLS(t *testing.T) {
	ca := newCA(t)
	c := tlsCluster(t, ca, Options{Platforms: 1, NoConnections: true, ConfigServers: 1}, nil)
	s := c.Configs[0]
	resp, body := get(t, httpsClient(t, ca.Pool()), "https://"+s.Addr+"/config/app/prod")
	if resp.StatusCode != 200 || resp.TLS == nil || !strings.Contains(body, `"version":1`) {
		t.Fatalf("GET over HTTPS: %d %q", resp.StatusCode, body)
	}
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	conn, _, err := d.Dial("wss://"+s.Addr+"/events/app/prod", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testkit.Eventually(t, "the session", 5*time.Second, func() bool { return topicStats(s, "app/prod").Sessions == 1 })
	if _, err := c.PublishConfig("app/prod", []byte(`{"tls":true}`)); err != nil {
		t.Fatal(err)
	}
	if ch := readChange(t, conn); ch != (change{"app/prod", 2}) {
		t.Fatalf("change over TLS %+v", ch)
	}
}
