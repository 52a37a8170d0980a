//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// upgradeRelayConfig is a relay "appconfig" of topic inventory/dev over the config server at upstream,
// its keep-alives (SSE comments, WebSocket pings) every 200ms, so that some cross the switch.
func upgradeRelayConfig(t *testing.T, upstream string) string {
	t.Helper()
	headers, keys := testkit.RelaySecrets(t, t.TempDir())
	var c testkit.Config
	c.Table("pools.appconfig").Set("servers", []string{upstream})
	c.Table("relays.appconfig").Set("pool", "appconfig").
		Set("path", "/relay/{collection}/{environment}").
		Set("snapshot", "/config/{collection}/{environment}").
		Set("events", "/events/{collection}/{environment}").
		Set("topics", []string{"inventory/dev"}).
		Set("keepalive", "200ms").
		Set("upstream_headers_file", headers)
	c.Table("relays.appconfig.auth").Set("keys_file", keys).Set("header", testkit.RelayClientHeader)
	return c.String()
}

// sseEvents reads an SSE stream's events ("id: N" of each, keep-alive comments skipped) into a
// channel, and its end (the connection closed, or broken) into another.
func sseEvents(br *bufio.Reader) (ids <-chan string, ended <-chan error) {
	out, end := make(chan string, 16), make(chan error, 1)
	go func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				end <- err
				return
			}
			if id, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "id: "); ok {
				out <- id
			}
		}
	}()
	return out, end
}

// wsMessages reads a WebSocket's messages into a channel, and its end into another. The client
// answers the relay's pings as it reads.
func wsMessages(ws *websocket.Conn) (msgs <-chan string, ended <-chan error) {
	out, end := make(chan string, 16), make(chan error, 1)
	go func() {
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				end <- err
				return
			}
			out <- string(b)
		}
	}()
	return out, end
}

// Issue 38: a relay subscriber keeps its stream over a binary upgrade and gets the next change
// published after the switch. An SSE stream and a WebSocket, with keep-alives flowing, move to the
// new process on their own connections: after the switch each gets the next change once, and
// nothing in between (no event lost, repeated or cut), the connections never close, and the new
// process took no subscription request (no reconnect): it has the two subscribers all the same.
func TestSIGUSR2MovesTheRelaysSubscribersOnTheirConnections(t *testing.T) {
	moveRelaySubscribers(t, false)
}

// Issue 38: the same over HTTPS (tls_listen): an SSE stream (TLS 1.2) and a WebSocket (wss://, TLS
// 1.3) keep their connections and their TLS sessions across two binary upgrades in a row (the second
// moves sessions that fairlead's record layer carries already, not crypto/tls), and each gets every
// change once.
func TestSIGUSR2MovesTheRelaysHTTPSSubscribersWithTheirTLSSessions(t *testing.T) {
	moveRelaySubscribers(t, true)
}

// relayUpgradeTopic is the topic of the relay upgrade tests.
const relayUpgradeTopic = "inventory/dev"

// relayUpgradeCluster is a cluster with two platforms and a config server, and publish, which publishes
// {"n": n} to relayUpgradeTopic and returns its version.
func relayUpgradeCluster(t *testing.T) (c *sim.Cluster, publish func(n int) string) {
	t.Helper()
	c = testkit.StartCluster(t, sim.Options{Platforms: 2, ConfigServers: 1, ConfigAPIKey: testkit.RelayUpstreamKey})
	return c, func(n int) string {
		t.Helper()
		v, err := c.PublishConfig(relayUpgradeTopic, []byte(`{"n":`+strconv.Itoa(n)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatUint(v, 10)
	}
}

// moveRelaySubscribers is the tests above: over tls_listen when https, with two upgrades.
func moveRelaySubscribers(t *testing.T, https bool) {
	c, publish := relayUpgradeCluster(t)
	const topic = relayUpgradeTopic
	v := publish(1)
	files := []string{"20-relay.toml", upgradeRelayConfig(t, c.Configs[0].Addr)}
	var (
		dialSSE = func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }
		d       = websocket.Dialer{HandshakeTimeout: 5 * time.Second}
		scheme  = "ws://"
		addr    string
	)
	upgrades := 1
	if https {
		tf := newTLSFront(t)
		addr = tf.addr
		files = append(files, "30-tls.toml", tf.conf)
		sseTLS := tf.client.Clone()
		sseTLS.MaxVersion = tls.VersionTLS12
		dialSSE = func(addr string) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, sseTLS)
		}
		d.TLSClientConfig = tf.client.Clone()
		d.TLSClientConfig.MinVersion = tls.VersionTLS13
		scheme = "wss://"
		upgrades = 2
	}
	p := startUpgradable(t, c, files...)
	if addr == "" {
		addr = p.addr
	}

	sse, err := dialSSE(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sse.Close()
	fmt.Fprintf(sse, "GET /relay/%s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n%s: %s\r\n\r\n", topic, testkit.RelayClientHeader, testkit.RelayClientKey)
	br := bufio.NewReader(sse)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("SSE: %q %v", line, err)
	}
	ids, sseEnded := sseEvents(br)
	ws, _, err := d.Dial(scheme+addr+"/relay/"+topic, http.Header{testkit.RelayClientHeader: {testkit.RelayClientKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	msgs, wsEnded := wsMessages(ws)

	// next checks that each subscriber's next message is version v's, within a bound.
	next := func(when, v string) {
		t.Helper()
		select {
		case id := <-ids:
			if id != v {
				t.Fatalf("%s: the SSE stream's next event is version %s, want %s", when, id, v)
			}
		case err := <-sseEnded:
			t.Fatalf("%s: the SSE stream ended: %v", when, err)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no SSE event of version %s", when, v)
		}
		want := `{"topic":"` + topic + `","version":` + v + `}`
		select {
		case m := <-msgs:
			if m != want {
				t.Fatalf("%s: the WebSocket's next message is %s, want %s", when, m, want)
			}
		case err := <-wsEnded:
			t.Fatalf("%s: the WebSocket ended: %v", when, err)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no WebSocket message of version %s", when, v)
		}
	}
	select { // the stream starts with the current snapshot
	case id := <-ids:
		if id != v {
			t.Fatalf("the SSE stream starts with version %s, want %s", id, v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first SSE event")
	}
	testkit.Eventually(t, "two subscribers", 10*time.Second, func() bool {
		return testkit.Metric(p.admin, `fairlead_relay_subscribers_all_topics{relay="appconfig"}`) == "2"
	})
	next("before the switch", publish(2))

	for i := 1; i <= upgrades; i++ {
		old := p.pid()
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return p.pid() != old && gone(old) })
		// The new process's line may come after the old one is gone.
		testkit.Eventually(t, fmt.Sprintf("upgrade %d: the log to say 2 relay streams moved", i), 10*time.Second, func() bool {
			log := p.logText()
			return strings.Count(log, "2 relay streams handed over") == i && strings.Count(log, "2 relay streams taken over") == i
		})
		time.Sleep(time.Second) // keep-alives cross the new process: SSE comments, pings and pongs
		next(fmt.Sprintf("after switch %d", i), publish(2*i+1))
		next(fmt.Sprintf("after the next change of switch %d", i), publish(2*i+2))
	}

	// The same connections: they never ended, and the new process took no subscription.
	select {
	case err := <-sseEnded:
		t.Fatalf("the SSE stream ended: %v", err)
	case err := <-wsEnded:
		t.Fatalf("the WebSocket ended: %v", err)
	default:
	}
	for _, kind := range []string{"sse", "websocket"} {
		if got := testkit.Metric(p.admin, `fairlead_relay_requests_total{relay="appconfig",kind="`+kind+`"}`); got != "0" {
			t.Errorf("the new process took %s %s subscription requests, want none (a client reconnected)", got, kind)
		}
	}
	if got := testkit.Metric(p.admin, `fairlead_relay_subscribers_all_topics{relay="appconfig"}`); got != "2" {
		t.Errorf("the new process has %s subscribers, want the 2 it took over", got)
	}
	// The WebSocket's reading moved too: a close from the client is answered by the new process.
	if err := ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wsEnded:
		if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			t.Errorf("the WebSocket ended with %v, want the new process's answer to its close (1000)", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the new process did not answer the WebSocket's close")
	}
}
