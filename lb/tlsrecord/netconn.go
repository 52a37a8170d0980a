package tlsrecord

import (
	"crypto/tls"
	"net"
	"os"

	"github.com/fairlead/fairlead/lb/nbio"
)

// NetConn is a TLS connection whose session a Conn carries over its socket: a net.Conn whose Read and
// Write are the record layer's, and everything else (addresses, deadlines, Close) the socket's. It is
// what a connection taken over from crypto/tls (TakeOver) or handed over by another process (Resume)
// is to the code that reads and writes it.
type NetConn struct {
	*nbio.TCPConn // the socket
	TLS           *Conn
	state         tls.ConnectionState
}

// NewNetConn makes a NetConn of the socket nb and the record layer c over it, whose session st was.
func NewNetConn(nb *nbio.TCPConn, c *Conn, st State) *NetConn {
	return &NetConn{TCPConn: nb, TLS: c, state: tls.ConnectionState{Version: st.Version, CipherSuite: st.Suite,
		HandshakeComplete: true, ServerName: st.ServerName, NegotiatedProtocol: st.ALPN}}
}

func (c *NetConn) Read(b []byte) (int, error)  { return c.TLS.Read(b) }
func (c *NetConn) Write(b []byte) (int, error) { return c.TLS.Write(b) }

// CloseWrite sends close_notify: the peer reads the end of the session.
func (c *NetConn) CloseWrite() error { return c.TLS.CloseWrite() }

// Handshake is done: it was crypto/tls's, before the session was taken over.
func (c *NetConn) Handshake() error { return nil }

// ConnectionState is what the session was negotiated with: the version, the suite, the server name and
// the protocol (a connection's HTTP server asks whether it is TLS: fasthttp's RequestCtx.IsTLS).
func (c *NetConn) ConnectionState() tls.ConnectionState { return c.state }

// Resume makes the connection handed over as f (whose ownership it takes) with its TLS session st.
func Resume(f *os.File, st State) (*NetConn, error) {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := fc.(*net.TCPConn)
	if !ok {
		fc.Close()
		return nil, net.UnknownNetworkError("tlsrecord: not a TCP socket")
	}
	nb, err := nbio.NewTCPConn(tc)
	if err != nil {
		tc.Close()
		return nil, err
	}
	c, err := New(nb, st)
	if err != nil {
		tc.Close()
		return nil, err
	}
	return NewNetConn(nb, c, st), nil
}

// State is the session's state, for a handover (no Read or Write may run meanwhile).
func (c *NetConn) State() State {
	st := c.TLS.State()
	st.ServerName, st.ALPN = c.state.ServerName, c.state.NegotiatedProtocol
	return st
}
