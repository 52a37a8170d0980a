package main

// Relay routes (issue #14) through the fairlead process: a normal start whose upstream is
// unreachable exits non-zero naming the topic, a bad relay config exits 2 naming file and key, and a
// fast start serves its seed file before any upstream answers.

import (
	"bufio"
	"context"
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

const relayUpstreamKey = "up-sekret-5ac0e3"

// relayProcConfig is a config of relay "appconfig" over upstream, with relayExtra in its table; it
// writes the upstream headers file and the client keys file into dir.
func relayProcConfig(t *testing.T, dir, listen, admin, upstream, relayExtra string) string {
	t.Helper()
	hdr, keys := filepath.Join(dir, "up.hdr"), filepath.Join(dir, "keys")
	if err := os.WriteFile(hdr, []byte("Authorization: Bearer "+relayUpstreamKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, []byte("client-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
[frontend]
listen = %q
[admin]
listen = %q
[pools.appconfig]
servers = [%q]
connect_timeout = "500ms"
response_timeout = "1s"
[relays.appconfig]
pool = "appconfig"
path = "/relay/{collection}/{environment}"
snapshot = "/config/{collection}/{environment}"
events = "/events/{collection}/{environment}"
topics = ["inventory/dev", "inventory/prod", "payments/dev", "payments/prod"]
upstream_headers_file = %q
%s
[relays.appconfig.auth]
keys_file = %q
header = "X-Client-Key"
`, listen, admin, upstream, hdr, relayExtra, keys)
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
	if strings.Contains(errOut, relayUpstreamKey) {
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
		req.Header.Set("X-Client-Key", "client-key")
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
		ConfigAPIKey: relayUpstreamKey, Logf: func(string, ...any) {}})
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
	fmt.Fprintf(sse, "GET /relay/inventory/dev HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nX-Client-Key: client-key\r\n\r\n")
	br := bufio.NewReader(sse)
	sse.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("SSE: %q %v", line, err)
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial("ws://"+listen+"/relay/inventory/dev", http.Header{"X-Client-Key": {"client-key"}})
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
	if strings.Contains(f.Log.String(), relayUpstreamKey) {
		t.Errorf("the log holds the upstream key:\n%s", f.Log.String())
	}
}
