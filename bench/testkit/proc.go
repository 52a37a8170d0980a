package testkit

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fairlead is a real fairlead process started by a test on a config directory of its own.
type Fairlead struct {
	T           T
	Cmd         *exec.Cmd
	Dir         string      // the config directory
	Addr, Admin string      // the front end's and the admin listener's addresses
	Log         *SyncBuffer // its stdout and stderr
	// LogFilter, if set, edits the log shown when the test failed (to drop repeated noise).
	LogFilter func(log string) string

	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// StartFairlead writes files (name → TOML) into a new config directory, with "00-listen.toml" setting
// [frontend] listen and [admin] listen to free addresses, starts fairlead on it and waits until it
// serves. Other files' routes come after those of any file that sorts before theirs; a file that sorts
// after another merges over its tables.
func StartFairlead(t T, files map[string]string) *Fairlead {
	t.Helper()
	return StartFairleadCommand(t, nil, files)
}

// StartFairleadCommand is StartFairlead with the command that runs fairlead: a binary that BuildFor
// made, after an emulator if it needs one ("qemu-aarch64-static", bin); nil is StartFairlead's.
func StartFairleadCommand(t T, command []string, files map[string]string) *Fairlead {
	t.Helper()
	addr, admin := Addr(t), Addr(t)
	all := map[string]string{"00-listen.toml": ListenConfig(addr, admin)}
	for name, body := range files {
		all[name] = body
	}
	f := runFairlead(t, command, WriteFiles(t, all), addr, admin)
	f.WaitServing()
	return f
}

// ListenConfig is the [frontend] and [admin] tables with their listen addresses.
func ListenConfig(addr, admin string) string {
	var c Config
	c.Table("frontend").Set("listen", addr)
	c.Table("admin").Set("listen", admin)
	return c.String()
}

// RunFairlead starts fairlead -config dir (with args after) without waiting; dir's config listens on
// addr and admin. It is killed at the end of the test, which logs the end of its output if it failed.
func RunFairlead(t T, dir, addr, admin string, args ...string) *Fairlead {
	t.Helper()
	return runFairlead(t, nil, dir, addr, admin, args...)
}

// runFairlead is RunFairlead with command (StartFairleadCommand's).
func runFairlead(t T, command []string, dir, addr, admin string, args ...string) *Fairlead {
	t.Helper()
	if len(command) == 0 {
		command = []string{Binary(t, "cmd/fairlead")}
	}
	f := &Fairlead{T: t, Dir: dir, Addr: addr, Admin: admin, Log: &SyncBuffer{}, exited: make(chan struct{})}
	args = append(append(command[1:len(command):len(command)], "-config", dir), args...)
	f.Cmd = exec.Command(command[0], args...)
	f.Cmd.Stdout, f.Cmd.Stderr = f.Log, f.Log
	f.Cmd.SysProcAttr = DieWithTest()
	if err := f.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		f.waitErr = f.Cmd.Wait()
		close(f.exited)
	}()
	t.Cleanup(func() {
		f.Kill()
		if t.Failed() {
			log := f.Log.String()
			if f.LogFilter != nil {
				log = f.LogFilter(log)
			}
			t.Logf("fairlead (pid %d) log:\n%s", f.Cmd.Process.Pid, Tail(log, 6000))
		}
	})
	return f
}

// WaitServing waits until the config is loaded and the front end accepts connections; it fails the
// test if fairlead exits meanwhile.
func (f *Fairlead) WaitServing() {
	f.T.Helper()
	Eventually(f.T, "fairlead to serve", 15*time.Second, func() bool {
		select {
		case <-f.exited:
			f.T.Fatalf("fairlead exited: %v\n%s", f.waitErr, f.Log.String())
		default:
		}
		return f.Metric("fairlead_config_last_reload_successful") == "1" && DialOK(f.Addr)
	})
}

// Eventually is testkit.Eventually with a 10 s timeout.
func (f *Fairlead) Eventually(what string, cond func() bool) {
	f.T.Helper()
	Eventually(f.T, what, 10*time.Second, cond)
}

// Exited is closed once the process has exited; Err is its exit then.
func (f *Fairlead) Exited() <-chan struct{} { return f.exited }

// Err is the process's exit (nil for status 0); valid once Exited is closed.
func (f *Fairlead) Err() error {
	<-f.exited
	return f.waitErr
}

// Kill ends the process with SIGKILL (if it still runs) and reaps it.
func (f *Fairlead) Kill() {
	_ = f.Cmd.Process.Kill()
	<-f.exited
}

// Stop sends SIGTERM and waits (bounded) for a clean exit.
func (f *Fairlead) Stop(timeout time.Duration) {
	f.T.Helper()
	_ = f.Cmd.Process.Signal(syscall.SIGTERM)
	f.WaitExit(timeout)
}

// WaitExit waits (bounded) for a clean exit, after a SIGTERM.
func (f *Fairlead) WaitExit(timeout time.Duration) {
	f.T.Helper()
	select {
	case <-f.exited:
		if f.waitErr != nil {
			f.T.Errorf("fairlead exit after SIGTERM: %v", f.waitErr)
		}
	case <-time.After(timeout):
		f.T.Fatalf("fairlead still running %s after SIGTERM", timeout)
	}
}

// Write writes a file of the config directory (an edit a reload picks up) and returns its path.
func (f *Fairlead) Write(name, body string) string {
	f.T.Helper()
	path := filepath.Join(f.Dir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		f.T.Fatal(err)
	}
	return path
}

var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}

// Metric returns the value of the /metrics line named name, labels included exactly as fairlead writes
// them ("" if absent or unreachable).
func (f *Fairlead) Metric(name string) string {
	return Metric(f.Admin, name)
}

// MetricInt is Metric as an integer, -1 if absent.
func (f *Fairlead) MetricInt(name string) int64 {
	v, err := strconv.ParseFloat(f.Metric(name), 64)
	if err != nil {
		return -1
	}
	return int64(v)
}

// Metric returns the value of the line named name of the /metrics page of the admin listener at admin
// ("" if absent or unreachable).
func Metric(admin, name string) string {
	resp, err := adminClient.Get("http://" + admin + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// DialOK reports whether addr accepts a TCP connection.
func DialOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// SyncBuffer collects a child process's output while a test reads it: a bytes.Buffer safe for the
// process's output copier and a reader to share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
