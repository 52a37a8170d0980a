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
	"github.com/fairlead/fairlead/lb/httpfield"
	"github.com/fairlead/fairlead/lb/tunnel"
	"github.com/valyala/fasthttp"
)

// WebSocket upgrades (ThingWorx edge traffic) take this path from the forwarding loop (proxy.go). An
// attempt is a handshake: fairlead dials the chosen server, forwards the upgrade request and reads the
// answer's head; it ends as a plain request's attempt does and the loop judges it in the same places
// (classify, account, conclude): a failed dial, a timeout, a reset or a malformed head counts against
// the server, is told to its health check and goes to another server, the client seeing nothing; any
// answer but 101 is relayed as it is. On a 101, handOver relays the server's head as it came (plus the
// sticky cookie) and from then on the tunnel engine (tunnels.go) copies raw bytes both ways, like
// HAProxy's tunnel mode. When a tunnel closes, its bytes are added to its pool's and, with the access log
// on, a line is written (tunnelEnd in log.go).

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

// errMalformedHead is an upgrade attempt whose answer does not begin with an HTTP/1.x status line.
var errMalformedHead = errors.New("the answer to the upgrade is not an HTTP/1.1 response")

// switching is an upgrade attempt that the server answered 101: its connection, with the reader holding
// the 101 head (head bytes long) and whatever the server sent after it.
type switching struct {
	conn net.Conn
	br   *bufio.Reader
	head int
}

// handshake is an upgrade's attempt on s, as send is a plain request's: dial s through its dialer
// (package upstream: over TLS for a pool with [pools.NAME.tls], the TLS handshake bounded by
// connect_timeout as the TCP connect is), write the request's head (built by appendUpstreamHead) and
// read the answer's head, both within response_timeout. A 101 is returned as switching for handOver; any
// other well-formed answer is read whole into ctx.Response (relayed by conclude as a request's answer)
// and the connection closed. The error is what classify judges for every attempt: a failed dial
// (*upstream.DialError: none of the request reached s), a timeout, a reset, a close or a head that is no
// HTTP answer: so a hung or broken handshake counts against s, is reported to its health check and goes
// to another server (an upgrade is a GET, so it may go again), while the client has seen nothing. It
// counts s in flight (n bytes) until the answer's head or the failure.
func (px *proxy) handshake(ctx *fasthttp.RequestCtx, p *Pool, st *poolView, s *Server, head []byte, n int64) (sw switching, err error) {
	defer p.end(s, n)
	conn, err := s.client.Load().Dial()
	if err != nil {
		px.logf("tunnel: dial %s: %v", s.label(), err) // a TLS handshake refused says why here
		return sw, err
	}
	conn.SetDeadline(time.Now().Add(st.cfg.ResponseTimeout.D)) //nolint:errcheck // a failed write or read reports it
	if _, err := conn.Write(head); err != nil {
		conn.Close()
		return sw, fmt.Errorf("writing the upgrade request: %w", err)
	}
	br := handshakeReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	release := func() { br.Reset(nil); handshakeReaders.Put(br); conn.Close() }
	h, err := readHead(br)
	switch {
	case err != nil:
		release()
		return sw, fmt.Errorf("reading the answer to the upgrade: %w", err)
	case !statusLine(h):
		release()
		return sw, errMalformedHead
	case string(h[9:12]) == "101":
		return switching{conn: conn, br: br, head: len(h)}, nil
	}
	// Not switching: the answer is read as it is, then this upstream connection is dropped.
	ctx.Response.Header.DisableNormalizing() // its field names as the server spelled them
	err = ctx.Response.Read(br)
	release()
	if err != nil {
		dropAnswer(&ctx.Response)
		return sw, fmt.Errorf("reading the answer to the upgrade: %w", err)
	}
	return sw, nil
}

// statusLine reports whether a head begins with an HTTP/1.x status line: "HTTP/1.x", a space, three
// digits, then a space or the line's end.
func statusLine(h []byte) bool {
	const prefix = "HTTP/1."
	if len(h) < len(prefix)+6 || string(h[:len(prefix)]) != prefix || h[len(prefix)] != '0' && h[len(prefix)] != '1' || h[len(prefix)+1] != ' ' {
		return false
	}
	code := h[len(prefix)+2:]
	for _, c := range code[:3] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return code[3] == ' ' || code[3] == '\r'
}

// handOver relays a 101 to the client as the server sent it (with the sticky cookie added) and makes the
// connection pair a tunnel. It owns sw.
func (px *proxy) handOver(ctx *fasthttp.RequestCtx, p *Pool, st *poolView, s *Server, sw switching) {
	conn, br := sw.conn, sw.br
	head, _ := br.Peek(sw.head)
	out := switchingHead(make([]byte, 0, len(head)+64), head[:len(head)-2]) // without the final CRLF
	if name, value := st.cookie(ctx, s); name != "" {
		out = fmt.Appendf(out, "Set-Cookie: %s=%s; Path=/; HttpOnly\r\n", name, value)
	}
	out = append(out, "\r\n"...)
	br.Discard(sw.head) //nolint:errcheck // buffered: Peek returned it
	// Bytes the server sent right after its 101 (first frames) are already in br: hand them over.
	var toClient []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		toClient = bytes.Clone(b)
	}
	br.Reset(nil)
	handshakeReaders.Put(br)
	conn.SetDeadline(time.Time{}) //nolint:errcheck

	var key []byte
	var release func()
	if st.pins != nil {
		key, release = st.pins.hold(ctx, s)
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		// The client's socket under fasthttp's hijack wrapper and the front end's connection, and the
		// bytes the server had already buffered from it (a client may send frames before the 101).
		client, pending, err := frontend.UnwrapHijacked(c)
		uncount := frontend.TakeRelease(client) // max_conns_per_source: the tunnel's connection counts until it ends
		addr := client.RemoteAddr()             // the front end's (a PROXY header's client), not the socket's
		local := frontend.ProxyLocal(client)    // a proxy_protocol sender's own (LOCAL): counted per no source
		client = frontend.Socket(client)
		if err == nil {
			_, err = client.Write(out)
		}
		if err != nil {
			px.logf("tunnel: %s: %v", s.label(), err)
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
		end := &tunnelEnd{px: px, p: p, s: s, client: addr, local: local, opened: time.Now(), key: key}
		if px.relay(st, end, client, conn, pending, toClient, release, uncount) {
			p.tunnelsOpened.Add(1)
		} else {
			c.Close()
		}
	})
}

// relay makes the tunnel of end between client and server in the engine of st's tunnel_idle_timeout,
// counted on its server until it ends, when release and uncount (either may be nil) run. pending and
// toClient are bytes read already, written first. A server that no longer keeps tunnels (it went down,
// left the pool or went into maintenance meanwhile) gets it closed at once. false: it could not be made
// (logged; server is closed, the caller closes client).
func (px *proxy) relay(st *poolView, end *tunnelEnd, client, server net.Conn, pending, toClient []byte, release, uncount func()) bool {
	s := end.s
	engine, group := px.tunnels.engine(st.cfg.TunnelIdleTimeout.D), tunnelGroup(end.p.name, s.Addr)
	s.tunnels.Add(1)
	t, err := engine.Add(client, server, pending, toClient, group, func(why tunnel.Reason) {
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
		px.logf("tunnel: %s: %v", s.label(), err)
		server.Close()
		if uncount != nil {
			uncount()
		}
		if release != nil {
			release()
		}
		return false
	}
	end.added(t)
	if !s.keepsTunnels() {
		// The server went down, left the pool or went into maintenance while this tunnel was being
		// set up, after its tunnels were closed: close this one too. (Not when it drains: a draining
		// server keeps its tunnels, and the client may already have its 101.)
		t.Close()
	}
	return true
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
	switch f := httpfield.Of(name); {
	case f == httpfield.Connection, f == httpfield.Upgrade:
		return false
	case f.HopByHop():
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
