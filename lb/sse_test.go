package lb

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
	"github.com/fairlead/fairlead/bench/testkit"
	"github.com/fairlead/fairlead/lb/admin"
)

// GET /events through a running fairlead: a leader change its health check sees reaches every
// subscriber as leader_changed naming the new and the old leader. The stream itself (snapshots,
// heartbeats, ?checks=1, slow subscribers, Close) is package admin's test.
func TestARealLeaderChangeReachesEveryEventsSubscriberNamingTheNewLeader(t *testing.T) {
	c := startCluster(t, 2, 0)
	p1, p2 := c.Platforms[0], c.Platforms[1]
	l, _ := startLB(t, platformConfig(c, "", ""))

	subs := []*testkit.SSE{testkit.DialSSE(t, l.AdminAddr(), "/events"), testkit.DialSSE(t, l.AdminAddr(), "/events")}
	for _, s := range subs {
		m, err := s.Next(2 * time.Second) // the retry delay first
		if err == nil && m.Event == "" {
			m, err = s.Next(2 * time.Second)
		}
		var st admin.Status
		if err != nil || m.Event != "snapshot" || json.Unmarshal([]byte(m.Data), &st) != nil {
			t.Fatalf("first event %+v, %v; want a snapshot", m, err)
		}
		if len(st.Pools) != 1 || st.Pools[0].Leader != p1.Addr {
			t.Fatalf("first snapshot: pools %+v; want pool platform led by %s", st.Pools, p1.Addr)
		}
	}

	mustSetState(t, p1, sim.Backup)
	mustSetState(t, p2, sim.Leader)
	for i, s := range subs {
		var m testkit.Event
		for m.Event != "leader_changed" {
			var err error
			if m, err = s.Next(5 * time.Second); err != nil {
				t.Fatalf("subscriber %d: waiting for leader_changed: %v", i, err)
			}
		}
		var e admin.StreamEvent
		if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
			t.Fatalf("event data %q: %v", m.Data, err)
		}
		if e.Kind != "leader_changed" || e.Pool != "platform" || e.Server != p2.Addr || e.Old != p1.Addr {
			t.Fatalf("subscriber %d: leader_changed %+v; want platform, server %s, old %s", i, e, p2.Addr, p1.Addr)
		}
		if m.ID == "" || m.ID != strconv.FormatUint(e.Seq, 10) || e.Time.IsZero() {
			t.Fatalf("subscriber %d: id %q, seq %d, time %s: want the id to be the seq and a time", i, m.ID, e.Seq, e.Time)
		}
	}
}
