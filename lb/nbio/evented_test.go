//go:build linux && !nbio_portable

package nbio

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fairlead/fairlead/bench/sim"
)

// eventedPair returns a *TCPConn on the client end of a loopback TCP connection (not yet evented)
// and the peer's end, both with pair's deadlines and closed when the test ends.
func eventedPair(t *testing.T) (*TCPConn, *net.TCPConn) {
	t.Helper()
	nc, peer := pair(t)
	c, err := NewTCPConn(nc.TCP())
	if err != nil {
		t.Fatal(err)
	}
	return c, peer
}

// smallEventedPair is eventedPair with small socket buffers, in evented mode: a few writes fill it.
func smallEventedPair(t *testing.T) (*TCPConn, *net.TCPConn) {
	t.Helper()
	c, peer := eventedPair(t)
	smallBuffers(t, c.TCPConn, peer)
	c.SetEvented(true)
	return c, peer
}

// parkedFlush starts c.Flush in a goroutine and returns once it is parked waiting for the socket; the
// channel gets its result.
func parkedFlush(t *testing.T, c *TCPConn) chan error {
	t.Helper()
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush() }()
	if err := waitParked("(*TCPConn).Flush", "waitWrite"); err != nil {
		t.Fatal(err)
	}
	return flushed
}

// queued is the number of bytes waiting unread in tc's receive queue (SIOCINQ).
func queued(t *testing.T, tc *net.TCPConn) int {
	t.Helper()
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

// waitPoll waits in poll(2) until tc's socket reports one of events (POLLERR and POLLHUP always
// count), failing t after testTimeout.
func waitPoll(t *testing.T, tc *net.TCPConn, events int16) {
	t.Helper()
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var perr error
	deadline := time.Now().Add(testTimeout)
	err = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		for {
			left := time.Until(deadline)
			if left <= 0 {
				perr = fmt.Errorf("poll: no event %#x after %v", events, testTimeout)
				return
			}
			n, err := unix.Poll(fds, int(left.Milliseconds())+1)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				perr = err
				return
			}
			if n > 0 {
				return
			}
		}
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitQueued waits until at least n bytes wait unread in tc's receive queue: poll(2) wakes it when
// bytes come; it is never a sleep.
func waitQueued(t *testing.T, tc *net.TCPConn, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for queued(t, tc) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d bytes queued after %v", n, testTimeout)
		}
		waitPoll(t, tc, unix.POLLIN)
	}
}

// checkWouldBlock fails t unless n, err is what an evented read of an empty socket answers.
func checkWouldBlock(t *testing.T, n int, err error) {
	t.Helper()
	if n != 0 || !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("Read: %d, %v; want 0, ErrWouldBlock", n, err)
	}
	if !errors.Is(err, unix.EAGAIN) || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("%v is not EAGAIN for errors.Is", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Temporary() || !ne.Timeout() {
		t.Fatalf("%v is not a net.Error with Temporary() and Timeout() true", err)
	}
}

// readEvented reads n bytes from r, which reads c in evented mode, in reads of at most chunk bytes:
// on ErrWouldBlock it waits in poll(2) for the socket to be readable, as an event loop would.
func readEvented(t *testing.T, r io.Reader, c *TCPConn, n, chunk int) []byte {
	t.Helper()
	got := make([]byte, 0, n)
	buf := make([]byte, chunk)
	deadline := time.Now().Add(testTimeout)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes read after %v", len(got), n, testTimeout)
		}
		m, err := r.Read(buf[:min(chunk, n-len(got))])
		got = append(got, buf[:m]...)
		switch {
		case errors.Is(err, ErrWouldBlock):
			waitPoll(t, c.TCPConn, unix.POLLIN|unix.POLLRDHUP)
		case err != nil:
			t.Fatalf("after %d of %d bytes: %v", len(got), n, err)
		}
	}
	return got
}

// fillUntilBlocked makes evented Writes to c of successive parts of data (of varied sizes) until
// Blocked is true, failing t unless each returns (len, nil), and returns how many bytes it wrote.
func fillUntilBlocked(t *testing.T, c *TCPConn, data []byte) int {
	t.Helper()
	sizes := []int{1, 4096, 64 << 10, 1000, 32<<10 + 3}
	off := 0
	for i := 0; !c.Blocked(); i++ {
		size := sizes[i%len(sizes)]
		if off+size > len(data) {
			t.Fatalf("the socket took all %d bytes without blocking", off)
		}
		if n, err := c.Write(data[off : off+size]); n != size || err != nil {
			t.Fatalf("evented Write of %d bytes: %d, %v; want %d, nil", size, n, err, size)
		}
		off += size
	}
	return off
}

// pendingLen is how many bytes c keeps for Flush.
func pendingLen(c *TCPConn) int {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	return len(c.ev.pending)
}

// countRecords parses b as TLS records from its first byte: the number of whole records, and how
// many bytes follow the last one.
func countRecords(b []byte) (whole uint64, rest int) {
	for len(b) >= 5 {
		l := 5 + int(binary.BigEndian.Uint16(b[3:5]))
		if len(b) < l {
			break
		}
		whole++
		b = b[l:]
	}
	return whole, len(b)
}

// record is a TLS record of type typ whose fragment is n bytes (random ones).
func record(typ byte, n int) []byte {
	b := append([]byte{typ, 3, 3, byte(n >> 8), byte(n)}, random(n)...)
	return b
}

func TestAnEventedReadOfAnEmptySocketAnswersErrWouldBlockAndDrained(t *testing.T) {
	c, _ := eventedPair(t)
	c.SetEvented(true)
	if c.Drained() {
		t.Fatal("Drained before any read")
	}
	for i := 0; i < 2; i++ {
		n, err := c.Read(make([]byte, 16))
		checkWouldBlock(t, n, err)
		if err != ErrWouldBlock {
			t.Fatalf("Read: %v (%T), want ErrWouldBlock itself", err, err)
		}
		if !c.Drained() {
			t.Fatal("Drained false after ErrWouldBlock")
		}
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("evented Read(nil): %d, %v; want 0, nil", n, err)
	}
}

func TestAnEventedReadReturnsWhatWaitsAndIsDrainedOnlyAfterAShortRead(t *testing.T) {
	c, peer := eventedPair(t)
	c.SetEvented(true)
	if _, err := peer.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c.TCPConn, 10)
	buf := make([]byte, 16)
	if n, err := c.Read(buf[:4]); n != 4 || err != nil || string(buf[:n]) != "0123" {
		t.Fatalf("Read: %q, %v; want \"0123\", nil", buf[:n], err)
	}
	if c.Drained() {
		t.Fatal("Drained after a read that filled its buffer with bytes still waiting")
	}
	// The buffer is filled exactly by the last bytes: one cannot tell the socket is empty.
	if n, err := c.Read(buf[:6]); n != 6 || err != nil || string(buf[:n]) != "456789" {
		t.Fatalf("Read: %q, %v; want \"456789\", nil", buf[:n], err)
	}
	if c.Drained() {
		t.Fatal("Drained after a read that filled its buffer exactly")
	}
	n, err := c.Read(buf)
	checkWouldBlock(t, n, err)
	if !c.Drained() {
		t.Fatal("not Drained after ErrWouldBlock")
	}

	if _, err := peer.Write([]byte("short")); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c.TCPConn, 5)
	if n, err := c.Read(buf); n != 5 || err != nil || string(buf[:n]) != "short" {
		t.Fatalf("Read: %q, %v; want \"short\", nil", buf[:n], err)
	}
	if !c.Drained() {
		t.Fatal("not Drained after a short read")
	}
	if q := queued(t, c.TCPConn); q != 0 {
		t.Fatalf("%d bytes still queued after a short read", q)
	}
}

func TestAnEventedReadAfterThePeerClosedReturnsItsLastBytesThenEOF(t *testing.T) {
	c, peer := eventedPair(t)
	c.SetEvented(true)
	if _, err := peer.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	waitPoll(t, c.TCPConn, unix.POLLRDHUP) // the FIN is in
	buf := make([]byte, 16)
	if n, err := c.Read(buf); n != 3 || err != nil || string(buf[:n]) != "bye" {
		t.Fatalf("Read: %q, %v; want \"bye\", nil", buf[:n], err)
	}
	for i := 0; i < 2; i++ {
		if n, err := c.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("Read after the peer closed: %d, %v; want 0, io.EOF", n, err)
		}
	}
}

func TestAnEventedReadFromAResetPeerFailsWithECONNRESET(t *testing.T) {
	c, peer := eventedPair(t)
	c.SetEvented(true)
	reset(t, peer)
	waitPoll(t, c.TCPConn, unix.POLLRDHUP)
	_, err := c.Read(make([]byte, 8))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read: %v, want ECONNRESET", err)
	}
	checkOpError(t, err, "read")
}

func TestAnEventedReadOfAClosedConnFailsWithErrClosed(t *testing.T) {
	c, _ := eventedPair(t)
	c.SetEvented(true)
	c.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read: %v, want net.ErrClosed", err)
	}
}

func TestAnEventedWriteToAPeerThatDoesNotReadNeverWaitsAndFlushDeliversEverythingInOrder(t *testing.T) {
	c, peer := smallEventedPair(t)
	data := random(16 << 20)
	off := fillUntilBlocked(t, c, data)
	if pendingLen(c) == 0 {
		t.Fatal("Blocked with nothing pending")
	}
	// Later writes go behind what is pending, whole, even the ones the socket could take a byte of.
	for _, size := range []int{1, 100 << 10, 7} {
		before := pendingLen(c)
		if n, err := c.Write(data[off : off+size]); n != size || err != nil {
			t.Fatalf("evented Write of %d bytes while blocked: %d, %v", size, n, err)
		}
		off += size
		if got := pendingLen(c); got != before+size {
			t.Fatalf("pending went from %d to %d bytes after a %d-byte Write, want %d", before, got, size, before+size)
		}
		if !c.Blocked() {
			t.Fatal("Blocked false with bytes pending")
		}
	}
	// The peer reads what it holds, and the socket has room again (POLLOUT): a Write still goes
	// behind what is pending rather than to the socket.
	held := queued(t, peer)
	if held == 0 {
		t.Fatal("the client's socket is full and the peer holds nothing")
	}
	expectRead(t, peer, data[:held], 64<<10)
	waitPoll(t, c.TCPConn, unix.POLLOUT)
	before := pendingLen(c)
	if n, err := c.Write(data[off : off+5]); n != 5 || err != nil {
		t.Fatalf("evented Write of 5 bytes with room in the socket: %d, %v", n, err)
	}
	off += 5
	if got := pendingLen(c); got != before+5 {
		t.Fatalf("pending went from %d to %d bytes after a 5-byte Write, want %d", before, got, before+5)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush() }()
	expectRead(t, peer, data[held:off], 64<<10)
	if err := await(t, flushed); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if c.Blocked() || pendingLen(c) != 0 {
		t.Fatalf("after Flush: Blocked %v, %d bytes pending", c.Blocked(), pendingLen(c))
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush with nothing pending: %v", err)
	}
	// With nothing pending, an evented Write goes straight to the socket again.
	if n, err := c.Write([]byte("after")); n != 5 || err != nil || c.Blocked() {
		t.Fatalf("Write after Flush: %d, %v, Blocked %v; want 5, nil, false", n, err, c.Blocked())
	}
	expectRead(t, peer, []byte("after"), 16)
}

func TestFlushWithNothingPendingReturnsNilAtOnce(t *testing.T) {
	c, peer := eventedPair(t)
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush of a conn never evented: %v", err)
	}
	c.SetEvented(true)
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush before any write: %v", err)
	}
	if n, err := c.Write([]byte("x")); n != 1 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if c.Blocked() {
		t.Fatal("Blocked after a 1-byte write to an empty socket")
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush after a write the socket took: %v", err)
	}
	expectRead(t, peer, []byte("x"), 1)
}

func TestAFlushRunningWhileEventedWritesGoOnDeliversThemAllInOrder(t *testing.T) {
	c, peer := smallEventedPair(t)
	data := random(8 << 20)
	received := make(chan error, 1)
	go func() {
		got, err := readN(peer, len(data), 64<<10)
		if err == nil && !bytes.Equal(got, data) {
			err = errors.New("the peer received other bytes")
		}
		received <- err
	}()
	// The event loop's way: when a Write leaves the conn Blocked, it asks the flusher to Flush.
	kick := make(chan struct{}, 1)
	flushed := make(chan error, 1)
	go func() {
		var err error
		for range kick {
			if err == nil {
				err = c.Flush()
			}
		}
		if err == nil {
			err = c.Flush()
		}
		if err == nil && c.Blocked() {
			err = errors.New("Blocked after the last Flush returned")
		}
		flushed <- err
	}()
	// The writes run in a goroutine of their own so that one that waits (it must not) fails the test
	// after testTimeout rather than hanging it: no deadline wakes a wait for the socket's write lock.
	wrote := make(chan error, 1)
	go func() {
		defer close(kick)
		sizes := []int{1, 4096, 64 << 10, 1000, 32<<10 + 3, 256 << 10}
		blocked := 0
		for off, i := 0, 0; off < len(data); i++ {
			size := min(sizes[i%len(sizes)], len(data)-off)
			if n, err := c.Write(data[off : off+size]); n != size || err != nil {
				wrote <- fmt.Errorf("evented Write of %d bytes: %d, %v", size, n, err)
				return
			}
			off += size
			if c.Blocked() {
				blocked++
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}
		if blocked == 0 {
			wrote <- errors.New("the writes never blocked")
			return
		}
		wrote <- nil
	}()
	if err := await(t, wrote); err != nil {
		t.Fatal(err)
	}
	if err := await(t, flushed); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := await(t, received); err != nil {
		t.Fatal(err)
	}
}

func TestAFlushParkedOnAFullSocketFailsWithErrClosedWhenTheConnIsClosed(t *testing.T) {
	c, _ := smallEventedPair(t)
	fillUntilBlocked(t, c, random(16<<20))
	flushed := parkedFlush(t, c)
	c.Close()
	if err := await(t, flushed); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Flush: %v, want net.ErrClosed", err)
	}
	if !c.Blocked() {
		t.Fatal("Blocked false with bytes never written")
	}
	if err := c.Flush(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Flush after Close: %v, want net.ErrClosed", err)
	}
}

func TestAFlushParkedOnAFullSocketTimesOutAtItsWriteDeadlineAndLosesNothing(t *testing.T) {
	c, peer := smallEventedPair(t)
	data := random(16 << 20)
	off := fillUntilBlocked(t, c, data)
	flushed := parkedFlush(t, c)
	if err := c.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	checkTimeout(t, await(t, flushed))
	if !c.Blocked() {
		t.Fatal("Blocked false with bytes not written")
	}
	checkTimeout(t, c.Flush()) // the deadline still passed: at once
	// An evented Write past the deadline fails as a net.Conn's does, and keeps nothing.
	before := pendingLen(c)
	n, err := c.Write(data[off : off+10])
	if n != 0 {
		t.Fatalf("evented Write after the timeout took %d bytes", n)
	}
	checkTimeout(t, err)
	if pendingLen(c) != before {
		t.Fatal("an evented Write past the deadline kept its bytes")
	}

	if err := c.SetWriteDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	go func() { flushed <- c.Flush() }()
	expectRead(t, peer, data[:off], 64<<10)
	if err := await(t, flushed); err != nil {
		t.Fatalf("Flush with the deadline moved on: %v", err)
	}
	if c.Blocked() {
		t.Fatal("Blocked after Flush returned nil")
	}
}

// recorder is the peer's end of the connection as its tls.Client sees it: it keeps a copy of every
// byte written, and can write the next Write in two parts, waiting between them until told to go on.
type recorder struct {
	*net.TCPConn
	mu              sync.Mutex
	sent            []byte
	splitAt         int
	firstSent, goOn chan struct{}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.sent = append(r.sent, b...)
	k, firstSent, goOn := r.splitAt, r.firstSent, r.goOn
	r.splitAt = 0
	r.mu.Unlock()
	if k <= 0 || k >= len(b) {
		return r.TCPConn.Write(b)
	}
	n, err := r.TCPConn.Write(b[:k])
	close(firstSent)
	if err != nil {
		return n, err
	}
	select {
	case <-goOn:
	case <-time.After(testTimeout):
		return n, errors.New("recorder: never told to write the second part")
	}
	m, err := r.TCPConn.Write(b[k:])
	return n + m, err
}

// splitNext makes the next Write go out as its first k bytes, then (after goOn is closed) the rest;
// firstSent is closed once the first part is written.
func (r *recorder) splitNext(k int) (firstSent, goOn chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.splitAt, r.firstSent, r.goOn = k, make(chan struct{}), make(chan struct{})
	return r.firstSent, r.goOn
}

// written is a copy of every byte written so far.
func (r *recorder) written() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.sent)
}

// tlsPair makes a TLS 1.3 connection over a loopback TCP connection: srv over c, a *TCPConn counting
// TLS records from its first byte, and cli, the peer's tls.Client, over rec. The handshake is made
// with c in normal mode; c is evented when tlsPair returns. small shrinks the kernel buffers.
func tlsPair(t *testing.T, small bool) (srv *tls.Conn, c *TCPConn, cli *tls.Conn, rec *recorder) {
	t.Helper()
	c, peer := eventedPair(t)
	if small {
		smallBuffers(t, c.TCPConn, peer)
	}
	c.CountTLSRecords()
	ca, err := sim.NewCA("nbio test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, MinVersion: tls.VersionTLS13})
	rec = &recorder{TCPConn: peer}
	// Without dynamic record sizing, each of cli's Writes of up to 16 KiB is one record, one Write of rec.
	cli = tls.Client(rec, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true})
	done := make(chan error, 1)
	go func() { done <- cli.Handshake() }()
	if err := srv.Handshake(); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if err := await(t, done); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if v := srv.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Fatalf("TLS version %#x, want TLS 1.3", v)
	}
	c.SetEvented(true)
	return srv, c, cli, rec
}

func TestATLSReadOverAnEventedConnAnswersErrWouldBlockAndKeepsWorking(t *testing.T) {
	srv, c, cli, rec := tlsPair(t, false)
	buf := make([]byte, 256)
	for _, msg := range []string{"ping", "a second message", "and a third"} {
		for i := 0; i < 2; i++ {
			n, err := srv.Read(buf)
			checkWouldBlock(t, n, err)
			if !c.Drained() {
				t.Fatal("not Drained after ErrWouldBlock")
			}
		}
		before := len(rec.written())
		if _, err := cli.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, c.TCPConn, len(rec.written())-before)
		if n, err := srv.Read(buf); err != nil || string(buf[:n]) != msg {
			t.Fatalf("tls Read: %q, %v; want %q, nil", buf[:n], err, msg)
		}
		answer := "re: " + msg
		if n, err := srv.Write([]byte(answer)); n != len(answer) || err != nil || c.Blocked() {
			t.Fatalf("evented tls Write: %d, %v, Blocked %v", n, err, c.Blocked())
		}
		expectRead(t, cli, []byte(answer), 256)
	}
}

func TestATLSRecordThatArrivesInTwoPartsIsReturnedWholeOnceTheSecondIsThere(t *testing.T) {
	srv, c, cli, rec := tlsPair(t, false)
	const size = 10000
	// A 10000-byte write is one record of 5 + 10000 + 1 (type) + 16 (AEAD tag) bytes: split it in
	// its header, just after it, in the middle and before its last byte.
	recLen := 5 + size + 1 + 16
	buf := make([]byte, 32<<10)
	for i, k := range []int{1, 3, 4, 5, 6, recLen / 2, recLen - 1} {
		msg := random(size + i)[:size] // other bytes each time
		before := c.TLSRecords()
		sentBefore := len(rec.written())
		firstSent, goOn := rec.splitNext(k)
		written := make(chan error, 1)
		go func() {
			_, err := cli.Write(msg)
			written <- err
		}()
		await[struct{}](t, firstSent)
		waitQueued(t, c.TCPConn, k)
		n, err := srv.Read(buf)
		checkWouldBlock(t, n, err)
		if !c.Drained() || queued(t, c.TCPConn) != 0 {
			t.Fatalf("split at %d: the first part was not read whole (Drained %v, %d bytes queued)", k, c.Drained(), queued(t, c.TCPConn))
		}
		if got := c.TLSRecords(); got != before {
			t.Fatalf("split at %d: TLSRecords %d with the record half read, want %d", k, got, before)
		}
		close(goOn)
		if err := await(t, written); err != nil {
			t.Fatal(err)
		}
		sent := rec.written()[sentBefore:]
		if whole, rest := countRecords(sent); whole != 1 || rest != 0 || len(sent) != recLen {
			t.Fatalf("the peer's Write was %d bytes, %d records and %d bytes; want one record of %d", len(sent), whole, rest, recLen)
		}
		waitQueued(t, c.TCPConn, recLen-k)
		n, err = srv.Read(buf)
		if err != nil || n != size || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("split at %d: tls Read of %d bytes, %v; want the %d bytes written, nil", k, n, err, size)
		}
		if got := c.TLSRecords(); got != before+1 {
			t.Fatalf("split at %d: TLSRecords %d with the record read, want %d", k, got, before+1)
		}
		n, err = srv.Read(buf)
		checkWouldBlock(t, n, err)
	}
}

func TestEventedTLSWritesOfSeveralMiBToAPeerThatDoesNotReadNeverWaitAndArriveIntactAfterFlush(t *testing.T) {
	srv, c, cli, _ := tlsPair(t, true)
	data := random(6 << 20)
	const chunk = 512 << 10
	for off := 0; off < len(data); off += chunk {
		if n, err := srv.Write(data[off : off+chunk]); n != chunk || err != nil {
			t.Fatalf("evented tls Write at %d: %d, %v; want %d, nil", off, n, err, chunk)
		}
	}
	if !c.Blocked() {
		t.Fatal("6 MiB to a peer that does not read, and not Blocked")
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush() }()
	expectRead(t, cli, data, 64<<10)
	if err := await(t, flushed); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if c.Blocked() {
		t.Fatal("Blocked after Flush returned nil")
	}
}

func TestTLSRecordsCountsExactlyTheCompleteRecordsReadSoFar(t *testing.T) {
	var stream []byte
	for _, r := range [][]byte{
		record(22, 5),          // 10 bytes
		record(23, 0),          // 5
		record(23, 0),          // 5
		record(23, 16<<10+256), // 16645, its length's high byte 0x41
		record(21, 2),          // 7
		record(23, 0),          // 5
		record(23, 300),        // 305
	} {
		stream = append(stream, r...)
	}
	// What the peer writes at each step, and the whole records read once all of it is read.
	steps := []struct{ write, want int }{
		{1, 0}, {3, 0}, {1, 0}, // the first header, in three parts
		{2, 0}, {3, 1}, // its fragment in two
		{5, 2},                       // a zero-length record
		{10, 3},                      // another, and the big record's header
		{1000, 3}, {16640 - 1001, 3}, // all of its fragment but the last byte
		{1, 4},
		{7 + 5 + 305, 7}, // three records at once
	}
	for _, evented := range []bool{true, false} {
		for _, chunk := range []int{1, 3, 64 << 10} {
			t.Run(fmt.Sprintf("evented=%v/reads of at most %d bytes", evented, chunk), func(t *testing.T) {
				c, peer := eventedPair(t)
				c.CountTLSRecords()
				c.SetEvented(evented)
				buf := make([]byte, chunk)
				written, read := 0, 0
				deadline := time.Now().Add(testTimeout)
				for _, s := range steps {
					if _, err := peer.Write(stream[written : written+s.write]); err != nil {
						t.Fatal(err)
					}
					written += s.write
					for read < written {
						if time.Now().After(deadline) {
							t.Fatalf("%d of %d bytes read after %v", read, written, testTimeout)
						}
						n, err := c.Read(buf[:min(chunk, written-read)])
						if evented && errors.Is(err, ErrWouldBlock) {
							waitPoll(t, c.TCPConn, unix.POLLIN)
							continue
						}
						if err != nil {
							t.Fatalf("after %d bytes: %v", read, err)
						}
						if !bytes.Equal(buf[:n], stream[read:read+n]) {
							t.Fatalf("read other bytes at %d", read)
						}
						read += n
						if want, _ := countRecords(stream[:read]); c.TLSRecords() != want {
							t.Fatalf("after %d bytes: TLSRecords %d, want %d", read, c.TLSRecords(), want)
						}
					}
					if got := c.TLSRecords(); got != uint64(s.want) {
						t.Fatalf("after %d bytes: TLSRecords %d, want %d", read, got, s.want)
					}
				}
				if written != len(stream) {
					t.Fatalf("the steps wrote %d of %d bytes", written, len(stream))
				}
			})
		}
	}
}

func TestTLSRecordsIsZeroWhenRecordsAreNotCounted(t *testing.T) {
	c, peer := eventedPair(t)
	stream := append(record(23, 0), record(23, 3)...)
	if _, err := peer.Write(stream); err != nil {
		t.Fatal(err)
	}
	expectRead(t, c, stream, 64)
	if got := c.TLSRecords(); got != 0 {
		t.Fatalf("TLSRecords %d without CountTLSRecords, want 0", got)
	}
}

func TestTLSRecordsOverATLS13ConnectionIsTheNumberOfRecordsThePeerSent(t *testing.T) {
	srv, c, cli, rec := tlsPair(t, true)
	sizes := []int{1, 100, 1000, 16 << 10, 16<<10 + 1, 50000, 1 << 20, 3}
	total := 0
	for _, s := range sizes {
		total += s
	}
	data := random(total)
	written := make(chan error, 1)
	go func() {
		off := 0
		for _, s := range sizes {
			if _, err := cli.Write(data[off : off+s]); err != nil {
				written <- err
				return
			}
			off += s
		}
		written <- nil
	}()
	got := readEvented(t, srv, c, total, 7000)
	if !bytes.Equal(got, data) {
		t.Fatal("the server read other bytes than the peer wrote")
	}
	if err := await(t, written); err != nil {
		t.Fatal(err)
	}
	if q := queued(t, c.TCPConn); q != 0 {
		t.Fatalf("%d bytes still queued", q)
	}
	want, rest := countRecords(rec.written())
	if rest != 0 {
		t.Fatalf("the peer's bytes end with %d bytes of an unfinished record", rest)
	}
	if want <= uint64(len(sizes)) {
		t.Fatalf("only %d records in the peer's bytes (handshake and %d writes)", want, len(sizes))
	}
	if got := c.TLSRecords(); got != want {
		t.Fatalf("TLSRecords %d, want %d (the records in the peer's %d bytes)", got, want, len(rec.written()))
	}
}

func TestSetEventedFalseMakesReadAndWriteParkAgain(t *testing.T) {
	c, peer := smallEventedPair(t)
	n, err := c.Read(make([]byte, 8))
	checkWouldBlock(t, n, err)
	c.SetEvented(false)
	if c.Drained() {
		t.Fatal("Drained after SetEvented")
	}

	type result struct {
		n   int
		err error
		b   []byte
	}
	read := make(chan result, 1)
	go func() {
		b := make([]byte, 16)
		n, err := c.Read(b)
		read <- result{n, err, b[:n]}
	}()
	if err := waitParked("(*Conn).Read", "waitRead"); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	if r := await(t, read); r.err != nil || string(r.b) != "late" {
		t.Fatalf("Read: %q, %v; want \"late\", nil", r.b, r.err)
	}

	data := random(4 << 20)
	wrote := make(chan result, 1)
	go func() {
		n, err := c.Write(data)
		wrote <- result{n: n, err: err}
	}()
	if err := waitParked("(*Conn).Write", "waitWrite"); err != nil {
		t.Fatal(err)
	}
	if c.Blocked() || pendingLen(c) != 0 {
		t.Fatal("a parked Write in normal mode left bytes pending")
	}
	expectRead(t, peer, data, 64<<10)
	if r := await(t, wrote); r.n != len(data) || r.err != nil {
		t.Fatalf("Write: %d, %v; want %d, nil", r.n, r.err, len(data))
	}
}

// Several goroutines may flush while evented writes go on (the tunnel engine flushes a tunnel's two
// connections from the goroutine of each side that wrote): Write and Flush take the socket's write lock
// and then the pending buffer's lock in the same order, so none waits for another in a circle, and the
// peer gets every byte in order.
func TestConcurrentFlushesAndEventedWritesNeverDeadlockAndKeepTheOrder(t *testing.T) {
	c, peer := smallEventedPair(t)
	data := random(8 << 20)
	stop := make(chan struct{})
	flushers := make(chan error, 4)
	for range cap(flushers) {
		go func() {
			for {
				select {
				case <-stop:
					flushers <- nil
					return
				default:
				}
				if err := c.Flush(); err != nil {
					flushers <- err
					return
				}
				runtime.Gosched()
			}
		}()
	}
	wrote := make(chan error, 1)
	go func() {
		for off := 0; off < len(data); off += 512 {
			if _, err := c.Write(data[off : off+512]); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	expectRead(t, peer, data, 64<<10) // fails after testTimeout if a writer or a flusher is stuck
	if err := await(t, wrote); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for range cap(flushers) {
		if err := await(t, flushers); err != nil {
			t.Fatal(err)
		}
	}
}
