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
		b.WriteString("leader is now " + orNone(e.Server) + " (was " + orNone(e.Old) + ")")
	case healthcheck.SplitBrain:
		b.WriteString("split brain: " + e.Detail + " " + e.Server)
	default:
		b.WriteString(e.Server + ": " + strings.ReplaceAll(e.Kind.String(), "_", " "))
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
	}
	lb.logf("healthcheck: pool %s: %s", e.Pool, b.String())
}

func orNone(addr string) string {
	if addr == "" {
		return "none"
	}
	return addr
}
