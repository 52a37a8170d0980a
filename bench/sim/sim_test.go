package sim_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/fairlead/fairlead/bench/sim"
)

const testAuth = "Basic " + DefaultCredentials

func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %s", err)
	}
	t.Cleanup(c.Close)
	return c
}

// newClient returns an HTTP client with its own connection pool.
func newClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// get does a GET and returns the response with its body read.
func get(t *testing.T, cl *http.Client, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %s", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %s", url, err)
	}
	return resp, string(b)
}

// rawConn is a client connection speaking HTTP/1.1 by hand, to control
// keep-alive precisely.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: %s", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// roundTrip sends a GET for path and reads the answer within timeout.
func (c *rawConn) roundTrip(path string, timeout time.Duration) (*http.Response, string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: sim\r\nAuthorization: "+testAuth+"\r\n\r\n"); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, err = io.Copy(&sb, resp.Body)
	return resp, sb.String(), err
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestParseState(t *testing.T) {
	for _, s := range []State{Leader, Backup, Standby, Hung, Dead} {
		got, err := ParseState(s.String())
		if err != nil || got != s {
			t.Fatalf("ParseState(%q) = %v, %v", s.String(), got, err)
		}
	}
	if _, err := ParseState("zombie"); err == nil {
		t.Fatal("ParseState(zombie): want error")
	}
	if got := State(42).String(); got != "State(42)" {
		t.Fatalf("State(42).String() = %q", got)
	}
}

func TestStartOptions(t *testing.T) {
	c := startCluster(t, Options{Platforms: 3, Connections: 1, ConnectionHealthAddrs: []string{"127.0.0.1:0"}})
	if len(c.Platforms) != 3 || len(c.Connections) != 1 {
		t.Fatalf("got %d platforms, %d connections", len(c.Platforms), len(c.Connections))
	}
	for i, want := range []State{Leader, Backup, Backup} {
		if p := c.Platforms[i]; p.State() != want {
			t.Fatalf("%s: state %s, want %s", p.Name, p.State(), want)
		}
	}
	if c.Platform("platform3") != c.Platforms[2] || c.Platform("platform4") != nil {
		t.Fatal("Platform lookup is wrong")
	}
	if c.Connection("cx1") != c.Connections[0] || c.Connection("cx2") != nil {
		t.Fatal("Connection lookup is wrong")
	}
	cx := c.Connections[0]
	if cx.HealthAddr == cx.Addr || cx.HealthAddr == "" {
		t.Fatalf("separate health addr expected, got %q (addr %q)", cx.HealthAddr, cx.Addr)
	}
	if c.ControlAddr != "" {
		t.Fatalf("ControlAddr = %q without a control API", c.ControlAddr)
	}

	if c.Leader() != c.Platforms[0] {
		t.Fatal("platform1 should lead")
	}
	if err := c.Platforms[0].SetState(Backup); err != nil {
		t.Fatal(err)
	}
	if c.Leader() != nil {
		t.Fatal("no leader expected")
	}
	if err := c.Platforms[2].SetState(Leader); err != nil {
		t.Fatal(err)
	}
	if c.Leader() != c.Platforms[2] {
		t.Fatal("platform3 should lead")
	}

	// Fixed addresses are honoured. The port freed by Close may be taken
	// by another process's outgoing connection before it is bound again
	// (the ephemeral range is shared), so a taken port means another try
	// with a fresh one.
	fixed := c.Platforms[1].Addr
	c.Close()
	c.Close() // idempotent
	var c2 *Cluster
	for try := 0; c2 == nil; try++ {
		var err error
		c2, err = Start(Options{PlatformAddrs: []string{"", fixed}, Logf: t.Logf})
		if err != nil {
			if try == 4 || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("Start with fixed %s: %s", fixed, err)
			}
			ln, lerr := net.Listen("tcp", "127.0.0.1:0")
			if lerr != nil {
				t.Fatal(lerr)
			}
			fixed = ln.Addr().String()
			ln.Close()
		}
	}
	t.Cleanup(c2.Close)
	if len(c2.Platforms) != 2 || c2.Platforms[1].Addr != fixed {
		t.Fatalf("platform2 addr %q, want %q", c2.Platforms[1].Addr, fixed)
	}
	if c2.Connections[0].HealthAddr != c2.Connections[0].Addr {
		t.Fatal("health should be served on the main port by default")
	}

	if _, err := Start(Options{Platforms: 1, PlatformAddrs: []string{"", ""}}); err == nil {
		t.Fatal("want error for too many addresses")
	}
	if _, err := Start(Options{PlatformAddrs: []string{"127.0.0.1:0", fixed}}); err == nil {
		t.Fatal("want error for an address in use")
	}
}

func TestPortRange(t *testing.T) {
	got := PortRange("127.0.0.1", 9081, 3)
	want := []string{"127.0.0.1:9081", "127.0.0.1:9082", "127.0.0.1:9083"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("PortRange = %v", got)
	}
	if got := PortRange("::1", 0, 2); got[0] != "[::1]:0" || got[1] != "[::1]:0" {
		t.Fatalf("PortRange(0) = %v", got)
	}
}
