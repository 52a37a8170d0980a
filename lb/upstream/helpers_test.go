package upstream

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// eventually polls cond every 10ms until it holds, failing the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isTimeout reports a read or write that timed out (the proxy's classification of a timeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout()
}
