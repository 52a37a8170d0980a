package relay

// What a relay reports of itself: package lb puts it in /api/status (admin.RelayStatus, whose fields
// say what each means to an operator) and WriteMetrics in /metrics. The relay knows nothing of the
// admin document.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Status is what a running relay reports: its spec, its upstream, its counts and its topics.
type Status struct {
	Name, Protocol, GUID, Path, Pool, Start string
	Seeded                                  bool
	Upstream                                string // the pool's choice, which fetches and sessions go to
	ServingBackup                           bool
	Switches                                uint64
	Sessions                                int
	Subscribers                             int64
	Requests, Refused                       map[string]uint64 // by kind; by status
	SeedWrites, SeedWriteErrors             uint64
	IAM                                     *IAMStatus // App Configuration relays
	Topics                                  []TopicStatus
}

// IAMStatus is an App Configuration relay's token source: never a token.
type IAMStatus struct {
	URL              string
	TokenExpires     time.Time
	Tokens, Failures uint64
}

// TopicStatus is one topic held by a relay.
type TopicStatus struct {
	Topic                                  string
	Listed, Watched, Seed                  bool
	Subscribers                            int
	Version                                uint64
	Fetched                                time.Time
	Publishes, Fetches, FetchErrors, Drops uint64
}

// Status reports the relay.
func (rr *Route) Status() Status {
	up := rr.origin.Current()
	st := Status{Name: rr.name, Protocol: rr.spec.Protocol, GUID: rr.spec.GUID, Path: rr.cfg.Path,
		Pool: rr.cfg.Pool, Start: rr.cfg.Start, Seeded: rr.seeded.Load(),
		Upstream: up, ServingBackup: slices.Contains(rr.backups, up), Switches: rr.origin.Switches(), Sessions: rr.origin.Sessions(), Subscribers: rr.hub.Subscribers(),
		Requests: map[string]uint64{}, Refused: map[string]uint64{},
		SeedWrites: rr.seedWrites.Load(), SeedWriteErrors: rr.seedErrors.Load()}
	for i, k := range kinds {
		st.Requests[k] = rr.requests[i].Load()
	}
	if rr.tokens != nil {
		ts := rr.tokens.Status()
		st.IAM = &IAMStatus{URL: rr.spec.IAMURL, TokenExpires: ts.Expires, Tokens: ts.Issued, Failures: ts.Failures}
	}
	for i, code := range refusals {
		st.Refused[strconv.Itoa(code)] = rr.refused[i].Load()
	}
	rr.mu.Lock()
	watched := make(map[string]bool, len(rr.watched))
	for t := range rr.watched {
		watched[t] = true
	}
	rr.mu.Unlock()
	for _, ts := range rr.hub.Topics() {
		t := TopicStatus{Topic: ts.Topic, Listed: rr.spec.Listed[ts.Topic], Watched: watched[ts.Topic],
			Subscribers: ts.Subscribers, Version: ts.Version, Fetched: ts.Fetched, Publishes: ts.Publishes,
			Fetches: ts.Fetches, FetchErrors: ts.FetchErrors, Drops: ts.Drops}
		if s := rr.hub.Snapshot(ts.Topic); s != nil {
			t.Seed = s.Seed
		}
		st.Topics = append(st.Topics, t)
	}
	return st
}

// WriteMetrics writes the metrics of relays, as Status describes them.
func WriteMetrics(w io.Writer, relays []Status) {
	for _, st := range relays {
		l := fmt.Sprintf(`relay=%q`, st.Name)
		metrics.WriteGaugeUint64(w, "fairlead_relay_upstream_sessions{"+l+"}", uint64(st.Sessions))
		backup := uint64(0)
		if st.ServingBackup {
			backup = 1
		}
		metrics.WriteGaugeUint64(w, "fairlead_relay_serving_backup{"+l+"}", backup)
		metrics.WriteCounterUint64(w, "fairlead_relay_upstream_switches_total{"+l+"}", st.Switches)
		metrics.WriteGaugeUint64(w, "fairlead_relay_topics{"+l+"}", uint64(len(st.Topics)))
		metrics.WriteGaugeUint64(w, "fairlead_relay_subscribers_all_topics{"+l+"}", uint64(max(st.Subscribers, 0)))
		for _, k := range kinds {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_relay_requests_total{%s,kind=%q}`, l, k), st.Requests[k])
		}
		for _, code := range refusals {
			c := strconv.Itoa(code)
			metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_relay_refused_total{%s,code=%q}`, l, c), st.Refused[c])
		}
		if st.IAM != nil {
			metrics.WriteCounterUint64(w, "fairlead_relay_iam_tokens_total{"+l+"}", st.IAM.Tokens)
			metrics.WriteCounterUint64(w, "fairlead_relay_iam_failures_total{"+l+"}", st.IAM.Failures)
		}
		metrics.WriteCounterUint64(w, "fairlead_relay_seed_writes_total{"+l+"}", st.SeedWrites)
		metrics.WriteCounterUint64(w, "fairlead_relay_seed_write_errors_total{"+l+"}", st.SeedWriteErrors)
		for _, t := range st.Topics {
			tl := fmt.Sprintf(`%s,topic=%q`, l, t.Topic)
			metrics.WriteGaugeUint64(w, "fairlead_relay_subscribers{"+tl+"}", uint64(t.Subscribers))
			metrics.WriteGaugeUint64(w, "fairlead_relay_snapshot_version{"+tl+"}", t.Version)
			metrics.WriteCounterUint64(w, "fairlead_relay_publishes_total{"+tl+"}", t.Publishes)
			metrics.WriteCounterUint64(w, "fairlead_relay_fetches_total{"+tl+"}", t.Fetches)
			metrics.WriteCounterUint64(w, "fairlead_relay_fetch_errors_total{"+tl+"}", t.FetchErrors)
			metrics.WriteCounterUint64(w, "fairlead_relay_drops_total{"+tl+"}", t.Drops)
		}
	}
}
