package ha

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"
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

// Load is a running client load: steady GETs and tunnels that reconnect as soon as they close (every
// 100 ms until a dial succeeds), as ThingWorx edge SDKs do. Marks split the figures by phase.
type Load struct {
	opts      LoadOptions
	start     time.Time
	client    *http.Client
	dialer    websocket.Dialer
	stop      chan struct{}
	wg        sync.WaitGroup
	ready     chan struct{}
	readyOnce sync.Once

	mu      sync.Mutex
	gets    []getSample
	skipped int
	marks   []mark
	tunnels []*tunnel
}

type getSample struct {
	sent, done time.Duration // since the load started
	ok         bool
	kind       string // why it failed ("" when ok)
	servedBy   string
}

type mark struct {
	name string
	at   time.Duration
}

// tunnel is one asset's tunnel over its lifetime; the Load's mu guards it.
type tunnel struct {
	asset       string
	first, last string          // connection server of the first and of the latest tunnel
	connects    []time.Duration // when each tunnel opened
	closes      []time.Duration // when each closed (by the other side)
	dialFails   int
	conn        *websocket.Conn // the open tunnel, nil between two
}

// StartLoad starts the load. Ready is closed once every tunnel opened once.
func StartLoad(opts LoadOptions) *Load {
	dial := &net.Dialer{Timeout: opts.Timeout / 2}
	l := &Load{
		opts:  opts,
		start: time.Now(),
		client: &http.Client{Timeout: opts.Timeout, Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dial.DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		}},
		dialer: websocket.Dialer{NetDialContext: dial.DialContext, HandshakeTimeout: opts.Timeout},
		stop:   make(chan struct{}),
		ready:  make(chan struct{}),
	}
	for i := range opts.Tunnels {
		tn := &tunnel{asset: "asset-" + pad3(i)}
		l.tunnels = append(l.tunnels, tn)
		l.wg.Add(1)
		go l.hold(tn)
	}
	if opts.Tunnels == 0 {
		close(l.ready)
	}
	l.wg.Add(1)
	go l.send()
	return l
}

func pad3(i int) string {
	s := strconv.Itoa(i)
	for len(s) < 3 {
		s = "0" + s
	}
	return s
}

// Ready is closed once every tunnel opened once.
func (l *Load) Ready() <-chan struct{} { return l.ready }

// Mark records a named moment; the report counts what happened after it.
func (l *Load) Mark(name string) {
	l.mu.Lock()
	l.marks = append(l.marks, mark{name, time.Since(l.start)})
	l.mu.Unlock()
}

// send sends opts.Rate GETs per second until Stop, each in a goroutine of its own (at most 1,024 in
// flight; a slot beyond that is counted as skipped).
func (l *Load) send() {
	defer l.wg.Done()
	tick := time.NewTicker(time.Second / time.Duration(max(l.opts.Rate, 1)))
	defer tick.Stop()
	slots := make(chan struct{}, 1024)
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer func() { <-slots; l.wg.Done() }()
			l.get()
		}()
	}
}

func (l *Load) get() {
	s := getSample{sent: time.Since(l.start)}
	resp, err := l.client.Get(l.opts.URL + "/Thingworx/Things/ha")
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s.servedBy = resp.Header.Get("X-Served-By")
		if err == nil && resp.StatusCode != http.StatusOK {
			s.kind = "status_" + strconv.Itoa(resp.StatusCode)
		}
	}
	if err != nil {
		s.kind = errKind(err)
	}
	s.ok = s.kind == ""
	s.done = time.Since(l.start)
	l.mu.Lock()
	l.gets = append(l.gets, s)
	l.mu.Unlock()
}

// errKind names a failure for the report: refused, reset, timeout, eof or other.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "other"
}

// hold keeps the asset's tunnel open until Stop: dial, check one echo, wait for the close, dial again.
func (l *Load) hold(tn *tunnel) {
	defer l.wg.Done()
	u, _ := url.Parse(l.opts.URL)
	wsURL := "ws://" + u.Host + "/Thingworx/WS"
	hdr := http.Header{"X-Asset-Id": {tn.asset}}
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		conn, server, err := l.open(wsURL, hdr, tn.asset)
		if err != nil {
			l.mu.Lock()
			tn.dialFails++
			l.mu.Unlock()
			select {
			case <-l.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		l.mu.Lock()
		stopping := l.stopping()
		if !stopping {
			if tn.first == "" {
				tn.first = server
			}
			tn.last = server
			tn.connects = append(tn.connects, time.Since(l.start))
			tn.conn = conn
		}
		all := !stopping && l.allOpenedOnce()
		l.mu.Unlock()
		if stopping {
			conn.Close()
			return
		}
		if all {
			l.readyOnce.Do(func() { close(l.ready) })
		}
		// The connection server only echoes: a read ends when the tunnel closes.
		_, _, _ = conn.ReadMessage()
		conn.Close()
		l.mu.Lock()
		tn.conn = nil
		if !l.stopping() {
			tn.closes = append(tn.closes, time.Since(l.start))
		}
		l.mu.Unlock()
	}
}

// open dials a tunnel and checks that it carries one message both ways; it returns the connection
// server that answered the upgrade (X-Served-By).
func (l *Load) open(wsURL string, hdr http.Header, asset string) (*websocket.Conn, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.Timeout)
	defer cancel()
	conn, resp, err := l.dialer.DialContext(ctx, wsURL, hdr)
	if err != nil {
		return nil, "", err
	}
	conn.SetReadDeadline(time.Now().Add(l.opts.Timeout)) //nolint:errcheck
	if err := conn.WriteMessage(websocket.TextMessage, []byte(asset)); err != nil {
		conn.Close()
		return nil, "", err
	}
	if _, msg, err := conn.ReadMessage(); err != nil || string(msg) != asset {
		conn.Close()
		return nil, "", errors.Join(err, errors.New("no echo"))
	}
	conn.SetReadDeadline(time.Time{}) //nolint:errcheck
	return conn, resp.Header.Get("X-Served-By"), nil
}

// Open returns the number of tunnels open now.
func (l *Load) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, tn := range l.tunnels {
		if tn.conn != nil {
			n++
		}
	}
	return n
}

// stopping reports whether Stop was called; mu held.
func (l *Load) stopping() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// allOpenedOnce reports whether every tunnel opened at least once; mu held.
func (l *Load) allOpenedOnce() bool {
	for _, tn := range l.tunnels {
		if tn.first == "" {
			return false
		}
	}
	return true
}

// Stop ends the load (GETs in flight finish, tunnels are closed) and returns its figures.
func (l *Load) Stop() Report {
	l.mu.Lock()
	end := time.Since(l.start)
	r := l.report(end)
	close(l.stop)
	for _, tn := range l.tunnels {
		if tn.conn != nil {
			tn.conn.Close()
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
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

// report computes the figures; mu held.
func (l *Load) report(end time.Duration) Report {
	r := Report{
		Seconds:   end.Seconds(),
		Skipped:   l.skipped,
		Errors:    map[string]int{},
		ServedBy:  map[string]int{},
		Tunnels:   len(l.tunnels),
		Placement: map[string][2]string{},
	}
	var oks []time.Duration
	for _, g := range l.gets {
		r.Sent++
		if g.ok {
			r.OK++
			r.ServedBy[g.servedBy]++
			oks = append(oks, g.done)
		} else {
			r.Failed++
			r.Errors[g.kind]++
		}
	}
	slices.Sort(oks)
	for i := 1; i < len(oks); i++ {
		if gap := oks[i] - oks[i-1]; gap.Seconds() > r.LongestGap {
			r.LongestGap, r.GapFrom, r.GapTo = gap.Seconds(), oks[i-1].Seconds(), oks[i].Seconds()
		}
	}
	for _, tn := range l.tunnels {
		r.Closed += len(tn.closes)
		r.Reopened += max(len(tn.connects)-1, 0)
		r.DialFails += tn.dialFails
		if tn.conn != nil {
			r.Open++
		}
		r.Placement[tn.asset] = [2]string{tn.first, tn.last}
		if tn.first != tn.last {
			r.Moved = append(r.Moved, tn.asset)
		}
	}
	for _, m := range l.marks {
		mr := MarkReport{Name: m.name, At: m.at.Seconds(), FirstOK: -1}
		first := time.Duration(-1)
		for _, g := range l.gets {
			if g.sent < m.at {
				continue
			}
			mr.Sent++
			if !g.ok {
				mr.Failed++
			} else if first < 0 || g.done < first {
				first = g.done
			}
		}
		if first >= 0 {
			mr.FirstOK = (first - m.at).Seconds()
		}
		var lastOpen time.Duration
		for _, tn := range l.tunnels {
			lost := false
			for _, c := range tn.closes {
				if c >= m.at {
					mr.Closed++
					lost = true
				}
			}
			for i, c := range tn.connects {
				if i > 0 && c >= m.at {
					mr.Reopened++
				}
			}
			if !lost {
				continue
			}
			if tn.conn == nil {
				mr.AllOpen = -1
			} else if c := tn.connects[len(tn.connects)-1]; mr.AllOpen >= 0 && c-m.at > lastOpen {
				lastOpen = c - m.at
			}
		}
		if mr.AllOpen >= 0 {
			mr.AllOpen = lastOpen.Seconds()
		}
		r.Marks = append(r.Marks, mr)
	}
	return r
}
