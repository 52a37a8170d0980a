package nbio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testTimeout bounds every wait of these tests: it is a guard against hangs, never a measure of speed.
const testTimeout = 10 * time.Second

// pair returns a Conn on the client end of a loopback TCP connection and the accepted server end
// (the peer). Both have deadlines testTimeout away and are closed when the test ends.
func pair(t *testing.T) (*Conn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tl := ln.(*net.TCPListener)
	if err := tl.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Timeout: testTimeout}
	nc, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := nc.(*net.TCPConn)
	t.Cleanup(func() { tc.Close() })
	peer, err := tl.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	for _, x := range []*net.TCPConn{tc, peer} {
		if err := x.SetDeadline(time.Now().Add(testTimeout)); err != nil {
			t.Fatal(err)
		}
	}
	c := new(Conn)
	if err := c.Init(tc); err != nil {
		t.Fatal(err)
	}
	if c.TCP() != tc {
		t.Fatal("TCP() is not the connection given to Init")
	}
	return c, peer
}

// smallBuffers shrinks the kernel buffers between client and peer (which also turns off their
// autotuning), so that a few hundred KiB are sure to fill them whatever the machine's tcp_wmem/rmem.
func smallBuffers(t *testing.T, client, peer *net.TCPConn) {
	t.Helper()
	for _, err := range []error{client.SetWriteBuffer(32 << 10), client.SetReadBuffer(32 << 10), peer.SetReadBuffer(32 << 10), peer.SetWriteBuffer(32 << 10)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// random returns n bytes that do not repeat with any short period, so a lost, doubled or misplaced
// chunk shows in a comparison.
func random(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)}).Read(b)
	return b
}

// readN reads exactly n bytes from r, at most chunk bytes per Read.
func readN(r io.Reader, n, chunk int) ([]byte, error) {
	got := make([]byte, 0, n)
	buf := make([]byte, chunk)
	for len(got) < n {
		m, err := r.Read(buf[:min(chunk, n-len(got))])
		got = append(got, buf[:m]...)
		if err != nil {
			return got, fmt.Errorf("after %d of %d bytes: %w", len(got), n, err)
		}
	}
	return got, nil
}

// expectRead reads len(want) bytes from r in reads of at most chunk bytes, failing t unless they are want.
func expectRead(t *testing.T, r io.Reader, want []byte, chunk int) {
	t.Helper()
	got, err := readN(r, len(want), chunk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from the %d expected", len(got), len(want))
	}
}

// expectAnswer calls WriteThenRead(first) with a buffer of size bytes, failing t unless it returns
// want with no error, then waits for the peer's goroutine to report on done.
func expectAnswer(t *testing.T, c *Conn, first []byte, want string, size int, done <-chan error) {
	t.Helper()
	b := make([]byte, size)
	n, werr, rerr := c.WriteThenRead(first, b)
	if werr != nil || rerr != nil || string(b[:n]) != want {
		t.Fatalf("WriteThenRead: %q, %v, %v; want %q, nil, nil", b[:n], werr, rerr, want)
	}
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// await returns what ch delivers, failing the test if nothing comes within testTimeout.
func await[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("nothing after %v", testTimeout)
		panic("unreachable")
	}
}

// waitParked waits until a goroutine is parked in Go's netpoller (internal/poll's waitRead or
// waitWrite, as wait says) under the function fn: the call found the socket not ready and waits for
// it. It replaces sleeps: it returns as soon as the stack shows it, or an error after testTimeout.
func waitParked(fn, wait string) error {
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(testTimeout)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "internal/poll.(*pollDesc)."+wait+"(") && strings.Contains(g, "/nbio."+fn+"(") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no goroutine parked in %s under %s after %v", wait, fn, testTimeout)
		}
		runtime.Gosched()
	}
}

// echo writes back what it reads from peer, size bytes at a time at most, with one buffer, until a
// read or write fails (the connection closed, or the deadline).
func echo(peer *net.TCPConn, size int) {
	buf := make([]byte, size)
	for {
		n, err := peer.Read(buf)
		if err != nil {
			return
		}
		if _, err := peer.Write(buf[:n]); err != nil {
			return
		}
	}
}

// isReset reports whether err is what a write or read to a peer that has reset the connection gives.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// checkOpError fails the test unless err is a *net.OpError of the operation op.
func checkOpError(t *testing.T, err error, op string) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("%v (%T) is not a *net.OpError", err, err)
	}
	if oe.Op != op {
		t.Fatalf("%v: Op %q, want %q", err, oe.Op, op)
	}
}

// checkTimeout fails the test unless err is a passed deadline, as net.Conn reports it.
func checkTimeout(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v is not a net.Error with Timeout() true", err)
	}
}

// TestConnReadWriteRoundTrip proves bytes written through a Conn reach the peer exactly, and the
// peer's bytes are read exactly, including a read into a buffer larger than what is there.
func TestConnReadWriteRoundTrip(t *testing.T) {
	c, peer := pair(t)
	out := []byte("hello from the client")
	if n, err := c.Write(out); err != nil || n != len(out) {
		t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(out))
	}
	got := make([]byte, len(out))
	if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, out) {
		t.Fatalf("peer read %q, %v; want %q", got, err, out)
	}

	in := []byte("and the peer's answer")
	if _, err := peer.Write(in); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1024)
	n := 0
	for n < len(in) {
		m, err := c.Read(b[n:])
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", n, err)
		}
		n += m
	}
	if !bytes.Equal(b[:n], in) {
		t.Fatalf("Read %q, want %q", b[:n], in)
	}
}

// TestConnWriteParksUntilThePeerReads proves a 4 MiB Write that fills the socket (EAGAIN) parks in the
// netpoller and, once the peer reads (in 4 KiB reads), delivers every byte in order and reports them all.
func TestConnWriteParksUntilThePeerReads(t *testing.T) {
	c, peer := pair(t)
	smallBuffers(t, c.TCP(), peer)
	data := random(4 << 20)
	done := make(chan error, 1)
	go func() {
		n, err := c.Write(data)
		if err == nil && n != len(data) {
			err = fmt.Errorf("Write reported %d of %d bytes", n, len(data))
		}
		done <- err
	}()
	if err := waitParked("(*Conn).Write", "waitWrite"); err != nil {
		t.Fatal(err)
	}
	expectRead(t, peer, data, 4<<10)
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnReadParksUntilThePeerWrites proves a Read that finds nothing parks and is woken by the peer's bytes.
func TestConnReadParksUntilThePeerWrites(t *testing.T) {
	c, peer := pair(t)
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b := make([]byte, 16)
		n, err := c.Read(b)
		done <- result{b[:n], err}
	}()
	if err := waitParked("(*Conn).Read", "waitRead"); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("wake")); err != nil {
		t.Fatal(err)
	}
	if r := await(t, done); r.err != nil || string(r.b) != "wake" {
		t.Fatalf("Read %q, %v; want \"wake\", nil", r.b, r.err)
	}
}

// TestConnFullDuplex proves one goroutine may Write while another Reads the same Conn (run it with
// -race): 1 MiB goes to an echoing peer and comes back exact while it is still being written.
func TestConnFullDuplex(t *testing.T) {
	c, peer := pair(t)
	smallBuffers(t, c.TCP(), peer)
	go echo(peer, 8<<10)
	data := random(1 << 20)
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		done <- err
	}()
	expectRead(t, c, data, 8<<10)
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnReadReturnsEOFAfterThePeerCloses proves Read hands over the peer's last bytes, then returns
// exactly (0, io.EOF), again on every later call.
func TestConnReadReturnsEOFAfterThePeerCloses(t *testing.T) {
	c, peer := pair(t)
	if _, err := peer.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	got, err := readN(c, 4, 4)
	if err != nil || string(got) != "last" {
		t.Fatalf("read %q, %v; want \"last\"", got, err)
	}
	b := make([]byte, 8)
	for i := 0; i < 2; i++ {
		if n, err := c.Read(b); n != 0 || err != io.EOF {
			t.Fatalf("Read after the peer closed: %d, %v; want 0, io.EOF", n, err)
		}
	}
}

// TestConnReadOfNothingReturnsAtOnce proves Read with an empty buffer returns (0, nil) without waiting
// and without consuming what the peer sent.
func TestConnReadOfNothingReturnsAtOnce(t *testing.T) {
	c, peer := pair(t)
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) with nothing sent: %d, %v; want 0, nil", n, err)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read([]byte{}); n != 0 || err != nil {
		t.Fatalf("Read of an empty buffer: %d, %v; want 0, nil", n, err)
	}
	if got, err := readN(c, 1, 1); err != nil || string(got) != "x" {
		t.Fatalf("read %q, %v; want \"x\"", got, err)
	}
}

// TestConnReadPastDeadline proves a Read under a deadline that has passed fails as net.Conn's does:
// os.ErrDeadlineExceeded, a net.Error whose Timeout() is true.
func TestConnReadPastDeadline(t *testing.T) {
	c, _ := pair(t)
	if err := c.TCP().SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(make([]byte, 8))
	if n != 0 {
		t.Fatalf("Read returned %d bytes", n)
	}
	checkTimeout(t, err)
}

// TestConnBlockedReadIsWokenByADeadline proves a Read parked for bytes returns a timeout as soon as
// another goroutine sets a deadline that has passed.
func TestConnBlockedReadIsWokenByADeadline(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		done <- err
	}()
	if err := waitParked("(*Conn).Read", "waitRead"); err != nil {
		t.Fatal(err)
	}
	if err := c.TCP().SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	checkTimeout(t, await(t, done))
}

// TestConnWriteParkedHonoursADeadline proves a Write parked on a full socket returns a timeout when
// its deadline passes (the peer never reads), and that the count it returns is exactly the bytes the
// peer then receives.
func TestConnWriteParkedHonoursADeadline(t *testing.T) {
	c, peer := pair(t)
	smallBuffers(t, c.TCP(), peer)
	data := random(4 << 20)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := c.Write(data)
		done <- result{n, err}
	}()
	if err := waitParked("(*Conn).Write", "waitWrite"); err != nil {
		t.Fatal(err)
	}
	if err := c.TCP().SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	r := await(t, done)
	checkTimeout(t, r.err)
	if r.n <= 0 || r.n >= len(data) {
		t.Fatalf("Write reported %d bytes, want some of %d", r.n, len(data))
	}
	c.TCP().Close() // the peer reads what was sent, then EOF
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:r.n]) {
		t.Fatalf("the peer read %d bytes, the Write reported %d (or other bytes)", len(got), r.n)
	}
}

// TestConnAfterCloseFailsWithErrClosed proves Read, Write and WriteThenRead on a closed Conn fail with
// net.ErrClosed (WriteThenRead's as its read error, nothing written).
func TestConnAfterCloseFailsWithErrClosed(t *testing.T) {
	c, _ := pair(t)
	c.TCP().Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write: %v, want net.ErrClosed", err)
	}
	n, werr, rerr := c.WriteThenRead([]byte("x"), make([]byte, 8))
	if n != 0 || werr != nil || !errors.Is(rerr, net.ErrClosed) {
		t.Fatalf("WriteThenRead: %d, %v, %v; want 0, nil, net.ErrClosed", n, werr, rerr)
	}
}

// TestConnCloseWakesABlockedRead proves closing the connection wakes a parked Read with net.ErrClosed.
func TestConnCloseWakesABlockedRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		done <- err
	}()
	if err := waitParked("(*Conn).Read", "waitRead"); err != nil {
		t.Fatal(err)
	}
	c.TCP().Close()
	if err := await(t, done); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read: %v, want net.ErrClosed", err)
	}
}

// reset has the peer abort the connection: SO_LINGER 0 and close send a RST.
func reset(t *testing.T, peer *net.TCPConn) {
	t.Helper()
	if err := peer.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	peer.Close()
}

// TestConnWriteToAResetPeerFails proves writes to a peer that has reset the connection fail with
// ECONNRESET or EPIPE, wrapped as net does: a *net.OpError of Op "write".
func TestConnWriteToAResetPeerFails(t *testing.T) {
	c, peer := pair(t)
	reset(t, peer)
	msg := make([]byte, 1024)
	var err error
	for i := 0; i < 1000 && err == nil; i++ { // the first writes may go out before the RST is in
		_, err = c.Write(msg)
	}
	if !isReset(err) {
		t.Fatalf("Write: %v, want ECONNRESET or EPIPE", err)
	}
	checkOpError(t, err, "write")
}

// TestConnReadFromAResetPeerFails proves a Read after the peer's RST fails with ECONNRESET in a
// *net.OpError of Op "read" (not io.EOF).
func TestConnReadFromAResetPeerFails(t *testing.T) {
	c, peer := pair(t)
	reset(t, peer)
	_, err := c.Read(make([]byte, 8))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read: %v, want ECONNRESET", err)
	}
	checkOpError(t, err, "read")
}

// answer serves requests of the given sizes on peer: it reads each whole, checks it is want(size),
// and writes it back. It reports the first failure, or nil after the last answer.
func answer(peer *net.TCPConn, sizes []int, want func(int) []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		for _, size := range sizes {
			req := make([]byte, size)
			if _, err := io.ReadFull(peer, req); err != nil {
				done <- fmt.Errorf("peer reading a %d-byte request: %w", size, err)
				return
			}
			if !bytes.Equal(req, want(size)) {
				done <- fmt.Errorf("the peer received a different %d-byte request", size)
				return
			}
			if _, err := peer.Write(req); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// TestConnWriteThenReadAgainstAnAnsweringPeer proves WriteThenRead delivers first whole and reads the
// answer into b, over several exchanges on one connection.
func TestConnWriteThenReadAgainstAnAnsweringPeer(t *testing.T) {
	c, peer := pair(t)
	sizes := []int{1, 100, 1500, 32 << 10}
	done := answer(peer, sizes, random)
	for _, size := range sizes {
		req := random(size)
		b := make([]byte, size+100)
		n, werr, rerr := c.WriteThenRead(req, b)
		if werr != nil || rerr != nil || n <= 0 {
			t.Fatalf("WriteThenRead of %d bytes: %d, %v, %v", size, n, werr, rerr)
		}
		if n < size { // the answer may come in more than one read
			rest, err := readN(c, size-n, size)
			if err != nil {
				t.Fatal(err)
			}
			n += copy(b[n:], rest)
		}
		if n != size || !bytes.Equal(b[:n], req) {
			t.Fatalf("answer to %d bytes: %d bytes, or other bytes", size, n)
		}
	}
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnWriteThenReadWaitsForTheAnswer proves WriteThenRead, having written first, parks until the
// answer comes (the peer answers only once it sees the call parked) and then reads it.
func TestConnWriteThenReadWaitsForTheAnswer(t *testing.T) {
	c, peer := pair(t)
	done := make(chan error, 1)
	go func() {
		req := make([]byte, 3)
		if _, err := io.ReadFull(peer, req); err != nil || string(req) != "req" {
			done <- fmt.Errorf("peer read %q, %v", req, err)
			return
		}
		if err := waitParked("(*Conn).WriteThenRead", "waitRead"); err != nil {
			done <- err
			return
		}
		_, err := peer.Write([]byte("answer"))
		done <- err
	}()
	expectAnswer(t, c, []byte("req"), "answer", 16, done)
}

// TestConnWriteThenReadWithNothingToWriteIsRead proves WriteThenRead with an empty first behaves as
// Read: it returns what the peer sent, (0, nil) for an empty b, and exactly io.EOF after the peer closed.
func TestConnWriteThenReadWithNothingToWriteIsRead(t *testing.T) {
	c, peer := pair(t)
	if _, err := peer.Write([]byte("unasked")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if n, werr, rerr := c.WriteThenRead(nil, b); werr != nil || rerr != nil || string(b[:n]) != "unasked" {
		t.Fatalf("WriteThenRead(nil, b): %q, %v, %v; want \"unasked\", nil, nil", b[:n], werr, rerr)
	}
	if n, werr, rerr := c.WriteThenRead([]byte{}, nil); n != 0 || werr != nil || rerr != nil {
		t.Fatalf("WriteThenRead of nothing into nothing: %d, %v, %v; want 0, nil, nil", n, werr, rerr)
	}
	peer.Close()
	if n, werr, rerr := c.WriteThenRead(nil, b); n != 0 || werr != nil || rerr != io.EOF {
		t.Fatalf("WriteThenRead(nil, b) after the peer closed: %d, %v, %v; want 0, nil, io.EOF", n, werr, rerr)
	}
}

// TestConnWriteThenReadIntoNothingIsNotEOF proves WriteThenRead with an empty b on an open connection
// writes first and does not report io.EOF (a Read of an empty b returns 0, nil).
func TestConnWriteThenReadIntoNothingIsNotEOF(t *testing.T) {
	c, peer := pair(t)
	done := answer(peer, []int{3}, func(int) []byte { return []byte("req") })
	n, werr, rerr := c.WriteThenRead([]byte("req"), nil)
	if n != 0 || werr != nil || rerr != nil {
		t.Fatalf("WriteThenRead(first, nil): %d, %v, %v; want 0, nil, nil", n, werr, rerr)
	}
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnWriteThenReadReturnsEOFWhenThePeerClosesInstead proves a peer that reads the request and
// closes without answering gives werr nil and rerr exactly io.EOF.
func TestConnWriteThenReadReturnsEOFWhenThePeerClosesInstead(t *testing.T) {
	c, peer := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, make([]byte, 3))
		peer.Close()
		done <- err
	}()
	n, werr, rerr := c.WriteThenRead([]byte("req"), make([]byte, 8))
	if n != 0 || werr != nil || rerr != io.EOF {
		t.Fatalf("WriteThenRead: %d, %v, %v; want 0, nil, io.EOF", n, werr, rerr)
	}
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnWriteThenReadOfMoreThanTheSocketHolds proves a first of 16 MiB, which the socket takes only
// in part inside the read's callback (EAGAIN), reaches a peer that reads it all before answering,
// every byte in order (the rest written by Write, parked until the peer reads), and the answer is read.
func TestConnWriteThenReadOfMoreThanTheSocketHolds(t *testing.T) {
	c, peer := pair(t)
	smallBuffers(t, c.TCP(), peer)
	first := random(16 << 20)
	done := make(chan error, 1)
	go func() {
		// The call must have written part in the callback and parked writing the rest.
		if err := waitParked("(*Conn).WriteThenRead", "waitWrite"); err != nil {
			done <- err
			return
		}
		got, err := readN(peer, len(first), 64<<10)
		if err != nil {
			done <- err
			return
		}
		if !bytes.Equal(got, first) {
			done <- errors.New("the peer received other bytes than first")
			return
		}
		_, err = peer.Write([]byte("got it all"))
		done <- err
	}()
	expectAnswer(t, c, first, "got it all", 64, done)
}

// TestConnWriteThenReadWaitingHonoursADeadline proves a WriteThenRead parked for an answer that does not
// come returns werr nil and a timeout rerr when another goroutine sets a deadline that has passed.
func TestConnWriteThenReadWaitingHonoursADeadline(t *testing.T) {
	c, peer := pair(t)
	done := make(chan error, 1)
	go func() {
		if _, err := io.ReadFull(peer, make([]byte, 3)); err != nil {
			done <- err
			return
		}
		if err := waitParked("(*Conn).WriteThenRead", "waitRead"); err != nil {
			done <- err
			return
		}
		done <- c.TCP().SetReadDeadline(time.Now().Add(-time.Second))
	}()
	n, werr, rerr := c.WriteThenRead([]byte("req"), make([]byte, 8))
	if n != 0 || werr != nil {
		t.Fatalf("WriteThenRead: %d, %v; want 0, nil", n, werr)
	}
	checkTimeout(t, rerr)
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnWriteThenReadToAResetPeerFails proves WriteThenRead to a peer that has reset the connection
// fails: werr ECONNRESET/EPIPE (a "write" *net.OpError), or, if the kernel took the bytes before the
// RST was in, a read error; never both nil, never both set.
func TestConnWriteThenReadToAResetPeerFails(t *testing.T) {
	c, peer := pair(t)
	reset(t, peer)
	n, werr, rerr := c.WriteThenRead([]byte("req"), make([]byte, 8))
	switch {
	case n != 0:
		t.Fatalf("WriteThenRead read %d bytes from a reset peer", n)
	case werr != nil && rerr != nil:
		t.Fatalf("both errors set: %v; %v", werr, rerr)
	case werr != nil:
		if !isReset(werr) {
			t.Fatalf("werr %v, want ECONNRESET or EPIPE", werr)
		}
		checkOpError(t, werr, "write")
	case rerr == nil:
		t.Fatal("WriteThenRead to a reset peer returned no error")
	}
}

// TestConnWriteThenReadReportsAResetWhileWaiting proves a RST that comes while WriteThenRead waits
// for the answer is its read error: werr nil, rerr ECONNRESET in a "read" *net.OpError.
func TestConnWriteThenReadReportsAResetWhileWaiting(t *testing.T) {
	c, peer := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, make([]byte, 3))
		if err == nil {
			err = peer.SetLinger(0)
		}
		peer.Close()
		done <- err
	}()
	n, werr, rerr := c.WriteThenRead([]byte("req"), make([]byte, 8))
	if n != 0 || werr != nil || !errors.Is(rerr, syscall.ECONNRESET) {
		t.Fatalf("WriteThenRead: %d, %v, %v; want 0, nil, ECONNRESET", n, werr, rerr)
	}
	checkOpError(t, rerr, "read")
	if err := await(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestConnIODoesNotAllocate proves a Write+Read round trip and a WriteThenRead round trip against an
// echoing peer allocate nothing (the whole process's count: the peer uses fixed buffers too). make
// test runs it without -race; under the race detector, which allocates on its own, it is skipped.
func TestConnIODoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	c, peer := pair(t)
	go echo(peer, 64)
	var msg, got [64]byte
	readRest := func(n int) {
		for n < len(got) {
			m, err := c.Read(got[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
	}
	roundTrips := func() {
		if _, err := c.Write(msg[:]); err != nil {
			t.Fatal(err)
		}
		readRest(0)
		n, werr, rerr := c.WriteThenRead(msg[:], got[:])
		if werr != nil || rerr != nil {
			t.Fatal(werr, rerr)
		}
		readRest(n)
	}
	for i := 0; i < 50; i++ { // warm up
		roundTrips()
	}
	if n := testing.AllocsPerRun(200, roundTrips); n != 0 {
		t.Fatalf("%v allocations per pair of round trips, want 0", n)
	}
}
