package healthcheck

import (
	"errors"
	"net"
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
		{realDialError(t), time.Second, "no connection: connection refused"},
	} {
		got := probeError(c.err, c.timeout).Error()
		if got != c.want || strings.Contains(got, "fasthttp") {
			t.Errorf("probeError(%q, %s) = %q, want %q", c.err, c.timeout, got, c.want)
		}
	}
}

// realDialError is what fasthttp's client returns for a connection refused (a closed port).
func realDialError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &fasthttp.HostClient{Addr: addr}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/")
	err = c.DoTimeout(req, resp, time.Second)
	if err == nil {
		t.Fatal("a closed port answered")
	}
	return err
}
