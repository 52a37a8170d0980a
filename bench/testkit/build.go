package testkit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// The binaries a go test run needs (fairlead, fairlead-sim, the bench's clients) are built once for
// every test binary of the run: go test runs packages in parallel, each in its own process, so the
// builds go into a directory shared by all of them, named after the module's source (every file but
// the tests), and an flock on it makes the first process build while the others wait and then reuse.
// Built without the race detector: the processes under test run as in production; the test process
// carries -race. A later run with the same source reuses them too; directories unused for a day go.

var built struct {
	sync.Mutex
	dir  string            // this source state's directory, once known
	bins map[string]string // package → binary, built or found by this process
}

// buildRoot holds one directory per source state.
var buildRoot = filepath.Join(os.TempDir(), "fairlead-test-bin")

// Build returns the path of the main package pkg (a directory of the module: "cmd/fairlead",
// "bench/ha/client") built from the module's current source, building it if no test process has yet.
func Build(pkg string) (string, error) { return BuildFor(pkg, Target{}) }

// Target is what a binary is built for, when not for this machine as it is: another GOOS or GOARCH
// (empty: this test's), build tags.
type Target struct {
	GOOS, GOARCH string
	Tags         []string // -tags
}

// dir is the target's subdirectory of a package's builds: "" for the default, else "goos_goarch" with
// "_tag" for each tag.
func (tg Target) dir() string {
	if tg.GOOS == "" && tg.GOARCH == "" && len(tg.Tags) == 0 {
		return ""
	}
	goos, goarch := cmp.Or(tg.GOOS, runtime.GOOS), cmp.Or(tg.GOARCH, runtime.GOARCH)
	return strings.Join(append([]string{goos, goarch}, tg.Tags...), "_")
}

// BuildFor is Build for a target: cross-compiled (GOOS, GOARCH) or with build tags. A binary for
// another GOARCH runs here under an emulator (qemu-aarch64-static for arm64).
func BuildFor(pkg string, tg Target) (string, error) {
	built.Lock()
	defer built.Unlock()
	pkg = filepath.Clean(pkg)
	id := filepath.Join(pkg, tg.dir())
	if bin, ok := built.bins[id]; ok {
		return bin, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if built.dir == "" {
		key, err := sourceKey(root)
		if err != nil {
			return "", fmt.Errorf("testkit: hashing the source: %w", err)
		}
		pruneBuilds(key)
		built.dir = filepath.Join(buildRoot, key)
		if err := os.MkdirAll(built.dir, 0o777); err != nil {
			return "", fmt.Errorf("testkit: %w", err)
		}
		built.bins = map[string]string{}
	}
	bin := filepath.Join(built.dir, id, filepath.Base(pkg)) // named as go build names it
	if tg.GOOS == "windows" || tg.GOOS == "" && runtime.GOOS == "windows" {
		bin += ".exe"
	}
	lock, err := os.OpenFile(filepath.Join(built.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return "", fmt.Errorf("testkit: %w", err)
	}
	defer lock.Close()
	if err := lockFile(lock, true); err != nil {
		return "", fmt.Errorf("testkit: locking %s: %w", built.dir, err)
	}
	defer unlockFile(lock) //nolint:errcheck
	now := time.Now()
	os.Chtimes(built.dir, now, now) //nolint:errcheck // marks it as in use for pruneBuilds
	if _, err := os.Stat(bin); err != nil {
		if err := os.MkdirAll(filepath.Dir(bin), 0o777); err != nil {
			return "", fmt.Errorf("testkit: %w", err)
		}
		// Into a temporary name first: a build that fails or is killed leaves no binary to reuse.
		tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
		args := []string{"build", "-o", tmp}
		if len(tg.Tags) > 0 {
			args = append(args, "-tags", strings.Join(tg.Tags, ","))
		}
		cmd := exec.Command(goTool(), append(args, "./"+filepath.ToSlash(pkg))...)
		cmd.Dir = root
		cmd.Env = os.Environ()
		if tg.GOOS != "" {
			cmd.Env = append(cmd.Env, "GOOS="+tg.GOOS)
		}
		if tg.GOARCH != "" {
			cmd.Env = append(cmd.Env, "GOARCH="+tg.GOARCH)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp)
			return "", fmt.Errorf("testkit: go build %s: %v\n%s", pkg, err, out)
		}
		if err := os.Rename(tmp, bin); err != nil {
			return "", fmt.Errorf("testkit: %w", err)
		}
	}
	built.bins[id] = bin
	return bin, nil
}

// Binary is Build for a test: it fails t when the build fails.
func Binary(t TB, pkg string) string {
	t.Helper()
	bin, err := Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ModuleRoot is the directory holding the module's go.mod, found upwards from the working directory
// (a test runs in its package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testkit: no go.mod above the working directory")
		}
		dir = parent
	}
}

// goTool is the go command: the one on PATH, else the one of the toolchain this test was built with.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// sourceKey hashes what a build depends on: every file of the module except tests, test data and
// hidden directories (Go files, go.mod and go.sum, embedded files), the toolchain and the build's
// environment.
func sourceKey(root string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH, os.Getenv("GOFLAGS"), os.Getenv("CGO_ENABLED"))
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "\x00%s\x00", rel)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// pruneBuilds removes the directories of other source states that no test used for a day.
func pruneBuilds(keep string) {
	ents, _ := os.ReadDir(buildRoot)
	for _, e := range ents {
		if e.Name() == keep || !e.IsDir() {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(buildRoot, e.Name()))
		}
	}
}
