package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

// WebSocket scenarios: ws-echo (round trips through 64 tunnels) and ws-idle (memory per idle tunnel).
// Every connection carries its own X-Asset-Id, as a ThingWorx edge device does.

func wsEchoScenario() *scenario {
	return &scenario{
		name:    "ws-echo",
		summary: "64 WebSocket connections (each its own X-Asset-Id) echo 64-byte messages back to back through the proxy to the connection servers: round trips/s and p99",
		metrics: []metric{
			{key: "rt_s", label: "round trips/s", better: "higher", chart: true},
			{key: "p99_ms", label: "p99 ms", better: "lower", chart: true, format: "%.2f"},
			{key: "errors", label: "errors", better: "lower"},
			{key: "proxy_cpu", label: "proxy CPU (cores)", format: "%.2f"},
			cpuPerOpMetric,
			ceilingMetric,
		},
		variants: samePeers,
		run:      runWSEcho,
	}
}

func wsIdleScenario() *scenario {
	return &scenario{
		name:    "ws-idle",
		summary: "N idle WebSocket tunnels (8,000; quick: 300): resident memory of the proxy per tunnel = (VmRSS with N tunnels − VmRSS before) / N, summed over all its processes; N reached and the proxy's open-file limit",
		metrics: []metric{
			{key: "kib_per_tunnel", ratio: true, label: "KiB/tunnel", better: "lower", chart: true, format: "%.1f"},
			{key: "tunnels", label: "tunnels (N reached)", better: "higher"},
			{key: "target_n", label: "N tried"},
			{key: "rss_before_mib", ratio: true, label: "RSS before MiB", better: "lower", format: "%.1f"},
			{key: "rss_after_mib", ratio: true, label: "RSS with N MiB", better: "lower", format: "%.1f"},
			{key: "fd_limit", label: "proxy fd limit"},
		},
		variants: samePeers,
		run:      runWSIdle,
	}
}

// wsDial opens a WebSocket through addr on path with X-Asset-Id asset.
func wsDial(addr, path, asset string, timeout time.Duration, bufSize int) (*websocket.Conn, error) {
	return wsDialTLS(addr, path, asset, timeout, bufSize, nil)
}

// wsDialTLS is wsDial over TLS (wss://, a full handshake) when tlsConf is not nil.
func wsDialTLS(addr, path, asset string, timeout time.Duration, bufSize int, tlsConf *tls.Config) (*websocket.Conn, error) {
	d := websocket.Dialer{
		HandshakeTimeout: timeout,
		ReadBufferSize:   bufSize,
		WriteBufferSize:  bufSize,
		NetDial: func(network, a string) (net.Conn, error) {
			return net.DialTimeout(network, a, timeout)
		},
		TLSClientConfig: tlsConf,
	}
	h := http.Header{}
	h.Set("X-Asset-Id", asset)
	scheme := "ws://"
	if tlsConf != nil {
		scheme = "wss://"
	}
	conn, resp, err := d.Dial(scheme+addr+path, h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%w (status %d)", err, resp.StatusCode)
		}
		return nil, err
	}
	return conn, nil
}

// wsEcho sends msg and waits for its echo.
func wsEcho(c *websocket.Conn, msg []byte, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	_ = c.SetWriteDeadline(deadline)
	if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		return err
	}
	_ = c.SetReadDeadline(deadline)
	_, got, err := c.ReadMessage()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs from the message sent")
	}
	return nil
}

func runWSEcho(rc *runCtx) (*Result, error) { return runWSEchoOver(rc, false) }

// dialEchoConns opens n WebSockets on /Thingworx/WS, the i-th to addrOf(i) with X-Asset-Id
// asset-i. On error it returns those opened so far with it.
func dialEchoConns(n int, addrOf func(i int) string, tlsConf *tls.Config) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, 0, n)
	for i := range n {
		cn, err := wsDialTLS(addrOf(i), "/Thingworx/WS", fmt.Sprintf("asset-%d", i), 5*time.Second, 4096, tlsConf)
		if err != nil {
			return conns, fmt.Errorf("ws dial %d: %v", i, err)
		}
		conns = append(conns, cn)
	}
	return conns, nil
}

func closeAll(conns []*websocket.Conn) {
	for _, cn := range conns {
		cn.Close()
	}
}

// echoLoop runs msg round trips back to back on every conn (one goroutine each) for dur: the
// latency histogram, the round trips done and the conns that broke (a broken one stops).
func echoLoop(rc *runCtx, conns []*websocket.Conn, msg []byte, dur time.Duration) (testkit.Hist, uint64, uint64) {
	ctx, cancel := context.WithTimeout(rc.ctx, dur)
	defer cancel()
	var mu sync.Mutex
	var total testkit.Hist
	var n, errs uint64
	var wg sync.WaitGroup
	for _, cn := range conns {
		wg.Add(1)
		go func(cn *websocket.Conn) {
			defer wg.Done()
			var h testkit.Hist
			var k, e uint64
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := wsEcho(cn, msg, 5*time.Second); err != nil {
					e++
					break // a broken tunnel stays broken
				}
				h.Add(time.Since(t0))
				k++
			}
			mu.Lock()
			total.Merge(&h)
			n += k
			errs += e
			mu.Unlock()
		}(cn)
	}
	wg.Wait()
	return total, n, errs
}

// runWSEchoOver runs ws-echo, over wss:// through the proxy's TLS listener when overTLS (wss-echo).
func runWSEchoOver(rc *runCtx, overTLS bool) (*Result, error) {
	c, err := rc.startCluster(nil)
	if err != nil {
		return nil, err
	}
	in, addr, tlsConf, err := rc.startWSPeer(c, overTLS, nil)
	if err != nil {
		return nil, err
	}
	p := rc.plan
	conns, err := dialEchoConns(p.WSConns, func(int) string { return addr }, tlsConf)
	defer closeAll(conns)
	if err != nil {
		return nil, err
	}
	msg := bytes.Repeat([]byte("m"), p.WSMessage)
	echoLoop(rc, conns, msg, p.Warmup)
	cpu0, t0 := in.CPU(), time.Now()
	h, n, errs := echoLoop(rc, conns, msg, p.WSDuration)
	el := time.Since(t0)
	cpu := in.CPU() - cpu0
	closeAll(conns)
	res := &Result{Metrics: map[string]float64{}}
	if !overTLS {
		// The same load against the connection servers directly (each connection to the
		// server its asset's hash would pick does not matter here: the echo is the same).
		direct, err := dialEchoConns(p.WSConns, func(i int) string { return c.Connections[i%len(c.Connections)].Addr }, nil)
		defer closeAll(direct)
		if err != nil {
			return nil, fmt.Errorf("no-proxy ceiling: %v", err)
		}
		echoLoop(rc, direct, msg, p.Warmup)
		t1 := time.Now()
		_, dn, _ := echoLoop(rc, direct, msg, p.WSDuration)
		res.Metrics["ceiling"] = float64(dn) / time.Since(t1).Seconds()
	}
	maps.Copy(res.Metrics, map[string]float64{
		"rt_s":      float64(n) / el.Seconds(),
		"p99_ms":    ms(h.Quantile(0.99)),
		"errors":    float64(errs),
		"proxy_cpu": cpu.Seconds() / el.Seconds(),
		"cpu_us":    cpuPerOp(cpu, float64(n)),
	})
	return res, nil
}

func runWSIdle(rc *runCtx) (*Result, error) { return runWSIdleOver(rc, false) }

// runWSIdleOver runs ws-idle, with the tunnels opened over TLS through the proxy's TLS listener when
// overTLS (ws-idle-tls).
func runWSIdleOver(rc *runCtx, overTLS bool) (*Result, error) {
	p := rc.plan
	// Each tunnel costs the bench process two descriptors (the client end and the simulated connection
	// server's end) and the proxy two.
	n := rc.fitFDLimits("N", p.IdleTunnels, fdCost{unit: "tunnel", benchPer: 2, benchFixed: 1000, proxyPer: 2, proxyFixed: 300})
	c, err := rc.startCluster(nil)
	if err != nil {
		return nil, err
	}
	in, addr, tlsConf, err := rc.startWSPeer(c, overTLS, func(s *Setup) { s.MaxClients = n + 100 })
	if err != nil {
		return nil, err
	}
	time.Sleep(300 * time.Millisecond)
	before := in.RSS()

	conns := make([]*websocket.Conn, n)
	defer func() {
		for _, cn := range conns {
			if cn != nil {
				cn.Close()
			}
		}
	}()
	var opened atomic.Int64
	deadline := time.Now().Add(max(p.IdleOpenTimeout, time.Duration(n)*10*time.Millisecond))
	msg := []byte("hello")
	failed, firstErr := testkit.OpenAll(rc.ctx, n, 32, deadline, 50, func(i int) error {
		cn, err := wsDialTLS(addr, "/Thingworx/WS", fmt.Sprintf("idle-%d", i), 5*time.Second, 512, tlsConf)
		if err == nil {
			if err = wsEcho(cn, msg, 5*time.Second); err != nil {
				cn.Close()
			}
		}
		if err != nil {
			return err
		}
		conns[i] = cn
		opened.Add(1)
		return nil
	})
	reached := int(opened.Load())
	if failed > 0 {
		rc.note("%d tunnels failed to open (first: %v)", failed, firstErr)
	}
	if reached == 0 {
		return nil, fmt.Errorf("no tunnel opened: %v", firstErr)
	}
	time.Sleep(time.Second)
	after := medianRSS(in, 3, 200*time.Millisecond)
	open := 0
	for _, cx := range c.Connections {
		open += cx.OpenTunnels()
	}
	if open < reached {
		rc.note("connection servers see %d open tunnels of %d opened", open, reached)
	}
	return &Result{Metrics: map[string]float64{
		"kib_per_tunnel": float64(after-before) / float64(reached) / 1024,
		"tunnels":        float64(reached),
		"target_n":       float64(n),
		"rss_before_mib": float64(before) / (1 << 20),
		"rss_after_mib":  float64(after) / (1 << 20),
		"fd_limit":       float64(in.FDLimit()),
	}}, nil
}

// medianRSS samples the proxy's RSS k times, step apart, and returns the median.
func medianRSS(in *Instance, k int, step time.Duration) int64 {
	var xs []float64
	for i := 0; i < k; i++ {
		if i > 0 {
			time.Sleep(step)
		}
		xs = append(xs, float64(in.RSS()))
	}
	return int64(median(xs))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
