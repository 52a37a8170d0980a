// Package atomicfile replaces a file atomically: a reader sees the old file or the new one, whole, and
// after a crash one of them is on disk. fairlead writes its state file and relay seed files with it.
package atomicfile

import "os"

// WriteFile replaces the file at path with data: a temporary file in the same directory, written and
// synced, then renamed over it. A new file gets perm; an existing one keeps its own mode (on Unix).
func WriteFile(path string, data []byte, perm os.FileMode) error { return writeFile(path, data, perm) }
