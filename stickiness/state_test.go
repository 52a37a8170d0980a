package stickiness

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// exported returns tb's entries as key → entry.
func exported(tb *Table) map[string]Entry {
	m := map[string]Entry{}
	for _, e := range tb.Export() {
		m[e.Key] = e
	}
	return m
}

func TestExportedKeysImportedIntoANewTableStayOnTheirServersWhereHashingWouldMoveThem(t *testing.T) {
	p := newPool(threeServers...)
	var keys [][]byte
	for k := 0; len(keys) < 50; k++ {
		if key := fmt.Appendf(nil, "h:asset-%d", k); rendezvous(key, p, -1) == 0 {
			keys = append(keys, key)
		}
	}
	old := NewTable(TableOptions{})
	p.setUp(0, false)
	moved := map[string]int{}
	for _, key := range keys {
		moved[string(key)] = old.Place(key, p)
	}
	p.setUp(0, true)

	restarted := NewTable(TableOptions{})
	if n := restarted.Import(old.Export()); n != len(keys) {
		t.Fatalf("Import added %d keys, want %d", n, len(keys))
	}
	checkInvariants(t, restarted)
	for _, key := range keys {
		if got := restarted.Place(key, p); got != moved[string(key)] {
			t.Fatalf("Place(%q) = %d after the import, want %d where it was", key, got, moved[string(key)])
		}
	}
	if restarted.Len() != len(keys) {
		t.Fatalf("Len() = %d, want %d", restarted.Len(), len(keys))
	}
}

func TestExportGivesEachKeysIdleTimeAndZeroForAKeyWithOpenTunnels(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{Now: clock.Now})
	p := newPool(threeServers...)
	tb.Place([]byte("h:old"), p)
	clock.Advance(time.Minute)
	tb.Place([]byte("h:open"), p)
	tb.Acquire([]byte("h:open"))
	tb.Place([]byte("h:new"), p)
	clock.Advance(time.Second)

	got := exported(tb)
	want := map[string]time.Duration{"h:old": time.Minute + time.Second, "h:open": 0, "h:new": time.Second}
	if len(got) != len(want) {
		t.Fatalf("Export() = %+v, want the keys %v", got, slices.Sorted(maps.Keys(want)))
	}
	for key, idle := range want {
		e := got[key]
		if e.Idle != idle || e.Server != threeServers[rendezvous([]byte(key), p, -1)] {
			t.Errorf("%s: exported %+v, want idle %v on %s", key, e, idle, threeServers[rendezvous([]byte(key), p, -1)])
		}
	}
}

func TestImportedKeysExpireWhenTheirIdleTimeReachesIdleTimeout(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{IdleTimeout: time.Minute, Now: clock.Now})
	n := tb.Import([]Entry{
		{Key: "h:fresh", Server: threeServers[0]},
		{Key: "h:half", Server: threeServers[1], Idle: 30 * time.Second},
		{Key: "h:late", Server: threeServers[2], Idle: 59 * time.Second},
		{Key: "h:expired", Server: threeServers[0], Idle: time.Minute}, // would expire at once
		{Key: "", Server: threeServers[0]},
		{Key: "h:noserver"},
	})
	if n != 3 {
		t.Fatalf("Import added %d keys, want 3 (fresh, half, late)", n)
	}
	checkInvariants(t, tb)
	f := func(advance time.Duration, want ...string) {
		t.Helper()
		clock.Advance(advance)
		tb.Expire()
		if got := slices.Sorted(maps.Keys(exported(tb))); !slices.Equal(got, want) {
			t.Fatalf("after %v more: keys %v, want %v", advance, got, want)
		}
		checkInvariants(t, tb)
	}
	f(0, "h:fresh", "h:half", "h:late")
	f(time.Second, "h:fresh", "h:half")
	f(29*time.Second, "h:fresh")
	f(30 * time.Second)
}

func TestImportKeepsTheLivePlacementOfAKnownKeyAndOrdersEntriesAmongLiveOnes(t *testing.T) {
	clock := &testkit.Clock{}
	tb := NewTable(TableOptions{IdleTimeout: time.Hour, Now: clock.Now})
	p := newPool(threeServers...)
	live := []byte("h:live")
	i := tb.Place(live, p)
	other := threeServers[(i+1)%3]
	clock.Advance(time.Minute)
	tb.Place([]byte("h:live-newer"), p)

	// Imported entries older, newer and in between the live ones, in no particular order.
	n := tb.Import([]Entry{
		{Key: "h:live", Server: other, Idle: 0},
		{Key: "h:between", Server: other, Idle: 30 * time.Second},
		{Key: "h:oldest", Server: other, Idle: 2 * time.Minute},
		{Key: "h:newest", Server: other, Idle: 0},
	})
	if n != 3 {
		t.Fatalf("Import added %d keys, want 3 (the live key is kept)", n)
	}
	if s, _ := remembered(tb, live); s != threeServers[i] {
		t.Fatalf("live key on %s after the import, want its live server %s", s, threeServers[i])
	}
	checkInvariants(t, tb) // the idle lists stay ordered by last activity

	// The longest idle expires first: evicting to a bound of 3 removes the oldest two.
	tb.SetLimits(3, time.Hour)
	tb.Place([]byte("h:brand-new"), p)
	if got := slices.Sorted(maps.Keys(exported(tb))); !slices.Equal(got, []string{"h:brand-new", "h:live-newer", "h:newest"}) {
		t.Fatalf("after eviction to 3 keys: %v, want the three most recently active", got)
	}
	checkInvariants(t, tb)
}

func TestImportKeepsTheMostRecentlyActiveWhenNotAllFit(t *testing.T) {
	tb := NewTable(TableOptions{MaxEntries: 2})
	n := tb.Import([]Entry{
		{Key: "h:a", Server: threeServers[0], Idle: 3 * time.Second},
		{Key: "h:b", Server: threeServers[1], Idle: time.Second},
		{Key: "h:c", Server: threeServers[2], Idle: 2 * time.Second},
	})
	if got := slices.Sorted(maps.Keys(exported(tb))); n != 2 || !slices.Equal(got, []string{"h:b", "h:c"}) {
		t.Fatalf("Import added %d: %v, want h:b and h:c", n, got)
	}
	checkInvariants(t, tb)
}

func TestImportSharesOneStringPerServer(t *testing.T) {
	tb := NewTable(TableOptions{})
	var entries []Entry
	for k := range 10 {
		// A distinct string per entry, as a decoder gives them.
		entries = append(entries, Entry{Key: fmt.Sprint("h:", k), Server: string([]byte(threeServers[0]))})
	}
	tb.Import(entries)
	first := ""
	for _, e := range tb.Export() {
		if first == "" {
			first = e.Server
		}
		if unsafeStringData(e.Server) != unsafeStringData(first) {
			t.Fatalf("entries of one server hold distinct copies of its name")
		}
	}
}
