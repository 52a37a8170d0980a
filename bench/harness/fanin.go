package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// fan-in: 20,000 client connections (Plan.FanInClients, lowered to what the open-file limits allow),
// opened first and then each sending a few requests at the same moment, to the platform route. Counted:
// the most upstream connections the proxy had open to the platform servers at once — fairlead's from its
// /status (servers[].conns), every proxy's (fairlead's too, as a cross-check) by counting ESTABLISHED
// sockets to the platform ports with `ss -tn` — next to the per-server cap (fairlead max_conns, HAProxy
// server maxconn, Caddy max_conns_per_host; nginx OSS has no queueing cap).

func fanInScenario() *scenario {
	return &scenario{
		name:    "fan-in",
		summary: "20,000 client connections (quick: 1,000; fewer where the open-file limits do not allow them) each sending a few requests at once: most upstream connections open (fairlead /status conns; peers: ESTABLISHED sockets to the platform ports, ss -tn) against the per-server cap (64)",
		metrics: []metric{
			{key: "upstream_max", label: "upstream conns (max)", better: "lower", chart: true},
			{key: "cap", label: "cap per server (0 = none)"},
			{key: "upstream_max_ss", ratio: true, label: "upstream conns (max, ss)", better: "lower"},
			{key: "clients", label: "client conns"},
			{key: "failed", label: "requests failed", better: "lower"},
			{key: "elapsed_s", ratio: true, label: "seconds", better: "lower", format: "%.2f"},
		},
		variants: samePeers,
		run:      runFanIn,
	}
}

func runFanIn(rc *runCtx) (*Result, error) {
	p := rc.plan
	c, err := rc.startCluster(nil)
	if err != nil {
		return nil, err
	}
	capPer := p.FanInCap
	if rc.peer.Base == "nginx" {
		capPer = 0
	}
	clients := rc.fitFDLimits("client connections", p.FanInClients, fanInFDCost(capPer, len(c.Platforms)))
	if clients < p.FanInClients && capPer == 0 {
		rc.note("no upstream cap: up to one upstream connection per client connection, whose descriptors count too")
	}
	// Only the leader may get traffic here (HAProxy's cap is per server), so wait until it does.
	in, err := rc.startPeer(c, leaderOnly, func(s *Setup) {
		s.MaxClients = clients + 100
		s.UpstreamCap = capPer
	})
	if err != nil {
		return nil, err
	}
	if in.Peer.Base == "haproxy" && in.Setup.HAProxyNoStrictLimits() {
		rc.note("HAProxy maxconn %d with `no strict-limits`: HAProxy counts two descriptors per connection, more than the open-file limit (%d) holds, but with the upstream capped one per client connection is enough", in.Setup.HAProxyMaxConn(), in.Setup.FDLimit)
	}
	var ports []int
	for _, pl := range c.Platforms {
		ports = append(ports, portOf(pl.Addr))
	}

	// Open every client connection first.
	conns := make([]*testkit.HTTPConn, clients)
	var dialErrs atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < 100; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(conns) {
					return
				}
				hc := testkit.NewHTTPConn(in.Addr(), 10*time.Second)
				if err := hc.Dial(); err != nil {
					dialErrs.Add(1)
					continue
				}
				conns[i] = hc
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, hc := range conns {
			if hc != nil {
				hc.Close()
			}
		}
	}()
	if n := dialErrs.Load(); n > 0 {
		rc.note("%d client connections could not be opened", n)
	}

	// Sample the upstream connections while the requests run.
	stop := make(chan struct{})
	var maxStatus, maxSS atomic.Int64
	var sampErr atomic.Value
	sampled := make(chan struct{})
	sample := func() {
		if n, err := establishedTo(ports); err == nil {
			storeMax(&maxSS, int64(n))
		} else {
			sampErr.CompareAndSwap(nil, err.Error())
		}
		if in.Peer.Base == "fairlead" {
			if n, err := fairleadUpstreamConns(in.Setup.AdminPort, "platform"); err == nil {
				storeMax(&maxStatus, int64(n))
			} else {
				sampErr.CompareAndSwap(nil, err.Error())
			}
		}
	}
	go func() {
		defer close(sampled)
		for {
			sample()
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	raw := testkit.RawRequest("GET", in.Addr(), "/Thingworx/Things/FanInThing/Properties", nil)
	var failed, sent atomic.Int64
	var firstFail atomic.Value
	start := make(chan struct{})
	t0 := time.Now()
	for _, hc := range conns {
		if hc == nil {
			continue
		}
		wg.Add(1)
		go func(hc *testkit.HTTPConn) {
			defer wg.Done()
			<-start
			for k := 0; k < p.FanInRequests; k++ {
				r := hc.Do(raw, false)
				sent.Add(1)
				if r.Err != nil || r.Status != 200 {
					failed.Add(1)
					if r.Err != nil {
						firstFail.CompareAndSwap(nil, r.Err.Error())
					} else {
						firstFail.CompareAndSwap(nil, fmt.Sprintf("status %d", r.Status))
					}
				}
			}
		}(hc)
	}
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	close(stop)
	<-sampled
	sample()
	if e := sampErr.Load(); e != nil {
		rc.note("sampling upstream connections: %v", e)
	}
	upstream := maxSS.Load()
	if in.Peer.Base == "fairlead" {
		upstream = maxStatus.Load()
	}
	if f := failed.Load(); f > 0 {
		rc.note("%d of %d requests failed (first: %v)", f, sent.Load(), firstFail.Load())
	}
	return &Result{Metrics: map[string]float64{
		"upstream_max":    float64(upstream),
		"upstream_max_ss": float64(maxSS.Load()),
		"cap":             float64(capPer),
		"clients":         float64(int64(len(conns)) - dialErrs.Load()),
		"failed":          float64(failed.Load()),
		"elapsed_s":       elapsed.Seconds(),
	}}, nil
}

// fanInFDCost is what fan-in's client connections cost in open files with capPer upstream connections
// per platform server (0: no cap). A client connection costs the bench process and the proxy one
// descriptor each; the upstream connections, at most the cap per server, cost each side as many again
// (the simulated servers run in the bench process). Without a cap (nginx OSS) every client connection
// may need an upstream connection of its own: two descriptors per client on each side.
func fanInFDCost(capPer, platforms int) fdCost {
	if capPer == 0 {
		return fdCost{unit: "client connection", benchPer: 2, benchFixed: 300, proxyPer: 2, proxyFixed: 300}
	}
	capped := capPer * platforms
	return fdCost{unit: "client connection", benchPer: 1, benchFixed: 300 + capped, proxyPer: 1, proxyFixed: 300 + capped}
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// fairleadUpstreamConns sums servers[].conns of pool in fairlead's /status.
func fairleadUpstreamConns(adminPort int, pool string) (int, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/status", adminPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Pools []struct {
			Name    string `json:"name"`
			Servers []struct {
				Conns int `json:"conns"`
			} `json:"servers"`
		} `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("fairlead /status: %v", err)
	}
	for _, p := range st.Pools {
		if p.Name == pool {
			n := 0
			for _, s := range p.Servers {
				n += s.Conns
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("fairlead /status has no pool %q", pool)
}
