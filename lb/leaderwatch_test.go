package lb

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// A GET waiting on a leader that hangs is sent to the new leader as soon as the LeaderChecks elect it,
// not after response_timeout; a POST waiting with it is never sent twice and ends by its own timeout.
// The hung leader is noticed by its unanswered traffic, long before its next scheduled LeaderCheck.
func TestRequestsWaitingOnAHungLeaderMoveToTheNewLeaderButAPOSTIsNeverSentTwice(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, DeliveryHeader: "X-Id", Logf: func(string, ...any) {}})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	// Scheduled LeaderChecks every 30-40 s: only the watch of live traffic can notice the hang in time.
	l, _ := startLB(t, platformConfig(c, `response_timeout = "8s"`, `interval = "30s"
interval_max = "40s"`))
	if code, by := get(t, l, "/"); code != 200 || by != p1.Name {
		t.Fatalf("got %d from %q, want 200 from %s", code, by, p1.Name)
	}

	mustSetState(t, p1, sim.Hung)
	mustSetState(t, p2, sim.Leader)
	send := func(method, id string) <-chan reply {
		ch := make(chan reply, 1)
		go func() {
			req, _ := http.NewRequest(method, "http://"+l.Addr()+"/Thingworx/Things", strings.NewReader("body"))
			req.Header.Set("X-Id", id)
			ch <- replyOf((&http.Client{Timeout: 20 * time.Second}).Do(req))
		}()
		return ch
	}
	getReply, postReply := send(http.MethodGet, "get-1"), send(http.MethodPost, "post-1")

	r := <-getReply
	if r.err != nil || r.status != 200 || r.by != p2.Name {
		t.Fatalf("GET: %s, want 200 from %s before its response_timeout", r, p2.Name)
	}
	if st := l.Status().Pools[0]; st.InflightFailovers != 1 || st.Leader != p2.Addr {
		t.Errorf("inflight_failovers %d, leader %s; want 1 and %s", st.InflightFailovers, st.Leader, p2.Addr)
	}
	r = <-postReply
	if r.err != nil || r.status != 504 {
		t.Fatalf("POST: %s, want 504 after its response_timeout", r)
	}
	d := c.Deliveries()
	if d["get-1"] != 2 || d["post-1"] != 1 {
		t.Errorf("deliveries %v: want the GET on both platforms and the POST once", d)
	}
	if n := p2.Deliveries()["post-1"]; n != 0 {
		t.Errorf("the POST reached the new leader %d times, want 0", n)
	}
}
