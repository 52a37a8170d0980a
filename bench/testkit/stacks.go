package testkit

import (
	"runtime"
	"strings"
)

// Goroutines returns the stack of every goroutine of the process, one string each (runtime.Stack's
// text, split): how a test sees what is parked where when the code under test has no hook for it.
func Goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
