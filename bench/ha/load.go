package ha

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/fairlead/fairlead/bench/testkit"
)

// LoadOptions shapes a Load.
type LoadOptions struct {
	// URL is the front end, "http://host:port" (the virtual address).
	URL string
	// Rate is the number of GETs sent per second, each on its own schedule: a slow answer never
	// delays the next request.
	Rate int
	// Tunnels is the number of WebSocket tunnels held on /Thingworx/WS, one per asset
	// ("asset-000", ...; the X-Asset-Id header).
	Tunnels int
	// Timeout bounds one GET, and one tunnel's dial and opening handshake. Dials alone are bounded
	// by a half of it: a SYN lost while the address moves is given up quickly and tried again.
	Timeout time.Duration
}

// Load is a running client load (a testkit.Load): steady GETs, each in a goroutine of its own (at most
// 1,024 in flight; a slot beyond that is counted as skipped), and tunnels that reconnect as soon as
// they close (every 100 ms until a dial succeeds), as ThingWorx edge SDKs do. Marks split the figures
// by phase.
type Load struct {
	*testkit.Load
	opts LoadOptions
}

// StartLoad starts the load. Ready is closed once every tunnel opened once.
func StartLoad(opts LoadOptions) *Load {
	u, _ := url.Parse(opts.URL)
	return &Load{opts: opts, Load: testkit.StartLoad(testkit.LoadOptions{
		Addr: u.Host, Open: true, Rate: opts.Rate, Timeout: opts.Timeout,
		Request: func(int, int) testkit.Request {
			return testkit.Request{Method: http.MethodGet, Path: "/Thingworx/Things/ha"}
		},
		Tunnels: testkit.TunnelOptions{Count: opts.Tunnels},
	})}
}

// Open returns the number of tunnels open now.
func (l *Load) Open() int { return int(l.Snapshot().Open) }

// Stop ends the load (GETs in flight finish, tunnels are closed) and returns its figures.
func (l *Load) Stop() Report {
	r := report(l.State(), l.Started(), time.Now())
	l.Load.Stop(l.opts.Timeout)
	return r
}

// Report is a Load's figures; times are seconds since the load started.
type Report struct {
	Seconds float64 `json:"seconds"`
	// GETs answered or failed by the time the load stopped (those still in flight are left out):
	// OK are 200 answers; Failed are errors and other statuses, by kind in Errors (refused, reset,
	// timeout, unreachable, eof, other, status_NNN). Skipped: slots not sent (too many in flight).
	Sent     int            `json:"sent"`
	OK       int            `json:"ok"`
	Failed   int            `json:"failed"`
	Skipped  int            `json:"skipped"`
	Errors   map[string]int `json:"errors"`
	ServedBy map[string]int `json:"served_by"`
	// LongestGap is the longest time between two successive successful answers (by completion),
	// from GapFrom to GapTo.
	LongestGap float64 `json:"longest_gap"`
	GapFrom    float64 `json:"gap_from"`
	GapTo      float64 `json:"gap_to"`
	// Tunnels: one per asset. Closed and Reopened count the closes by the far side and the tunnels
	// opened after the first, over all assets; Open is the number open when the load stopped.
	Tunnels   int `json:"tunnels"`
	Closed    int `json:"closed"`
	Reopened  int `json:"reopened"`
	Open      int `json:"open"`
	DialFails int `json:"dial_fails"`
	// Placement is each asset's connection server, first and latest; Moved lists the assets whose
	// latest tunnel is on another server than their first.
	Placement map[string][2]string `json:"placement"`
	Moved     []string             `json:"moved"`
	Marks     []MarkReport         `json:"marks"`
}

// MarkReport counts what happened after a mark.
type MarkReport struct {
	Name string  `json:"name"`
	At   float64 `json:"at"`
	// GETs sent after the mark, and those of them that failed.
	Sent   int `json:"sent"`
	Failed int `json:"failed"`
	// FirstOK: seconds from the mark to the first successful answer to a GET sent after it (-1: none).
	FirstOK float64 `json:"first_ok"`
	// Closed, Reopened: tunnel closes and openings after the mark. AllOpen: seconds from the mark
	// until every asset that lost its tunnel after the mark had a new one (0 if none lost one; -1 if
	// some had none when the load stopped).
	Closed   int     `json:"closed"`
	Reopened int     `json:"reopened"`
	AllOpen  float64 `json:"all_open"`
}

// report computes the figures of st, a load started at start, at end.
func report(st testkit.State, start, end time.Time) Report {
	at := func(t time.Time) time.Duration { return t.Sub(start) }
	r := Report{
		Seconds:   at(end).Seconds(),
		Skipped:   st.Skipped,
		Errors:    map[string]int{},
		ServedBy:  map[string]int{},
		Tunnels:   len(st.Tunnels),
		Placement: map[string][2]string{},
	}
	var oks []time.Duration
	for _, g := range st.Samples {
		r.Sent++
		if g.OK() {
			r.OK++
			r.ServedBy[g.ServedBy]++
			oks = append(oks, at(g.End))
		} else {
			r.Failed++
			r.Errors[g.Kind()]++
		}
	}
	slices.Sort(oks)
	for i := 1; i < len(oks); i++ {
		if gap := oks[i] - oks[i-1]; gap.Seconds() > r.LongestGap {
			r.LongestGap, r.GapFrom, r.GapTo = gap.Seconds(), oks[i-1].Seconds(), oks[i].Seconds()
		}
	}
	for _, tn := range st.Tunnels {
		r.Closed += len(tn.Closes)
		r.Reopened += max(len(tn.Connects)-1, 0)
		r.DialFails += tn.DialFails
		if tn.Open {
			r.Open++
		}
		r.Placement[tn.Asset] = [2]string{tn.First, tn.Last}
		if tn.First != tn.Last {
			r.Moved = append(r.Moved, tn.Asset)
		}
	}
	for _, m := range st.Marks {
		mr := MarkReport{Name: m.Name, At: at(m.At).Seconds(), FirstOK: -1}
		var first time.Time
		for _, g := range st.Samples {
			if g.Start.Before(m.At) {
				continue
			}
			mr.Sent++
			if !g.OK() {
				mr.Failed++
			} else if first.IsZero() || g.End.Before(first) {
				first = g.End
			}
		}
		if !first.IsZero() {
			mr.FirstOK = first.Sub(m.At).Seconds()
		}
		var lastOpen time.Duration
		for _, tn := range st.Tunnels {
			lost := false
			for _, c := range tn.Closes {
				if !c.Before(m.At) {
					mr.Closed++
					lost = true
				}
			}
			for i, c := range tn.Connects {
				if i > 0 && !c.Before(m.At) {
					mr.Reopened++
				}
			}
			if !lost {
				continue
			}
			if !tn.Open {
				mr.AllOpen = -1
			} else if c := tn.Connects[len(tn.Connects)-1]; mr.AllOpen >= 0 && c.Sub(m.At) > lastOpen {
				lastOpen = c.Sub(m.At)
			}
		}
		if mr.AllOpen >= 0 {
			mr.AllOpen = lastOpen.Seconds()
		}
		r.Marks = append(r.Marks, mr)
	}
	return r
}
