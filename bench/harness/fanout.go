package harness

import (
	"github.com/fairlead/fairlead/bench/testkit"

	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/fairlead/fairlead/bench/sim"
)

// fan-out (issue #14): N subscribers (Plan.FanOutSizes: 1,000 and 10,000; quick 200 and 1,000) spread
// evenly over 4 topics, half of them Server-Sent Events streams and half WebSockets, then one change a
// second (Plan.FanOutChanges, each a new version of every topic). Measured per N: the delay from the
// publish to the receipt of that version at every subscriber (p50, p99), the deliveries missed, the
// proxy's memory per idle subscriber ((RSS with N subscribed − RSS before) / N), its CPU per delivered
// message and, for fairlead, the upstream sessions and snapshot fetches counted by the simulated config
// server.
//
// Only fairlead (a relay route: one upstream session per topic, its snapshot fetched once per change and
// fanned out) and nginx with the nchan module (a pub/sub server: the harness POSTs every change to its
// publisher location, as an external feeder would; nchan has no upstream to watch or fetch from, so its
// session and fetch figures are n/a) can do this. HAProxy and Caddy have no pub/sub fan-out: they are
// not run.
//
// The proxy's CPU time is read in clock ticks (10 ms), so CPU per delivery is coarse below some
// thousands of deliveries (the tiny and quick plans' smaller N).
//
// Every N is a run of its own: a fresh simulated cluster and a fresh proxy, so that each RSS baseline and
// each upstream counter starts clean. A result's keys are "<metric>@<N>" (N as planned; "subscribers"
// is the N reached): the Markdown has a row per peer and N.

// fanOutTopics are the relay's topics ("collection/environment").
var fanOutTopics = []string{"inventory/dev", "inventory/prod", "payments/dev", "payments/prod"}

const (
	// fanOutSettle bounds the wait for the warm-up change and, after the last change, for the
	// deliveries still under way.
	fanOutSettle = 10 * time.Second
	// fanOutPad is the size of the padding in each published document (a few hundred bytes in all).
	fanOutPad = 200
)

// errRelayNotServed is a fan-out run against a fairlead that accepts [relays.NAME] but answers the
// relay path 404 (a build without relay routes).
var errRelayNotServed = errors.New("fairlead answers the relay path 404: this build does not serve [relays.NAME] routes")

func fanOutScenario() *scenario {
	return &scenario{
		name: "fan-out",
		summary: "N subscribers (1,000 and 10,000; quick: 200 and 1,000) on 4 topics, half SSE and half WebSocket, one change a second (10; quick: 3) on every topic: " +
			"delay from publish to receipt at every subscriber (p50, p99), missed deliveries, proxy memory per idle subscriber ((RSS with N − RSS before) / N), proxy CPU per delivery; " +
			"fairlead's upstream sessions and snapshot fetches per topic per change as counted by the simulated config server (expected: 4 and 1). " +
			"fairlead: a [relays] route; nginx: the nchan module, fed every change by a POST to its publisher location (no upstream: sessions and fetches n/a); " +
			"HAProxy and Caddy: not applicable (no pub/sub fan-out), not run",
		metrics: []metric{
			{key: "subscribers", label: "subscribers"},
			{key: "p50_ms", label: "p50 ms", better: "lower", format: "%.2f"},
			{key: "p99_ms", label: "p99 ms", better: "lower", format: "%.2f"},
			{key: "missed", label: "missed deliveries", better: "lower"},
			{key: "kib_per_sub", label: "KiB/subscriber", better: "lower", format: "%.1f"},
			{key: "cpu_us", label: "proxy CPU µs per delivery", better: "lower", format: "%.2f"},
			{key: "upstream_sessions", label: "upstream sessions"},
			{key: "fetches_per_change", label: "snapshot fetches per topic per change", format: "%.2f"},
		},
		sized:    true,
		variants: fanOutPeers,
		run:      runFanOut,
	}
}

// fanOutKind is what a fan-out scenario's upstream and subscribers speak.
type fanOutKind int

const (
	// fanOutGeneric (fan-out): a relay route with protocol "generic" in front of the simulated config
	// server; half the subscribers SSE, half WebSocket.
	fanOutGeneric fanOutKind = iota
	// fanOutAppConfig (fan-out-appconfig): a relay route with protocol "appconfiguration" in front of a
	// simulated App Configuration instance and IAM; every subscriber the client SDK's SSE shape.
	fanOutAppConfig
)

// fanOutPeers keeps the peers that can fan out: fairlead and nginx (with nchan).
func fanOutPeers(base []string) []string {
	var out []string
	for _, p := range base {
		if p == "fairlead" || p == "nginx" {
			out = append(out, p)
		}
	}
	return out
}

// sizedKey is the key of metric key measured at size n.
func sizedKey(key string, n int) string { return key + "@" + strconv.Itoa(n) }

func runFanOut(rc *runCtx) (*Result, error) { return runFanOutSizes(rc, fanOutGeneric) }

// runFanOutSizes runs a fan-out scenario of kind at each of the plan's sizes.
func runFanOutSizes(rc *runCtx, kind fanOutKind) (*Result, error) {
	res := &Result{Metrics: map[string]float64{}}
	for _, target := range rc.plan.FanOutSizes {
		if target <= 0 || rc.ctx.Err() != nil {
			continue
		}
		// Each subscriber costs the bench process and the proxy one descriptor; fairlead's 4 upstream
		// sessions and nginx's listeners are in the fixed part.
		n := rc.fitFDLimits(fmt.Sprintf("N %d", target), target,
			fdCost{unit: "subscriber", benchPer: 1, benchFixed: 1000, proxyPer: 1, proxyFixed: 300})
		m, err := runFanOutN(rc, kind, n, filepath.Join(rc.dir, fmt.Sprintf("n%d", target)))
		if err != nil {
			return nil, fmt.Errorf("N = %d: %w", target, err)
		}
		for k, v := range m {
			res.Metrics[sizedKey(k, target)] = v
		}
	}
	if len(res.Metrics) == 0 {
		return nil, errors.New("no fan-out size in the plan")
	}
	return res, nil
}

// fanOutRun is one size's run: the proxy, its feeder and the subscribers' records.
type fanOutRun struct {
	rc   *runCtx
	kind fanOutKind
	in   *Instance
	c    *sim.Cluster // fanOutGeneric's upstream
	base time.Time    // receipts and publishes are durations since base

	// fanOutAppConfig: ac is fairlead's upstream instance, or, for nchan, the generator of the
	// configurations the feeder POSTs (nobody connects to it); iam is fairlead's token service.
	ac  *sim.AppConfig
	iam *sim.IAM

	// publish makes change k (0 is the warm-up) of topic t and returns the version it carries; pubAt
	// holds when each version of each topic was published (written by the publisher goroutine only).
	publish func(t, k int) (uint64, error)
	pubAt   []map[uint64]time.Duration
	client  *http.Client // nchan's feeder
	nchanV  []uint64     // the feeder's last version per topic
}

// fanOutSub is one subscriber. Its reader goroutine alone appends to recv; last is read by the waits.
type fanOutSub struct {
	topic int
	ws    bool
	conn  net.Conn
	wsc   *websocket.Conn
	last  atomic.Uint64 // the highest version received
	recv  []fanOutRecv
	done  chan struct{}
	// App Configuration's SSE (written by the reader, read after done): the name of the first event,
	// whether it carried a configuration, and how many events had a name other than Registration
	// first and SSEConfig_payload after it.
	firstEvent  string
	firstConfig bool
	badEvents   int
}

type fanOutRecv struct {
	v  uint64
	at time.Duration
}

func (s *fanOutSub) close() {
	if s.wsc != nil {
		s.wsc.Close()
	} else if s.conn != nil {
		s.conn.Close()
	}
}

func (s *fanOutSub) got(v uint64, base time.Time) {
	s.recv = append(s.recv, fanOutRecv{v: v, at: time.Since(base)})
	if v > s.last.Load() {
		s.last.Store(v)
	}
}

// runFanOutN runs a fan-out scenario of kind with n subscribers against a fresh upstream and proxy,
// in dir.
func runFanOutN(rc *runCtx, kind fanOutKind, n int, dir string) (map[string]float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fr := &fanOutRun{rc: rc, kind: kind, base: time.Now()}
	for range fanOutTopics {
		fr.pubAt = append(fr.pubAt, map[uint64]time.Duration{})
	}
	if rc.peer.Base == "nginx" {
		fr.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: len(fanOutTopics)}}
		defer fr.client.CloseIdleConnections()
	}
	if kind == fanOutAppConfig {
		stop, err := fr.startAppConfig(n, dir)
		if err != nil {
			return nil, err
		}
		defer stop()
	} else {
		c, err := sim.Start(sim.Options{ConfigServers: 1})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		fr.c = c
		if fr.in, err = startFanOutPeer(rc, fanOutConfig{ConfigAddr: c.Configs[0].Addr, Topics: fanOutTopics}, n, dir); err != nil {
			return nil, err
		}
		defer fr.in.Stop()
		switch rc.peer.Base {
		case "fairlead":
			fr.publish = fr.publishSim
		case "nginx":
			fr.nchanV = make([]uint64, len(fanOutTopics))
			fr.publish = fr.publishNchan
		}
	}

	time.Sleep(300 * time.Millisecond)
	before := medianRSS(fr.in, 3, 100*time.Millisecond)

	subs, err := fr.subscribe(n)
	defer func() {
		for _, s := range subs {
			s.close()
		}
	}()
	if err != nil {
		return nil, err
	}

	// The warm-up change proves every subscription end to end before anything is measured (a
	// WebSocket subscriber of fairlead gets nothing before the first change, and nchan's none before
	// the first message published after it subscribed; App Configuration's subscribers got the
	// current configuration at connect, and the warm-up proves the change path).
	want, err := fr.change(0)
	if err != nil {
		return nil, err
	}
	if late := fr.waitDelivered(subs, want, fanOutSettle); late > 0 {
		rc.note("N %d: %d of %d subscribers did not get the warm-up change within %s", n, late, len(subs), fanOutSettle)
	}
	time.Sleep(500 * time.Millisecond)
	after := medianRSS(fr.in, 3, 200*time.Millisecond)

	var up0 fanOutUpstream
	if rc.peer.Base == "fairlead" {
		up0 = fr.upstream()
	}
	cpu0 := fr.in.CPU()
	measured := make([][]uint64, len(fanOutTopics)) // per topic, the versions measured
	p := rc.plan
	next := time.Now()
	for k := 1; k <= p.FanOutChanges && rc.ctx.Err() == nil; k++ {
		time.Sleep(time.Until(next))
		next = next.Add(p.FanOutInterval)
		if want, err = fr.change(k); err != nil {
			return nil, err
		}
		for t, v := range want {
			measured[t] = append(measured[t], v)
		}
	}
	if late := fr.waitDelivered(subs, want, fanOutSettle); late > 0 {
		rc.note("N %d: %d subscribers still lacked the last change %s after it was published", n, late, fanOutSettle)
	}
	cpu := fr.in.CPU() - cpu0
	var up1 fanOutUpstream
	if rc.peer.Base == "fairlead" {
		up1 = fr.upstream()
	}
	for _, s := range subs {
		s.close()
	}
	for _, s := range subs {
		<-s.done
	}

	// Every subscriber must get every measured version of its topic.
	var h, hSSE, hWS testkit.Hist
	var delivered, missed int
	for _, s := range subs {
		for _, v := range measured[s.topic] {
			at, ok := s.receipt(v)
			if !ok {
				missed++
				continue
			}
			delivered++
			d := at - fr.pubAt[s.topic][v]
			h.Add(d)
			if s.ws {
				hWS.Add(d)
			} else {
				hSSE.Add(d)
			}
		}
	}
	if missed > 0 {
		rc.note("N %d: %d of %d deliveries missed", n, missed, missed+delivered)
	}
	m := map[string]float64{
		"subscribers":    float64(len(subs)),
		"p50_ms":         ms(h.Quantile(0.5)),
		"p99_ms":         ms(h.Quantile(0.99)),
		"missed":         float64(missed),
		"delivered":      float64(delivered),
		"kib_per_sub":    float64(after-before) / float64(len(subs)) / 1024,
		"cpu_us":         cpuPerOp(cpu, float64(delivered)),
		"rss_before_mib": float64(before) / (1 << 20),
		"rss_after_mib":  float64(after) / (1 << 20),
	}
	if kind == fanOutGeneric {
		// By kind (JSON only): fairlead relays a change message to its WebSocket subscribers as it
		// arrives, and sends its SSE subscribers the snapshot it fetches on that change.
		m["p50_sse_ms"], m["p99_sse_ms"] = ms(hSSE.Quantile(0.5)), ms(hSSE.Quantile(0.99))
		m["p50_ws_ms"], m["p99_ws_ms"] = ms(hWS.Quantile(0.5)), ms(hWS.Quantile(0.99))
	} else {
		// The client SDK's shape: Registration first (setContext resolves on it), SSEConfig_payload
		// after.
		var noReg, noConfig, bad int
		for _, s := range subs {
			if s.firstEvent != "Registration" {
				noReg++
			}
			if !s.firstConfig {
				noConfig++
			}
			bad += s.badEvents
		}
		if noConfig > 0 {
			rc.note("N %d: %d of %d subscribers got no configuration in their first event", n, noConfig, len(subs))
		}
		if noReg > 0 {
			first := subs[0].firstEvent
			rc.note("N %d: %d of %d subscribers got no Registration first (subscriber 0's first event: %q)", n, noReg, len(subs), first)
		}
		if bad > 0 {
			rc.note("N %d: %d events neither Registration first nor SSEConfig_payload after it", n, bad)
		}
		m["no_registration"] = float64(noReg)
		m["no_config_first"] = float64(noConfig)
		m["bad_events"] = float64(bad)
	}
	if rc.peer.Base == "fairlead" {
		if up1.open != up1.opened {
			rc.note("N %d: %d upstream sessions opened, %d open at the end", n, up1.opened, up1.open)
		}
		if up1.other > 0 {
			rc.note("N %d: %d upstream connections of another kind (App Configuration: SSE subscribers of the instance)", n, up1.other)
		}
		m["upstream_sessions"] = float64(up1.opened)
		if changes := len(measured[0]); changes > 0 {
			m["fetches_per_change"] = float64(up1.fetches-up0.fetches) / float64(changes*len(fanOutTopics))
		}
		if kind == fanOutAppConfig {
			m["iam_tokens"] = float64(up1.tokens)
		}
	}
	return m, nil
}

// fanOutUpstream is what fairlead's upstream counted, summed over fanOutTopics: the sessions open
// now and opened since the start, the configuration fetches since the start, the IAM tokens issued
// (App Configuration) and the connections of another kind than the relay's sessions (App
// Configuration: SSE subscribers of the instance itself, which a relay never is).
type fanOutUpstream struct {
	open, opened, fetches, tokens, other int64
}

func (fr *fanOutRun) upstream() fanOutUpstream {
	var u fanOutUpstream
	if fr.kind == fanOutAppConfig {
		st := fr.ac.Stats()
		for _, t := range fanOutTopics {
			ts := st.Topics[t]
			u.open += int64(ts.WSSessions)
			u.opened += ts.WSSessionsTotal
			u.fetches += ts.Fetches + ts.FetchesOld
			u.other += ts.SSESubscribersTotal
		}
		u.tokens = fr.iam.Stats().Issued
		return u
	}
	st := fr.c.Configs[0].Stats()
	for _, t := range fanOutTopics {
		u.open += int64(st.Topics[t].Sessions)
		u.opened += st.Topics[t].SessionsTotal
		u.fetches += st.Topics[t].Fetches
	}
	return u
}

// receipt is when s got version v.
func (s *fanOutSub) receipt(v uint64) (time.Duration, bool) {
	for _, r := range s.recv {
		if r.v == v {
			return r.at, true
		}
	}
	return 0, false
}

// change publishes change k of every topic and returns the versions, by topic.
func (fr *fanOutRun) change(k int) ([]uint64, error) {
	vs := make([]uint64, len(fanOutTopics))
	for t := range fanOutTopics {
		v, err := fr.publish(t, k)
		if err != nil {
			return nil, fmt.Errorf("publishing change %d of %s: %w", k, fanOutTopics[t], err)
		}
		vs[t] = v
	}
	return vs, nil
}

// fanOutDoc is change k's document.
func fanOutDoc(k int) []byte {
	return fmt.Appendf(nil, `{"change":%d,"pad":%q}`, k, strings.Repeat("x", fanOutPad))
}

// publishSim publishes on the simulated config server, which pushes the change to fairlead's upstream
// session of the topic.
func (fr *fanOutRun) publishSim(t, k int) (uint64, error) {
	at := time.Since(fr.base)
	v, err := fr.c.PublishConfig(fanOutTopics[t], fanOutDoc(k))
	if err != nil {
		return 0, err
	}
	fr.pubAt[t][v] = at
	return v, nil
}

// publishNchan POSTs to nchan's publisher the snapshot the config server would serve for the same
// change: the document fairlead's SSE subscribers get.
func (fr *fanOutRun) publishNchan(t, k int) (uint64, error) {
	fr.nchanV[t]++
	v := fr.nchanV[t]
	body := fmt.Appendf(nil, `{"topic":%q,"version":%d,"server":"config1","data":%s}`, fanOutTopics[t], v, fanOutDoc(k))
	at := time.Since(fr.base)
	resp, err := fr.client.Post("http://"+fr.in.Addr()+"/pub/"+fanOutTopics[t], "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("nchan publisher: status %d", resp.StatusCode)
	}
	fr.pubAt[t][v] = at
	return v, nil
}

// waitDelivered waits until every subscriber has version want[topic] of its topic, at most timeout,
// and returns how many have not.
func (fr *fanOutRun) waitDelivered(subs []*fanOutSub, want []uint64, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		late := 0
		for _, s := range subs {
			if s.last.Load() < want[s.topic] {
				late++
			}
		}
		if late == 0 || time.Now().After(deadline) || fr.rc.ctx.Err() != nil {
			return late
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// subscribe opens n subscribers: the i-th on topic i mod 4; in fan-out a WebSocket when i/4 is odd
// and an SSE stream otherwise, in fan-out-appconfig always the client SDK's SSE stream. It returns those opened (a failure is noted; none opened is an error).
func (fr *fanOutRun) subscribe(n int) ([]*fanOutSub, error) {
	rc := fr.rc
	subs := make([]*fanOutSub, n)
	deadline := time.Now().Add(max(rc.plan.IdleOpenTimeout, time.Duration(n)*10*time.Millisecond))
	failed, firstErr := testkit.OpenAll(rc.ctx, n, 64, deadline, 50, func(i int) error {
		s := &fanOutSub{topic: i % len(fanOutTopics), done: make(chan struct{})}
		s.ws = fr.kind == fanOutGeneric && (i/len(fanOutTopics))%2 == 1
		if err := fr.open(s); err != nil {
			return err
		}
		subs[i] = s
		return nil
	})
	var open []*fanOutSub
	for _, s := range subs {
		if s != nil {
			open = append(open, s)
		}
	}
	if failed > 0 {
		rc.note("N %d: %d subscribers failed to subscribe (first: %v)", n, failed, firstErr)
	}
	if len(open) == 0 {
		return nil, fmt.Errorf("no subscriber subscribed: %v", firstErr)
	}
	if len(open) < n {
		rc.note("N %d: %d of %d subscribers subscribed", n, len(open), n)
	}
	return open, nil
}

// open subscribes s and starts its reader.
func (fr *fanOutRun) open(s *fanOutSub) error {
	if fr.kind == fanOutAppConfig {
		return fr.openAppConfig(s)
	}
	path := "/relay/" + fanOutTopics[s.topic]
	if s.ws {
		d := websocket.Dialer{
			HandshakeTimeout: 10 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 256,
			NetDial: func(network, a string) (net.Conn, error) { return net.DialTimeout(network, a, 10*time.Second) },
		}
		c, resp, err := d.Dial("ws://"+fr.in.Addr()+path, nil)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err != nil {
			if resp != nil {
				return fmt.Errorf("websocket %s: %w (status %d)", path, err, resp.StatusCode)
			}
			return fmt.Errorf("websocket %s: %w", path, err)
		}
		s.wsc = c
		go func() {
			defer close(s.done)
			for {
				_, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				if v, ok := parseVersion(msg); ok {
					s.got(v, fr.base)
				}
			}
		}()
		return nil
	}
	return fr.openSSE(s, path, "", func(line []byte) {
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if v, ok := parseVersion(data); ok {
				s.got(v, fr.base)
			}
		}
	})
}

// openSSE subscribes s with a GET of path carrying the extra header lines header ("Name: value\r\n"
// each) and starts its reader, which hands each line of the stream to line (the reader alone calls it).
func (fr *fanOutRun) openSSE(s *fanOutSub, path, header string, line func([]byte)) error {
	conn, err := net.DialTimeout("tcp", fr.in.Addr(), 10*time.Second)
	if err != nil {
		return err
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n%s\r\n", path, fr.in.Addr(), header); err != nil {
		conn.Close()
		return err
	}
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return fmt.Errorf("SSE %s: %w", path, err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		conn.Close()
		return fmt.Errorf("SSE %s: status %d, Content-Type %q", path, resp.StatusCode, ct)
	}
	_ = conn.SetDeadline(time.Time{})
	s.conn = conn
	go func() {
		defer close(s.done)
		// resp.Body undoes a chunked encoding; the events' lines are read from it.
		lines := bufio.NewReaderSize(resp.Body, 2048)
		for {
			l, err := lines.ReadBytes('\n')
			if err != nil {
				return
			}
			line(l)
		}
	}()
	return nil
}

// parseVersion reads N from the first `"version":N` in b (a change message or a snapshot).
func parseVersion(b []byte) (uint64, bool) {
	_, rest, ok := bytes.Cut(b, []byte(`"version":`))
	if !ok {
		return 0, false
	}
	rest = bytes.TrimLeft(rest, " ")
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	v, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	return v, err == nil
}

// fanOutConfig is what the fan-out configurations are generated from.
type fanOutConfig struct {
	Setup
	// ConfigAddr is fairlead's relay upstream: the simulated config server, or the simulated App
	// Configuration instance.
	ConfigAddr string
	Topics     []string
	// Module is nchan's module file (nginx).
	Module string
	// Conns is nginx's worker_connections.
	Conns int
	// AppConfig generates fan-out-appconfig's configurations, with the App Configuration instance's
	// GUID, fairlead's API key file, IAM's URL, and the client key the subscribers present (fairlead's
	// keys file holds it; nginx compares it).
	AppConfig  bool
	GUID       string
	APIKeyFile string
	IAMURL     string
	KeysFile   string
	ClientKey  string
}

// fairleadRelayTmpl is fairlead's fan-out configuration: a relay route and its pool, nothing else.
var fairleadRelayTmpl = template.Must(template.New("fairlead-relay").Funcs(tmplFuncs).Parse(`# generated by fairlead-bench (fan-out)
[frontend]
listen = "{{.Listen}}"
max_conns = {{.FairleadMaxConns}}

[admin]
listen = "127.0.0.1:{{.AdminPort}}"

[pools.appconfig]
balance = "roundrobin"
servers = ["{{.ConfigAddr}}"]

[relays.appconfig]
pool = "appconfig"
path = "/relay/{collection}/{environment}"
snapshot = "/config/{collection}/{environment}"
events = "/events/{collection}/{environment}"
topics = [{{quote .Topics}}]
max_subscribers = {{.FairleadMaxConns}}
`))

// nchanTmpl is nginx's fan-out configuration: nchan subscriber (WebSocket and EventSource) and publisher
// locations, one channel per topic.
var nchanTmpl = template.Must(template.New("nchan").Parse(`# generated by fairlead-bench (fan-out: nginx with nchan)
load_module {{.Module}};
` + nginxMain + `
events {
	worker_connections {{.Conns}};
}

http {
` + nginxHTTP + `
	server {
		listen {{.Listen}} backlog=4096;

		# Subscribers: a WebSocket or an EventSource (Accept: text/event-stream) per topic; a new
		# subscriber gets only what is published after it subscribed.
		location ~ ^/relay/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)$ {
			nchan_subscriber websocket eventsource;
			nchan_channel_id $1/$2;
			nchan_subscriber_first_message newest;
		}

		# The feeder: the harness POSTs every change here.
		location ~ ^/pub/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)$ {
			nchan_publisher;
			nchan_channel_id $1/$2;
		}
	}
}
`))

// nchanModule is nchan's dynamic module for nginx ("" when it is not installed: Debian's
// libnginx-mod-nchan, see bench/install-peers.sh).
func nchanModule() string {
	for _, p := range []string{"/usr/lib/nginx/modules/ngx_nchan_module.so", "/usr/share/nginx/modules/ngx_nchan_module.so",
		"/usr/local/nginx/modules/ngx_nchan_module.so", "/etc/nginx/modules/ngx_nchan_module.so"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// writeFanOutConfig writes the fan-out configuration of base (fairlead or nginx) for cfg into cfg.Dir.
func writeFanOutConfig(base string, cfg fanOutConfig) (string, error) {
	var t *template.Template
	var name string
	switch base {
	case "fairlead":
		t, name = fairleadRelayTmpl, "fairlead.toml"
		if cfg.AppConfig {
			t = fairleadAppConfigTmpl
		}
	case "nginx":
		t, name = nchanTmpl, "nginx.conf"
		if cfg.AppConfig {
			t = nchanAppConfigTmpl
		}
		for _, d := range []string{"tmp-body", "tmp-proxy", "tmp-fastcgi", "tmp-uwsgi", "tmp-scgi"} {
			if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
				return "", err
			}
		}
	default:
		return "", fmt.Errorf("fan-out: %s has no pub/sub fan-out", base)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, cfg); err != nil {
		return "", err
	}
	path := filepath.Join(cfg.Dir, name)
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// startFanOutPeer starts the peer with its fan-out configuration (cfg: the upstream's fields) for n
// subscribers and waits until its relay path (fairlead) or publisher (nchan) answers.
func startFanOutPeer(rc *runCtx, cfg fanOutConfig, n int, dir string) (*Instance, error) {
	port, admin, err := peerPorts()
	if err != nil {
		return nil, err
	}
	_, hard := raiseNoFile()
	cfg.Setup = Setup{Dir: dir, Port: port, AdminPort: admin, MaxClients: n + 100, FDLimit: int(min(hard, 1<<20)),
		Threads: rc.threads, ConnectTimeout: "3s"}
	cfg.Conns = min(n+1000, int(min(hard, 1<<20))-100)
	if rc.peer.Base == "nginx" {
		if cfg.Module = nchanModule(); cfg.Module == "" {
			return nil, errors.New("nginx's nchan module is not installed (Debian: libnginx-mod-nchan, see bench/install-peers.sh)")
		}
	}
	conf, err := writeFanOutConfig(rc.peer.Base, cfg)
	if err != nil {
		return nil, err
	}
	argv, env := rc.peer.command(cfg.Setup, conf)
	proc, err := startProc(rc.peer.Name, rc.proxyCore(), env, filepath.Join(dir, rc.peer.Base+".log"), argv...)
	if err != nil {
		return nil, err
	}
	in := &Instance{Peer: rc.peer, Setup: cfg.Setup, Proc: proc, conf: conf}
	fail := func(err error) (*Instance, error) {
		tail := proc.LogTail(1500)
		proc.Stop(time.Second)
		return nil, fmt.Errorf("%s: %w\n%s", rc.peer.Name, err, tail)
	}
	err = waitFor(20*time.Second, 20*time.Millisecond, func() error {
		if proc.Exited() {
			return errExited
		}
		return dialOK(in.Addr())
	})
	if err != nil {
		return fail(fmt.Errorf("did not start listening: %w", err))
	}
	cl := &http.Client{Timeout: 2 * time.Second}
	defer cl.CloseIdleConnections()
	notServed := false
	err = waitFor(20*time.Second, 50*time.Millisecond, func() error {
		if proc.Exited() {
			return errExited
		}
		var resp *http.Response
		var err error
		switch {
		case rc.peer.Base == "nginx":
			// A message published before any subscriber: fan-out's never get it (first message
			// "newest"); in fan-out-appconfig (first message "oldest", one kept) the feeder publishes
			// the current configurations right after this, replacing it.
			resp, err = cl.Post("http://"+in.Addr()+"/pub/"+fanOutTopics[0], "application/json", strings.NewReader(`{"ready":true}`))
		case cfg.AppConfig:
			// The server SDKs' REST path, with the client key.
			req, _ := http.NewRequest(http.MethodGet, "http://"+in.Addr()+appConfigRESTPath(cfg.GUID, fanOutTopics[0]), nil)
			req.Header.Set("Authorization", cfg.ClientKey)
			resp, err = cl.Do(req)
		default:
			resp, err = cl.Get("http://" + in.Addr() + "/relay/" + fanOutTopics[0])
		}
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if rc.peer.Base == "fairlead" && resp.StatusCode == 404 {
			notServed = true
			return nil
		}
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		if rc.peer.Base == "fairlead" {
			parse := parseVersion
			if cfg.AppConfig {
				parse = parseAppConfigVersion
			}
			if _, ok := parse(body); !ok {
				return fmt.Errorf("snapshot without a version: %.200s", body)
			}
		}
		return nil
	})
	if err != nil {
		return fail(fmt.Errorf("not ready: %w", err))
	}
	if notServed {
		proc.Stop(time.Second)
		return nil, errRelayNotServed
	}
	return in, nil
}
