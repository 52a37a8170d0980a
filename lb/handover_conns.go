package lb

import (
	"net"
	"net/netip"

	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/handover"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// A binary upgrade's idle keep-alive connections (lb/frontend/idle.go): once the tunnels went, the old
// process gives every HTTP/1.1 connection that waits for its next request to the new one
// (HandOverConns), an HTTPS one with its TLS session, and the new one serves it from the listener it
// was accepted on as if it had accepted it (AdoptConn), an HTTPS one with its session resumed by
// fairlead's record layer. A connection answering a request, or whose TLS session crypto/tls keeps,
// stays and closes after its answer; HTTP/2 connections stay and drain.

// HandOverConns stops accepting (the new process accepts on the same sockets) and gives the front
// end's idle HTTP/1.1 keep-alive connections to the new process with send; it returns how many moved
// and how many were taken but stay (a request began, answered here and closed).
func (sc Succession) HandOverConns(send func([]handover.Conn) error) (moved, stayed int) {
	lb := sc.lb
	lb.lns.closeAll() // our descriptors only: the sockets live on in the new process
	given, stayed := lb.px.front.HandOverIdle(detachTimeout)
	cs := make([]handover.Conn, len(given))
	for i, ic := range given {
		ln := lnPlain
		if ic.TLS != nil {
			ln = lnTLS
		}
		cs[i] = handover.Conn{Listener: listenerKeys[ln], Client: ic.Client.String(), ProxyLocal: ic.Local, TLS: ic.TLS, File: ic.File}
	}
	err := send(cs)
	for _, c := range cs {
		c.File.Close()
	}
	if err != nil {
		lb.log.Warn("binary upgrade: handing idle connections over failed: " + err.Error())
		return 0, stayed + len(cs)
	}
	return len(cs), stayed
}

// AdoptConn serves an idle keep-alive connection the old process of a binary upgrade handed over, as
// one accepted on this process's listener of the same key (counted by max_conns_per_source whatever
// the count): its next request is served as the first of a new connection; an HTTPS one's with its TLS
// session resumed (no handshake). Its client is the one the old process knew, a PROXY header's for a
// connection that came through a proxy_protocol sender: its RemoteAddr, what X-Forwarded-For, the
// sticky source key, the limits per source and the access log use, and what max_conns_per_source
// counts it by (a sender's own, LOCAL, is counted by none, as there). A connection with no such
// listener to take it is closed (its client connects again). It owns the connection's file.
func (sc Succession) AdoptConn(hc handover.Conn) bool {
	lb := sc.lb
	id := lnPlain
	if hc.TLS != nil {
		id = lnTLS
	}
	lb.lns.mu.Lock()
	ln := lb.lns.ln[id]
	lb.lns.mu.Unlock()
	if ln == nil || hc.Listener != listenerKeys[id] {
		hc.File.Close()
		return false
	}
	c, err := tunnel.Resume(hc.File, hc.TLS) // a plain connection, or its TLS session resumed
	if err != nil {
		return false
	}
	if err := frontend.InjectAs(ln, c, clientAddr(hc.Client), hc.ProxyLocal); err != nil {
		c.Close()
		return false
	}
	return true
}

// clientAddr is a client's address as the handover names it, nil when it names none.
func clientAddr(s string) *net.TCPAddr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

// adoptCount counts a connection a binary upgrade's old process handed over (a tunnel's, a relay
// stream's) against max_conns_per_source, whatever the count, by its client as the old process knew it
// (client: a PROXY header's for one that came through a proxy_protocol sender; its peer when the
// handover names none); a sender's own (local) is counted by none, as it was not there. It returns what
// uncounts it, nil when nothing is counted.
func (lb *LB) adoptCount(c net.Conn, client string, local bool) func() {
	switch a := clientAddr(client); {
	case local:
		return nil
	case a != nil:
		return lb.px.front.Sources().AdoptAddr(a.AddrPort().Addr())
	}
	return lb.px.front.Sources().Adopt(c)
}
