package testkit

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct{ fatal string }

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatal(args ...any)                 { f.fatal = fmt.Sprint(args...) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	var tb fakeTB
	Eventually(&tb, "the third look", 10*time.Second, func() bool { n++; return n == 3 })
	if tb.fatal != "" || n != 3 {
		t.Fatalf("looked %d times, failure %q; want 3 looks and no failure", n, tb.fatal)
	}
}

func TestEventuallyFailsNamingWhatItWaitedFor(t *testing.T) {
	var tb fakeTB
	Eventually(&tb, "the moon to turn blue", 30*time.Millisecond, func() bool { return false })
	if !strings.Contains(tb.fatal, "timed out after 30ms waiting for the moon to turn blue") {
		t.Fatalf("failure %q", tb.fatal)
	}
}

func TestWithinLooksAtLeastOnceEvenWithNoTime(t *testing.T) {
	if !Within(0, func() bool { return true }) {
		t.Fatal("a condition that holds at once is not seen with a zero timeout")
	}
	if Within(0, func() bool { return false }) {
		t.Fatal("a condition that never holds is reported as met")
	}
}
