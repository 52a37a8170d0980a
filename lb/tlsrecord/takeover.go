package tlsrecord

import (
	"crypto/tls"

	"github.com/fairlead/fairlead/lb/nbio"
)

// TakeOver takes tc's session over from crypto/tls, once its handshake is done over nb, which captured
// it (nbio's CaptureTLS, with the handshake's configuration from its TLSSession's Config and
// HandshakeDone called): the connection that carries it on over nb from here, and the plaintext tc held, to
// be delivered first (buf is scratch for it). A nil one: tc keeps its session, and gives the rest
// after left — the session was not captured, its suite is not one this package has, a KeyUpdate may
// have replaced its secrets (nbio.TLSCaptured's MaybeUpdated), tc holds part of a record, or the peer's
// close_notify. For the goroutine that reads tc, with no write under way.
func TakeOver(tc *tls.Conn, nb *nbio.TCPConn, buf []byte) (c *NetConn, left []byte) {
	cs := tc.ConnectionState()
	got, ok := nb.TLSCaptured()
	if !ok || !got.Whole || !Supports(cs.Version, cs.CipherSuite) || cs.Version == tls.VersionTLS13 && got.MaybeUpdated {
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
	var st State
	switch cs.Version {
	case tls.VersionTLS13:
		read, write := got.ClientSecret, got.ServerSecret
		wseq := got.Written
		if server {
			wseq += uint64(got.Tickets) // sent under the application key before the handshake ended
		} else {
			read, write = write, read
		}
		st, err = TLS13(cs.CipherSuite, !server, read, write, got.Read, wseq)
	case tls.VersionTLS12:
		// Each way, the Finished was the first record under the keys, and the last of the handshake.
		st, err = TLS12(cs.CipherSuite, !server, got.Master, got.ClientRandom, got.ServerRandom, 1+got.Read, 1+got.Written)
	}
	if err != nil {
		return nil, left
	}
	st.ServerName, st.ALPN = cs.ServerName, cs.NegotiatedProtocol
	rec, err := New(nb, st)
	if err != nil {
		return nil, left
	}
	return NewNetConn(nb, rec, st), left
}
