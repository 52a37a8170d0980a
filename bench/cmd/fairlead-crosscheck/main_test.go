package main

import (
	"strings"
	"testing"
)

// TestCheckFindsWhatAPlatformLacksInAPackageAndItsTests proves the errors go build and go vet would
// report on each platform are found: a package that uses syscall.Flock and whose test uses
// syscall.EpollCreate1 type-checks for linux/arm64, not for Windows (no Flock) nor macOS (no epoll).
func TestCheckFindsWhatAPlatformLacksInAPackageAndItsTests(t *testing.T) {
	for _, c := range []struct {
		goos, goarch string
		want         []string // substrings of the errors, in order; none: it type-checks
	}{
		{"linux", "arm64", nil},
		{"windows", "amd64", []string{"flock.go:10:", "undefined: syscall.Flock"}},
		{"darwin", "arm64", []string{"flock_test.go:8:", "undefined: syscall.EpollCreate1"}},
	} {
		n, errs, err := Check(c.goos, c.goarch, []string{"./testdata/flock"})
		if err != nil {
			t.Fatal(err)
		}
		if n < 50 { // the package, its test variant, and the standard library under them
			t.Errorf("%s/%s: %d packages checked", c.goos, c.goarch, n)
		}
		got := strings.Join(errs, "\n")
		if len(c.want) == 0 && len(errs) > 0 {
			t.Errorf("%s/%s: %s", c.goos, c.goarch, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s/%s: errors %q, want one with %q", c.goos, c.goarch, got, w)
			}
		}
	}
}
