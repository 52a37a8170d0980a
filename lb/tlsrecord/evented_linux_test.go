package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"testing"
	"time"

	"github.com/fairlead/fairlead/lb/nbio"
)

// TestEvented runs a Conn over an nbio.TCPConn in evented mode, as the tunnel engine does: an empty
// socket answers nbio.ErrWouldBlock, which Read returns keeping a partial record; a KeyUpdate the
// peer requests is answered from within Read through the evented socket.
func TestEvented(t *testing.T) {
	for _, sc := range []struct{ version, suite uint16 }{allSuites[0], allSuites[5]} {
		t.Run(tls.CipherSuiteName(sc.suite), func(t *testing.T) {
			cliRaw, srvRaw := tcpPair(t)
			cs, ss := states(t, sc.version, sc.suite)
			nb, err := nbio.NewTCPConn(srvRaw)
			if err != nil {
				t.Fatal(err)
			}
			nb.SetEvented(true)
			ours, err := New(nb, ss)
			if err != nil {
				t.Fatal(err)
			}
			// The peer: its records are sealed into wire, then written to the socket by hand.
			var wire bytes.Buffer
			seal, err := New(&wire, cs)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 32<<10)
			if n, err := ours.Read(b); n != 0 || err != nbio.ErrWouldBlock || ours.Buffered() != 0 {
				t.Fatalf("read %d, %v on an empty socket", n, err)
			}
			// readSome reads until data comes, waiting for the socket.
			readSome := func() []byte {
				t.Helper()
				for range 5000 {
					n, err := ours.Read(b)
					if n > 0 {
						return b[:n]
					}
					if err != nbio.ErrWouldBlock {
						t.Fatalf("read %v", err)
					}
					time.Sleep(time.Millisecond)
				}
				t.Fatal("no data came")
				return nil
			}

			msg := payload(1000, 5)
			if _, err := seal.Write(msg); err != nil {
				t.Fatal(err)
			}
			rec := wire.Bytes()
			if _, err := cliRaw.Write(rec[:500]); err != nil {
				t.Fatal(err)
			}
			for i := 0; ours.Buffered() < 500; i++ {
				if n, err := ours.Read(b); n != 0 || err != nbio.ErrWouldBlock {
					t.Fatalf("read %d, %v with half a record", n, err)
				}
				if i == 5000 {
					t.Fatal("the half record did not come")
				}
				time.Sleep(time.Millisecond)
			}
			if ours.HasRecord() {
				t.Fatal("half a record counted as whole")
			}
			if _, err := cliRaw.Write(rec[500:]); err != nil {
				t.Fatal(err)
			}
			if got := readSome(); !bytes.Equal(got, msg) {
				t.Fatal("the data differ")
			}
			if ours.HasRecord() || ours.Buffered() != 0 {
				t.Fatal("bytes left")
			}
			wire.Reset()

			if sc.version == tls.VersionTLS13 {
				if err := seal.KeyUpdate(true); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := seal.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := cliRaw.Write(wire.Bytes()); err != nil {
				t.Fatal(err)
			}
			if got := readSome(); !bytes.Equal(got, msg) {
				t.Fatal("the data differ after a KeyUpdate")
			}
			if nb.Blocked() {
				t.Fatal("the evented socket did not take the answer")
			}
			// The peer's reading end takes our answering KeyUpdate, then our data under the new key.
			peer, err := New(cliRaw, cs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ours.Write(msg); err != nil {
				t.Fatal(err)
			}
			if got, _ := readN(t, peer, len(msg), MaxRecord); !bytes.Equal(got, msg) {
				t.Fatal("the peer read other data")
			}
			if want := sc.version == tls.VersionTLS13; (peer.keyUpdateHandled == 1) != want {
				t.Fatalf("the peer took %d KeyUpdates", peer.keyUpdateHandled)
			}
		})
	}
}
