package tunnel

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// 64-byte round trips through one tunnel: client -> relay -> echoing upstream -> relay -> client.
// Each op is two relayed messages. allocs/op counts the whole process (the test's ends use
// fixed buffers and allocate nothing).
func BenchmarkRoundTrip64(b *testing.B) {
	e := newEnv(b, Options{})
	client, up, _ := e.open("g", nil, nil, nil)
	go echo(up)
	benchRoundTrip(b, client)
}

// The same without an engine: the floor set by the loopback sockets themselves.
func BenchmarkRoundTrip64Direct(b *testing.B) {
	ln := listen(b)
	defer ln.Close()
	client, up := pair(b, ln)
	defer client.Close()
	defer up.Close()
	go echo(up)
	benchRoundTrip(b, client)
}

// The same through the classic goroutine-per-direction io.Copy relay, for comparison.
func BenchmarkRoundTrip64IoCopy(b *testing.B) {
	front, back := listen(b), listen(b)
	defer front.Close()
	defer back.Close()
	client, rc := pair(b, front)
	rs, up := pair(b, back)
	for _, c := range []net.Conn{client, rc, rs, up} {
		defer c.Close()
	}
	go io.Copy(rs, rc)
	go io.Copy(rc, rs)
	go echo(up)
	benchRoundTrip(b, client)
}

func benchRoundTrip(b *testing.B, client net.Conn) {
	var msg, got [64]byte
	b.ReportAllocs()
	b.SetBytes(2 * int64(len(msg)))
	for b.Loop() {
		if _, err := client.Write(msg[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, got[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// One-way bulk transfer through one tunnel, in 32 KiB writes.
func BenchmarkThroughput(b *testing.B) {
	e := newEnv(b, Options{})
	client, up, _ := e.open("g", nil, nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [64 << 10]byte
		for {
			if _, err := up.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	var chunk [32 << 10]byte
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if _, err := client.Write(chunk[:]); err != nil {
			b.Fatal(err)
		}
	}
	client.CloseWrite()
	<-done
}

// 64-byte round trips over 100 tunnels at once (one client goroutine each): the engine's
// throughput when it is busy, ns/op per round trip overall.
func BenchmarkRoundTrip64Concurrent(b *testing.B) {
	e := newEnv(b, Options{})
	var clients []net.Conn
	for range 100 {
		c, up, _ := e.open("g", nil, nil, nil)
		go echo(up)
		clients = append(clients, c)
	}
	benchConcurrent(b, clients)
}

// The same through goroutine-per-direction io.Copy relays, for comparison.
func BenchmarkRoundTrip64ConcurrentIoCopy(b *testing.B) {
	e := newEnv(b, Options{})
	var clients []net.Conn
	for range 100 {
		c := e.conns()
		go io.Copy(c.relayServer, c.relayClient)
		go io.Copy(c.relayClient, c.relayServer)
		go echo(c.up)
		clients = append(clients, c.client)
		b.Cleanup(func() {
			for _, x := range []net.Conn{c.client, c.relayClient, c.relayServer, c.up} {
				x.Close()
			}
		})
	}
	benchConcurrent(b, clients)
}

func benchConcurrent(b *testing.B, clients []net.Conn) {
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			var msg, got [64]byte
			for left.Add(-1) >= 0 {
				if _, err := c.Write(msg[:]); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, got[:]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
