package frontend

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fairlead/fairlead/lb/nbio"
)

// unreadBy returns how many bytes the socket of f's only listed connection holds unread (SIOCINQ).
func unreadBy(t *testing.T, f *Front) int {
	t.Helper()
	f.idle.mu.Lock()
	c := f.idle.head
	f.idle.mu.Unlock()
	if c == nil || c.tc == nil {
		t.Fatal("no HTTPS connection listed")
	}
	nb, ok := c.tc.NetConn().(*nbio.TCPConn)
	if !ok {
		t.Fatal("the HTTPS connection is not over nbio")
	}
	rc, err := nb.TCPConn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }) //nolint:errcheck
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An idle HTTPS connection whose client has sent part of a TLS record (its next request on its way) when
// the hand-over wakes it is not given: crypto/tls holds that part, the session stays with it, and the
// connection reads on. Its request, once whole, is answered here, over TLS, and the answer closes it.
func TestAnHTTPSConnectionWithPartOfARecordReadStaysAndIsAnsweredAndClosed(t *testing.T) {
	server, configs := idleTLS(t)
	for _, name := range []string{"TLS 1.3", "TLS 1.2 AES-GCM"} {
		t.Run(name, func(t *testing.T) {
			old := startIdleFrontOn(t, "old", 0, server)
			raw, err := net.Dial("tcp", old.addr)
			if err != nil {
				t.Fatal(err)
			}
			hc := &holdConn{Conn: raw}
			cl := tlsClientOn(t, hc, configs[name])
			checkServed(t, "first request", cl.get(t, "/first"), "old")
			waitIdle(t, old.f, 1)

			hc.mu.Lock()
			hc.keep = 5 // the record's last 5 bytes (its tag's) wait
			hc.mu.Unlock()
			if _, err := cl.c.Write([]byte("GET /second HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); unreadBy(t, old.f) != 0; { // crypto/tls has read the part sent
				if time.Now().After(deadline) {
					t.Fatal("the server does not read the part of the record")
				}
				time.Sleep(time.Millisecond)
			}
			old.ln.Close()
			if given, kept := old.f.HandOverIdle(5 * time.Second); len(given) != 0 || kept != 1 {
				t.Fatalf("given %d, kept %d; want 0, 1", len(given), kept)
			}
			if err := hc.release(); err != nil {
				t.Fatal(err)
			}
			r := cl.read(t, "/second")
			if r.StatusCode != 200 || r.Header.Get("X-Served-By") != "old" || !r.Close || r.Header.Get("X-TLS") != "true" {
				t.Errorf("/second: %d by %q (close %v, TLS %q), want 200 by old over TLS with Connection: close",
					r.StatusCode, r.Header.Get("X-Served-By"), r.Close, r.Header.Get("X-TLS"))
			}
			cl.closedAfter(t, "/second")
		})
	}
}
