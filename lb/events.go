package lb

import (
	"strings"

	"github.com/fairlead/fairlead/healthcheck"
)

// Subscribers of the event stream that the LB itself runs: the event counters (for /metrics), the log,
// and the tunnel closer (tunnels.go).

func (lb *LB) countEvent(e healthcheck.Event) {
	if e.Kind < healthcheck.NumKinds {
		lb.events[e.Kind].Add(1)
	}
}

// logEvent writes one line per event, except the routine probe answers.
func (lb *LB) logEvent(e healthcheck.Event) {
	var b strings.Builder
	switch e.Kind {
	case healthcheck.CheckAnswered:
		return
	case healthcheck.ReloadApplied:
		lb.logf("reload: config applied (%s)", e.Detail)
		return
	case healthcheck.ReloadFailed:
		lb.logf("reload: keeping the running config: %s", e.Detail)
		return
	case healthcheck.LeaderChanged:
		b.WriteString("leader is now " + lb.serverLabel(e.Pool, e.Server) + " (was " + lb.serverLabel(e.Pool, e.Old) + ")")
	case healthcheck.SplitBrain:
		b.WriteString("split brain: " + e.Detail + " " + lb.serverLabel(e.Pool, e.Server))
	case healthcheck.Failover, healthcheck.Failback:
		b.WriteString(e.Kind.String() + ": " + e.Detail)
	default:
		b.WriteString(lb.serverLabel(e.Pool, e.Server) + ": " + strings.ReplaceAll(e.Kind.String(), "_", " "))
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
	}
	lb.logf("healthcheck: pool %s: %s", e.Pool, b.String())
}

// serverLabel names the server at addr of pool in a log line: "name (address)" when it has a display
// name, its address otherwise, "none" for "".
func (lb *LB) serverLabel(pool, addr string) string {
	if addr == "" {
		return "none"
	}
	if g := lb.gen.Load(); g != nil {
		if p := g.pools[pool]; p != nil {
			for _, s := range p.state.Load().servers {
				if s.Addr == addr {
					return s.label()
				}
			}
		}
	}
	return addr
}
