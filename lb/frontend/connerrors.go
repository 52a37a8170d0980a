package frontend

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Connection errors. fasthttp logs a line for a client connection that ends with an error, and a line
// for a request head it could not read quotes the bytes it had buffered: a client that closes in the
// middle of its head would put its Authorization header or appKey in the log, one line per connection.
// So fasthttp's lines never reach the log. Each connection error is counted by kind instead
// (fairlead_frontend_connection_errors_total{kind}) where it happens, and logged as its kind and the
// client's address only, one line per kind every connLogEvery at most, with the number of lines held
// back since: at DEBUG for the clients' faults, at WARN for what is fairlead's own trouble (accept errors,
// the connection limit).
//
// Where each front-end error is noted, once per connection (frontConn.noteError):
//
//	closed, reset, timeout   frontConn.Read, a read that fails in the middle of a request (head or body);
//	                         frontConn.Write, a write that fails before the connection was handed to a
//	                         tunnel or a relay stream
//	refused                  frontConn.fail, the framer's refusals (also counted by status in
//	                         fairlead_bad_requests_total), and Front.ErrorHandler, fasthttp's own
//	                         refusals of what it could not read; a head that does not arrive within
//	                         header_timeout is a timeout
//	tls                      frontConn.handshake, a failed handshake (fairlead_tls_handshake_failures_total)
//	limit                    fasthttp's count of connections refused over max_conns (lb adds
//	                         Server.GetRejectedConnectionsCount to Count(ConnLimit))
//	proxy_missing,           proxyRead.read (proxyproto.go, proxyErrKind), a proxy_protocol sender's
//	proxy_malformed,         connection without a PROXY header (within header_timeout), with a malformed
//	timeout                  or cut-off one, or one that stalled past header_timeout half-way
//	accept, other            fasthttp's lines about accepting, and any line whose format fairlead does
//	                         not know (its arguments are never printed)
//
// A keep-alive connection that the client closes, resets or leaves idle between requests is not an
// error, nor is a connection that ends before its first byte (fasthttp reads any error there as the end
// of the connection: a port probe, a browser's unused preconnection).

// ConnKind is the kind of a connection error, the kind label of the counter.
type ConnKind uint8

const (
	ConnClosed         ConnKind = iota // the client closed the connection in the middle of a request
	ConnReset                          // the connection was reset (or broke while fairlead wrote to it)
	ConnTimeout                        // read_timeout or header_timeout passed in the middle of a request (or of a PROXY header)
	ConnTLS                            // the TLS handshake failed
	ConnRefused                        // the front end refused a request it could not read or would not forward
	ConnLimit                          // over the connection limit, refused with 503 at accept
	ConnAccept                         // accepting a connection failed (out of file descriptors, say)
	ConnOther                          // anything else
	ConnProxyMissing                   // a proxy_protocol sender's connection without a PROXY header (in header_timeout)
	ConnProxyMalformed                 // a proxy_protocol sender's connection with a malformed PROXY header
	NumConnKinds
)

var connKindNames = [NumConnKinds]string{"closed", "reset", "timeout", "tls", "refused", "limit", "accept", "other", "proxy_missing", "proxy_malformed"}

func (k ConnKind) String() string { return connKindNames[k] }

// connKindOf is the kind of a failed read or write (a frame error is refused, or a timeout for
// header_timeout). It returns ok false for the errors of a connection fairlead closed itself.
func connKindOf(err error) (k ConnKind, ok bool) {
	var fe *Refusal
	switch {
	case err == nil || errors.Is(err, net.ErrClosed):
		return 0, false
	case errors.As(err, &fe):
		if fe.Status == 408 {
			return ConnTimeout, true
		}
		return ConnRefused, true
	case isTimeout(err):
		return ConnTimeout, true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ConnClosed, true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return ConnReset, true
	}
	return ConnOther, true
}

// connLogEvery is the least time between two log lines of one kind of connection error.
const connLogEvery = 10 * time.Second

// ConnErrors counts the connection errors of one server (the front end's or the admin's) by kind and
// logs them, rate-limited. Safe for concurrent use.
type ConnErrors struct {
	what  string // "frontend" or "admin", the lines' prefix
	log   *slog.Logger
	count [NumConnKinds]atomic.Uint64
	lines [NumConnKinds]logLimiter
}

// NewConnErrors returns the connection errors of a server called what ("frontend", "admin": the
// prefix of the log lines), logged to log.
func NewConnErrors(what string, log *slog.Logger) *ConnErrors {
	return &ConnErrors{what: what, log: log}
}

// Count is the number of errors of kind k so far.
func (e *ConnErrors) Count(k ConnKind) uint64 { return e.count[k].Load() }

// Logger returns the fasthttp.Server.Logger of a server whose connection errors e counts: fasthttp's
// lines about them are counted and logged, rate-limited, without a byte of what fasthttp passes. The
// front end's server takes Front.Logger instead.
func (e *ConnErrors) Logger() fasthttp.Logger { return fasthttpLogger{errs: e} }

// Logger returns the front end's fasthttp.Server.Logger: its connections note their errors where they
// happen, so fasthttp's lines about them are dropped; its other lines are counted and logged like
// ConnErrors.Logger's.
func (f *Front) Logger() fasthttp.Logger { return fasthttpLogger{errs: f.Errors, front: true} }

// note counts an error of kind k of a connection from client (nil: none) and logs it, rate-limited.
func (e *ConnErrors) note(k ConnKind, client net.Addr) {
	e.count[k].Add(1)
	e.logLine(k, client, "")
}

// logLine writes the line of an error of kind k unless one of its kind was written less than
// connLogEvery ago. detail is what an accept error or the connection limit says (never request data).
func (e *ConnErrors) logLine(k ConnKind, client net.Addr, detail string) {
	level, msg := slog.LevelDebug, e.what+": connection error"
	switch k {
	case ConnAccept:
		level, msg = slog.LevelWarn, e.what+": accepting a connection failed"
	case ConnLimit:
		level, msg = slog.LevelWarn, e.what+": connection limit reached: new connections are refused"
	}
	ctx := context.Background()
	if !e.log.Enabled(ctx, level) {
		return // the fast path: only the counter
	}
	held, ok := e.lines[k].allow(time.Now())
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("kind", k.String())}
	if a, ok := client.(*net.TCPAddr); ok {
		attrs = append(attrs, slog.String("client", a.IP.String()))
	}
	if detail != "" {
		attrs = append(attrs, slog.String("detail", detail))
	}
	attrs = append(attrs, slog.Uint64("suppressed", held))
	e.log.LogAttrs(ctx, level, msg, attrs...)
}

// logLimiter lets one line through every connLogEvery and counts the ones it holds back.
type logLimiter struct {
	mu   sync.Mutex
	next time.Time // when the next line may be written
	held uint64    // lines held back since the last one written
}

// allow reports whether a line may be written at now and, if so, how many were held back before it.
func (l *logLimiter) allow(now time.Time) (held uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.held++
		return 0, false
	}
	held, l.held, l.next = l.held, 0, now.Add(connLogEvery)
	return held, true
}

// fasthttpLogger is the Logger of fairlead's fasthttp servers. It never prints what fasthttp passes: a
// line it knows becomes a counted, rate-limited connection error; any other is counted as "other" and
// logged by its format only. For the front end, the errors of connections are noted where they happen
// (frontConn, frontendError) and fasthttp's line about them is dropped.
type fasthttpLogger struct {
	errs  *ConnErrors
	front bool
}

// The beginnings of the formats fasthttp's server logs with (v1.79.0: workerpool.go, server.go).
const (
	fasthttpServeError    = "error when serving connection "                 // %q<->%q: %v (local, remote, error)
	fasthttpConcurrency   = "The incoming connection cannot be served"       // over Server.Concurrency, at most once a minute
	fasthttpAcceptTimeout = "Timeout error when accepting new connections"   // %v
	fasthttpAcceptError   = "Permanent error when accepting new connections" // %v; Serve returns
	fasthttpPerIP         = "The number of connections from "                // MaxConnsPerIP (unused)
)

func (l fasthttpLogger) Printf(format string, args ...any) {
	switch {
	case strings.HasPrefix(format, fasthttpServeError):
		if l.front {
			return
		}
		var client net.Addr
		var err error
		if len(args) == 3 {
			client, _ = args[1].(net.Addr)
			err, _ = args[2].(error)
		}
		if k, ok := connKindOf(err); ok {
			l.errs.note(k, client)
		}
	case strings.HasPrefix(format, fasthttpConcurrency):
		// The refused connections are counted by fasthttp (Server.GetRejectedConnectionsCount).
		var detail string
		if len(args) == 1 {
			if n, ok := args[0].(int); ok {
				detail = strconv.Itoa(n) + " connections open"
			}
		}
		l.errs.logLine(ConnLimit, nil, detail)
	case strings.HasPrefix(format, fasthttpPerIP):
		l.errs.logLine(ConnLimit, nil, "")
	case strings.HasPrefix(format, fasthttpAcceptTimeout), strings.HasPrefix(format, fasthttpAcceptError):
		var detail string
		if len(args) == 1 {
			if err, ok := args[0].(error); ok {
				detail = err.Error() // the listener's error: no request data
			}
		}
		l.errs.count[ConnAccept].Add(1)
		l.errs.logLine(ConnAccept, nil, detail)
	default:
		l.errs.count[ConnOther].Add(1)
		l.errs.logLine(ConnOther, nil, "fasthttp: "+format)
	}
}
