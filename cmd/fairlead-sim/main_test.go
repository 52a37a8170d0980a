package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// freePorts is the first of n consecutive ports no other test process will be handed.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	base, err := testkit.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

func TestCommand(t *testing.T) {
	bin := testkit.Binary(t, "cmd/fairlead-sim")
	pport, cport, hport, ctl := freePorts(t, 3), freePorts(t, 2), freePorts(t, 2), freePorts(t, 1)
	control := fmt.Sprintf("127.0.0.1:%d", ctl)
	cmd := exec.Command(bin,
		"-platforms", "3", "-connections", "2",
		"-platform-port", fmt.Sprint(pport), "-connection-port", fmt.Sprint(cport),
		"-health-port", fmt.Sprint(hport), "-control", control, "-credentials", "dXNlcjpwdw==")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once the process is reaped; waitErr is its result.
	exited := make(chan struct{})
	var waitErr error
	lines := make(chan string, 64)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody is listening any more
			}
		}
		close(lines)
		waitErr = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var summary []string
	timeout := time.After(10 * time.Second)
	for len(summary) == 0 || !strings.HasPrefix(summary[len(summary)-1], "control ") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("fairlead-sim exited early; stdout %q, stderr:\n%s", summary, stderr.String())
			}
			summary = append(summary, l)
		case <-timeout:
			t.Fatalf("no control line; stdout %q", summary)
		}
	}
	want := []string{
		fmt.Sprintf("platform1 platform 127.0.0.1:%d state=leader", pport),
		fmt.Sprintf("platform2 platform 127.0.0.1:%d state=backup", pport+1),
		fmt.Sprintf("platform3 platform 127.0.0.1:%d state=backup", pport+2),
		fmt.Sprintf("cx1 connection 127.0.0.1:%d health=127.0.0.1:%d", cport, hport),
		fmt.Sprintf("cx2 connection 127.0.0.1:%d health=127.0.0.1:%d", cport+1, hport+1),
		"control " + control,
	}
	if strings.Join(summary, "\n") != strings.Join(want, "\n") {
		t.Fatalf("summary:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
	}

	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Post("http://"+control+"/platform/platform3/leader", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("set state: %d", resp.StatusCode)
	}
	resp, err = cl.Get("http://" + control + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st sim.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Platforms) != 3 || st.Platforms[2].State != "leader" || len(st.Connections) != 2 || st.Connections[1].HealthAddr != fmt.Sprintf("127.0.0.1:%d", hport+1) {
		t.Fatalf("status %+v", st)
	}

	// The credentials flag is honoured.
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", pport+2, sim.DefaultLeaderCheckPath), nil)
	req.Header.Set("Authorization", "Basic dXNlcjpwdw==")
	resp, err = cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("LeaderCheck: %d", resp.StatusCode)
	}
	cl.CloseIdleConnections()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("exit: %v; stderr:\n%s", waitErr, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fairlead-sim did not exit after SIGTERM")
	}
	if _, err := net.DialTimeout("tcp", control, time.Second); err == nil {
		t.Fatal("control API still listening after exit")
	}
}

func TestRunBadFlags(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"-platforms", "0"}, &out, &errOut); code != 2 {
		t.Fatalf("exit code %d", code)
	}
	if code := run([]string{"-nope"}, &out, &errOut); code != 2 {
		t.Fatalf("exit code %d", code)
	}
}
