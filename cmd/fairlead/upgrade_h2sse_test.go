//go:build linux

package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// A relay's SSE subscriber over HTTP/2 (a browser's) across a binary upgrade: HTTP/2 connections are not
// moved, so its stream stays with the old process, which ends it cleanly (END_STREAM, after the GOAWAY)
// and exits well within drain_timeout instead of being held by it; the client subscribes again, now to
// the new process, and gets the next change.
func TestSIGUSR2EndsARelaysSSEStreamOverHTTP2AndTheClientResubscribesToTheNewProcess(t *testing.T) {
	c, publish := relayUpgradeCluster(t)
	const topic = relayUpgradeTopic
	v := publish(1)
	tf := newTLSFront(t)
	p := startUpgradable(t, c, "20-relay.toml", upgradeRelayConfig(t, c.Configs[0].Addr), "30-tls.toml", tf.conf)
	tr := tf.h2Transport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// subscribe opens the SSE stream over HTTP/2 and returns its event ids and its end.
	subscribe := func() (ids <-chan string, ended <-chan error, body io.Closer) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+tf.addr+"/relay/"+topic, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(testkit.RelayClientHeader, testkit.RelayClientKey)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("SSE over HTTP/2: %d over %s, %v", resp.StatusCode, resp.Proto, resp.Header)
		}
		ids, ended = sseEvents(bufio.NewReader(resp.Body))
		return ids, ended, resp.Body
	}
	nextID := func(ids <-chan string, ended <-chan error, when, want string) {
		t.Helper()
		select {
		case id := <-ids:
			if id != want {
				t.Fatalf("%s: event of version %s, want %s", when, id, want)
			}
		case err := <-ended:
			t.Fatalf("%s: the stream ended: %v", when, err)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no event of version %s", when, want)
		}
	}

	ids, ended, body := subscribe()
	defer body.Close()
	nextID(ids, ended, "the first event", v)
	testkit.Eventually(t, "one subscriber", 10*time.Second, func() bool {
		return testkit.Metric(p.admin, `fairlead_relay_subscribers_all_topics{relay="appconfig"}`) == "1"
	})

	old := p.pid()
	start := time.Now()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the stream over HTTP/2 at the upgrade ended with %v, want a clean end (END_STREAM)", err)
		}
	case <-time.After(upgradeDrain):
		t.Fatal("the stream over HTTP/2 is still open at drain_timeout")
	}
	testkit.Eventually(t, "the old process to exit", upgradeDrain, func() bool { return p.pid() != old && gone(old) })
	if took := time.Since(start); took >= upgradeDrain {
		t.Errorf("the old process took %s to exit, want well within drain_timeout (%s)", took, upgradeDrain)
	}
	if log := p.logText(); !strings.Contains(log, "0 relay streams handed over; 1 end with the drain") {
		t.Errorf("the old process's log does not count the HTTP/2 stream as one that ends with the drain:\n%s", testkit.Tail(log, 2000))
	}

	// The client subscribes again, to the new process.
	ids, ended, body = subscribe()
	defer body.Close()
	nextID(ids, ended, "the new process's first event", v)
	nextID(ids, ended, "after the switch", publish(2))
}
