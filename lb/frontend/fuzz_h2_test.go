package frontend

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzHTTP2Frames sends arbitrary bytes as the frames of an HTTP/2 connection (after the client preface
// and an empty SETTINGS) to the front end's TLS listener (a trivial handler behind it). It never crashes
// and keeps serving HTTP/2: a new connection's GET is answered 200.
func FuzzHTTP2Frames(f *testing.F) {
	for _, s := range h2FuzzSeeds() {
		f.Add(s)
	}
	tf := startFront(f, frontOptions{})
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := tf.clientTLS()
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", tf.tlsAddr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck
		io.WriteString(conn, http2.ClientPreface)         //nolint:errcheck
		http2.NewFramer(conn, nil).WriteSettings()        //nolint:errcheck
		conn.Write(in)                                    //nolint:errcheck // the front end may close early
		conn.CloseWrite()                                 //nolint:errcheck
		io.Copy(io.Discard, conn)                         //nolint:errcheck // until the front end closes or the deadline
		conn.Close()

		resp, err := tf.h2Client(t).Get("https://" + tf.tlsAddr + "/Things")
		if err != nil {
			t.Fatalf("after %q: %v", in, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
			t.Fatalf("after %q: %s %d", in, resp.Proto, resp.StatusCode)
		}
	})
}

// h2FuzzSeeds are frame sequences of each kind, well formed and not: a GET, a POST with DATA and
// trailers, CONTINUATION, PING, WINDOW_UPDATE, PRIORITY, RST_STREAM, GOAWAY, and broken lengths.
func h2FuzzSeeds() [][]byte {
	block := func(fields ...string) []byte {
		var b bytes.Buffer
		enc := hpack.NewEncoder(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}) //nolint:errcheck
		}
		return b.Bytes()
	}
	get := block(":method", "GET", ":scheme", "https", ":authority", "x", ":path", "/Thingworx/Things")
	post := block(":method", "POST", ":scheme", "https", ":authority", "x", ":path", "/up", "content-length", "4", "trailer", "x-sum")
	seq := func(write func(fr *http2.Framer)) []byte {
		var b bytes.Buffer
		write(http2.NewFramer(&b, nil))
		return b.Bytes()
	}
	return [][]byte{
		seq(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get, EndStream: true, EndHeaders: true}) //nolint:errcheck
		}),
		seq(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: post, EndHeaders: true})                                 //nolint:errcheck
			fr.WriteData(1, false, []byte("body"))                                                                                       //nolint:errcheck
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("x-sum", "1"), EndStream: true, EndHeaders: true}) //nolint:errcheck
		}),
		seq(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: get[:5], EndStream: true}) //nolint:errcheck
			fr.WriteContinuation(3, true, get[5:])                                                         //nolint:errcheck
		}),
		seq(func(fr *http2.Framer) {
			fr.WritePing(false, [8]byte{1})                                                             //nolint:errcheck
			fr.WriteWindowUpdate(0, 1000)                                                               //nolint:errcheck
			fr.WritePriority(5, http2.PriorityParam{StreamDep: 5})                                      //nolint:errcheck
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: get, EndHeaders: true}) //nolint:errcheck
			fr.WriteRSTStream(5, http2.ErrCodeCancel)                                                   //nolint:errcheck
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)                                                     //nolint:errcheck
		}),
		{0, 0, 4, 0, 0, 0, 0, 0, 0},                         // a SETTINGS frame whose length says 4 bytes that never come
		{0, 0, 0, 1, 5, 0, 0, 0, 1},                         // an empty HEADERS block
		{0, 0, 3, 3, 0, 0, 0, 0, 1, 0, 0, 0},                // RST_STREAM of the wrong length
		{0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1},                // a DATA frame of 16 MiB
		{0, 0, 1, 0, 8, 0, 0, 0, 1, 200},                    // DATA padded beyond its length
		{0, 0, 4, 8, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}, // a connection window past 2^31-1
	}
}
