package testkit

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockFile takes an exclusive lock on f across processes (LockFileEx on its first byte), waiting for
// it, or, if !wait, failing at once when another process holds it. It is let go by unlockFile, or when
// f is closed.
func lockFile(f *os.File, wait bool) error {
	how := uint32(windows.LOCKFILE_EXCLUSIVE_LOCK)
	if !wait {
		how |= windows.LOCKFILE_FAIL_IMMEDIATELY
	}
	return windows.LockFileEx(windows.Handle(f.Fd()), how, 0, 1, 0, new(windows.Overlapped))
}

// unlockFile lets go of lockFile's lock.
func unlockFile(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, new(windows.Overlapped))
}
