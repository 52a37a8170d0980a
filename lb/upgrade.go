package lb

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fairlead/fairlead/lb/tunnel"
	"github.com/valyala/fasthttp"
)

// WebSocket upgrades (ThingWorx edge traffic) take this path after route and pick: fairlead dials the
// chosen server, forwards the upgrade request, and on a 101 relays the server's response head as it came
// (plus the sticky cookie) and from then on copies raw bytes both ways through the tunnel relay, like
// HAProxy's tunnel mode. Any other answer is relayed to the client as it is. A failed dial marks the
// server down and the next healthy server is tried at once: the client sees no error.

// isUpgrade reports a WebSocket upgrade request: "Upgrade: websocket" with "Connection: upgrade".
func isUpgrade(h *fasthttp.RequestHeader) bool {
	return h.ConnectionUpgrade() && bytes.EqualFold(bytes.TrimSpace(h.Peek(fasthttp.HeaderUpgrade)), []byte("websocket"))
}

var handshakeReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// upgrade serves one upgrade request on pool p, starting with server i.
func (lb *LB) upgrade(ctx *fasthttp.RequestCtx, p *Pool, i int) {
	req := &ctx.Request
	// prepareRequest removed the hop-by-hop Connection and Upgrade headers; an upgrade needs them again.
	req.Header.Set(fasthttp.HeaderConnection, "Upgrade")
	req.Header.Set(fasthttp.HeaderUpgrade, "websocket")

	for attempt := 0; attempt <= len(p.servers); attempt++ {
		if i < 0 {
			p.noServer.Add(1)
			serviceUnavailable(ctx)
			return
		}
		s := p.servers[i]
		s.requests.Add(1)
		conn, err := net.DialTimeout("tcp", s.Addr, p.cfg.ConnectTimeout.D)
		if err != nil {
			s.failures.Add(1)
			lb.logf("tunnel: dial %s: %v", s.Addr, err)
			if p.checker != nil {
				p.markDown(i)
				i = p.pick(ctx)
			} else {
				// A leader pool: let the checks settle, as for a refused plain request.
				p.retries.Add(1)
				i = p.settle(i, time.Now(), time.Now().Add(p.cfg.QueueTimeout.D))
			}
			continue
		}
		lb.exchange(ctx, p, i, conn)
		return
	}
	p.noServer.Add(1)
	serviceUnavailable(ctx)
}

// exchange sends the upgrade request on conn and relays the answer; on 101 the connection pair becomes a
// tunnel. It owns conn.
func (lb *LB) exchange(ctx *fasthttp.RequestCtx, p *Pool, i int, conn net.Conn) {
	s := p.servers[i]
	fail := func(format string, args ...any) {
		conn.Close()
		s.failures.Add(1)
		p.bad502.Add(1)
		lb.logf("tunnel: %s: %s", s.Addr, fmt.Sprintf(format, args...))
		ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
	}
	timeout := p.cfg.ResponseTimeout.D
	conn.SetDeadline(time.Now().Add(timeout)) //nolint:errcheck // a failed write or read reports it
	bw := bufio.NewWriterSize(conn, 2048)
	if err := ctx.Request.Write(bw); err != nil {
		fail("writing the upgrade request: %v", err)
		return
	}
	if err := bw.Flush(); err != nil {
		fail("writing the upgrade request: %v", err)
		return
	}

	br := handshakeReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() { br.Reset(nil); handshakeReaders.Put(br) }()
	head, err := readHead(br)
	if err != nil {
		if isTimeout(err) {
			conn.Close()
			p.timeout.Add(1)
			ctx.Error("504 Gateway Timeout\n", fasthttp.StatusGatewayTimeout)
			return
		}
		fail("reading the upgrade response: %v", err)
		return
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 101")) && !bytes.HasPrefix(head, []byte("HTTP/1.0 101")) {
		// Not switching: relay the answer as it is, then drop this upstream connection.
		if err := ctx.Response.Read(br); err != nil {
			fail("reading the response: %v", err)
			return
		}
		prepareResponse(&ctx.Response)
		ctx.Response.Header.SetConnectionClose()
		conn.Close()
		return
	}

	// Switching protocols. The head is relayed as the server sent it, with the sticky cookie added.
	out := make([]byte, 0, len(head)+64)
	out = append(out, head[:len(head)-2]...) // without the final CRLF
	if p.cookieIdx >= 0 && string(ctx.Request.Header.Cookie(p.cfg.Sticky.Cookie)) != p.cookieIDs[i] {
		out = fmt.Appendf(out, "Set-Cookie: %s=%s; Path=/; HttpOnly\r\n", p.cfg.Sticky.Cookie, p.cookieIDs[i])
	}
	out = append(out, "\r\n"...)
	if _, err := br.Discard(len(head)); err != nil {
		fail("%v", err)
		return
	}
	// Bytes the server sent right after its 101 (first frames) are already in br: hand them over.
	var toClient []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		toClient = bytes.Clone(b)
	}
	conn.SetDeadline(time.Time{}) //nolint:errcheck

	var key []byte
	if p.table != nil {
		var buf [160]byte
		if k, _, ok := p.keys.Key(buf[:0], ctx); ok {
			key = bytes.Clone(k)
			p.table.Acquire(key)
		}
	}
	relay, group := lb.relayFor(p), tunnelGroup(p.name, s.Addr)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		client, pending, err := unwrapHijacked(c)
		if err == nil {
			_, err = client.Write(out)
		}
		if err == nil {
			_, err = relay.Add(client, conn, pending, toClient, group, func(tunnel.Reason) {
				s.tunnels.Add(-1)
				if key != nil {
					p.table.Release(key)
				}
			})
		}
		if err != nil {
			lb.logf("tunnel: %s: %v", s.Addr, err)
			c.Close()
			conn.Close()
			if key != nil {
				p.table.Release(key)
			}
			return
		}
		s.tunnels.Add(1)
		p.tunnelsOpened.Add(1)
	})
}

// readHead returns the response head (status line and headers, through the blank line) without consuming
// it from br. The head must fit br's buffer (4 KiB): larger is not an upgrade answer worth relaying raw.
func readHead(br *bufio.Reader) ([]byte, error) {
	for {
		n := br.Buffered()
		if n > 0 {
			b, _ := br.Peek(n)
			if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
				return b[:i+4], nil
			}
		}
		if n >= br.Size() {
			return nil, errors.New("response head too large")
		}
		// Peek one byte more than buffered: one read of whatever the server has sent so far.
		if _, err := br.Peek(n + 1); err != nil {
			return nil, err
		}
	}
}

// unwrapHijacked returns the client's TCP connection under fasthttp's hijack wrapper and the bytes the
// server had already buffered from it (a client may send frames before it sees the 101). The buffered
// bytes are drained through the wrapper with an expired read deadline: buffered data is returned without
// touching the socket, and the socket itself is not read.
func unwrapHijacked(c net.Conn) (net.Conn, []byte, error) {
	raw := c
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		raw = u.UnsafeConn()
	}
	if raw == c {
		return raw, nil, nil
	}
	var pending []byte
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return nil, nil, err
	}
	var buf [4096]byte
	for {
		n, err := c.Read(buf[:])
		pending = append(pending, buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	if err := raw.SetReadDeadline(time.Time{}); err != nil {
		return nil, nil, err
	}
	return raw, pending, nil
}

func tunnelGroup(pool, addr string) string { return pool + "|" + addr }

// relayFor returns the tunnel relay for the pool's tunnel_idle_timeout. Relays belong to the LB, not to a
// config generation, so tunnels outlive reloads.
func (lb *LB) relayFor(p *Pool) *tunnel.Relay {
	d := p.cfg.TunnelIdleTimeout.D
	lb.relayMu.Lock()
	defer lb.relayMu.Unlock()
	if r, ok := lb.relays[d]; ok {
		return r
	}
	r, err := tunnel.NewRelay(tunnel.Options{IdleTimeout: d, Logf: lb.logf})
	if err != nil {
		// Only fails if the kernel refuses an epoll instance; nothing can be relayed then.
		panic(fmt.Sprintf("tunnel relay: %v", err))
	}
	lb.relays[d] = r
	return r
}

// closeTunnels closes every tunnel to server i of p (it went down): clients reconnect and are placed
// on a healthy server.
func (lb *LB) closeTunnels(p *Pool, i int) {
	group := tunnelGroup(p.name, p.servers[i].Addr)
	lb.relayMu.Lock()
	defer lb.relayMu.Unlock()
	n := 0
	for _, r := range lb.relays {
		n += r.CloseGroup(group)
	}
	if n > 0 {
		lb.logf("tunnel: closed %d tunnels to %s (down)", n, p.servers[i].Addr)
	}
}
