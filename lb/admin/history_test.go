package admin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fairlead/fairlead/healthcheck/event"
)

// History takes the time as an argument: these tests drive it with chosen times, without sleeps.

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func TestTheRateHistoryCountsEachPoolsRequestsAndErrorsPerStepForAnHour(t *testing.T) {
	h := NewHistory()
	sample := func(at time.Duration, req, errs uint64) {
		h.Sample(t0.Add(at), []PoolCount{{Pool: "platform", Requests: req, Errors: errs}})
	}
	rates := func() *RateHistory {
		st := Status{Pools: []PoolStatus{{Name: "platform"}}}
		h.Fill(&st)
		return st.Pools[0].Rates
	}
	sample(0, 100, 1) // the first sample sets the counters only
	sample(time.Second, 110, 1)
	sample(9*time.Second, 130, 2)
	sample(10*time.Second, 135, 2)
	sample(35*time.Second, 175, 6) // two steps without a sample: empty, the counts go to the step sampled
	r := rates()
	if r.StepSeconds != 10 || !r.Start.Equal(t0) || !r.Through.Equal(t0.Add(35*time.Second)) ||
		!slices.Equal(r.Requests, []uint64{30, 5, 0, 40}) || !slices.Equal(r.Errors, []uint64{1, 0, 0, 4}) {
		t.Fatalf("rates %+v; want from %v through +35s: requests 30 5 0 40, errors 1 0 0 4", r, t0)
	}

	// A counter that goes back (a reload replaced the pool) counts from zero.
	sample(41*time.Second, 3, 0)
	if r := rates(); r.Requests[4] != 3 {
		t.Fatalf("after a counter reset the step counts %d; want 3", r.Requests[4])
	}

	// An hour later only the last hour is kept: 360 steps, the oldest dropped.
	for i := range 400 {
		sample(50*time.Second+time.Duration(i)*10*time.Second, uint64(10*i), 0)
	}
	r = rates()
	if len(r.Requests) != RateSlots || !r.Start.Equal(t0.Add(50*time.Second+399*10*time.Second-(RateSlots-1)*RateStep)) || r.Requests[RateSlots-1] != 10 {
		t.Fatalf("after 400 more steps: %d steps from %v, last %d; want %d steps, the last 10", len(r.Requests), r.Start, r.Requests[len(r.Requests)-1], RateSlots)
	}

	// A pool that is no longer sampled is forgotten; the /events stream's later snapshots carry the
	// last steps only.
	recent := Status{Pools: []PoolStatus{{Name: "platform", Rates: r}}}.recent(3)
	if got := recent.Pools[0].Rates; len(got.Requests) != 3 || !got.Start.Equal(r.Start.Add(357*RateStep)) || len(r.Requests) != RateSlots {
		t.Fatalf("recent(3): %d steps from %v (the original keeps %d)", len(got.Requests), got.Start, len(r.Requests))
	}
	h.Sample(t0.Add(2*time.Hour), nil)
	if r := rates(); r != nil {
		t.Fatalf("a pool gone from the samples still has rates %+v", r)
	}
}

func TestEachServerKnowsSinceWhenItIsInItsStateAndItsLastChange(t *testing.T) {
	h := NewHistory()
	observe := func(at time.Duration, state string) ServerStatus {
		st := Status{Pools: []PoolStatus{{Name: "platform", Servers: []ServerStatus{{Addr: "10.0.0.1:8080", State: state}}}}}
		h.Observe(t0.Add(at), &st)
		return st.Pools[0].Servers[0]
	}
	if s := observe(0, StateUp); !s.Since.Equal(t0) || s.LastChange != nil {
		t.Fatalf("first seen: since %v, last change %+v; want %v and none", s.Since, s.LastChange, t0)
	}
	if s := observe(5*time.Second, StateUp); !s.Since.Equal(t0) {
		t.Fatalf("still up: since %v; want %v", s.Since, t0)
	}
	s := observe(7*time.Second+300*time.Millisecond, StateDown)
	if want := (StateChange{From: StateUp, To: StateDown, Time: t0.Add(7 * time.Second)}); !s.Since.Equal(want.Time) || s.LastChange == nil || *s.LastChange != want {
		t.Fatalf("down: since %v, last change %+v; want %+v", s.Since, s.LastChange, want)
	}
	// A late observation, computed before the last one, changes nothing.
	if s := observe(6*time.Second, StateUp); s.State != StateUp || !s.Since.Equal(t0.Add(7*time.Second)) || s.LastChange.To != StateDown {
		t.Fatalf("a late observation changed the history: since %v, last change %+v", s.Since, s.LastChange)
	}
	s = observe(20*time.Second, StateStandby)
	if !s.Since.Equal(t0.Add(20*time.Second)) || s.LastChange.From != StateDown || s.LastChange.To != StateStandby {
		t.Fatalf("standby: since %v, last change %+v", s.Since, s.LastChange)
	}
}

func TestAnAlarmKeepsItsStartWhileItLastsAndStartsAgainAfterwards(t *testing.T) {
	h := NewHistory()
	observe := func(at time.Duration, alarms ...Alarm) []Alarm {
		st := Status{Alarms: alarms}
		h.Observe(t0.Add(at), &st)
		return st.Alarms
	}
	noLeader := Alarm{Kind: AlarmNoLeader, Pool: "platform"}
	if a := observe(0, noLeader); !a[0].Since.Equal(t0) {
		t.Fatalf("since %v; want %v", a[0].Since, t0)
	}
	if a := observe(30*time.Second, noLeader); !a[0].Since.Equal(t0) {
		t.Fatalf("while it lasts: since %v; want %v", a[0].Since, t0)
	}
	observe(40 * time.Second)
	if a := observe(50*time.Second, noLeader); !a[0].Since.Equal(t0.Add(50 * time.Second)) {
		t.Fatalf("a new alarm: since %v; want +50s", a[0].Since)
	}
}

func TestTheEventHistoryKeepsTheLast500EventsAndTheLastFailedReloadWhileItIsTheLatest(t *testing.T) {
	h := NewHistory()
	fill := func() Status {
		var st Status
		h.Fill(&st)
		return st
	}
	if st := fill(); st.Events == nil || len(st.Events) != 0 || st.LastReloadFailed != nil {
		t.Fatalf("empty history: events %v (want [], not null), reload %+v", st.Events, st.LastReloadFailed)
	}
	h.Record(event.Event{Seq: 1, Time: t0, Kind: event.ReloadFailed, Detail: "conf.d/10.toml: pools.x: unknown key"})
	h.Record(event.Event{Seq: 2, Time: t0, Kind: event.CheckAnswered, Pool: "platform", Status: 200})
	h.Record(event.Event{Seq: 3, Time: t0, Kind: event.LeaderChanged, Pool: "platform", Server: "b", Old: "a"})
	st := fill()
	if st.LastReloadFailed == nil || st.LastReloadFailed.Detail != "conf.d/10.toml: pools.x: unknown key" || len(st.Events) != 2 ||
		st.Events[1].Kind != "leader_changed" || st.Events[1].Old != "a" {
		t.Fatalf("reload %+v, events %+v; want the failure and two events (no probe answer)", st.LastReloadFailed, st.Events)
	}
	h.Record(event.Event{Seq: 4, Time: t0, Kind: event.ReloadApplied})
	if st := fill(); st.LastReloadFailed != nil {
		t.Fatalf("after a reload applied the failure is still shown: %+v", st.LastReloadFailed)
	}
	h.Record(event.Event{Seq: 5, Time: t0, Kind: event.ReloadFailed, Detail: strings.Repeat("é", 1000)})
	if st := fill(); len(st.Events[len(st.Events)-1].Detail) > EventDetailMax || !utf8.ValidString(st.Events[len(st.Events)-1].Detail) ||
		len(st.LastReloadFailed.Detail) != 2000 {
		t.Fatalf("a long detail is kept as %d bytes (valid UTF-8: %v); the reload failure's as %d", len(st.Events[len(st.Events)-1].Detail),
			utf8.ValidString(st.Events[len(st.Events)-1].Detail), len(st.LastReloadFailed.Detail))
	}
	for i := range 600 {
		h.Record(event.Event{Seq: uint64(5 + i), Time: t0, Kind: event.ServerDown, Pool: "p", Server: fmt.Sprint(i)})
	}
	st = fill()
	if len(st.Events) != EventHistory || st.Events[0].Seq != 105 || st.Events[EventHistory-1].Seq != 604 {
		t.Fatalf("%d events, seq %d to %d; want %d, 105 to 604", len(st.Events), st.Events[0].Seq, st.Events[len(st.Events)-1].Seq, EventHistory)
	}
}

// A binary upgrade hands the history over (Export, through JSON, Import): the new process's page shows
// the old one's events in their order and times, then its own; each pool's rates go on in the same
// steps, counting the new process's counters from zero; a server up before the switch is up since the
// same time, and an alarm that lasts keeps its start.
func TestTheHistoryPassesToANewProcessAndGoesOn(t *testing.T) {
	old := NewHistory()
	for i := range EventHistory + 20 {
		old.Record(event.Event{Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Second), Kind: event.ServerDown, Pool: "platform", Server: "a"})
	}
	old.Record(event.Event{Seq: EventHistory + 21, Time: t0.Add(time.Hour), Kind: event.ReloadFailed, Detail: "bad"})
	old.Sample(t0, []PoolCount{{Pool: "platform", Requests: 1000, Errors: 10}})
	old.Sample(t0.Add(15*time.Second), []PoolCount{{Pool: "platform", Requests: 1100, Errors: 12}})
	noLeader := Alarm{Kind: AlarmNoLeader, Pool: "platform", Severity: SeverityCritical}
	observe := func(h *History, at time.Duration, state string, alarms ...Alarm) Status {
		st := Status{Pools: []PoolStatus{{Name: "platform", Servers: []ServerStatus{{Addr: "a", State: state}}}}, Alarms: alarms}
		h.Observe(t0.Add(at), &st)
		return st
	}
	observe(old, 0, StateDown)
	observe(old, 3*time.Second, StateUp, noLeader)

	b, err := json.Marshal(old.Export())
	if err != nil {
		t.Fatal(err)
	}
	var hs HistoryState
	if err := json.Unmarshal(b, &hs); err != nil {
		t.Fatal(err)
	}
	nu := NewHistory()
	// An event of the new process before the import (its pools' restore) comes after the old ones.
	nu.Record(event.Event{Seq: EventHistory + 22, Time: t0.Add(time.Hour + time.Second), Kind: event.ServerUp, Pool: "platform", Server: "a"})
	nu.Import(hs)
	nu.Record(event.Event{Seq: EventHistory + 23, Time: t0.Add(time.Hour + 2*time.Second), Kind: event.Upgraded})
	nu.Sample(t0.Add(18*time.Second), []PoolCount{{Pool: "platform", Requests: 7, Errors: 1}}) // this process's counters
	st := observe(nu, 20*time.Second, StateUp, noLeader)
	nu.Fill(&st)

	ev := st.Events
	if len(ev) != EventHistory || ev[len(ev)-1].Kind != "upgraded" || ev[len(ev)-2].Kind != "server_up" || ev[len(ev)-3].Kind != "reload_failed" ||
		ev[0].Seq != 24 || !ev[0].Time.Equal(t0.Add(23*time.Second)) {
		t.Fatalf("events after the import: %d, first %+v, last three %+v; want the last %d of the old ones, then server_up and upgraded",
			len(ev), ev[0], ev[len(ev)-3:], EventHistory-2)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].Seq != ev[i-1].Seq+1 || ev[i].Time.Before(ev[i-1].Time) {
			t.Fatalf("events out of order at %d: %+v then %+v", i, ev[i-1], ev[i])
		}
	}
	if st.LastReloadFailed == nil || st.LastReloadFailed.Detail != "bad" {
		t.Errorf("the last failed reload after the import: %+v", st.LastReloadFailed)
	}
	r := st.Pools[0].Rates
	if r == nil || !r.Start.Equal(t0) || !slices.Equal(r.Requests, []uint64{0, 107}) || !slices.Equal(r.Errors, []uint64{0, 3}) {
		t.Fatalf("rates after the import %+v; want from %v: requests 0 then 100+7, errors 0 then 2+1", r, t0)
	}
	if s := st.Pools[0].Servers[0]; !s.Since.Equal(t0.Add(3*time.Second)) || s.LastChange == nil || s.LastChange.From != StateDown {
		t.Errorf("the server after the import: since %v, last change %+v; want up since +3s, from down", s.Since, s.LastChange)
	}
	if a := st.Alarms[0]; !a.Since.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("the alarm after the import: since %v, want +3s", a.Since)
	}
}
