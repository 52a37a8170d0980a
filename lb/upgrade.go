package lb

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/tunnel"
	"github.com/valyala/fasthttp"
)

// WebSocket upgrades (ThingWorx edge traffic) take this path from the forwarding loop (proxy.go):
// fairlead dials the chosen server, forwards the upgrade request, and on a 101 relays the server's
// response head as it came (plus the sticky cookie) and from then on copies raw bytes both ways through
// the tunnel engine (tunnels.go), like HAProxy's tunnel mode. Any other answer is relayed to the client as
// it is. A failed dial is an ordinary failed attempt of the loop: reported to the health check, and the
// client is served by another server at once without seeing an error. When a tunnel closes, its bytes
// are added to its pool's and, with the access log on, a line is written (tunnelEnd in log.go).

// isUpgrade reports a WebSocket upgrade request: "Upgrade: websocket" with "Connection: upgrade".
func isUpgrade(h *fasthttp.RequestHeader) bool {
	return h.ConnectionUpgrade() && bytes.EqualFold(bytes.TrimSpace(h.Peek(fasthttp.HeaderUpgrade)), []byte("websocket"))
}

// badHandshake returns why a WebSocket upgrade request is not a valid opening handshake (RFC 6455
// 4.2.1), or "": GET, a Sec-WebSocket-Key of 16 bytes in base64, Sec-WebSocket-Version 13.
func badHandshake(h *fasthttp.RequestHeader) string {
	if !h.IsGet() {
		return "a WebSocket upgrade must be a GET"
	}
	key := bytes.TrimSpace(h.Peek("Sec-WebSocket-Key"))
	var raw [18]byte
	if len(key) != 24 {
		return "missing or invalid Sec-WebSocket-Key"
	}
	if n, err := base64.StdEncoding.Decode(raw[:], key); err != nil || n != 16 {
		return "missing or invalid Sec-WebSocket-Key"
	}
	if v := bytes.TrimSpace(h.Peek("Sec-WebSocket-Version")); string(v) != "13" {
		return "unsupported Sec-WebSocket-Version (13 is)"
	}
	return ""
}

var handshakeReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// dialUpgrade connects to s for an upgrade through the server's dialer (package upstream): over TLS for a pool
// with [pools.NAME.tls], the handshake bounded by connect_timeout as the TCP connect is; a failure, a
// failed handshake included, is a *upstream.DialError, so the request goes to another server.
func (lb *LB) dialUpgrade(s *Server) (net.Conn, error) {
	conn, err := s.client.Load().Dial()
	if err != nil {
		lb.logf("tunnel: dial %s: %v", s.label(), err)
	}
	return conn, err
}

// exchange sends the upgrade request (its head, built by appendUpstreamHead) on conn and relays the
// answer; on 101 the connection pair becomes a tunnel. It owns conn.
func (lb *LB) exchange(ctx *fasthttp.RequestCtx, p *Pool, st *poolView, s *Server, conn net.Conn, head []byte) {
	fail := func(format string, args ...any) {
		conn.Close()
		s.failures.Add(1)
		p.bad502.Add(1)
		lb.logf("tunnel: %s: %s", s.label(), fmt.Sprintf(format, args...))
		ctx.Error("502 Bad Gateway\n", fasthttp.StatusBadGateway)
	}
	conn.SetDeadline(time.Now().Add(st.cfg.ResponseTimeout.D)) //nolint:errcheck // a failed write or read reports it
	if _, err := conn.Write(head); err != nil {
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
		ctx.Response.Header.DisableNormalizing() // its field names as the server spelled them
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
	out := switchingHead(make([]byte, 0, len(head)+64), head[:len(head)-2]) // without the final CRLF
	if name, value := st.policy.cookie(ctx, s); name != "" {
		out = fmt.Appendf(out, "Set-Cookie: %s=%s; Path=/; HttpOnly\r\n", name, value)
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

	release := st.policy.hold(ctx, s)
	engine, group := lb.tunnels.engine(st.cfg.TunnelIdleTimeout.D), tunnelGroup(p.name, s.Addr)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		// The client's socket under fasthttp's hijack wrapper and the front end's connection, and the
		// bytes the server had already buffered from it (a client may send frames before the 101).
		client, pending, err := frontend.UnwrapHijacked(c)
		uncount := frontend.TakeRelease(client) // max_conns_per_source: the tunnel's connection counts until it ends
		client = frontend.Socket(client)
		if err == nil {
			_, err = client.Write(out)
		}
		var t *tunnel.Tunnel
		if err == nil {
			s.tunnels.Add(1)
			end := &tunnelEnd{lb: lb, p: p, s: s, client: client.RemoteAddr(), opened: time.Now()}
			t, err = engine.Add(client, conn, pending, toClient, group, func(why tunnel.Reason) {
				s.tunnels.Add(-1)
				if release != nil {
					release()
				}
				if uncount != nil {
					uncount()
				}
				end.closed(why)
			})
			if err != nil {
				s.tunnels.Add(-1)
			} else {
				end.added(t)
			}
		}
		if err != nil {
			lb.logf("tunnel: %s: %v", s.label(), err)
			c.Close()
			conn.Close()
			if uncount != nil {
				uncount()
			}
			if release != nil {
				release()
			}
			return
		}
		p.tunnelsOpened.Add(1)
		if !s.keepsTunnels() {
			// The server went down, left the pool or went into maintenance while this tunnel was being
			// set up, after its tunnels were closed: close this one too. (Not when it drains: a draining
			// server keeps its tunnels, and the client may already have its 101.)
			t.Close()
		}
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

// switchingHead appends a server's 101 head (without its final CRLF) to out without the hop-by-hop
// fields other than Connection and Upgrade, which the switch needs, and without the fields that
// Connection names besides Upgrade (RFC 9110 7.6.1).
func switchingHead(out, head []byte) []byte {
	var conn []byte
	for rest := head; len(rest) > 0; {
		var line []byte
		line, rest = headLine(rest)
		if name, value, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(bytes.TrimSpace(name), []byte(fasthttp.HeaderConnection)) {
			conn = append(append(conn, value...), ',')
		}
	}
	first := true
	for rest := head; len(rest) > 0; {
		var line []byte
		line, rest = headLine(rest)
		if !first {
			name, _, _ := bytes.Cut(line, []byte(":"))
			name = bytes.TrimSpace(name)
			if dropOnSwitch(name, conn) {
				continue
			}
		}
		first = false
		out = append(append(out, line...), "\r\n"...)
	}
	return out
}

// headLine splits the first CRLF-ended line off a head.
func headLine(head []byte) (line, rest []byte) {
	if i := bytes.Index(head, []byte("\r\n")); i >= 0 {
		return head[:i], head[i+2:]
	}
	return head, nil
}

// dropOnSwitch reports whether the field name is not relayed with a 101.
func dropOnSwitch(name, connection []byte) bool {
	switch classifyField(name) {
	case fieldConnection, fieldUpgrade:
		return false
	case fieldHopByHop:
		return true
	}
	for v := connection; len(v) > 0; {
		tok := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if bytes.EqualFold(bytes.TrimSpace(tok), name) {
			return true
		}
	}
	return false
}
