package harness

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/fairlead/fairlead/bench/sim"
)

// storm: a reconnect storm. N devices (Plan.StormDevices: 5,000; quick 1,000) each hold a tunnel on the
// two connection servers (sticky on X-Asset-Id); one server dies, and its devices all reconnect at once,
// as ThingWorx edge devices do, to the survivor. A device refused with Retry-After (503, 429) comes back
// after it; after any other failure (another status, a connection error) after 1 s, as a device's
// back-off would. Measured from the kill: the survivor's most new tunnels in any one second (what its
// authentication and binding must absorb), the time until every device is connected again, the failed
// attempts and the refusals. Variants: fairlead without a limit, fairlead-tuned with
// new_tunnels_per_second = Plan.StormRate, HAProxy with maxconn N on the server lines and a queue, nginx
// with limit_conn N (neither has a rate of new connections per server: their caps count connections
// open, which tunnels hold), Caddy as it is.

func stormScenario() *scenario {
	return &scenario{
		name: "storm",
		summary: "N devices (5,000; quick 1,000) hold tunnels on two connection servers; one dies and its devices reconnect at once " +
			"(after Retry-After when refused, after 1 s when failed): the survivor's peak new tunnels per second, the time until every device is back, " +
			"failed attempts; fairlead-tuned has new_tunnels_per_second, HAProxy maxconn N + queue, nginx limit_conn N",
		metrics: []metric{
			{key: "peak_per_s", label: "survivor's peak new tunnels/s", better: "lower", chart: true},
			{key: "back_s", label: "all back s", better: "lower", format: "%.2f"},
			{key: "failed", label: "failed attempts", better: "lower"},
			{key: "refused", label: "refused with Retry-After"},
			{key: "moved", label: "devices moved"},
			{key: "devices", label: "devices"},
			{key: "all_back", label: "all back (1 = yes)"},
		},
		variants: func(base []string) []string {
			var out []string
			for _, b := range base {
				out = append(out, b)
				if b == "fairlead" {
					out = append(out, "fairlead-tuned")
				}
			}
			return out
		},
		run: runStorm,
	}
}

// stormDevice is one device of the storm: it keeps a tunnel open, reconnecting as it is told.
type stormDevice struct {
	id   string
	conn atomic.Pointer[websocket.Conn]
	at   atomic.Int64 // when its current tunnel opened (unix nanoseconds)
}

// stormCounts are the attempts of every device.
type stormCounts struct {
	failed, refused atomic.Int64
}

func (d *stormDevice) run(addr string, n *stormCounts, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 512, WriteBufferSize: 512}
	hdr := http.Header{"X-Asset-Id": {d.id}}
	for {
		wait := time.Second
		conn, resp, err := dialer.Dial("ws://"+addr+"/Thingworx/WS", hdr)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err == nil {
			d.at.Store(time.Now().UnixNano())
			d.conn.Store(conn)
			select {
			case <-stop:
				conn.Close()
				return
			default:
			}
			for { // until the tunnel drops
				if _, _, err := conn.ReadMessage(); err != nil {
					break
				}
			}
			d.conn.Store(nil)
			conn.Close()
			wait = 0 // at once, as a device does
		} else if r, rerr := retryAfter(resp); rerr == nil {
			n.refused.Add(1)
			wait = r
		} else {
			n.failed.Add(1)
		}
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
}

// retryAfter is the wait a 503 or 429 asks for.
func retryAfter(resp *http.Response) (time.Duration, error) {
	if resp == nil || (resp.StatusCode != 503 && resp.StatusCode != 429) {
		return 0, fmt.Errorf("not a refusal")
	}
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s < 1 {
		return 0, fmt.Errorf("no Retry-After")
	}
	return time.Duration(s) * time.Second, nil
}

func runStorm(rc *runCtx) (*Result, error) {
	p := rc.plan
	// Each device costs the bench two descriptors (its end and the connection server's) and the proxy two.
	n := rc.fitFDLimits("devices", p.StormDevices, fdCost{unit: "device", benchPer: 2, benchFixed: 1000, proxyPer: 2, proxyFixed: 300})
	c, err := rc.startCluster(nil)
	if err != nil {
		return nil, err
	}
	_, addr, _, err := rc.startWSPeer(c, false, func(s *Setup) {
		s.MaxClients = n + 100
		switch rc.peer.Base {
		case "fairlead":
			if rc.peer.Tuned {
				s.TunnelRate = p.StormRate
			}
		case "haproxy", "nginx":
			s.TunnelCap = n + 100 // as many as a server may hold: every device
		}
	})
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var counts stormCounts
	devices := make([]*stormDevice, n)
	for i := range devices {
		devices[i] = &stormDevice{id: "storm-" + strconv.Itoa(i)}
	}
	defer func() {
		close(stop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for { // a device may be opening its tunnel right now: close what is open until all stopped
			for _, d := range devices {
				if cn := d.conn.Load(); cn != nil {
					cn.Close()
				}
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	connected := func() (k int, last int64) {
		for _, d := range devices {
			if d.conn.Load() != nil {
				k++
				last = max(last, d.at.Load())
			}
		}
		return k, last
	}
	// Connect them, 50 more every 10 ms, and wait until all are.
	for i, d := range devices {
		wg.Add(1)
		go d.run(addr, &counts, stop, &wg)
		if i%50 == 49 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(p.StormWindow)
	for k, _ := connected(); k < n; k, _ = connected() {
		if time.Now().After(deadline) || rc.ctx.Err() != nil {
			return nil, fmt.Errorf("only %d of %d devices connected before the storm", k, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	counts.failed.Store(0)
	counts.refused.Store(0)

	victim, survivor := c.Connections[0], c.Connections[1]
	before := len(survivor.UpgradeTimes())
	t0 := time.Now()
	if err := victim.Kill(); err != nil {
		return nil, err
	}
	deadline = t0.Add(p.StormWindow)
	allBack := false
	var last int64
	for time.Now().Before(deadline) && rc.ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		k, l := connected()
		if k == n && survivor.OpenTunnels() >= n {
			allBack, last = true, l
			break
		}
	}
	after := slices.Clone(survivor.UpgradeTimes()[before:])
	res := &Result{Metrics: map[string]float64{
		"peak_per_s": float64(sim.MaxInOneSecond(after)),
		"failed":     float64(counts.failed.Load()),
		"refused":    float64(counts.refused.Load()),
		"moved":      float64(len(after)),
		"devices":    float64(n),
		"all_back":   0,
		"back_s":     p.StormWindow.Seconds(),
	}}
	if allBack {
		res.Metrics["all_back"] = 1
		res.Metrics["back_s"] = time.Unix(0, last).Sub(t0).Seconds()
	} else {
		k, _ := connected()
		rc.note("%d of %d devices back within %s", k, n, p.StormWindow)
	}
	return res, nil
}
