package frontend

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/httpfield"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// One HTTP/2 connection (see h2.go). Its goroutine (serve) reads the client's frames and keeps the
// connection's state: it opens streams, hands each request to a worker (H2.dispatch), queues DATA for
// the stream's handler, applies SETTINGS and WINDOW_UPDATE, answers PING, resets and refuses; it never
// waits for a window. Workers write their answers: any goroutine writes under wmu, and the last writer
// to leave flushes (answers finishing together go out in one TLS record and one system call).

const (
	h2StreamWindow  = 256 << 10 // the receive window of each stream (SETTINGS_INITIAL_WINDOW_SIZE)
	h2ConnWindow    = 1 << 20   // the connection's receive window
	h2DefaultWindow = 65535     // RFC 9113's initial windows, before SETTINGS and WINDOW_UPDATE
	h2MaxWindow     = 1<<31 - 1
	h2DefaultFrame  = 16384            // the largest frame either side may send before SETTINGS say more
	h2PrefaceWait   = 10 * time.Second // for the preface and first SETTINGS when header_timeout is 0
	h2CopyBuffer    = 16 << 10         // the piece of a streamed answer read at once
)

// h2DecodeLimit is the header list size x/net's Framer decodes for one stream, and the longest field its
// HPACK decoder takes, for max_header_size maxHeader. It is well over max_header_size, so that a head
// over the limit, even one made of a single field, is decoded whole (the connection's HPACK state stays
// in step with the client's) and answered 431, as over HTTP/1.1, while the connection serves on. Only a
// header list past it (a flood, or a field of a size no browser sends) ends the connection: x/net
// closes it with COMPRESSION_ERROR for a field that long, PROTOCOL_ERROR for CONTINUATION frames past it.
func h2DecodeLimit(maxHeader int) uint32 { return uint32(max(4*(maxHeader+10*32), 64<<10)) }

// errConnectionField is readRequest's PROTOCOL_ERROR for a connection-specific field (counted apart).
const errConnectionField = http2.ErrCode(1<<32 - 1)

var (
	errStreamGone = errors.New("h2: stream reset or connection closed")
	errH2Closed   = errors.New("h2: connection closed")
)

type h2conn struct {
	h    *H2
	conf H2Config
	lim  Limits // the framer's limits, max_header_size this connection's
	tc   *tls.Conn
	br   *bufio.Reader
	fr   *http2.Framer

	// Writes: wmu guards bw, the framer's write side and enc.
	wmu       sync.Mutex
	bw        *bufio.Writer
	enc       *hpack.Encoder
	hbuf      bytes.Buffer
	names     map[string]string // answer field names, in lowercase
	peerFrame atomic.Int64      // the client's SETTINGS_MAX_FRAME_SIZE
	lastSeen  atomic.Uint32     // lastID, for a GOAWAY from any goroutine
	writers   atomic.Int32      // goroutines that hold or wait for wmu (the last one out has it flushed)
	flushing  bool              // a flush is due: the flusher's
	flushCh   chan struct{}     // wakes the flusher
	done      chan struct{}     // closed when the connection ends
	werr      error
	wdeadline time.Time

	// mu guards the streams, the windows and closed; each stream's cond waits on it.
	mu          sync.Mutex
	streams     map[uint32]*h2stream
	active      int
	closed      bool
	goneAway    bool  // the client sent GOAWAY, or we drain: no new streams; close once none is left
	draining    bool  // we drain (H2.Shutdown): a streamed answer (AnswerStream) ends
	sendConn    int64 // what the client's connection window lets us send
	peerWindow  int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	recvConn    int64 // what the client may still send on the connection
	recvUnacked int64 // bytes consumed (or dropped) not yet given back by a WINDOW_UPDATE
	idle        *time.Timer
	ended       [128]uint32 // the streams that ended lately (id<<1, | 1 if we reset it): see endedAs
	endedN      int

	// The serving goroutine's own.
	lastID         uint32 // the highest stream the client opened
	opened, resets uint64
	sawSettings    bool
}

func newH2Conn(h *H2, tc *tls.Conn, conf H2Config) *h2conn {
	c := &h2conn{h: h, conf: conf, lim: h.front.lim, tc: tc, streams: map[uint32]*h2stream{}, names: map[string]string{},
		sendConn: h2DefaultWindow, peerWindow: h2DefaultWindow, recvConn: h2ConnWindow}
	c.peerFrame.Store(h2DefaultFrame)
	c.flushCh, c.done = make(chan struct{}, 1), make(chan struct{})
	c.lim.MaxHeader = conf.MaxHeader
	c.br = bufio.NewReaderSize(tc, 16<<10)
	c.bw = bufio.NewWriterSize(tc, 16<<10)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = h2DecodeLimit(conf.MaxHeader)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(h2DefaultFrame) // SETTINGS_MAX_FRAME_SIZE is not raised: larger is a FRAME_SIZE_ERROR
	c.enc = hpack.NewEncoder(&c.hbuf)
	return c
}

// serve reads and handles the client's frames until the connection ends.
func (c *h2conn) serve() {
	defer c.shutdown()
	wait := c.lim.HeaderTimeout
	if wait <= 0 {
		wait = h2PrefaceWait
	}
	c.tc.SetReadDeadline(time.Now().Add(wait)) //nolint:errcheck // a failed read reports it
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		return
	}
	c.lockWrite()
	c.fr.WriteSettings( //nolint:errcheck // a failed write is c.werr
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.conf.MaxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(c.conf.MaxHeader + 10*32)}, // x/net's allowance for ten fields' overhead
	)
	c.fr.WriteWindowUpdate(0, h2ConnWindow-h2DefaultWindow) //nolint:errcheck
	if c.unlockWrite(true) != nil {
		return
	}
	if c.conf.IdleTimeout > 0 {
		c.idle = time.AfterFunc(c.conf.IdleTimeout, c.onIdle)
	}
	go c.flusher()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if c.readFailed(f, err) {
				continue
			}
			return
		}
		if !c.sawSettings {
			if s, ok := f.(*http2.SettingsFrame); !ok || s.IsAck() {
				c.goAway(http2.ErrCodeProtocol)
				return
			}
			c.sawSettings = true
			c.tc.SetReadDeadline(time.Time{}) //nolint:errcheck // from here: idle_timeout (onIdle)
		}
		if err := c.process(f); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.goAway(http2.ErrCode(ce))
			}
			return
		}
	}
}

// readFailed handles an error of ReadFrame: true if the connection goes on (a stream error).
func (c *h2conn) readFailed(f http2.Frame, err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		// A header block with a malformed field or pseudo-header: the stream opened, and is reset.
		if _, ok := f.(*http2.MetaHeadersFrame); ok && se.StreamID > c.lastID && se.StreamID%2 == 1 {
			c.lastID = se.StreamID
			c.lastSeen.Store(se.StreamID)
			c.opened++
		}
		c.resetID(se.StreamID, se.Code)
		if mh, ok := f.(*http2.MetaHeadersFrame); ok || f == nil {
			c.logRefused(mh, 0, se.Code, "malformed header field", time.Time{})
		}
		return true
	case errors.As(err, &ce):
		c.goAway(http2.ErrCode(ce))
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize)
	}
	return false
}

func (c *h2conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.lockWrite()
			c.fr.WritePing(true, f.Data) //nolint:errcheck // c.werr
			return c.unlockWrite(false)
		}
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamID == f.StreamDep {
			c.resetID(f.StreamID, http2.ErrCodeProtocol) // a stream cannot depend on itself
		}
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.goneAway = true
		done := c.active == 0
		c.mu.Unlock()
		if done {
			return errH2Closed
		}
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // a client does not push
	}
	return nil // unknown frame types are ignored
}

func (c *h2conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	err := f.ForeachSetting(func(st http2.Setting) error {
		if err := st.Valid(); err != nil {
			return err
		}
		switch st.ID {
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			defer c.mu.Unlock()
			delta := int64(st.Val) - c.peerWindow
			c.peerWindow = int64(st.Val)
			for _, s := range c.streams {
				if s.sendWin += delta; s.sendWin > h2MaxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				s.cond.Broadcast()
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame.Store(int64(st.Val))
		case http2.SettingHeaderTableSize:
			c.lockWrite()
			c.enc.SetMaxDynamicTableSize(st.Val) // at most the encoder's limit, 4096
			c.unlockWrite(false)                 //nolint:errcheck // nothing written
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.lockWrite()
	c.fr.WriteSettingsAck() //nolint:errcheck // c.werr
	return c.unlockWrite(false)
}

func (c *h2conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if c.sendConn += int64(f.Increment); c.sendConn > h2MaxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		for _, s := range c.streams {
			s.cond.Broadcast()
		}
		return nil
	}
	if f.StreamID > c.lastID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	s := c.streams[f.StreamID]
	if s == nil || s.reset {
		return nil // a stream that ended
	}
	if s.sendWin += int64(f.Increment); s.sendWin > h2MaxWindow {
		c.resetLocked(s, http2.ErrCodeFlowControl)
		return nil
	}
	s.cond.Broadcast()
	return nil
}

func (c *h2conn) onReset(f *http2.RSTStreamFrame) error {
	if f.StreamID > c.lastID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	c.resets++
	if c.resets >= rapidResetMin && 2*c.resets > c.opened {
		c.h.rapidResets.Add(1)
		c.writeGoAway(http2.ErrCodeEnhanceYourCalm)
		return errH2Closed
	}
	c.mu.Lock()
	if s := c.streams[f.StreamID]; s != nil && !s.reset {
		s.reset, s.byClient = true, true // the client's: nothing to send back
		s.wakeLocked()
	}
	c.mu.Unlock()
	return nil
}

func (c *h2conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // client streams are odd
	}
	if id <= c.lastID {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch s := c.streams[id]; {
		case s != nil && s.byClient:
			c.resetAgainLocked(id, http2.ErrCodeStreamClosed)
		case s != nil && s.reset:
			// ours: ignored
		case s != nil:
			return c.trailersLocked(s, f)
		default:
			switch found, weReset := c.endedAs(id); {
			case !found:
				return http2.ConnectionError(http2.ErrCodeProtocol) // an identifier it skipped
			case !weReset:
				return http2.ConnectionError(http2.ErrCodeStreamClosed)
			}
		}
		return nil
	}
	c.lastID = id
	c.opened++
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.lastSeen.Store(id)
		c.resetID(id, http2.ErrCodeProtocol) // a stream cannot depend on itself
		c.logRefused(f, 0, http2.ErrCodeProtocol, "a stream depending on itself", time.Time{})
		return nil
	}
	c.mu.Lock()
	full, gone := c.active >= int(c.conf.MaxStreams), c.goneAway || c.closed
	if !gone {
		// A GOAWAY names the last stream taken: decided with goneAway under mu, so that a stream left
		// unanswered because the connection goes away is never one the GOAWAY says was taken (its
		// client would neither get an answer nor send it again).
		c.lastSeen.Store(id)
	}
	c.mu.Unlock()
	switch {
	case gone:
		return nil
	case full:
		c.writeReset(id, http2.ErrCodeRefusedStream)
		c.logRefused(f, 0, http2.ErrCodeRefusedStream, "over http2_max_streams", time.Time{})
		return nil
	}
	s := c.h.streamPool.Get().(*h2stream)
	s.open(c, id, f.StreamEnded())
	c.mu.Lock()
	c.streams[id] = s
	if c.active++; c.active == 1 && c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()

	status, reason := 0, ""
	switch {
	case f.Truncated: // the header list is over the limit
		status, reason = fasthttp.StatusRequestHeaderFieldsTooLarge, "request header fields too large"
		c.h.bigHeads.Add(1)
	default:
		var code http2.ErrCode
		if status, reason, code = s.readRequest(f); code != http2.ErrCodeNo {
			kind := ""
			if code == errConnectionField {
				code, kind = http2.ErrCodeProtocol, "connection_field"
			}
			c.resetIDAs(id, code, kind)
			c.finish(s)
			c.logRefused(f, 0, code, reason, time.Time{})
			return nil
		}
	}
	if status != 0 {
		c.refuse(s, status)
		c.finish(s)
		c.logRefused(f, status, http2.ErrCodeNo, reason, time.Time{})
		return nil
	}
	c.h.dispatch(s)
	return nil
}

// trailersLocked takes a stream's trailer section (RFC 9113 section 8.1): it ends the stream, holds no
// pseudo-header field, and only fields a trailer may carry.
func (c *h2conn) trailersLocked(s *h2stream, f *http2.MetaHeadersFrame) error {
	if s.ended {
		c.resetLocked(s, http2.ErrCodeStreamClosed)
		return nil
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 || f.Truncated {
		c.resetLocked(s, http2.ErrCodeProtocol)
		return nil
	}
	for _, hf := range f.RegularFields() {
		if !validTrailer([]byte(hf.Name)) {
			c.resetLocked(s, http2.ErrCodeProtocol)
			return nil
		}
		s.trailers = appendField(s.trailers, hf.Name, hf.Value)
	}
	if s.declLen >= 0 && s.got != s.declLen {
		c.resetLocked(s, http2.ErrCodeProtocol)
		return nil
	}
	s.ended = true
	s.cond.Broadcast()
	return nil
}

func (c *h2conn) onData(f *http2.DataFrame) error {
	id, size, data := f.StreamID, int64(f.Length), f.Data()
	c.mu.Lock()
	if c.recvConn -= size; c.recvConn < 0 {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	s := c.streams[id]
	if s == nil || s.reset || s.ended {
		c.recvUnacked += size // given back: nobody reads it
		switch {
		case id > c.lastID:
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		case s != nil && s.byClient:
			c.resetAgainLocked(id, http2.ErrCodeStreamClosed)
		case s != nil && !s.reset:
			c.resetLocked(s, http2.ErrCodeStreamClosed) // DATA after END_STREAM
		case s == nil && c.goneAway && id > c.lastSeen.Load():
			// a stream above the GOAWAY's last: not taken, and its client sends it again elsewhere
		case s == nil:
			if _, weReset := c.endedAs(id); !weReset {
				c.resetAgainLocked(id, http2.ErrCodeStreamClosed)
			}
		}
		c.mu.Unlock()
		c.giveBack(0, 0)
		return nil
	}
	if s.recvWin -= size; s.recvWin < 0 {
		c.recvUnacked += size
		c.resetLocked(s, http2.ErrCodeFlowControl)
		c.mu.Unlock()
		return nil
	}
	c.recvUnacked += size - int64(len(data)) // padding is given back at once
	s.unacked += size - int64(len(data))
	if s.got += int64(len(data)); s.declLen >= 0 && s.got > s.declLen {
		c.recvUnacked += int64(len(data))
		c.resetLocked(s, http2.ErrCodeProtocol) // more DATA than its content-length
		c.mu.Unlock()
		return nil
	}
	s.buf = append(s.buf, data...)
	if f.StreamEnded() {
		if s.declLen >= 0 && s.got != s.declLen {
			c.resetLocked(s, http2.ErrCodeProtocol) // less DATA than its content-length
			c.mu.Unlock()
			return nil
		}
		s.ended = true
	}
	s.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

// giveBack sends the WINDOW_UPDATEs due: inc bytes to stream id (none if 0), and the connection's once
// a quarter of its window waits to be given back.
func (c *h2conn) giveBack(id uint32, inc int64) {
	c.mu.Lock()
	var conn int64
	if c.recvUnacked >= h2ConnWindow/4 {
		conn, c.recvUnacked = c.recvUnacked, 0
		c.recvConn += conn
	}
	c.mu.Unlock()
	if conn == 0 && inc == 0 {
		return
	}
	c.lockWrite()
	if inc > 0 {
		c.fr.WriteWindowUpdate(id, uint32(inc)) //nolint:errcheck // c.werr
	}
	if conn > 0 {
		c.fr.WriteWindowUpdate(0, uint32(conn)) //nolint:errcheck
	}
	c.unlockWrite(false) //nolint:errcheck
}

// resetLocked resets stream s (c.mu held): marks it and sends RST_STREAM with code, counted.
func (c *h2conn) resetLocked(s *h2stream, code http2.ErrCode) {
	if s.reset {
		return
	}
	s.reset, s.resetCode = true, code
	s.wakeLocked()
	go c.writeReset(s.id, code) // not under c.mu: a write may wait for the client
}

// resetAgainLocked answers a frame on a stream that is closed to the client (c.mu held).
func (c *h2conn) resetAgainLocked(id uint32, code http2.ErrCode) {
	go c.writeReset(id, code) // not under c.mu: a write may wait for the client
}

// resetStream resets s if it is still the stream it was.
func (c *h2conn) resetStream(s *h2stream, id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if c.streams[id] == s && !s.reset {
		s.reset = true
		s.wakeLocked()
		c.mu.Unlock()
		c.writeReset(id, code)
		return
	}
	c.mu.Unlock()
}

// endedLocked notes that stream id ended, reset by us or not (c.mu held).
func (c *h2conn) endedLocked(id uint32, weReset bool) {
	v := id << 1
	if weReset {
		v |= 1
	}
	c.ended[c.endedN%len(c.ended)] = v
	c.endedN++
}

// endedAs tells how a stream not open any more ended (c.mu held): found if it is among those that
// ended lately, weReset if we reset it. Frames on a stream we reset are ignored (the client may have
// sent them before it saw the RST_STREAM, RFC 9113 section 5.1); on one closed otherwise they are an
// error of type STREAM_CLOSED; on one never opened (an identifier the client skipped), a PROTOCOL_ERROR.
func (c *h2conn) endedAs(id uint32) (found, weReset bool) {
	for _, v := range c.ended[:min(c.endedN, len(c.ended))] {
		if v>>1 == id {
			found, weReset = true, weReset || v&1 == 1
		}
	}
	return found, weReset
}

// resetID resets the stream id, open or not.
func (c *h2conn) resetID(id uint32, code http2.ErrCode) { c.resetIDAs(id, code, "") }

// resetIDAs resets the stream id, counted as a refusal of kind (if not "": of its code).
func (c *h2conn) resetIDAs(id uint32, code http2.ErrCode, kind string) {
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		if s.reset {
			c.mu.Unlock()
			return
		}
		s.reset = true
		s.wakeLocked()
	}
	c.mu.Unlock()
	c.writeResetAs(id, code, kind)
}

// writeReset sends RST_STREAM; one with an error code counts as a refusal (of kind "stream_CODE").
func (c *h2conn) writeReset(id uint32, code http2.ErrCode) { c.writeResetAs(id, code, "") }

// writeResetAs sends RST_STREAM, counted as a refusal of kind if it is not "".
func (c *h2conn) writeResetAs(id uint32, code http2.ErrCode, kind string) {
	switch {
	case kind != "":
		c.h.countError(kind)
	case code != http2.ErrCodeNo && code != http2.ErrCodeCancel:
		c.h.countError("stream_" + code.String())
	}
	c.mu.Lock()
	c.endedLocked(id, true)
	c.mu.Unlock()
	c.lockWrite()
	c.fr.WriteRSTStream(id, code) //nolint:errcheck // c.werr
	c.unlockWrite(false)          //nolint:errcheck
}

// goAway tells the client the connection ends (with an error code: counted), before it is closed.
func (c *h2conn) goAway(code http2.ErrCode) {
	if code != http2.ErrCodeNo {
		c.h.countError("conn_" + code.String())
	}
	c.writeGoAway(code)
}

func (c *h2conn) writeGoAway(code http2.ErrCode) {
	c.lockWrite()
	c.fr.WriteGoAway(c.lastSeen.Load(), code, nil) //nolint:errcheck // c.werr
	c.unlockWrite(true)                            //nolint:errcheck
}

// drain tells the client the connection goes away (GOAWAY NO_ERROR): its open streams are served, no
// new one is taken, and the connection closes with the last one (now, if none is open). A streamed
// answer, which has no end of its own, is told to end (AnswerStream.Done) once the GOAWAY is out.
func (c *h2conn) drain() {
	c.mu.Lock()
	c.goneAway = true
	idle := c.active == 0
	c.mu.Unlock()
	if idle {
		c.onIdle()
		return
	}
	c.writeGoAway(http2.ErrCodeNo)
	c.mu.Lock()
	c.draining = true
	for _, s := range c.streams {
		s.wakeLocked()
	}
	c.mu.Unlock()
}

// onIdle ends a connection that had no stream for idle_timeout (or whose client said GOAWAY and has
// no stream left).
func (c *h2conn) onIdle() {
	c.mu.Lock()
	if c.active > 0 || c.closed {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.writeGoAway(http2.ErrCodeNo)
	c.lingerClose()
}

// h2Linger bounds how long a connection that said its last GOAWAY waits for its client to close.
const h2Linger = time.Second

// lingerClose ends the connection once its last frames are out (the GOAWAY flushed them) without
// losing them: the write side closes (TLS close_notify, then the socket's FIN) and the serving
// goroutine reads on until the client closes its side, for at most h2Linger, before the socket
// closes. Closing at once loses the end of the last answers: the client still sends (a WINDOW_UPDATE
// for the DATA it reads, a PING), the kernel answers a socket closed with bytes still coming by a
// reset, and a reset makes the client's kernel drop what the client has not read yet (seen in a
// binary upgrade: a slow stream in flight at the GOAWAY cut short, "unexpected EOF").
func (c *h2conn) lingerClose() {
	c.tc.SetReadDeadline(time.Now().Add(h2Linger)) //nolint:errcheck // the read ends at it either way
	c.lockWrite()
	c.tc.CloseWrite() //nolint:errcheck // a failed close_notify leaves the FIN and the close below
	if cw, ok := c.tc.NetConn().(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() //nolint:errcheck
	}
	c.unlockWrite(false) //nolint:errcheck // nothing more goes out
}

// shutdown ends the connection: every stream's waits end, and the socket is closed.
func (c *h2conn) shutdown() {
	c.mu.Lock()
	c.closed = true
	for _, s := range c.streams {
		s.wakeLocked()
	}
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	close(c.done)
	c.tc.Close() //nolint:errcheck
}

// finish ends stream s's life on the connection: removed from it (the client's unread DATA given
// back, the rest of its request body refused with RST_STREAM NO_ERROR), and s back to the pool.
func (c *h2conn) finish(s *h2stream) {
	c.mu.Lock()
	id := s.id
	if c.streams[id] == s {
		delete(c.streams, id)
		c.active--
	}
	c.recvUnacked += int64(len(s.buf) - s.off)
	cancel := !s.ended && !s.reset
	if !cancel {
		c.endedLocked(id, s.reset && !s.byClient)
	}
	s.reset = true
	idle := c.active == 0 && !c.closed && c.idle != nil
	s.ctx.Request.Reset()
	s.ctx.Response.Reset()
	closeNow := c.active == 0 && c.goneAway
	timer := s.timer
	s.timer = nil
	c.mu.Unlock()
	if cancel {
		c.writeReset(id, http2.ErrCodeNo)
	}
	c.giveBack(0, 0)
	switch {
	case closeNow:
		c.onIdle()
	case idle:
		c.idle.Reset(c.conf.IdleTimeout)
	}
	if timer != nil {
		timer.Stop()
		return // its function may yet run: s is not reused
	}
	s.c = nil
	c.h.streamPool.Put(s)
}

// lockWrite takes the write side; unlockWrite gives it back, flushing when no other writer waits (or
// when flush asks it: a streamed answer's part goes out as it comes).
func (c *h2conn) lockWrite() {
	c.writers.Add(1)
	c.wmu.Lock()
}

func (c *h2conn) unlockWrite(flush bool) error {
	last := c.writers.Add(-1) == 0
	switch {
	case flush:
		c.flushLocked()
	case last && c.werr == nil && c.bw.Buffered() > 0 && !c.flushing:
		c.flushing = true // the flusher's, after the goroutines ready to run had their turn
		select {
		case c.flushCh <- struct{}{}:
		default:
		}
	}
	err := c.werr
	c.wmu.Unlock()
	return err
}

// flushLocked sends what is buffered (wmu held).
func (c *h2conn) flushLocked() {
	c.flushing = false
	if c.werr != nil || c.bw.Buffered() == 0 {
		return
	}
	if t := c.conf.IdleTimeout; t > 0 { // a client that stops reading is gone after idle_timeout
		if now := time.Now(); c.wdeadline.Sub(now) < t*3/4 {
			c.wdeadline = now.Add(t)
			c.tc.SetWriteDeadline(c.wdeadline) //nolint:errcheck // a failed write reports it
		}
	}
	if c.werr = c.bw.Flush(); c.werr != nil {
		c.tc.Close() //nolint:errcheck // the serving goroutine's read ends
	}
}

// flusher sends what the writers left buffered. It yields first: the answers of other streams that are
// ready (their upstream answered in the same moment) are written meanwhile and go out in the same
// TLS record and system call, as an event loop writes what one turn produced.
func (c *h2conn) flusher() {
	for {
		select {
		case <-c.flushCh:
		case <-c.done:
			return
		}
		runtime.Gosched()
		c.wmu.Lock()
		if c.flushing {
			c.flushLocked()
		}
		c.wmu.Unlock()
	}
}

// lower returns a field name in lowercase (HTTP/2 names are), remembered per connection.
func (c *h2conn) lower(name []byte) string {
	if s, ok := c.names[string(name)]; ok {
		return s
	}
	low := string(bytes.ToLower(name))
	if len(c.names) < 256 {
		c.names[string(name)] = low
	}
	return low
}

// writeHeaders encodes and writes a HEADERS frame (and CONTINUATIONs) for stream id, wmu held: the
// status (0: trailers) and fields of hdr less the connection-specific ones, or the trailer lines.
func (c *h2conn) writeHeaders(id uint32, status int, hdr *fasthttp.ResponseHeader, trailers []byte, end bool) {
	c.hbuf.Reset()
	if status != 0 {
		c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusString(status)}) //nolint:errcheck // to a bytes.Buffer
	}
	if hdr != nil {
		for k, v := range hdr.All() {
			if !httpfield.Of(k).ConnectionSpecific() {
				c.enc.WriteField(hpack.HeaderField{Name: c.lower(k), Value: string(v)}) //nolint:errcheck
			}
		}
	}
	eachTrailer(trailers, func(name, value []byte) {
		c.enc.WriteField(hpack.HeaderField{Name: c.lower(name), Value: string(value)}) //nolint:errcheck
	})
	block, frame := c.hbuf.Bytes(), int(c.peerFrame.Load())
	first := true
	for first || len(block) > 0 {
		n := min(len(block), frame)
		if first {
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:n], EndStream: end, EndHeaders: n == len(block)}) //nolint:errcheck // c.werr
			first = false
		} else {
			c.fr.WriteContinuation(id, n == len(block), block[:n]) //nolint:errcheck
		}
		block = block[n:]
	}
}

// refuse answers stream s with status and a short text, from the serving goroutine: it never waits for
// a window (a body the window does not take is left out).
func (c *h2conn) refuse(s *h2stream, status int) {
	text := fasthttp.StatusMessage(status) + "\n"
	c.mu.Lock()
	fits := !s.reset && int64(len(text)) <= min(c.sendConn, s.sendWin)
	if fits {
		c.sendConn -= int64(len(text))
		s.sendWin -= int64(len(text))
	}
	c.mu.Unlock()
	var hdr fasthttp.ResponseHeader
	hdr.SetContentType("text/plain; charset=utf-8")
	if fits {
		hdr.SetContentLength(len(text))
	}
	c.lockWrite()
	c.writeHeaders(s.id, status, &hdr, nil, !fits)
	if fits {
		c.fr.WriteData(s.id, true, []byte(text)) //nolint:errcheck // c.werr
	}
	c.unlockWrite(false) //nolint:errcheck
}

// refuseAs answers stream s, from its worker, with the front end's refusal of status, counted and
// logged as the front end's refusals are.
func (s *h2stream) refuseAs(status int, reason string) {
	s.c.h.front.Refused(status)
	s.c.logRefusedStream(s, status, http2.ErrCodeNo, reason)
	s.ctx.Error(RefusalBody(status, reason), status)
	s.writeAnswer()
}

// logRefused tells the front end's access log of a stream refused before its handler read it: its
// method and path from f's pseudo-header fields (f may be nil: none known), status (0 when it was reset
// without an answer) or code, since when (zero: refused as it was read).
func (c *h2conn) logRefused(f *http2.MetaHeadersFrame, status int, code http2.ErrCode, reason string, since time.Time) {
	if c.h.front.OnRefused == nil {
		return
	}
	var method, path string
	if f != nil {
		method, path = f.PseudoValue("method"), f.PseudoValue("path")
	}
	r := &RefusedRequest{Client: c.tc.RemoteAddr(), Proto: "h2", Method: method, Path: LoggedPath(path), Status: status, Reason: reason}
	if code != http2.ErrCodeNo {
		r.Reset = code.String()
	}
	if !since.IsZero() {
		r.Took = time.Since(since)
	}
	c.h.front.refusedLog(r)
}

// logRefusedStream is logRefused for a stream whose request was read (its method and path are the
// fasthttp request's), from its worker.
func (c *h2conn) logRefusedStream(s *h2stream, status int, code http2.ErrCode, reason string) {
	if c.h.front.OnRefused == nil {
		return
	}
	r := &RefusedRequest{Client: c.tc.RemoteAddr(), Proto: "h2", Method: string(s.ctx.Method()), Path: string(s.ctx.Path()),
		Status: status, Reason: reason, Took: time.Since(s.ctx.Time())}
	if code != http2.ErrCodeNo {
		r.Reset = code.String()
	}
	c.h.front.refusedLog(r)
}

// h2stream is one stream: its request (the fasthttp context the handler gets, the head written for the
// framer and fasthttp, the body's DATA as it arrives) and what its answer may send.
type h2stream struct {
	c    *h2conn
	id   uint32
	ctx  fasthttp.RequestCtx
	conn h2StreamConn
	body h2body
	head []byte
	br   *bufio.Reader
	rd   bytes.Reader
	cbuf []byte // the cookie fields, joined
	copy []byte // a streamed answer's piece

	headOnly bool  // a HEAD request: the answer has no body
	declLen  int64 // the request's content-length, -1 without one
	chunked  bool  // the body goes upstream chunked (no content-length, or trailers declared)

	// Guarded by c.mu.
	cond      sync.Cond
	buf       []byte // DATA received and not yet read
	off       int
	got       int64         // DATA bytes received
	ended     bool          // END_STREAM received: the request is whole
	reset     bool          // reset by either side, or finished: nothing more is sent or taken
	byClient  bool          // reset by the client
	resetCode http2.ErrCode // the code of our reset (resetLocked)
	recvWin   int64         // what the client may still send on the stream
	unacked   int64         // bytes read (or padding) not yet given back
	sendWin   int64
	trailers  []byte // the request's trailer fields, as HTTP/1.1 lines
	deadline  time.Time
	timer     *time.Timer
	answer    *AnswerStream // a streamed answer running (StreamAnswer), told by wakeLocked when it must end

	run func(*AnswerStream) // the handler's streamed answer (StreamAnswer), run once it returned
}

// wakeLocked wakes the stream's waits (c.mu held) after it was reset or its connection closed or
// drains, and tells a streamed answer running that it must end (AnswerStream.Done).
func (s *h2stream) wakeLocked() {
	s.cond.Broadcast()
	if a := s.answer; a != nil && (s.reset || s.c.closed || s.c.draining) {
		s.answer = nil
		close(a.done)
	}
}

func (s *h2stream) open(c *h2conn, id uint32, ended bool) {
	s.c, s.id = c, id
	s.cond.L = &c.mu
	s.conn = h2StreamConn{Conn: c.tc, s: s}
	s.body.s = s
	s.headOnly, s.declLen, s.chunked = false, -1, false
	s.buf, s.off, s.got, s.ended, s.reset, s.byClient, s.resetCode = s.buf[:0], 0, 0, ended, false, false, http2.ErrCodeNo
	s.recvWin, s.unacked, s.trailers, s.deadline = h2StreamWindow, 0, s.trailers[:0], time.Time{}
	s.answer, s.run = nil, nil
	c.mu.Lock()
	s.sendWin = c.peerWindow
	c.mu.Unlock()
}

// h2body is a stream's request body as the handler reads it: an io.Reader without Close (fasthttp
// closes a body stream it replaces), with the request's trailers.
type h2body struct{ s *h2stream }

func (b *h2body) Read(p []byte) (int, error) { return b.s.read(p) }

// Trailers returns the request's trailer fields once its body was read to the end (HTTP/1.1 lines); a
// body sent upstream with a content-length carries none.
func (b *h2body) Trailers() []byte {
	s := b.s
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if !s.chunked || !s.ended {
		return nil
	}
	return s.trailers
}

// read gives the handler the DATA received, waiting for more while the stream is open (until the
// deadline of read_timeout), and gives the window back as it is read.
//
// A request is forwarded only once it is known well formed (RFC 9113 section 8.1.1): a body with a
// content-length gives its last byte only after the END_STREAM that shows the DATA added up to it, so a
// stream reset for a length that did not agree leaves the upstream request cut, one byte short, never
// complete; a body without one ends (EOF, and the last chunk upstream) only at END_STREAM.
func (s *h2stream) read(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	var silent time.Time // read_timeout: a wait without a deadline of the handler's ends then
	for s.readableLocked() == 0 && !s.ended && !s.reset && !c.closed {
		deadline, now := s.deadline, time.Now()
		if deadline.IsZero() && c.conf.ReadTimeout > 0 {
			if silent.IsZero() {
				silent = now.Add(c.conf.ReadTimeout)
				s.armLocked(c.conf.ReadTimeout)
			}
			deadline = silent
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		s.cond.Wait()
	}
	if s.reset || c.closed || s.off == len(s.buf) {
		ended := s.ended && !s.reset && !c.closed
		c.mu.Unlock()
		if ended {
			return 0, io.EOF
		}
		return 0, errStreamGone
	}
	n := copy(p, s.buf[s.off:s.off+s.readableLocked()])
	if s.off += n; s.off == len(s.buf) {
		s.buf, s.off = s.buf[:0], 0
	}
	s.unacked += int64(n)
	c.recvUnacked += int64(n)
	var inc int64
	if !s.ended && s.unacked >= h2StreamWindow/4 {
		inc, s.unacked = s.unacked, 0
		s.recvWin += inc
	}
	c.mu.Unlock()
	c.giveBack(s.id, inc)
	return n, nil
}

// readableLocked is how many of the buffered DATA bytes the handler may read now (c.mu held): all of
// them once the stream ended, else all but a content-length's last byte (see read).
func (s *h2stream) readableLocked() int {
	n := len(s.buf) - s.off
	if s.declLen >= 0 && !s.ended {
		taken := s.got - int64(n)
		n = int(max(min(int64(n), s.declLen-1-taken), 0))
	}
	return n
}

// whole waits until the request of a stream that declared an empty body ended (its END_STREAM came
// alone, or with trailers): a head that announces no body completes the upstream request as soon as it
// is sent, so it waits for the proof that no DATA comes (read_timeout at most). The error is read's.
func (s *h2stream) whole() error {
	_, err := s.read(nil)
	if err == io.EOF {
		return nil
	}
	return err
}

func (s *h2stream) setReadDeadline(t time.Time) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s.deadline = t
	switch {
	case !t.IsZero():
		s.armLocked(time.Until(t))
	case s.timer != nil:
		s.timer.Stop()
	}
}

// armLocked makes the stream's waits wake after d (c.mu held).
func (s *h2stream) armLocked(d time.Duration) {
	if s.timer != nil {
		s.timer.Reset(d)
		return
	}
	c := s.c
	s.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		s.cond.Broadcast()
		c.mu.Unlock()
	})
}

// reserve waits until the windows let the stream send, and takes up to want bytes of them (at most a
// frame); 0 if the stream or the connection ended, the client left the windows shut for idle_timeout,
// or deadline (if not zero) passed.
func (s *h2stream) reserve(want int, deadline time.Time) int {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var wake *time.Timer
	var until time.Time // the wait's end: idle_timeout from its start, or deadline if sooner
	for !s.reset && !c.closed && (c.sendConn <= 0 || s.sendWin <= 0) {
		now := time.Now()
		if wake == nil {
			if t := c.conf.IdleTimeout; t > 0 {
				until = now.Add(t)
			}
			if !deadline.IsZero() && (until.IsZero() || deadline.Before(until)) {
				until = deadline
			}
			if !until.IsZero() {
				wake = time.AfterFunc(until.Sub(now), func() {
					c.mu.Lock()
					s.cond.Broadcast()
					c.mu.Unlock()
				})
				defer wake.Stop()
			}
		}
		if !until.IsZero() && !now.Before(until) {
			return 0
		}
		s.cond.Wait()
	}
	if s.reset || c.closed {
		return 0
	}
	n := min(int64(want), c.sendConn, s.sendWin, c.peerFrame.Load())
	c.sendConn -= n
	s.sendWin -= n
	return int(n)
}

// gone reports whether nothing more may be sent on the stream.
func (s *h2stream) gone() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.reset || s.c.closed
}

// writeAnswer sends the handler's answer: HEADERS, then the body in DATA frames as the windows allow
// (streamed as it comes when it is a stream), then the trailers if the answer had any; END_STREAM on
// the last. An answer whose body breaks is reset (INTERNAL_ERROR): the client does not take a
// truncated body for a whole one.
func (s *h2stream) writeAnswer() {
	c, resp := s.c, &s.ctx.Response
	defer resp.CloseBodyStream()              //nolint:errcheck // gives back the upstream connection it holds
	resp.Header.SetNoDefaultContentType(true) // again: a handler's Reset of the answer cleared it (see readRequest)
	status := resp.StatusCode()
	noBody := s.headOnly || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified || status < 200
	if !resp.IsBodyStream() || noBody {
		var body []byte
		if !noBody {
			body = resp.Body()
		}
		s.send(status, &resp.Header, body, true, false)
		return
	}
	if s.copy == nil {
		s.copy = make([]byte, h2CopyBuffer)
	}
	src, size, sent, headed := resp.BodyStream(), int64(resp.Header.ContentLength()), int64(0), false
	for {
		n, err := src.Read(s.copy)
		sent += int64(n)
		if err != nil && err != io.EOF || err == io.EOF && size >= 0 && sent < size {
			s.c.resetStream(s, s.id, http2.ErrCodeInternal)
			return
		}
		last := err == io.EOF || size >= 0 && sent >= size
		var trailers []byte
		if t, ok := src.(trailered); ok && err == io.EOF {
			trailers = t.Trailers()
		}
		hdr := &resp.Header
		if headed {
			hdr = nil
		}
		if !s.send(status, hdr, s.copy[:n], last && len(trailers) == 0, !last) {
			return
		}
		headed = true
		if last {
			if len(trailers) > 0 && !s.gone() {
				c.lockWrite()
				c.writeHeaders(s.id, 0, nil, trailers, true)
				c.unlockWrite(false) //nolint:errcheck
			}
			return
		}
	}
}

// send writes the answer's HEADERS (hdr, unless nil: sent already) and data, with END_STREAM after
// them if end; flush sends them at once. false if the stream is gone.
func (s *h2stream) send(status int, hdr *fasthttp.ResponseHeader, data []byte, end, flush bool) bool {
	c := s.c
	for {
		n := 0
		if len(data) > 0 {
			if n = s.reserve(len(data), time.Time{}); n == 0 {
				return false
			}
		} else if s.gone() {
			return false
		}
		c.lockWrite()
		switch {
		case hdr != nil:
			c.writeHeaders(s.id, status, hdr, nil, end && len(data) == 0)
			hdr = nil
			if n > 0 {
				c.fr.WriteData(s.id, end && n == len(data), data[:n]) //nolint:errcheck // c.werr
			}
		case n > 0 || end:
			c.fr.WriteData(s.id, end && n == len(data), data[:n]) //nolint:errcheck
		}
		data = data[n:]
		if c.unlockWrite(flush && len(data) == 0) != nil {
			return false
		}
		if len(data) == 0 {
			return true
		}
	}
}

// readRequest checks the request of a new stream (RFC 9113 section 8) and makes it the fasthttp
// request of s: a status to answer instead (the framer's refusals, a head over max_header_size), or a
// stream error code (ErrCodeNo if none), with the reason.
func (s *h2stream) readRequest(f *http2.MetaHeadersFrame) (status int, reason string, code http2.ErrCode) {
	c := s.c
	var method, scheme, path, authority string
	hasAuthority := false
	for _, hf := range f.PseudoFields() { // x/net's Framer let each through once, first, and known
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":path":
			path = hf.Value
		case ":authority":
			authority, hasAuthority = hf.Value, true
		default: // :protocol: extended CONNECT is not offered (RFC 8441)
			return 0, "an unknown pseudo-header field", http2.ErrCodeProtocol
		}
	}
	switch {
	case method == "":
		return 0, "no :method", http2.ErrCodeProtocol
	case method == "CONNECT": // refused by the framer (405), like an HTTP/1.1 CONNECT
		if path != "" || scheme != "" || authority == "" {
			return 0, "a CONNECT's pseudo-header fields", http2.ErrCodeProtocol
		}
		path = authority
	case path == "" || scheme == "":
		return 0, "no :path or :scheme", http2.ErrCodeProtocol
	case path[0] != '/' && (path != "*" || method != "OPTIONS"):
		// Origin form only (RFC 9113 section 8.3.1): an absolute form would name a second authority,
		// which the HTTP/1.1 request line would carry past :authority to the server.
		return 0, ":path not in origin form", http2.ErrCodeProtocol
	}
	if hasAuthority && !ValidAuthority(authority) {
		return 0, "invalid :authority", http2.ErrCodeProtocol
	}
	host := authority
	s.cbuf = s.cbuf[:0]
	declared := false
	for _, hf := range f.RegularFields() {
		if f := httpfield.Of(hf.Name); f == httpfield.TE {
			if hf.Value != "trailers" {
				return 0, "TE other than trailers", errConnectionField
			}
			continue
		} else if f.ConnectionSpecific() {
			return 0, "a connection-specific field", errConnectionField
		}
		switch hf.Name {
		case "host":
			if !ValidAuthority(hf.Value) {
				return 0, "invalid Host", http2.ErrCodeProtocol
			}
			if host == "" {
				host = hf.Value
			} else if hf.Value != host {
				return 0, "two authorities", http2.ErrCodeProtocol // two authorities (RFC 9113 section 8.3.1)
			}
		case "content-length":
			n, err := strconv.ParseInt(hf.Value, 10, 64)
			if err != nil || n < 0 || hf.Value[0] == '+' || s.declLen >= 0 && n != s.declLen {
				return 0, "invalid content-length", http2.ErrCodeProtocol
			}
			s.declLen = n
		case "cookie":
			if len(s.cbuf) > 0 {
				s.cbuf = append(s.cbuf, "; "...)
			}
			s.cbuf = append(s.cbuf, hf.Value...)
		case "trailer":
			declared = true
		}
	}
	body := !f.StreamEnded()
	if !body && s.declLen > 0 {
		return 0, "a content-length and no DATA", http2.ErrCodeProtocol // a content-length and no DATA
	}
	s.chunked = body && (s.declLen < 0 || declared)
	s.headOnly = method == "HEAD"

	// A head over max_header_size as HTTP/1.1 would count it (the request line, "Name: value" lines) is
	// refused before it is written out (the framer would refuse it too, see below).
	size := len(method) + len(path) + len(" HTTP/1.1\r\n\r\n") + len("Host: \r\n") + len(host)
	for _, hf := range f.RegularFields() {
		size += len(hf.Name) + len(": \r\n") + len(hf.Value)
	}
	if size > c.lim.MaxHeader {
		c.h.bigHeads.Add(1)
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "request header fields too large", http2.ErrCodeNo
	}

	// The HTTP/1.1 head, from the validated fields only.
	h := append(s.head[:0], method...)
	h = append(h, ' ')
	h = append(h, path...)
	h = append(h, " HTTP/1.1\r\n"...)
	if host != "" {
		h = appendField(h, "Host", host)
	}
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "host", "content-length", "cookie", "te":
			continue // written here, or hop-by-hop (TE: trailers)
		}
		h = appendField(h, hf.Name, hf.Value)
	}
	if len(s.cbuf) > 0 {
		h = appendField(h, "Cookie", s.cbuf)
	}
	switch {
	case s.chunked:
		h = append(h, "Transfer-Encoding: chunked\r\n"...)
	case body || s.declLen == 0:
		h = append(h, "Content-Length: "...)
		h = strconv.AppendInt(h, max(s.declLen, 0), 10)
		h = append(h, "\r\n"...)
	}
	h = append(h, "\r\n"...)
	s.head = h
	if _, err := Check(c.lim, h); err != nil {
		status, reason := fasthttp.StatusBadRequest, "malformed request"
		if r, ok := err.(*Refusal); ok {
			status, reason = r.Status, r.Reason
		}
		if status == fasthttp.StatusRequestHeaderFieldsTooLarge {
			c.h.bigHeads.Add(1)
		} else {
			c.h.badHeads.Add(1)
		}
		return status, reason, http2.ErrCodeNo
	}
	ctx := &s.ctx
	ctx.Init2(&s.conn, c.h.front.Errors.Logger(), true)
	// No Content-Type of fasthttp's own on a relayed answer, as on the front end's HTTP/1.1 server (lb
	// sets NoDefaultContentType): its default would be serialized into the answer's head as a field
	// (addDate in lb reads the head back; writeHeaders walks the fields).
	ctx.Response.Header.SetNoDefaultContentType(true)
	if s.br == nil || s.br.Size() < len(h) { // fasthttp reads a head only whole in its buffer
		s.br = bufio.NewReaderSize(nil, max(4096, len(h)))
	}
	s.rd.Reset(h)
	s.br.Reset(&s.rd)
	if err := ctx.Request.Header.Read(s.br); err != nil {
		c.h.badHeads.Add(1)
		return fasthttp.StatusBadRequest, "malformed request", http2.ErrCodeNo
	}
	if body {
		size := s.declLen
		if s.chunked {
			size = -1
		}
		ctx.Request.SetBodyStream(&s.body, int(size))
	}
	return 0, "", http2.ErrCodeNo
}

// appendField appends the HTTP/1.1 field line "Name: value", the name in its usual case (an HTTP/2
// name is lowercase; HTTP/1.1 servers read names in any case, and some applications expect these).
func appendField[V string | []byte](dst []byte, name string, value V) []byte {
	up := true
	for i := 0; i < len(name); i++ {
		b := name[i]
		if up && 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		up = b == '-'
		dst = append(dst, b)
	}
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}
