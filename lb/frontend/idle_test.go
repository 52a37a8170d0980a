package frontend

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// idleFront is a front end served as lb serves its own (ReduceMemoryUsage, StreamRequestBody, the
// timeouts, the answers wrapped by Front.Handler) on a plain listener of 127.0.0.1, whose handler
// answers 200 naming the server (X-Served-By) and the client's address as it sees it (X-Client).
type idleFront struct {
	f    *Front
	ln   net.Listener // Front.Listener's
	addr string
	// inBody is told when the handler of a POST /mid has begun reading its body (streamed).
	inBody chan struct{}
}

func startIdleFront(t *testing.T, name string, maxConns int) *idleFront {
	t.Helper()
	return startIdleFrontOn(t, name, maxConns, nil)
}

// startIdleFrontOn is startIdleFront, on the front end's TLS listener with tlsConfig if not nil: the
// handler then also says whether it sees a TLS connection (X-TLS) and the server name the client asked
// for (X-SNI).
func startIdleFrontOn(t *testing.T, name string, maxConns int, tlsConfig *tls.Config) *idleFront {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := New(Limits{MaxHeader: 8 << 10, HeaderTimeout: 10 * time.Second}, slog.New(slog.DiscardHandler))
	f.Sources().SetLimits(SourceLimits{MaxConns: maxConns})
	fi := &idleFront{f: f, ln: f.Listener(raw), addr: raw.Addr().String(), inBody: make(chan struct{}, 1)}
	if tlsConfig != nil {
		fi.ln = f.TLSListener(raw, func() *tls.Config { return tlsConfig })
	}
	srv := &fasthttp.Server{
		Handler: f.Handler(func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/mid" {
				fi.inBody <- struct{}{}
				io.Copy(io.Discard, ctx.RequestBodyStream()) //nolint:errcheck
			}
			ctx.Response.Header.Set("X-Served-By", name)
			ctx.Response.Header.Set("X-Client", ctx.RemoteAddr().String())
			ctx.Response.Header.Set("X-TLS", strconv.FormatBool(ctx.IsTLS()))
			if cs := ctx.TLSConnectionState(); cs != nil {
				ctx.Response.Header.Set("X-SNI", cs.ServerName)
			}
			ctx.WriteString("ok") //nolint:errcheck
		}),
		ErrorHandler:      f.ErrorHandler,
		Logger:            f.Logger(),
		StreamRequestBody: true,
		ReduceMemoryUsage: true,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
		CloseOnShutdown:   true,
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(fi.ln) }()         //nolint:errcheck
	t.Cleanup(func() { fi.ln.Close(); srv.Shutdown(); <-done }) //nolint:errcheck
	return fi
}

// idle counts the front end's connections waiting for their next request.
func (f *Front) idleCount() int {
	f.idle.mu.Lock()
	defer f.idle.mu.Unlock()
	n := 0
	for c := f.idle.head; c != nil; c = c.next {
		if c.hand.Load() == handIdle {
			n++
		}
	}
	return n
}

// waitIdle waits until n of f's connections wait for their next request.
func waitIdle(t *testing.T, f *Front, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); f.idleCount() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections, want %d", f.idleCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// client is a raw keep-alive HTTP/1.1 client connection.
type client struct {
	c  net.Conn
	br *bufio.Reader
}

func dialClient(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	return &client{c: c, br: bufio.NewReader(c)}
}

// get sends a GET on the connection and reads its answer.
func (cl *client) get(t *testing.T, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(cl.c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cl.read(t, path)
}

func (cl *client) read(t *testing.T, what string) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", what, err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	resp.Body.Close()
	return resp
}

// closedAfter checks that the server closes the connection after its answer: nothing more, then EOF.
func (cl *client) closedAfter(t *testing.T, what string) {
	t.Helper()
	if b, err := cl.br.ReadByte(); err != io.EOF {
		t.Errorf("%s: after the answer %q, %v; want the connection closed", what, b, err)
	}
}

// adopt injects the sockets given into the front end's listener, as a new process does: an HTTPS
// connection with its TLS session resumed by fairlead's record layer.
func (fi *idleFront) adopt(t *testing.T, given []IdleConn) {
	t.Helper()
	for _, ic := range given {
		var c net.Conn
		var err error
		if ic.TLS != nil {
			c, err = tlsrecord.Resume(ic.File, *ic.TLS)
		} else {
			c, err = net.FileConn(ic.File)
			ic.File.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		client, _ := ic.Client.(*net.TCPAddr)
		if err := InjectAs(fi.ln, c, client, ic.Local); err != nil {
			t.Fatal(err)
		}
	}
}

// Idle keep-alive connections move to another front end on the same sockets: each client's next request,
// on the connection it had, is answered by the other server, which sees the same client address and
// counts the connection against max_conns_per_source; a connection that has not sent its first request
// yet moves too. A connection in the middle of a request is not idle: it is answered where it is and
// closed after the answer (Connection: close).
func TestIdleKeepAliveConnectionsMoveOnTheirSocketsAndARequestUnderWayIsAnsweredAndClosed(t *testing.T) {
	old, next := startIdleFront(t, "old", 0), startIdleFront(t, "new", 100)
	const n = 5
	var clients []*client
	for i := range n {
		cl := dialClient(t, old.addr)
		if r := cl.get(t, fmt.Sprintf("/first/%d", i)); r.StatusCode != 200 || r.Header.Get("X-Served-By") != "old" || r.Close {
			t.Fatalf("first request: %d by %q (close %v)", r.StatusCode, r.Header.Get("X-Served-By"), r.Close)
		}
		clients = append(clients, cl)
	}
	fresh := dialClient(t, old.addr)                                                                        // connected, nothing sent yet
	mid := dialClient(t, old.addr)                                                                          // a request under way: its handler reads its body
	io.WriteString(mid.c, "POST /mid HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n") //nolint:errcheck // the rest later
	<-old.inBody
	waitIdle(t, old.f, n+1)

	old.ln.Close() // as lb does first: no connection comes here any more
	given, kept := old.f.HandOverIdle(5 * time.Second)
	if len(given) != n+1 || kept != 0 {
		t.Fatalf("given %d, kept %d; want %d, 0", len(given), kept, n+1)
	}
	for _, ic := range given {
		if ic.File == nil || ic.Client == nil {
			t.Fatalf("given %+v", ic)
		}
	}
	next.adopt(t, given)

	for i, cl := range clients {
		r := cl.get(t, fmt.Sprintf("/next/%d", i))
		if r.StatusCode != 200 || r.Header.Get("X-Served-By") != "new" || r.Close {
			t.Errorf("client %d, next request on its connection: %d by %q (close %v), want 200 by new, kept alive",
				i, r.StatusCode, r.Header.Get("X-Served-By"), r.Close)
		}
		if got := r.Header.Get("X-Client"); got != cl.c.LocalAddr().String() {
			t.Errorf("client %d: the new server sees %s, the client is %s", i, got, cl.c.LocalAddr())
		}
		if r := cl.get(t, "/again"); r.Header.Get("X-Served-By") != "new" {
			t.Errorf("client %d, a third request: by %q", i, r.Header.Get("X-Served-By"))
		}
	}
	if r := fresh.get(t, "/fresh"); r.StatusCode != 200 || r.Header.Get("X-Served-By") != "new" {
		t.Errorf("the connection that had sent nothing: %d by %q, want 200 by new", r.StatusCode, r.Header.Get("X-Served-By"))
	}
	if got := next.f.Sources().Conns(netip.MustParseAddr("127.0.0.1")); got != n+1 {
		t.Errorf("max_conns_per_source counts %d connections of 127.0.0.1 in the new front end, want %d", got, n+1)
	}

	io.WriteString(mid.c, "2\r\ncd\r\n0\r\n\r\n") //nolint:errcheck
	r := mid.read(t, "the request under way")
	if r.StatusCode != 200 || r.Header.Get("X-Served-By") != "old" || !r.Close {
		t.Errorf("the request under way: %d by %q (close %v), want 200 by old with Connection: close",
			r.StatusCode, r.Header.Get("X-Served-By"), r.Close)
	}
	mid.closedAfter(t, "the request under way")
}

// A connection taken while idle whose request's first bytes arrive before the wake is served where it
// is: the wake (a past read deadline) does not cut the request, which is answered and closed.
func TestAConnectionTakenThatBeginsARequestBeforeItsWakeIsServedAndClosed(t *testing.T) {
	old := startIdleFront(t, "old", 0)
	cl := dialClient(t, old.addr)
	cl.get(t, "/first")
	waitIdle(t, old.f, 1)
	h, taken := old.f.takeIdle()
	if len(taken) != 1 {
		t.Fatalf("%d taken, want 1", len(taken))
	}
	io.WriteString(cl.c, "GET /second HTTP/1.1\r\n") //nolint:errcheck // a request begins: no longer idle
	select {
	case <-h.done: // the connection said it stays
	case <-time.After(5 * time.Second):
		t.Fatal("the connection taken did not say what became of it")
	}
	taken[0].wake()                         // late: the socket's deadline is past, the connection sets its own again
	io.WriteString(cl.c, "Host: x\r\n\r\n") //nolint:errcheck
	r := cl.read(t, "/second")
	if r.StatusCode != 200 || r.Header.Get("X-Served-By") != "old" || !r.Close {
		t.Errorf("/second: %d by %q (close %v), want 200 by old with Connection: close", r.StatusCode, r.Header.Get("X-Served-By"), r.Close)
	}
	cl.closedAfter(t, "/second")
	if given, kept := h.collect(time.Second); len(given) != 0 || kept != 1 {
		t.Errorf("given %d, kept %d; want 0, 1", len(given), kept)
	}
}

// Requests sent at any moment around a hand-over are each answered once, by one front end or the other:
// none is lost or answered twice. A connection the old one answers keep-alive (its answer went out as
// the hand-over began) is not left there: its next request is the new one's, or the old one answers it
// and closes the connection.
func TestRequestsAroundAHandOverAreEachAnsweredOnce(t *testing.T) {
	requestsAroundAHandOver(t, nil, nil)
}

// requestsAroundAHandOver runs the test above on plain connections, or over TLS with the server's and
// the clients' configurations.
func requestsAroundAHandOver(t *testing.T, server, clientConfig *tls.Config) {
	const clients, rounds = 16, 3
	for round := range rounds {
		old, next := startIdleFrontOn(t, "old", 0, server), startIdleFrontOn(t, "new", 0, server)
		var cls []*client
		for range clients {
			cl := dialAny(t, old.addr, clientConfig)
			cl.get(t, "/first")
			cls = append(cls, cl)
		}
		waitIdle(t, old.f, clients)
		var wg sync.WaitGroup
		errs := make(chan string, clients)
		start := make(chan struct{})
		for i, cl := range cls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				time.Sleep(time.Duration(i*50) * time.Microsecond) // spread over the hand-over
				for range 10000 {                                  // the answers before the hand-over began are keep-alive: at most a few
					if _, err := io.WriteString(cl.c, "GET /during HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
						errs <- fmt.Sprintf("client %d: write: %v", i, err)
						return
					}
					resp, err := http.ReadResponse(cl.br, nil)
					if err != nil {
						errs <- fmt.Sprintf("client %d: no answer: %v", i, err)
						return
					}
					io.Copy(io.Discard, resp.Body) //nolint:errcheck
					resp.Body.Close()
					switch by := resp.Header.Get("X-Served-By"); {
					case resp.StatusCode != 200:
						errs <- fmt.Sprintf("client %d: %d", i, resp.StatusCode)
						return
					case by == "new" && !resp.Close:
						return // moved
					case by == "old" && resp.Close:
						if b, err := cl.br.ReadByte(); err != io.EOF {
							errs <- fmt.Sprintf("client %d: after old's last answer %q, %v", i, b, err)
						}
						return
					case by != "old":
						errs <- fmt.Sprintf("client %d: answered by %q (close %v)", i, by, resp.Close)
						return
					}
				}
				errs <- fmt.Sprintf("client %d: the old front end answers on keep-alive after the hand-over", i)
			}()
		}
		old.ln.Close()
		close(start)
		time.Sleep(time.Duration(round*200) * time.Microsecond)
		given, kept := old.f.HandOverIdle(5 * time.Second)
		if len(given)+kept > clients {
			t.Errorf("round %d: given %d + kept %d, of %d connections", round, len(given), kept, clients)
		}
		next.adopt(t, given)
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("round %d: %s", round, e)
		}
	}
}

// The listener an injection wakes accepts on: new connections after injected ones, and an injection into
// a closed listener is refused.
func TestAnInjectedConnectionDoesNotStopTheListenerAccepting(t *testing.T) {
	old, next := startIdleFront(t, "old", 0), startIdleFront(t, "new", 0)
	cl := dialClient(t, old.addr)
	cl.get(t, "/first")
	waitIdle(t, old.f, 1)
	old.ln.Close()
	given, _ := old.f.HandOverIdle(5 * time.Second)
	next.adopt(t, given)
	if r := cl.get(t, "/moved"); r.Header.Get("X-Served-By") != "new" {
		t.Fatalf("moved connection served by %q", r.Header.Get("X-Served-By"))
	}
	for i := range 3 {
		if r := dialClient(t, next.addr).get(t, "/new"); r.StatusCode != 200 || r.Header.Get("X-Served-By") != "new" {
			t.Fatalf("new connection %d after the injection: %d by %q", i, r.StatusCode, r.Header.Get("X-Served-By"))
		}
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	if err := Inject(old.ln, c1); err == nil {
		t.Error("a connection was injected into a closed listener")
	}
	if err := Inject(next.f.TLSListener(next.ln, nil), c1); err == nil || !strings.Contains(err.Error(), "plain") {
		t.Errorf("injected into a TLS listener: %v", err)
	}
}

// Telling whether a connection is idle costs its Read nothing: a keep-alive request read through the
// front end's connection allocates nothing.
func TestIdleTrackingAllocatesNothing(t *testing.T) {
	_, cc, sc := acceptedPlain(t)
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 4096)
	read := func() {
		cc.Write(req) //nolint:errcheck
		for got := 0; got < len(req); {
			n, err := sc.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	read()
	if fc := sc.(*frontConn); fc.hand.Load() != handBusy || !fc.listed {
		t.Fatalf("a plain connection: hand %d, listed %v", fc.hand.Load(), fc.listed)
	}
	if n := testing.AllocsPerRun(200, read); n != 0 {
		t.Errorf("%.1f allocations per keep-alive request read, want 0", n)
	}
}

// A connection that goes idle just as a hand-over begins, and that the hand-over takes before the
// connection's own Read joins it, is counted once: its join finds it taken (its wake comes), and its one
// report ends the collection. (Counted twice, the collection waited for a report that never came, and
// said one connection more than there were.)
func TestAConnectionTakenAsItGoesIdleIsCountedOnce(t *testing.T) {
	f, _, sc := acceptedPlain(t)
	c := sc.(*frontConn)
	if !c.hand.CompareAndSwap(handBusy, handIdle) { // its Read's first step (idleRead), before it looks for a hand-over
		t.Fatal("not busy")
	}
	h, taken := f.takeIdle() // the hand-over begins: leaving, and c is idle
	if len(taken) != 1 || taken[0] != c {
		t.Fatalf("%d taken, want the connection", len(taken))
	}
	if joined, tk := h.join(c); joined || !tk {
		t.Fatalf("join: joined %v, taken %v; want taken only", joined, tk)
	}
	h.report(nil, nil, nil, false) // what became of it, once
	select {
	case <-h.done:
	default:
		t.Fatal("the collection waits for more after its only connection reported")
	}
	if given, kept := h.collect(0); len(given) != 0 || kept != 1 {
		t.Errorf("given %d, kept %d; want 0, 1", len(given), kept)
	}
}

// acceptedPlain returns a front end, a client's connection to its plain listener and the front end's
// side of it, as accepted (no server reads it); the test's cleanup closes them.
func acceptedPlain(t *testing.T) (f *Front, client, accepted net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	f = New(Limits{MaxHeader: 8 << 10}, slog.New(slog.DiscardHandler))
	client, err = net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	accepted, err = f.Listener(raw).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close() })
	return f, client, accepted
}
