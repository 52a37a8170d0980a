//go:build !windows

package relay

import "syscall"

// setRcvBuf sets the socket's SO_RCVBUF (before connect, so the window offered is small from the start).
func setRcvBuf(fd uintptr, n int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}
