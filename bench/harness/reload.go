package harness

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
)

// reload: a configuration reload under load. With ~200 WebSocket tunnels open and ~400 req/s of GETs
// running, the proxy reloads a changed but equivalent configuration (fairlead SIGHUP, HAProxy
// master-worker SIGUSR2, `nginx -s reload`, `caddy reload`). Counted: failed requests and tunnels lost
// (closed, or no longer echoing, after the reload).

func reloadScenario() *scenario {
	return &scenario{
		name:    "reload",
		summary: "config reload (changed but equivalent) under ~400 req/s of GETs with WebSocket tunnels open (200; quick: 100): requests failed and tunnels lost",
		metrics: []metric{
			{key: "failed", label: "requests failed", better: "lower"},
			{key: "tunnels_lost", label: "tunnels lost", better: "lower"},
			{key: "tunnels", label: "tunnels open before"},
			{key: "requests", label: "requests sent"},
			{key: "stale_retries", label: "client stale-connection retries"},
			{key: "reload_confirmed", label: "reload confirmed"},
		},
		variants: samePeers,
		run:      runReload,
	}
}

// watchedTunnel is a tunnel whose reader runs in the background, so that a close is noticed at once.
type watchedTunnel struct {
	conn   *websocket.Conn
	echoes chan []byte
	closed chan struct{}
}

func watchTunnel(conn *websocket.Conn) *watchedTunnel {
	t := &watchedTunnel{conn: conn, echoes: make(chan []byte, 1), closed: make(chan struct{})}
	go func() {
		defer close(t.closed)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Minute))
			_, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			select {
			case t.echoes <- msg:
			default:
			}
		}
	}()
	return t
}

// alive reports whether the tunnel still echoes within timeout.
func (t *watchedTunnel) alive(timeout time.Duration) bool {
	select {
	case <-t.closed:
		return false
	default:
	}
	_ = t.conn.SetWriteDeadline(time.Now().Add(timeout))
	if err := t.conn.WriteMessage(websocket.BinaryMessage, []byte("still there?")); err != nil {
		return false
	}
	select {
	case <-t.echoes:
		return true
	case <-t.closed:
		return false
	case <-time.After(timeout):
		return false
	}
}

func runReload(rc *runCtx) (*Result, error) {
	p := rc.plan
	c, err := rc.startCluster(nil)
	if err != nil {
		return nil, err
	}
	in, err := rc.startPeer(c, servingWS, nil)
	if err != nil {
		return nil, err
	}
	var tunnels []*watchedTunnel
	defer func() {
		for _, t := range tunnels {
			t.conn.Close()
		}
	}()
	for i := 0; i < p.ReloadTunnels; i++ {
		conn, err := wsDial(in.Addr(), "/Thingworx/WS", fmt.Sprintf("reload-%d", i), 5*time.Second, 1024)
		if err == nil {
			if err = wsEcho(conn, []byte("hi"), 5*time.Second); err != nil {
				conn.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tunnel %d: %v", i, err)
		}
		tunnels = append(tunnels, watchTunnel(conn))
	}

	pidsBefore := Tree(in.Pid())
	logBefore := fileSize(in.Proc.Log)
	load := startPaced(in.Addr(), 32, p.ReloadRate, p.ReloadBefore+p.ReloadAfter+30*time.Second, "/Thingworx/Things/ReloadThing/Properties")
	time.Sleep(p.ReloadBefore)
	reloadErr := in.Reload(rc.ctx)
	time.Sleep(p.ReloadAfter)
	ss, unfinished := load.Stop(5 * time.Second)
	if reloadErr != nil {
		return nil, reloadErr
	}
	if in.Proc.Exited() {
		return nil, fmt.Errorf("%s exited during the reload:\n%s", in.Peer.Name, in.Proc.LogTail(1000))
	}

	// Every tunnel is checked at once (closed, or not echoing within 2 s).
	lost := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range tunnels {
		wg.Add(1)
		go func(t *watchedTunnel) {
			defer wg.Done()
			if !t.alive(2 * time.Second) {
				mu.Lock()
				lost++
				mu.Unlock()
			}
		}(t)
	}
	wg.Wait()

	sum := summarize(ss)
	if unfinished > 0 {
		rc.note("%d requests still unanswered 5 s after the load stopped (counted as failed)", unfinished)
	}
	if sum.Failed > 0 {
		rc.note("%d of %d requests failed (first: %s)", sum.Failed, sum.Sent, sum.FirstErr)
	}
	confirmed := reloadConfirmed(in, pidsBefore, logBefore)
	if !confirmed {
		rc.note("could not confirm that the reload happened (no new worker process / no reload log line)")
	}
	return &Result{Metrics: map[string]float64{
		"failed":           float64(sum.Failed + unfinished),
		"tunnels_lost":     float64(lost),
		"tunnels":          float64(len(tunnels)),
		"requests":         float64(sum.Sent),
		"stale_retries":    float64(sum.Retried),
		"reload_confirmed": b2f(confirmed),
	}}, nil
}

// reloadConfirmed checks that the reload took place: HAProxy and nginx start new worker processes,
// fairlead and Caddy log it.
func reloadConfirmed(in *Instance, pidsBefore []int, logBefore int64) bool {
	switch in.Peer.Base {
	case "fairlead":
		// fairlead counts reloads in /metrics; older builds only log them.
		if n, ok := fairleadMetric(in.Setup.AdminPort, "fairlead_config_reloads_total"); ok {
			okLast, has := fairleadMetric(in.Setup.AdminPort, "fairlead_config_last_reload_successful")
			return n >= 1 && (!has || okLast == 1)
		}
		return logMentionsReload(in, logBefore)
	case "haproxy", "nginx":
		for _, pid := range Tree(in.Pid()) {
			if !slices.Contains(pidsBefore, pid) {
				return true
			}
		}
		return false
	default:
		return logMentionsReload(in, logBefore)
	}
}

// logMentionsReload reports whether the proxy logged a (re)load after offset logBefore.
func logMentionsReload(in *Instance, logBefore int64) bool {
	b, err := os.ReadFile(in.Proc.Log)
	if err != nil || int64(len(b)) < logBefore {
		return false
	}
	after := strings.ToLower(string(b[logBefore:]))
	return strings.Contains(after, "reload") || strings.Contains(after, "config") && strings.Contains(after, "load")
}

// fairleadMetric reads one unlabelled metric from fairlead's /metrics.
func fairleadMetric(adminPort int, name string) (float64, bool) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPort))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
