package atomicfile

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestWriteFileCreatesAndReplacesAndLeavesNoTemporaryFile proves a new file is created with its
// contents and perm, a second write replaces it whole (keeping the mode it has on Unix), and nothing
// else is left in the directory.
func TestWriteFileCreatesAndReplacesAndLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(want string, mode os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS != "windows" && st.Mode().Perm() != mode {
			t.Fatalf("mode %v, want %v", st.Mode().Perm(), mode)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("the directory holds %v (%v), want the one file", entries, err)
		}
	}
	check("first\n", 0o600)
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("second, longer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("second, longer\n", 0o640)
}
