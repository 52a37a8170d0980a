package lb

import (
	"net"

	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/handover"
)

// A binary upgrade's idle keep-alive connections (lb/frontend/idle.go): once the tunnels went, the old
// process gives every plain HTTP/1.1 connection that waits for its next request to the new one
// (HandOverConns), which serves it from its plain listener as if it had accepted it (AdoptConn). A
// connection answering a request stays and closes after its answer; TLS and HTTP/2 connections stay
// and drain.

// HandOverConns stops accepting (the new process accepts on the same sockets) and gives the front
// end's idle plain keep-alive connections to the new process with send; it returns how many moved and
// how many were taken but stay (a request began, answered here and closed).
func (sc Succession) HandOverConns(send func([]handover.Conn) error) (moved, stayed int) {
	lb := sc.lb
	lb.lns.closeAll() // our descriptors only: the sockets live on in the new process
	given, stayed := lb.px.front.HandOverIdle(detachTimeout)
	cs := make([]handover.Conn, len(given))
	for i, ic := range given {
		cs[i] = handover.Conn{Listener: listenerKeys[lnPlain], Client: ic.Client.String(), File: ic.File}
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
// one accepted on this process's plain listener (counted by max_conns_per_source whatever the count):
// its next request is served as the first of a new connection. A connection with no plain listener
// to take it is closed (its client connects again). It owns the connection's file.
func (sc Succession) AdoptConn(hc handover.Conn) bool {
	defer hc.File.Close()
	lb := sc.lb
	lb.lns.mu.Lock()
	ln := lb.lns.ln[lnPlain]
	lb.lns.mu.Unlock()
	if ln == nil || hc.Listener != listenerKeys[lnPlain] {
		return false
	}
	c, err := net.FileConn(hc.File)
	if err != nil {
		return false
	}
	if err := frontend.Inject(ln, c); err != nil {
		c.Close()
		return false
	}
	return true
}
