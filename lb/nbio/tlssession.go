package nbio

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"io"
	"slices"
	"sync"
)

// TLSSession is what a TCPConn learns, when asked (CaptureTLS), of the TLS session over it, so that
// the layer above can take the session over from crypto/tls once its handshake is done (lb/tunnel:
// its own record layer relays a TLS tunnel, whose session a binary upgrade then hands to the new
// process). crypto/tls exports no session; what it takes is:
//   - the secrets crypto/tls logs (tls.Config.KeyLogWriter: Config returns a configuration that logs
//     them here): TLS 1.3's application traffic secrets, TLS 1.2's master secret and client random;
//   - the server's random (TLS 1.2's key expansion), bytes 11 to 43 of the ServerHello's record, the
//     first the server writes;
//   - the records each way since the handshake, which are the sequence numbers (TLS 1.3's start at 0
//     after the handshake, TLS 1.2's after each Finished), and the session tickets a TLS 1.3 server
//     sent under its application key before its handshake ended (tls.Config.WrapSession counts them).
//
// So that the count of records read during the handshake is exact, the TCPConn reads no further than
// the end of the record under way until the handshake is done (HandshakeDone): crypto/tls then holds
// no record of the application's when its handshake ends. That costs a few reads per handshake.
// A TLSSession holds keys: never log it.
type TLSSession struct {
	mu           sync.Mutex // KeyLogWriter may be called from the handshake's goroutine only, but Config's closures and TLSCaptured read
	clientRandom []byte
	clientSecret []byte // CLIENT_TRAFFIC_SECRET_0
	serverSecret []byte // SERVER_TRAFFIC_SECRET_0
	master       []byte // TLS 1.2
	serverRandom [32]byte
	randomSeen   int // bytes of serverRandom seen
	tickets      int
	written      records // the framing of what was written
	wn           uint64  // bytes written
	rn           uint64  // bytes read
	server       bool
	hsRead       uint64 // records read and written when the handshake ended
	hsWritten    uint64
	hsUpdates    uint64 // records of a KeyUpdate's size read when the handshake ended
	done         bool
}

// TLSCaptured is what a TLSSession learned, for taking the session over. It holds keys.
type TLSCaptured struct {
	ClientRandom, ServerRandom []byte
	ClientSecret, ServerSecret []byte // TLS 1.3: the application traffic secrets (0)
	Master                     []byte // TLS 1.2
	Tickets                    int    // NewSessionTicket messages sent under a TLS 1.3 server's application key in its handshake
	Read, Written              uint64 // whole records read and written since the handshake
	Whole                      bool   // what was read ends with a whole record: no part of one is held above
	// A record of a TLS 1.3 KeyUpdate's size was read since the handshake: crypto/tls may have replaced
	// the traffic secrets captured (it logs no new one; it never starts a KeyUpdate, only answers one),
	// so the session is not taken over.
	MaybeUpdated bool
}

// Server reports whether the connection is the session's server end.
func (s *TLSSession) Server() bool { return s.server }

// Write is the KeyLogWriter's: one NSS key log line per call ("LABEL <client random> <secret>").
func (s *TLSSession) Write(line []byte) (int, error) {
	f := bytes.Fields(line)
	if len(f) != 3 {
		return len(line), nil
	}
	cr, err1 := hex.DecodeString(string(f[1]))
	secret, err2 := hex.DecodeString(string(f[2]))
	if err1 != nil || err2 != nil {
		return len(line), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clientRandom = cr
	switch string(f[0]) {
	case "CLIENT_TRAFFIC_SECRET_0":
		s.clientSecret = secret
	case "SERVER_TRAFFIC_SECRET_0":
		s.serverSecret = secret
	case "CLIENT_RANDOM":
		s.master = secret
	}
	return len(line), nil
}

// Config returns c for this connection's handshake (hello is the client's, on a server; nil on a
// client): a copy that logs the session's secrets here, beside any KeyLogWriter c has, and counts the
// session tickets it sends. They are encrypted with the keys of tickets, the configuration crypto/tls
// decrypts tickets with (a server's base configuration, whose GetConfigForClient returned c; c itself
// when nil), so that a client resumes as without this. A session whose secrets would not be logged
// is not let happen: TLS 1.2 resumption (crypto/tls logs no secret for a resumed TLS 1.2 handshake),
// for a client that offers no TLS 1.3 and for a client end.
func (s *TLSSession) Config(c *tls.Config, hello *tls.ClientHelloInfo, tickets *tls.Config) *tls.Config {
	c = c.Clone()
	var also io.Writer = c.KeyLogWriter
	if also == nil {
		c.KeyLogWriter = s
	} else {
		c.KeyLogWriter = io.MultiWriter(s, also)
	}
	if !s.server {
		c.ClientSessionCache = nil // a resumed TLS 1.2 session's secret is not logged
		return c
	}
	if hello != nil && !slices.Contains(hello.SupportedVersions, tls.VersionTLS13) {
		c.SessionTicketsDisabled = true // TLS 1.2 only: a resumption would log no secret
	}
	if tickets == nil {
		tickets = c
	}
	wrap := c.WrapSession
	if wrap == nil {
		wrap = tickets.EncryptTicket
	}
	c.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		s.mu.Lock()
		s.tickets++
		s.mu.Unlock()
		return wrap(cs, ss)
	}
	return c
}

// sawRead and sawWrite follow the stream each way: the server's random, and the records written.
func (s *TLSSession) sawRead(b []byte) {
	if !s.server {
		s.random(s.rn, b)
	}
	s.rn += uint64(len(b))
}

func (s *TLSSession) sawWrite(b []byte) {
	if s.server {
		s.random(s.wn, b)
	}
	s.wn += uint64(len(b))
	s.written.observe(b)
}

// random keeps the bytes of the server's random among b, which starts at offset off of the server's
// stream: the ServerHello's record header (5), its handshake header (4) and version (2), then 32.
func (s *TLSSession) random(off uint64, b []byte) {
	const start = 11
	for s.randomSeen < len(s.serverRandom) && off+uint64(len(b)) > start+uint64(s.randomSeen) {
		i := start + uint64(s.randomSeen) - off
		k := copy(s.serverRandom[s.randomSeen:], b[i:])
		s.randomSeen += k
		if k == 0 {
			return
		}
	}
}

// boundary is how much of a read of n bytes may be asked of the socket during the handshake: no
// further than the end of the record under way (its header, then its fragment).
func (r *records) boundary(n int) int {
	if r.body > 0 {
		return min(n, r.body)
	}
	return min(n, len(r.hdr)-r.hn)
}

// whole reports whether what was read ends with a whole record.
func (r *records) whole() bool { return r.hn == 0 && r.body == 0 }
