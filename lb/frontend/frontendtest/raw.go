package frontendtest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

const (
	// AnswerWait bounds the wait for an answer to a request.
	AnswerWait = 3 * time.Second
	// CloseWait bounds the wait for the server to close a connection after its answer.
	CloseWait = time.Second
)

// Answer is what a client saw of one answer on a raw HTTP/1.1 connection.
type Answer struct {
	Status int         // 0 when no answer could be read
	Line   string      // the status line ("" when no answer)
	Header http.Header // the answer's headers (nil when no answer)
	Body   []byte
	Raw    []byte // every byte read for this answer, head and body
	Closed bool   // the server closed the connection (EOF or reset) after the answer, within the wait
	Err    error  // why no (complete) answer was read, nil if one was
	// After is what the close check read instead of the end: bytes the server sent after the answer, or
	// the timeout error when the connection stayed open.
	After string
}

func (r Answer) String() string {
	if r.Status == 0 {
		return fmt.Sprintf("no answer (%v), closed=%v", r.Err, r.Closed)
	}
	s := fmt.Sprintf("%q closed=%v", r.Line, r.Closed)
	if by := r.Header.Get("X-Served-By"); by != "" {
		s += " X-Served-By=" + by
	}
	if b := strings.TrimSpace(string(r.Body)); b != "" {
		if len(b) > 120 {
			b = b[:120] + "…"
		}
		s += fmt.Sprintf(" body=%q", b)
	}
	if r.Err != nil {
		s += fmt.Sprintf(" err=%v", r.Err)
	}
	return s
}

// Conn is a raw HTTP/1.1 client connection: it sends bytes exactly as written and reads answers with
// deadlines.
type Conn struct{ *testkit.RawConn }

// Dial connects to addr (3 s at most); the connection closes with the test.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	return &Conn{testkit.DialRaw(t, addr, 3*time.Second)}
}

// WriteRaw sends raw in one write. A failed write is not fatal: the server may have answered and
// closed the connection already, which the answer shows.
func (c *Conn) WriteRaw(raw string) error { return c.Send(raw, AnswerWait) }

// Answer reads one answer, waiting at most wait for it (head and body), without waiting for a close.
func (c *Conn) Answer(wait time.Duration) Answer { return c.AnswerBy(time.Now().Add(wait)) }

// AnswerBy reads one answer, head and body, by deadline, without waiting for a close.
func (c *Conn) AnswerBy(deadline time.Time) Answer {
	var r Answer
	c.SetReadDeadline(deadline) //nolint:errcheck
	resp, err := http.ReadResponse(c.R, nil)
	if err != nil {
		r.Err, r.Closed, r.Raw = err, testkit.ClosedErr(err), c.Take()
		return r
	}
	r.Status, r.Header = resp.StatusCode, resp.Header
	r.Line = resp.Proto + " " + resp.Status
	r.Body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	r.Raw = c.Take()
	if err != nil {
		r.Err, r.Closed = fmt.Errorf("reading the body: %w", err), testkit.ClosedErr(err)
		return r
	}
	// A body delimited by the end of the connection: the server closed it.
	if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && r.Status >= 200 && r.Status != 204 && r.Status != 304 {
		r.Closed = true
	}
	return r
}

// AnswerAndClose reads one answer and then whether the server closes the connection within CloseWait.
func (c *Conn) AnswerAndClose() Answer {
	r := c.Answer(AnswerWait)
	if r.Status == 0 || r.Closed {
		return r
	}
	r.Closed, r.After = c.ClosedWithin(CloseWait)
	return r
}

// ExpectCut checks that a connection whose request body stopped arriving (sent at start) is cut
// about read_timeout after its last byte: a 408 and a close, or a close without an answer, within 5 s.
func (c *Conn) ExpectCut(t testing.TB, start time.Time) {
	t.Helper()
	r := c.AnswerBy(start.Add(5 * time.Second))
	took := time.Since(start)
	if r.Status != 0 && !r.Closed {
		r.Closed, r.After = c.ClosedWithin(CloseWait)
	}
	switch {
	case r.Status == 0 && r.Closed, r.Status == 408 && r.Closed:
		t.Logf("cut after %s: %s", took.Round(time.Millisecond), r)
	default:
		t.Errorf("got %s after %s; want the connection cut (408 or closed without an answer) about 1s after the last byte",
			r, took.Round(time.Millisecond))
	}
}

// Request sends raw on a new connection in one write and returns the answer, with whether the server
// closed the connection after it.
func Request(t testing.TB, addr, raw string) Answer {
	t.Helper()
	c := Dial(t, addr)
	if err := c.WriteRaw(raw); err != nil {
		t.Logf("write: %v", err)
	}
	return c.AnswerAndClose()
}

// AnswerTo sends raw on a new connection in one write and returns the answer, waiting at most wait,
// without waiting for a close.
func AnswerTo(t testing.TB, addr, raw string, wait time.Duration) Answer {
	t.Helper()
	c := Dial(t, addr)
	if err := c.WriteRaw(raw); err != nil {
		t.Logf("write: %v", err)
	}
	return c.Answer(wait)
}
