package nbio

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/bench/sim"
)

// keyLog keeps a tls.Config's key log lines.
type keyLog struct{ bytes.Buffer }

// secret returns the secret a key log line with label gives, or nil.
func (k *keyLog) secret(label string) []byte {
	for _, line := range strings.Split(k.String(), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == label {
			b, _ := hex.DecodeString(f[2])
			return b
		}
	}
	return nil
}

func TestCaptureTLSLearnsTheSecretsTicketsAndRecordsOfTheSessionOverIt(t *testing.T) {
	ca, err := sim.NewCA("nbio test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		nc, peer := pair(t)
		c, err := NewTCPConn(nc.TCP())
		if err != nil {
			t.Fatal(err)
		}
		c.CaptureTLS(true)
		base := &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, MaxVersion: v}
		srv := tls.Server(c, c.TLSSession().Config(base, nil, nil))
		var log keyLog
		cli := tls.Client(peer, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", KeyLogWriter: &log,
			ClientSessionCache: tls.NewLRUClientSessionCache(1)}) // so that a TLS 1.3 server sends a ticket
		done := make(chan error, 1)
		go func() {
			err := cli.Handshake()
			for _, m := range []string{"one", "two", "three"} { // sent at once: the server's handshake must not read them
				if err == nil {
					_, err = cli.Write([]byte(m))
				}
			}
			done <- err
		}()
		if err := srv.Handshake(); err != nil {
			t.Fatal(err)
		}
		c.HandshakeDone()
		if err := await(t, done); err != nil {
			t.Fatal(err)
		}
		got, ok := c.TLSCaptured()
		if !ok || got.Read != 0 || got.Written != 0 || !got.Whole {
			t.Fatalf("TLS %#x: right after the handshake: %+v, %v; want no record since it, whole", v, got.Read, ok)
		}
		buf := make([]byte, 1<<15)
		var read []byte
		for len(read) < len("onetwothree") {
			n, err := srv.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			read = append(read, buf[:n]...)
		}
		srv.Write([]byte("a"))
		srv.Write([]byte("b"))
		got, _ = c.TLSCaptured()
		if got.Read != 3 || got.Written != 2 || !got.Whole {
			t.Fatalf("TLS %#x: read %d records and wrote %d since the handshake (whole %v), want 3 and 2", v, got.Read, got.Written, got.Whole)
		}
		switch v {
		case tls.VersionTLS13:
			if !bytes.Equal(got.ClientSecret, log.secret("CLIENT_TRAFFIC_SECRET_0")) || !bytes.Equal(got.ServerSecret, log.secret("SERVER_TRAFFIC_SECRET_0")) || len(got.ClientSecret) == 0 {
				t.Fatal("TLS 1.3: the traffic secrets differ from the client's key log")
			}
			if got.Tickets != 1 {
				t.Fatalf("TLS 1.3: %d tickets counted, want the 1 Go's server sends", got.Tickets)
			}
		case tls.VersionTLS12:
			if !bytes.Equal(got.Master, log.secret("CLIENT_RANDOM")) || len(got.Master) != 48 || len(got.ClientRandom) != 32 || len(got.ServerRandom) != 32 {
				t.Fatalf("TLS 1.2: master %d bytes (equal to the client's: %v), randoms %d and %d bytes", len(got.Master), bytes.Equal(got.Master, log.secret("CLIENT_RANDOM")), len(got.ClientRandom), len(got.ServerRandom))
			}
		}
	}
}
