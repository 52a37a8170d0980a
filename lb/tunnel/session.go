package tunnel

import (
	"net"
	"os"

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

// tlsSide is a TLS side's connection: crypto/tls's, or fairlead's record layer (*tlsrecord.NetConn).
type tlsSide interface {
	net.Conn
	CloseWrite() error
}

// Resume returns the connection of a tunnel's side handed over as f (whose ownership it takes) with
// its TLS session st (nil for a plain side), to give to Add.
func Resume(f *os.File, st *tlsrecord.State) (net.Conn, error) {
	if st != nil {
		return tlsrecord.Resume(f, *st)
	}
	c, err := net.FileConn(f)
	f.Close()
	return c, err
}
