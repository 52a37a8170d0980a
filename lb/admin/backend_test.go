package admin

// The admin listener without the load balancer: a Handler over testBackend, a Backend that returns the
// Status document the test set, writes the metrics text the test set, carries the events of a real
// event.Bus (the one package lb publishes on) and records the actions asked of it. Served by a
// fasthttp.Server on 127.0.0.1 as lb serves it. What lb puts in the document (states, alarms, leaders)
// and what an action does to a server are package lb's, tested there through a running fairlead.

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/valyala/fasthttp"
)

// testBackend is a Backend of fixed answers that records the actions asked of it.
type testBackend struct {
	*event.Bus // Subscribe; the tests Publish
	mu         sync.Mutex
	cfg        *config.Config
	status     Status
	metrics    string
	acts       []testAct
}

// testAct is one call of Act.
type testAct struct {
	pool, server string
	action       Action
	by           string
}

// newTestBackend returns a backend with cfg (nil: an admin listener on loopback without credentials)
// and a status of one leader pool "platform" of two servers, the first the leader, the second a standby.
func newTestBackend(cfg *config.Config) *testBackend {
	if cfg == nil {
		cfg = &config.Config{Admin: config.Admin{Listen: "127.0.0.1:0"}}
	}
	return &testBackend{Bus: event.NewBus(), cfg: cfg, status: Status{Alarms: []Alarm{}, Pools: []PoolStatus{{
		Name: "platform", Balance: "leader", Leader: "127.0.0.1:9001", Serving: "primaries",
		Servers: []ServerStatus{
			{Addr: "127.0.0.1:9001", Name: "platform1", Tier: "primary", State: "up", AdminState: "ready", Available: true, Writable: true,
				Check: &healthcheck.ServerStatus{Addr: "127.0.0.1:9001", Up: true, Answered: true, LastStatus: 200}},
			{Addr: "127.0.0.1:9002", Name: "platform2", Tier: "primary", State: "standby", AdminState: "ready", Writable: true,
				Check: &healthcheck.ServerStatus{Addr: "127.0.0.1:9002", Answered: true, LastStatus: 503}},
		}}}}}
}

func (b *testBackend) Config() *config.Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg
}

// Status returns the document set, its pools and servers copied: a test edits what it got and sets it
// again while the handler encodes the last one.
func (b *testBackend) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.status
	st.Pools = slices.Clone(st.Pools)
	for i := range st.Pools {
		st.Pools[i].Servers = slices.Clone(st.Pools[i].Servers)
	}
	return st
}

func (b *testBackend) WriteMetrics(w io.Writer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	io.WriteString(w, b.metrics) //nolint:errcheck
}

// Act records the call and answers as lb does: ErrNoServer for a server (address or name) the status
// does not list in pool, ErrUnknownAction for another action, else the server's status with the
// action's admin state.
func (b *testBackend) Act(pool, server string, action Action, by string) (ServerStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acts = append(b.acts, testAct{pool: pool, server: server, action: action, by: by})
	for _, p := range b.status.Pools {
		if p.Name != pool {
			continue
		}
		for _, s := range p.Servers {
			if s.Addr != server && s.Name != server {
				continue
			}
			switch action {
			case Drain, Maint, Ready:
				s.AdminState = string(action)
				s.Available = action == Ready && s.State == "up"
			case Probe:
			default:
				return ServerStatus{}, ErrUnknownAction
			}
			return s, nil
		}
	}
	return ServerStatus{}, ErrNoServer
}

// actions returns the calls of Act so far.
func (b *testBackend) actions() []testAct {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]testAct(nil), b.acts...)
}

// adminEnv is a Handler over a testBackend served on 127.0.0.1.
type adminEnv struct {
	b      *testBackend
	h      *Handler
	addr   string
	client *http.Client
	stop   func() // closes the handler and shuts the server down, as lb's Close does; once
}

// startAdmin serves a Handler over b with options o until the end of the test (or stop).
func startAdmin(t *testing.T, b *testBackend, o Options) *adminEnv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := New(b, o)
	srv := &fasthttp.Server{Handler: h.Handle, Name: "fairlead-admin", ReadTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tr := &http.Transport{}
	var once sync.Once
	e := &adminEnv{b: b, h: h, addr: ln.Addr().String(), client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	e.stop = func() {
		once.Do(func() {
			tr.CloseIdleConnections()
			h.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.ShutdownWithContext(ctx)
			<-done
		})
	}
	t.Cleanup(e.stop)
	return e
}

// do sends method path with the Authorization header auth ("" for none) and returns the status, the
// headers and the body.
func (e *adminEnv) do(t *testing.T, method, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	var hdr []string
	if auth != "" {
		hdr = []string{"Authorization", auth}
	}
	resp, body := testkit.Do(t, e.client, method, "http://"+e.addr+path, nil, hdr...)
	return resp.StatusCode, resp.Header, body
}

// mustAction posts ACTION for server of pool and fails the test unless it answers 200 with the
// server's status, which it returns.
func (e *adminEnv) mustAction(t *testing.T, pool, server, action, auth string) ServerStatus {
	t.Helper()
	code, _, body := e.do(t, http.MethodPost, "/api/servers/"+pool+"/"+server+"/"+action, auth)
	if code != 200 {
		t.Fatalf("POST %s on %s: %d %s", action, server, code, body)
	}
	var ss ServerStatus
	if err := json.Unmarshal(body, &ss); err != nil {
		t.Fatalf("POST %s on %s: the answer is not a server status: %v: %s", action, server, err, body)
	}
	return ss
}

// setStatus makes st the document Status returns (the next snapshot of /events carries it).
func (b *testBackend) setStatus(st Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status = st
}
