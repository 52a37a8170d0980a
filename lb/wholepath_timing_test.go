package lb

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
)

// The whole path, fasthttp's server and fairlead's upstream client included: a client on a real socket
// sends requests (or WebSocket messages) through fairlead to a server on a real socket, and every
// allocation of the test process is counted. The client and the server here use fixed buffers and
// allocate nothing per request, so whatever is counted is fairlead's (or the libraries' it runs). make
// test runs these without -race (the race detector allocates on its own).

// rawServe answers every request head on c with the fixed answer, and an upgrade request with a fixed
// 101 followed by an echo of every byte: no allocation per request or message (testkit.RawServer
// allocates per connection only).
func rawServe(answer []byte) func(c net.Conn) {
	return func(c net.Conn) {
		buf := make([]byte, 16<<10)
		n := 0
		for {
			m, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += m
			for {
				end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if end < 0 {
					break
				}
				if bytes.Contains(buf[:end], []byte("\nUpgrade: websocket")) {
					if _, err := c.Write(rawSwitch); err != nil {
						return
					}
					if rest := buf[end+4 : n]; len(rest) > 0 {
						c.Write(rest) //nolint:errcheck
					}
					io.CopyBuffer(c, onlyReader{c}, buf) //nolint:errcheck // echo until closed
					return
				}
				if _, err := c.Write(answer); err != nil {
					return
				}
				n = copy(buf, buf[end+4:n])
			}
		}
	}
}

var rawSwitch = []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")

// onlyReader hides a conn's WriterTo/ReaderFrom so that io.CopyBuffer uses the given buffer.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(b []byte) (int, error) { return o.r.Read(b) }

// rawClient reads whole answers with fixed buffers.
type rawClient struct {
	c   net.Conn
	buf []byte
}

// roundTrip writes req and reads one answer (head and Content-Length body), returning its status line.
func (rc *rawClient) roundTrip(tb testing.TB, req []byte) []byte {
	if _, err := rc.c.Write(req); err != nil {
		tb.Fatal(err)
	}
	n := 0
	for {
		m, err := rc.c.Read(rc.buf[n:])
		if err != nil {
			tb.Fatal(err)
		}
		n += m
		end := bytes.Index(rc.buf[:n], []byte("\r\n\r\n"))
		if end < 0 {
			continue
		}
		size := 0
		if i := bytes.Index(rc.buf[:end], []byte("\r\nContent-Length: ")); i >= 0 {
			for _, c := range rc.buf[i+len("\r\nContent-Length: ") : end] {
				if c < '0' || c > '9' {
					break
				}
				size = size*10 + int(c-'0')
			}
		}
		if n >= end+4+size {
			if n > end+4+size {
				tb.Fatalf("%d bytes after the answer", n-end-4-size)
			}
			return rc.buf[:bytes.IndexByte(rc.buf, '\r')]
		}
	}
}

// wholePathConfig puts a leader pool over server, checked rarely (no probe during a measurement), with a
// WebSocket route to it too.
func wholePathConfig(server string) map[string]string {
	conf, _, check, route := poolConf("platform", "leader", []string{server}, true)
	check.Set("credentials", sim.DefaultCredentials).Set("interval", time.Hour).Set("interval_max", time.Hour)
	route.Set("websocket", true).Set("paths", []string{"/Thingworx/WS"})
	conf.Array("routes").Set("pool", "platform")
	return map[string]string{"10-base.toml": conf.String()}
}

func startWholePath(tb testing.TB, body int) *rawClient {
	s := testkit.StartRawServer(tb, rawServe(fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s",
		body, bytes.Repeat([]byte("x"), body))))
	l, _ := startLB(tb, wholePathConfig(s.Addr))
	testkit.Eventually(tb, "fairlead to forward (its first check to find the leader)", 10*time.Second, func() bool {
		return request(l, "GET", "/Thingworx/Things", "").status == 200
	})
	return dialRawClient(tb, l.Addr())
}

// dialRawClient connects a rawClient to addr, closed at the end of the test.
func dialRawClient(tb testing.TB, addr string) *rawClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawClient{c: c, buf: make([]byte, 64<<10)}
}

// wantNoAllocs fails the test if do allocates, measured over 2000 runs after 200 that warm the pools: a
// stray runtime allocation (a timer, a goroutine stack growing) is allowed over 2000; one per run is not.
func wantNoAllocs(t *testing.T, what string, do func()) {
	t.Helper()
	for range 200 {
		do()
	}
	if n := testing.AllocsPerRun(2000, do); n > 0.02 {
		t.Errorf("%.3f allocations per %s, want 0", n, what)
	}
}

// wantNoAllocsGET is wantNoAllocs of req sent on rc, each answered 200 OK.
func wantNoAllocsGET(t *testing.T, rc *rawClient, req []byte, what string) {
	t.Helper()
	wantNoAllocs(t, what, func() {
		if status := rc.roundTrip(t, req); !bytes.Equal(status, []byte("HTTP/1.1 200 OK")) {
			t.Fatalf("status line %q", status)
		}
	})
}

var wholePathGET = []byte("GET /Thingworx/Things/Asset1/Properties HTTP/1.1\r\nHost: thingworx.example.com\r\n" +
	"User-Agent: bench\r\nAccept: */*\r\n\r\n")

// TestWholePathDoesNotAllocatePerRequest: 0 allocations per proxied request, for a small answer (read
// whole) and a large one (streamed from the server's connection to the client).
func TestWholePathDoesNotAllocatePerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	for _, size := range []int{64, 16 << 10, 48 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			wantNoAllocsGET(t, startWholePath(t, size), wholePathGET, fmt.Sprintf("proxied request (%d-byte answers)", size))
		})
	}
}

// TestWholePathDoesNotAllocatePerMessage: a WebSocket tunnel through fairlead's front end, 64-byte
// messages echoed by the server: 0 allocations per round trip.
func TestWholePathDoesNotAllocatePerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	rc := startWholePath(t, 64)
	upgrade := []byte("GET /Thingworx/WS HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if status := rc.roundTrip(t, upgrade); !bytes.HasPrefix(status, []byte("HTTP/1.1 101")) {
		t.Fatalf("upgrade answered %q", status)
	}
	var msg, got [64]byte
	wantNoAllocs(t, "tunnelled round trip", func() {
		if _, err := rc.c.Write(msg[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(rc.c, got[:]); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkWholePathGET is one proxied request over real sockets, client and server in this process.
func BenchmarkWholePathGET(b *testing.B) {
	rc := startWholePath(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		rc.roundTrip(b, wholePathGET)
	}
}

// TestRelaySnapshotGETDoesNotAllocate: a GET of a relay topic's cached snapshot, through the real
// front end, costs no allocation (the topic is interned, nothing waits, the body is the cached one).
func TestRelaySnapshotGETDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	c := testkit.StartRelaySim(t, 1)
	l, _ := startLB(t, openRelayFiles(t, testkit.ConfigAddrs(c), []string{"inventory/dev"}, ""))
	rc := dialRawClient(t, l.Addr())
	testkit.Eventually(t, "the topic's upstream session", 5*time.Second, func() bool { return l.Status().Relays[0].Sessions == 1 })
	wantNoAllocsGET(t, rc, []byte("GET /relay/inventory/dev HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n"), "relay snapshot GET")
}

func TestAnAppConfigurationConfigGETOfAReadyTopicDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test runs this without -race")
	}
	e := startAppConfigRelay(t, time.Hour, "")
	req := []byte("GET " + testkit.AppConfigPath(acGUID, "inventory/dev") + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acClientKey + "\r\n\r\n")
	wantNoAllocsGET(t, dialRawClient(t, e.l.Addr()), req, "App Configuration GET")
}
