package lb

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// Subscribers of the event stream that the LB itself runs: the event counters and probe latencies (for
// /metrics), the log, and the tunnel closer (tunnels.go).

// pool is g's pool called name, nil if none (or when g is nil: before the first generation).
func (g *generation) pool(name string) *Pool {
	if g == nil {
		return nil
	}
	return g.pools[name]
}

// countEvent counts events by kind and records each probe's latency in its server's histogram.
func (lb *LB) countEvent(e event.Event) {
	if e.Kind < event.NumKinds {
		lb.events[e.Kind].Add(1)
	}
	switch e.Kind {
	case event.CheckAnswered, event.ServerRemoved:
	default:
		return
	}
	p := lb.px.gen.Load().pool(e.Pool)
	if p == nil {
		return
	}
	if e.Kind == event.CheckAnswered {
		p.observeCheck(e.Server, e.Latency)
	} else {
		p.forgetCheck(e.Server)
	}
}

// logEvent writes one line per event, except the routine probe answers: the message says what happened
// in words (servers by their label), the attributes kind, pool, server (the address; for
// leader_changed the new leader), old (the previous leader) and detail say it for machines. Outages,
// where a pool's requests can be served by no server, are errors: a leader pool without a leader, a
// pool with no server available. Events that need an operator's eye (a server down, a split brain, a
// failover, a failed reload) are warnings; the rest is INFO.
// rampOnReturn starts a server's slow_start ramp when it becomes available again: up after it was down
// (or added, then up), or back from maintenance or drain by an operator. The servers coming up in a
// pool's first round of checks (fairlead's start, a new pool) do not ramp.
func (lb *LB) rampOnReturn(e event.Event) {
	if e.Kind != event.ServerUp && (e.Kind != event.AdminAction || e.Admin != event.AdminReady) {
		return
	}
	p := lb.px.gen.Load().pool(e.Pool)
	if p == nil {
		return
	}
	select {
	case <-p.ready():
	default:
		return // its first round
	}
	st := p.view.Load()
	if st.cfg.SlowStart.D <= 0 {
		return
	}
	for _, s := range st.servers {
		if s.Addr == e.Server {
			s.rampFrom.Store(time.Now().UnixNano())
		}
	}
}

// logLevels are the log's levels of the events' severities: an outage is an ERROR line, a loss that
// still serves a WARN line, the rest INFO.
var logLevels = [...]slog.Level{event.SeverityInfo: slog.LevelInfo, event.SeverityOK: slog.LevelInfo,
	event.SeverityWarning: slog.LevelWarn, event.SeverityOutage: slog.LevelError}

func (lb *LB) logEvent(e event.Event) {
	var msg string
	level := logLevels[e.Severity()]
	switch e.Kind {
	case event.CheckAnswered:
		return
	case event.ReloadApplied:
		msg = "reload: config applied"
	case event.ReloadFailed:
		msg = "reload: keeping the running config"
	case event.LeaderChanged:
		msg = "leader is now " + lb.px.gen.Load().serverLabel(e.Pool, e.Server) + " (was " + lb.px.gen.Load().serverLabel(e.Pool, e.Old) + ")"
	case event.PoolDown:
		msg = "pool down: no server is available"
	case event.PoolUp:
		msg = "pool up: a server is available again"
	case event.SplitBrain:
		msg = "split brain: " + lb.px.gen.Load().serverLabel(e.Pool, e.Server)
	case event.Failover:
		msg = "failover: the backups serve"
	case event.Failback:
		msg = "failback: the primaries serve again"
	case event.DiscoveryChanged:
		msg = "discovery: " + e.Detail
	default:
		msg = lb.px.gen.Load().serverLabel(e.Pool, e.Server) + ": " + strings.ReplaceAll(e.Kind.String(), "_", " ")
	}
	attrs := make([]slog.Attr, 1, 5)
	attrs[0] = slog.String("kind", e.Kind.String())
	if e.Pool != "" {
		attrs = append(attrs, slog.String("pool", e.Pool))
	}
	if e.Server != "" {
		attrs = append(attrs, slog.String("server", e.Server))
	}
	if e.Old != "" {
		attrs = append(attrs, slog.String("old", e.Old))
	}
	if e.Detail != "" {
		attrs = append(attrs, slog.String("detail", e.Detail))
	}
	lb.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// serverLabel names the server at addr of g's pool in a log line: "name (address)" when it has a
// display name, its address otherwise, "none" for "".
func (g *generation) serverLabel(pool, addr string) string {
	if addr == "" {
		return "none"
	}
	if g != nil {
		if p := g.pools[pool]; p != nil {
			for _, s := range p.view.Load().servers {
				if s.Addr == addr {
					return s.label()
				}
			}
		}
	}
	return addr
}
