//go:build !linux || nbio_portable

package nbio

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// Tests of the portable package (Windows, macOS, the BSDs; Linux with -tags nbio_portable). Conn's
// semantics are proven by nbio_test.go, which runs on both.

// record is a TLS record header (type 23, version 3.3) and n bytes of fragment.
func record(n int) []byte { return append([]byte{23, 3, 3, byte(n >> 8), byte(n)}, random(n)...) }

// TestATCPConnReadsAndWritesThroughItsTCPConnAndCountsTLSRecords proves the wrapper the front end and
// the dialer put over every socket: bytes both ways exact, whole TLS records counted as they are read
// (reads of 3 bytes: headers and fragments split), Unwrap giving the socket back.
func TestATCPConnReadsAndWritesThroughItsTCPConnAndCountsTLSRecords(t *testing.T) {
	nc, peer := pair(t)
	c, err := NewTCPConn(nc.TCP())
	if err != nil {
		t.Fatal(err)
	}
	if Unwrap(c) != nc.TCP() || Unwrap(peer) != peer {
		t.Fatal("Unwrap does not give the socket back")
	}
	c.CountTLSRecords()
	stream := append(append(record(0), record(300)...), record(16<<10)...)
	if _, err := peer.Write(stream); err != nil {
		t.Fatal(err)
	}
	expectRead(t, c, stream, 3)
	if got := c.TLSRecords(); got != 3 {
		t.Fatalf("TLSRecords %d, want 3", got)
	}
	if _, err := c.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	expectRead(t, peer, []byte("back"), 4)
}

// TestConnWriteThenReadPastDeadlineWritesFirstThenFailsTheRead proves the one difference from Linux's
// WriteThenRead: under a read deadline already passed, first is written (the peer gets it), and the read
// fails with the timeout (werr nil).
func TestConnWriteThenReadPastDeadlineWritesFirstThenFailsTheRead(t *testing.T) {
	c, peer := pair(t)
	if err := c.TCP().SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	n, werr, rerr := c.WriteThenRead([]byte("sent"), make([]byte, 8))
	if n != 0 || werr != nil {
		t.Fatalf("WriteThenRead: %d, %v; want 0, nil", n, werr)
	}
	checkTimeout(t, rerr)
	c.TCP().Close()
	got, err := io.ReadAll(peer)
	if err != nil || !bytes.Equal(got, []byte("sent")) {
		t.Fatalf("the peer read %q, %v; want \"sent\", then EOF", got, err)
	}
}
