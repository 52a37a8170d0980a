package sim_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	. "github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

func leaderCheckURL(p *Platform) string {
	return "http://" + p.Addr + DefaultLeaderCheckPath
}

func TestLeaderCheck(t *testing.T) {
	c := startCluster(t, Options{Platforms: 3})
	cl := newClient(t, 2*time.Second)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	if err := p3.SetState(Standby); err != nil {
		t.Fatal(err)
	}

	check := func(p *Platform, auth string, want int) *http.Response {
		t.Helper()
		var hdr []string
		if auth != "" {
			hdr = []string{"Authorization", auth}
		}
		resp, body := get(t, cl, leaderCheckURL(p), hdr...)
		if resp.StatusCode != want {
			t.Fatalf("%s (%s) LeaderCheck auth %q: status %d, want %d (body %q)", p.Name, p.State(), auth, resp.StatusCode, want, body)
		}
		if got := resp.Header.Get("X-Served-By"); got != p.Name {
			t.Fatalf("X-Served-By = %q, want %q", got, p.Name)
		}
		return resp
	}

	check(p1, testAuth, 200)
	check(p2, testAuth, 503)
	check(p3, testAuth, 503)

	// Credentials must match exactly.
	for _, p := range c.Platforms {
		for _, auth := range []string{"", "Basic YWRtaW46d3Jvbmc=", "basic " + DefaultCredentials} {
			resp := check(p, auth, 401)
			if got := resp.Header.Get("WWW-Authenticate"); got != `Basic realm="ThingWorx"` {
				t.Fatalf("WWW-Authenticate = %q", got)
			}
		}
	}

	// Forced status applies to authorized probes whatever the state.
	p1.SetLeaderCheckStatus(400)
	p2.SetLeaderCheckStatus(200)
	check(p1, testAuth, 400)
	check(p2, testAuth, 200)
	check(p1, "", 401)
	p1.SetLeaderCheckStatus(0)
	p2.SetLeaderCheckStatus(0)
	check(p1, testAuth, 200)
	check(p2, testAuth, 503)

	// State changes are reflected at once.
	if err := p1.SetState(Backup); err != nil {
		t.Fatal(err)
	}
	if err := p2.SetState(Leader); err != nil {
		t.Fatal(err)
	}
	check(p1, testAuth, 503)
	check(p2, testAuth, 200)

	// Probes record the raw Authorization header and the answer, in order.
	probes := p1.Probes()
	var got []string
	for _, pr := range probes {
		got = append(got, fmt.Sprintf("%s=%d", pr.Authorization, pr.Status))
		if pr.At.IsZero() || time.Since(pr.At) > time.Minute {
			t.Fatalf("bad probe time %v", pr.At)
		}
	}
	want := []string{
		testAuth + "=200",
		"=401", "Basic YWRtaW46d3Jvbmc==401", "basic " + DefaultCredentials + "=401",
		testAuth + "=400", "=401",
		testAuth + "=200",
		testAuth + "=503",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("probes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p1.Requests() != 0 {
		t.Fatalf("LeaderCheck counted as %d ordinary requests", p1.Requests())
	}
	p1.ResetCounters()
	if len(p1.Probes()) != 0 {
		t.Fatal("ResetCounters kept probes")
	}
}

func TestLeaderCheckCustomOptions(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1, Credentials: "dXNlcjpwdw==", LeaderCheckPath: "/lc"})
	cl := newClient(t, 2*time.Second)
	p := c.Platforms[0]
	if resp, _ := get(t, cl, "http://"+p.Addr+"/lc", "Authorization", "Basic dXNlcjpwdw=="); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp, _ := get(t, cl, "http://"+p.Addr+"/lc", "Authorization", testAuth); resp.StatusCode != 401 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The default path is an ordinary path now.
	if resp, _ := get(t, cl, leaderCheckURL(p)); resp.StatusCode != 200 || p.Requests() != 1 {
		t.Fatalf("status %d, requests %d", resp.StatusCode, p.Requests())
	}
}

func TestOrdinaryRequests(t *testing.T) {
	c := startCluster(t, Options{Platforms: 3})
	cl := newClient(t, 2*time.Second)
	p1, p2, p3 := c.Platforms[0], c.Platforms[1], c.Platforms[2]
	if err := p3.SetState(Standby); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Platform{p1, p2} {
		resp, body := get(t, cl, "http://"+p.Addr+"/Thingworx/Things")
		if resp.StatusCode != 200 || body != "hello from "+p.Name+"\n" || resp.Header.Get("X-Served-By") != p.Name {
			t.Fatalf("%s: status %d body %q served by %q", p.Name, resp.StatusCode, body, resp.Header.Get("X-Served-By"))
		}
	}
	// Standby answers every ordinary path with 503, even with ?status=.
	for _, path := range []string{"/", "/Thingworx/Things", "/x?status=200"} {
		resp, _ := get(t, cl, "http://"+p3.Addr+path)
		if resp.StatusCode != 503 || resp.Header.Get("X-Served-By") != p3.Name {
			t.Fatalf("standby %s: status %d", path, resp.StatusCode)
		}
	}
	if p3.Requests() != 3 || p1.Requests() != 1 {
		t.Fatalf("requests: p1 %d p3 %d", p1.Requests(), p3.Requests())
	}
	p3.ResetCounters()
	if p3.Requests() != 0 {
		t.Fatal("ResetCounters kept requests")
	}

	// ?status=
	if resp, _ := get(t, cl, "http://"+p1.Addr+"/a?status=418"); resp.StatusCode != 418 {
		t.Fatalf("status=418: got %d", resp.StatusCode)
	}
	for _, bad := range []string{"abc", "101", "600"} {
		if resp, _ := get(t, cl, "http://"+p1.Addr+"/a?status="+bad); resp.StatusCode != 400 {
			t.Fatalf("status=%s: got %d", bad, resp.StatusCode)
		}
	}
	// ?delay=
	start := time.Now()
	if resp, _ := get(t, cl, "http://"+p1.Addr+"/a?delay=100ms&status=202"); resp.StatusCode != 202 {
		t.Fatalf("delay: got %d", resp.StatusCode)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("delay=100ms answered after %s", d)
	}
	if resp, _ := get(t, cl, "http://"+p1.Addr+"/a?delay=soon"); resp.StatusCode != 400 {
		t.Fatalf("delay=soon: got %d", resp.StatusCode)
	}
	// ?bytes=
	resp, body := get(t, cl, "http://"+p1.Addr+"/a?bytes=30")
	if body != "abcdefghijklmnopqrstuvwxyzabcd" || resp.ContentLength != 30 {
		t.Fatalf("bytes=30: body %q, content-length %d", body, resp.ContentLength)
	}
	resp, body = get(t, cl, "http://"+p1.Addr+"/a?bytes=0")
	if body != "" || resp.StatusCode != 200 {
		t.Fatalf("bytes=0: %d %q", resp.StatusCode, body)
	}
	resp, body = get(t, cl, "http://"+p1.Addr+"/a?bytes=100000&chunked=1")
	if len(body) != 100000 || resp.ContentLength != -1 || body[99999] != 'a'+99999%26 {
		t.Fatalf("bytes=100000&chunked=1: len %d, content-length %d", len(body), resp.ContentLength)
	}
	if resp, _ := get(t, cl, "http://"+p1.Addr+"/a?bytes=-1"); resp.StatusCode != 400 {
		t.Fatalf("bytes=-1: got %d", resp.StatusCode)
	}

	// A custom body.
	c2 := startCluster(t, Options{Platforms: 1, Body: []byte("custom")})
	if _, body := get(t, cl, "http://"+c2.Platforms[0].Addr+"/"); body != "custom" {
		t.Fatalf("custom body: %q", body)
	}
}

func TestEchoHeaders(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	p := c.Platforms[0]
	rc := dialRaw(t, p.Addr)
	_ = rc.SetDeadline(time.Now().Add(2 * time.Second))
	req := "GET /echo-headers HTTP/1.1\r\n" +
		"Host: tw.example.com\r\n" +
		"X-Forwarded-For: 10.1.2.3\r\n" +
		"user-agent: test\r\n" +
		"X-Forwarded-Proto: https\r\n" +
		"Cookie: JSESSIONID=abc\r\n" +
		"\r\n"
	if _, err := io.WriteString(rc, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	want := "Host: tw.example.com\nX-Forwarded-For: 10.1.2.3\nUser-Agent: test\nX-Forwarded-Proto: https\nCookie: JSESSIONID=abc\n"
	if string(body) != want {
		t.Fatalf("echo body:\n%s\nwant:\n%s", body, want)
	}
	if got := resp.Header.Get("X-Echo-Host"); got != "tw.example.com" {
		t.Fatalf("X-Echo-Host = %q", got)
	}
	if got := resp.Header.Get("X-Served-By"); got != p.Name {
		t.Fatalf("X-Served-By = %q", got)
	}
}

func TestHung(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	p := c.Platforms[0]

	// A keep-alive connection opened while healthy.
	old := dialRaw(t, p.Addr)
	if resp, _, err := old.roundTrip("/before", time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("before hang: %v %v", resp, err)
	}

	if err := p.SetState(Hung); err != nil {
		t.Fatal(err)
	}
	if _, _, err := old.roundTrip("/after", 150*time.Millisecond); !isTimeout(err) {
		t.Fatalf("keep-alive request on hung server: want timeout, got %v", err)
	}
	// New connections are accepted but never answered.
	fresh := dialRaw(t, p.Addr)
	if _, _, err := fresh.roundTrip(DefaultLeaderCheckPath, 150*time.Millisecond); !isTimeout(err) {
		t.Fatalf("LeaderCheck on hung server: want timeout, got %v", err)
	}
	cl := newClient(t, 150*time.Millisecond)
	if _, err := cl.Get("http://" + p.Addr + "/x"); err == nil {
		t.Fatal("http client: want timeout")
	}
	if n := p.OpenConns(); n < 2 {
		t.Fatalf("OpenConns = %d, want >= 2", n)
	}
	if pr := p.Probes(); len(pr) != 1 || pr[0].Status != 0 || pr[0].Authorization != testAuth {
		t.Fatalf("probes %+v", pr)
	}
	if p.Requests() != 3 {
		t.Fatalf("requests = %d, want 3", p.Requests())
	}

	// Back to normal: new connections are answered.
	if err := p.SetState(Leader); err != nil {
		t.Fatal(err)
	}
	if resp, _, err := dialRaw(t, p.Addr).roundTrip(DefaultLeaderCheckPath, time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after recovery: %v %v", resp, err)
	}
	// Close does not wait for hung connections.
	other := startCluster(t, Options{Platforms: 1})
	if err := other.Platforms[0].SetState(Hung); err != nil {
		t.Fatal(err)
	}
	hung := dialRaw(t, other.Platforms[0].Addr)
	if _, _, err := hung.roundTrip("/", 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("want timeout, got %v", err)
	}
	start := time.Now()
	other.Close()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close with a hung connection took %s", d)
	}
	if _, _, err := hung.roundTrip("/", time.Second); err == nil || isTimeout(err) {
		t.Fatalf("hung connection after Close: %v", err)
	}

	// Hung connections are freed when the client goes away.
	old.Close()
	fresh.Close()
	cl.Transport.(*http.Transport).CloseIdleConnections()
	testkit.Eventually(t, "hung connections to close", 5*time.Second, func() bool { return p.OpenConns() <= 1 })
}

func TestLeaderCheckHungHangsOnlyTheLeaderCheck(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	p := c.Platforms[0]
	p.SetLeaderCheckStatus(503) // hanging wins over a forced status
	p.SetLeaderCheckHung(true)

	if _, _, err := dialRaw(t, p.Addr).roundTrip(DefaultLeaderCheckPath, 150*time.Millisecond); !isTimeout(err) {
		t.Fatalf("LeaderCheck with the check hung: want timeout, got %v", err)
	}
	// Ordinary requests are still served by the state.
	cl := newClient(t, time.Second)
	if resp, _ := get(t, cl, "http://"+p.Addr+"/Thingworx/Things"); resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != p.Name {
		t.Fatalf("ordinary request with the check hung: %d from %q, want 200 from %s", resp.StatusCode, resp.Header.Get("X-Served-By"), p.Name)
	}
	if pr := p.Probes(); len(pr) != 1 || pr[0].Status != 0 {
		t.Fatalf("probes %+v, want one that hung (status 0)", pr)
	}
	if p.Requests() != 1 {
		t.Fatalf("requests = %d, want 1 (the LeaderCheck is not an ordinary request)", p.Requests())
	}

	p.SetLeaderCheckHung(false)
	if resp, _, err := dialRaw(t, p.Addr).roundTrip(DefaultLeaderCheckPath, time.Second); err != nil || resp.StatusCode != 503 {
		t.Fatalf("LeaderCheck after SetLeaderCheckHung(false): %v %v, want the forced 503", resp, err)
	}
}

func TestDead(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	p := c.Platforms[0]
	addr := p.Addr

	old := dialRaw(t, addr)
	if _, _, err := old.roundTrip("/", time.Second); err != nil {
		t.Fatal(err)
	}
	if p.OpenConns() != 1 {
		t.Fatalf("OpenConns = %d, want 1", p.OpenConns())
	}
	if err := p.SetState(Dead); err != nil {
		t.Fatal(err)
	}
	if p.State() != Dead || p.OpenConns() != 0 {
		t.Fatalf("state %s, open conns %d", p.State(), p.OpenConns())
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("dial to dead server succeeded")
	}
	// The open keep-alive connection was closed.
	start := time.Now()
	_, _, err := old.roundTrip("/", time.Second)
	if err == nil || isTimeout(err) {
		t.Fatalf("request on connection of dead server: %v", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("closed connection noticed after %s", d)
	}

	for range 2 {
		if err := p.SetState(Backup); err != nil {
			t.Fatal(err)
		}
		if p.Addr != addr {
			t.Fatalf("addr changed to %s", p.Addr)
		}
		resp, _, err := dialRaw(t, addr).roundTrip(DefaultLeaderCheckPath, time.Second)
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("after revival: %v %v", resp, err)
		}
		if err := p.SetState(Dead); err != nil {
			t.Fatal(err)
		}
	}
	// Going Dead does not wait for slow requests: they are cut.
	if err := p.SetState(Leader); err != nil {
		t.Fatal(err)
	}
	slow := dialRaw(t, addr)
	before := p.Requests()
	errc := make(chan error, 1)
	go func() {
		_, _, err := slow.roundTrip("/slow?delay=1m", 5*time.Second)
		errc <- err
	}()
	testkit.Eventually(t, "slow request", 5*time.Second, func() bool { return p.Requests() == before+1 })
	start = time.Now()
	if err := p.SetState(Dead); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil || isTimeout(err) {
		t.Fatalf("slow request on dead server: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("going Dead took %s", d)
	}

	if err := p.SetState(State(9)); err == nil {
		t.Fatal("SetState(9): want error")
	}
	c.Close()
	if err := p.SetState(Leader); err == nil {
		t.Fatal("leaving Dead after Close: want error")
	}
}

// patternSource yields the 'a'+i%26 pattern; it is checked independently
// by TestOrdinaryRequests and patternChecker.
func patternSource(n int64) io.Reader { return PatternSource(n) }

// patternChecker verifies that what is written follows the pattern.
type patternChecker struct {
	n   int64
	bad bool
}

func (c *patternChecker) Write(b []byte) (int, error) {
	for rest := b; len(rest) > 0; {
		off := int(c.n % int64(len(BytesPatternBlock)))
		want := BytesPatternBlock[off:]
		k := min(len(want), len(rest))
		if !bytes.Equal(rest[:k], want[:k]) {
			c.bad = true
		}
		rest = rest[k:]
		c.n += int64(k)
	}
	return len(b), nil
}

func TestStreamDownload64MiB(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	cl := newClient(t, 30*time.Second)
	const size = 64 << 20
	resp, err := cl.Get("http://" + c.Platforms[0].Addr + "/file?bytes=" + strconv.Itoa(size))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != size {
		t.Fatalf("status %d, content-length %d", resp.StatusCode, resp.ContentLength)
	}
	if sanity := (&patternChecker{}); func() bool { _, _ = sanity.Write([]byte("abd")); return !sanity.bad }() {
		t.Fatal("patternChecker accepts a broken pattern")
	}
	pc := &patternChecker{}
	if _, err := io.CopyBuffer(pc, resp.Body, make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if pc.n != size || pc.bad {
		t.Fatalf("read %d bytes, pattern broken: %v", pc.n, pc.bad)
	}
}

func TestStreamUpload64MiB(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	cl := newClient(t, 30*time.Second)
	url := "http://" + c.Platforms[0].Addr + "/upload?status=201"

	upload := func(size int64, sized bool) {
		t.Helper()
		want := sha256.New()
		var body io.Reader = io.TeeReader(patternSource(size), want)
		if !sized {
			body = struct{ io.Reader }{body} // hide the size: chunked encoding
		}
		req, err := http.NewRequest(http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		if sized {
			req.ContentLength = size
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := resp.Header.Get("X-Body-Bytes"); got != strconv.FormatInt(size, 10) {
			t.Fatalf("X-Body-Bytes = %q, want %d (sized %v)", got, size, sized)
		}
		if got := resp.Header.Get("X-Body-Sha256"); got != hexSum(want) {
			t.Fatalf("X-Body-Sha256 = %q, want %q (sized %v)", got, hexSum(want), sized)
		}
	}
	upload(64<<20, true)
	upload(8<<20+3, false)
	upload(100, true)

	// An empty POST gets no body headers; a GET without body neither.
	resp, _ := get(t, cl, url)
	if resp.Header.Get("X-Body-Bytes") != "" {
		t.Fatal("X-Body-Bytes on a request without body")
	}
}

func hexSum(h hash.Hash) string {
	return hex.EncodeToString(h.Sum(nil))
}

func TestKeepAliveCounting(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1})
	p := c.Platforms[0]
	rc := dialRaw(t, p.Addr)
	body := make([]byte, 10000)
	_, _ = rand.Read(body)
	for i := range 5 {
		_ = rc.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(rc, "PUT /p%d HTTP/1.1\r\nHost: sim\r\nContent-Length: %d\r\n\r\n", i, len(body))
		_, _ = rc.Write(body)
		resp, err := http.ReadResponse(rc.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		sum := sha256.Sum256(body)
		if resp.Header.Get("X-Body-Sha256") != hex.EncodeToString(sum[:]) || !bytes.Equal(b, []byte("hello from platform1\n")) {
			t.Fatalf("request %d: %v %q", i, resp.Header, b)
		}
	}
	if p.Requests() != 5 || p.OpenConns() != 1 {
		t.Fatalf("requests %d, open conns %d", p.Requests(), p.OpenConns())
	}
}

// BenchmarkPlatformGet measures ordinary keep-alive GETs against one
// platform server over loopback.
func BenchmarkPlatformGet(b *testing.B) {
	c, err := Start(Options{Platforms: 1, Connections: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	hc := &fasthttp.HostClient{Addr: c.Platforms[0].Addr, MaxConns: 64}
	uri := "http://" + c.Platforms[0].Addr + "/Thingworx/Things/x"
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(uri)
		for pb.Next() {
			if err := hc.Do(req, resp); err != nil {
				b.Error(err)
				return
			}
			if resp.StatusCode() != 200 {
				b.Errorf("status %d", resp.StatusCode())
				return
			}
		}
	})
}

// TestStateFlapping changes states under traffic; it checks for races,
// panics and deadlocks rather than for answers.
func TestStateFlapping(t *testing.T) {
	c := startCluster(t, Options{Platforms: 1, Logf: func(string, ...any) {}})
	p := c.Platforms[0]
	stop := make(chan struct{})
	done := make(chan struct{})
	const clients = 4
	for i := range clients {
		go func() {
			defer func() { done <- struct{}{} }()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 50 * time.Millisecond}
			for {
				select {
				case <-stop:
					return
				default:
				}
				url := "http://" + p.Addr + "/x?delay=1ms"
				if i%2 == 1 {
					url = leaderCheckURL(p)
				}
				if resp, err := cl.Get(url); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	for i := range 40 {
		if err := p.SetState([]State{Leader, Hung, Backup, Dead, Standby}[i%5]); err != nil {
			t.Error(err)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	for range clients {
		<-done
	}
	if err := p.SetState(Leader); err != nil {
		t.Fatal(err)
	}
	if resp, _, err := dialRaw(t, p.Addr).roundTrip(DefaultLeaderCheckPath, time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after flapping: %v %v", resp, err)
	}
}

func TestPlatformWebSocketEcho(t *testing.T) {
	c := startCluster(t, Options{Platforms: 2})
	p1, p2 := c.Platforms[0], c.Platforms[1]
	conn, resp := dialWS(t, p1.Addr, "/Thingworx/WS", nil)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Served-By") != p1.Name {
		t.Fatalf("upgrade: status %d, X-Served-By %q", resp.StatusCode, resp.Header.Get("X-Served-By"))
	}
	echo(t, conn, websocket.TextMessage, []byte("to the leader"))
	echo(t, conn, websocket.BinaryMessage, []byte{0, 1, 2})
	if p1.Upgrades() != 1 || p1.OpenTunnels() != 1 || p1.Requests() != 1 {
		t.Fatalf("Upgrades %d, OpenTunnels %d, Requests %d, want 1, 1, 1", p1.Upgrades(), p1.OpenTunnels(), p1.Requests())
	}
	// A backup upgrades too.
	conn2, _ := dialWS(t, p2.Addr, "/Thingworx/WS", nil)
	echo(t, conn2, websocket.TextMessage, []byte("to a backup"))

	// Only on /Thingworx/WS: elsewhere an upgrade is an ordinary request.
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second}
	if _, resp, err := d.Dial("ws://"+p1.Addr+"/Thingworx/Things", nil); err == nil || resp == nil || resp.StatusCode != 200 {
		t.Fatalf("upgrade on another path: %v (response %v), want the ordinary 200", err, resp)
	}

	// A state change keeps the tunnel; Standby answers new upgrades 503; Dead closes the tunnel.
	if err := p1.SetState(Standby); err != nil {
		t.Fatal(err)
	}
	echo(t, conn, websocket.TextMessage, []byte("still here"))
	if _, resp, err := d.Dial("ws://"+p1.Addr+"/Thingworx/WS", nil); err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("upgrade to a standby: %v (response %v), want 503", err, resp)
	}
	if err := p1.SetState(Dead); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := conn.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("read on the tunnel of a dead platform: %v, want a connection error", err)
	}
	testkit.Eventually(t, "the tunnel to close", 5*time.Second, func() bool { return p1.OpenTunnels() == 0 })
	if p2.OpenTunnels() != 1 {
		t.Fatalf("platform2 OpenTunnels = %d", p2.OpenTunnels())
	}
}
