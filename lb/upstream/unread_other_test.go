//go:build !linux

package upstream

import (
	"net"
	"testing"
)

// unreadBytes is Linux's (SIOCINQ): elsewhere the test that asks skips.
func unreadBytes(t *testing.T, _ net.Conn) int {
	t.Helper()
	t.Skip("the bytes waiting in a socket's receive queue are read with SIOCINQ, Linux's")
	return 0
}
