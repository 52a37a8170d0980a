package healthcheck

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Issue 36: what a probe got instead of an answer is said without the HTTP library's names, and a
// timeout says how long it waited.
func TestProbeErrorsNameNoLibraryAndATimeoutItsLength(t *testing.T) {
	for _, c := range []struct {
		err     error
		timeout time.Duration
		want    string
	}{
		{fasthttp.ErrTimeout, 2 * time.Second, "no answer: timed out after 2s"},
		{fasthttp.ErrDialTimeout, 300 * time.Millisecond, "no answer: timed out after 300ms"},
		{fasthttp.ErrTimeout, 0, "no answer: timed out"},
		{fasthttp.ErrConnectionClosed, time.Second, "no answer: the server closed the connection"},
		{errors.New("fasthttp: something new"), time.Second, "something new"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), time.Second, "dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		got := probeError(c.err, c.timeout).Error()
		if got != c.want || strings.Contains(got, "fasthttp") {
			t.Errorf("probeError(%q, %s) = %q, want %q", c.err, c.timeout, got, c.want)
		}
	}
}
