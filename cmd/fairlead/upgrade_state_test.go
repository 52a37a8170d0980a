//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// statusEvent is an event of /api/status as this test compares it.
type statusEvent struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Pool   string    `json:"pool"`
	Server string    `json:"server"`
	Detail string    `json:"detail"`
}

// statusEvents is the event history of the status document at admin.
func statusEvents(t *testing.T, admin string) []statusEvent {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Events []statusEvent `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Events
}

// getStatus is the status and Retry-After of a GET / on a new connection.
func getStatus(t *testing.T, addr string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// Issue 38, the state: a client that spent its rate_per_source before a binary upgrade has spent it in
// the new process (refused with the same 429 right after the switch, let through only at the rate), and
// the new process's status document has the old one's events, in their order and with their times,
// then upgraded.
func TestSIGUSR2HandsOverTheBucketsPerSourceAndTheEventHistory(t *testing.T) {
	const rate, burst = 1, 30
	c := testkit.StartCluster(t, sim.Options{Platforms: 2})
	p := startUpgradable(t, c, "30-limits.toml", "[frontend]\nrate_per_source = "+strconv.Itoa(rate)+
		"\nburst_per_source = "+strconv.Itoa(burst)+"\n")

	// The client spends its bucket: served until refused.
	refused, retry := 0, ""
	for range 2 * burst {
		code, ra := getStatus(t, p.addr)
		if code == http.StatusTooManyRequests {
			refused, retry = code, ra
			break
		}
		if code != 200 {
			t.Fatalf("before the upgrade: %d, want 200 until the bucket is spent, then 429", code)
		}
	}
	spent := time.Now()
	if refused != http.StatusTooManyRequests || retry != "1" {
		t.Fatalf("before the upgrade: no 429 with Retry-After 1 in %d requests (got %d, %q)", 2*burst, refused, retry)
	}
	before := statusEvents(t, p.admin)
	if len(before) == 0 {
		t.Fatal("no event in the status document before the upgrade")
	}

	old := p.pid()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a new process in the PID file", 30*time.Second, func() bool { return p.pid() != old && p.pid() != 0 })
	testkit.Eventually(t, "the old process to exit", 30*time.Second, func() bool { return gone(old) })

	// Right after the switch, the new process alone: of burst-10 requests, those the rate refilled since
	// the bucket was spent pass, at most; the others get the same 429 as before the switch. A new bucket
	// would let them all through.
	served, limited := 0, 0
	for range burst - 10 {
		switch code, ra := getStatus(t, p.addr); {
		case code == 200:
			served++
		case code == http.StatusTooManyRequests && ra == retry:
			limited++
		default:
			t.Fatalf("after the upgrade: %d with Retry-After %q, want 200 or 429 with Retry-After %s as before", code, ra, retry)
		}
	}
	elapsed := time.Since(spent)
	if most := int(elapsed.Seconds()*rate) + 1; served > most || limited == 0 {
		t.Fatalf("after the upgrade: %d served, %d refused, %s after the bucket was spent; want at most %d served (the rate's refill), the rest 429",
			served, limited, elapsed.Round(time.Millisecond), most)
	}
	t.Logf("after the upgrade: %d served, %d refused, %s after the bucket was spent", served, limited, elapsed.Round(time.Millisecond))
	if !strings.Contains(p.logText(), "state: handed over: ") {
		t.Errorf("the new process does not say what was handed over")
	}

	// The history: the old process's events first, as they were, then the upgrade.
	var after []statusEvent
	testkit.Eventually(t, "the upgraded event in the status document", 10*time.Second, func() bool {
		after = statusEvents(t, p.admin)
		return len(after) > 0 && after[len(after)-1].Kind == "upgraded"
	})
	if len(after) <= len(before) {
		t.Fatalf("%d events after the upgrade, %d before", len(after), len(before))
	}
	for i, e := range before {
		a := after[i]
		if a.Seq != e.Seq || a.Kind != e.Kind || !a.Time.Equal(e.Time) || a.Pool != e.Pool || a.Server != e.Server || a.Detail != e.Detail {
			t.Fatalf("event %d after the upgrade is %+v, want %+v as before it", i, a, e)
		}
	}
	for i := 1; i < len(after); i++ {
		if after[i].Seq <= after[i-1].Seq || after[i].Time.Before(after[i-1].Time) {
			t.Fatalf("events out of order after the upgrade: %+v then %+v", after[i-1], after[i])
		}
	}
	if up := after[len(after)-1]; !strings.Contains(up.Detail, "took over from PID "+strconv.Itoa(old)) {
		t.Errorf("the upgraded event %+v does not name the old process %d", up, old)
	}
}
