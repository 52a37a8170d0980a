//go:build unix

package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// chunk is the most bytes of a message's body one packet carries: well under the smallest default
// socket send buffer, so that a packet never needs more than the buffer.
const chunk = 32 << 10

// maxFiles is the most sockets one message carries (the kernel's SCM_MAX_FD is 253).
const maxFiles = 250

// A Message is one unit of a handover: its kind, a JSON body and the sockets it carries.
type Message struct {
	Kind  string
	Body  []byte
	Files []*os.File
}

// header is the first packet of a message; the body follows in packets of at most chunk bytes.
type header struct {
	Kind  string `json:"kind"`
	Len   int    `json:"len"`
	Files int    `json:"files"`
}

// A Channel carries Messages, with their sockets, between two processes: one end of a
// SOCK_SEQPACKET Unix socket pair, whose packets keep their bounds and arrive whole and in order, the
// sockets passed as SCM_RIGHTS. A Channel is used by one goroutine at a time.
type Channel struct{ c *net.UnixConn }

// Pair returns a new channel and the file of its other end, to give to another process (as an
// inherited file, or in a Message over another channel); the caller closes the file once given.
func Pair() (*Channel, *os.File, error) {
	syscall.ForkLock.RLock() // no exec between the pair's creation and its close-on-exec (not every Unix has SOCK_CLOEXEC)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("handover: socketpair: %w", err)
	}
	ch, err := FromFile(os.NewFile(uintptr(fds[0]), "handover"))
	if err != nil {
		syscall.Close(fds[1]) //nolint:errcheck
		return nil, nil, err
	}
	return ch, os.NewFile(uintptr(fds[1]), "handover-peer"), nil
}

// FromFile makes a channel of f, an end of a pair Pair made (f is closed: the channel holds its own
// descriptor).
func FromFile(f *os.File) (*Channel, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("handover: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("handover: %T is no Unix socket", c)
	}
	return &Channel{c: uc}, nil
}

// Close closes the channel; the other end's Receive then returns io.EOF.
func (ch *Channel) Close() error { return ch.c.Close() }

// Send sends m: its header with its sockets, then its body. The sockets stay open here: the other
// process gets descriptors of its own for them.
func (ch *Channel) Send(m Message) error {
	if len(m.Files) > maxFiles {
		return fmt.Errorf("handover: %d sockets in one message, at most %d", len(m.Files), maxFiles)
	}
	h, err := json.Marshal(header{Kind: m.Kind, Len: len(m.Body), Files: len(m.Files)})
	if err != nil {
		return err
	}
	var oob []byte
	if len(m.Files) > 0 {
		fds := make([]int, len(m.Files))
		for i, f := range m.Files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := ch.c.WriteMsgUnix(h, oob, nil); err != nil {
		return fmt.Errorf("handover: send %s: %w", m.Kind, err)
	}
	for b := m.Body; len(b) > 0; {
		n := min(len(b), chunk)
		if _, err := ch.c.Write(b[:n]); err != nil {
			return fmt.Errorf("handover: send %s: %w", m.Kind, err)
		}
		b = b[n:]
	}
	return nil
}

// errEOF is what Receive returns when the other end closed the channel between messages.
var errEOF = errors.New("handover: the other process closed the channel")

// Receive returns the next message. Its Files are the receiving process's own descriptors: the
// caller owns them.
func (ch *Channel) Receive() (Message, error) {
	buf := make([]byte, chunk)
	oob := make([]byte, syscall.CmsgSpace(maxFiles*4))
	n, oobn, flags, _, err := ch.c.ReadMsgUnix(buf, oob)
	if errors.Is(err, io.EOF) {
		return Message{}, errEOF
	}
	if err != nil {
		return Message{}, fmt.Errorf("handover: receive: %w", err)
	}
	if n == 0 && oobn == 0 {
		return Message{}, errEOF
	}
	files, ferr := filesOf(oob[:oobn])
	if flags&syscall.MSG_CTRUNC != 0 && ferr == nil {
		ferr = errors.New("handover: sockets lost: the control message was cut")
	}
	var h header
	if err := json.Unmarshal(buf[:n], &h); err != nil && ferr == nil {
		ferr = fmt.Errorf("handover: a message header that is no JSON: %w", err)
	}
	if ferr == nil && len(files) != h.Files {
		ferr = fmt.Errorf("handover: %s came with %d sockets, its header says %d", h.Kind, len(files), h.Files)
	}
	if ferr != nil {
		for _, f := range files {
			f.Close()
		}
		return Message{}, ferr
	}
	m := Message{Kind: h.Kind, Files: files, Body: make([]byte, 0, h.Len)}
	for len(m.Body) < h.Len {
		n, err := ch.c.Read(buf)
		if err != nil || n == 0 {
			for _, f := range files {
				f.Close()
			}
			return Message{}, fmt.Errorf("handover: %s cut after %d of %d bytes: %v", h.Kind, len(m.Body), h.Len, err)
		}
		m.Body = append(m.Body, buf[:n]...)
	}
	if len(m.Body) != h.Len {
		for _, f := range files {
			f.Close()
		}
		return Message{}, fmt.Errorf("handover: %s: %d bytes, its header says %d", h.Kind, len(m.Body), h.Len)
	}
	return m, nil
}

// filesOf returns the descriptors an SCM_RIGHTS control message carries, as files.
func filesOf(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handover: control message: %w", err)
	}
	var files []*os.File
	for _, cm := range msgs {
		fds, err := syscall.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "handed-over"))
		}
	}
	return files, nil
}
