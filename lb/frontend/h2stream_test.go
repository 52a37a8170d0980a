package frontend

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/frontend/frontendtest"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
)

// A streamed answer (StreamAnswer, what a relay's SSE subscriber over HTTP/2 is): its head as the
// handler left it, each write as DATA as it is written, its end when its writer returns; its writer told
// (Done) when the client resets the stream, closes the connection, or the server drains; a client that
// keeps its window shut fails the write at its deadline and the stream is reset. Raw frames, against a
// handler whose writer the test feeds.

// streamed is one streamed answer's writer as the test drives it: each feed is written (with a write
// deadline of timeout), a closed feed ends it; exit says why it returned: "end", "done" (Done closed),
// "deadline" (a write past its deadline) or the write's error.
type streamed struct {
	feed    chan string
	exit    chan string
	timeout time.Duration
}

// startStreamFront serves streamed answers on "/events" (each sent on streams), the trivial handler on
// the rest.
func startStreamFront(t *testing.T, o frontOptions, timeout time.Duration) (*testFront, chan *streamed) {
	streams := make(chan *streamed, 8)
	o.handle = func(ctx *fasthttp.RequestCtx) bool {
		if string(ctx.Path()) != "/events" {
			return false
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.Response.Header.SetContentType("text/event-stream")
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		st := &streamed{feed: make(chan string), exit: make(chan string, 1), timeout: timeout}
		if !StreamAnswer(ctx, func(a *AnswerStream) { st.exit <- st.run(a) }) {
			t.Error("StreamAnswer refused an HTTP/2 stream's request")
			return false
		}
		streams <- st
		return true
	}
	return startFront(t, o), streams
}

func (st *streamed) run(a *AnswerStream) string {
	for {
		select {
		case b, ok := <-st.feed:
			if !ok {
				return "end"
			}
			a.SetWriteDeadline(time.Now().Add(st.timeout)) //nolint:errcheck
			if _, err := a.Write([]byte(b)); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return "deadline"
				}
				return err.Error()
			}
		case <-a.Done():
			return "done"
		}
	}
}

// next takes the next streamed answer the handler started.
func next(t *testing.T, streams chan *streamed) *streamed {
	t.Helper()
	select {
	case st := <-streams:
		return st
	case <-time.After(frontendtest.AnswerWait):
		t.Fatal("the handler started no streamed answer")
		return nil
	}
}

// exited waits for the writer's return and checks why.
func (st *streamed) exited(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-st.exit:
		if got != want {
			t.Errorf("the writer returned for %q, want %q", got, want)
		}
	case <-time.After(frontendtest.AnswerWait):
		t.Fatalf("the writer is still running, want it to return for %q", want)
	}
}

func getEvents(addr string) []string {
	return []string{":method", "GET", ":scheme", "https", ":authority", addr, ":path", "/events", "accept", "text/event-stream"}
}

// dataOf reads frames until DATA (or the end) of stream; "" and false when the stream or connection ended.
func dataOf(r *frontendtest.H2Conn, stream uint32) (data string, end bool) {
	f := r.Next(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			return f.StreamID == stream
		case *http2.RSTStreamFrame:
			return f.StreamID == stream
		}
		return false
	})
	if d, ok := f.(*http2.DataFrame); ok {
		return string(d.Data()), d.StreamEnded()
	}
	return "", true
}

func TestH2AStreamedAnswerGoesOutAsWrittenAndEndsWithItsWriter(t *testing.T) {
	tf, streams := startStreamFront(t, frontOptions{}, 5*time.Second)
	r := tf.dialH2(t)
	r.Headers(1, true, getEvents(tf.tlsAddr)...)
	st := next(t, streams)
	for _, ev := range []string{"data: one\n\n", "data: two\n\n"} {
		st.feed <- ev // each goes out before the next is written
		if got, end := dataOf(r, 1); got != ev || end {
			t.Fatalf("DATA %q (END_STREAM %v), want %q as it was written", got, end, ev)
		}
	}
	fields := map[string]string{}
	for _, f := range r.LastFields() {
		fields[f.Name] = f.Value
	}
	if fields[":status"] != "200" || fields["content-type"] != "text/event-stream" || fields["cache-control"] != "no-cache" || fields["content-length"] != "" {
		t.Errorf("the head: %v, want 200, text/event-stream, no-cache, no content-length", fields)
	}
	close(st.feed)
	st.exited(t, "end")
	if got, end := dataOf(r, 1); got != "" || !end {
		t.Errorf("after the writer returned: DATA %q (END_STREAM %v), want an empty END_STREAM", got, end)
	}
	// The connection serves on.
	r.Headers(3, true, get(tf.tlsAddr, "/after")...)
	if got := r.Outcome(3); got != "200" {
		t.Errorf("a stream after the streamed answer: %s, want 200", got)
	}
}

func TestH2AStreamedAnswersWriterIsToldWhenTheClientResetsOrGoesAway(t *testing.T) {
	tf, streams := startStreamFront(t, frontOptions{}, 5*time.Second)
	r := tf.dialH2(t)
	r.Headers(1, true, getEvents(tf.tlsAddr)...)
	r.Headers(3, true, getEvents(tf.tlsAddr)...)
	first, second := next(t, streams), next(t, streams)
	r.Fr.WriteRSTStream(1, http2.ErrCodeCancel) //nolint:errcheck
	// Which of the two is stream 1 is the handler's order: the reset one's writer returns, the other's not.
	var reset, open *streamed
	select {
	case why := <-first.exit:
		reset, open = first, second
		first.exit <- why
	case why := <-second.exit:
		reset, open = second, first
		second.exit <- why
	case <-time.After(frontendtest.AnswerWait):
		t.Fatal("no writer returned after the client reset its stream")
	}
	reset.exited(t, "done")
	open.feed <- "data: still\n\n"
	if got, _ := dataOf(r, 3); got != "data: still\n\n" {
		t.Fatalf("the stream left open after the other's reset: DATA %q", got)
	}
	r.Conn.Close()
	open.exited(t, "done")
	testkit.Eventually(t, "no streamed answer's goroutine left", 5*time.Second, func() bool {
		for _, g := range testkit.Goroutines() {
			if strings.Contains(g, "frontend.(*h2stream).runAnswer") {
				return false
			}
		}
		return true
	})
}

func TestH2AStreamedAnswerEndsWhenTheServerDrains(t *testing.T) {
	tf, streams := startStreamFront(t, frontOptions{}, 5*time.Second)
	r := tf.dialH2(t)
	r.Headers(1, true, getEvents(tf.tlsAddr)...)
	st := next(t, streams)
	go tf.h2.Shutdown()
	if got := r.GoAwayCode(); got != "NO_ERROR" {
		t.Errorf("at Shutdown: %s, want GOAWAY NO_ERROR", got)
	}
	st.exited(t, "done")
	if res := r.Result(1); res.Reset != "" || res.Closed {
		t.Errorf("the streamed answer at Shutdown: %s, want its END_STREAM", res)
	}
	r.WaitClosed(r.WatchClose(), "Shutdown, once its streamed answer ended")
}

// A client that keeps its window shut: the write waits for it up to its deadline, then fails, and the
// stream is reset (CANCEL); nothing past the window was sent.
func TestH2AStreamedAnswerWhoseClientDoesNotReadIsResetAtTheWriteDeadline(t *testing.T) {
	tf, streams := startStreamFront(t, frontOptions{}, 300*time.Millisecond)
	r := tf.dialH2(t)
	const window = 10
	r.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}) //nolint:errcheck
	r.Headers(1, true, getEvents(tf.tlsAddr)...)
	st := next(t, streams)
	st.feed <- strings.Repeat("x", 100)
	st.exited(t, "deadline")
	res := r.Result(1)
	if res.Reset != "CANCEL" || len(res.Body) != window {
		t.Errorf("%s after %d bytes, want RST_STREAM CANCEL after the %d the window allows", res, len(res.Body), window)
	}
}
