package lb

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// openSSE opens an SSE stream on path and returns the connection and the status line.
func openSSE(t *testing.T, addr, path string) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n", path)
	c.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return c, strings.TrimSpace(line)
}

// TestRelayMaxSubscribersRefusesOneMoreStream: with max_subscribers = 2, a third stream gets 503
// while GETs are still served, and a stream is admitted again once one ends (an SSE stream does
// not read its client: a client gone is noticed at the next write, here a keep-alive).
func TestRelayMaxSubscribersRefusesOneMoreStream(t *testing.T) {
	c := startRelaySim(t, 1)
	l, _ := startLB(t, openRelayFiles(t, relayConfigAddrs(c), []string{"inventory/dev", "payments/dev"},
		"max_subscribers = 2\nkeepalive = \"200ms\""))
	a, s1 := openSSE(t, l.Addr(), "/relay/inventory/dev")
	_, s2 := openSSE(t, l.Addr(), "/relay/payments/dev")
	if s1 != "HTTP/1.1 200 OK" || s2 != "HTTP/1.1 200 OK" {
		t.Fatalf("the first two streams: %q, %q", s1, s2)
	}
	testkit.Eventually(t, "two subscribers", 5*time.Second, func() bool { return l.Status().Relays[0].Subscribers == 2 })
	if _, s3 := openSSE(t, l.Addr(), "/relay/inventory/dev"); s3 != "HTTP/1.1 503 Service Unavailable" {
		t.Fatalf("a third stream: %q, want 503", s3)
	}
	resp, err := testClient.Get("http://" + l.Addr() + "/relay/inventory/dev")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET at the subscriber limit: %s", resp.Status)
	}
	if n := l.Status().Relays[0].Refused["503"]; n != 1 {
		t.Errorf("refused 503 = %d, want 1", n)
	}
	a.Close()
	testkit.Eventually(t, "the closed stream to leave", 5*time.Second, func() bool { return l.Status().Relays[0].Subscribers == 1 })
	if _, s := openSSE(t, l.Addr(), "/relay/inventory/dev"); s != "HTTP/1.1 200 OK" {
		t.Fatalf("a stream after one ended: %q", s)
	}
}
