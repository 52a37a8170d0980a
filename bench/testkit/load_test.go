package testkit

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// loadServer is a real server on 127.0.0.1 for a Load: GET answers "ok" (or the status in ?status=),
// POST echoes the body length in X-Body-Bytes, /slow holds its answer a second, /ws echoes a WebSocket
// until the test closes it (closeTunnels). Every answer says X-Served-By: s1.
type loadServer struct {
	addr  string
	hits  atomic.Int64
	mu    sync.Mutex
	conns []*websocket.Conn
}

// closeTunnels closes the tunnels open now.
func (s *loadServer) closeTunnels() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

func startLoadServer(t *testing.T) *loadServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &loadServer{addr: ln.Addr().String()}
	up := websocket.Upgrader{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("X-Served-By", "s1")
		switch {
		case r.URL.Path == "/ws":
			c, err := up.Upgrade(w, r, http.Header{"X-Served-By": {"s1"}})
			if err != nil {
				return
			}
			defer c.Close()
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			for {
				mt, m, err := c.ReadMessage()
				if err != nil || c.WriteMessage(mt, m) != nil {
					return
				}
			}
		case r.URL.Path == "/slow":
			time.Sleep(time.Second)
		case r.Method == http.MethodPost:
			n, _ := io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Body-Bytes", strconv.FormatInt(n, 10))
		case r.URL.Query().Get("status") != "":
			code, _ := strconv.Atoi(r.URL.Query().Get("status"))
			w.WriteHeader(code)
			io.WriteString(w, "no server available") //nolint:errcheck
			return
		}
		io.WriteString(w, "ok") //nolint:errcheck
	})}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return s
}

func TestLoadPacesItsRequestsAndRecordsEachAsASample(t *testing.T) {
	f := func(raw bool) {
		t.Helper()
		s := startLoadServer(t)
		l := StartLoad(LoadOptions{Addr: s.addr, Workers: 4, Rate: 100, Raw: raw, Timeout: 5 * time.Second,
			Request: func(w, n int) Request {
				if n%4 == 0 {
					return Request{Method: http.MethodPost, Path: "/post", Body: []byte("12345"), ID: "p" + strconv.Itoa(w*1000+n),
						Check: func(a Answer) error {
							if a.Header("X-Body-Bytes") != "5" {
								return io.ErrUnexpectedEOF
							}
							return nil
						}}
				}
				if n%5 == 0 {
					return Request{Method: http.MethodGet, Path: "/x?status=503"}
				}
				return Request{Method: http.MethodGet, Path: "/x"}
			}})
		Eventually(t, "50 samples", 10*time.Second, func() bool { return len(l.Samples()) >= 50 })
		ss, unfinished := l.Stop(5 * time.Second)
		if unfinished != 0 {
			t.Errorf("raw %v: %d unfinished", raw, unfinished)
		}
		// Paced at 100/s, half a second of load is about 50 requests: far fewer than a closed loop.
		if el := ss[len(ss)-1].End.Sub(l.Started()); len(ss) > 40+int(el/(5*time.Millisecond)) {
			t.Errorf("raw %v: %d samples in %s: not paced", raw, len(ss), el)
		}
		snap := l.Snapshot()
		var posts, failed int
		for _, x := range ss {
			switch {
			case x.Method == http.MethodPost:
				posts++
				if !x.OK() || x.ID == "" || x.ServedBy != "s1" {
					t.Errorf("raw %v: POST %s", raw, x)
				}
			case strings.Contains(x.Path, "503"):
				failed++
				if x.OK() || x.Kind() != "status_503" || x.Body != "no server available" || x.Reason() != "GET 503" {
					t.Errorf("raw %v: a 503 recorded as %s (kind %q)", raw, x, x.Kind())
				}
			case !x.OK():
				t.Errorf("raw %v: %s", raw, x)
			}
		}
		if posts == 0 || failed == 0 || snap.Requests != uint64(len(ss)) || snap.Failed != uint64(failed) ||
			snap.OKByMethod["POST"] != uint64(posts) {
			t.Errorf("raw %v: %d posts, %d failed, snapshot %+v of %d samples", raw, posts, failed, snap, len(ss))
		}
		if errs := l.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "× GET 503 (first: GET /x?status=503: 503") {
			t.Errorf("raw %v: errors %q", raw, errs)
		}
	}
	f(false)
	f(true)
}

func TestLoadInAClosedLoopSendsAsFastAsAnswersCome(t *testing.T) {
	s := startLoadServer(t)
	l := StartLoad(LoadOptions{Addr: s.addr, Workers: 2, Raw: true, Discard: true, Duration: 300 * time.Millisecond,
		Request: func(int, int) Request { return Request{Method: http.MethodGet, Path: "/"} }})
	<-l.Done()
	ss, _ := l.Stop(time.Second)
	snap, st := l.Snapshot(), l.State()
	if len(ss) != 0 || snap.OK < 100 || st.Hist.Quantile(0.5) == 0 {
		t.Errorf("%d samples kept, %d answered, p50 %s", len(ss), snap.OK, st.Hist.Quantile(0.5))
	}
}

func TestLoadStopCutsShortTheRequestsStillHeldAfterItsGrace(t *testing.T) {
	for _, raw := range []bool{false, true} {
		s := startLoadServer(t)
		l := StartLoad(LoadOptions{Addr: s.addr, Workers: 3, Raw: raw,
			Request: func(int, int) Request { return Request{Method: http.MethodGet, Path: "/slow"} }})
		Eventually(t, "the requests to arrive", 5*time.Second, func() bool { return s.hits.Load() >= 3 })
		start := time.Now()
		ss, unfinished := l.Stop(50 * time.Millisecond)
		if len(ss) != 0 || unfinished != 3 || time.Since(start) > 900*time.Millisecond {
			t.Errorf("raw %v: %d samples, %d unfinished, stopped in %s", raw, len(ss), unfinished, time.Since(start))
		}
	}
}

func TestLoadOpenSendsEverySlotOnItsOwn(t *testing.T) {
	s := startLoadServer(t)
	l := StartLoad(LoadOptions{Addr: s.addr, Open: true, Rate: 200,
		Request: func(int, int) Request { return Request{Method: http.MethodGet, Path: "/slow"} }})
	// Each answer takes a second; a closed loop would have sent one request by now.
	Eventually(t, "many requests in flight", 5*time.Second, func() bool { return s.hits.Load() >= 50 })
	l.Mark("now")
	l.Stop(2 * time.Second)
	if st := l.State(); len(st.Marks) != 1 || st.Marks[0].Name != "now" {
		t.Errorf("marks %+v", st.Marks)
	}
}

func TestLoadHoldsTunnelsAndReopensThemWhenClosed(t *testing.T) {
	s := startLoadServer(t)
	l := StartLoad(LoadOptions{Addr: s.addr, Open: true, Rate: 1, Timeout: 2 * time.Second, NearMark: time.Minute,
		Request: func(int, int) Request { return Request{Method: http.MethodGet, Path: "/"} },
		Tunnels: TunnelOptions{Count: 5, Path: func(int) string { return "/ws" }}})
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the tunnels did not all open")
	}
	l.Mark("close")
	s.closeTunnels()
	Eventually(t, "every tunnel closed and reopened", 10*time.Second, func() bool {
		st := l.State()
		for _, tn := range st.Tunnels {
			if len(tn.Closes) == 0 || len(tn.Connects) < 2 || !tn.Open {
				return false
			}
		}
		return true
	})
	l.Stop(time.Second)
	st := l.State()
	for _, tn := range st.Tunnels {
		if tn.First != "s1" || tn.Last != "s1" || !strings.HasPrefix(tn.Asset, "asset-00") {
			t.Errorf("tunnel %+v", tn)
		}
	}
	if snap := l.Snapshot(); snap.Tunnels < 10 || snap.Open != 0 {
		t.Errorf("snapshot %+v", snap)
	}
}

func TestLoadCyclesTunnelsThroughTheirEchoes(t *testing.T) {
	s := startLoadServer(t)
	l := StartLoad(LoadOptions{Addr: s.addr, Open: true, Rate: 1, Timeout: 2 * time.Second,
		Request: func(int, int) Request { return Request{Method: http.MethodGet, Path: "/"} },
		Tunnels: TunnelOptions{Count: 3, Path: func(int) string { return "/ws" }, Ramp: 10 * time.Millisecond,
			Echoes: func() int { return 2 }, Message: func() []byte { return []byte("hello") },
			Drop: func() bool { return true }}})
	Eventually(t, "tunnels cycled", 10*time.Second, func() bool { return l.Snapshot().Tunnels >= 9 })
	l.Stop(time.Second)
	if snap := l.Snapshot(); snap.Echoes < 12 || snap.Broken != 0 || snap.DialFails != 0 {
		t.Errorf("snapshot %+v, errors %q", snap, l.Errors())
	}
}

func TestLoadCountsFailedDialsAndFailuresNearAMark(t *testing.T) {
	addr := Addr(t) // nothing listens
	l := StartLoad(LoadOptions{Addr: addr, Rate: 50, NearMark: time.Minute,
		Request: func(int, int) Request { return Request{Method: http.MethodGet, Path: "/"} },
		Tunnels: TunnelOptions{Count: 1, Redial: func() time.Duration { return 10 * time.Millisecond }}})
	l.Mark("down")
	Eventually(t, "failures", 5*time.Second, func() bool { s := l.Snapshot(); return s.Failed >= 3 && s.DialFails >= 3 })
	ss, _ := l.Stop(time.Second)
	if ss[0].Kind() != "refused" || ss[0].Reason() != "GET failed" {
		t.Errorf("a refused connection recorded as %q, %q", ss[0].Kind(), ss[0].Reason())
	}
	// The first failures may come before the mark.
	if snap := l.Snapshot(); snap.NearMark < 3 || snap.NearMark > snap.Errors() {
		t.Errorf("snapshot %+v: the failures after the mark came within a minute of it", snap)
	}
	if st := l.State(); st.Tunnels[0].DialFails == 0 {
		t.Errorf("tunnel %+v", st.Tunnels[0])
	}
}

func TestHistQuantiles(t *testing.T) {
	var h Hist
	for i := 1; i <= 100; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	if q := h.Quantile(0.99); q < 97*time.Millisecond || q > 102*time.Millisecond {
		t.Errorf("p99 = %v", q)
	}
	if q := h.Quantile(0.5); q < 49*time.Millisecond || q > 52*time.Millisecond {
		t.Errorf("p50 = %v", q)
	}
}
