package frontend

import (
	"net"
	"time"

	"github.com/fairlead/fairlead/lb/nbio"
)

// UnwrapHijacked returns the connection under fasthttp's hijack wrapper, which holds the server's read
// buffer, and the bytes that buffer held (a client may send frames before it sees the handshake's
// answer). They are drained through the wrapper with an expired read deadline: buffered bytes come
// back without touching the socket, and the socket itself is not read. A connection that is not
// fasthttp's wrapper is returned as it is.
//
// The connection returned is the front end's when c came from one of its listeners (Socket gives the
// socket under it): from then on it belongs to a tunnel or a relay stream, whose ends are theirs to
// account for, and its errors are no longer counted as the front end's.
func UnwrapHijacked(c net.Conn) (net.Conn, []byte, error) {
	u, ok := c.(interface{ UnsafeConn() net.Conn })
	if !ok {
		return c, nil, nil
	}
	raw := u.UnsafeConn()
	if fc := frontOf(raw); fc != nil {
		fc.handOver()
	}
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return nil, nil, err
	}
	var pending []byte
	var buf [4096]byte
	for {
		n, err := c.Read(buf[:])
		pending = append(pending, buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	if err := raw.SetReadDeadline(time.Time{}); err != nil {
		return nil, nil, err
	}
	return raw, pending, nil
}

// TakeRelease returns what uncounts a front end connection from its client address's connections
// (max_conns_per_source) when it ends, for the tunnel that takes its socket (Socket) and closes it
// without the front end's Close; nil when it is not counted. c is what UnwrapHijacked returned.
func TakeRelease(c net.Conn) func() {
	if fc := frontOf(c); fc != nil {
		if fc.px != nil {
			if r := fc.px.release.Load(); r != nil {
				return *r // counted once its PROXY header was read; its Close runs it too, once
			}
		}
		return fc.release // still run by the connection's Close, if it comes: it runs once
	}
	return nil
}

// Socket returns the connection under a front end connection: a *net.TCPConn, or the *tls.Conn of an
// HTTPS client. A tunnel's bytes are not HTTP, and the tunnel engine needs the socket itself. Any other
// connection is returned as it is. A plain *net.TCPConn's RemoteAddr is its peer's: whoever takes the
// socket of a connection that came through a proxy_protocol sender takes its client's address
// (RemoteAddr) before.
func Socket(c net.Conn) net.Conn {
	if fc := frontOf(c); fc != nil {
		return nbio.Unwrap(fc.Conn)
	}
	return c
}
