package lb

import (
	"maps"
	"slices"
	"time"

	"github.com/fairlead/fairlead/lb/handover"
	"github.com/fairlead/fairlead/lb/relay"
	"github.com/fairlead/fairlead/lb/tunnel"
)

// A binary upgrade's relay subscribers (issue #38): the old process stops each SSE stream and
// WebSocket of its relays between two messages, and gives its socket and what it was sent to the new
// one (HandOverStreams), which subscribes it to the same topic of the same relay and goes on from
// there (AdoptStream): the client keeps its connection and misses nothing. A client over HTTPS moves
// with its TLS session (relay's handover.go), which the new process resumes with fairlead's record
// layer; one whose session crypto/tls keeps stays, to end with the drain (its client reconnects).

// streamDetachTimeout bounds how long the streams' move waits for their writers to stop: a write to a
// slow client under way, and a WebSocket's reader between two of the client's frames (relay's
// wsDetachWait).
const streamDetachTimeout = 5 * time.Second

// HandOverStreams gives every relay subscriber that can move to the new process with send, and returns
// how many moved and how many stay here (to end with the drain). Call it once the new process serves.
func (sc Succession) HandOverStreams(send func([]handover.Stream) error) (moved, stayed int) {
	lb := sc.lb
	lb.relays.mu.Lock()
	running := maps.Clone(lb.relays.running)
	lb.relays.mu.Unlock()
	var batch []handover.Stream
	for _, name := range slices.Sorted(maps.Keys(running)) {
		ms, st := running[name].DetachStreams(streamDetachTimeout)
		stayed += st
		for _, m := range ms {
			batch = append(batch, handover.Stream{Relay: name, Topic: m.Topic, Kind: m.Kind, Version: m.Resume.Version,
				Seed: m.Resume.Seed, Sum: m.Resume.Sum, Started: m.Resume.Started, Change: m.Resume.Change, Client: m.Client, Opened: m.Opened, File: m.File, TLS: m.TLS})
		}
	}
	if len(batch) == 0 {
		return 0, stayed
	}
	if err := send(batch); err != nil {
		lb.log.Warn("binary upgrade: handing relay streams over failed: " + err.Error())
	} else {
		moved = len(batch)
	}
	for _, s := range batch {
		s.File.Close()
	}
	return moved, stayed + len(batch) - moved
}

// AdoptStream goes on with a relay subscriber the old process of a binary upgrade handed over, as its
// own: on the same relay and topic, from what it was sent. A stream whose relay this process's config
// no longer has, or whose topic it no longer serves, is closed (its client reconnects). It owns the
// stream's file.
func (sc Succession) AdoptStream(hs handover.Stream) bool {
	lb := sc.lb
	defer hs.File.Close()
	lb.relays.mu.Lock()
	rr := lb.relays.running[hs.Relay]
	lb.relays.mu.Unlock()
	if rr == nil {
		return false
	}
	conn, err := tunnel.Resume(hs.File, hs.TLS) // a plain connection, or its TLS session resumed
	if err != nil {
		return false
	}
	uncount := lb.adoptCount(conn, hs.Client, false) // max_conns_per_source counts it here from now on, by the client the old process knew
	m := relay.Moved{Topic: hs.Topic, Kind: hs.Kind, Client: hs.Client, Opened: hs.Opened, TLS: hs.TLS,
		Resume: relay.Resume{Version: hs.Version, Seed: hs.Seed, Sum: hs.Sum, Started: hs.Started, Change: hs.Change}}
	if err := rr.Adopt(m, conn, uncount); err != nil {
		if uncount != nil {
			uncount()
		}
		conn.Close()
		lb.log.Warn("binary upgrade: relay " + hs.Relay + ": a stream from the old process is closed: " + err.Error())
		return false
	}
	return true
}
