package main

// Relay routes (issue #14) through the fairlead process: a normal start whose upstream is
// unreachable exits non-zero naming the topic, a bad relay config exits 2 naming file and key, and a
// fast start serves its seed file before any upstream answers.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// relayProcConfig is a config of relay "appconfig" over upstream, with relayExtra in its table; it
// writes the upstream headers file and the client keys file into dir.
func relayProcConfig(t *testing.T, dir, listen, admin, upstream, relayExtra string) string {
	t.Helper()
	return testkit.Relay{Listen: listen, Admin: admin, Servers: []string{upstream},
		PoolExtra: "connect_timeout = \"500ms\"\nresponse_timeout = \"1s\"", RelayExtra: relayExtra, Dir: dir}.Config(t)
}

// runFairleadFor runs fairlead with args, killed after timeout.
func runFairleadFor(t *testing.T, timeout time.Duration, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, testkit.Binary(t, "cmd/fairlead"), args...)
	var e strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("fairlead %v still runs after %s; stderr:\n%s", args, timeout, e.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return e.String(), 0
}

func TestRelayNormalStartWithTheUpstreamUnreachableExitsNonZeroNamingTheTopic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := relayProcConfig(t, dir, testkit.Addr(t), testkit.Addr(t), testkit.Addr(t), "")
	cdir := testkit.WriteFiles(t, map[string]string{"fairlead.toml": conf})

	out, errOut, code := runFairlead(t, "-check", "-config", cdir)
	if code != 0 || !strings.Contains(out, "1 relay(s)") {
		t.Fatalf("-check of a valid relay config: exit %d\n%s%s", code, out, errOut)
	}
	errOut, code = runFairleadFor(t, 30*time.Second, "-config", cdir)
	if code == 0 {
		t.Fatalf("a normal start with the upstream unreachable exited 0; stderr:\n%s", errOut)
	}
	for _, want := range []string{"relays.appconfig", "inventory/dev"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not name %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, testkit.RelayUpstreamKey) {
		t.Errorf("stderr holds the upstream key:\n%s", errOut)
	}
}

func TestRelayConfigErrorsExit2NamingFileAndKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := relayProcConfig(t, dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:19281", "")
	f := func(name, bad, want string) {
		t.Helper()
		expectConfigError(t, base, name, bad, want)
	}
	f("bad topic", "[relays.appconfig]\ntopics = [\"inventory/dev\", \"inventory\"]\n", "relays.appconfig.topics.1: ")
	f("unknown pool", "[relays.appconfig]\npool = \"nope\"\n", "relays.appconfig.pool: ")
	f("fast start without seed", "[relays.appconfig]\nstart = \"fast\"\n", "relays.appconfig.start: ")
	f("missing keys file", "[relays.appconfig.auth]\nkeys_file = \"/nonexistent/keys\"\n", "relays.appconfig.auth.keys_file: ")
}

func TestRelayFastStartProcessServesTheSeedThenTheFreshSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen, admin, upstream := testkit.Addr(t), testkit.Addr(t), testkit.Addr(t)
	seed := filepath.Join(dir, "seed.json")
	if err := os.WriteFile(seed, []byte(`{"relay":"appconfig","written":"2026-12-01T00:00:00Z","topics":{"inventory/dev":{"version":7,"json":{"seeded":true}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cdir := testkit.WriteFiles(t, map[string]string{"fairlead.toml": relayProcConfig(t, dir, listen, admin, upstream,
		fmt.Sprintf("start = \"fast\"\nseed_file = %q\nseed_file_write = true\n", seed))})
	f := testkit.RunFairlead(t, cdir, listen, admin)
	get := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/relay/inventory/dev", nil)
		req.Header.Set(testkit.RelayClientHeader, testkit.RelayClientKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The first answer, as soon as the front end listens, is the seed: nothing listens upstream.
	var code int
	var body string
	testkit.Eventually(t, "fairlead to start", 10*time.Second, func() bool { code, body = get(); return code != 0 })
	if code != 200 || body != `{"seeded":true}` {
		t.Fatalf("first answer of a fast start: %d %q, want the seed", code, body)
	}

	c := testkit.StartCluster(t, sim.Options{Platforms: 1, NoConnections: true, ConfigAddrs: []string{upstream},
		ConfigAPIKey: testkit.RelayUpstreamKey, Logf: func(string, ...any) {}})
	if _, err := c.PublishConfig("inventory/dev", []byte(`{"fresh":true}`)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the fresh snapshot to replace the seed", 15*time.Second, func() bool {
		code, body = get()
		return strings.Contains(body, `"fresh":true`)
	})
	if st := c.Configs[0].Stats(); st.Unauthorized != 0 {
		t.Errorf("the config server refused %d requests", st.Unauthorized)
	}
	// Open streams do not hold the stop back: SIGTERM ends them (SSE ends, WebSocket 1001), the
	// process exits well within drain_timeout (10s), and the seed file is written a last time.
	sse, err := net.DialTimeout("tcp", listen, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sse.Close()
	fmt.Fprintf(sse, "GET /relay/inventory/dev HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"+testkit.RelayClientHeader+": "+testkit.RelayClientKey+"\r\n\r\n")
	br := bufio.NewReader(sse)
	sse.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("SSE: %q %v", line, err)
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial("ws://"+listen+"/relay/inventory/dev", http.Header{testkit.RelayClientHeader: {testkit.RelayClientKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	stopped := time.Now()
	f.Cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case <-f.Exited():
		if err := f.Err(); err != nil {
			t.Errorf("fairlead exited with %v after SIGTERM", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("fairlead still runs 8s after SIGTERM with a relay SSE stream and WebSocket open")
	}
	t.Logf("exited %s after SIGTERM", time.Since(stopped))
	sse.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("the SSE stream did not end at the stop: %v", err)
	}
	ws.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Errorf("the WebSocket ended with %v at the stop, want close 1001", err)
			}
			break
		}
	}
	b, err := os.ReadFile(seed)
	if err != nil || !strings.Contains(string(b), `"fresh": true`) && !strings.Contains(string(b), `"fresh":true`) {
		t.Errorf("the seed file after the stop: %v %s", err, b)
	}
	if strings.Contains(f.Log.String(), testkit.RelayUpstreamKey) {
		t.Errorf("the log holds the upstream key:\n%s", f.Log.String())
	}
}

// relayPoolStatus is what /api/status says of a pool and of the relays, as an operator reads it.
type relayPoolStatus struct {
	Pools []struct {
		Name      string `json:"name"`
		Serving   string `json:"serving"`
		Failovers uint64 `json:"failovers"`
		Failbacks uint64 `json:"failbacks"`
		Servers   []struct {
			Addr      string `json:"addr"`
			Available bool   `json:"available"`
			State     string `json:"state"`
			Check     struct {
				Answered bool `json:"answered"`
			} `json:"check"`
		} `json:"servers"`
	} `json:"pools"`
	Relays []struct {
		Name          string `json:"name"`
		Upstream      string `json:"upstream"`
		ServingBackup bool   `json:"serving_backup"`
	} `json:"relays"`
}

// TestARelaysPrimaryGoingDownIsAPoolFailoverAndItsReturnAFailback: the relay's upstream and the pool
// that holds its servers are one health system. With the relay's primary config server stopped,
// /api/status shows the primary unavailable and the pool serving its backups, failovers counts it and
// /events carries it; the primary's return is a failback the same way; the relay's subscribers get
// every change throughout.
func TestARelaysPrimaryGoingDownIsAPoolFailoverAndItsReturnAFailback(t *testing.T) {
	t.Parallel()
	c := testkit.StartCluster(t, sim.Options{Platforms: 1, NoConnections: true, ConfigServers: 2,
		ConfigAPIKey: testkit.RelayUpstreamKey})
	primary, backup := c.Config("config1"), c.Config("config2")
	dir := t.TempDir()
	listen, admin := testkit.Addr(t), testkit.Addr(t)
	cdir := testkit.WriteFiles(t, map[string]string{
		"10-relay.toml": relayProcConfig(t, dir, listen, admin, primary.Addr, ""),
		"20-backup.toml": fmt.Sprintf("[pools.appconfig]\nbackups = [%q]\nfailback_interval = \"500ms\"\n"+
			"[pools.appconfig.check]\ninterval = \"200ms\"\nfall = 2\nrise = 2\n", backup.Addr),
	})
	p := testkit.RunFairlead(t, cdir, listen, admin)
	p.WaitServing()
	status := func() (st relayPoolStatus) {
		resp, err := http.Get("http://" + admin + "/api/status")
		if err != nil {
			return st
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&st) //nolint:errcheck // an empty status fails the waits
		return st
	}
	// pool reports whether the pool serves tier with primary available as wantUp, after failovers
	// and failbacks, and the relay follows server.
	pool := func(tier string, wantUp bool, failovers, failbacks uint64, server string) func() bool {
		return func() bool {
			st := status()
			if len(st.Pools) != 1 || len(st.Relays) != 1 {
				return false
			}
			ps := st.Pools[0]
			ok := ps.Serving == tier && ps.Failovers == failovers && ps.Failbacks == failbacks &&
				st.Relays[0].Upstream == server && st.Relays[0].ServingBackup == (server == backup.Addr)
			for _, s := range ps.Servers {
				ok = ok && s.Check.Answered // a real state, not "no answer yet"
				if s.Addr == primary.Addr {
					ok = ok && s.Available == wantUp
				}
			}
			return ok
		}
	}
	p.Eventually("the pool serving its primaries, checked", pool("primaries", true, 0, 0, primary.Addr))

	// The event stream, and a relay subscriber, read from before the failover.
	events := make(chan string, 1024)
	readLines(t, "http://"+admin+"/events", nil, events)
	const topic = "inventory/dev"
	changes := make(chan string, 1024)
	readLines(t, "http://"+listen+"/relay/"+topic, http.Header{testkit.RelayClientHeader: {testkit.RelayClientKey}, "Accept": {"text/event-stream"}}, changes)
	publish := func(data string) uint64 {
		t.Helper()
		v, err := c.PublishConfig(topic, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// waitLine waits for a line of lines holding every one of want.
	waitLine := func(lines chan string, what string, want ...string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case line := <-lines:
				ok := true
				for _, w := range want {
					ok = ok && strings.Contains(line, w)
				}
				if ok {
					return
				}
			case <-timeout:
				t.Fatalf("no %s within 10s", what)
			}
		}
	}
	v := publish(`{"before":"failover"}`)
	waitLine(changes, "change before the failover", fmt.Sprintf(`"version":%d`, v), `"server":"config1"`)

	primary.Stop()
	p.Eventually("the pool's failover in /api/status", pool("backups", false, 1, 0, backup.Addr))
	waitLine(events, "failover event", `"kind":"failover"`, `"pool":"appconfig"`)
	v = publish(`{"on":"backup"}`)
	waitLine(changes, "change on the backup", fmt.Sprintf(`"version":%d`, v), `"server":"config2"`)

	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	p.Eventually("the pool's failback in /api/status", pool("primaries", true, 1, 1, primary.Addr))
	waitLine(events, "failback event", `"kind":"failback"`, `"pool":"appconfig"`)
	v = publish(`{"on":"primary"}`)
	waitLine(changes, "change on the primary again", fmt.Sprintf(`"version":%d`, v), `"server":"config1"`)
	if m := p.Metric(`fairlead_pool_failovers_total{pool="appconfig"}`); m != "1" {
		t.Errorf("fairlead_pool_failovers_total: %q, want 1", m)
	}
}

// readLines sends the lines of a GET of url (a stream) to lines until the end of the test.
func readLines(t *testing.T, url string, h http.Header, lines chan<- string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads that far: the test has what it wanted
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
