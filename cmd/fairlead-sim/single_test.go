package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOneProcessRunsOnePlatformUnderANameAndState: the flags the fault suite uses to run each platform
// server as a process of its own, killed with SIGKILL, whose deliveries survive it in a file.
func TestOneProcessRunsOnePlatformUnderANameAndState(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "deliveries")
	cmd, lines := runSim(t, "-platforms", "1", "-connections", "0", "-platform-port", "0",
		"-control", "127.0.0.1:0", "-platform-names", "platform2", "-states", "backup",
		"-delivery-header", "X-Request-Id", "-delivery-log", logPath)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "platform2 platform 127.0.0.1:") || !strings.HasSuffix(lines[0], " state=backup") {
		t.Fatalf("summary %q", lines)
	}
	addr := strings.Fields(lines[0])[2]
	control := strings.TrimPrefix(lines[1], "control ")

	cl := &http.Client{Timeout: 5 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/svc", strings.NewReader("x"))
	req.Header.Set("X-Request-Id", "id-1")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Served-By") != "platform2" {
		t.Fatalf("X-Served-By %q", resp.Header.Get("X-Served-By"))
	}
	if resp, err = cl.Post("http://"+control+"/platform/platform2/leader", "", nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("control: %v %v", resp, err)
	}
	resp.Body.Close()

	// The delivery log outlives a SIGKILL.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() //nolint:errcheck
	if b, err := os.ReadFile(logPath); err != nil || string(b) != "platform2 id-1\n" {
		t.Fatalf("delivery log %q, %v", b, err)
	}
}

func TestRunBadFaultFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-states", "leader,bogus"},
		{"-platforms", "1", "-states", "leader,backup"},
		{"-platforms", "1", "-platform-names", "a,b"},
		{"-delivery-log", "/dev/null"},
		{"-connections", "-1"},
	} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit code %d", args, code)
		}
	}
}
