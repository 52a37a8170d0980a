package frontend

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/valyala/fasthttp"
)

// secretHead is a request head cut in its middle, with credentials in it: what fasthttp quotes in its
// lines about a head it could not read.
const secretHead = "GET /Thingworx/Things HTTP/1.1\r\nHost: x\r\nAuthorization: Basic c2VjcmV0OnBhc3M=\r\nappKey: 11111111-2222"

// secretMarks are bytes of secretHead that no log line may hold.
var secretMarks = []string{"c2VjcmV0", "appKey", "11111111", "Authorization", "Thingworx/Things", `\r\n`, "contents"}

// testConnErrors returns connErrors logging text lines at level into the returned buffer.
func testConnErrors(what string, level slog.Level) (*ConnErrors, *testkit.SyncBuffer) {
	buf := &testkit.SyncBuffer{}
	return NewConnErrors(what, slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))), buf
}

func TestConnectionErrorKindsAreDerivedFromTheError(t *testing.T) {
	f := func(name string, err error, want ConnKind, wantOK bool) {
		t.Helper()
		got, ok := connKindOf(err)
		if got != want || ok != wantOK {
			t.Errorf("%s: got %s %v, want %s %v", name, got, ok, want, wantOK)
		}
	}
	opErr := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Err: &os.SyscallError{Syscall: op, Err: err}}
	}
	// fasthttp wraps the errors of a head it could not read with %w.
	head := func(err error) error {
		return fmt.Errorf("error when reading request headers: %w: buffer size=101", err)
	}
	f("EOF in a head", head(io.EOF), ConnClosed, true)
	f("unexpected EOF in a body", io.ErrUnexpectedEOF, ConnClosed, true)
	f("reset in a head", head(opErr("read", syscall.ECONNRESET)), ConnReset, true)
	f("broken pipe", opErr("write", syscall.EPIPE), ConnReset, true)
	f("aborted", opErr("read", syscall.ECONNABORTED), ConnReset, true)
	f("read timeout", head(opErr("read", os.ErrDeadlineExceeded)), ConnTimeout, true)
	f("fasthttp timeout", fasthttp.ErrTimeout, ConnTimeout, true)
	f("header_timeout", &Refusal{408, "request header timeout"}, ConnTimeout, true)
	f("framer refusal", head(badRequest("invalid chunk extension")), ConnRefused, true)
	f("too large", errHeadTooLarge, ConnRefused, true)
	f("something else", errors.New("cannot find http request method"), ConnOther, true)
	f("closed by fairlead", opErr("read", net.ErrClosed), 0, false)
	f("no error", nil, 0, false)
}

// 200 errors of a kind in a burst make one line; the next line, connLogEvery later, says how many were
// held back. Each kind has its own budget.
func TestConnectionErrorLinesAreRateLimitedPerKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, buf := testConnErrors("frontend", slog.LevelDebug)
		client := &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 40000}
		for range 200 {
			e.note(ConnClosed, client)
		}
		e.note(ConnReset, client)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("200 closed and 1 reset made %d lines, want 2:\n%s", len(lines), buf)
		}
		for _, want := range []string{`level=DEBUG msg="frontend: connection error" kind=closed client=203.0.113.7 suppressed=0`,
			`level=DEBUG msg="frontend: connection error" kind=reset client=203.0.113.7 suppressed=0`} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("no line %q in:\n%s", want, buf)
			}
		}
		time.Sleep(connLogEvery - time.Millisecond)
		e.note(ConnClosed, client)
		if n := strings.Count(buf.String(), "kind=closed"); n != 1 {
			t.Fatalf("before connLogEvery passed: %d closed lines, want 1", n)
		}
		time.Sleep(time.Millisecond)
		e.note(ConnClosed, client)
		if !strings.Contains(buf.String(), "kind=closed client=203.0.113.7 suppressed=200") {
			t.Errorf("the line after connLogEvery does not count the 200 held back:\n%s", buf)
		}
		if got := e.count[ConnClosed].Load(); got != 202 {
			t.Errorf("counted %d closed, want 202", got)
		}
	})
}

// At INFO no line is written, and nothing is rate-limited: the errors are only counted.
func TestConnectionErrorsAtInfoAreOnlyCounted(t *testing.T) {
	e, buf := testConnErrors("frontend", slog.LevelInfo)
	for range 10 {
		e.note(ConnClosed, nil)
	}
	if buf.String() != "" || e.count[ConnClosed].Load() != 10 {
		t.Fatalf("count %d, log %q; want 10 and nothing", e.count[ConnClosed].Load(), buf)
	}
}

// Every line fasthttp's server can log is counted or dropped without a byte of what it passes; accept
// errors and the connection limit are WARN lines even at INFO.
func TestFasthttpLinesNeverPrintWhatFasthttpPasses(t *testing.T) {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	remote := &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 40000}
	served := fmt.Errorf("error when reading request headers: %w: buffer size=101, contents: %q", io.EOF, secretHead)
	check := func(name string, buf *testkit.SyncBuffer) {
		t.Helper()
		for _, m := range secretMarks {
			if strings.Contains(buf.String(), m) {
				t.Errorf("%s: the log holds %q:\n%s", name, m, buf)
			}
		}
	}

	// The front end notes its connections' errors where they happen: fasthttp's line is dropped.
	front, buf := testConnErrors("frontend", slog.LevelDebug)
	fl := fasthttpLogger{errs: front, front: true}
	fl.Printf("error when serving connection %q<->%q: %v", local, remote, served)
	if buf.String() != "" || front.count[ConnClosed].Load() != 0 {
		t.Errorf("front end: a serving error was logged or counted: %q", buf)
	}
	// Unknown formats (a RequestCtx.Logger line quotes the request URI) are "other", by format only.
	fl.Printf("%.3f %s - %s", 0.5, "#0000000000000001 - 127.0.0.1:8080<->203.0.113.7:40000 - GET http://x/Thingworx/Things?appKey=11111111", "c2VjcmV0")
	fl.Printf("WARNING: Request.Body() reads the entire stream into memory.")
	if got := front.count[ConnOther].Load(); got != 2 {
		t.Errorf("unknown formats: counted %d other, want 2", got)
	}
	if !strings.Contains(buf.String(), `kind=other detail="fasthttp: %.3f %s - %s"`) {
		t.Errorf("no line naming the unknown format:\n%s", buf)
	}
	check("front end", buf)

	// The admin listener's errors are classified from fasthttp's line.
	admin, buf := testConnErrors("admin", slog.LevelDebug)
	al := fasthttpLogger{errs: admin}
	al.Printf("error when serving connection %q<->%q: %v", local, remote, served)
	if want := `level=DEBUG msg="admin: connection error" kind=closed client=203.0.113.7 suppressed=0`; !strings.Contains(buf.String(), want) {
		t.Errorf("admin: no line %q in:\n%s", want, buf)
	}
	check("admin", buf)

	// Accept errors and the connection limit: WARN, at INFO too.
	warn, buf := testConnErrors("frontend", slog.LevelInfo)
	wl := fasthttpLogger{errs: warn, front: true}
	wl.Printf("Permanent error when accepting new connections: %v", &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE})
	wl.Printf("The incoming connection cannot be served, because %d concurrent connections are served. "+
		"Try increasing Server.Concurrency", 20000)
	for _, want := range []string{`level=WARN msg="frontend: accepting a connection failed" kind=accept detail="accept tcp: too many open files"`,
		`level=WARN msg="frontend: connection limit reached: new connections are refused" kind=limit detail="20000 connections open"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no line %q in:\n%s", want, buf)
		}
	}
	if warn.count[ConnAccept].Load() != 1 {
		t.Errorf("accept errors: counted %d, want 1", warn.count[ConnAccept].Load())
	}
}
