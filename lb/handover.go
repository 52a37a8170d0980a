package lb

import (
	"net"

	"time"

	"github.com/fairlead/fairlead/lb/handover"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// A binary upgrade's part in lb (package handover carries it between the processes): the old process
// gives its listeners and state (HandOver, in lb.go), then, once the new one serves, stops accepting
// and gives it every plain tunnel, open, with the sticky key it holds (HandOverTunnels); the new one
// relays them as its own (AdoptTunnel). A TLS tunnel is not handed over yet: it closes with the old
// process's drain, and its device reconnects.

// detachTimeout bounds how long a tunnel's move waits for a write toward a slow receiver to finish.
const detachTimeout = 2 * time.Second

// HandOverTunnels stops accepting (the new process accepts on the same sockets) and gives every plain
// tunnel to the new process with send, batch by batch; it returns how many moved and how many stay (to
// close with the drain). Each moved tunnel ends here with reason handed over.
func (lb *LB) HandOverTunnels(send func([]handover.Tunnel) error) (moved, stayed int) {
	lb.lns.closeAll() // our descriptors only: the sockets live on in the new process
	var batch []handover.Tunnel
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := send(batch); err != nil {
			lb.log.Warn("binary upgrade: handing tunnels over failed: " + err.Error())
		}
		for _, t := range batch {
			t.ClientFile.Close()
			t.ServerFile.Close()
		}
		batch = batch[:0]
	}
	lb.px.live.Range(func(k, v any) bool {
		t, e := k.(*tunnel.Tunnel), v.(*tunnelEnd)
		cf, sf, err := t.Detach(detachTimeout)
		if err != nil {
			stayed++
			return true
		}
		batch = append(batch, handover.Tunnel{Pool: e.p.name, Server: e.s.Addr, Key: e.key, Client: e.client.String(),
			Opened: e.opened, ClientFile: cf, ServerFile: sf})
		moved++
		if len(batch) == 100 {
			flush()
		}
		return true
	})
	flush()
	return moved, stayed
}

// AdoptTunnel relays a tunnel the old process of a binary upgrade handed over, as its own: in its pool,
// to its server, holding its sticky key. A tunnel whose pool or server this process's config no longer
// has is closed (its device reconnects). It owns the tunnel's files.
func (lb *LB) AdoptTunnel(ht handover.Tunnel) bool {
	defer ht.ClientFile.Close()
	defer ht.ServerFile.Close()
	g := lb.px.gen.Load()
	p := g.pools[ht.Pool]
	if p == nil {
		return false
	}
	st := p.view.Load()
	var s *Server
	for _, srv := range st.servers {
		if srv.Addr == ht.Server {
			s = srv
		}
	}
	if s == nil {
		return false
	}
	client, err := net.FileConn(ht.ClientFile)
	if err != nil {
		return false
	}
	server, err := net.FileConn(ht.ServerFile)
	if err != nil {
		client.Close()
		return false
	}
	var release func()
	if st.pins != nil && ht.Key != nil {
		release = st.pins.holdKey(ht.Key)
	}
	end := &tunnelEnd{px: lb.px, p: p, s: s, client: addrOf(ht.Client), opened: ht.Opened, key: ht.Key}
	if !lb.px.relay(st, end, client, server, nil, nil, release, nil) {
		client.Close()
		return false
	}
	return true
}

// addrOf is a client's address as the handover names it, for the log.
func addrOf(s string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		return &net.TCPAddr{}
	}
	return a
}
