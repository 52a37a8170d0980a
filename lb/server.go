package lb

import (
	"golang.org/x/time/rate"
	"hash/fnv"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/healthcheck"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/upstream"
)

// Server is one upstream server of a pool, keyed by its address. It lives as long as its address stays
// in the pool: a reload or a server set change that keeps the address keeps the Server with its health,
// leader role, sticky keys, open tunnels, upstream connections and counters.
type Server struct {
	Addr   string
	target *healthcheck.Target // written only by healthcheck
	client atomic.Pointer[upstream.Client]
	// cookie is the sticky cookie value naming this server (see serverCookie).
	cookie string
	// removed is set when a server set change drops the server: it takes no new traffic, its in-flight
	// requests finish on its client, its tunnels are closed.
	removed atomic.Bool
	// opState is the operator's state (adminReady, adminDrain, adminMaint), set through the admin API; it
	// survives reloads that keep the server.
	opState atomic.Int32

	// name is the display name for logs, /status and metrics ([pools.NAME.names]; default the address).
	name atomic.Pointer[string]

	inflight      atomic.Int64  // requests sent whose response head has not arrived yet
	inflightBytes atomic.Int64  // their request-body bytes (Content-Length, or chunked bytes streamed)
	tunnels       atomic.Int64  // open tunnels
	requests      atomic.Uint64 // requests forwarded (each attempt), upgrades included
	failures      atomic.Uint64 // attempts that ended in a transport error

	// waitedFrom is since when requests in flight to s have ended none (unix nanoseconds; meaningful
	// while inflight > 0): stored when inflight rises from 0 and when one ends with others still in
	// flight (admin.ServerStatus.InFlightSince says why not each request's start).
	waitedFrom atomic.Int64

	// new_tunnels_per_second (admission.go): the server's limiter of new tunnels, and the upgrades it
	// made wait and refused.
	admit                          atomic.Pointer[rate.Limiter]
	tunnelsDelayed, tunnelsLimited atomic.Uint64

	// rampFrom is when the server last became available (unix nanoseconds; 0: at start, or never):
	// slow_start ramps its share of new placements from then (weight).
	rampFrom atomic.Int64
}

// weight is s's share of new placements at now (unix nanoseconds) under slow_start: from 0 when it
// became available to 1 after slowStart; 1 without a ramp.
func (s *Server) weight(now int64, slowStart time.Duration) float64 {
	from := s.rampFrom.Load()
	if slowStart <= 0 || from == 0 || now-from >= int64(slowStart) {
		return 1
	}
	return max(float64(now-from)/float64(slowStart), 0.001)
}

func newServer(addr string, cfg *config.Pool) *Server {
	s := &Server{Addr: addr, target: healthcheck.NewTarget(addr), cookie: serverCookie(addr)}
	s.client.Store(newTransport(addr, cfg))
	s.configure(cfg)
	return s
}

// configure applies the parts of a pool config that concern s alone: its display name and its tier.
// The pool calls it before it hands the server's target to the health check.
func (s *Server) configure(cfg *config.Pool) {
	name := s.Addr
	if n := cfg.Names[s.Addr]; n != "" {
		name = n
	}
	if old := s.name.Load(); old == nil || *old != name {
		s.name.Store(&name)
	}
	s.target.SetBackup(slices.Contains(cfg.Backups, s.Addr))
}

// Name is the server's display name: its configured name, or its address.
func (s *Server) Name() string { return *s.name.Load() }

// label names the server in logs: "name (address)", or the address when it has no name of its own.
func (s *Server) label() string {
	if n := s.Name(); n != s.Addr {
		return n + " (" + s.Addr + ")"
	}
	return s.Addr
}

// Backup reports whether s is a backup server of its pool.
func (s *Server) Backup() bool { return s.target.Backup() }

// begin counts one attempt in flight to s, with n request-body bytes. Pool.end ends it. Without
// allocating: the clock is read only when s had nothing in flight.
func (s *Server) begin(n int64) {
	if s.inflight.Add(1) == 1 {
		s.waitedFrom.Store(time.Now().UnixNano())
	}
	if n != 0 {
		s.inflightBytes.Add(n)
	}
}

// end ends an attempt begin counted, with n request-body bytes. Without allocating: the clock is read
// only when other requests remain in flight (the last one's end needs no time: nothing waits).
func (s *Server) end(n int64) {
	if s.inflight.Add(-1) > 0 {
		s.waitedFrom.Store(time.Now().UnixNano())
	}
	if n != 0 {
		s.inflightBytes.Add(-n)
	}
}

// inFlightSince is admin.ServerStatus.InFlightSince: since when s's requests in flight have ended
// none; zero when none is in flight.
func (s *Server) inFlightSince() time.Time {
	if s.inflight.Load() <= 0 {
		return time.Time{}
	}
	return time.Unix(0, s.waitedFrom.Load())
}

// writable reports whether s is below its watermarks: fewer than hw requests in flight (hw 0: no
// limit) and fewer than hwb request-body bytes (hwb 0: no limit). Writability is not part of
// Available: a roundrobin pool skips unwritable servers; they stay up.
func (s *Server) writable(hw int, hwb int64) bool {
	return (hw <= 0 || s.inflight.Load() < int64(hw)) && (hwb <= 0 || s.inflightBytes.Load() < hwb)
}

// Available is the one predicate that says whether s may take new traffic now: its health checks pass
// (in a leader pool: it is the elected leader), it is still in its pool, and the operator has not put
// it in drain or maintenance. Policies choose only among
// available servers; the admin reports it. Lock-free: three atomic loads.
func (s *Server) Available() bool {
	return s.target.Up() && !s.removed.Load() && s.opState.Load() == adminReady
}

// keepsTunnels reports whether s keeps its open tunnels: it is up, in its pool, and not in maintenance
// (a server draining takes no new traffic but keeps its tunnels). When it turns false its tunnels are
// closed (closeTunnels, tunnels.go).
func (s *Server) keepsTunnels() bool {
	return s.target.Up() && !s.removed.Load() && s.opState.Load() != adminMaint
}

// The operator's states of a server (admin API): ready takes traffic as its health allows; drain takes
// no new traffic and keeps its tunnels; maint takes no traffic and its tunnels are closed.
const (
	adminReady = iota
	adminDrain
	adminMaint
)

var adminStates = [...]string{"ready", "drain", "maint"}

// state names the server's state for /status.
func (s *Server) state() string {
	switch {
	case s.removed.Load():
		return "removed"
	case s.opState.Load() != adminReady:
		return adminStates[s.opState.Load()]
	case s.target.Up():
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
