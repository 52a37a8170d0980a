package sim_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

func TestSetDelayDelaysEveryAnswerAndDeadCutsItShort(t *testing.T) {
	c := startCluster(t, Options{})
	p1 := c.Platforms[0]
	cl := newClient(t, 5*time.Second)
	p1.SetDelay(300 * time.Millisecond)
	if p1.Delay() != 300*time.Millisecond || p1.Status().Delay != "300ms" {
		t.Fatalf("Delay = %s, status %+v", p1.Delay(), p1.Status())
	}
	for _, u := range []string{"http://" + p1.Addr + "/x", leaderCheckURL(p1)} {
		start := time.Now()
		resp, _ := get(t, cl, u, "Authorization", testAuth)
		if took := time.Since(start); resp.StatusCode != 200 || took < 300*time.Millisecond {
			t.Fatalf("%s: %d after %s, want 200 after at least 300ms", u, resp.StatusCode, took)
		}
	}
	p1.SetDelay(0)
	if p1.Delay() != 0 || p1.Status().Delay != "" {
		t.Fatalf("cleared delay: %s", p1.Delay())
	}

	// A platform going Dead does not wait for a delayed answer: the connection closes at once.
	p1.SetDelay(time.Minute)
	errc := make(chan error, 1)
	go func() {
		resp, err := cl.Get("http://" + p1.Addr + "/x")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testkit.Eventually(t, "the request to arrive", 5*time.Second, func() bool { return p1.Requests() == 2 })
	start := time.Now()
	if err := p1.SetState(Dead); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("delayed request on a dying platform: %v after %s", err, time.Since(start))
	}
}

func TestLeaderCheckFlapAlternates503And200(t *testing.T) {
	c := startCluster(t, Options{})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	cl := newClient(t, 5*time.Second)
	for _, p := range []*Platform{p1, p2} {
		p.SetLeaderCheckFlap(true)
		var got []int
		for range 5 {
			resp, _ := get(t, cl, leaderCheckURL(p), "Authorization", testAuth)
			got = append(got, resp.StatusCode)
		}
		if want := []int{503, 200, 503, 200, 503}; !equalInts(got, want) {
			t.Fatalf("%s flapping: %v, want %v", p.Name, got, want)
		}
		if resp, _ := get(t, cl, leaderCheckURL(p)); resp.StatusCode != 401 {
			t.Fatalf("%s flapping without credentials: %d", p.Name, resp.StatusCode)
		}
	}
	// A forced status wins; turning the flap off goes back to the state.
	p1.SetLeaderCheckStatus(400)
	if resp, _ := get(t, cl, leaderCheckURL(p1), "Authorization", testAuth); resp.StatusCode != 400 {
		t.Fatalf("forced while flapping: %d", resp.StatusCode)
	}
	p1.SetLeaderCheckStatus(0)
	p1.SetLeaderCheckFlap(false)
	for range 3 {
		if resp, _ := get(t, cl, leaderCheckURL(p1), "Authorization", testAuth); resp.StatusCode != 200 {
			t.Fatalf("flap off: %d", resp.StatusCode)
		}
	}
	if !p2.Status().LeaderCheckFlap || p1.Status().LeaderCheckFlap {
		t.Fatalf("status flap: %+v %+v", p1.Status(), p2.Status())
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// syncBuf is a bytes.Buffer safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDeliveriesAreRecordedByIdHeader(t *testing.T) {
	var log syncBuf
	c := startCluster(t, Options{DeliveryHeader: "X-Request-Id", DeliveryLog: &log, ControlAddr: "127.0.0.1:0"})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	cl := newClient(t, 5*time.Second)
	post := func(p *Platform, id string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/svc", strings.NewReader("body"))
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post(p1, "a")
	post(p1, "b")
	post(p2, "a")
	post(p2, "") // no id: not recorded
	if got := p1.Deliveries(); len(got) != 2 || got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("platform1 deliveries %v", got)
	}
	if got := c.Deliveries(); len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Fatalf("cluster deliveries %v", got)
	}
	if got, want := log.String(), "platform1 a\nplatform1 b\nplatform2 a\n"; got != want {
		t.Fatalf("delivery log %q, want %q", got, want)
	}
	if code, body := call(t, cl, c, http.MethodGet, "/deliveries"); code != 200 || !strings.Contains(body, `"a":2`) {
		t.Fatalf("GET /deliveries: %d %s", code, body)
	}

	// A request that hangs was delivered all the same.
	if err := p2.SetState(Hung); err != nil {
		t.Fatal(err)
	}
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p2.Addr+"/svc", strings.NewReader("body"))
		req.Header.Set("X-Request-Id", "hung")
		if resp, err := (&http.Client{Timeout: 500 * time.Millisecond}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testkit.Eventually(t, "the hung request to be recorded", 5*time.Second, func() bool { return p2.Deliveries()["hung"] == 1 })

	p1.ResetCounters()
	if got := p1.Deliveries(); len(got) != 0 {
		t.Fatalf("after ResetCounters: %v", got)
	}
	if c2 := startCluster(t, Options{}); c2.Platforms[0].Deliveries() != nil || len(c2.Deliveries()) != 0 {
		t.Fatal("deliveries recorded without DeliveryHeader")
	}
}

func TestPlatformNamesStatesAndNoConnections(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1, NoConnections: true, PlatformNames: []string{"platform2"},
		PlatformStates: []State{Backup}})
	if len(c.Platforms) != 1 || len(c.Connections) != 0 {
		t.Fatalf("%d platforms, %d connection servers", len(c.Platforms), len(c.Connections))
	}
	p := c.Platforms[0]
	if p.Name != "platform2" || p.State() != Backup || c.Platform("platform2") != p {
		t.Fatalf("platform %s state %s", p.Name, p.State())
	}
	cl := newClient(t, 5*time.Second)
	if resp, _ := get(t, cl, "http://"+p.Addr+"/x"); resp.Header.Get("X-Served-By") != "platform2" {
		t.Fatalf("X-Served-By %q", resp.Header.Get("X-Served-By"))
	}

	// A platform may start Dead on a free port, and come back there.
	c = startCluster(t, Options{PlatformStates: []State{Dead, Leader}})
	dead := c.Platforms[0]
	if dead.State() != Dead || strings.HasSuffix(dead.Addr, ":0") || dead.OpenConns() != 0 {
		t.Fatalf("dead platform %s at %s", dead.State(), dead.Addr)
	}
	if _, err := cl.Get("http://" + dead.Addr + "/x"); err == nil {
		t.Fatal("a Dead platform answered")
	}
	if err := dead.SetState(Backup); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, cl, "http://"+dead.Addr+"/x"); resp.StatusCode != 200 {
		t.Fatalf("revived: %d", resp.StatusCode)
	}

	for _, bad := range []Options{
		{NoConnections: true, Connections: 1},
		{NoConnections: true, ConnectionAddrs: []string{"127.0.0.1:0"}},
		{Platforms: 1, PlatformNames: []string{"a", "b"}},
		{PlatformNames: []string{"a", "a"}},
		{PlatformStates: []State{State(42)}},
	} {
		if c, err := Start(bad); err == nil {
			c.Close()
			t.Errorf("Start(%+v) succeeded", bad)
		}
	}
}

func TestControlAPIDelayAndFlap(t *testing.T) {
	c := startCluster(t, Options{ControlAddr: "127.0.0.1:0"})
	cl := newClient(t, 5*time.Second)
	p2 := c.Platforms[1]
	if code, body := call(t, cl, c, http.MethodPost, "/platform/platform2/delay/2s"); code != 200 || p2.Delay() != 2*time.Second || !strings.Contains(body, `"delay":"2s"`) {
		t.Fatalf("delay: %d %s", code, body)
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/platform/platform2/delay/0"); code != 200 || p2.Delay() != 0 {
		t.Fatalf("clear delay: %d", code)
	}
	if code, body := call(t, cl, c, http.MethodPost, "/platform/platform2/flap/on"); code != 200 || !p2.LeaderCheckFlap() || !strings.Contains(body, `"leadercheck_flap":true`) {
		t.Fatalf("flap on: %d %s", code, body)
	}
	if code, _ := call(t, cl, c, http.MethodGet, "/platform/platform2/flap/off"); code != 200 || p2.LeaderCheckFlap() {
		t.Fatalf("flap off: %d", code)
	}
	for path, want := range map[string]int{
		"/platform/platform9/delay/1s":   404,
		"/platform/platform1/delay/x":    400,
		"/platform/platform1/delay/-1s":  400,
		"/platform/platform9/flap/on":    404,
		"/platform/platform1/flap/maybe": 400,
	} {
		if code, body := call(t, cl, c, http.MethodPost, path); code != want {
			t.Errorf("POST %s: %d %q, want %d", path, code, body, want)
		}
	}
	if code, _ := call(t, cl, c, http.MethodPost, "/deliveries"); code != 405 {
		t.Errorf("POST /deliveries: %d", code)
	}
}
