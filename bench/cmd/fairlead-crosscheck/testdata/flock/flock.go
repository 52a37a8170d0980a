// Package flock builds where syscall has Flock (Linux, macOS, the BSDs), not on Windows.
package flock

import (
	"os"
	"syscall"
)

// Lock takes an exclusive lock on f.
func Lock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }
