package ha

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/harness"
	"github.com/fairlead/fairlead/bench/testkit"
)

// The binaries under test (testkit.Build): fairlead, fairlead-sim and the load client.
var fairleadBin, simBin, clientBin string

// skipReason, when set, is why the namespace tests cannot run here (they skip with it).
var skipReason string

func TestMain(m *testing.M) {
	skipReason = missingPrerequisite()
	if skipReason != "" {
		os.Exit(m.Run())
	}
	for _, b := range []struct {
		bin *string
		pkg string
	}{{&fairleadBin, "cmd/fairlead"}, {&simBin, "cmd/fairlead-sim"}, {&clientBin, "bench/ha/client"}} {
		var err error
		if *b.bin, err = testkit.Build(b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// missingPrerequisite says what this machine lacks to build namespaces and run keepalived ("" if
// nothing).
func missingPrerequisite() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, veth links, keepalived)"
	}
	for _, tool := range []string{"ip", "keepalived"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (Debian: apt-get install iproute2 keepalived; .ci/run does)"
		}
	}
	return ""
}

// child is a process started in a network namespace with `ip netns exec`, which execs the command
// (no fork), so the child's pid is the command's own: a signal reaches fairlead, not ip.
type child struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	log    *harness.SyncBuffer // stderr, and stdout unless lines is used
	lines  chan string         // stdout lines, for children started with startLines
	stdin  io.WriteCloser
	exited chan struct{}
}

// start runs bin with args in namespace ns. Its output is kept and shown if the test fails; at
// cleanup it gets SIGKILL, or stop (if set) first. Every child also gets SIGKILL if the test process
// dies (Pdeathsig survives exec).
func start(t *testing.T, ns, name string, stop func(*child), bin string, args ...string) *child {
	t.Helper()
	c := newChild(t, ns, name, bin, args...)
	c.cmd.Stdout = c.log
	c.run(stop)
	return c
}

// startLines is start with stdout read line by line (c.lines) and stdin open for commands (c.stdin).
func startLines(t *testing.T, ns, name string, bin string, args ...string) *child {
	t.Helper()
	c := newChild(t, ns, name, bin, args...)
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	c.lines = make(chan string, 64)
	c.run(nil)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

func newChild(t *testing.T, ns, name, bin string, args ...string) *child {
	c := &child{t: t, name: name, log: &harness.SyncBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	c.cmd.Stderr = c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return c
}

func (c *child) run(stop func(*child)) {
	c.t.Helper()
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("starting %s: %v", c.name, err)
	}
	go func() {
		c.cmd.Wait() //nolint:errcheck
		close(c.exited)
	}()
	c.t.Cleanup(func() {
		if stop != nil {
			stop(c)
		}
		c.kill()
		if c.t.Failed() {
			c.t.Logf("%s (pid %d) output:\n%s", c.name, c.cmd.Process.Pid, testkit.Tail(c.log.String(), 4000))
		}
	})
}

// kill ends the child with SIGKILL (if it still runs) and reaps it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// alive reports whether the child still runs.
func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// terminate sends SIGTERM and waits up to timeout for the exit.
func (c *child) terminate(timeout time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(timeout):
	}
}

// send writes one command line to the child's stdin.
func (c *child) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
}

// expect waits up to timeout for a stdout line starting with prefix and returns the rest of it.
func (c *child) expect(prefix string, timeout time.Duration) string {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("%s exited before printing %q:\n%s", c.name, prefix, testkit.Tail(c.log.String(), 4000))
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return strings.TrimSpace(rest)
			}
		case <-deadline:
			c.t.Fatalf("%s printed no %q within %s:\n%s", c.name, prefix, timeout, testkit.Tail(c.log.String(), 4000))
		}
	}
}
