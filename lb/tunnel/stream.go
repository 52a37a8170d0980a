package tunnel

import (
	"errors"
	"io"
	"net"
)

// Streamed tunnels: a connection that the loops cannot watch (neither a TCP socket nor a TLS
// connection over an *nbio.TCPConn) has its tunnel carried by two goroutines, one per direction, with
// blocking reads and writes; the portable fallback carries every tunnel so. Same registry, groups, idle timeout, half-close and reasons as
// the epoll tunnels.
//
// Memory while idle: each goroutine reads into a small buffer of its own (pumpSmall); only once a
// read fills it (a burst) does it take a large buffer (BufferSize) from the engine's pool, and it gives
// it back as soon as a read returns less than the large buffer holds. So an idle streamed tunnel holds
// its two goroutines, two 512-byte buffers and its connections' own state (a TLS connection keeps its
// record buffers), no large buffer. Relaying allocates nothing per message.

// pumpSmall is the buffer an idle direction waits with.
const pumpSmall = 512

// conn returns the connection of side i.
func (t *Tunnel) conn(i int) net.Conn {
	if t.streams[i] != nil {
		return t.streams[i]
	}
	if t.tlsConns[i] != nil {
		return t.tlsConns[i]
	}
	return t.conns[i]
}

// startPumps starts the two goroutines of a streamed tunnel (under t.mu, with t registered), each
// writing its pending bytes first.
func (r *Engine) startPumps(t *Tunnel, toServer, toClient []byte) {
	pending := [2][]byte{toServer, toClient}
	for i, p := range pending {
		if len(p) > 0 {
			p = append([]byte(nil), p...) // Add does not keep the caller's bytes
		}
		r.wg.Add(1) // under t.mu: Close cannot reach its Wait before this
		go r.pump(t, i, p)
	}
}

// pump copies side i to its peer: pending first, then everything read until EOF or an error.
func (r *Engine) pump(t *Tunnel, i int, pending []byte) {
	defer r.wg.Done()
	src, dst := t.conn(i), t.conn(1-i)
	if len(pending) > 0 {
		n, err := dst.Write(pending)
		r.count(t, i, n)
		if err != nil {
			r.closeTunnel(t, Error)
			return
		}
	}
	small := make([]byte, pumpSmall)
	var large *[]byte // from the pool while the direction is busy
	defer func() {
		if large != nil {
			r.streamBufs.Put(large)
		}
	}()
	for {
		buf := small
		if large != nil {
			buf = *large
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				r.writeFailed(t, i)
				return
			}
			r.count(t, i, n)
			t.touch()
		}
		switch {
		case large == nil && n == len(buf):
			large = r.streamBufs.Get().(*[]byte)
		case large != nil && n < len(buf):
			r.streamBufs.Put(large)
			large = nil
		}
		if errors.Is(err, io.EOF) {
			r.sideEOF(t, i)
			return
		}
		if err != nil {
			r.closeTunnel(t, Error)
			return
		}
	}
}

// closeWrite half-closes c (a TCP shutdown, or a TLS close_notify), so that its peer reads EOF.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
