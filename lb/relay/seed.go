package relay

// The seed file of a relay: the snapshots written by seed_file_write and read by a fast start.

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fairlead/fairlead/lb/atomicfile"
	"github.com/fairlead/fairlead/lb/relay/paths"
)

// SeedFile is the seed file: the snapshots of a relay, written by seed_file_write and read by a fast start.
type SeedFile struct {
	Relay   string               `json:"relay"`
	Written time.Time            `json:"written"`
	Topics  map[string]SeedTopic `json:"topics"`
}

// SeedTopic is one snapshot of a seed file: its body as JSON when it is JSON ("json"), else as a
// string ("body").
type SeedTopic struct {
	Version uint64          `json:"version"`
	ETag    string          `json:"etag,omitempty"`
	JSON    json.RawMessage `json:"json,omitempty"`
	Body    *string         `json:"body,omitempty"`
}

// loadSeed publishes the snapshots of the seed file and returns the on-demand topics it held (those
// the relay still accepts, within max_topics). A missing or unreadable file is logged: the relay then
// starts empty, and requests wait for the first fetches up to wait_timeout.
func (rr *Route) loadSeed() (onDemand []string) {
	f := rr.cfg.SeedFile
	data, err := os.ReadFile(f)
	if err != nil {
		rr.logf("relay %s: start = \"fast\": no seed (%v): serving once the first snapshots are fetched", rr.name, err)
		return nil
	}
	var sf SeedFile
	if err := json.Unmarshal(data, &sf); err != nil {
		rr.logf("relay %s: start = \"fast\": seed file %s: %v: serving once the first snapshots are fetched", rr.name, f, err)
		return nil
	}
	n := 0
	for _, topic := range slices.Sorted(maps.Keys(sf.Topics)) {
		st := sf.Topics[topic]
		listed := rr.spec.Listed[topic]
		if !listed {
			if _, err := paths.Split(topic, len(rr.spec.Path.Names())); err != nil || !rr.spec.OnDemand ||
				len(rr.spec.Topics)+len(onDemand) >= rr.cfg.MaxTopics {
				continue
			}
		}
		var body []byte
		switch {
		case st.Body != nil:
			body = []byte(*st.Body)
		case len(st.JSON) > 0:
			body = st.JSON
		default:
			rr.logf("relay %s: seed file %s: topic %s has neither json nor body: skipped", rr.name, f, topic)
			continue
		}
		etag := st.ETag
		if etag == "" {
			etag = `"` + strconv.FormatUint(st.Version, 10) + `"`
		}
		rr.hub.Publish(topic, &Snapshot{Version: st.Version, ETag: etag, Body: body, Fetched: sf.Written, Seed: true})
		n++
		if !listed {
			onDemand = append(onDemand, topic)
		}
	}
	rr.seeded.Store(true)
	rr.logf("relay %s: start = \"fast\": %d snapshot(s) from %s (written %s); refreshing in the background",
		rr.name, n, f, sf.Written.Format(time.RFC3339))
	return onDemand
}

// writeSeedIfChanged writes the seed file if the cache changed since the last write.
func (rr *Route) writeSeedIfChanged() {
	n := rr.hub.Changes()
	if n == rr.seedWritten.Load() {
		return
	}
	if err := rr.writeSeed(); err != nil {
		rr.seedErrors.Add(1)
		rr.logf("relay %s: seed_file_write: %v", rr.name, err)
		return
	}
	rr.seedWrites.Add(1)
	rr.seedWritten.Store(n)
}

// writeSeed writes every cached snapshot to the seed file, atomically (a temporary file renamed).
func (rr *Route) writeSeed() error {
	sf := SeedFile{Relay: rr.name, Written: time.Now().UTC(), Topics: map[string]SeedTopic{}}
	for _, ts := range rr.hub.Topics() {
		s := rr.hub.Snapshot(ts.Topic)
		if s == nil {
			continue
		}
		st := SeedTopic{Version: s.Version, ETag: s.ETag}
		// A compact JSON object or array is kept as JSON, readable in the file; anything else (JSON
		// whose spacing the encoder would change included) as a string, so that it is read back as is.
		var compact bytes.Buffer
		if len(s.Body) > 0 && (s.Body[0] == '{' || s.Body[0] == '[') && json.Compact(&compact, s.Body) == nil &&
			bytes.Equal(compact.Bytes(), s.Body) {
			st.JSON = s.Body
		} else {
			b := string(s.Body)
			st.Body = &b
		}
		sf.Topics[ts.Topic] = st
	}
	data, err := json.Marshal(sf)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(rr.cfg.SeedFile, append(data, '\n'), 0o600)
}
