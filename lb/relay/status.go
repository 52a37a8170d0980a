package relay

// What a relay shows in /api/status and /metrics.

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fairlead/fairlead/lb/admin"
)

// Status describes the relay.
func (rr *Route) Status() admin.RelayStatus {
	up := rr.origin.Current()
	st := admin.RelayStatus{Name: rr.name, Protocol: rr.spec.Protocol, GUID: rr.spec.GUID, Path: rr.cfg.Path,
		Pool: rr.cfg.Pool, Start: rr.cfg.Start, Seeded: rr.seeded.Load(),
		Upstream: up, ServingBackup: slices.Contains(rr.backups, up), Switches: rr.origin.Switches(), Sessions: rr.origin.Sessions(), Subscribers: rr.hub.Subscribers(),
		Requests: map[string]uint64{}, Refused: map[string]uint64{},
		SeedWrites: rr.seedWrites.Load(), SeedWriteErrors: rr.seedErrors.Load()}
	for i, k := range kinds {
		st.Requests[k] = rr.requests[i].Load()
	}
	if rr.tokens != nil {
		ts := rr.tokens.Status()
		st.IAM = &admin.IAMStatus{URL: rr.spec.IAMURL, TokenExpires: ts.Expires, Tokens: ts.Issued, Failures: ts.Failures}
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
		t := admin.TopicStatus{Topic: ts.Topic, Listed: rr.spec.Listed[ts.Topic], Watched: watched[ts.Topic],
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
func WriteMetrics(w io.Writer, relays []admin.RelayStatus) {
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
