package tlsrecord

import (
	"crypto/cipher"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

const (
	maxPlaintext = 1 << 14             // a record's largest plaintext (RFC 8446 5.1)
	maxBody      = maxPlaintext + 256  // a record's largest protected body in TLS 1.3 (RFC 8446 5.2)
	headerLen    = 5                   // type, version, length
	tagLen       = 16                  // all supported AEADs
	explicitLen  = 8                   // TLS 1.2 AES-GCM's explicit nonce
	MaxRecord    = headerLen + maxBody // a record's largest size on the wire: 16 KiB + 261

	typeChangeCipherSpec = 20
	typeAlert            = 21
	typeHandshake        = 22
	typeApplicationData  = 23

	msgNewSessionTicket = 4
	msgKeyUpdate        = 24

	alertCloseNotify = 0
)

// AlertError is a fatal alert the peer sent (its description, RFC 8446 6).
type AlertError uint8

func (e AlertError) Error() string { return fmt.Sprintf("tlsrecord: remote error: alert %d", uint8(e)) }

var (
	errBadRecordMAC   = errors.New("tlsrecord: bad record MAC")
	errRecordOverflow = errors.New("tlsrecord: record overflow")
	errClosedWrite    = errors.New("tlsrecord: write after close_notify")
)

// half is the protection of one direction.
type half struct {
	secret []byte      // TLS 1.3
	key    []byte      // TLS 1.2
	iv     [12]byte    // TLS 1.3 and ChaCha20: the whole IV; TLS 1.2 GCM: the fixed part in [:4]
	ivLen  int         // the IV's length in Direction
	aead   cipher.AEAD // from key (TLS 1.3: derived from secret)
	seq    uint64
	nonce  [12]byte // scratch
	aad    [13]byte // scratch (TLS 1.2)
}

// Conn is a TLS connection over rw protected by this package. Read and Write may run at once (one
// of each); State and New's handover need neither running.
type Conn struct {
	rw      io.ReadWriter
	version uint16
	suiteID uint16
	suite   suite
	client  bool

	rmu sync.Mutex // Read's
	in  half
	// buf holds, when not nil (a pooled buffer of MaxRecord bytes), plaintext opened but not yet
	// returned in buf[pOff:pEnd], then raw bytes read but not yet opened in buf[rOff:rEnd].
	buf              *[]byte
	pOff, pEnd       int
	rOff, rEnd       int
	rerr             error // sticky: io.EOF after close_notify, or what failed the connection
	readClosed       bool
	wmu              sync.Mutex // Write's, and a Read's that answers a KeyUpdate
	out              half
	werr             error
	writeClosed      bool
	keyUpdateHandled int // KeyUpdates read (tests)
}

// inPool holds Read's buffers of MaxRecord bytes: a Conn keeps one only while it holds bytes.
var inPool = sync.Pool{New: func() any { b := make([]byte, MaxRecord); return &b }}

// outPool holds Write's scratch buffers: room for a few whole records, so one rw.Write sends them.
var outPool = sync.Pool{New: func() any { b := make([]byte, 4*MaxRecord); return &b }}

// New returns a Conn that protects the bytes of rw with st. rw may be non-blocking: a Read of it
// may answer (0, err) with a temporary net.Error, which Conn.Read returns keeping what it has.
func New(rw io.ReadWriter, st State) (*Conn, error) {
	s, err := lookup(st.Version, st.Suite)
	if err != nil {
		return nil, err
	}
	c := &Conn{rw: rw, version: st.Version, suiteID: st.Suite, suite: s, client: st.Client,
		readClosed: st.ReadClosed, writeClosed: st.WriteClosed}
	if err := c.setHalf(&c.in, st.Read); err != nil {
		return nil, err
	}
	if err := c.setHalf(&c.out, st.Write); err != nil {
		return nil, err
	}
	if c.readClosed {
		c.rerr = io.EOF
	}
	if c.writeClosed {
		c.werr = errClosedWrite
	}
	if len(st.Pending)+len(st.Plain) > MaxRecord {
		return nil, errors.New("tlsrecord: a state holds more than a record's bytes")
	}
	if len(st.Pending)+len(st.Plain) > 0 {
		c.buf = inPool.Get().(*[]byte)
		c.pEnd = copy(*c.buf, st.Plain)
		c.rOff = c.pEnd
		c.rEnd = c.rOff + copy((*c.buf)[c.rOff:], st.Pending)
	}
	return c, nil
}

func (c *Conn) setHalf(h *half, d Direction) error {
	h.seq = d.Seq
	if c.version == tls.VersionTLS13 {
		if len(d.Secret) != c.suite.hash().Size() {
			return errors.New("tlsrecord: a traffic secret of the wrong length")
		}
		return c.setSecret(h, clone(d.Secret))
	}
	if len(d.Key) != c.suite.keyLen || len(d.IV) != c.suite.ivLen {
		return errors.New("tlsrecord: a key or IV of the wrong length")
	}
	h.key = clone(d.Key)
	h.ivLen = copy(h.iv[:], d.IV)
	var err error
	h.aead, err = newAEAD(c.suite, h.key)
	return err
}

// setSecret sets a TLS 1.3 half's traffic secret and the key and IV derived from it (RFC 8446 7.3).
func (c *Conn) setSecret(h *half, secret []byte) error {
	h.secret = secret
	h.key = expandLabel(c.suite.hash, secret, "key", c.suite.keyLen)
	h.ivLen = copy(h.iv[:], expandLabel(c.suite.hash, secret, "iv", 12))
	var err error
	h.aead, err = newAEAD(c.suite, h.key)
	return err
}

// nextSecret is a TLS 1.3 KeyUpdate: application_traffic_secret_N+1 (RFC 8446 7.2), whose records
// count from 0 (5.3).
func (c *Conn) nextSecret(h *half) error {
	h.seq = 0
	return c.setSecret(h, expandLabel(c.suite.hash, h.secret, "traffic upd", c.suite.hash().Size()))
}

// xorNonce sets h.nonce to the IV xored with the sequence number.
func (h *half) xorNonce() []byte {
	h.nonce = h.iv
	for i := range 8 {
		h.nonce[4+i] ^= byte(h.seq >> (56 - 8*i))
	}
	return h.nonce[:]
}

// State returns a copy of c's state, for a handover: the caller makes sure no Read or Write runs.
// A Conn that failed (a read or write error other than a temporary one) is not to be handed over:
// its State does not carry the failure. It holds keys: never log it.
func (c *Conn) State() State {
	st := State{Version: c.version, Suite: c.suiteID, Client: c.client,
		Read: c.direction(&c.in), Write: c.direction(&c.out),
		ReadClosed: c.readClosed, WriteClosed: c.writeClosed}
	if c.buf != nil {
		st.Plain = clone((*c.buf)[c.pOff:c.pEnd])
		st.Pending = clone((*c.buf)[c.rOff:c.rEnd])
	}
	return st
}

func (c *Conn) direction(h *half) Direction {
	if c.version == tls.VersionTLS13 {
		return Direction{Secret: clone(h.secret), Seq: h.seq}
	}
	return Direction{Key: clone(h.key), IV: clone(h.iv[:h.ivLen]), Seq: h.seq}
}

// Buffered returns the raw bytes c holds, read from rw but not yet opened. For the reading goroutine.
func (c *Conn) Buffered() int { return c.rEnd - c.rOff }

// HasRecord reports whether c holds plaintext or a whole record: Read would not need rw (an event
// loop must turn it again rather than wait for the socket). For the reading goroutine.
func (c *Conn) HasRecord() bool {
	if c.pEnd > c.pOff {
		return true
	}
	if c.buf == nil {
		return false
	}
	n, err := recordLen((*c.buf)[c.rOff:c.rEnd])
	return n > 0 || err != nil
}

// recordLen returns the length of the record at the start of b, or 0 if b holds less than a whole
// record; an error if its header is not one of a protected record.
func recordLen(b []byte) (int, error) {
	if len(b) < headerLen {
		return 0, nil
	}
	if b[0] < typeChangeCipherSpec || b[0] > typeApplicationData {
		return 0, fmt.Errorf("tlsrecord: a record of type %d", b[0])
	}
	if b[1] != 3 || b[2] != 3 {
		return 0, fmt.Errorf("tlsrecord: a record of version %#02x%02x", b[1], b[2])
	}
	n := int(b[3])<<8 | int(b[4])
	if n > maxBody {
		return 0, errRecordOverflow
	}
	if len(b) < headerLen+n {
		return 0, nil
	}
	return headerLen + n, nil
}

// Read reads the plaintext of the next application-data records into b: the data of whole records
// only. With len(b) >= MaxRecord, it reads rw into b and opens the records there. A temporary error
// of rw (a non-blocking socket with nothing to read) is returned as it is, keeping any partial
// record. The peer's close_notify gives io.EOF (with the data before it, if any).
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.pEnd > c.pOff {
		n := copy(b, (*c.buf)[c.pOff:c.pEnd])
		c.pOff += n
		c.release()
		return n, nil
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) >= MaxRecord {
		return c.readInPlace(b)
	}
	return c.readSmall(b)
}

// release gives c's buffer back to the pool once it holds nothing.
func (c *Conn) release() {
	if c.buf != nil && c.pOff == c.pEnd && c.rOff == c.rEnd {
		inPool.Put(c.buf)
		c.buf = nil
		c.pOff, c.pEnd, c.rOff, c.rEnd = 0, 0, 0, 0
	}
}

// readErr turns rw's error, with r raw bytes held, into Read's: a temporary one as it is, the end of
// the stream io.EOF at a record boundary (else io.ErrUnexpectedEOF), and sticks what is final.
func (c *Conn) readErr(err error, r int) error {
	if ne, ok := err.(net.Error); ok && ne.Temporary() { //nolint:staticcheck // nbio.ErrWouldBlock is Temporary
		return err
	}
	if err == io.EOF && r > 0 {
		err = io.ErrUnexpectedEOF
	}
	c.rerr = err
	return err
}

// readInPlace reads with a buffer that holds a whole record: held raw bytes are moved into b, rw is
// read after them, and the whole records are opened in b, their plaintexts moved to its front.
func (c *Conn) readInPlace(b []byte) (int, error) {
	r := 0
	if c.buf != nil {
		r = copy(b, (*c.buf)[c.rOff:c.rEnd])
		c.rOff = c.rEnd
		c.release()
	}
	for {
		n, err := recordLen(b[:r])
		if err != nil {
			c.fail(err)
			return 0, err
		}
		if n == 0 {
			m, err := c.rw.Read(b[r:])
			r += m
			if m == 0 {
				if err == nil {
					err = io.ErrNoProgress
				}
				c.keep(b[:r])
				return 0, c.readErr(err, r)
			}
			if n, _ = recordLen(b[:r]); n == 0 {
				continue
			}
		}
		w, used, err := c.openAll(b, r)
		if err != nil {
			return w, err
		}
		r = copy(b[w:], b[used:r]) // the partial record after them
		if w > 0 {
			c.keep(b[w : w+r])
			return w, nil
		}
		// w == 0 (control records only): the partial record is at b's front; read on.
	}
}

// keep stores a partial record in c's buffer.
func (c *Conn) keep(raw []byte) {
	if len(raw) == 0 {
		return
	}
	if c.buf == nil {
		c.buf = inPool.Get().(*[]byte)
	}
	c.pOff, c.pEnd, c.rOff = 0, 0, 0
	c.rEnd = copy(*c.buf, raw)
}

// openAll opens the whole records of b[:r] in place, moving the plaintext of their application data
// to b[:w]; used is where the records it opened end. After a close_notify it stops with io.EOF.
func (c *Conn) openAll(b []byte, r int) (w, used int, err error) {
	for {
		n, err := recordLen(b[used:r])
		if err != nil {
			c.fail(err)
			return w, used, err
		}
		if n == 0 {
			return w, used, nil
		}
		typ, pt, err := c.open(b[used : used+n])
		used += n
		if err != nil {
			return w, used, err
		}
		if typ == typeApplicationData {
			w += copy(b[w:], pt)
		}
		if c.rerr != nil { // close_notify
			return w, used, c.rerr
		}
	}
}

// readSmall reads with a buffer that may not hold a record's plaintext: the next record is read
// and opened in c's buffer, and its plaintext copied out of it.
func (c *Conn) readSmall(b []byte) (int, error) {
	if c.buf == nil {
		c.buf = inPool.Get().(*[]byte)
	}
	buf := *c.buf
	for {
		n, err := recordLen(buf[c.rOff:c.rEnd])
		if err != nil {
			c.fail(err)
			return 0, err
		}
		if n == 0 {
			if c.rOff > 0 {
				c.rEnd = copy(buf, buf[c.rOff:c.rEnd])
				c.rOff, c.pOff, c.pEnd = 0, 0, 0
			}
			m, err := c.rw.Read(buf[c.rEnd:])
			c.rEnd += m
			if m == 0 {
				if err == nil {
					err = io.ErrNoProgress
				}
				err = c.readErr(err, c.rEnd)
				c.release()
				return 0, err
			}
			continue
		}
		typ, pt, err := c.open(buf[c.rOff : c.rOff+n : c.rOff+n])
		c.rOff += n
		if err != nil {
			return 0, err
		}
		if typ == typeApplicationData && len(pt) > 0 {
			w := copy(b, pt)
			// The plaintext lies inside the record just opened, before rOff: keep what b did not take.
			start := c.rOff - n + (n - cap(pt)) // (the record's slice ends at cap n)
			c.pOff, c.pEnd = start+w, start+len(pt)
			c.release()
			return w, nil
		}
		if c.rerr != nil { // close_notify
			c.release()
			return 0, c.rerr
		}
	}
}

// open opens the record rec in place: its content type and plaintext (a slice of rec). The peer's
// close_notify sets c.rerr to io.EOF; control records are handled here and give no plaintext.
func (c *Conn) open(rec []byte) (typ byte, pt []byte, err error) {
	typ, body := rec[0], rec[headerLen:]
	h := &c.in
	switch {
	case c.version == tls.VersionTLS13:
		if typ != typeApplicationData {
			return c.fail(fmt.Errorf("tlsrecord: an unprotected record of type %d after the handshake", typ))
		}
		if len(body) < tagLen+1 {
			return c.fail(errBadRecordMAC)
		}
		pt, err = h.aead.Open(body[:0], h.xorNonce(), body, rec[:headerLen])
		if err != nil {
			return c.fail(errBadRecordMAC)
		}
		if len(pt) > maxPlaintext+1 { // TLSInnerPlaintext, padding included (RFC 8446 5.4)
			return c.fail(errRecordOverflow)
		}
		i := len(pt) - 1
		for i >= 0 && pt[i] == 0 {
			i--
		}
		if i < 0 {
			return c.fail(errors.New("tlsrecord: a record with no content type"))
		}
		typ, pt = pt[i], pt[:i]
	default: // TLS 1.2
		var nonce []byte
		if c.suite.chacha {
			nonce = h.xorNonce()
		} else {
			if len(body) < explicitLen {
				return c.fail(errBadRecordMAC)
			}
			h.nonce = h.iv
			copy(h.nonce[4:], body[:explicitLen])
			nonce, body = h.nonce[:], body[explicitLen:]
		}
		if len(body) < tagLen {
			return c.fail(errBadRecordMAC)
		}
		binary.BigEndian.PutUint64(h.aad[:8], h.seq)
		h.aad[8], h.aad[9], h.aad[10] = typ, 3, 3
		binary.BigEndian.PutUint16(h.aad[11:], uint16(len(body)-tagLen))
		pt, err = h.aead.Open(body[:0], nonce, body, h.aad[:])
		if err != nil {
			return c.fail(errBadRecordMAC)
		}
	}
	h.seq++
	if len(pt) > maxPlaintext {
		return c.fail(errRecordOverflow)
	}
	switch typ {
	case typeApplicationData:
		return typ, pt, nil
	case typeAlert:
		if len(pt) != 2 {
			return c.fail(errors.New("tlsrecord: a malformed alert"))
		}
		if pt[1] == alertCloseNotify {
			c.rerr, c.readClosed = io.EOF, true
			return typ, nil, nil
		}
		return c.fail(AlertError(pt[1]))
	case typeHandshake:
		if c.version != tls.VersionTLS13 {
			return c.fail(errors.New("tlsrecord: renegotiation is not supported"))
		}
		return typ, nil, c.handshake(pt)
	case typeChangeCipherSpec:
		return c.fail(errors.New("tlsrecord: change_cipher_spec after the handshake"))
	}
	return c.fail(fmt.Errorf("tlsrecord: a record of type %d", typ))
}

// fail makes err c's read error for good, and tells the peer with a fatal alert (RFC 8446 6.2)
// unless the failure is the peer's alert.
func (c *Conn) fail(err error) (byte, []byte, error) {
	c.rerr = err
	var desc byte
	switch err {
	case errBadRecordMAC:
		desc = 20 // bad_record_mac
	case errRecordOverflow:
		desc = 22 // record_overflow
	default:
		if _, peers := err.(AlertError); peers {
			return 0, nil, err
		}
		desc = 10 // unexpected_message
	}
	c.wmu.Lock()
	if c.werr == nil {
		alert := [2]byte{2, desc} // fatal
		if _, werr := c.writeRecords(typeAlert, alert[:]); werr == nil {
			c.werr = err
		}
	}
	c.wmu.Unlock()
	return 0, nil, err
}

// handshake handles the TLS 1.3 post-handshake messages of one record (each whole in it).
func (c *Conn) handshake(msgs []byte) error {
	for len(msgs) > 0 {
		if len(msgs) < 4 {
			_, _, err := c.fail(errors.New("tlsrecord: a handshake message split across records"))
			return err
		}
		n := int(msgs[1])<<16 | int(msgs[2])<<8 | int(msgs[3])
		if len(msgs) < 4+n {
			_, _, err := c.fail(errors.New("tlsrecord: a handshake message split across records"))
			return err
		}
		typ, body := msgs[0], msgs[4:4+n]
		msgs = msgs[4+n:]
		switch {
		case typ == msgNewSessionTicket && c.client:
			// A ticket for a later connection: this one has no use for it.
		case typ == msgKeyUpdate:
			if n != 1 || body[0] > 1 {
				_, _, err := c.fail(errors.New("tlsrecord: a malformed KeyUpdate"))
				return err
			}
			if len(msgs) > 0 { // RFC 8446 5.1: a key change ends its record
				_, _, err := c.fail(errors.New("tlsrecord: data after a KeyUpdate in its record"))
				return err
			}
			if err := c.nextSecret(&c.in); err != nil {
				_, _, err = c.fail(err)
				return err
			}
			c.keyUpdateHandled++
			if body[0] == 1 { // update_requested: answer with ours
				c.wmu.Lock()
				err := c.sendKeyUpdate(false)
				c.wmu.Unlock()
				if err != nil && err != errClosedWrite {
					_, _, err = c.fail(err)
					return err
				}
			}
		default:
			_, _, err := c.fail(fmt.Errorf("tlsrecord: a handshake message of type %d after the handshake", typ))
			return err
		}
	}
	return nil
}

// Write seals p into records of at most 16 KiB plaintext each and writes them to rw, whole records
// in one rw.Write per few records.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeRecords(typeApplicationData, p)
}

// writeRecords seals and writes p as records of type typ; the caller holds wmu.
func (c *Conn) writeRecords(typ byte, p []byte) (int, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	bp := outPool.Get().(*[]byte)
	defer outPool.Put(bp)
	n := 0
	for len(p) > 0 {
		buf, taken := (*bp)[:0], 0
		for len(p) > taken && cap(buf)-len(buf) >= MaxRecord {
			m := min(len(p)-taken, maxPlaintext)
			buf = c.seal(buf, typ, p[taken:taken+m])
			taken += m
		}
		if _, err := c.rw.Write(buf); err != nil {
			c.werr = err
			return n, err
		}
		n += taken
		p = p[taken:]
	}
	return n, nil
}

// CloseWrite sends close_notify: the peer reads the end of the stream. Later writes fail.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.writeClosed {
		return nil
	}
	alert := [2]byte{1, alertCloseNotify} // warning level, as RFC 5246 7.2.1 has it
	_, err := c.writeRecords(typeAlert, alert[:])
	c.writeClosed = true
	if err == nil {
		c.werr = errClosedWrite
	}
	return err
}

// KeyUpdate (TLS 1.3) sends a KeyUpdate and protects the records written after it with the next
// traffic secret; with requestPeer, the peer answers with its own, changing the keys of what it
// sends.
func (c *Conn) KeyUpdate(requestPeer bool) error {
	if c.version != tls.VersionTLS13 {
		return errors.New("tlsrecord: KeyUpdate is TLS 1.3's")
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sendKeyUpdate(requestPeer)
}

// sendKeyUpdate writes a KeyUpdate, then moves the write side to the next secret; the caller
// holds wmu.
func (c *Conn) sendKeyUpdate(requestPeer bool) error {
	msg := [5]byte{msgKeyUpdate, 0, 0, 1, 0}
	if requestPeer {
		msg[4] = 1
	}
	if _, err := c.writeRecords(typeHandshake, msg[:]); err != nil {
		return err
	}
	return c.nextSecret(&c.out)
}

// seal appends to dst the record of type typ protecting data (at most maxPlaintext bytes), whose
// room dst has.
func (c *Conn) seal(dst []byte, typ byte, data []byte) []byte {
	h := &c.out
	start := len(dst)
	var bodyLen int
	switch {
	case c.version == tls.VersionTLS13:
		bodyLen = len(data) + 1 + tagLen
	case c.suite.chacha:
		bodyLen = len(data) + tagLen
	default:
		bodyLen = explicitLen + len(data) + tagLen
	}
	rec := dst[start : start+headerLen+bodyLen]
	outer := typ
	if c.version == tls.VersionTLS13 {
		outer = typeApplicationData
	}
	rec[0], rec[1], rec[2], rec[3], rec[4] = outer, 3, 3, byte(bodyLen>>8), byte(bodyLen)
	switch {
	case c.version == tls.VersionTLS13:
		body := rec[headerLen:]
		copy(body, data)
		body[len(data)] = typ
		h.aead.Seal(body[:0], h.xorNonce(), body[:len(data)+1], rec[:headerLen])
	default:
		binary.BigEndian.PutUint64(h.aad[:8], h.seq)
		h.aad[8], h.aad[9], h.aad[10] = typ, 3, 3
		binary.BigEndian.PutUint16(h.aad[11:], uint16(len(data)))
		body := rec[headerLen:]
		var nonce []byte
		if c.suite.chacha {
			nonce = h.xorNonce()
		} else { // the explicit nonce is the sequence number, as crypto/tls does
			binary.BigEndian.PutUint64(body, h.seq)
			h.nonce = h.iv
			copy(h.nonce[4:], body[:explicitLen])
			nonce, body = h.nonce[:], body[explicitLen:]
		}
		copy(body, data)
		h.aead.Seal(body[:0], nonce, body[:len(data)], h.aad[:])
	}
	h.seq++
	return dst[:start+headerLen+bodyLen]
}
