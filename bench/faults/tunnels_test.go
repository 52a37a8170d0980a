package faults

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// WebSocket tunnels through fairlead, as edge devices open them: one per asset key (X-Asset-Id) on the
// ThingWorx WebSocket paths, placed by the sticky connection-server pool.

// wsPaths are the ThingWorx WebSocket paths fairlead's websocket route matches; devices use them in turn.
var wsPaths = []string{"/Thingworx/WS", "/Thingworx/WSTunnelServer", "/Thingworx/WSTunnelClient", "/Thingworx/VWS"}

// tunnel is one device's WebSocket through fairlead.
type tunnel struct {
	key  string
	path string // one of wsPaths

	mu       sync.Mutex
	conn     *websocket.Conn
	server   string // the connection server of the current connection (X-Served-By of its 101)
	servers  []string
	closedAt []time.Time // when the other side closed it
}

func (tn *tunnel) current() (*websocket.Conn, string) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.conn, tn.server
}

// tunnels is a set of devices. With watch, each device reads its tunnel in a goroutine and, when
// fairlead closes it, reconnects at once (as devices do) and checks that echo works again.
type tunnels struct {
	addr  string
	watch bool
	list  []*tunnel

	closing      atomic.Bool
	wg           sync.WaitGroup
	open         atomic.Int64 // connected and echoed
	reconnects   atomic.Int64
	echoFailures atomic.Int64
	lastConnect  atomic.Int64 // UnixNano of the latest (re)connection
}

var wsDialer = websocket.Dialer{HandshakeTimeout: 5 * time.Second, Proxy: nil}

// assetKeys returns n asset ids with a prefix.
func assetKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return keys
}

// openTunnels connects one tunnel per key through fairlead at addr (64 handshakes at a time) and
// waits until all are open and echoed; t.Cleanup closes them.
func openTunnels(t *testing.T, addr string, keys []string, watch bool) *tunnels {
	t.Helper()
	ts := &tunnels{addr: addr, watch: watch}
	t.Cleanup(ts.closeAll)
	sem := make(chan struct{}, 64)
	errs := make(chan error, len(keys))
	var dials sync.WaitGroup
	for i, k := range keys {
		tn := &tunnel{key: k, path: wsPaths[i%len(wsPaths)]}
		ts.list = append(ts.list, tn)
		dials.Add(1)
		sem <- struct{}{}
		go func() {
			defer dials.Done()
			defer func() { <-sem }()
			if err := ts.connect(tn, 0); err != nil {
				errs <- err
				return
			}
			if watch {
				ts.wg.Add(1)
				go ts.run(tn)
			}
		}()
	}
	dials.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("opening %d tunnels: %v", len(keys), err)
	}
	return ts
}

// connect opens tn's tunnel and checks one echo; it retries for up to retryFor (a device reconnecting).
func (ts *tunnels) connect(tn *tunnel, retryFor time.Duration) error {
	deadline := time.Now().Add(retryFor)
	for {
		conn, resp, err := wsDialer.Dial("ws://"+ts.addr+tn.path, http.Header{"X-Asset-Id": {tn.key}})
		if err == nil {
			server := resp.Header.Get("X-Served-By")
			if err = echo(conn, tn.key); err == nil {
				tn.mu.Lock()
				tn.conn, tn.server = conn, server
				tn.servers = append(tn.servers, server)
				tn.mu.Unlock()
				ts.open.Add(1)
				ts.lastConnect.Store(time.Now().UnixNano())
				if ts.closing.Load() {
					conn.Close() // closeAll may have looked before this connection was stored
				}
				return nil
			}
			ts.echoFailures.Add(1)
			conn.Close()
		}
		if ts.closing.Load() || time.Now().After(deadline) {
			return fmt.Errorf("tunnel %s: %w", tn.key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run reads tn until fairlead closes it, then reconnects, until the set is closed.
func (ts *tunnels) run(tn *tunnel) {
	defer ts.wg.Done()
	for {
		conn, _ := tn.current()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				break
			}
		}
		ts.open.Add(-1)
		if ts.closing.Load() {
			return
		}
		tn.mu.Lock()
		tn.closedAt = append(tn.closedAt, time.Now())
		tn.mu.Unlock()
		conn.Close()
		if ts.connect(tn, 20*time.Second) != nil {
			return // counted: open stays short of the set
		}
		ts.reconnects.Add(1)
	}
}

// echo sends one message and expects it back.
func echo(conn *websocket.Conn, msg string) error {
	_ = conn.NetConn().SetDeadline(time.Now().Add(5 * time.Second))
	defer conn.NetConn().SetDeadline(time.Time{}) //nolint:errcheck
	if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		return err
	}
	_, got, err := conn.ReadMessage()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, []byte(msg)) {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// echoAll checks echo on every tunnel of an unwatched set; it returns how many failed.
func (ts *tunnels) echoAll() int {
	failed := 0
	for _, tn := range ts.list {
		conn, _ := tn.current()
		if conn == nil || echo(conn, tn.key) != nil {
			failed++
		}
	}
	return failed
}

// on counts the tunnels currently placed on server.
func (ts *tunnels) on(server string) int {
	n := 0
	for _, tn := range ts.list {
		if _, s := tn.current(); s == server {
			n++
		}
	}
	return n
}

// placement returns key → connection server.
func (ts *tunnels) placement() map[string]string {
	out := map[string]string{}
	for _, tn := range ts.list {
		_, s := tn.current()
		out[tn.key] = s
	}
	return out
}

// closeAll closes every tunnel from the client side and waits for the readers. Idempotent.
func (ts *tunnels) closeAll() {
	ts.closing.Store(true)
	for _, tn := range ts.list {
		if conn, _ := tn.current(); conn != nil {
			conn.Close()
		}
	}
	ts.wg.Wait()
}

// place opens one tunnel per key, records where each landed, and closes them: fairlead's placement.
func place(t *testing.T, addr string, keys []string) map[string]string {
	t.Helper()
	ts := openTunnels(t, addr, keys, false)
	p := ts.placement()
	ts.closeAll()
	return p
}

// count tallies a placement by server.
func count(placement map[string]string) map[string]int {
	out := map[string]int{}
	for _, s := range placement {
		out[s]++
	}
	return out
}

// goroutines is fairlead's go_goroutines.
func (f *fairlead) goroutines() int64 { return f.MetricInt("go_goroutines") }

// TestConnectionServerKilledWithOpenTunnels: with 200 tunnels open (long form: 1,000) through the sticky
// pool, connection server cx1 dies (ConnServer.Kill). fairlead closes every tunnel to it, the devices
// reconnect at once and land on cx2, where echo works; the tunnels on cx2 are untouched. Once all
// tunnels are closed, fairlead's goroutines and open fds return to their baseline (taken under the
// same HTTP load before the tunnels) within a bounded wait.
func TestConnectionServerKilledWithOpenTunnels(t *testing.T) {
	const name = "cx-killed"
	n := pickN(200, 1000)
	c := startCluster(t, sim.Options{})
	cx1 := c.Connection("cx1")
	f := startFairlead(t, map[string]string{
		"05-cxserver.toml": cxPool(c),
		"10-platform.toml": clusterPool(c, testChecks),
	})
	o := loadOpts{workers: 4, rate: 100, postEvery: 5, timeout: 20 * time.Second}
	l := startLoad(t, name, f.Addr, o)
	sleep(pick(500*time.Millisecond, 2*time.Second))
	baseG, baseFD := f.goroutines(), f.fds()

	ts := openTunnels(t, f.Addr, assetKeys("cx-killed", n), true)
	peakG, peakFD := f.goroutines(), f.fds()
	onKilled, onOther := ts.on("cx1"), ts.on("cx2")
	if onKilled == 0 || onOther == 0 || onKilled+onOther != n {
		t.Fatalf("placement of %d tunnels: cx1 %d, cx2 %d", n, onKilled, onOther)
	}

	t0 := time.Now()
	if err := cx1.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, fmt.Sprintf("the %d tunnels on cx1 to reconnect", onKilled), pick(30*time.Second, 60*time.Second), func() bool {
		return ts.reconnects.Load() >= int64(onKilled) && ts.open.Load() == int64(n)
	})
	reconnected := time.Unix(0, ts.lastConnect.Load()).Sub(t0)
	for _, tn := range ts.list {
		tn.mu.Lock()
		first, now, closes := tn.servers[0], tn.server, len(tn.closedAt)
		tn.mu.Unlock()
		switch {
		case now != "cx2":
			t.Errorf("tunnel %s is on %q after the kill", tn.key, now)
		case first == "cx2" && closes > 0:
			t.Errorf("tunnel %s on the surviving cx2 was closed %d times", tn.key, closes)
		case first == "cx1" && closes != 1:
			t.Errorf("tunnel %s on cx1 was closed %d times, want 1", tn.key, closes)
		}
	}
	if e := ts.echoFailures.Load(); e > 0 {
		t.Errorf("%d echo checks failed", e)
	}
	testkit.Eventually(t, "fairlead to count no tunnel on cx1", 10*time.Second, func() bool {
		for _, s := range f.pool("cxserver").Servers {
			if s.Name == "cx1" {
				return s.Tunnels == 0
			}
		}
		return false
	})

	ts.closeAll()
	// Slack: the HTTP load's own client and upstream connections vary a little, by the workers. The fds
	// come back at once; the goroutines only once fasthttp's worker pool has reclaimed the workers idle
	// for its MaxIdleWorkerDuration (10 s, checked every 10 s): up to 20 s.
	slack := int64(2*o.workers + 8)
	settle := time.Now()
	var g, fds int64
	var fdsAt, gAt time.Duration
	settled := testkit.Within(pick(30*time.Second, 60*time.Second), func() bool {
		g, fds = f.goroutines(), int64(f.fds())
		if fdsAt == 0 && fds >= 0 && fds <= int64(baseFD)+slack {
			fdsAt = time.Since(settle)
		}
		if gAt == 0 && g >= 0 && g <= baseG+slack {
			gAt = time.Since(settle)
		}
		return fdsAt > 0 && gAt > 0
	})

	r := judge(name, stop(l), strict)
	r.add("tunnels=%d on_killed=%d reconnected=%d reconnect_time=%s goroutines=%d/%d/%d fds=%d/%d/%d fds_back=%s goroutines_back=%s",
		n, onKilled, ts.reconnects.Load(), reconnected.Round(time.Millisecond), baseG, peakG, g, baseFD, peakFD, fds,
		fdsAt.Round(time.Millisecond), gAt.Round(time.Millisecond))
	if !settled {
		t.Errorf("%s: fairlead did not return to its baseline after the tunnels closed: goroutines %d (baseline %d), fds %d (baseline %d), slack %d",
			name, g, baseG, fds, baseFD, slack)
	}
	r.checkDeliveries(t, c.Deliveries())
	r.finish(t)
}
