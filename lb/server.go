package lb

import (
	"hash/fnv"
	"strconv"
	"sync/atomic"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/valyala/fasthttp"
)

// Server is one upstream server of a pool, keyed by its address. It lives as long as its address stays
// in the pool: a reload or a server set change that keeps the address keeps the Server with its health,
// leader role, sticky keys, open tunnels, upstream connections and counters.
type Server struct {
	Addr   string
	health *healthcheck.Target // written only by healthcheck
	client atomic.Pointer[fasthttp.HostClient]
	// cookie is the sticky cookie value naming this server (see serverCookie).
	cookie string
	// removed is set when a server set change drops the server: it takes no new traffic, its in-flight
	// requests finish on its client, its tunnels are closed.
	removed atomic.Bool

	inflight atomic.Int64  // requests sent whose response head has not arrived yet
	tunnels  atomic.Int64  // open tunnels
	requests atomic.Uint64 // requests forwarded (each attempt), upgrades included
	failures atomic.Uint64 // attempts that ended in a transport error
}

func newServer(addr string, cfg *PoolConfig) *Server {
	s := &Server{Addr: addr, health: healthcheck.NewTarget(addr), cookie: serverCookie(addr)}
	s.client.Store(newTransport(addr, cfg))
	return s
}

// Available is the one predicate that says whether s may take new traffic now: its health checks pass
// (in a leader pool: it is the elected leader) and it is still in its pool. Policies choose only among
// available servers; the admin reports it. Lock-free: two atomic loads.
func (s *Server) Available() bool { return s.health.Up() && !s.removed.Load() }

// state names the server's state for /status.
func (s *Server) state() string {
	switch {
	case s.removed.Load():
		return "removed"
	case s.health.Up():
		return "up"
	default:
		return "down"
	}
}

// serverCookie is the sticky cookie value naming a server: a hash of its address, the same in every
// fairlead with the same config, that does not reveal the address.
func serverCookie(addr string) string {
	h := fnv.New64a()
	h.Write([]byte(addr)) //nolint:errcheck // hash writes never fail
	return strconv.FormatUint(h.Sum64(), 36)
}
