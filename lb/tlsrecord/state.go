// Package tlsrecord is fairlead's own TLS record layer, for a connection whose handshake crypto/tls
// has done. crypto/tls keeps its keys, sequence numbers and buffered bytes to itself; a Conn of this
// package holds them in a State that can be exported (Conn.State), handed to another process and
// resumed there (New), so a TLS tunnel survives a binary upgrade without its device noticing.
//
// A State is built once from what the handshake logged (the traffic secrets of TLS 1.3, the master
// secret and the two randoms of TLS 1.2, as a tls.Config's KeyLogWriter writes them, plus the
// ServerHello's random) and the sequence numbers of the records crypto/tls has already protected.
// After that, the Conn carries the connection on: application data both ways, close_notify, and the
// TLS 1.3 post-handshake messages a connection meets (KeyUpdate both ways, NewSessionTicket to a
// client). Renegotiation and everything else after the handshake fail the connection.
//
// Limits: a post-handshake handshake message must lie whole in one record (crypto/tls's do); TLS 1.2
// alerts other than close_notify fail the connection, warnings included; a Conn that failed is not
// to be handed over (its State does not carry the failure).
//
// Only AEAD suites are supported: TLS 1.3's three, and TLS 1.2's ECDHE suites with AES-GCM or
// ChaCha20-Poly1305.
//
// A State holds keys: never log it, nor the bytes of its Pending and Plain.
package tlsrecord

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"errors"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// State is one end's record protection, enough to resume it elsewhere. It holds keys: never log it.
type State struct {
	Version     uint16 // tls.VersionTLS13 or tls.VersionTLS12
	Suite       uint16 // the cipher suite
	Client      bool   // this end is the TLS client
	Read, Write Direction
	// Pending is the raw bytes read from the socket, not yet returned as plaintext: a partial
	// record, or whole records not yet opened.
	Pending []byte
	// Plain is plaintext already opened but not yet returned by Read: only when a Read was given a
	// buffer smaller than a record's plaintext (never with buffers of at least MaxRecord bytes).
	Plain []byte
	// ReadClosed: the peer's close_notify has been read (Read answers io.EOF); WriteClosed: ours
	// has been sent (CloseWrite).
	ReadClosed, WriteClosed bool
	// What the handshake negotiated besides the keys (NetConn's ConnectionState): the server name the
	// client asked for and the application protocol (ALPN).
	ServerName, ALPN string
}

// Direction is the protection of the records of one direction.
type Direction struct {
	Secret []byte // TLS 1.3: the current traffic secret (KeyUpdate replaces it)
	Key    []byte // TLS 1.2: the write key of the sender
	IV     []byte // TLS 1.2: the IV (the 4-byte fixed part for GCM, 12 bytes for ChaCha20)
	Seq    uint64 // the sequence number of the next record
}

// suite describes a supported cipher suite.
type suite struct {
	hash   func() hash.Hash
	keyLen int
	ivLen  int // TLS 1.2: the IV's length in the key block
	chacha bool
}

var suites13 = map[uint16]suite{
	tls.TLS_AES_128_GCM_SHA256:       {sha256.New, 16, 12, false},
	tls.TLS_AES_256_GCM_SHA384:       {sha512.New384, 32, 12, false},
	tls.TLS_CHACHA20_POLY1305_SHA256: {sha256.New, 32, 12, true},
}

var suites12 = map[uint16]suite{
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:         {sha256.New, 16, 4, false},
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:       {sha256.New, 16, 4, false},
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:         {sha512.New384, 32, 4, false},
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:       {sha512.New384, 32, 4, false},
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:   {sha256.New, 32, 12, true},
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: {sha256.New, 32, 12, true},
}

func lookup(version, id uint16) (suite, error) {
	var s suite
	var ok bool
	switch version {
	case tls.VersionTLS13:
		s, ok = suites13[id]
	case tls.VersionTLS12:
		s, ok = suites12[id]
	default:
		return s, fmt.Errorf("tlsrecord: unsupported version %#04x", version)
	}
	if !ok {
		return s, fmt.Errorf("tlsrecord: unsupported cipher suite %s for %s", tls.CipherSuiteName(id), tls.VersionName(version))
	}
	return s, nil
}

// TLS13 returns the State of a TLS 1.3 end from its traffic secrets (the keylog's
// CLIENT_TRAFFIC_SECRET_0 / SERVER_TRAFFIC_SECRET_0) and sequence numbers.
func TLS13(suiteID uint16, client bool, readSecret, writeSecret []byte, readSeq, writeSeq uint64) (State, error) {
	s, err := lookup(tls.VersionTLS13, suiteID)
	if err != nil {
		return State{}, err
	}
	if n := s.hash().Size(); len(readSecret) != n || len(writeSecret) != n {
		return State{}, fmt.Errorf("tlsrecord: a %s traffic secret has %d bytes", tls.CipherSuiteName(suiteID), n)
	}
	return State{
		Version: tls.VersionTLS13, Suite: suiteID, Client: client,
		Read:  Direction{Secret: clone(readSecret), Seq: readSeq},
		Write: Direction{Secret: clone(writeSecret), Seq: writeSeq},
	}, nil
}

// TLS12 returns the State of a TLS 1.2 end from the master secret and the two randoms (key expansion
// with the suite's PRF, RFC 5246 6.3).
func TLS12(suiteID uint16, client bool, master, clientRandom, serverRandom []byte, readSeq, writeSeq uint64) (State, error) {
	s, err := lookup(tls.VersionTLS12, suiteID)
	if err != nil {
		return State{}, err
	}
	if len(master) != 48 || len(clientRandom) != 32 || len(serverRandom) != 32 {
		return State{}, errors.New("tlsrecord: a master secret has 48 bytes and a random 32")
	}
	seed := make([]byte, 0, 64)
	seed = append(append(seed, serverRandom...), clientRandom...)
	block := make([]byte, 2*s.keyLen+2*s.ivLen) // AEAD suites have no MAC keys
	prf12(s.hash, block, master, "key expansion", seed)
	cKey, block := block[:s.keyLen], block[s.keyLen:]
	sKey, block := block[:s.keyLen], block[s.keyLen:]
	cIV, sIV := block[:s.ivLen], block[s.ivLen:]
	st := State{Version: tls.VersionTLS12, Suite: suiteID, Client: client}
	if client {
		st.Read = Direction{Key: sKey, IV: sIV, Seq: readSeq}
		st.Write = Direction{Key: cKey, IV: cIV, Seq: writeSeq}
	} else {
		st.Read = Direction{Key: cKey, IV: cIV, Seq: readSeq}
		st.Write = Direction{Key: sKey, IV: sIV, Seq: writeSeq}
	}
	return st, nil
}

// prf12 fills out with the TLS 1.2 PRF: P_hash(secret, label + seed) (RFC 5246 5).
func prf12(h func() hash.Hash, out, secret []byte, label string, seed []byte) {
	ls := append([]byte(label), seed...)
	mac := hmac.New(h, secret)
	mac.Write(ls)
	a := mac.Sum(nil) // A(1)
	for len(out) > 0 {
		mac.Reset()
		mac.Write(a)
		mac.Write(ls)
		out = out[copy(out, mac.Sum(nil)):]
		mac.Reset()
		mac.Write(a)
		a = mac.Sum(nil)
	}
}

// expandLabel is TLS 1.3's HKDF-Expand-Label (RFC 8446 7.1) with an empty context.
func expandLabel(h func() hash.Hash, secret []byte, label string, n int) []byte {
	info := make([]byte, 0, 4+6+len(label))
	info = append(info, byte(n>>8), byte(n), byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0)
	out, err := hkdf.Expand(h, secret, string(info), n)
	if err != nil {
		panic("tlsrecord: HKDF-Expand-Label: " + err.Error()) // only for lengths far beyond ours
	}
	return out
}

// newAEAD returns the AEAD of a key.
func newAEAD(s suite, key []byte) (cipher.AEAD, error) {
	if s.chacha {
		return chacha20poly1305.New(key)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Supports reports whether the record layer has the suite of a session of that version.
func Supports(version, suite uint16) bool {
	_, err := lookup(version, suite)
	return err == nil
}
