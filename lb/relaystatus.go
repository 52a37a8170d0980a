package lb

// What the relays ([relays.NAME], relayroute.go) show in /status and /metrics.

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// RelayStatus describes a running relay.
type RelayStatus struct {
	Name string `json:"name"` // the NAME of [relays.NAME]
	Path string `json:"path"` // the client-facing path template
	Pool string `json:"pool"` // the pool of upstream servers
	// Start is the start mode; Seeded tells whether a fast start filled the cache from seed_file.
	Start  string `json:"start"`
	Seeded bool   `json:"seeded"`
	// Upstream is the server fetches and sessions go to; ServingBackup tells whether it is not the
	// primary; Switches counts the moves between servers (failovers and failbacks).
	Upstream      string `json:"upstream"`
	ServingBackup bool   `json:"serving_backup"`
	Switches      uint64 `json:"switches"`
	// Sessions is the open upstream events sessions (one per active topic).
	Sessions int `json:"sessions"`
	// Subscribers is the open SSE and WebSocket subscribers of every topic.
	Subscribers int64 `json:"subscribers"`
	// Requests counts the requests served by kind ("snapshot", "sse", "websocket"); Refused counts the
	// requests answered with an error, by status.
	Requests map[string]uint64 `json:"requests"`
	Refused  map[string]uint64 `json:"refused"`
	// SeedWrites and SeedWriteErrors count the writes of seed_file (seed_file_write).
	SeedWrites      uint64 `json:"seed_writes,omitempty"`
	SeedWriteErrors uint64 `json:"seed_write_errors,omitempty"`
	// Topics are the topics held, listed and on demand.
	Topics []TopicStatus `json:"topics"`
}

// TopicStatus describes one topic of a relay.
type TopicStatus struct {
	Topic string `json:"topic"` // the path's values joined by "/"
	// Listed: in the relay's topics (else accepted on demand). Watched: it has an upstream session
	// (an idle topic has none until its next request).
	Listed      bool   `json:"listed"`
	Watched     bool   `json:"watched"`
	Subscribers int    `json:"subscribers"` // open SSE and WebSocket subscribers
	Version     uint64 `json:"version"`     // version of the cached snapshot
	// Seed: the cached snapshot is still the one of the seed file.
	Seed        bool      `json:"seed,omitempty"`
	Fetched     time.Time `json:"fetched,omitzero"` // when the cached snapshot was fetched
	Publishes   uint64    `json:"publishes"`        // new snapshots pushed to subscribers
	Fetches     uint64    `json:"fetches"`          // snapshot fetches ended
	FetchErrors uint64    `json:"fetch_errors"`     // failed snapshot fetches
	Drops       uint64    `json:"drops"`            // subscribers dropped for falling behind
}

// status describes the relay.
func (rr *relayRoute) status() RelayStatus {
	up := rr.up.Current()
	st := RelayStatus{Name: rr.name, Path: rr.cfg.Path, Pool: rr.cfg.Pool, Start: rr.cfg.Start, Seeded: rr.seeded.Load(),
		Upstream: up, ServingBackup: up != rr.up.Primary(), Switches: rr.up.Switches(), Sessions: rr.up.Sessions(), Subscribers: rr.hub.Subscribers(),
		Requests: map[string]uint64{}, Refused: map[string]uint64{},
		SeedWrites: rr.seedWrites.Load(), SeedWriteErrors: rr.seedErrors.Load()}
	for i, k := range relayKinds {
		st.Requests[k] = rr.requests[i].Load()
	}
	for i, code := range relayRefusals {
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

// relayStatuses describes the relays of generation g.
func (g *generation) relayStatuses() []RelayStatus {
	var out []RelayStatus
	for _, b := range g.relays {
		out = append(out, b.rr.status())
	}
	return out
}

// writeRelayMetrics writes the metrics of the relays of g.
func (lb *LB) writeRelayMetrics(w io.Writer, g *generation) {
	for _, st := range g.relayStatuses() {
		l := fmt.Sprintf(`relay=%q`, st.Name)
		metrics.WriteGaugeUint64(w, "fairlead_relay_upstream_sessions{"+l+"}", uint64(st.Sessions))
		metrics.WriteGaugeUint64(w, "fairlead_relay_serving_backup{"+l+"}", boolGauge(st.ServingBackup))
		metrics.WriteCounterUint64(w, "fairlead_relay_upstream_switches_total{"+l+"}", st.Switches)
		metrics.WriteGaugeUint64(w, "fairlead_relay_topics{"+l+"}", uint64(len(st.Topics)))
		metrics.WriteGaugeUint64(w, "fairlead_relay_subscribers_total{"+l+"}", uint64(max(st.Subscribers, 0)))
		for _, k := range relayKinds {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_relay_requests_total{%s,kind=%q}`, l, k), st.Requests[k])
		}
		for _, code := range relayRefusals {
			c := strconv.Itoa(code)
			metrics.WriteCounterUint64(w, fmt.Sprintf(`fairlead_relay_refused_total{%s,code=%q}`, l, c), st.Refused[c])
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
