package lb

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
	"github.com/fasthttp/websocket"
)

// Black-box tests of the balancing features over real sockets: balance = "roundrobin" over connected
// and writable servers, high watermarks, unavailable_status after queue_timeout, multi-part pins,
// backup tiers with failover and failback (checker and leader pools), failback_close_tunnels and display
// names. The config errors of these keys are lb/config's tests (lb/config/balancing_test.go).

// readyPath is the readiness probe of the roundrobin pools below. The simulated platforms are started
// with it as their LeaderCheck path, so that probes are recorded as probes and never counted in
// Platform.Requests: the request counters then count exactly the traffic fairlead forwarded. Every
// platform answers it 200 (SetLeaderCheckStatus(200)); 503 makes a platform "not connected" while it
// still serves every request that reaches it.
const readyPath = "/Thingworx/ready"

// startReadyCluster starts n platform servers whose readiness probe answers 200, closed at the end of
// the test.
func startReadyCluster(t *testing.T, n int) *sim.Cluster {
	t.Helper()
	c := testkit.StartCluster(t, sim.Options{Platforms: n, LeaderCheckPath: readyPath, Logf: func(string, ...any) {}})
	for _, p := range c.Platforms {
		p.SetLeaderCheckStatus(200)
	}
	return c
}

// addrsOf are the addresses of ps, in order.
func addrsOf(ps []*sim.Platform) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Addr)
	}
	return out
}

// balConfig is a config with one roundrobin pool "platform" over servers (and backups), probed on
// readyPath with short intervals, behind a catch-all route. extra (TOML with its own table headers) goes
// into a second file, merged over the first as conf.d files are.
func balConfig(servers, backups []*sim.Platform, extra string) map[string]string {
	base, pool, check, _ := poolConf("platform", "roundrobin", addrsOf(servers), true)
	if len(backups) > 0 {
		pool.Set("backups", addrsOf(backups))
	}
	pool.Set("queue_timeout", 2*time.Second)
	check.Set("path", readyPath).Set("credentials", sim.DefaultCredentials).
		Set("interval", 100*time.Millisecond).Set("interval_max", 150*time.Millisecond).
		Set("fast_interval", 100*time.Millisecond).Set("timeout", time.Second).Set("fall", 2).Set("rise", 2)
	files := map[string]string{"10-base.toml": base.String()}
	if extra != "" {
		files["20-extra.toml"] = extra
	}
	return files
}

// sendChunk sends one part of multi-part upload id (a POST with a body).
func sendChunk(l *LB, id, path string, n int) reply {
	return request(l, "POST", path, fmt.Sprintf("%s part %d %s", id, n, strings.Repeat("x", 100)), "X-Multipart-Id", id)
}

// platformLabels is how /metrics labels a server of pool "platform".
func platformLabels(addr, name string) string {
	return fmt.Sprintf(`pool="platform",server=%q,name=%q`, addr, name)
}

// requestCounts returns each platform's Requests counter.
func requestCounts(ps []*sim.Platform) map[string]int64 {
	m := map[string]int64{}
	for _, p := range ps {
		m[p.Name] = p.Requests()
	}
	return m
}

// countsUnchanged fails the test if a platform's Requests counter moved since before.
func countsUnchanged(t *testing.T, what string, ps []*sim.Platform, before map[string]int64) {
	t.Helper()
	for _, p := range ps {
		if n := p.Requests(); n != before[p.Name] {
			t.Errorf("%s: %s received %d requests, want none", what, p.Name, n-before[p.Name])
		}
	}
}

func TestRoundRobinVisitsTheServersInConfigOrderSplitsConcurrentRequestsEvenlyAndSkipsAServerThatIsNotConnectedUntilItRises(t *testing.T) {
	c := startReadyCluster(t, 3)
	ps := c.Platforms
	p1, p2, p3 := ps[0], ps[1], ps[2]
	l, _ := startLB(t, balConfig(ps, nil, ""))

	// One client, one request after the other: platform1 platform2 platform3, over and over.
	for i := 0; i < 12; i++ {
		mustServe(t, fmt.Sprintf("request %d", i+1), request(l, "GET", "/Thingworx/Things", ""), ps[i%3].Name)
	}
	for _, p := range ps {
		if n := p.Requests(); n != 4 {
			t.Errorf("%s received %d requests, want 4", p.Name, n)
		}
	}

	// 30 requests in flight at once: each server gets exactly 10.
	before := requestCounts(ps)
	byOf := concurrentGets(t, l, "/Thingworx/Things?delay=50ms", 30)()
	for name, n := range byOf {
		if !strings.HasPrefix(name, "200 ") {
			t.Errorf("concurrent requests: %d answered %s", n, name)
		}
	}
	for _, p := range ps {
		if byOf["200 "+p.Name] != 10 || p.Requests()-before[p.Name] != 10 {
			t.Errorf("%s: %d answers, %d requests received, want 10 (all: %v)", p.Name, byOf["200 "+p.Name], p.Requests()-before[p.Name], byOf)
		}
	}
	if st := poolStatus(t, l, "platform"); st.Balance != "roundrobin" || st.Serving != "primaries" || st.Requests != 42 {
		t.Errorf("/status: balance %q serving %q requests %d, want roundrobin, primaries, 42", st.Balance, st.Serving, st.Requests)
	}

	// platform2 fails its readiness checks but still answers requests: none may reach it.
	p2.SetLeaderCheckStatus(503)
	testkit.Eventually(t, "platform2 to be down", hang, func() bool { return !serverAvailable(l, "platform", p2.Addr) })
	before = requestCounts(ps)
	for i := 0; i < 6; i++ {
		mustServe(t, fmt.Sprintf("request %d with platform2 down", i+1), request(l, "GET", "/", ""), "")
	}
	if n := p2.Requests() - before[p2.Name]; n != 0 {
		t.Fatalf("platform2, not connected, received %d requests", n)
	}
	// The cycle goes on after the server chosen: platform1 and platform3 alternate.
	first := mustServe(t, "request", request(l, "GET", "/", ""), "")
	other := map[string]string{p1.Name: p3.Name, p3.Name: p1.Name}[first]
	for i := 0; i < 4; i++ {
		first, other = other, first
		mustServe(t, "alternating request", request(l, "GET", "/", ""), first)
	}

	// Back after rise passing checks: the three take turns again.
	p2.SetLeaderCheckStatus(200)
	testkit.Eventually(t, "platform2 to be up", hang, func() bool { return serverAvailable(l, "platform", p2.Addr) })
	seen := map[string]int{}
	for i := 0; i < 9; i++ {
		seen[mustServe(t, "request with platform2 back", request(l, "GET", "/", ""), "")]++
	}
	for _, p := range c.Platforms {
		if seen[p.Name] != 3 {
			t.Fatalf("after platform2 rose, 9 requests went %v, want 3 to each", seen)
		}
	}
}

// streamInBackground sends a POST whose chunked body streams: the bytes written to the returned pipe
// are sent as they come, and closing it ends the body.
func streamInBackground(l *LB, path string) (<-chan reply, *io.PipeWriter) {
	pr, pw := io.Pipe()
	ch := make(chan reply, 1)
	go func() {
		r := replyOf(testClient.Post("http://"+l.Addr()+path, "application/octet-stream", pr)) // no length: chunked
		pr.CloseWithError(r.err)
		ch <- r
	}()
	return ch, pw
}

func TestAServerPastItsWatermarkIsSkippedAndRejoinsWhenItsRequestsEnd(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		// hold sends the request that takes platform1 past its watermark, and returns its reply and
		// what ends it.
		hold func(t *testing.T, l *LB) (<-chan reply, func())
		// inFlight is platform1's request and body bytes in flight while it is held; hw and hwBytes are
		// the pool's watermarks /status shows.
		inFlight, inFlightBytes, hwBytes int64
		hw                               int
	}{{
		name:  "high_watermark",
		extra: "[pools.platform]\nhigh_watermark = 1\n",
		hold: func(t *testing.T, l *LB) (<-chan reply, func()) {
			return inBackground(l, "GET", "/slow?delay=1500ms", ""), func() {}
		},
		inFlight: 1, hw: 1,
	}, {
		name:  "high_watermark_bytes with a Content-Length",
		extra: "[pools.platform]\nhigh_watermark_bytes = 1000\n",
		hold: func(t *testing.T, l *LB) (<-chan reply, func()) {
			return inBackground(l, "POST", "/slow?delay=1500ms", strings.Repeat("b", 4000)), func() {}
		},
		inFlight: 1, inFlightBytes: 4000, hwBytes: 1000,
	}, {
		name:  "high_watermark_bytes with a streaming chunked body",
		extra: "[pools.platform]\nhigh_watermark_bytes = 1000\n",
		hold: func(t *testing.T, l *LB) (<-chan reply, func()) {
			ch, w := streamInBackground(l, "/upload")
			go w.Write([]byte(strings.Repeat("c", 4000))) //nolint:errcheck // the reply tells
			return ch, func() { w.Close() }
		},
		inFlight: 1, inFlightBytes: 4000, hwBytes: 1000,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startReadyCluster(t, 3)
			p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
			l, _ := startLB(t, balConfig(c.Platforms, nil, tc.extra))

			// The first request of the cycle goes to platform1 and stays there.
			slow, release := tc.hold(t, l)
			testkit.Eventually(t, "the held request to be in flight on platform1", hang, func() bool {
				ss := mustServerStatus(t, l, "platform", p1.Addr)
				return ss.InFlight == tc.inFlight && ss.InFlightBytes == tc.inFlightBytes && p1.Requests() == 1
			})

			// Quick requests skip platform1 while it is past its watermark; the cycle goes on.
			for i, want := range []*sim.Platform{p2, p3, p2, p3, p2, p3} {
				mustServe(t, fmt.Sprintf("quick request %d", i+1), request(l, "GET", "/quick", ""), want.Name)
			}
			st := poolStatus(t, l, "platform")
			ss := mustServerStatus(t, l, "platform", p1.Addr)
			if replied(slow) {
				t.Fatalf("the held request ended before the checks: the test cannot tell (%s)", <-slow)
			}
			if ss.Writable || !ss.Available || ss.InFlight != tc.inFlight || ss.InFlightBytes != tc.inFlightBytes {
				t.Errorf("/status: platform1 writable %v available %v in_flight %d in_flight_bytes %d while past its watermark, want false, true, %d, %d",
					ss.Writable, ss.Available, ss.InFlight, ss.InFlightBytes, tc.inFlight, tc.inFlightBytes)
			}
			if st.HighWatermark != tc.hw || st.HighWatermarkBytes != tc.hwBytes {
				t.Errorf("/status: high_watermark %d high_watermark_bytes %d, want %d and %d", st.HighWatermark, st.HighWatermarkBytes, tc.hw, tc.hwBytes)
			}
			for _, p := range []*sim.Platform{p2, p3} {
				if s := mustServerStatus(t, l, "platform", p.Addr); !s.Writable || s.InFlight != 0 {
					t.Errorf("/status: %s writable %v in_flight %d, want true and 0", p.Name, s.Writable, s.InFlight)
				}
			}
			wantMetrics(t, l,
				"fairlead_server_writable{"+platformLabels(p1.Addr, p1.Addr)+"} 0",
				"fairlead_server_writable{"+platformLabels(p2.Addr, p2.Addr)+"} 1")
			if n := p1.Requests(); n != 1 {
				t.Fatalf("platform1 received %d requests while past its watermark, want only the slow one", n)
			}

			// The held request ends: platform1 is writable again and takes its turn.
			release()
			r := awaitReply(t, slow)
			mustServe(t, "held request", r, p1.Name)
			if got := r.header.Get("X-Body-Bytes"); tc.inFlightBytes > 0 && got != strconv.FormatInt(tc.inFlightBytes, 10) {
				t.Errorf("platform1 read %s body bytes, want %d", got, tc.inFlightBytes)
			}
			if ss := mustServerStatus(t, l, "platform", p1.Addr); !ss.Writable || ss.InFlight != 0 || ss.InFlightBytes != 0 {
				t.Fatalf("/status after the held request: platform1 writable %v in_flight %d in_flight_bytes %d, want true, 0, 0",
					ss.Writable, ss.InFlight, ss.InFlightBytes)
			}
			for i, want := range []*sim.Platform{p1, p2, p3, p1} {
				mustServe(t, fmt.Sprintf("request %d after the held one", i+1), request(l, "GET", "/quick", ""), want.Name)
			}
		})
	}
}

func TestConcurrentRequestsNeverTakeAServerPastItsWatermark(t *testing.T) {
	c := startReadyCluster(t, 3)
	ps := c.Platforms
	l, _ := startLB(t, balConfig(ps, nil, "[pools.platform]\nhigh_watermark = 2\nqueue_timeout = \"5s\"\n"))

	// 24 requests of 200ms at once over 3 servers that take 2 each: 6 are served at a time, the
	// others wait for a slot. Sampled /status never shows more than 2 in flight to a server.
	wait := concurrentGets(t, l, "/Thingworx/Things?delay=200ms", 24)
	var byOf map[string]int
	done := make(chan struct{})
	go func() { byOf = wait(); close(done) }()
	maxInFlight, maxTotal, maxWaiting := int64(0), int64(0), int64(0)
	for sampling := true; sampling; {
		select {
		case <-done:
			sampling = false
		default:
		}
		st := poolStatus(t, l, "platform")
		total := int64(0)
		for _, ss := range st.Servers {
			maxInFlight = max(maxInFlight, ss.InFlight)
			total += ss.InFlight
		}
		maxTotal, maxWaiting = max(maxTotal, total), max(maxWaiting, st.Waiting)
		time.Sleep(time.Millisecond)
	}
	if maxInFlight > 2 {
		t.Errorf("/status showed %d requests in flight to one server, past its high_watermark (2)", maxInFlight)
	}
	if maxTotal != 6 || maxWaiting == 0 {
		t.Errorf("at most %d requests were seen in flight and %d waiting, want 6 (every slot taken) and some waiting", maxTotal, maxWaiting)
	}
	n := 0
	for _, p := range ps {
		n += byOf["200 "+p.Name]
		if byOf["200 "+p.Name] == 0 {
			t.Errorf("%s served none of the requests", p.Name)
		}
	}
	if n != 24 {
		t.Errorf("answers: %v, want 24 times 200", byOf)
	}
}

func TestEveryServerUnwritableOrDownGivesTheConfiguredStatusAfterQueueTimeoutAndAWaitingRequestTakesTheFirstSlotFreed(t *testing.T) {
	// f makes both servers unusable, each past its watermark with a slow request (or down, not ready
	// but still answering whatever reaches it), and checks that a third request waits queue_timeout
	// (300ms), then gets status, with a Retry-After or not, without reaching a server.
	f := func(name, extra string, down bool, status int, retryAfter bool) {
		t.Run(name, func(t *testing.T) {
			c := startReadyCluster(t, 2)
			l, _ := startLB(t, balConfig(c.Platforms, nil, "[pools.platform]\nqueue_timeout = \"300ms\"\n"+extra))
			var slow []<-chan reply
			for _, p := range c.Platforms {
				if down {
					p.SetLeaderCheckStatus(503)
					testkit.Eventually(t, p.Name+" to be down", hang, func() bool { return !serverAvailable(l, "platform", p.Addr) })
					continue
				}
				slow = append(slow, inBackground(l, "GET", "/slow?delay=1500ms", ""))
				testkit.Eventually(t, "the slow request on "+p.Name, hang, func() bool {
					return mustServerStatus(t, l, "platform", p.Addr).InFlight == 1 && p.Requests() == 1
				})
			}

			before := requestCounts(c.Platforms)
			start := time.Now()
			r := request(l, "GET", "/quick", "")
			waited := time.Since(start)
			for _, ch := range slow {
				if replied(ch) {
					t.Fatal("a slow request ended before the third one was answered: the test cannot tell")
				}
			}
			if got := r.header.Get("Retry-After"); r.err != nil || r.status != status || (got != "") != retryAfter {
				t.Fatalf("third request: got %s (Retry-After %q), want %d, with a Retry-After: %v", r, got, status, retryAfter)
			}
			if waited < 250*time.Millisecond {
				t.Errorf("answered %d after %s, want it to wait for queue_timeout (300ms) first", status, waited)
			}
			countsUnchanged(t, "the refused request", c.Platforms, before)
			if st := poolStatus(t, l, "platform"); st.Waiting != 0 {
				t.Errorf("/status: waiting %d, want 0", st.Waiting)
			}
			wantMetrics(t, l, fmt.Sprintf(`fairlead_pool_errors_total{pool="platform",code="%d"} 1`, status),
				`fairlead_pool_unavailable_total{pool="platform"} 1`)
			for i, ch := range slow {
				mustServe(t, "slow request", awaitReply(t, ch), c.Platforms[i].Name)
			}
		})
	}
	f("503 past the watermarks", "high_watermark = 1\n", false, 503, true)
	f("unavailable_status 500 past the watermarks", "high_watermark = 1\nunavailable_status = 500\n", false, 500, false)
	f("503 with every server down", "", true, 503, true)

	t.Run("a waiting request is served as soon as a slot frees", func(t *testing.T) {
		c := startReadyCluster(t, 2)
		p1, p2 := c.Platforms[0], c.Platforms[1]
		l, _ := startLB(t, balConfig(c.Platforms, nil, "[pools.platform]\nhigh_watermark = 1\nqueue_timeout = \"5s\"\n"))

		slow1 := inBackground(l, "GET", "/slow?delay=1s", "")
		testkit.Eventually(t, "the first slow request on platform1", hang, func() bool {
			return mustServerStatus(t, l, "platform", p1.Addr).InFlight == 1
		})
		slow2 := inBackground(l, "GET", "/slow?delay=2s", "")
		testkit.Eventually(t, "the second slow request on platform2", hang, func() bool {
			return mustServerStatus(t, l, "platform", p2.Addr).InFlight == 1
		})
		waiting := inBackground(l, "GET", "/quick", "")
		testkit.Eventually(t, "the third request to wait", hang, func() bool {
			if replied(waiting) {
				t.Fatalf("the third request was answered before it was seen waiting: %s", <-waiting)
			}
			return poolStatus(t, l, "platform").Waiting == 1
		})
		if replied(slow1) {
			t.Fatal("the first slow request ended before the third one waited: the test cannot tell")
		}
		r := awaitReply(t, waiting)
		if replied(slow2) {
			t.Fatal("the 2s request ended before the waiting one was served: the test cannot tell")
		}
		mustServe(t, "waiting request", r, p1.Name)
		mustServe(t, "first slow request", awaitReply(t, slow1), p1.Name)
		mustServe(t, "second slow request", awaitReply(t, slow2), p2.Name)
	})
}

func TestMultipartChunksStayOnTheirServerAndFailWith502WhenItIsNotConnectedOrNotWritable(t *testing.T) {
	c := startReadyCluster(t, 3)
	ps := c.Platforms
	p1, p2, p3 := ps[0], ps[1], ps[2]
	l, _ := startLB(t, balConfig(ps, nil, "[pools.platform]\nmultipart_header = \"X-Multipart-Id\"\nhigh_watermark = 1\n"))

	// Upload A: its first chunk is balanced as usual (platform1, the first of the cycle), its later
	// chunks follow it there, while requests without the header go on round robin.
	r := sendChunk(l, "upload-A", "/Thingworx/FileRepositories/upload", 1)
	home := mustServe(t, "chunk 1 of upload-A", r, p1.Name)
	if got, want := r.header.Get("X-Body-Bytes"), strconv.Itoa(len(fmt.Sprintf("upload-A part 1 %s", strings.Repeat("x", 100)))); got != want {
		t.Fatalf("platform1 read %s body bytes of the chunk, want %s", got, want)
	}
	for i, want := range []*sim.Platform{p2, p3, p1, p2, p3} {
		mustServe(t, fmt.Sprintf("plain request %d", i+1), request(l, "GET", "/Thingworx/Things", ""), want.Name)
		mustServe(t, fmt.Sprintf("chunk %d of upload-A", i+2), sendChunk(l, "upload-A", "/Thingworx/FileRepositories/upload", i+2), home)
	}

	// Different ids spread over the servers, each then staying on its own.
	homes := map[string]string{}
	for _, id := range []string{"upload-B", "upload-C", "upload-D"} {
		homes[id] = mustServe(t, "chunk 1 of "+id, sendChunk(l, id, "/upload", 1), "")
	}
	if homes["upload-B"] == homes["upload-C"] || homes["upload-C"] == homes["upload-D"] || homes["upload-B"] == homes["upload-D"] {
		t.Fatalf("three new ids went to %v, want three different servers", homes)
	}
	for n := 2; n <= 4; n++ {
		for _, id := range []string{"upload-B", "upload-C", "upload-D"} {
			mustServe(t, fmt.Sprintf("chunk %d of %s", n, id), sendChunk(l, id, "/upload", n), homes[id])
		}
	}
	// Every request reached exactly one server once: 6 chunks of A and 5 plain requests, 12 chunks of
	// B, C and D.
	total := int64(0)
	for _, p := range ps {
		total += p.Requests()
	}
	if total != 6+5+12 {
		t.Fatalf("the servers received %d requests, want 23", total)
	}
	st := poolStatus(t, l, "platform")
	if st.MultipartHeader != "X-Multipart-Id" || st.Pins != 4 {
		t.Fatalf("/status: multipart_header %q pins %d, want X-Multipart-Id and 4", st.MultipartHeader, st.Pins)
	}
	wantPins := map[string]int{p1.Addr: 1}
	for _, h := range homes {
		wantPins[c.Platform(h).Addr]++
	}
	for _, ss := range st.Servers {
		if ss.Pins != wantPins[ss.Addr] {
			t.Errorf("/status: %s holds %d pins, want %d", ss.Addr, ss.Pins, wantPins[ss.Addr])
		}
	}
	wantMetrics(t, l, `fairlead_pool_pins{pool="platform"} 4`,
		"fairlead_server_pins{"+platformLabels(p1.Addr, p1.Addr)+"} "+strconv.Itoa(wantPins[p1.Addr]))

	// platform1 fails its readiness checks (it still answers whatever reaches it): the next chunk of
	// upload-A fails with 502 and reaches no server at all.
	p1.SetLeaderCheckStatus(503)
	testkit.Eventually(t, "platform1 to be down", hang, func() bool { return !serverAvailable(l, "platform", p1.Addr) })
	before := requestCounts(ps)
	if r := sendChunk(l, "upload-A", "/upload", 7); r.err != nil || r.status != 502 {
		t.Fatalf("chunk 7 of upload-A with its server down: got %s, want 502", r)
	}
	countsUnchanged(t, "the chunk pinned to a server that is down", ps, before)
	if st := poolStatus(t, l, "platform"); st.PinFailures != 1 || st.Pins != 3 {
		t.Errorf("/status: pin_failures %d pins %d, want 1 and 3 (the pin of upload-A dropped)", st.PinFailures, st.Pins)
	}
	wantMetrics(t, l, `fairlead_pool_pin_failures_total{pool="platform"} 1`)
	// The pin was dropped: the next chunk is placed anew, on a connected server, and stays there.
	newHome := mustServe(t, "chunk 8 of upload-A", sendChunk(l, "upload-A", "/upload", 8), "")
	if newHome == p1.Name {
		t.Fatalf("chunk 8 of upload-A went to platform1, which is down")
	}
	mustServe(t, "chunk 9 of upload-A", sendChunk(l, "upload-A", "/upload", 9), newHome)

	// Upload E: a chunk whose server is past its watermark (a slow chunk of the same upload is in
	// flight there) fails with 502 at once, without waiting for the slow one, and reaches no server.
	eHome := mustServe(t, "chunk 1 of upload-E", sendChunk(l, "upload-E", "/upload", 1), "")
	eServer := c.Platform(eHome)
	eBefore := eServer.Requests()
	slow := make(chan reply, 1)
	go func() { slow <- sendChunk(l, "upload-E", "/upload?delay=1500ms", 2) }()
	testkit.Eventually(t, "the slow chunk of upload-E in flight", hang, func() bool {
		return mustServerStatus(t, l, "platform", eServer.Addr).InFlight == 1 && eServer.Requests() == eBefore+1
	})
	before = requestCounts(ps)
	if r := sendChunk(l, "upload-E", "/upload", 3); r.err != nil || r.status != 502 {
		t.Fatalf("chunk 3 of upload-E with its server past its watermark: got %s, want 502", r)
	}
	if replied(slow) {
		t.Fatal("the slow chunk ended before the 502: the test cannot tell")
	}
	countsUnchanged(t, "the chunk pinned to a server past its watermark", ps, before)
	// A plain request meanwhile skips both platform1 (down) and upload-E's server (past its watermark).
	for _, p := range ps {
		if p != p1 && p != eServer {
			mustServe(t, "plain request", request(l, "GET", "/", ""), p.Name)
		}
	}
	if st := poolStatus(t, l, "platform"); st.PinFailures != 2 {
		t.Errorf("/status: pin_failures %d, want 2", st.PinFailures)
	}
	mustServe(t, "slow chunk 2 of upload-E", awaitReply(t, slow), eHome)
	mustServe(t, "chunk 4 of upload-E, placed anew", sendChunk(l, "upload-E", "/upload", 4), "")
}

func TestMultipartPinsExpireAfterTheirTTLAndTheLongestUnusedGoFirst(t *testing.T) {
	c := startReadyCluster(t, 3)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	l, _ := startLB(t, balConfig(c.Platforms, nil,
		"[pools.platform]\nmultipart_header = \"X-Multipart-Id\"\nmultipart_ttl = \"1s\"\nmultipart_max_pins = 2\n"))

	mustServe(t, "a#1", sendChunk(l, "a", "/", 1), p1.Name)
	mustServe(t, "b#1", sendChunk(l, "b", "/", 1), p2.Name)
	mustServe(t, "a#2", sendChunk(l, "a", "/", 2), p1.Name) // b is now the longest unused
	mustServe(t, "c#1", sendChunk(l, "c", "/", 1), p3.Name) // a third pin: b goes
	if n := poolStatus(t, l, "platform").Pins; n != 2 {
		t.Fatalf("/status: %d pins, want multipart_max_pins (2)", n)
	}
	// b is placed anew by the cycle (platform1 is next), not sent to platform2.
	mustServe(t, "b#2 after its pin was evicted", sendChunk(l, "b", "/", 2), p1.Name)
	mustServe(t, "c#2 within its TTL", sendChunk(l, "c", "/", 2), p3.Name)

	// Unused for longer than multipart_ttl, c's pin is gone: placed anew (platform2 is next).
	time.Sleep(1200 * time.Millisecond)
	mustServe(t, "c#3 after its TTL", sendChunk(l, "c", "/", 3), p2.Name)
	mustServe(t, "c#4", sendChunk(l, "c", "/", 4), p2.Name)
}

func TestTheCycleAndThePinsSurviveAReloadAndAChunkPinnedToARemovedServerFailsWith502(t *testing.T) {
	c := startReadyCluster(t, 3)
	ps := c.Platforms
	p1, p2, p3 := ps[0], ps[1], ps[2]
	const mp = "[pools.platform]\nmultipart_header = \"X-Multipart-Id\"\n"
	l, _ := startLB(t, balConfig(ps, nil, mp))

	mustServe(t, "plain request 1", request(l, "GET", "/", ""), p1.Name)
	mustServe(t, "plain request 2", request(l, "GET", "/", ""), p2.Name)
	mustServe(t, "x#1", sendChunk(l, "x", "/upload", 1), p3.Name)
	mustServe(t, "y#1", sendChunk(l, "y", "/upload", 1), p1.Name)

	// A reload that keeps the servers (a new watermark) keeps the cycle where it was and the pins.
	reloadWith(t, l, balConfig(ps, nil, mp+"high_watermark = 5\n"))
	if st := poolStatus(t, l, "platform"); st.HighWatermark != 5 || st.Pins != 2 {
		t.Fatalf("/status after the reload: high_watermark %d pins %d, want 5 and 2", st.HighWatermark, st.Pins)
	}
	mustServe(t, "plain request after the reload", request(l, "GET", "/", ""), p2.Name)
	mustServe(t, "x#2 after the reload", sendChunk(l, "x", "/upload", 2), p3.Name)
	mustServe(t, "y#2 after the reload", sendChunk(l, "y", "/upload", 2), p1.Name)

	// A reload removes platform3: the next chunk of x, pinned there, fails with 502 and reaches no
	// server (the others have not seen its first parts); the chunk after it is placed anew.
	reloadWith(t, l, balConfig([]*sim.Platform{p1, p2}, nil, mp))
	before := requestCounts(ps)
	if r := sendChunk(l, "x", "/upload", 3); r.err != nil || r.status != 502 {
		t.Errorf("x#3, pinned to the removed platform3: got %s, want 502", r)
	}
	countsUnchanged(t, "x#3, pinned to the removed platform3", ps, before)
	if by := mustServe(t, "x#4", sendChunk(l, "x", "/upload", 4), ""); by == p3.Name {
		t.Fatalf("x#4 went to the removed platform3")
	}
	mustServe(t, "y#3 after platform3 left", sendChunk(l, "y", "/upload", 3), p1.Name)
}

func TestBackupsTakeOverWhenEveryPrimaryFailsAndHandBackWithinTheFailbackInterval(t *testing.T) {
	c := startReadyCluster(t, 4)
	p1, p2, p3, p4 := c.Platforms[0], c.Platforms[1], c.Platforms[2], c.Platforms[3]
	onBackups := func() int64 { return p3.Requests() + p4.Requests() }
	// fall = 1: one failed probe takes a server down. fast_interval is far longer than the test: while
	// a primary is down only failback_interval (150ms) brings its next probe.
	l, _ := startLB(t, balConfig([]*sim.Platform{p1, p2}, []*sim.Platform{p3, p4}, `
[pools.platform]
failback_interval = "150ms"
[pools.platform.check]
fast_interval = "30s"
fall = 1
rise = 2
`))
	st := poolStatus(t, l, "platform")
	if st.Serving != "primaries" || st.Failovers != 0 || st.Failbacks != 0 {
		t.Fatalf("/status at start: serving %q failovers %d failbacks %d, want primaries, 0, 0", st.Serving, st.Failovers, st.Failbacks)
	}
	for _, ss := range st.Servers {
		if want := map[string]string{p1.Addr: "primary", p2.Addr: "primary", p3.Addr: "backup", p4.Addr: "backup"}[ss.Addr]; ss.Tier != want || !ss.Available {
			t.Fatalf("/status: %s tier %q available %v, want %s and available", ss.Addr, ss.Tier, ss.Available, want)
		}
	}

	// While a primary is up, no request reaches the backups, although they are up.
	for i := 0; i < 10; i++ {
		mustServe(t, "request", request(l, "GET", "/", ""), []*sim.Platform{p1, p2}[i%2].Name)
	}
	mustSetState(t, p1, sim.Dead)
	testkit.Eventually(t, "platform1 to be down", hang, func() bool { return !serverAvailable(l, "platform", p1.Addr) })
	for i := 0; i < 4; i++ {
		mustServe(t, "request with one primary left", request(l, "GET", "/", ""), p2.Name)
	}
	if n := onBackups(); n != 0 {
		t.Fatalf("the backups received %d requests while a primary was up", n)
	}
	if st := poolStatus(t, l, "platform"); st.Serving != "primaries" || st.Failovers != 0 {
		t.Fatalf("/status with one primary up: serving %q failovers %d, want primaries and 0", st.Serving, st.Failovers)
	}

	// Both primaries fail: the backups serve, round robin among themselves.
	mustSetState(t, p2, sim.Dead)
	testkit.Eventually(t, "the backups to serve", hang, func() bool { return poolStatus(t, l, "platform").Serving == "backups" })
	for i := 0; i < 6; i++ {
		mustServe(t, "request on the backups", request(l, "GET", "/", ""), []*sim.Platform{p3, p4}[i%2].Name)
	}
	if st := poolStatus(t, l, "platform"); st.Failovers != 1 || st.Failbacks != 0 {
		t.Fatalf("/status after the failover: failovers %d failbacks %d, want 1 and 0", st.Failovers, st.Failbacks)
	}
	wantMetrics(t, l, `fairlead_events_total{kind="failover"} 1`, `fairlead_events_total{kind="failback"} 0`,
		`fairlead_pool_serving_backups{pool="platform"} 1`, `fairlead_pool_failovers_total{pool="platform"} 1`,
		`fairlead_server_backup{`+platformLabels(p3.Addr, p3.Addr)+`} 1`)

	// platform1 comes back: it is probed every failback_interval (fast_interval would wait 30s) and
	// takes the traffic back once it passed rise (2) probes; the backups get nothing more.
	back := time.Now()
	mustSetState(t, p1, sim.Backup)
	testkit.Eventually(t, "the primaries to serve again", 10*time.Second, func() bool {
		return poolStatus(t, l, "platform").Serving == "primaries"
	})
	if passed := probesSince(p1, back, true); passed < 2 {
		t.Errorf("platform1 took the traffic back after %d passing probes, want rise (2)", passed)
	}
	before := onBackups()
	for i := 0; i < 6; i++ {
		mustServe(t, "request after the failback", request(l, "GET", "/", ""), p1.Name)
	}
	if n := onBackups() - before; n != 0 {
		t.Fatalf("the backups received %d requests after the failback", n)
	}
	if st := poolStatus(t, l, "platform"); st.Failovers != 1 || st.Failbacks != 1 {
		t.Fatalf("/status after the failback: failovers %d failbacks %d, want 1 and 1", st.Failovers, st.Failbacks)
	}
	wantMetrics(t, l, `fairlead_events_total{kind="failover"} 1`, `fairlead_events_total{kind="failback"} 1`,
		`fairlead_pool_serving_backups{pool="platform"} 0`, `fairlead_pool_failbacks_total{pool="platform"} 1`)
}

func TestALeaderPoolElectsABackupOnlyWhenNoPrimaryAnswers200(t *testing.T) {
	c := startCluster(t, 3, 0)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	// platform1 leads, platform2 answers 503, the backup platform3 answers 200 from the start.
	p3.SetLeaderCheckStatus(200)
	l, _ := startLB(t, platformConfig(c, fmt.Sprintf("servers = [%q, %q]\nbackups = [%q]\nfailback_interval = \"150ms\"\n", p1.Addr, p2.Addr, p3.Addr), ""))
	leader := func() string { return poolStatus(t, l, "platform").Leader }
	if got := leader(); got != p1.Addr {
		t.Fatalf("leader at start is %q, want the primary platform1 (%s), not the backup", got, p1.Addr)
	}
	mustServe(t, "request at start", request(l, "GET", "/", ""), p1.Name)

	// platform2 answers 200 too, then platform1 steps down: platform2 becomes leader, although the
	// backup's run of 200 answers is longer.
	since := time.Now()
	mustSetState(t, p2, sim.Leader)
	testkit.Eventually(t, "platform2 to answer 200", hang, func() bool { return probesSince(p2, since, true) > 0 })
	p1.SetLeaderCheckStatus(503)
	testkit.Eventually(t, "platform1 to lose the lead", hang, func() bool { return leader() != p1.Addr })
	if got := leader(); got != p2.Addr {
		t.Fatalf("leader after platform1 stepped down is %q, want the primary platform2 (%s)", got, p2.Addr)
	}
	mustServe(t, "request after platform1 stepped down", request(l, "GET", "/", ""), p2.Name)
	if st := poolStatus(t, l, "platform"); st.Serving != "primaries" || st.Failovers != 0 {
		t.Fatalf("/status: serving %q failovers %d, want primaries and 0", st.Serving, st.Failovers)
	}
	if n := p3.Requests(); n != 0 {
		t.Fatalf("the backup received %d requests while a primary answered 200", n)
	}

	// No primary answers 200 any more; the backup does: it becomes leader.
	p2.SetLeaderCheckStatus(503)
	testkit.Eventually(t, "the backup to lead", hang, func() bool { return leader() == p3.Addr })
	mustServe(t, "request on the backup", request(l, "GET", "/", ""), p3.Name)
	if st := poolStatus(t, l, "platform"); st.Serving != "backups" || st.Failovers != 1 {
		t.Fatalf("/status with the backup leading: serving %q failovers %d, want backups and 1", st.Serving, st.Failovers)
	}

	// platform1 answers 200 again and the backup steps down: platform1 leads, traffic is back.
	since = time.Now()
	p1.SetLeaderCheckStatus(0) // platform1 is still in state Leader: 200
	testkit.Eventually(t, "platform1 to answer 200", hang, func() bool { return probesSince(p1, since, true) > 0 })
	p3.SetLeaderCheckStatus(503)
	testkit.Eventually(t, "platform1 to lead again", hang, func() bool { return leader() == p1.Addr })
	mustServe(t, "request after the failback", request(l, "GET", "/", ""), p1.Name)
	testkit.Eventually(t, "the primaries to serve", hang, func() bool { return poolStatus(t, l, "platform").Serving == "primaries" })
	if st := poolStatus(t, l, "platform"); st.Failovers != 1 || st.Failbacks != 1 {
		t.Fatalf("/status after the failback: failovers %d failbacks %d, want 1 and 1", st.Failovers, st.Failbacks)
	}
}

func TestFailbackCloseTunnelsMovesTheBackupsTunnelsBackToThePrimaries(t *testing.T) {
	for _, closeTunnels := range []bool{true, false} {
		t.Run("failback_close_tunnels="+strconv.FormatBool(closeTunnels), func(t *testing.T) {
			c := startCluster(t, 2, 3)
			cx1, cx2, cx3 := c.Connections[0], c.Connections[1], c.Connections[2]
			extra := fmt.Sprintf("[pools.cxserver]\nservers = [%q, %q]\nbackups = [%q]\nfailback_interval = \"100ms\"\n", cx1.Addr, cx2.Addr, cx3.Addr)
			if closeTunnels {
				extra += "failback_close_tunnels = true\nfailback_close_spread = \"600ms\"\n"
			}
			l, logs := startLB(t, cxConfig(c, extra))
			cxStatus := func() admin.PoolStatus { return poolStatus(t, l, "cxserver") }

			// Six devices on the primaries.
			const n = 6
			var conns []*websocket.Conn
			for i := 0; i < n; i++ {
				conn, by := dialAsset(t, l, fmt.Sprint("device-", i))
				if by != cx1.Name && by != cx2.Name {
					t.Fatalf("device-%d landed on %s while the primaries are up", i, by)
				}
				conns = append(conns, conn)
			}

			// The primaries die: the devices reconnect to the backup.
			cx1.Kill() //nolint:errcheck
			cx2.Kill() //nolint:errcheck
			for _, conn := range conns {
				mustClose(t, conn, "tunnel to a killed primary")
			}
			testkit.Eventually(t, "the backup to serve", hang, func() bool { return cxStatus().Serving == "backups" })
			conns = conns[:0]
			for i := 0; i < n; i++ {
				conns = append(conns, dialOn(t, l, fmt.Sprint("device-", i), cx3.Name))
				mustEcho(t, conns[i], "on the backup")
			}

			// cx1 comes back.
			if err := cx1.Restart(); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the primaries to serve again", hang, func() bool {
				st := cxStatus()
				return st.Serving == "primaries" && st.Failbacks == 1
			})
			if !closeTunnels {
				// The tunnels on the backup stay; new tunnels go to the primary.
				time.Sleep(500 * time.Millisecond)
				for i, conn := range conns {
					mustEcho(t, conn, fmt.Sprint("still on the backup ", i))
				}
				if got := cx3.OpenTunnels(); got != n {
					t.Fatalf("the backup has %d open tunnels, want %d", got, n)
				}
				mustLand(t, l, "a new device after the failback", "new-device", cx1.Name)
				return
			}

			// Every tunnel on the backup closes, spread over failback_close_spread; the devices
			// reconnect to the primary.
			closedAt := opCloseTimes(t, conns)
			// The last close is due 5/6 of the spread (500ms) after the first.
			if span := timeSpan(closedAt); span < 250*time.Millisecond {
				t.Errorf("the %d tunnels closed within %s, want them spread over failback_close_spread (600ms)", n, span)
			}
			testkit.Eventually(t, "the backup's tunnels to close on its side", hang, func() bool { return cx3.OpenTunnels() == 0 })
			for i := 0; i < n; i++ {
				mustEcho(t, dialOn(t, l, fmt.Sprint("device-", i), cx1.Name), "back on the primary")
			}
			if !strings.Contains(logs.all(), "moving 6 tunnels from the backups back to the primaries") {
				t.Errorf("no log line about moving the tunnels back")
			}
		})
	}
}

func TestDisplayNamesShowInStatusMetricsAndLogs(t *testing.T) {
	c := startReadyCluster(t, 2)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	files := balConfig(c.Platforms, nil, fmt.Sprintf("[pools.platform.names]\n%q = \"platform-a\"\n", p1.Addr))
	l, logs := startLB(t, files)
	mustServe(t, "request 1", request(l, "GET", "/", ""), p1.Name)
	mustServe(t, "request 2", request(l, "GET", "/", ""), p2.Name)

	if ss := mustServerStatus(t, l, "platform", p1.Addr); ss.Name != "platform-a" {
		t.Errorf("/status: the name of %s is %q, want platform-a", p1.Addr, ss.Name)
	}
	if ss := mustServerStatus(t, l, "platform", p2.Addr); ss.Name != p2.Addr {
		t.Errorf("/status: the name of the unnamed %s is %q, want its address", p2.Addr, ss.Name)
	}
	wantMetrics(t, l,
		"fairlead_server_requests_total{"+platformLabels(p1.Addr, "platform-a")+"} 1",
		"fairlead_server_requests_total{"+platformLabels(p2.Addr, p2.Addr)+"} 1",
		"fairlead_server_up{"+platformLabels(p1.Addr, "platform-a")+"} 1")

	// GET /status shows it too.
	_, body := testkit.Do(t, testClient, "GET", "http://"+l.AdminAddr()+"/status", nil)
	var doc admin.Status
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Pools) != 1 || len(doc.Pools[0].Servers) != 2 || doc.Pools[0].Servers[0].Name != "platform-a" ||
		doc.Pools[0].Servers[1].Name != p2.Addr {
		t.Errorf("GET /status: %+v (%v), want platform-a and %s as the names", doc, err, p2.Addr)
	}

	// A reload renames it: the server keeps its counters under its new name.
	reloadWith(t, l, balConfig(c.Platforms, nil, fmt.Sprintf("[pools.platform.names]\n%q = \"platform-b\"\n", p1.Addr)))
	if ss := mustServerStatus(t, l, "platform", p1.Addr); ss.Name != "platform-b" || ss.Requests != 1 {
		t.Errorf("/status after the rename: name %q requests %d, want platform-b and 1", ss.Name, ss.Requests)
	}
	wantMetrics(t, l, "fairlead_server_requests_total{"+platformLabels(p1.Addr, "platform-b")+"} 1")

	// Logs name the server by its display name, with its address.
	mustSetState(t, p1, sim.Dead)
	testkit.Eventually(t, "platform1 to be down", hang, func() bool { return !serverAvailable(l, "platform", p1.Addr) })
	testkit.Eventually(t, "the log line", hang, func() bool {
		return strings.Contains(logs.all(), "platform-b ("+p1.Addr+"): server down")
	})
}
