package upstream

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// unreadBytes is how many bytes wait in c's socket receive queue (SIOCINQ).
func unreadBytes(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }) //nolint:errcheck
	return n
}
