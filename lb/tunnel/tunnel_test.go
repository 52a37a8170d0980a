package tunnel

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// A real WebSocket client and server talk through the engine, handshake included: the engine
// gets both TCP conns before any byte of the upgrade and carries it like any other bytes.
func TestWebSocketEcho(t *testing.T) {
	e := newEnv(t, Options{IdleTimeout: 5 * time.Second})

	up := websocket.Upgrader{ReadBufferSize: 4096, WriteBufferSize: 4096}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(mt, msg); err != nil {
				return
			}
		}
	})}
	go srv.Serve(e.back)
	defer srv.Close()

	rs := newReasons()
	added := make(chan error, 1)
	go func() {
		c, err := e.front.Accept()
		if err != nil {
			added <- err
			return
		}
		s, err := net.Dial("tcp", e.back.Addr().String())
		if err != nil {
			c.Close()
			added <- err
			return
		}
		_, err = e.r.Add(c, s, nil, nil, "ws", rs.onClose)
		added <- err
	}()

	d := websocket.Dialer{HandshakeTimeout: hang}
	ws, resp, err := d.Dial("ws://"+e.front.Addr().String()+"/echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	ws.SetReadDeadline(time.Now().Add(hang))

	bin := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range bin {
		bin[i] = byte(rng.Uint32())
	}
	text := []byte(strings.Repeat("fairlead tunnel ✓ ", (1<<20)/20+1)[:1<<20-2])
	if !utf8.Valid(text) {
		t.Fatal("text message is not UTF-8")
	}
	for _, m := range []struct {
		typ  int
		data []byte
	}{{websocket.BinaryMessage, bin}, {websocket.TextMessage, text}} {
		if err := ws.WriteMessage(m.typ, m.data); err != nil {
			t.Fatal(err)
		}
		typ, got, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if typ != m.typ || !bytes.Equal(got, m.data) {
			t.Fatalf("message type %d len %d came back as type %d len %d (equal=%v)", m.typ, len(m.data), typ, len(got), bytes.Equal(got, m.data))
		}
	}

	// Orderly WebSocket close: the server echoes the close frame and closes the TCP connection
	// first, as RFC 6455 says it should; the client waits for that EOF, then closes too.
	ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after close: %v", err)
	}
	if rest := expectEOF(t, ws.UnderlyingConn(), hang); len(rest) != 0 {
		t.Fatalf("%d bytes after the close frame", len(rest))
	}
	ws.Close()
	rs.wait(t, hang)
	if got := rs.list(); len(got) != 1 || got[0] != ClosedByServer {
		t.Fatalf("reasons %v, want [closed by server]", got)
	}
	st := e.r.Stats()
	if st.BytesToServer < 2<<20 || st.BytesToClient < 2<<20 || st.Opened != 1 || st.Closed != 1 || st.ByReason[ClosedByServer] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Bytes the load balancer already read (the tail of the request, the start of the upgrade
// response) reach the other side before anything relayed, small or large enough to block.
func TestPendingBytesFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{{"small", 5}, {"blocking", 8 << 20}} {
		size := tc.size
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{})
			toServer := bytes.Repeat([]byte("S"), size)
			toClient := bytes.Repeat([]byte("C"), size)
			wantS := append(bytes.Clone(toServer), "from-client"...)
			wantC := append(bytes.Clone(toClient), "from-server"...)
			client, up, _ := e.open("g", toServer, toClient, nil)
			// Scribble over the caller's buffers: Add must not have kept them.
			for i := range toServer {
				toServer[i], toClient[i] = '!', '!'
			}
			if _, err := client.Write([]byte("from-client")); err != nil {
				t.Fatal(err)
			}
			if _, err := up.Write([]byte("from-server")); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var gotS []byte
			wg.Go(func() { gotS = readN(t, up, len(wantS), hang) })
			gotC := readN(t, client, len(wantC), hang)
			wg.Wait()
			if !bytes.Equal(gotS, wantS) || !bytes.Equal(gotC, wantC) {
				t.Fatal("pending bytes not delivered first and intact")
			}
			// The counters are updated just after the bytes are written.
			if !testkit.Within(hang, func() bool {
				st := e.r.Stats()
				return st.BytesToServer == uint64(len(wantS)) && st.BytesToClient == uint64(len(wantC))
			}) {
				t.Fatalf("stats %+v", e.r.Stats())
			}
		})
	}
}

// client CloseWrite: the server reads EOF and can still answer; then the server closes and
// the tunnel ends, closed by the client (who closed first), with both relay conns closed.
func TestHalfCloseByClient(t *testing.T) {
	e := newEnv(t, Options{})
	rs := newReasons()
	c := e.conns()
	if _, err := e.r.Add(c.relayClient, c.relayServer, nil, nil, "g", rs.onClose); err != nil {
		t.Fatal(err)
	}
	defer c.client.Close()
	defer c.up.Close()

	c.client.Write([]byte("request"))
	c.client.CloseWrite()
	if got := expectEOF(t, c.up, hang); string(got) != "request" {
		t.Fatalf("server read %q before EOF", got)
	}
	if e.r.Len() != 1 {
		t.Fatal("tunnel closed on a half-close")
	}
	// The server answers several times after the client's EOF, each answer relayed on its own
	// (it reaches the client before the next is written).
	for i := range 3 {
		if _, err := c.up.Write([]byte("answer ")); err != nil {
			t.Fatal(err)
		}
		if got := readN(t, c.client, 7, hang); string(got) != "answer " {
			t.Fatalf("answer %d: client read %q", i, got)
		}
	}
	c.up.CloseWrite()
	if got := expectEOF(t, c.client, hang); len(got) != 0 {
		t.Fatalf("client read %q before EOF", got)
	}
	rs.wait(t, hang)
	if got := rs.list(); !slices.Equal(got, []Reason{ClosedByClient}) {
		t.Fatalf("reasons %v", got)
	}
	if e.r.Len() != 0 || e.r.GroupLen("g") != 0 {
		t.Fatal("tunnel still counted")
	}
	for _, rc := range []net.Conn{c.relayClient, c.relayServer} {
		if _, err := rc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("relay conn not closed: %v", err)
		}
	}
}

// The server closes: the client reads EOF at once, before it closes itself (the tunnel is still
// open); when the client closes too, onClose runs once, closed by the server.
func TestServerClose(t *testing.T) {
	e := newEnv(t, Options{})
	rs := newReasons()
	client, up, _ := e.open("g", nil, nil, rs.onClose)
	up.Write([]byte("bye"))
	up.Close()
	if got := expectEOF(t, client, hang); string(got) != "bye" {
		t.Fatalf("client read %q", got)
	}
	if e.r.Len() != 1 || len(rs.list()) != 0 {
		t.Fatalf("the client's EOF ended the tunnel: Len %d, reasons %v", e.r.Len(), rs.list())
	}
	client.Close()
	rs.wait(t, hang)
	// Engine.Close returns once every engine goroutine has exited: a second onClose would have
	// run by then.
	e.r.Close()
	if got := rs.list(); !slices.Equal(got, []Reason{ClosedByServer}) {
		t.Fatalf("reasons %v", got)
	}
}

// The server closes, but the client keeps sending: the server's kernel refuses the data
// (RST), and the tunnel ends, still counted as closed by the server.
func TestServerCloseClientKeepsSending(t *testing.T) {
	e := newEnv(t, Options{})
	rs := newReasons()
	client, up, _ := e.open("g", nil, nil, rs.onClose)
	up.Close()
	expectEOF(t, client, hang)
	stopIfFailed(t)
	ended := testkit.Within(hang, func() bool {
		client.Write([]byte("still here"))
		return e.r.Len() == 0
	})
	if !ended {
		t.Fatal("tunnel did not end")
	}
	rs.wait(t, hang)
	if got := rs.list(); !slices.Equal(got, []Reason{ClosedByServer}) {
		t.Fatalf("reasons %v", got)
	}
}

// A reset (not a FIN) is an error.
func TestResetIsError(t *testing.T) {
	e := newEnv(t, Options{})
	rs := newReasons()
	client, _, _ := e.open("g", nil, nil, rs.onClose)
	client.SetLinger(0) // close sends RST
	client.Close()
	rs.wait(t, hang)
	if got := rs.list(); !slices.Equal(got, []Reason{Error}) {
		t.Fatalf("reasons %v", got)
	}
}

func TestCloseGroup(t *testing.T) {
	e := newEnv(t, Options{IdleTimeout: time.Minute})
	runtime.GC()
	baseG, baseFD := runtime.NumGoroutine(), countFDs(t)

	const n = 200
	rs := newReasons()
	clients := make([]*net.TCPConn, 0, n)
	ups := make([]*net.TCPConn, 0, n)
	for range n {
		c, u, _ := e.open("10.0.0.1:80", nil, nil, rs.onClose)
		clients = append(clients, c)
		ups = append(ups, u)
	}
	other, otherUp, _ := e.open("10.0.0.2:80", nil, nil, nil)
	if e.r.GroupLen("10.0.0.1:80") != n || e.r.Len() != n+1 {
		t.Fatalf("GroupLen %d Len %d", e.r.GroupLen("10.0.0.1:80"), e.r.Len())
	}

	if got := e.r.CloseGroup("10.0.0.1:80"); got != n {
		t.Fatalf("CloseGroup closed %d", got)
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { expectEOF(t, c, hang) })
	}
	wg.Wait()
	stopIfFailed(t)
	if e.r.Len() != 1 || e.r.GroupLen("10.0.0.1:80") != 0 || e.r.CloseGroup("10.0.0.1:80") != 0 {
		t.Fatal("group not empty")
	}
	if got := rs.list(); len(got) != n || slices.ContainsFunc(got, func(r Reason) bool { return r != Closed }) {
		t.Fatalf("%d reasons, not all Closed", len(got))
	}

	// The other group still relays.
	other.Write([]byte("ping"))
	if got := readN(t, otherUp, 4, hang); string(got) != "ping" {
		t.Fatal("other group broken")
	}
	e.r.CloseGroup("10.0.0.2:80")
	expectEOF(t, other, hang)
	stopIfFailed(t)
	for i := range clients {
		clients[i].Close()
		ups[i].Close()
	}
	other.Close()
	otherUp.Close()
	if e.r.Len() != 0 {
		t.Fatalf("Len %d", e.r.Len())
	}
	waitGoroutines(t, baseG, hang)
	if !testkit.Within(hang, func() bool { return countFDs(t) <= baseFD }) {
		t.Fatalf("fds %d, baseline %d", countFDs(t), baseFD)
	}
}

// A tunnel without bytes either way is closed after the idle timeout, one with bytes flowing is
// not. The engine's clock is the real one, so this takes a few idle timeouts; nothing bounds how
// late the janitor may be, only that it is never early.
func TestIdleTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, Options{IdleTimeout: timeout, IdleCheck: 50 * time.Millisecond})
	idleR, activeR, laterR := newReasons(), newReasons(), newReasons()
	start := time.Now() // before Add: the idle tunnel's last activity is no earlier
	idle, _, _ := e.open("g", nil, nil, idleR.onClose)
	active, activeUp, _ := e.open("g", nil, nil, activeR.onClose)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				active.Write([]byte{1})
			}
		}
	})
	go io.Copy(io.Discard, activeUp)

	expectEOF(t, idle, hang)
	stopIfFailed(t)
	if took := time.Since(start); took < timeout {
		t.Fatalf("idle tunnel closed after %v, before the idle timeout %v", took, timeout)
	}
	idleR.wait(t, hang)
	if got := idleR.list(); !slices.Equal(got, []Reason{IdleTimeout}) {
		t.Fatalf("reasons %v", got)
	}

	// Instead of sleeping past another full timeout: a tunnel opened now stays idle for a full
	// timeout, and the janitor's scan that finds it idle would find the active one idle too (its
	// last activity would be older) if its bytes did not count as activity.
	laterStart := time.Now()
	later, _, _ := e.open("g", nil, nil, laterR.onClose)
	expectEOF(t, later, hang)
	stopIfFailed(t)
	if took := time.Since(laterStart); took < timeout {
		t.Fatalf("second idle tunnel closed after %v, before the idle timeout %v", took, timeout)
	}
	laterR.wait(t, hang)
	close(stop)
	wg.Wait()
	if e.r.Len() != 1 || len(activeR.list()) != 0 {
		t.Fatalf("active tunnel closed: Len %d, reasons %v", e.r.Len(), activeR.list())
	}
	if st := e.r.Stats(); st.ByReason[IdleTimeout] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNoGoroutinePerTunnel(t *testing.T) {
	skipPortable(t)
	e := newEnv(t, Options{IdleTimeout: time.Minute})
	base := runtime.NumGoroutine()
	const n = 1000
	for range n {
		e.open("g", nil, nil, nil)
	}
	got := runtime.NumGoroutine() - base
	t.Logf("%d idle tunnels: %+d goroutines", n, got)
	if got >= 50 {
		t.Fatalf("%d goroutines for %d idle tunnels", got, n)
	}
	// And they all still work.
	c, u, _ := e.open("g", nil, nil, nil)
	c.Write([]byte("x"))
	if string(readN(t, u, 1, hang)) != "x" {
		t.Fatal("relay broken")
	}
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// The Go memory of an idle tunnel: the engine's own structures plus its two conns (their
// netFD, addresses). Go's pollDesc for each conn is allocated off-heap and not counted there;
// the resident-set figure logged alongside counts it (and the runtime's own overheads).
func TestMemoryPerIdleTunnel(t *testing.T) {
	skipPortable(t)
	e := newEnv(t, Options{IdleTimeout: time.Minute})
	const n = 2000
	cs := make([]conns, n)
	m0, r0 := heapInuse(), rss()
	for i := range cs {
		cs[i] = e.conns()
	}
	m1, r1 := heapInuse(), rss()
	for _, c := range cs {
		if _, err := e.r.Add(c.relayClient, c.relayServer, nil, nil, "10.1.2.3:8080", nil); err != nil {
			t.Fatal(err)
		}
	}
	m2, r2 := heapInuse(), rss()
	// Four conns were made per tunnel, two of them the engine's.
	connsPer := float64(int64(m1)-int64(m0)) / n / 2
	relayPer := float64(int64(m2)-int64(m1)) / n
	total := connsPer + relayPer
	t.Logf("per idle tunnel: %.0f B relay structures + %.0f B for its 2 conns = %.0f B (heap+stack in use)", relayPer, connsPer, total)
	if r0 > 0 {
		t.Logf("per idle tunnel, resident: %.0f B (%.0f B relay + %.0f B for its 2 conns)",
			float64(r1-r0)/n/2+float64(r2-r1)/n, float64(r2-r1)/n, float64(r1-r0)/n/2)
	}
	if total >= 4096 {
		t.Fatalf("%.0f B per idle tunnel, budget 4096", total)
	}
	runtime.KeepAlive(cs)
	for _, c := range cs {
		c.client.Close()
		c.up.Close()
	}
}

// rss is the resident set size of the process, 0 where /proc is missing.
func rss() int64 {
	runtime.GC()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// Relaying small messages allocates nothing: 10,000 round trips of 64 bytes (20,000 relayed
// messages), with the test's ends using fixed buffers.
func TestNoAllocsPerMessage(t *testing.T) {
	skipPortable(t)
	e := newEnv(t, Options{})
	client, up, _ := e.open("g", nil, nil, nil)
	go echo(up)
	var msg, got [64]byte
	copy(msg[:], "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	roundTrip := func() {
		if _, err := client.Write(msg[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, got[:]); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // warm up: loop buffers, goroutine stacks
		roundTrip()
	}
	const n = 10000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		roundTrip()
	}
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / (2 * n)
	t.Logf("%d mallocs for %d relayed messages: %.4f per message", after.Mallocs-before.Mallocs, 2*n, per)
	if per >= 0.1 {
		t.Fatalf("%.3f allocations per relayed message", per)
	}
	if got != msg {
		t.Fatal("echo mismatch")
	}
}

// A receiver that does not read holds one buffer and not its loop: with a single loop, another
// tunnel keeps relaying, and the stalled one completes once its receiver reads.
func TestSlowReceiverDoesNotBlockOthers(t *testing.T) {
	e := newEnv(t, Options{Loops: 1, BufferSize: 16 << 10})
	slowC, slowUp, _ := e.open("g", nil, nil, nil)
	fastC, fastUp, _ := e.open("g", nil, nil, nil)

	const big = 16 << 20
	data := make([]byte, big)
	for i := range data {
		data[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := slowC.Write(data)
		wrote <- err
	}()
	waitWriteBlocked(t) // the socket buffers are full; the engine is blocked on slowUp

	go echo(fastUp)
	for i := range 50 {
		fastC.Write([]byte{byte(i)})
		if got := readN(t, fastC, 1, hang); !bytes.Equal(got, []byte{byte(i)}) {
			t.Fatal("fast tunnel corrupted")
		}
	}

	got := readN(t, slowUp, big, 2*hang) // 16 MiB under -race
	if !bytes.Equal(got, data) {
		t.Fatal("slow tunnel corrupted")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

func TestRelayClose(t *testing.T) {
	base := runtime.NumGoroutine()
	baseFD := countFDs(t)
	r, err := NewEngine(Options{IdleTimeout: time.Minute, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	front, back := listen(t), listen(t)
	defer front.Close()
	defer back.Close()
	rs := newReasons()
	const n = 50
	var ends []*net.TCPConn
	for range n {
		c, rc := pair(t, front)
		rsv, u := pair(t, back)
		if _, err := r.Add(rc, rsv, nil, nil, "g", rs.onClose); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, c, u)
	}
	// One tunnel with a blocked write in progress, to check that its goroutine ends too.
	c, rc := pair(t, front)
	rsv, u := pair(t, back)
	if _, err := r.Add(rc, rsv, nil, nil, "g", rs.onClose); err != nil {
		t.Fatal(err)
	}
	ends = append(ends, c, u)
	go c.Write(make([]byte, 16<<20))
	waitWriteBlocked(t)

	r.Close()
	r.Close() // idempotent
	if r.Len() != 0 {
		t.Fatalf("Len %d after Close", r.Len())
	}
	for _, c := range ends {
		c.SetReadDeadline(time.Now().Add(hang))
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("end not closed by Engine.Close")
			}
		}
		c.Close()
	}
	if got := rs.list(); len(got) != n+1 || slices.ContainsFunc(got, func(r Reason) bool { return r != Shutdown }) {
		t.Fatalf("reasons %v, want all shutdown", got)
	}
	if _, err := r.Add(rc, rsv, nil, nil, "g", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	waitGoroutines(t, base+1, hang) // +1: the Write goroutine may still be finishing
	waitGoroutines(t, base, hang)
	if !testkit.Within(hang, func() bool { return countFDs(t) <= baseFD+2 }) { // the listeners
		t.Fatalf("fds %d, baseline %d", countFDs(t), baseFD)
	}
}

func TestAddErrorsLeaveConnsOpen(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.conns()
	if _, err := e.r.Add(nil, c.relayServer, nil, nil, "g", nil); !errors.Is(err, ErrNilConn) {
		t.Fatalf("Add(nil, conn): %v", err)
	}
	if _, err := e.r.Add(c.relayClient, nil, nil, nil, "g", nil); !errors.Is(err, ErrNilConn) {
		t.Fatalf("Add(conn, nil): %v", err)
	}
	if e.r.Len() != 0 {
		t.Fatal("counted")
	}
	// Still open and usable by the caller.
	c.client.Write([]byte("ok"))
	if got := readN(t, c.relayClient, 2, hang); string(got) != "ok" {
		t.Fatal("conn damaged")
	}
	for _, x := range []net.Conn{c.client, c.relayClient, c.relayServer, c.up} {
		x.Close()
	}
}

func TestTunnelCloseAndReasonString(t *testing.T) {
	e := newEnv(t, Options{})
	rs := newReasons()
	client, up, tun := e.open("backend-1", nil, nil, rs.onClose)
	if tun.Group() != "backend-1" {
		t.Fatal(tun.Group())
	}
	var wg sync.WaitGroup
	for range 4 { // concurrent closes: onClose once
		wg.Go(tun.Close)
	}
	wg.Wait()
	expectEOF(t, client, hang)
	expectEOF(t, up, hang)
	stopIfFailed(t)
	// Engine.Close returns once every engine goroutine has exited: a second onClose (say, a loop
	// seeing the closed conns) would have run by then.
	e.r.Close()
	if got := rs.list(); !slices.Equal(got, []Reason{Closed}) {
		t.Fatalf("reasons %v", got)
	}
	for r, want := range map[Reason]string{ClosedByClient: "closed by client", ClosedByServer: "closed by server",
		Error: "error", IdleTimeout: "idle timeout", Closed: "closed", Shutdown: "shutdown", Reason(42): "Reason(42)"} {
		if r.String() != want {
			t.Errorf("%d: %q", int(r), r.String())
		}
	}
}

// Many tunnels moving data at once, in both directions, with tunnels opening and closing
// around them: for the race detector, and to check that nothing is lost or crossed.
func TestConcurrentTunnels(t *testing.T) {
	e := newEnv(t, Options{Loops: 3, BufferSize: 4096, IdleTimeout: 5 * time.Second})
	const tunnels, size = 16, 1 << 20
	var wg sync.WaitGroup
	for i := range tunnels {
		client, up, _ := e.open("g", nil, nil, nil)
		data := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xA5}, size/3)
		wg.Go(func() { client.Write(data); client.CloseWrite() })
		wg.Go(func() { up.Write(data); up.CloseWrite() })
		wg.Go(func() {
			if got := expectEOF(t, up, hang); !bytes.Equal(got, data) {
				t.Errorf("tunnel %d: server got %d bytes, corrupted", i, len(got))
			}
		})
		wg.Go(func() {
			if got := expectEOF(t, client, hang); !bytes.Equal(got, data) {
				t.Errorf("tunnel %d: client got %d bytes, corrupted", i, len(got))
			}
		})
	}
	for range 50 {
		_, _, tun := e.open("churn", nil, nil, nil)
		tun.Close()
	}
	wg.Wait()
	if !testkit.Within(hang, func() bool { return e.r.Len() == 0 }) {
		t.Fatalf("Len %d", e.r.Len())
	}
}

// A burst written at once and followed by nothing (no more data, no EOF: nothing that would
// wake the engine again) arrives whole, both ways: a turn that stops after a few buffers to let
// other tunnels go must have the rest reported again. The sizes are one buffer (a full read,
// then one that finds nothing), a turn's worth, one byte more, and many turns.
func TestBurstLongerThanATurnArrivesWhole(t *testing.T) {
	const buf = 1024
	e := newEnv(t, Options{Loops: 1, BufferSize: buf})
	client, up, _ := e.open("g", nil, nil, nil)
	go echo(up)
	rng := rand.New(rand.NewPCG(3, 4))
	f := func(size int) {
		t.Helper()
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		// The echo answers while the burst is still being written: write and read at once.
		wrote := make(chan error, 1)
		go func() {
			client.SetWriteDeadline(time.Now().Add(hang))
			_, err := client.Write(data)
			wrote <- err
		}()
		got := readN(t, client, size, hang)
		if err := <-wrote; err != nil {
			t.Fatalf("%d bytes: write: %v", size, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: got %d back, corrupted", size, len(got))
		}
	}
	f(buf)
	f(4 * buf)
	f(4*buf + 1)
	f(1 << 20)
	f(1)
}

// Many tunnels echo at once, each with many messages in flight, small and a few buffers long,
// written one by one without waiting for the answers, so that data keeps arriving while the
// relay is reading the same socket: every byte comes back, in order, on its own tunnel.
func TestPipelinedEchoOnManyTunnelsIsByteExact(t *testing.T) {
	const buf = 512
	e := newEnv(t, Options{Loops: 2, BufferSize: buf})
	const tunnels, msgs = 32, 200
	var wg sync.WaitGroup
	for i := range tunnels {
		client, up, _ := e.open("g", nil, nil, nil)
		go echo(up)
		rng := rand.New(rand.NewPCG(uint64(i), 5))
		var data []byte
		ends := make([]int, msgs) // where each message ends in data
		for m := range ends {
			for range 1 + rng.IntN(3*buf) {
				data = append(data, byte(rng.Uint32()))
			}
			ends[m] = len(data)
		}
		client.SetDeadline(time.Now().Add(hang))
		wg.Go(func() {
			start := 0
			for _, end := range ends {
				if _, err := client.Write(data[start:end]); err != nil {
					t.Errorf("tunnel %d: write: %v", i, err)
					return
				}
				start = end
			}
		})
		wg.Go(func() {
			if got := readN(t, client, len(data), hang); !bytes.Equal(got, data) {
				t.Errorf("tunnel %d: got %d of %d bytes back, corrupted", i, len(got), len(data))
			}
		})
	}
	wg.Wait()
}

// Deadlines left on the conns (fasthttp sets them per request) do not kill the tunnel.
func TestAddClearsDeadlines(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.conns()
	defer c.client.Close()
	defer c.up.Close()
	past := time.Now().Add(-time.Second)
	c.relayClient.SetDeadline(past)
	c.relayServer.SetDeadline(past)
	rs := newReasons()
	if _, err := e.r.Add(c.relayClient, c.relayServer, []byte("a"), []byte("b"), "g", rs.onClose); err != nil {
		t.Fatal(err)
	}
	go echo(c.up)
	c.client.Write([]byte("c"))
	if got := readN(t, c.client, 3, hang); string(got) != "bac" {
		t.Fatalf("got %q", got)
	}
	if e.r.Len() != 1 || len(rs.list()) != 0 {
		t.Fatal("tunnel ended")
	}
}
