package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// A device's echo is judged against the message it sent: the same bytes, or wrong (an older message, a
// later one, another device's, garbage).
func TestJudgeEchoAcceptsOnlyTheMessageJustSent(t *testing.T) {
	var buf [32]byte
	sent := string(deviceMessage(buf[:], 7, 12))
	if sent != "upgrade-7-12" {
		t.Fatalf("message %q", sent)
	}
	for got, want := range map[string]echoVerdict{
		"upgrade-7-12":  echoOK,
		"upgrade-7-11":  echoWrong, // a duplicate of the one before
		"upgrade-7-13":  echoWrong, // out of order
		"upgrade-8-12":  echoWrong, // another device's
		"upgrade-7-120": echoWrong,
		"upgrade-7-1":   echoWrong,
		"":              echoWrong,
	} {
		if v := judgeEcho(7, 12, []byte(got)); v != want {
			t.Errorf("judgeEcho(7, 12, %q) = %s, want %s", got, v, want)
		}
	}
}

// A failure while sending or waiting: a timeout is a missing echo, anything else a closed tunnel.
func TestEchoErrVerdict(t *testing.T) {
	for _, c := range []struct {
		err  error
		want echoVerdict
	}{
		{os.ErrDeadlineExceeded, echoMissing},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), echoMissing},
		{io.EOF, echoClosed},
		{io.ErrUnexpectedEOF, echoClosed},
		{syscall.ECONNRESET, echoClosed},
		{&websocket.CloseError{Code: websocket.CloseGoingAway}, echoClosed},
		{errors.New("use of closed network connection"), echoClosed},
	} {
		if v := echoErrVerdict(c.err); v != c.want {
			t.Errorf("echoErrVerdict(%v) = %s, want %s", c.err, v, c.want)
		}
	}
}

// The counts from the signal on are the snapshot at the end minus the one at the signal; dropped sums
// every way a tunnel is lost.
func TestDeviceTallyCountsFromTheSignalOn(t *testing.T) {
	var tl deviceTally
	tl.count(echoOK)
	tl.count(echoClosed) // before the signal
	before := tl.snapshot()
	for _, v := range []echoVerdict{echoOK, echoOK, echoClosed, echoMissing, echoWrong, echoWrong} {
		tl.count(v)
	}
	tl.reconnected.Add(3)
	tl.redialFailed.Add(2)
	d := tl.snapshot().sub(before)
	want := deviceCounts{Echoes: 2, Closed: 1, Missing: 1, Wrong: 2, Reconnected: 3, RedialFailed: 2}
	if d != want {
		t.Errorf("counts %+v, want %+v", d, want)
	}
	if d.Dropped() != 4 {
		t.Errorf("dropped %d, want 4", d.Dropped())
	}
}

// The attempts counted are those that ended at the signal or later, their failures by kind.
func TestAttemptLogCountsFromTheSignalOn(t *testing.T) {
	var a attemptLog
	t0 := time.Unix(1000, 0)
	a.add(t0.Add(-time.Millisecond), "refused")
	a.add(t0, "")
	a.add(t0.Add(time.Second), "reset")
	a.add(t0.Add(2*time.Second), "reset")
	a.add(t0.Add(3*time.Second), "refused")
	a.add(t0.Add(4*time.Second), "")
	n, failed := a.since(t0)
	if n != 5 || len(failed) != 2 || failed["reset"] != 2 || failed["refused"] != 1 {
		t.Errorf("since: %d attempts, failed %v", n, failed)
	}
	if s := fmtKinds(failed); s != "reset 2, refused 1" {
		t.Errorf("fmtKinds %q", s)
	}
}

// attempt names the outcome of a new connection: answered 200, another status, refused, reset, closed
// without an answer (real sockets on 127.0.0.1).
func TestAttemptNamesEachOutcome(t *testing.T) {
	serve := func(t *testing.T, handle func(c net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return ln.Addr().String()
	}
	readHead := func(c net.Conn) {
		buf := make([]byte, 4096)
		var got []byte
		for !strings.Contains(string(got), "\r\n\r\n") {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			got = append(got, buf[:n]...)
		}
	}
	answer := func(status string) func(net.Conn) {
		return func(c net.Conn) {
			defer c.Close()
			readHead(c)
			fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", status)
		}
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name, addr, want string
	}{
		{"200", serve(t, answer("200 OK")), ""},
		{"503", serve(t, answer("503 Service Unavailable")), "status_503"},
		{"refused", refusedAddr, "refused"},
		{"reset", serve(t, func(c net.Conn) {
			readHead(c)
			c.(*net.TCPConn).SetLinger(0) //nolint:errcheck
			c.Close()
		}), "reset"},
		{"closed without an answer", serve(t, func(c net.Conn) { readHead(c); c.Close() }), "eof"},
	} {
		if got := attempt(c.addr, "/x", 2*time.Second); got != c.want {
			t.Errorf("%s: attempt = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	p, ok := parseStat([]byte("4242 (nginx) S 1 4240 4240 0 -1 4194624 97 0 0 0 0 0 0 0 20 0 1 0 123 0 0\n"))
	if !ok || p != (procInfo{pid: 4242, ppid: 1, pgrp: 4240, comm: "nginx", state: "S"}) {
		t.Errorf("parseStat: %+v %v", p, ok)
	}
	// A name with spaces and parentheses: the name runs to the last ")".
	p, ok = parseStat([]byte("7 (a (b) c) Z 6 5 5 0"))
	if !ok || p.comm != "a (b) c" || p.state != "Z" || p.ppid != 6 || p.pgrp != 5 || p.live() {
		t.Errorf("parseStat with an odd name: %+v %v", p, ok)
	}
	for _, bad := range []string{"", "7 (x", "x (y) S 1 2", "7 (y) S"} {
		if _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

// The old processes are those of before; HAProxy's master, there before and after, counts as new.
func TestSplitOldNew(t *testing.T) {
	now := []procInfo{{pid: 10}, {pid: 11}, {pid: 20}, {pid: 21}}
	old, fresh := splitOldNew([]int{10, 11, 12}, now, 0)
	if !slices.Equal(old, []int{10, 11}) || !slices.Equal(fresh, []int{20, 21}) {
		t.Errorf("old %v new %v", old, fresh)
	}
	old, fresh = splitOldNew([]int{10, 11}, now, 10)
	if !slices.Equal(old, []int{11}) || !slices.Equal(fresh, []int{10, 20, 21}) {
		t.Errorf("with a master: old %v new %v", old, fresh)
	}
}

// groupProcs finds a real process group's processes by name, and a zombie is gone.
func TestGroupProcsFindsTheGroupAndSkipsZombies(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer cmd.Wait()         //nolint:errcheck
	defer cmd.Process.Kill() //nolint:errcheck
	ps := groupProcs(pid, "sleep")
	if len(ps) != 1 || ps[0].pid != pid || ps[0].pgrp != pid || ps[0].ppid != os.Getpid() {
		t.Fatalf("groupProcs = %+v, want the sleep %d", ps, pid)
	}
	if len(groupProcs(pid, "other")) != 0 {
		t.Error("groupProcs matched another name")
	}
	if procRSS(pid) <= 0 {
		t.Error("no RSS for a live process")
	}
	// Killed but not waited for: a zombie, gone for the count.
	cmd.Process.Kill() //nolint:errcheck
	deadline := time.Now().Add(5 * time.Second)
	for len(groupProcs(pid, "sleep")) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a killed process (a zombie) is still listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// installExe replaces the file by rename: a process running the old file keeps it whole.
func TestInstallExeReplacesByRename(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "new"), filepath.Join(dir, "exe")
	if err := os.WriteFile(from, []byte("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := os.Open(to)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := installExe(from, to); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(to); string(b) != "v2" {
		t.Errorf("installed %q", b)
	}
	if b, _ := io.ReadAll(old); string(b) != "v1" {
		t.Errorf("the open old file reads %q", b)
	}
	if st, _ := os.Stat(to); st.Mode().Perm()&0o100 == 0 {
		t.Errorf("not executable: %v", st.Mode())
	}
}

// The upgradable setups: fairlead runs from its copy with a PID file; nginx through the launcher;
// HAProxy gets hard-stop-after, which it accepts.
func TestUpgradableSetups(t *testing.T) {
	s := testSetup(t)
	s.Upgradable = true
	s.HardStopAfter = 30 * time.Second
	argv, _ := (&Peer{Name: "fairlead", Base: "fairlead", Bin: "/usr/bin/fairlead"}).command(s, "/c")
	if want := []string{s.FairleadExe(), "-pidfile", s.PIDFile("fairlead"), "-config", "/c"}; !slices.Equal(argv, want) {
		t.Errorf("fairlead argv %q, want %q", argv, want)
	}
	argv, _ = (&Peer{Name: "nginx", Base: "nginx", Bin: "/usr/sbin/nginx"}).command(s, "/c")
	if len(argv) < 6 || argv[0] != "/bin/sh" || argv[2] != nginxLauncher || argv[4] != s.PIDFile("nginx") || argv[5] != "/usr/sbin/nginx" {
		t.Errorf("nginx argv %q", argv)
	}
	path, conf := renderConfig(t, "haproxy", s)
	if !strings.Contains(conf, "\thard-stop-after 30000ms\n") || !strings.Contains(conf, "expose-fd listeners") {
		t.Errorf("haproxy config lacks hard-stop-after or expose-fd listeners:\n%s", conf)
	}
	checkConfig(t, "haproxy", path, s)
	_, conf = renderConfig(t, "nginx", s)
	if !strings.Contains(conf, "pid "+s.PIDFile("nginx")+";") {
		t.Errorf("nginx's pid file is not PIDFile:\n%s", conf)
	}
	s.Upgradable, s.HardStopAfter = false, 0
	if _, conf = renderConfig(t, "haproxy", s); strings.Contains(conf, "hard-stop-after") {
		t.Error("hard-stop-after without HardStopAfter")
	}
	argv, _ = (&Peer{Name: "fairlead", Base: "fairlead", Bin: "/usr/bin/fairlead"}).command(s, "/c")
	if argv[0] != "/usr/bin/fairlead" || slices.Contains(argv, "-pidfile") {
		t.Errorf("fairlead argv without Upgradable %q", argv)
	}
}

// The upgrade itself, without load, on each installed peer other than fairlead (TestHarnessTiny runs
// fairlead's): a new process serves, the old one is gone within the bound, and the proxy still
// routes a WebSocket. For nginx this also shows that the launcher makes USR2 work (nginx ignores it
// while its parent is the process that started it).
func TestUpgradeStartsANewProcessAndRetiresTheOld(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, base := range []string{"haproxy", "nginx"} {
		t.Run(base, func(t *testing.T) {
			p, err := NewPeer(base, "")
			if err != nil {
				t.Fatal(err)
			}
			if p.Bin == "" {
				t.Skipf("%s is not installed", base)
			}
			rc := &runCtx{ctx: context.Background(), plan: TinyPlan(), peer: p, dir: t.TempDir(), threads: 1}
			defer func() {
				for i := len(rc.cleanup) - 1; i >= 0; i-- {
					rc.cleanup[i]()
				}
			}()
			c, err := rc.startCluster(nil)
			if err != nil {
				t.Fatal(err)
			}
			in, err := rc.startPeer(c, servingWS, func(s *Setup) { s.Upgradable, s.HardStopAfter = true, 2*time.Second })
			if err != nil {
				t.Fatal(err)
			}
			u, err := newUpgrader(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(u.before) < 2 {
				t.Fatalf("%s: processes before %v, want a master and a worker", base, u.before)
			}
			t0 := time.Now()
			if err := u.signal(); err != nil {
				t.Fatal(err)
			}
			w, err := u.watch(t0, 15*time.Second, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if w.newAt == 0 || w.goneAt == 0 || len(w.oldLeft) != 0 {
				t.Fatalf("%s: new serving after %v, old gone after %v, left %v\n%s", base, w.newAt, w.goneAt, w.oldLeft, in.Proc.LogTail(20000))
			}
			if w.newRSS <= 0 || w.oldRSS <= 0 {
				t.Errorf("RSS old %d new %d", w.oldRSS, w.newRSS)
			}
			for _, pid := range u.before {
				if pid != u.master && slices.ContainsFunc(groupProcs(u.pgrp, u.comm), func(p procInfo) bool { return p.pid == pid }) {
					t.Errorf("old process %d still there", pid)
				}
			}
			conn, err := wsDial(in.Addr(), "/Thingworx/WS", "after-upgrade", 2*time.Second, 1024)
			if err != nil {
				t.Fatalf("no WebSocket after the upgrade: %v", err)
			}
			defer conn.Close()
			if err := wsEcho(conn, []byte("after"), 2*time.Second); err != nil {
				t.Errorf("no echo after the upgrade: %v", err)
			}
		})
	}
}

// catches reads the caught-signal mask of /proc/PID/status (HAProxy's settled master catches USR2).
func TestCatches(t *testing.T) {
	st := []byte("Name:\thaproxy\nSigBlk:\t0000000000000000\nSigIgn:\t0000000004001004\nSigCgt:\t0000000100716a03\n")
	for sig, want := range map[syscall.Signal]bool{
		syscall.SIGUSR2: true, syscall.SIGUSR1: true, syscall.SIGHUP: true, syscall.SIGTERM: true,
		syscall.SIGWINCH: false, syscall.SIGQUIT: false, syscall.SIGPIPE: false,
	} {
		if got := catches(st, sig); got != want {
			t.Errorf("catches(%v) = %v, want %v", sig, got, want)
		}
	}
	// Before its wait-mode handlers (the master just executed again): USR2 not caught.
	if catches([]byte("SigCgt:\t0000000000014000\n"), syscall.SIGUSR2) {
		t.Error("USR2 caught in 0x14000")
	}
	if catches([]byte("Name:\tx\n"), syscall.SIGUSR2) {
		t.Error("caught without a SigCgt line")
	}
}
