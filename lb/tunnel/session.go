package tunnel

import (
	"crypto/tls"
	"net"
	"os"

	"github.com/fairlead/fairlead/lb/nbio"
	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// A TLS side's session. crypto/tls does a TLS connection's handshake (and serves the request that
// asks for the upgrade), but it cannot export a session, and a binary upgrade hands every tunnel to
// the new process, TLS ones with their sessions. So when a tunnel is made, the engine takes each TLS
// side's session over from crypto/tls and relays it with fairlead's own record layer
// (lb/tlsrecord), whose state — keys, sequence numbers, the part of a record read — is data that
// Detach gives and Resume takes. What it takes the session from is what the side's *nbio.TCPConn
// learned (CaptureTLS: the secrets crypto/tls logged, the records each way since the handshake,
// the tickets sent) and the plaintext crypto/tls still holds, which goes first to the other side.
// A session it cannot take (not captured, a suite the record layer lacks, part of a record held by
// crypto/tls) stays crypto/tls's: relayed the same way, but not handed over (ErrNotDetachable).

// tlsSide is a TLS side's connection: crypto/tls's, or fairlead's record layer (ownTLS).
type tlsSide interface {
	net.Conn
	CloseWrite() error
}

// ownTLS is a TLS side relayed with fairlead's record layer over its socket.
type ownTLS struct {
	*nbio.TCPConn // the socket: addresses, deadlines, evented mode, Close
	rec           *tlsrecord.Conn
}

func (c *ownTLS) Read(b []byte) (int, error)  { return c.rec.Read(b) }
func (c *ownTLS) Write(b []byte) (int, error) { return c.rec.Write(b) }
func (c *ownTLS) CloseWrite() error           { return c.rec.CloseWrite() }

// takeOver takes tc's session over from crypto/tls: the record layer that relays it from here, and
// the plaintext tc held (to relay first). A nil own: tc keeps its session, and relays the rest after
// left.
func takeOver(tc *tls.Conn, nb *nbio.TCPConn, buf []byte) (own *ownTLS, left []byte) {
	cs := tc.ConnectionState()
	got, ok := nb.TLSCaptured()
	if !ok || !got.Whole || !tlsrecord.Supports(cs.Version, cs.CipherSuite) {
		return nil, nil
	}
	server := nb.TLSSession().Server()
	// What tc holds (records read whole, plaintext not yet returned) comes out without a byte more
	// from the socket: each Read then answers from tc's buffers, until ErrWouldBlock.
	nb.Hold(true)
	var err error
	for {
		var n int
		n, err = tc.Read(buf)
		left = append(left, buf[:n]...)
		if err != nil {
			break
		}
	}
	nb.Hold(false)
	if err != nbio.ErrWouldBlock { // an alert (close_notify): tc says the rest, after left
		return nil, left
	}
	var st tlsrecord.State
	switch cs.Version {
	case tls.VersionTLS13:
		read, write := got.ClientSecret, got.ServerSecret
		wseq := got.Written
		if server {
			wseq += uint64(got.Tickets) // sent under the application key before the handshake ended
		} else {
			read, write = write, read
		}
		st, err = tlsrecord.TLS13(cs.CipherSuite, !server, read, write, got.Read, wseq)
	case tls.VersionTLS12:
		// Each way, the Finished was the first record under the keys, and the last of the handshake.
		st, err = tlsrecord.TLS12(cs.CipherSuite, !server, got.Master, got.ClientRandom, got.ServerRandom, 1+got.Read, 1+got.Written)
	}
	if err != nil {
		return nil, left
	}
	rec, err := tlsrecord.New(nb, st)
	if err != nil {
		return nil, left
	}
	return &ownTLS{TCPConn: nb, rec: rec}, left
}

// Resume returns the connection of a tunnel's side handed over as f (whose ownership it takes) with
// its TLS session st (nil for a plain side), to give to Add.
func Resume(f *os.File, st *tlsrecord.State) (net.Conn, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok || st == nil {
		return c, nil
	}
	nb, err := nbio.NewTCPConn(tc)
	if err != nil {
		c.Close()
		return nil, err
	}
	rec, err := tlsrecord.New(nb, *st)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &ownTLS{TCPConn: nb, rec: rec}, nil
}
