//go:build linux && !nbio_portable

package nbio

import (
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Tests of what only Linux's nbio has or does: the free system calls, and WriteThenRead's write made
// inside the read's callback.

// TestConnWriteThenReadPastDeadlineWritesNothing proves WriteThenRead under a deadline already passed
// returns the timeout as its read error, with werr nil, and writes nothing: after the client closes,
// the peer reads no byte before EOF.
func TestConnWriteThenReadPastDeadlineWritesNothing(t *testing.T) {
	c, peer := pair(t)
	if err := c.TCP().SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	n, werr, rerr := c.WriteThenRead([]byte("must not be sent"), make([]byte, 8))
	if n != 0 || werr != nil {
		t.Fatalf("WriteThenRead: %d, %v; want 0, nil", n, werr)
	}
	checkTimeout(t, rerr)
	c.TCP().Close()
	got, err := io.ReadAll(peer)
	if err != nil || len(got) != 0 {
		t.Fatalf("the peer read %q, %v; want nothing, then EOF", got, err)
	}
}

// TestReadWriteOnASocketpair proves the free Read and Write: EAGAIN (exactly unix.EAGAIN) when nothing
// is there, the bytes when they are, (0, nil) for empty buffers and at EOF, and EBADF for a bad fd.
func TestReadWriteOnASocketpair(t *testing.T) {
	testReadWrite(t, Read, Write)
}

// Recv and Send are Read and Write for sockets (recvfrom and sendto with no address): the same
// answers on a stream socket, and ENOTSOCK on a file that is not one (the eventfd that Read serves).
func TestRecvSendOnASocketpairAndNotOnAnEventfd(t *testing.T) {
	testReadWrite(t, Recv, Send)
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if _, err := Send(uintptr(efd), one); err != unix.ENOTSOCK {
		t.Fatalf("Send to an eventfd: %v, want ENOTSOCK", err)
	}
	if n, err := Write(uintptr(efd), one); n != 8 || err != nil {
		t.Fatalf("Write to an eventfd: %d, %v", n, err)
	}
}

func testReadWrite(t *testing.T, Read, Write func(uintptr, []byte) (int, error)) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := uintptr(fds[0]), uintptr(fds[1])
	defer unix.Close(fds[0])
	buf := make([]byte, 16)
	if n, err := Read(a, buf); n != 0 || err != unix.EAGAIN {
		t.Fatalf("Read of an empty socket: %d, %v; want 0, EAGAIN", n, err)
	}
	if n, err := Write(b, nil); n != 0 || err != nil {
		t.Fatalf("Write(nil): %d, %v; want 0, nil", n, err)
	}
	if n, err := Write(b, []byte("ping")); n != 4 || err != nil {
		t.Fatalf("Write: %d, %v; want 4, nil", n, err)
	}
	if n, err := Read(a, buf); n != 4 || err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("Read: %q, %v; want \"ping\", nil", buf[:n], err)
	}
	unix.Close(fds[1])
	if n, err := Read(a, buf); n != 0 || err != nil {
		t.Fatalf("Read at EOF: %d, %v; want 0, nil", n, err)
	}
	if _, err := Read(^uintptr(0), buf); err != unix.EBADF {
		t.Fatalf("Read of a bad fd: %v, want EBADF", err)
	}
	if _, err := Write(^uintptr(0), buf); err != unix.EBADF {
		t.Fatalf("Write to a bad fd: %v, want EBADF", err)
	}
}

// TestEpollWait proves EpollWait returns 0 at once with nothing registered or nothing ready, and 1
// (the registered fd, EPOLLIN) once the other end of a socketpair has written.
func TestEpollWait(t *testing.T) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(epfd)
	events := make([]unix.EpollEvent, 4)
	if n, err := EpollWait(uintptr(epfd), events); n != 0 || err != nil {
		t.Fatalf("EpollWait with nothing registered: %d, %v; want 0, nil", n, err)
	}

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fds[0], &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fds[0])}); err != nil {
		t.Fatal(err)
	}
	if n, err := EpollWait(uintptr(epfd), events); n != 0 || err != nil {
		t.Fatalf("EpollWait with nothing ready: %d, %v; want 0, nil", n, err)
	}
	if _, err := Write(uintptr(fds[1]), []byte("x")); err != nil {
		t.Fatal(err)
	}
	n, err := EpollWait(uintptr(epfd), events)
	if n != 1 || err != nil {
		t.Fatalf("EpollWait after a write: %d, %v; want 1, nil", n, err)
	}
	if events[0].Fd != int32(fds[0]) || events[0].Events&unix.EPOLLIN == 0 {
		t.Fatalf("event %+v, want fd %d with EPOLLIN", events[0], fds[0])
	}
	if _, err := EpollWait(^uintptr(0), events); err != unix.EBADF {
		t.Fatalf("EpollWait on a bad fd: %v, want EBADF", err)
	}
}
