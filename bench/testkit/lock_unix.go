//go:build unix

package testkit

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on f across processes (flock(2)), waiting for it, or, if !wait,
// failing at once when another process holds it. It is let go by unlockFile, or when f is closed.
func lockFile(f *os.File, wait bool) error {
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	return syscall.Flock(int(f.Fd()), how)
}

// unlockFile lets go of lockFile's lock.
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
