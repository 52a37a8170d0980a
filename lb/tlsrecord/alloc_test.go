package tlsrecord

import (
	"bytes"
	"crypto/tls"
	"io"
	"testing"
)

// TestAllocs: Write and Read allocate nothing in steady state, with large and small read buffers.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own (and sync.Pool drops items under it)")
	}
	for _, sc := range allSuites {
		t.Run(tls.CipherSuiteName(sc.suite), func(t *testing.T) {
			cli, srv, _, _ := pair(t, sc.version, sc.suite)
			msg := payload(1024, 1)
			big, small := make([]byte, MaxRecord), make([]byte, 300)
			var failed error
			step := func(buf []byte) {
				if _, err := cli.Write(msg); err != nil {
					failed = err
					return
				}
				for got := 0; got < len(msg); {
					n, err := srv.Read(buf)
					if err != nil {
						failed = err
						return
					}
					got += n
				}
			}
			for _, buf := range [][]byte{big, small} {
				step(buf) // warm the pools
				if a := testing.AllocsPerRun(200, func() { step(buf) }); a != 0 || failed != nil {
					t.Fatalf("buffer of %d: %v allocations per Write+Read, %v", len(buf), a, failed)
				}
			}
		})
	}
}

// BenchmarkWriteRead1K writes 1 KiB messages on one end and reads them on the other, with Conns and
// with crypto/tls (TLS 1.3, AES-128-GCM): over TCP on 127.0.0.1, and in memory (after a handshake
// over TCP, crypto/tls's connections are switched to buffers), which leaves the record layers' own
// cost.
func BenchmarkWriteRead1K(b *testing.B) {
	msg := payload(1024, 1)
	run := func(b *testing.B, w io.Writer, r io.Reader, buf []byte) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := w.Write(msg); err != nil {
				b.Fatal(err)
			}
			for got := 0; got < len(msg); {
				n, err := r.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
		}
	}
	b.Run("tcp/tlsrecord", func(b *testing.B) {
		cli, srv, _, _ := pair(b, tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256)
		run(b, cli, srv, make([]byte, MaxRecord))
	})
	b.Run("tcp/crypto-tls", func(b *testing.B) {
		s := handshake(b, tls.VersionTLS13, 0, false)
		if s.suite != tls.TLS_AES_128_GCM_SHA256 {
			b.Skipf("crypto/tls picked %s", tls.CipherSuiteName(s.suite))
		}
		run(b, s.cli, s.srv, make([]byte, MaxRecord))
	})
	b.Run("mem/tlsrecord", func(b *testing.B) {
		cs, ss := states(b, tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256)
		var wire bytes.Buffer
		cli, err1 := New(&wire, cs)
		srv, err2 := New(&wire, ss)
		if err1 != nil || err2 != nil {
			b.Fatal(err1, err2)
		}
		run(b, cli, srv, make([]byte, MaxRecord))
	})
	b.Run("mem/crypto-tls", func(b *testing.B) {
		s := handshake(b, tls.VersionTLS13, 0, false)
		if s.suite != tls.TLS_AES_128_GCM_SHA256 {
			b.Skipf("crypto/tls picked %s", tls.CipherSuiteName(s.suite))
		}
		var wire bytes.Buffer
		s.cliWrap.mu.Lock()
		s.cliWrap.mem = &wire
		s.cliWrap.mu.Unlock()
		s.srvWrap.mu.Lock()
		s.srvWrap.mem = &wire
		s.srvWrap.mu.Unlock()
		run(b, s.cli, s.srv, make([]byte, MaxRecord))
	})
}
