package frontend

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serveFront serves a fasthttp server answering 200 "ok" behind f's plain listener on 127.0.0.1, and
// returns its address. The server stops with the test.
func serveFront(t *testing.T, f *Front) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler:           func(ctx *fasthttp.RequestCtx) { ctx.WriteString("ok") }, //nolint:errcheck
		ErrorHandler:      f.ErrorHandler,
		Logger:            f.Logger(),
		StreamRequestBody: true,
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(f.Listener(ln)) }() //nolint:errcheck
	t.Cleanup(func() { srv.Shutdown(); <-done })                 //nolint:errcheck
	return ln.Addr().String()
}

// answers sends raw on a new connection, half-closes it and reads the answers until fairlead closes.
func answers(t *testing.T, addr, raw string) []int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	io.WriteString(c, raw)                         //nolint:errcheck
	c.(*net.TCPConn).CloseWrite()                  //nolint:errcheck
	var codes []int
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

// A listener's connections are checked: the requests before a malformed one are served, the malformed
// one gets its answer, the connection closes, and the refusal is counted by status and as the
// connection's error.
func TestAListenersConnectionServesTheRequestsBeforeARefusalThenAnswersItAndCountsIt(t *testing.T) {
	f := New(Limits{MaxHeader: 1024, MaxBody: 1024}, slog.New(slog.DiscardHandler))
	addr := serveFront(t, f)
	got := answers(t, addr, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n")
	if len(got) != 2 || got[0] != 200 || got[1] != 400 {
		t.Fatalf("answers %v, want [200 400]", got)
	}
	if n := f.RefusedTotal(400); n != 1 {
		t.Errorf("refused with 400: %d, want 1", n)
	}
	if n := f.Errors.Count(ConnRefused); n != 1 {
		t.Errorf("connection errors of kind refused: %d, want 1", n)
	}
}

// A head over max_header_size is 431, a Content-Length over max_body_size 413.
func TestAListenersConnectionRefusesWhatIsOverItsLimits(t *testing.T) {
	f := New(Limits{MaxHeader: 256, MaxBody: 16}, slog.New(slog.DiscardHandler))
	addr := serveFront(t, f)
	check := func(name, raw string, want int) {
		t.Helper()
		if got := answers(t, addr, raw); len(got) != 1 || got[0] != want {
			t.Errorf("%s: answers %v, want [%d]", name, got, want)
		}
		if n := f.RefusedTotal(want); n != 1 {
			t.Errorf("%s: refused with %d: %d, want 1", name, want, n)
		}
	}
	check("head too large", "GET / HTTP/1.1\r\nHost: x\r\nX-A: "+strings.Repeat("a", 300)+"\r\n\r\n", 431)
	check("body too large", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n01234567890123456", 413)
}
