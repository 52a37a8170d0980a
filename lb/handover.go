package lb

import (
	"fmt"
	"net"
	"os"

	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb/handover"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// A binary upgrade's part in lb (package handover carries it between the processes): the old process
// gives its listeners and state (Succession.Give), then, once the new one serves, stops accepting and
// gives it every tunnel, open, with the sticky key it holds (HandOverTunnels); the new one relays them
// as its own (Adopt), TLS ones with their sessions (fairlead's record layer relays a TLS side once the
// tunnel is made: lb/tunnel's session.go). A tunnel whose TLS session crypto/tls kept (a suite the
// record layer lacks, part of a record held when the tunnel
// was made, a KeyUpdate before it) or that is half-closed closes with the old process's drain, and its
// device reconnects.

// Succession is LB's side of binary upgrades (LB.Succession): what the old process gives, what the new
// one takes, and what each says of it (events, fairlead_upgrades_total).
type Succession struct{ lb *LB }

// Succession returns l's side of binary upgrades.
func (lb *LB) Succession() Succession { return Succession{lb} }

// Give is what a new process needs to start in this one's place: the listening sockets (the new process
// serves on them beside this one, which then stops accepting), the state (each pool's leader and
// health, the sticky keys, and for a handover only: the admission limiters, the buckets per source and
// the event history, statefile.go) and the count of upgrades so far.
func (sc Succession) Give() handover.Given {
	lb := sc.lb
	return handover.Given{Listeners: lb.lns.handover(), State: lb.stateDocument(),
		Upgrades: handover.Upgrades{OK: lb.upgrades[0].Load(), Failed: lb.upgrades[1].Load()},
		From:     handover.Hello{PID: os.Getpid(), Version: lb.version}}
}

// Failed says that a new process failed (err says why) and this one keeps serving: a WARN line through
// the upgrade_failed event, and fairlead_upgrades_total{result="failed"}.
func (sc Succession) Failed(err error) {
	sc.lb.upgrades[1].Add(1)
	sc.lb.bus.Publish(event.Event{Kind: event.UpgradeFailed, Detail: "binary upgrade failed; this process keeps serving: " + err.Error()})
}

// TookOver says that this process serves in place of the old one of a binary upgrade (its PID and
// version), with the tunnels it adopted and those it closed: the upgraded event, and
// fairlead_upgrades_total{result="ok"} (counted on from the old process's count).
func (sc Succession) TookOver(from handover.Hello, adopted, closed int) {
	sc.lb.upgrades[0].Add(1)
	sc.lb.bus.Publish(event.Event{Kind: event.Upgraded, Detail: fmt.Sprintf("took over from PID %d (%s): %d tunnels adopted, %d closed (their pool or server is gone)",
		from.PID, from.Version, adopted, closed)})
}

// detachTimeout bounds how long a tunnel's move waits for a write toward a slow receiver to finish.
const detachTimeout = 2 * time.Second

// HandOverTunnels stops accepting (the new process accepts on the same sockets) and gives every tunnel
// it can detach (TLS ones with their sessions) to the new process with send, batch by batch; it returns
// how many moved and how many stay (to close with the drain: a TLS session crypto/tls kept, a
// half-closed tunnel, and every one not detached yet once a send failed). Each moved tunnel ends here
// with reason handed over; those of a batch whose send failed are lost (closed).
func (sc Succession) HandOverTunnels(send func([]handover.Tunnel) error) (moved, stayed int) {
	lb := sc.lb
	lb.lns.closeAll() // our descriptors only: the sockets live on in the new process
	var batch []handover.Tunnel
	var failed error // a send failed: the tunnels not detached yet stay here
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if failed = send(batch); failed != nil {
			lb.log.Warn("binary upgrade: handing tunnels over failed: " + failed.Error())
		} else {
			moved += len(batch)
		}
		for _, t := range batch {
			t.ClientFile.Close()
			t.ServerFile.Close()
		}
		batch = batch[:0]
	}
	lb.px.live.Range(func(k, v any) bool {
		t, e := k.(*tunnel.Tunnel), v.(*tunnelEnd)
		if failed != nil {
			stayed++
			return true
		}
		d, err := t.Detach(detachTimeout)
		if err != nil {
			stayed++
			return true
		}
		batch = append(batch, handover.Tunnel{Pool: e.p.name, Server: e.s.Addr, Key: e.key, Client: e.client.String(),
			ProxyLocal: e.local, Opened: e.opened, ClientFile: d.Client, ServerFile: d.Server, ClientTLS: d.ClientTLS, ServerTLS: d.ServerTLS})
		if len(batch) == 100 {
			flush()
		}
		return true
	})
	flush()
	return moved, stayed
}

// Adopt relays a tunnel the old process of a binary upgrade handed over, as its own: in its pool,
// to its server, holding its sticky key, its client the one the old process knew (a PROXY header's for
// a tunnel that came through a proxy_protocol sender), which max_conns_per_source counts it by
// (adoptCount). A tunnel whose pool or server this process's config no longer has is closed (its
// device reconnects). It owns the tunnel's files.
func (sc Succession) Adopt(ht handover.Tunnel) bool {
	lb := sc.lb
	defer func() { // those Resume has not taken
		if ht.ClientFile != nil {
			ht.ClientFile.Close()
		}
		if ht.ServerFile != nil {
			ht.ServerFile.Close()
		}
	}()
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
	client, err := tunnel.Resume(ht.ClientFile, ht.ClientTLS)
	ht.ClientFile = nil
	if err != nil {
		return false
	}
	server, err := tunnel.Resume(ht.ServerFile, ht.ServerTLS)
	ht.ServerFile = nil
	if err != nil {
		client.Close()
		return false
	}
	var release func()
	if st.pins != nil && ht.Key != nil {
		release = st.pins.holdKey(ht.Key)
	}
	end := &tunnelEnd{px: lb.px, p: p, s: s, client: addrOf(ht.Client), local: ht.ProxyLocal, opened: ht.Opened, key: ht.Key}
	uncount := lb.adoptCount(client, ht.Client, ht.ProxyLocal) // max_conns_per_source counts it here from now on
	if !lb.px.relay(st, end, client, server, nil, nil, release, uncount) {
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
