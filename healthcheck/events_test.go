package healthcheck

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

func TestBusChangedIsClosedByTheNextPublish(t *testing.T) {
	b := NewBus()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := b.Changed()
	if closed(ch) || b.Changed() != ch {
		t.Fatal("Changed before any Publish: want the same open channel")
	}
	var closedInSubscriber bool
	b.Subscribe(func(Event) { closedInSubscriber = closed(ch) })
	b.Publish(Event{Kind: ServerUp})
	if !closed(ch) {
		t.Fatal("Publish did not close the channel of Changed")
	}
	if closedInSubscriber {
		t.Fatal("Changed was closed before the subscribers ran")
	}
	fresh := b.Changed()
	if fresh == ch || closed(fresh) {
		t.Fatal("Changed after Publish: want a fresh open channel")
	}
	b.Publish(Event{Kind: ServerUp})
	if !closed(fresh) {
		t.Fatal("the next Publish did not close the fresh channel")
	}
}

func TestKindsHaveNames(t *testing.T) {
	want := []string{"server_up", "server_down", "server_added", "server_removed", "leader_changed",
		"split_brain", "check_answered", "reload_applied", "reload_failed", "failover", "failback", "admin_action",
		"discovery_changed", "pool_down", "pool_up"}
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
	if s := NumKinds.String(); s != "kind(16)" {
		t.Fatalf("an unknown kind is %q, want kind(16)", s)
	}
}
