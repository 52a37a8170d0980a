package event

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestBusCallsSubscribersInSubscriptionOrderWithIncreasingSeq(t *testing.T) {
	b := NewBus()
	var log []string
	sub := func(name string) func() {
		return b.Subscribe(func(e Event) { log = append(log, name+strconv.FormatUint(e.Seq, 10)) })
	}
	sub("a")
	cancelB := sub("b")
	sub("c")
	cancelB()
	sub("d")
	for range 3 {
		b.Publish(Event{Kind: ServerUp})
	}
	want := []string{"a1", "c1", "d1", "a2", "c2", "d2", "a3", "c3", "d3"}
	if !slices.Equal(log, want) {
		t.Fatalf("calls %v, want %v", log, want)
	}
}

func TestBusCancelStopsDelivery(t *testing.T) {
	b := NewBus()
	var got []uint64
	cancel := b.Subscribe(func(e Event) { got = append(got, e.Seq) })
	b.Publish(Event{Kind: ServerDown})
	cancel()
	b.Publish(Event{Kind: ServerDown})
	cancel() // twice is harmless
	b.Publish(Event{Kind: ServerDown})
	if !slices.Equal(got, []uint64{1}) {
		t.Fatalf("delivered %v, want only the event before cancel", got)
	}
}

func TestBusPublishKeepsTheEventAndStampsAMissingTime(t *testing.T) {
	b := NewBus()
	var got []Event
	b.Subscribe(func(e Event) { got = append(got, e) })
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	in := Event{Seq: 99, Time: at, Kind: LeaderChanged, Pool: "p", Server: "a:1", Old: "b:1", Detail: "why"}
	b.Publish(in)
	before := time.Now()
	b.Publish(Event{Kind: ReloadApplied})
	want := in
	want.Seq = 1
	if len(got) != 2 || got[0] != want {
		t.Fatalf("delivered %+v, want %+v", got, want)
	}
	if got[1].Seq != 2 || got[1].Time.Before(before) {
		t.Fatalf("second event %+v: want Seq 2 and a time stamped by Publish", got[1])
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestBusChangedIsClosedByTheNextChangeOfItsPoolOnly(t *testing.T) {
	b := NewBus()
	ch := b.Changed("a")
	if closed(ch) || b.Changed("a") != ch {
		t.Fatal("Changed before any Publish: want the same open channel")
	}
	var closedInSubscriber bool
	b.Subscribe(func(Event) { closedInSubscriber = closed(ch) })
	b.Publish(Event{Kind: ServerUp, Pool: "b"})
	b.Publish(Event{Kind: CheckAnswered, Pool: "a", Status: 200})
	b.Publish(Event{Kind: SplitBrain, Pool: "a"})
	b.Publish(Event{Kind: ReloadFailed})
	if closed(ch) {
		t.Fatal("another pool's change, a probe answer, a split brain or a failed reload woke pool a")
	}
	b.Publish(Event{Kind: ServerDown, Pool: "a"})
	if !closed(ch) {
		t.Fatal("a server of pool a going down did not close its channel")
	}
	if closedInSubscriber {
		t.Fatal("Changed was closed before the subscribers ran")
	}
	fresh := b.Changed("a")
	if fresh == ch || closed(fresh) {
		t.Fatal("Changed after a change: want a fresh open channel")
	}
}

func TestBusChangedIsClosedByEveryKindThatChangesWhatAPoolServesWith(t *testing.T) {
	f := func(e Event, pools ...string) {
		t.Helper()
		b := NewBus()
		a, c := b.Changed("a"), b.Changed("c")
		b.Publish(e)
		if got := []bool{closed(a), closed(c)}; !slices.Equal(got, []bool{slices.Contains(pools, "a"), slices.Contains(pools, "c")}) {
			t.Fatalf("%v in pool %q: woke a, c = %v, want %v", e.Kind, e.Pool, got, pools)
		}
	}
	for _, k := range []Kind{ServerUp, ServerDown, ServerAdded, ServerRemoved, LeaderChanged, AdminAction, DiscoveryChanged} {
		f(Event{Kind: k, Pool: "a"}, "a")
	}
	for _, k := range []Kind{CheckAnswered, SplitBrain, Failover, Failback, PoolDown, PoolUp} {
		f(Event{Kind: k, Pool: "a"})
	}
	f(Event{Kind: ReloadApplied}, "a", "c")
	f(Event{Kind: ReloadFailed})
}

func TestBusWakeWakesOnePoolWithoutAnEvent(t *testing.T) {
	b := NewBus()
	var n int
	b.Subscribe(func(Event) { n++ })
	a, c := b.Changed("a"), b.Changed("c")
	b.Wake("a")
	b.Wake("nobody waits")
	if !closed(a) || closed(c) || n != 0 {
		t.Fatalf("Wake(a): a closed %v, c closed %v, %d events delivered", closed(a), closed(c), n)
	}
}

func TestAdminStatesHaveNames(t *testing.T) {
	for a, want := range map[Admin]string{AdminNone: "", AdminReady: "ready", AdminDrain: "drain", AdminMaint: "maint", 9: "admin(9)"} {
		if a.String() != want {
			t.Errorf("%d is %q, want %q", a, a.String(), want)
		}
	}
}

func TestKindsHaveNames(t *testing.T) {
	want := []string{"server_up", "server_down", "server_added", "server_removed", "leader_changed",
		"split_brain", "check_answered", "reload_applied", "reload_failed", "failover", "failback", "admin_action",
		"discovery_changed", "pool_down", "pool_up", "upgraded", "upgrade_failed", "cert_obtained", "cert_failed"}
	var got []string
	for _, k := range Kinds() {
		got = append(got, k.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	if s := Kind(0).String(); s != "kind(0)" {
		t.Fatalf("Kind(0) is %q, want kind(0)", s)
	}
	if s := NumKinds.String(); s != "kind(20)" {
		t.Fatalf("an unknown kind is %q, want kind(20)", s)
	}
}

// Issue 36: "pool down" and "leader changed → none" were grey and blue on the status page while a
// routine "server down" was red. Every kind has its severity by meaning, in one place.
func TestEverySeverityIsByMeaning(t *testing.T) {
	tested := map[Kind]bool{}
	f := func(e Event, want string) {
		t.Helper()
		tested[e.Kind] = true
		if got := e.Severity().String(); got != want {
			t.Errorf("%s (server %q): severity %s, want %s", e.Kind, e.Server, got, want)
		}
	}
	// Outages: nothing serves.
	f(Event{Kind: PoolDown}, "outage")
	f(Event{Kind: LeaderChanged, Old: "10.0.0.1:8080"}, "outage")
	// Losses that still serve.
	f(Event{Kind: ServerDown, Server: "10.0.0.2:8080"}, "warn")
	f(Event{Kind: Failover}, "warn")
	f(Event{Kind: SplitBrain, Server: "10.0.0.2:8080"}, "warn")
	f(Event{Kind: ReloadFailed}, "warn")
	f(Event{Kind: UpgradeFailed}, "warn")
	f(Event{Kind: CertFailed}, "warn")
	f(Event{Kind: CertObtained}, "ok")
	// Recoveries.
	f(Event{Kind: ServerUp, Server: "10.0.0.2:8080"}, "ok")
	f(Event{Kind: PoolUp}, "ok")
	f(Event{Kind: Failback}, "ok")
	f(Event{Kind: LeaderChanged, Server: "10.0.0.2:8080"}, "ok")
	f(Event{Kind: LeaderChanged, Server: "10.0.0.2:8080", Old: "10.0.0.1:8080"}, "ok")
	// Information.
	for _, k := range []Kind{ServerAdded, ServerRemoved, CheckAnswered, ReloadApplied, AdminAction, DiscoveryChanged, Upgraded} {
		f(Event{Kind: k, Server: "10.0.0.2:8080"}, "info")
	}
	for _, k := range Kinds() {
		if !tested[k] {
			t.Errorf("the severity of %s is not tested", k)
		}
	}
}

// A new process of a binary upgrade continues the old one's stream: its first event follows the last
// one handed over, and Continue never numbers the stream back.
func TestBusContinueNumbersOnFromAnotherStream(t *testing.T) {
	b := NewBus()
	var seqs []uint64
	b.Subscribe(func(e Event) { seqs = append(seqs, e.Seq) })
	b.Continue(41)
	b.Publish(Event{Kind: ServerUp})
	b.Continue(7) // behind the stream: no effect
	b.Publish(Event{Kind: ServerUp})
	if !slices.Equal(seqs, []uint64{42, 43}) || b.Seq() != 43 {
		t.Fatalf("seqs %v, Seq %d; want 42 43 after Continue(41), and Seq 43", seqs, b.Seq())
	}
}
