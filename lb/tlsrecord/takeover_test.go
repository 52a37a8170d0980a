package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"io"
	"testing"

	"github.com/fairlead/fairlead/lb/nbio"
)

// TakeOver takes a crypto/tls server's session over from what its nbio connection captured, and the
// peer goes on with it unaware; unless a KeyUpdate went by while crypto/tls had the session (it logs no
// new secret): then crypto/tls keeps it, and still works. The client here is this package's Conn,
// built from the client's key log, so that it can send the KeyUpdate crypto/tls never starts.
func TestTakeOverOfACapturedServerAndAKeyUpdateThatKeepsItWithCryptoTLS(t *testing.T) {
	for _, update := range []bool{false, true} {
		cr, sr := tcpPair(t)
		nb, err := nbio.NewTCPConn(sr)
		if err != nil {
			t.Fatal(err)
		}
		nb.CaptureTLS(true)
		srv := tls.Server(nb, nb.TLSSession().Config(&tls.Config{Certificates: []tls.Certificate{certs()[0]}}, nil, nil))
		log := &keyLog{}
		cli := tls.Client(cr, &tls.Config{InsecureSkipVerify: true, KeyLogWriter: log}) //nolint:gosec // a test's own certificate
		errc := make(chan error, 1)
		go func() { errc <- srv.Handshake() }()
		if err := cli.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		nb.HandshakeDone()
		// The client end goes on as a Conn (no ticket was sent: Go's client without a session cache
		// offers no resumption).
		st, err := TLS13(cli.ConnectionState().CipherSuite, true, log.secrets["SERVER_TRAFFIC_SECRET_0"], log.secrets["CLIENT_TRAFFIC_SECRET_0"], 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := New(cr, st)
		if err != nil {
			t.Fatal(err)
		}
		if update {
			if err := ours.KeyUpdate(true); err != nil {
				t.Fatal(err)
			}
		}
		ours.Write([]byte("hello!")) //nolint:errcheck // 6 bytes: a 5-byte record would look like a KeyUpdate
		buf := make([]byte, MaxRecord)
		if n, err := io.ReadAtLeast(srv, buf, 6); err != nil || string(buf[:n]) != "hello!" {
			t.Fatalf("update %v: the server read %q, %v", update, buf[:n], err)
		}
		got, left := TakeOver(srv, nb, buf)
		if len(left) != 0 {
			t.Fatalf("update %v: %q left in crypto/tls", update, left)
		}
		var server io.ReadWriter = srv
		if got == nil {
			if !update {
				t.Fatal("a session with no KeyUpdate was not taken over")
			}
		} else {
			if update {
				t.Fatal("a session whose secrets a KeyUpdate replaced was taken over")
			}
			server = got
		}
		// Both ways from here, through whichever end has the session.
		if _, err := server.Write([]byte("back")); err != nil {
			t.Fatal(err)
		}
		n, err := io.ReadAtLeast(ours, buf, 4)
		if err != nil || !bytes.Equal(buf[:n], []byte("back")) {
			t.Fatalf("update %v: the client read %q, %v", update, buf[:n], err)
		}
		ours.Write([]byte("more")) //nolint:errcheck
		if n, err := io.ReadAtLeast(server, buf, 4); err != nil || string(buf[:n]) != "more" {
			t.Fatalf("update %v: the server read %q, %v", update, buf[:n], err)
		}
	}
}
