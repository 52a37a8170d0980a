// Package frontendtest holds what the front end's tests (lb/frontend, against a trivial handler) and
// lb's whole-path tests share: raw client connections that send what a test wants, valid or not, and
// read what the server answers: HTTP/1.1 bytes exactly as written (raw.go), HTTP/2 frames (h2.go).
package frontendtest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Conn is a client HTTP/2 connection over TLS. Its reads and writes are bounded by a 10 s deadline,
// a hang guard.
type H2Conn struct {
	t    testing.TB
	Conn *tls.Conn
	Fr   *http2.Framer // to write frames directly
	enc  *hpack.Encoder
	dec  *hpack.Decoder
	hbuf bytes.Buffer
	// lastFields are the fields of the last header block the server sent (decoded by Next).
	lastFields []hpack.HeaderField
}

// DialH2 connects to addr with cfg offering h2 only, sends the client preface and an empty SETTINGS.
// The connection closes with the test.
func DialH2(t testing.TB, addr string, cfg *tls.Config) *H2Conn {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	// The dial and the handshake within the 10 s every later read and write gets: a handshake under
	// make test's load (-race, two cores, every package at once) once took over 3 s.
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &H2Conn{t: t, Conn: conn, Fr: http2.NewFramer(conn, conn), dec: hpack.NewDecoder(4096, nil)}
	r.enc = hpack.NewEncoder(&r.hbuf)
	if err := r.Fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return r
}

// Block encodes fields (pairs of name, value) as one header block, with the connection's encoder.
func (r *H2Conn) Block(fields ...string) []byte {
	r.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		r.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}) //nolint:errcheck
	}
	return append([]byte(nil), r.hbuf.Bytes()...)
}

// Headers sends one HEADERS frame on stream with the fields as given (pairs of name, value), in order.
func (r *H2Conn) Headers(stream uint32, endStream bool, fields ...string) {
	r.t.Helper()
	if err := r.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: r.Block(fields...), EndStream: endStream, EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

// HeadersSplit sends a header block as HEADERS and as many CONTINUATION frames as 16 KiB frames need.
func (r *H2Conn) HeadersSplit(stream uint32, endStream bool, block []byte) {
	r.t.Helper()
	const frame = 16384
	n := min(len(block), frame)
	if err := r.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block[:n], EndStream: endStream, EndHeaders: n == len(block)}); err != nil {
		r.t.Fatal(err)
	}
	for block = block[n:]; len(block) > 0; block = block[n:] {
		n = min(len(block), frame)
		if err := r.Fr.WriteContinuation(stream, n == len(block), block[:n]); err != nil {
			r.t.Fatal(err)
		}
	}
}

// InOneWrite sends the frames that frames writes in one write: the server gets them together, as a
// client that pipelines them sends them.
func (r *H2Conn) InOneWrite(frames func(fr *http2.Framer)) {
	r.t.Helper()
	var b bytes.Buffer
	frames(http2.NewFramer(&b, nil))
	if _, err := r.Conn.Write(b.Bytes()); err != nil {
		r.t.Fatal(err)
	}
}

// Next reads the server's frames until want says a frame is the one: it returns it, or nil once the
// connection ended (GOAWAY frames are passed to want too). Every header block is decoded, to follow
// the server's dynamic table.
func (r *H2Conn) Next(want func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	for {
		f, err := r.Fr.ReadFrame()
		if err != nil {
			return nil
		}
		if h, ok := f.(*http2.HeadersFrame); ok {
			fields, err := r.dec.DecodeFull(h.HeaderBlockFragment())
			if err != nil {
				r.t.Fatalf("the server's header block: %v", err)
			}
			r.lastFields = fields
		}
		if want(f) {
			return f
		}
	}
}

// LastFields are the fields of the last header block the server sent (read by Next).
func (r *H2Conn) LastFields() []hpack.HeaderField { return r.lastFields }

// H2Result is how a stream ended: the answer's status and fields (in order, :status first) and body,
// or the code of the stream's reset, or Closed when the connection ended first.
type H2Result struct {
	Status string
	Fields []hpack.HeaderField
	Body   string
	Reset  string
	Closed bool
}

func (r H2Result) String() string {
	switch {
	case r.Closed:
		return "connection closed"
	case r.Reset != "":
		return "RST_STREAM " + r.Reset
	}
	return fmt.Sprintf("%s %v %q", r.Status, r.Fields, r.Body)
}

// Field returns the value of the answer's field name ("" if none).
func (r H2Result) Field(name string) string {
	for _, f := range r.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// Result reads frames until stream ended (its answer whole, or reset) or the connection ended.
func (r *H2Conn) Result(stream uint32) H2Result {
	r.t.Helper()
	var res H2Result
	var body strings.Builder
	f := r.Next(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			res.Closed = true
			return true
		case *http2.RSTStreamFrame:
			if f.StreamID == stream {
				res.Reset = f.ErrCode.String()
				return true
			}
		case *http2.HeadersFrame:
			if f.StreamID != stream {
				return false
			}
			if res.Status == "" {
				res.Fields = r.lastFields
				res.Status = res.Field(":status")
			}
			return f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID != stream {
				return false
			}
			body.Write(f.Data())
			return f.StreamEnded()
		}
		return false
	})
	if f == nil {
		res.Closed = true
	}
	res.Body = body.String()
	return res
}

// Outcome reads frames until stream ends: "reset" (RST_STREAM), "closed" (GOAWAY or the connection
// ended), or the status of the answer.
func (r *H2Conn) Outcome(stream uint32) string {
	r.t.Helper()
	res := r.Result(stream)
	switch {
	case res.Closed:
		return "closed"
	case res.Reset != "":
		return "reset"
	}
	return res.Status
}

// WatchClose reads the server's frames from now on until it closes the connection: the channel is
// closed then.
func (r *H2Conn) WatchClose() <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for {
			if _, err := r.Fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	return closed
}

// WaitClosed waits for WatchClose's channel; what is what the test did to deserve the close.
func (r *H2Conn) WaitClosed(closed <-chan struct{}, what string) {
	r.t.Helper()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // a hang guard
		r.t.Fatalf("the connection is still open after %s", what)
	}
}

// GoAwayCode reads until the server's GOAWAY and returns its code ("closed" if none came before the end).
func (r *H2Conn) GoAwayCode() string {
	r.t.Helper()
	if f := r.Next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }); f != nil {
		return f.(*http2.GoAwayFrame).ErrCode.String()
	}
	return "closed"
}

// ResetCode reads until the server resets stream and returns the code ("closed" if the connection ended).
func (r *H2Conn) ResetCode(stream uint32) string {
	r.t.Helper()
	f := r.Next(func(f http2.Frame) bool {
		rst, ok := f.(*http2.RSTStreamFrame)
		_, away := f.(*http2.GoAwayFrame)
		return ok && rst.StreamID == stream || away
	})
	if rst, ok := f.(*http2.RSTStreamFrame); ok {
		return rst.ErrCode.String()
	}
	return "closed"
}
