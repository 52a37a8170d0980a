package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/bench/testkit"
)

// Tests of the upstream HTTP/1.1 client (client.go) against raw TCP servers on 127.0.0.1 that answer
// with exact bytes, so that every framing case (chunk extensions, trailers, interim answers, bodies that
// end when the server closes, malformed chunks) is the one written here and not what an HTTP library
// chose to send. The servers count what they see (connections accepted, request heads read, connections
// the client closed): reuse, retries and closes are asserted from the server's side.
//
// Waits are bounded (usWait) and the only sleeps are eventually's polls of an observable state.

// usOK is the plain small answer: buffered whole, keep-alive.
const usOK = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// usServer is a raw HTTP/1.1 server: each connection is served by handle in its own goroutine, and closed
// when handle returns.
type usServer struct {
	ln      net.Listener
	addr    string
	accepts atomic.Int32  // connections accepted
	open    atomic.Int32  // connections accepted whose handler has not returned
	maxOpen atomic.Int32  // the most connections open at once
	ended   chan int      // the number of each connection a read found closed by the client
	quit    chan struct{} // closed at the end of the test: held answers give up

	mu     sync.Mutex
	seen   []string // "METHOD /path[ body]" of every request read, in order
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// usPeer is one server connection as its handler sees it.
type usPeer struct {
	s   *usServer
	n   int // 1 for the first connection accepted
	c   net.Conn
	br  *bufio.Reader
	req fasthttp.Request // the last request read
}

func usStart(t *testing.T, handle func(p *usPeer)) *usServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &usServer{ln: ln, addr: ln.Addr().String(), ended: make(chan int, 100), quit: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.accepts.Add(1))
			open := s.open.Add(1)
			for m := s.maxOpen.Load(); open > m && !s.maxOpen.CompareAndSwap(m, open); m = s.maxOpen.Load() {
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return
			}
			s.conns = append(s.conns, c)
			s.wg.Add(1)
			s.mu.Unlock()
			go func() {
				defer s.wg.Done()
				handle(&usPeer{s: s, n: n, c: c, br: bufio.NewReader(c)})
				s.open.Add(-1)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		close(s.quit)
		ln.Close()
		s.mu.Lock()
		s.closed = true
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// next reads the next request, head and body. It returns false when the client closed the connection
// (or sent something unreadable), and reports the connection on ended.
func (p *usPeer) next() bool {
	p.req.Reset()
	if err := p.req.Read(p.br); err != nil {
		select {
		case p.s.ended <- p.n:
		default:
		}
		return false
	}
	line := string(p.req.Header.Method()) + " " + string(p.req.RequestURI())
	if b := p.req.Body(); len(b) > 0 {
		line += " " + string(b)
	}
	p.s.mu.Lock()
	p.s.seen = append(p.s.seen, line)
	p.s.mu.Unlock()
	return true
}

func (p *usPeer) path() string { return string(p.req.URI().Path()) }

// write sends raw bytes; an error is ignored (the client may have gone, which the test checks otherwise).
func (p *usPeer) write(s string) { p.c.Write([]byte(s)) } //nolint:errcheck

// hold waits until release is closed (or the test ends). A nil release holds until the end of the test.
func (p *usPeer) hold(release <-chan struct{}) {
	select {
	case <-release:
	case <-p.s.quit:
	}
}

// requests returns the requests the server read, in order.
func (s *usServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// wantAccepts fails the test unless the server accepted n connections.
func (s *usServer) wantAccepts(t *testing.T, n int) {
	t.Helper()
	if got := int(s.accepts.Load()); got != n {
		t.Fatalf("the server accepted %d connections, want %d (requests: %q)", got, n, s.requests())
	}
}

// wantRequests fails the test unless the server read exactly these requests, in order.
func (s *usServer) wantRequests(t *testing.T, want ...string) {
	t.Helper()
	if got := s.requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the server read %q, want %q", got, want)
	}
}

// wantEnded waits until a read of the server finds connection n closed by the client.
func (s *usServer) wantEnded(t *testing.T, n int) {
	t.Helper()
	select {
	case got := <-s.ended:
		if got != n {
			t.Fatalf("the client closed connection %d, want %d", got, n)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the client did not close connection %d within 5s", n)
	}
}

// wantEndedAny waits until reads of the server find n connections closed by the client, in any order.
func (s *usServer) wantEndedAny(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-s.ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("the client closed %d connections within 5s, want %d", i, n)
		}
	}
}

// usAnswers serves every request of every connection with the answer for its path (usOK for others).
func usAnswers(answers map[string]string) func(p *usPeer) {
	return func(p *usPeer) {
		for p.next() {
			a, ok := answers[p.path()]
			if !ok {
				a = usOK
			}
			p.write(a)
		}
	}
}

// usHolding answers every request "ok", each one on path (every one if path is "") only once
// release is closed.
func usHolding(release <-chan struct{}, path string) func(p *usPeer) {
	return func(p *usPeer) {
		for p.next() {
			if path == "" || p.path() == path {
				p.hold(release)
			}
			p.write(usOK)
		}
	}
}

// usTwoAtOnce sends two GETs of /held, which the server holds until release is closed, so
// that both are at the server at once (two connections), then releases them and checks both
// answers: the client then has two idle connections of the same age.
func usTwoAtOnce(t *testing.T, u *Client, s *usServer, release chan struct{}) {
	t.Helper()
	a, b := usGo(u, fasthttp.MethodGet, "/held"), usGo(u, fasthttp.MethodGet, "/held")
	testkit.Eventually(t, "2 requests at the server", 5*time.Second, func() bool { return len(s.requests()) == 2 })
	close(release)
	usWantOK(t, a, "ok")
	usWantOK(t, b, "ok")
}

// usClient returns a client of the server, dialling within 5s, with reads and writes bounded by a 5s
// response timeout; it is retired at the end of the test.
// usAnswering starts a server that answers path with answer (raw bytes) and anything else usOK, and a
// client of it (4 connections, 1 s queue).
func usAnswering(t *testing.T, path, answer string) (*usServer, *Client) {
	s := usStart(t, func(p *usPeer) {
		for p.next() {
			if p.path() == path {
				p.write(answer)
			} else {
				p.write(usOK)
			}
		}
	})
	return s, usClient(t, s, 4, time.Second)
}

func usClient(t *testing.T, s *usServer, maxConns int, queueTimeout time.Duration) *Client {
	t.Helper()
	return usClientOpts(t, s.addr, Options{MaxConns: maxConns, QueueTimeout: queueTimeout, ResponseTimeout: 5 * time.Second})
}

// usClientOpts returns a client of the server at addr with these options, dialling within 5s.
func usClientOpts(t *testing.T, addr string, o Options) *Client {
	t.Helper()
	u := New(Dialer{Addr: addr, Timeout: 5 * time.Second}, o)
	t.Cleanup(u.Retire)
	return u
}

// usRequest returns a request to the upstream's server; the caller releases it.
func usRequest(u *Client, method, path, body string) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(method)
	req.SetRequestURI("http://" + u.addr + path)
	if body != "" {
		req.SetBodyString(body)
	}
	return req
}

// usDo sends method path (with body unless empty) and reads the answer's head into resp.
func usDo(u *Client, method, path, body string, resp *fasthttp.Response) error {
	req := usRequest(u, method, path, body)
	defer fasthttp.ReleaseRequest(req)
	return u.Do(usOutbound(req), resp)
}

// usOutbound is req as the proxy sends it: a head with its method, path, Host and framing, and its body
// (in memory, or a stream of known length).
func usOutbound(req *fasthttp.Request) *Request {
	out := &Request{Req: req}
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n", req.Header.Method(), req.URI().RequestURI(), req.URI().Host())
	var n int
	if req.IsBodyStream() {
		n = req.Header.ContentLength()
	} else {
		n = len(req.Body())
	}
	if n > 0 {
		head += fmt.Sprintf("Content-Length: %d\r\n", n)
		out.Framing = BodyLength
	}
	out.Head = []byte(head + "\r\n")
	return out
}

// usBody returns a copy of resp's body: a streamed one is read to its end (or its error) and closed, as
// fasthttp's server does once it has written it to the client.
func usBody(resp *fasthttp.Response) ([]byte, error) {
	if s := resp.BodyStream(); s != nil {
		b, err := io.ReadAll(s)
		if cerr := resp.CloseBodyStream(); err == nil {
			err = cerr
		}
		return b, err
	}
	return bytes.Clone(resp.Body()), nil
}

// usGet does a GET that must answer 200 with want.
func usGet(t *testing.T, u *Client, path, want string) {
	t.Helper()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := usDo(u, fasthttp.MethodGet, path, "", resp); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, err := usBody(resp)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK || string(body) != want {
		t.Fatalf("GET %s: %d %q, want 200 %q", path, resp.StatusCode(), body, want)
	}
}

// usResult is the outcome of a request run in the background.
type usResult struct {
	status int
	body   []byte
	err    error // of Do, or of reading the body
}

// usGo runs a request in the background; its body is read to its end.
func usGo(u *Client, method, path string) <-chan usResult {
	ch := make(chan usResult, 1)
	go func() {
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		var r usResult
		if r.err = usDo(u, method, path, "", resp); r.err == nil {
			r.status = resp.StatusCode()
			r.body, r.err = usBody(resp)
		}
		ch <- r
	}()
	return ch
}

func usWait(t *testing.T, ch <-chan usResult) usResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("a request did not end within 5s")
		return usResult{}
	}
}

// usWantOK waits for a background request that must answer 200 with want.
func usWantOK(t *testing.T, ch <-chan usResult, want string) {
	t.Helper()
	if r := usWait(t, ch); r.err != nil || r.status != fasthttp.StatusOK || string(r.body) != want {
		t.Fatalf("got %d %q, %v; want 200 %q", r.status, r.body, r.err, want)
	}
}

func usWaiting(u *Client) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.waiters)
}

func usIdle(u *Client) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle)
}

func usWantConns(t *testing.T, u *Client, n int) {
	t.Helper()
	if got := u.ConnsCount(); got != n {
		t.Fatalf("ConnsCount() = %d, want %d", got, n)
	}
}

// usPattern is n bytes that differ from one offset to the next, so that a lost, doubled or moved byte
// shows.
func usPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i/251)
	}
	return b
}

// usLength is an answer with a Content-Length body.
func usLength(body []byte) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func TestUpstreamSequentialRequestsReuseOneConnection(t *testing.T) {
	s := usStart(t, usAnswers(nil))
	u := usClient(t, s, 4, time.Second)
	for i := range 20 {
		usGet(t, u, fmt.Sprintf("/%d", i), "ok")
	}
	s.wantAccepts(t, 1)
	usWantConns(t, u, 1)
	if n := len(s.requests()); n != 20 {
		t.Fatalf("the server read %d requests, want 20", n)
	}
}

func TestUpstreamNeverOpensMoreThanMaxConnsAndHandsConnectionsToWaiters(t *testing.T) {
	release := make(chan struct{})
	s := usStart(t, usHolding(release, ""))
	u := usClient(t, s, 2, 5*time.Second)
	var results []<-chan usResult
	for i := range 10 {
		results = append(results, usGo(u, fasthttp.MethodGet, fmt.Sprintf("/%d", i)))
	}
	testkit.Eventually(t, "2 requests at the server and 8 waiting", 5*time.Second, func() bool {
		return len(s.requests()) == 2 && usWaiting(u) == 8
	})
	usWantConns(t, u, 2)
	close(release)
	for _, r := range results {
		usWantOK(t, r, "ok")
	}
	s.wantAccepts(t, 2)
	if m := s.maxOpen.Load(); m != 2 {
		t.Fatalf("the server had %d connections open at once, want 2", m)
	}
	if n := len(s.requests()); n != 10 {
		t.Fatalf("the server read %d requests, want 10", n)
	}
	usWantConns(t, u, 2)
	if n := usIdle(u); n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
}

func TestUpstreamWaitersGetTheConnectionFirstComeFirstServed(t *testing.T) {
	release := make(chan struct{})
	s := usStart(t, usHolding(release, ""))
	u := usClient(t, s, 1, 5*time.Second)
	results := []<-chan usResult{usGo(u, fasthttp.MethodGet, "/0")}
	testkit.Eventually(t, "the first request at the server", 5*time.Second, func() bool { return len(s.requests()) == 1 })
	for i := 1; i <= 3; i++ {
		results = append(results, usGo(u, fasthttp.MethodGet, fmt.Sprintf("/%d", i)))
		testkit.Eventually(t, fmt.Sprintf("%d waiting", i), 5*time.Second, func() bool { return usWaiting(u) == i })
	}
	close(release)
	for _, r := range results {
		usWantOK(t, r, "ok")
	}
	s.wantAccepts(t, 1)
	s.wantRequests(t, "GET /0", "GET /1", "GET /2", "GET /3")
}

func TestUpstreamRequestFailsWithErrNoFreeConnsWhenNoConnectionFreesWithinQueueTimeout(t *testing.T) {
	release := make(chan struct{})
	s := usStart(t, usHolding(release, "/held"))
	u := usClient(t, s, 1, 50*time.Millisecond)
	held := usGo(u, fasthttp.MethodGet, "/held")
	testkit.Eventually(t, "the held request at the server", 5*time.Second, func() bool { return len(s.requests()) == 1 })

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := usDo(u, fasthttp.MethodGet, "/late", "", resp); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Fatalf("after queue_timeout: %v, want ErrNoFreeConns", err)
	}
	if n := usWaiting(u); n != 0 {
		t.Fatalf("%d waiters left after the timeout, want 0", n)
	}

	// queue_timeout 0: no wait at all.
	u.mu.Lock()
	u.queueTimeout = 0
	u.mu.Unlock()
	if err := usDo(u, fasthttp.MethodGet, "/late", "", resp); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Fatalf("with queue_timeout 0: %v, want ErrNoFreeConns", err)
	}

	// The held connection goes idle (to no waiter that gave up) and serves the next request.
	close(release)
	usWantOK(t, held, "ok")
	usWantConns(t, u, 1)
	usGet(t, u, "/next", "ok")
	s.wantAccepts(t, 1)
	s.wantRequests(t, "GET /held", "GET /next")
}

func TestUpstreamWaiterDialsInTheSlotOfADiscardedConnection(t *testing.T) {
	release := make(chan struct{})
	s := usStart(t, func(p *usPeer) {
		for p.next() {
			if p.path() == "/held" {
				p.hold(release)
				p.write("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nheld")
				return
			}
			p.write(usOK)
		}
	})
	u := usClient(t, s, 1, 5*time.Second)
	held := usGo(u, fasthttp.MethodGet, "/held")
	testkit.Eventually(t, "the held request at the server", 5*time.Second, func() bool { return len(s.requests()) == 1 })
	waiter := usGo(u, fasthttp.MethodGet, "/waiter")
	testkit.Eventually(t, "a waiter", 5*time.Second, func() bool { return usWaiting(u) == 1 })
	close(release)
	usWantOK(t, held, "held")
	usWantOK(t, waiter, "ok")
	s.wantAccepts(t, 2)
	s.wantRequests(t, "GET /held", "GET /waiter")
	usWantConns(t, u, 1)
}

// usClosingServer answers the first request of every connection and then closes it without
// Connection: close, as a server whose keep-alive timeout is shorter than fairlead's does; closed gets
// the connection's number once it is closed. With reset, it closes with a TCP reset instead of a FIN.
// A request for /held is answered once release is closed.
func usClosingServer(t *testing.T, reset bool, release <-chan struct{}) (*usServer, chan int) {
	closed := make(chan int, 10)
	s := usStart(t, func(p *usPeer) {
		if !p.next() {
			return
		}
		if p.path() == "/held" {
			p.hold(release)
		}
		if p.req.Header.IsHead() {
			p.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
		} else {
			p.write(usOK)
		}
		if reset {
			p.c.(*net.TCPConn).SetLinger(0) //nolint:errcheck // a FIN then, which other tests cover
		}
		p.c.Close()
		closed <- p.n
	})
	return s, closed
}

func usRecv(t *testing.T, ch <-chan int, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out after 5s waiting for %s", what)
	}
}

// usStaleRetry sends a request on a keep-alive connection the server closed after its first answer, and
// checks that it is retried on a fresh connection (the server then reads it once, body included) or,
// when retried is false, that it fails with errUpstreamClosed and never reaches the server.
func usStaleRetry(t *testing.T, method, body string, streamed, retried bool) {
	t.Helper()
	s, closed := usClosingServer(t, false, nil)
	u := usClient(t, s, 4, time.Second)
	usGet(t, u, "/first", "ok")
	usRecv(t, closed, "the server to close the idle connection")

	req := usRequest(u, method, "/second", "")
	defer fasthttp.ReleaseRequest(req)
	if streamed {
		req.SetBodyStream(strings.NewReader(body), len(body))
	} else if body != "" {
		req.SetBodyString(body)
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	err := u.Do(usOutbound(req), resp)

	second := method + " /second"
	if body != "" {
		second += " " + body
	}
	if retried {
		if err != nil || resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("%s (streamed %v): %d, %v; want 200 after a retry", method, streamed, resp.StatusCode(), err)
		}
		s.wantAccepts(t, 2)
		s.wantRequests(t, "GET /first", second)
		usWantConns(t, u, 1)
		return
	}
	if !errors.Is(err, errUpstreamClosed) {
		t.Fatalf("%s (streamed %v): %v, want errUpstreamClosed and no retry; the server read %q",
			method, streamed, err, s.requests())
	}
	s.wantAccepts(t, 1)
	s.wantRequests(t, "GET /first")
	usWantConns(t, u, 0)
}

func TestUpstreamReusedConnectionClosedByTheServerIsRetriedOnceOnlyForAnIdempotentInMemoryRequest(t *testing.T) {
	f := func(method, body string, retried bool) {
		t.Helper()
		usStaleRetry(t, method, body, false, retried)
	}
	f(fasthttp.MethodGet, "", true)
	f(fasthttp.MethodHead, "", true)
	f(fasthttp.MethodOptions, "", true)
	f(fasthttp.MethodPut, "put-body", true)
	f(fasthttp.MethodDelete, "", true)
	f(fasthttp.MethodPost, "post-body", false)
	f(fasthttp.MethodPatch, "patch-body", false)
}

// A streamed body (an upload larger than retry_buffer) was consumed by the first attempt: sending the
// request again would send it without its body.
func TestUpstreamReusedConnectionClosedByTheServerNeverResendsAStreamedBody(t *testing.T) {
	for _, method := range []string{fasthttp.MethodPut, fasthttp.MethodGet} {
		t.Run(method, func(t *testing.T) { usStaleRetry(t, method, "streamed-body", true, false) })
	}
}

func TestUpstreamReusedConnectionResetByTheServerIsRetriedLikeAClosedOne(t *testing.T) {
	s, closed := usClosingServer(t, true, nil)
	u := usClient(t, s, 4, time.Second)
	usGet(t, u, "/first", "ok")
	usRecv(t, closed, "the server to reset the idle connection")
	usGet(t, u, "/second", "ok")
	s.wantAccepts(t, 2)
	s.wantRequests(t, "GET /first", "GET /second")
}

// The other idle connections are as old as the one found closed and may be closed too: the retry dials.
func TestUpstreamRetryDialsAFreshConnectionRatherThanTakeAnotherIdleOne(t *testing.T) {
	release := make(chan struct{})
	s, closed := usClosingServer(t, false, release)
	u := usClient(t, s, 4, time.Second)
	usTwoAtOnce(t, u, s, release)
	usRecv(t, closed, "the server to close the first idle connection")
	usRecv(t, closed, "the server to close the second idle connection")
	usWantConns(t, u, 2)
	usGet(t, u, "/second", "ok")
	s.wantAccepts(t, 3)
	s.wantRequests(t, "GET /held", "GET /held", "GET /second")
}

func TestUpstreamFreshConnectionClosedWithoutAnAnswerIsNotRetried(t *testing.T) {
	s := usStart(t, func(p *usPeer) { p.next() })
	u := usClient(t, s, 4, time.Second)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := usDo(u, fasthttp.MethodGet, "/", "", resp); !errors.Is(err, errUpstreamClosed) {
		t.Fatalf("got %v, want errUpstreamClosed", err)
	}
	s.wantAccepts(t, 1)
	s.wantRequests(t, "GET /")
	usWantConns(t, u, 0)
}

func TestUpstreamReusedConnectionClosedInTheMiddleOfTheAnswerIsNotRetried(t *testing.T) {
	s := usStart(t, func(p *usPeer) {
		if p.next() {
			p.write(usOK)
		}
		if p.next() {
			p.write("HTTP/1.1 200 OK\r\nContent-Le") // then closed: part of the answer came
		}
	})
	u := usClient(t, s, 4, time.Second)
	usGet(t, u, "/first", "ok")
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	err := usDo(u, fasthttp.MethodGet, "/second", "", resp)
	if err == nil || errors.Is(err, errUpstreamClosed) {
		t.Fatalf("got %v, want an error other than errUpstreamClosed", err)
	}
	s.wantAccepts(t, 1)
	s.wantRequests(t, "GET /first", "GET /second")
	usWantConns(t, u, 0)
}

func TestUpstreamStreamsLargeChunkedAndCloseDelimitedBodiesByteExact(t *testing.T) {
	data := usPattern(100 << 10)

	var chunked strings.Builder
	chunked.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n")
	off := 0
	chunk := func(n int, ext string, upper bool) {
		format := "%x%s\r\n%s\r\n"
		if upper {
			format = "%X%s\r\n%s\r\n"
		}
		fmt.Fprintf(&chunked, format, n, ext, data[off:off+n])
		off += n
	}
	chunk(1, "", false)
	chunk(10, ";name=value", false)
	chunk(40<<10, `; ext="quoted;value"`, true) // larger than the read buffer: read past it
	chunk(0xabc, ";a;b=c", false)
	chunk(len(data)-off, "", false)
	chunked.WriteString("0;last\r\nX-Sum: 1234\r\nX-Other: two\r\n\r\n")

	f := func(path, answer string, data []byte, reused bool) {
		t.Helper()
		s := usStart(t, func(p *usPeer) {
			for p.next() {
				if p.path() != path {
					p.write(usOK)
					continue
				}
				p.write(answer)
				if !reused { // the body ends when the server closes
					return
				}
			}
		})
		u := usClient(t, s, 4, time.Second)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := usDo(u, fasthttp.MethodGet, path, "", resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if resp.BodyStream() == nil {
			t.Fatalf("%s: the body is not streamed", path)
		}
		if n := usIdle(u); n != 0 {
			t.Fatalf("%s: the connection is idle while its body streams", path)
		}
		body, err := usBody(resp)
		if err != nil {
			t.Fatalf("%s: reading the body: %v", path, err)
		}
		if !bytes.Equal(body, data) {
			t.Fatalf("%s: got %d bytes, want the %d sent (first difference at %d)", path, len(body), len(data), usFirstDiff(body, data))
		}
		if reused {
			usWantConns(t, u, 1)
			usGet(t, u, "/after", "ok")
			s.wantAccepts(t, 1)
			return
		}
		usWantConns(t, u, 0)
		usGet(t, u, "/after", "ok")
		s.wantAccepts(t, 2)
	}
	f("/length", usLength(data), data, true)
	f("/chunked", chunked.String(), data, true)
	f("/chunked-empty", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", nil, true)
	f("/close", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n"+string(data), data, false)
	f("/close-empty", "HTTP/1.1 200 OK\r\n\r\n", nil, false)
}

// A chunked answer's trailer section is kept for Trailers (an HTTP/2 client gets it): its well-formed
// fields, as "Name: value" lines; a line that is not a field, a name that is not a token and a value
// with a control byte are dropped. The connection is reused after it.
func TestUpstreamChunkedAnswerKeepsItsWellFormedTrailerFields(t *testing.T) {
	answer := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" +
		"X-Sum: 1234\r\nno colon here\r\nX Bad: 1\r\nX-Ctl: a\x01b\r\nX-Other:  two \r\nX-Lf: 3\n\r\n"
	s, u := usAnswering(t, "/trailers", answer)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := usDo(u, fasthttp.MethodGet, "/trailers", "", resp); err != nil {
		t.Fatal(err)
	}
	src := resp.BodyStream()
	body, err := io.ReadAll(src)
	if err != nil || string(body) != "hello" {
		t.Fatalf("body %q (%v), want hello", body, err)
	}
	if got, want := string(src.(Trailered).Trailers()), "X-Sum: 1234\r\nX-Other: two\r\nX-Lf: 3\r\n"; got != want {
		t.Errorf("trailers %q, want %q", got, want)
	}
	resp.CloseBodyStream() //nolint:errcheck
	usGet(t, u, "/after", "ok")
	s.wantAccepts(t, 1)
}

func usFirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestUpstreamAnswersUpTo32KiBAreReadWholeAndLargerOnesStreamed(t *testing.T) {
	small, large := usPattern(bufferedBody), usPattern(bufferedBody+1)
	s := usStart(t, usAnswers(map[string]string{"/small": usLength(small), "/large": usLength(large)}))
	u := usClient(t, s, 4, time.Second)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)

	if err := usDo(u, fasthttp.MethodGet, "/small", "", resp); err != nil {
		t.Fatal(err)
	}
	if ub, ok := resp.BodyStream().(*upBody); !ok || ub.held == nil {
		t.Fatalf("a %d-byte answer is not read whole into a buffer (body stream %T)", len(small), resp.BodyStream())
	}
	if n := usIdle(u); n != 1 {
		t.Fatalf("after a %d-byte answer read whole, %d idle connections, want 1 (released before the client is written to)", len(small), n)
	}
	if body, err := usBody(resp); err != nil || !bytes.Equal(body, small) {
		t.Fatalf("the %d-byte answer read whole: %d bytes, %v", len(small), len(body), err)
	}

	if err := usDo(u, fasthttp.MethodGet, "/large", "", resp); err != nil {
		t.Fatal(err)
	}
	if resp.BodyStream() == nil {
		t.Fatalf("a %d-byte answer is not streamed", len(large))
	}
	if n := usIdle(u); n != 0 {
		t.Fatalf("while a %d-byte answer streams, %d idle connections, want 0", len(large), n)
	}
	body, err := usBody(resp)
	if err != nil || !bytes.Equal(body, large) {
		t.Fatalf("the %d-byte answer: %d bytes, %v", len(large), len(body), err)
	}
	if n := usIdle(u); n != 1 {
		t.Fatalf("after the streamed answer, %d idle connections, want 1", n)
	}
	s.wantAccepts(t, 1)
}

func TestUpstreamMalformedChunkedBodyFailsTheReadAndTheConnectionIsNotReused(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	f := func(name, chunks string, serverCloses bool, wantErr error) {
		t.Helper()
		s := usStart(t, func(p *usPeer) {
			for p.next() {
				if p.n > 1 {
					p.write(usOK)
					continue
				}
				p.write(head + chunks)
				if serverCloses {
					return
				}
			}
		})
		u := usClient(t, s, 4, time.Second)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := usDo(u, fasthttp.MethodGet, "/", "", resp); err != nil {
			t.Fatalf("%s: the head: %v", name, err)
		}
		body, err := usBody(resp)
		if err == nil {
			t.Fatalf("%s: read %q without an error", name, body)
		}
		if wantErr != nil && !errors.Is(err, wantErr) {
			t.Fatalf("%s: got %v, want %v", name, err, wantErr)
		}
		usWantConns(t, u, 0)
		if !serverCloses {
			s.wantEnded(t, 1)
		}
		usGet(t, u, "/next", "ok")
		s.wantAccepts(t, 2)
	}
	f("bad hex digit", "zz\r\nhello\r\n0\r\n\r\n", false, nil)
	f("bad hex after a good chunk", "5\r\nhello\r\n5x\r\nhello\r\n0\r\n\r\n", false, nil)
	f("empty chunk-size line", "\r\nhello\r\n0\r\n\r\n", false, nil)
	f("chunk size of 17 hex digits (past int64)", "10000000000000000\r\nhello\r\n0\r\n\r\n", false, nil)
	f("chunk-size line longer than the buffer", "5;"+strings.Repeat("e", 40<<10)+"\r\nhello\r\n0\r\n\r\n", false, nil)
	f("no CRLF after the data", "5\r\nhelloXX\r\n0\r\n\r\n", false, nil)
	f("data longer than the chunk size", "3\r\nhello\r\n0\r\n\r\n", false, nil)
	f("EOF in chunk data", "a\r\nhel", true, io.ErrUnexpectedEOF)
	f("EOF before the CRLF after the data", "5\r\nhello", true, io.ErrUnexpectedEOF)
	f("EOF in a chunk-size line", "5\r\nhello\r\n1", true, io.ErrUnexpectedEOF)
	f("EOF before the last chunk", "5\r\nhello\r\n", true, io.ErrUnexpectedEOF)
	f("EOF in the trailer section", "5\r\nhello\r\n0\r\nX-Sum: 1\r\n", true, io.ErrUnexpectedEOF)
}

func TestUpstreamTruncatedContentLengthBodyIsAnUnexpectedEOF(t *testing.T) {
	f := func(length int, sent int) {
		t.Helper()
		data := usPattern(length)
		s := usStart(t, func(p *usPeer) {
			if p.next() {
				p.write(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", length, data[:sent]))
			}
		})
		u := usClient(t, s, 4, time.Second)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		err := usDo(u, fasthttp.MethodGet, "/", "", resp)
		if err == nil {
			_, err = usBody(resp)
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Content-Length %d, %d bytes sent: %v, want io.ErrUnexpectedEOF", length, sent, err)
		}
		usWantConns(t, u, 0)
	}
	f(1000, 10)                     // read whole
	f(bufferedBody, 0)              // read whole, nothing of the body came
	f(100<<10, 50<<10)              // streamed
	f(bufferedBody+1, bufferedBody) // streamed, one byte short
}

func TestUpstreamStreamedBodyClosedBeforeItsEndClosesTheConnection(t *testing.T) {
	data := usPattern(100 << 10)
	chunked := fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(data), data)
	f := func(answer string) {
		t.Helper()
		s, u := usAnswering(t, "/big", answer)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := usDo(u, fasthttp.MethodGet, "/big", "", resp); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := io.ReadFull(resp.BodyStream(), buf); err != nil || !bytes.Equal(buf, data[:10]) {
			t.Fatalf("the first bytes: %q, %v", buf, err)
		}
		usWantConns(t, u, 1)
		if err := resp.CloseBodyStream(); err != nil {
			t.Fatal(err)
		}
		usWantConns(t, u, 0)
		s.wantEnded(t, 1)
		usGet(t, u, "/next", "ok")
		s.wantAccepts(t, 2)
	}
	f(usLength(data))
	f(chunked)
}

func TestUpstreamAnswersWithoutABodyLeaveTheConnectionReusable(t *testing.T) {
	s := usStart(t, usAnswers(map[string]string{
		"/head":         "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
		"/head-chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"/204":          "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
		"/304":          "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 50\r\n\r\n",
	}))
	u := usClient(t, s, 4, time.Second)
	f := func(method, path string, status int) {
		t.Helper()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := usDo(u, method, path, "", resp); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if resp.StatusCode() != status || resp.BodyStream() != nil || len(resp.Body()) != 0 {
			t.Fatalf("%s %s: %d, streamed %v, body %q; want %d and no body", method, path,
				resp.StatusCode(), resp.BodyStream() != nil, resp.Body(), status)
		}
		if n := usIdle(u); n != 1 {
			t.Fatalf("%s %s: %d idle connections, want 1", method, path, n)
		}
		// Had the client waited for a body, this answer would be read as its bytes.
		usGet(t, u, "/ok", "ok")
	}
	f(fasthttp.MethodHead, "/head", 200)
	f(fasthttp.MethodHead, "/head-chunked", 200)
	f(fasthttp.MethodGet, "/204", 204)
	f(fasthttp.MethodGet, "/304", 304)
	s.wantAccepts(t, 1)
}

func TestUpstreamInterimAnswersAreSkippedUpToTen(t *testing.T) {
	interim := func(n int) string {
		return strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n", n)
	}
	final := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal"
	s := usStart(t, usAnswers(map[string]string{
		"/continue": "HTTP/1.1 100 Continue\r\n\r\n" + final,
		"/hints":    interim(1) + final,
		"/ten":      "HTTP/1.1 100 Continue\r\n\r\n" + interim(9) + final,
		"/eleven":   interim(11) + final,
	}))
	u := usClient(t, s, 4, time.Second)
	usGet(t, u, "/continue", "final")
	usGet(t, u, "/hints", "final")
	usGet(t, u, "/ten", "final")
	usGet(t, u, "/ok", "ok") // nothing of those answers was left unread
	s.wantAccepts(t, 1)

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := usDo(u, fasthttp.MethodGet, "/eleven", "", resp); err == nil {
		t.Fatalf("11 interim answers: %d without an error", resp.StatusCode())
	}
	usWantConns(t, u, 0)
	s.wantEnded(t, 1)
}

func TestUpstreamConnectionCloseOnEitherSideIsNotReused(t *testing.T) {
	data := usPattern(100 << 10)
	s := usStart(t, usAnswers(map[string]string{
		"/close":          "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
		"/close-streamed": fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(data), data),
		"/http10":         "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"/http10-keep":    "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
	}))
	u := usClient(t, s, 4, time.Second)
	conn := 0
	f := func(path, want string, reused bool) {
		t.Helper()
		req := usRequest(u, fasthttp.MethodGet, path, "")
		defer fasthttp.ReleaseRequest(req)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := u.Do(usOutbound(req), resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if body, err := usBody(resp); err != nil || string(body) != want {
			t.Fatalf("%s: %d bytes, %v", path, len(body), err)
		}
		conn++
		s.wantAccepts(t, conn)
		if reused {
			usWantConns(t, u, 1)
			usGet(t, u, "/ok", "ok")
			s.wantAccepts(t, conn)
			return
		}
		usWantConns(t, u, 0)
		s.wantEnded(t, conn) // the server kept it open: the client closed it
	}
	f("/close", "ok", false)
	f("/close-streamed", string(data), false)
	f("/http10", "ok", false)
	f("/http10-keep", "ok", true)
}

func TestUpstreamIdleConnectionsAreClosedAfterIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	s := usStart(t, usHolding(release, "/held"))
	u := usClient(t, s, 4, time.Second)
	u.mu.Lock()
	u.idleTimeout = 30 * time.Millisecond
	u.mu.Unlock()

	// Two connections, released together.
	usTwoAtOnce(t, u, s, release)
	testkit.Eventually(t, "the idle connections closed", 5*time.Second, func() bool { return u.ConnsCount() == 0 })
	s.wantEndedAny(t, 2)

	// The cleaner runs again for connections released after it stopped.
	usGet(t, u, "/again", "ok")
	s.wantAccepts(t, 3)
	testkit.Eventually(t, "the new idle connection closed", 5*time.Second, func() bool { return u.ConnsCount() == 0 })
	s.wantEnded(t, 3)
}

func TestUpstreamIdleConnectionPastIdleTimeoutIsNotReusedEvenBeforeTheCleanerRuns(t *testing.T) {
	s := usStart(t, usAnswers(nil))
	u := usClient(t, s, 4, time.Second)
	u.mu.Lock()
	u.idleTimeout = time.Hour // arms the cleaner for an hour
	u.mu.Unlock()
	usGet(t, u, "/first", "ok")
	u.mu.Lock()
	u.idleTimeout = time.Nanosecond // the idle connection is now past it; the cleaner will not run for an hour
	u.mu.Unlock()
	usGet(t, u, "/second", "ok")
	s.wantAccepts(t, 2)
	s.wantEnded(t, 1)
	usWantConns(t, u, 1)
}

func TestUpstreamRetireClosesIdleConnectionsAtOnceAndBusyOnesWhenTheirExchangeEnds(t *testing.T) {
	data := usPattern(100 << 10)
	release := make(chan struct{})
	s := usStart(t, func(p *usPeer) {
		for p.next() {
			switch p.path() {
			case "/held":
				p.hold(release)
				p.write(usOK)
			case "/big":
				p.write(usLength(data))
			default:
				p.write(usOK)
			}
		}
	})

	t.Run("idle", func(t *testing.T) {
		u := usClient(t, s, 4, time.Second)
		usTwoAtOnce(t, u, s, release)
		usWantConns(t, u, 2)
		u.Retire()
		usWantConns(t, u, 0)
		s.wantEndedAny(t, 2)
	})

	t.Run("streaming", func(t *testing.T) {
		u := usClient(t, s, 4, time.Second)
		before := int(s.accepts.Load())
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := usDo(u, fasthttp.MethodGet, "/big", "", resp); err != nil {
			t.Fatal(err)
		}
		u.Retire()
		usWantConns(t, u, 1)
		body, err := usBody(resp)
		if err != nil || !bytes.Equal(body, data) {
			t.Fatalf("the body streamed across retire: %d bytes, %v", len(body), err)
		}
		usWantConns(t, u, 0)
		s.wantEnded(t, before+1)

		// A retired client still answers (a request already routed to it); its connection is not kept.
		usGet(t, u, "/late", "ok")
		usWantConns(t, u, 0)
		s.wantEnded(t, before+2)
	})
}

func TestUpstreamSilentServerFailsWithATimeoutAfterResponseTimeout(t *testing.T) {
	data := usPattern(100 << 10)
	s := usStart(t, func(p *usPeer) {
		if !p.next() {
			return
		}
		if p.path() == "/stall-body" {
			p.write(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(data), data[:1<<10]))
		}
		p.hold(nil)
	})
	u := usClientOpts(t, s.addr, Options{MaxConns: 4, QueueTimeout: time.Second, ResponseTimeout: 100 * time.Millisecond})
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)

	err := usDo(u, fasthttp.MethodGet, "/silent", "", resp)
	if err == nil || !isTimeout(err) {
		t.Fatalf("a server that never answers: %v, want a timeout", err)
	}
	usWantConns(t, u, 0)

	if err := usDo(u, fasthttp.MethodGet, "/stall-body", "", resp); err != nil {
		t.Fatal(err)
	}
	body, err := usBody(resp)
	if err == nil || !isTimeout(err) {
		t.Fatalf("a body that stops after %d bytes: %v, want a timeout", len(body), err)
	}
	usWantConns(t, u, 0)

	// A server that reads nothing: the upload stops once the socket buffers are full (or, if they take
	// it all, the answer never comes).
	deaf := usStart(t, func(p *usPeer) { p.hold(nil) })
	u = usClientOpts(t, deaf.addr, Options{MaxConns: 4, QueueTimeout: time.Second, ResponseTimeout: 100 * time.Millisecond})
	if err := usDo(u, fasthttp.MethodPut, "/upload", string(usPattern(16<<20)), resp); err == nil || !isTimeout(err) {
		t.Fatalf("an upload to a server that reads nothing: %v, want a timeout", err)
	}
	usWantConns(t, u, 0)
}

func TestUpstreamSwitchingProtocolsAnswerDoesNotReturnTheConnectionToThePool(t *testing.T) {
	s := usStart(t, usAnswers(map[string]string{
		"/upgrade": "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	}))
	u := usClient(t, s, 4, time.Second)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := usDo(u, fasthttp.MethodGet, "/upgrade", "", resp); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusSwitchingProtocols || resp.BodyStream() != nil {
		t.Fatalf("got %d (streamed %v), want 101 and no body", resp.StatusCode(), resp.BodyStream() != nil)
	}
	usWantConns(t, u, 0)
	s.wantEnded(t, 1)
	usGet(t, u, "/next", "ok")
	s.wantAccepts(t, 2)
}

func TestUpstreamFailedDialIsADialErrorAndItsSlotGoesToTheNextWaiter(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		addr := testkit.Addr(t)
		u := usClientOpts(t, addr, Options{MaxConns: 1, QueueTimeout: time.Second, ResponseTimeout: 5 * time.Second})
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		for range 3 { // the slot is given back each time: no ErrNoFreeConns with max_conns 1
			var de *DialError
			if err := usDo(u, fasthttp.MethodGet, "/", "", resp); !errors.As(err, &de) {
				t.Fatalf("dialling a closed port: %v, want a *DialError", err)
			}
			usWantConns(t, u, 0)
		}
	})

	t.Run("waiter", func(t *testing.T) {
		s := usStart(t, usAnswers(nil))
		gate := make(chan struct{})
		var dials atomic.Int32
		u := &Client{addr: s.addr, maxConns: 1, queueTimeout: 5 * time.Second, idleTimeout: time.Minute,
			dialFn: func() (net.Conn, error) {
				if dials.Add(1) == 1 {
					<-gate
					return nil, &DialError{Err: errors.New("connection refused (test)")}
				}
				c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
				if err != nil {
					return nil, &DialError{Err: err}
				}
				return &idleConn{Conn: c, timeout: 5 * time.Second}, nil
			}}
		t.Cleanup(u.Retire)
		first := usGo(u, fasthttp.MethodGet, "/first")
		testkit.Eventually(t, "the first dial", 5*time.Second, func() bool { return dials.Load() == 1 })
		usWantConns(t, u, 1) // a dial in progress holds its slot
		second := usGo(u, fasthttp.MethodGet, "/second")
		testkit.Eventually(t, "a waiter", 5*time.Second, func() bool { return usWaiting(u) == 1 })
		close(gate)
		var de *DialError
		if r := usWait(t, first); !errors.As(r.err, &de) {
			t.Fatalf("the failed dial: %v, want a *DialError", r.err)
		}
		usWantOK(t, second, "ok")
		if n := dials.Load(); n != 2 {
			t.Fatalf("%d dials, want 2", n)
		}
		s.wantAccepts(t, 1)
		s.wantRequests(t, "GET /second")
		usWantConns(t, u, 1)
	})
}

// Many clients at once over few connections, with every kind of answer: bodies stay byte-exact, the cap
// holds, and the pool's count matches the connections really open (run with -race).
func TestUpstreamConcurrentRequestsOfEveryKindStayByteExactWithinMaxConns(t *testing.T) {
	small, big := usPattern(3000), usPattern(70<<10)
	chunked := fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x;x=y\r\n%s\r\n0\r\n\r\n",
		10, big[:10], len(big)-10, big[10:])
	answers := map[string]string{
		"/small":   usLength(small),
		"/big":     usLength(big),
		"/chunked": chunked,
		"/close":   "HTTP/1.1 200 OK\r\n\r\n" + string(small),
	}
	s := usStart(t, func(p *usPeer) {
		for p.next() {
			p.write(answers[p.path()])
			if p.path() == "/close" {
				return
			}
		}
	})
	const maxConns = 3
	u := usClient(t, s, maxConns, 5*time.Second)
	want := map[string][]byte{"/small": small, "/big": big, "/chunked": big, "/close": small}
	paths := []string{"/small", "/big", "/chunked", "/small", "/close"}

	var over atomic.Int32
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n := u.ConnsCount(); n > maxConns {
				over.Store(int32(n))
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	const clients, each = 8, 40
	errs := make(chan error, clients)
	for c := range clients {
		go func() {
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			for i := range each {
				path := paths[(c+i)%len(paths)]
				if err := usDo(u, fasthttp.MethodGet, path, "", resp); err != nil {
					errs <- fmt.Errorf("%s: %w", path, err)
					return
				}
				body, err := usBody(resp)
				if err != nil || !bytes.Equal(body, want[path]) {
					errs <- fmt.Errorf("%s: %d bytes (want %d), %v", path, len(body), len(want[path]), err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the clients did not finish within 30s")
		}
	}
	close(stop)
	<-watched
	if n := over.Load(); n != 0 {
		t.Fatalf("ConnsCount() reached %d, over max_conns %d", n, maxConns)
	}
	if n := u.ConnsCount(); n > maxConns || n != usIdle(u) {
		t.Fatalf("at rest: ConnsCount() = %d, %d idle; want equal and at most %d", n, usIdle(u), maxConns)
	}
	if n := len(s.requests()); n != clients*each {
		t.Fatalf("the server read %d requests, want %d", n, clients*each)
	}
}

// An exchange waiting for its answer is abandoned when its server stops leading (watch.go): with
// no byte of the answer come, a request that may leave ends with ErrAbandoned at once and its
// connection is closed; one whose answer has begun is read on to its end; one that may not leave (a
// POST) is not cut short.
func TestUpstreamAnAbandonedWaitEndsOnlyIfNoByteOfTheAnswerCame(t *testing.T) {
	partial, release := make(chan struct{}), make(chan struct{})
	s := usStart(t, func(p *usPeer) {
		for p.next() {
			switch p.path() {
			case "/begun":
				p.write("HTTP/1.1 200 OK\r\nContent-")
				close(partial)
				p.hold(release)
				p.write("Length: 2\r\n\r\nok")
			default: // silent until the end of the test
				p.hold(nil)
			}
		}
	})
	u := usClient(t, s, 4, time.Second)
	waiting := func(n int) func() bool {
		return func() bool { u.waitMu.Lock(); defer u.waitMu.Unlock(); return len(u.awaiting) == n }
	}
	do := func(method, path string, mayLeave bool) <-chan error {
		ch := make(chan error, 1)
		go func() {
			req := usRequest(u, method, path, "")
			defer fasthttp.ReleaseRequest(req)
			out := usOutbound(req)
			out.Watch, out.MayLeave, out.Since = true, mayLeave, time.Now().UnixNano()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			err := u.Do(out, resp)
			if err == nil {
				var body []byte
				if body, err = usBody(resp); err == nil && string(body) != "ok" {
					err = fmt.Errorf("body %q", body)
				}
			}
			ch <- err
		}()
		return ch
	}

	silent := do(fasthttp.MethodGet, "/silent", true)
	post := do(fasthttp.MethodPost, "/silent-post", false)
	testkit.Eventually(t, "two waits", 5*time.Second, waiting(2))
	if n := u.Abandon(); n != 1 {
		t.Errorf("abandon: %d, want 1 (the GET; the POST may not leave)", n)
	}
	select {
	case err := <-silent:
		if !errors.Is(err, ErrAbandoned) {
			t.Fatalf("silent GET: %v, want ErrAbandoned", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned GET still waits")
	}
	select {
	case err := <-post:
		t.Fatalf("the POST ended (%v): it may not leave, it waits for its answer", err)
	default:
	}

	begun := do(fasthttp.MethodGet, "/begun", true)
	<-partial
	testkit.Eventually(t, "the begun GET to wait", 5*time.Second, waiting(2))
	testkit.Eventually(t, "the client to read the first bytes of its answer", 5*time.Second, func() bool {
		u.waitMu.Lock()
		defer u.waitMu.Unlock()
		for _, c := range u.awaiting {
			if c.mayLeave {
				return unreadBytes(t, c.ic.Conn) == 0
			}
		}
		return false
	})
	u.Abandon()
	close(release)
	if err := <-begun; err != nil {
		t.Fatalf("the GET whose answer had begun: %v, want its answer read on", err)
	}
}
