// Package appconfig runs the official IBM App Configuration JavaScript client SDK
// (npm ibm-appconfiguration-js-client-sdk@0.2.0-beta.3, unmodified, locked in package-lock.json
// here) for fairlead's tests and bench: each Client is one Node process of appconfig-client.js
// against a service URL (a simulated instance from bench/sim, or fairlead's relay), whose JSON lines
// (ready, update, rejected, ...) and exit status a test reads.
//
// The SDK is installed with `npm ci --prefix bench/appconfig --no-audit --no-fund` (.ci/run and
// `make test` do it). Without node the tests that need it skip, saying so; with node but without
// the installed SDK they fail, naming the command that installs it.
package appconfig

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// Exit statuses of appconfig-client.js.
const (
	ExitDone     = 0 // --updates N updates seen (N = 0: right after ready)
	ExitRejected = 1 // setContext rejected
	ExitUsage    = 2 // bad arguments, or the SDK refused them
	ExitTimeout  = 3 // --timeout passed first
	ExitMissing  = 4 // the feature or property is not in the configuration
)

// Args are a client's command-line arguments.
type Args struct {
	URL         string // the service URL (overrideServiceUrl): "http://127.0.0.1:PORT"
	GUID        string
	APIKey      string // the client key, sent raw in Authorization
	Collection  string
	Environment string
	// Feature or Property (exactly one) is the id whose value the client reports.
	Feature, Property string
	// Entity is the entity id the value is evaluated for (default "entity-1").
	Entity string
	// Updates is how many updates the client waits for before it exits 0; 0 exits right after
	// ready; NoUpdateLimit runs until killed or Timeout.
	Updates int
	// Timeout makes the client exit 3 once it passes (0: none).
	Timeout time.Duration
}

// NoUpdateLimit as Args.Updates keeps a client running until it is killed or its Timeout passes.
const NoUpdateLimit = -1

func (a Args) argv() []string {
	argv := []string{"--url", a.URL, "--guid", a.GUID, "--apikey", a.APIKey,
		"--collection", a.Collection, "--environment", a.Environment, "--updates", strconv.Itoa(a.Updates)}
	if a.Feature != "" {
		argv = append(argv, "--feature", a.Feature)
	}
	if a.Property != "" {
		argv = append(argv, "--property", a.Property)
	}
	if a.Entity != "" {
		argv = append(argv, "--entity", a.Entity)
	}
	if a.Timeout > 0 {
		argv = append(argv, "--timeout", strconv.FormatInt(a.Timeout.Milliseconds(), 10)+"ms")
	}
	return argv
}

// Line is one line a client wrote on stdout.
type Line struct {
	Event string `json:"event"` // ready, update, rejected, missing, timeout
	// Value is the feature's or property's value as JSON (ready, update).
	Value json.RawMessage `json:"value,omitempty"`
	// N numbers the updates from 1.
	N int `json:"n,omitempty"`
	// Status is the HTTP status that made setContext reject; Error the network error or missing id.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Client is one running appconfig-client.js process.
type Client struct {
	Args Args
	Cmd  *exec.Cmd
	// Stderr collects the SDK's log and the script's errors.
	Stderr *testkit.SyncBuffer

	mu    sync.Mutex
	lines []Line
	bad   []string // stdout lines that are not JSON

	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// Script returns the path of appconfig-client.js, after checking that node and the installed SDK
// are there: it skips t without node and fails it without the SDK.
func Script(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the official App Configuration JS SDK cannot run (" + err.Error() + ")")
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "bench", "appconfig")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ibm-appconfiguration-js-client-sdk", "package.json")); err != nil {
		t.Fatalf("the App Configuration JS SDK is not installed: run `npm ci --prefix bench/appconfig --no-audit --no-fund` (%s)", err)
	}
	return filepath.Join(dir, "appconfig-client.js")
}

// Start starts one client with args; it is killed at the end of the test, which logs its stderr if
// the test failed.
func Start(t testing.TB, args Args) *Client {
	t.Helper()
	script := Script(t)
	c := &Client{Args: args, Stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	c.Cmd = exec.Command("node", append([]string{script}, args.argv()...)...)
	c.Cmd.Stderr = c.Stderr
	c.Cmd.SysProcAttr = testkit.DieWithTest()
	stdout, err := c.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l Line
			c.mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				c.bad = append(c.bad, sc.Text())
			} else {
				c.lines = append(c.lines, l)
			}
			c.mu.Unlock()
		}
	}()
	go func() {
		<-read // Wait closes stdout: read it all first
		c.waitErr = c.Cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("appconfig client %s/%s (pid %d): lines %v, exit %v, stderr:\n%s", args.Collection, args.Environment,
				c.Cmd.Process.Pid, c.Lines(), c.waitErr, testkit.Tail(c.Stderr.String(), 3000))
		}
	})
	return c
}

// StartN starts n clients, the i-th with args(i).
func StartN(t testing.TB, n int, args func(i int) Args) []*Client {
	t.Helper()
	cs := make([]*Client, n)
	for i := range cs {
		cs[i] = Start(t, args(i))
	}
	return cs
}

// Lines returns the lines the client wrote so far.
func (c *Client) Lines() []Line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Line(nil), c.lines...)
}

// NotJSON returns the stdout lines that were not JSON (there should be none).
func (c *Client) NotJSON() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// Find returns the first line of the given event (ok false if none yet).
func (c *Client) Find(event string) (Line, bool) {
	for _, l := range c.Lines() {
		if l.Event == event {
			return l, true
		}
	}
	return Line{}, false
}

// Updates returns the update lines so far.
func (c *Client) Updates() []Line {
	var out []Line
	for _, l := range c.Lines() {
		if l.Event == "update" {
			out = append(out, l)
		}
	}
	return out
}

// ExitCode returns the process's exit status, -1 while it runs or if a signal ended it.
func (c *Client) ExitCode() int {
	select {
	case <-c.exited:
	default:
		return -1
	}
	if c.waitErr == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(c.waitErr, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Wait waits up to timeout for the process to exit and returns its exit status (-1 if it has not
// exited by then).
func (c *Client) Wait(timeout time.Duration) int {
	select {
	case <-c.exited:
	case <-time.After(timeout):
	}
	return c.ExitCode()
}

// Kill ends the process with SIGKILL if it still runs, and reaps it.
func (c *Client) Kill() {
	_ = c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}
