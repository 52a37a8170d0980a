//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fasthttp/websocket"
)

// ppSender is the address these tests' L4 load balancer connects from (proxy_protocol lists it); the
// test's own probes (startUpgradable's) come from 127.0.0.1, without a header.
const ppSender = "127.0.0.2"

// ppHeader is a PROXY header naming src as the client: version 1 (a text line) or 2 (binary).
func ppHeader(src netip.AddrPort, v2 bool) []byte {
	dst := netip.MustParseAddrPort("10.0.0.1:443")
	fam, fam2 := "TCP4", byte(0x11)
	if src.Addr().Is6() {
		dst, fam, fam2 = netip.MustParseAddrPort("[2001:db8::1]:443"), "TCP6", 0x21
	}
	if !v2 {
		return fmt.Appendf(nil, "PROXY %s %s %s %d %d\r\n", fam, src.Addr(), dst.Addr(), src.Port(), dst.Port())
	}
	a := append(src.Addr().AsSlice(), dst.Addr().AsSlice()...)
	a = binary.BigEndian.AppendUint16(a, src.Port())
	a = binary.BigEndian.AppendUint16(a, dst.Port())
	b := append([]byte("\r\n\r\n\x00\r\nQUIT\n"), 0x21, fam2)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a)))
	return append(b, a...)
}

// ppDial connects to addr from the sender and sends a header naming src; over TLS (cfg not nil) it then
// runs the handshake.
func ppDial(t *testing.T, addr string, src netip.AddrPort, v2 bool, cfg *tls.Config) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ppSender)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(ppHeader(src, v2)); err != nil {
		return nil, err
	}
	if cfg == nil {
		return c, nil
	}
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	tc.SetDeadline(time.Time{}) //nolint:errcheck
	return tc, nil
}

// Issue 39: connections through an L4 load balancer that sends PROXY headers (proxy_protocol) move at a
// binary upgrade as the others do, with the client their header named. A ws:// and a wss:// tunnel
// (v2 and v1 headers) keep carrying messages both ways through SIGUSR2, moved by the old process (the
// wss one's TLS session captured after its header and taken over: both relayed by epoll, none left to
// close with the drain) and taken over by the new one, the connection servers seeing no new upgrade;
// a plain and an HTTPS idle keep-alive connection (an IPv4 and an IPv6 client) move, and their next
// request reaches the leader from the new process with X-Forwarded-For naming the header's client. In
// the new process max_conns_per_source (1) counts each moved connection by that client: another
// connection naming one of them is closed (counted), one naming a new client is served. The access
// log names the header's clients, in both processes, and never the sender.
func TestSIGUSR2MovesTunnelsAndIdleConnectionsFromAProxySenderWithTheirClients(t *testing.T) {
	c := testkit.StartCluster(t, sim.Options{Platforms: 2, Connections: 2})
	tf := newTLSFront(t)
	var pp testkit.Config
	pp.Table("frontend").Set("proxy_protocol", []string{ppSender + "/32"}).Set("max_conns_per_source", 1)
	pp.Table("global").Set("access_log", true)
	p := startUpgradable(t, c, "05-cx.toml", cxPool(c), "20-tls.toml", tf.conf, "30-pp.toml", pp.String())
	tlsCfg := tf.client.Clone()
	tlsCfg.NextProtos = []string{"http/1.1"}
	client := func(a string) netip.AddrPort { return netip.MustParseAddrPort(a) }

	// The tunnels, each echoing messages without a pause from now on.
	type tun struct {
		what string
		src  netip.AddrPort
		ws   *websocket.Conn
	}
	var tuns []tun
	for i, tc := range []struct {
		what, url string
		src       netip.AddrPort
		v2        bool
		cfg       *tls.Config
	}{
		{"ws", "ws://" + p.addr, client("198.51.100.1:40001"), true, nil},
		{"wss", "wss://" + tf.addr, client("198.51.100.2:40002"), false, tf.client.Clone()},
	} {
		dial := func(_ context.Context, _, addr string) (net.Conn, error) {
			return ppDial(t, addr, tc.src, tc.v2, tc.cfg)
		}
		d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
		if tc.cfg != nil {
			d.NetDialTLSContext = dial
		} else {
			d.NetDialContext = dial
		}
		ws, _, err := d.Dial(tc.url+"/Thingworx/WS", http.Header{"X-Asset-Id": {"pp-asset-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		defer ws.Close()
		tuns = append(tuns, tun{tc.what, tc.src, ws})
	}
	upgrades := func() (sum int64) {
		for _, cs := range c.Connections {
			sum += cs.Upgrades()
		}
		return sum
	}
	before := upgrades()
	var echoed [2]atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, len(tuns))
	var wg sync.WaitGroup
	for i, tn := range tuns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				msg := tn.what + ":" + strconv.Itoa(k)
				tn.ws.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
				if err := tn.ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					errs <- fmt.Errorf("%s: %w", tn.what, err)
					return
				}
				_, got, err := tn.ws.ReadMessage()
				if err != nil {
					errs <- fmt.Errorf("%s: %w", tn.what, err)
					return
				}
				if string(got) != msg {
					errs <- fmt.Errorf("%s: echo %q, want %q", tn.what, got, msg)
					return
				}
				echoed[i].Add(1)
			}
		}()
	}

	// The idle keep-alive connections, one request answered on each.
	type idleConn struct {
		what string
		src  netip.AddrPort
		rc   *rawConn
	}
	var idle []idleConn
	for _, ic := range []struct {
		what, addr string
		src        netip.AddrPort
		v2         bool
		cfg        *tls.Config
	}{
		{"plain", p.addr, client("198.51.100.3:40003"), false, nil},
		{"https", tf.addr, client("[2001:db8::4]:40004"), true, tlsCfg},
	} {
		conn, err := ppDial(t, ic.addr, ic.src, ic.v2, ic.cfg)
		if err != nil {
			t.Fatalf("%s: %v", ic.what, err)
		}
		rc := &rawConn{c: conn, br: bufio.NewReader(conn)}
		r, body := rc.getPath(t, "/echo-headers", ic.what+": the first request")
		if r.StatusCode != 200 || r.Close || !strings.Contains(body, "X-Forwarded-For: "+ic.src.Addr().String()+"\n") {
			t.Fatalf("%s: the first request: %d (close %v), forwarded:\n%s", ic.what, r.StatusCode, r.Close, body)
		}
		idle = append(idle, idleConn{ic.what, ic.src, rc})
	}

	testkit.Eventually(t, "messages before the switch", 10*time.Second, func() bool { return echoed[0].Load() >= 50 && echoed[1].Load() >= 50 })
	old := p.pid()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the old process to exit", 20*time.Second, func() bool { return p.pid() != old && gone(old) })
	after := [2]int64{echoed[0].Load(), echoed[1].Load()}
	testkit.Eventually(t, "messages after the switch", 10*time.Second, func() bool {
		return echoed[0].Load() >= after[0]+50 && echoed[1].Load() >= after[1]+50
	})
	close(stop)
	wg.Wait()
	for range tuns {
		if err := <-errs; err != nil {
			t.Errorf("a tunnel's messages: %v", err)
		}
	}
	if got := upgrades(); got != before {
		t.Errorf("the connection servers saw %d new upgrades, want none", got-before)
	}
	testkit.Eventually(t, "the log to say both tunnels and both idle connections moved", 10*time.Second, func() bool {
		log := p.logText()
		return strings.Contains(log, "2 tunnels handed over; 0 close with the drain") && strings.Contains(log, "2 tunnels taken over") &&
			strings.Contains(log, "2 idle keep-alive connections handed over") && strings.Contains(log, "2 idle keep-alive connections taken over")
	})

	const counted = `fairlead_frontend_requests_total{protocol="http/1.1"}`
	served, _ := strconv.Atoi(testkit.Metric(p.admin, counted))
	leader := c.Leader().Name
	for _, ic := range idle {
		if err := ic.rc.open(); err != nil {
			t.Fatalf("%s: its idle connection after the switch: %v, want it open", ic.what, err)
		}
		r, body := ic.rc.getPath(t, "/echo-headers", ic.what+": the request after the switch")
		if r.StatusCode != 200 || r.Close || r.Header.Get("X-Served-By") != leader {
			t.Errorf("%s: the request after the switch: %d by %q (close %v), want 200 by the leader %s, kept alive",
				ic.what, r.StatusCode, r.Header.Get("X-Served-By"), r.Close, leader)
		}
		if !strings.Contains(body, "X-Forwarded-For: "+ic.src.Addr().String()+"\n") {
			t.Errorf("%s: the request after the switch forwarded without X-Forwarded-For: %s:\n%s", ic.what, ic.src.Addr(), body)
		}
	}
	if now, _ := strconv.Atoi(testkit.Metric(p.admin, counted)); now-served != len(idle) {
		t.Errorf("the new process (PID %d) served %d requests, want the %d sent on the moved connections", p.pid(), now-served, len(idle))
	}

	// max_conns_per_source = 1, in the new process: each moved connection counts for its client.
	const limited = `fairlead_frontend_limited_total{reason="max_conns_per_source"}`
	limitedBefore, _ := strconv.Atoi(testkit.Metric(p.admin, limited))
	moved := []netip.AddrPort{tuns[0].src, tuns[1].src, idle[0].src, idle[1].src}
	for _, src := range moved {
		conn, err := ppDial(t, p.addr, netip.AddrPortFrom(src.Addr(), 50000), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing sent past the header: a connection served would wait for its request (the read times
		// out), one refused is closed.
		conn.SetDeadline(time.Now().Add(3 * time.Second)) //nolint:errcheck
		if b, err := io.ReadAll(conn); len(b) != 0 || err != nil {
			t.Errorf("another connection of %s: %q, %v; want it closed (max_conns_per_source)", src.Addr(), b, err)
		}
	}
	if got, _ := strconv.Atoi(testkit.Metric(p.admin, limited)); got-limitedBefore != len(moved) {
		t.Errorf("%d connections counted over max_conns_per_source, want %d", got-limitedBefore, len(moved))
	}
	fresh := client("198.51.100.5:40005")
	conn, err := ppDial(t, p.addr, fresh, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{c: conn, br: bufio.NewReader(conn)}
	if r, body := rc.getPath(t, "/echo-headers", "a new client"); r.StatusCode != 200 || !strings.Contains(body, "X-Forwarded-For: "+fresh.Addr().String()+"\n") {
		t.Errorf("a new client: %d, forwarded:\n%s", r.StatusCode, body)
	}

	// The access log names the header's clients, in the new process too: each idle connection's two
	// requests (one before the switch, one after), each tunnel's end once its client closes it; never
	// the sender.
	for _, ic := range idle {
		if n := strings.Count(p.logText(), "msg=access type=request client="+ic.src.Addr().String()+" "); n != 2 {
			t.Errorf("%s: %d request lines name %s, want 2 (one by each process)", ic.what, n, ic.src.Addr())
		}
	}
	for _, tn := range tuns {
		tn.ws.Close()
	}
	for _, tn := range tuns {
		line := "msg=access type=tunnel client=" + tn.src.Addr().String() + " "
		testkit.Eventually(t, tn.what+"'s tunnel line in the new process", 5*time.Second, func() bool {
			for _, l := range strings.Split(p.logText(), "\n") {
				if strings.Contains(l, line) && strings.Contains(l, `reason="closed by client"`) {
					return true
				}
			}
			return false
		})
	}
	if strings.Contains(p.logText(), "client="+ppSender) {
		t.Errorf("an access line names the sender %s", ppSender)
	}
}
