// Package testkit holds what fairlead's tests, the bench and the fault suite share: free ports that no
// other process will be handed, polling waits, building the binaries once, a TOML builder, the
// simulated cluster's start, the test relay's config, raw client and server sockets and the fuzz
// targets' seed corpus. It knows nothing of fairlead's internals.
package testkit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Ports are handed out from below the kernel's ephemeral range (32768-60999 by default), where ":0"
// listeners and outgoing connections get theirs, so a port returned here and closed for a child process
// to bind cannot be taken by the kernel for somebody else's socket in between. Several test binaries run
// at once (go test runs packages in parallel), each with its own counter, so a port is also reserved
// across processes: an exclusive flock on a file named after it, held until this process exits.
const (
	portLow  = 20000
	portHigh = 32000
)

var ports struct {
	sync.Mutex
	next  int
	held  []*os.File // the lock files of the ports handed out; kept open for the life of the process
	tried int
}

// lockDir is where the per-port lock files live; shared by every process on the machine.
var lockDir = filepath.Join(os.TempDir(), "fairlead-test-ports")

// FreePort returns a TCP port on 127.0.0.1 that is free now, that this process has not handed out before
// and that no other process using testkit holds. The caller may close any listener on it and hand the
// port to a child process: nothing else will be given it meanwhile.
func FreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.next == 0 {
		ports.next = portLow + rand.IntN(portHigh-portLow)
		if err := os.MkdirAll(lockDir, 0o777); err != nil {
			return 0, fmt.Errorf("testkit: %w", err)
		}
	}
	for range portHigh - portLow {
		port := ports.next
		ports.next++
		if ports.next >= portHigh {
			ports.next = portLow
		}
		f, ok := reserve(port)
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			f.Close() // in use by something that does not use testkit; leave it
			continue
		}
		ln.Close()
		ports.held = append(ports.held, f)
		return port, nil
	}
	return 0, errors.New("testkit: no free port left below the ephemeral range")
}

// FreePorts returns the first of n consecutive ports that FreePort could each have returned, reserved
// together (a program that numbers its listeners from a base port).
func FreePorts(n int) (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.next == 0 {
		ports.next = portLow + rand.IntN(portHigh-portLow)
		if err := os.MkdirAll(lockDir, 0o777); err != nil {
			return 0, fmt.Errorf("testkit: %w", err)
		}
	}
	for range (portHigh - portLow) / n {
		if ports.next+n > portHigh {
			ports.next = portLow
		}
		base := ports.next
		ports.next += n
		var got []*os.File
		for p := base; p < base+n; p++ {
			f, ok := reserve(p)
			if !ok {
				break
			}
			if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
				f.Close()
				break
			} else {
				ln.Close()
			}
			got = append(got, f)
		}
		if len(got) == n {
			ports.held = append(ports.held, got...)
			return base, nil
		}
		for _, f := range got {
			f.Close()
		}
	}
	return 0, fmt.Errorf("testkit: no %d consecutive free ports left below the ephemeral range", n)
}

// reserve takes the cross-process lock for port; false when another process holds it.
func reserve(port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if lockFile(f, false) != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// FreeAddr is FreePort as "127.0.0.1:port".
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// T is the part of testing.TB the helpers that clean up after a test use.
type T interface {
	TB
	Cleanup(func())
	TempDir() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Failed() bool
}

// Addr is FreeAddr for a test: it fails the test when no port is left.
func Addr(t TB) string {
	t.Helper()
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
