package handover

import (
	"os"
	"time"

	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Stream is a relay's subscriber (an SSE stream or a WebSocket) as it passes to the new process: the
// relay and topic it follows, what it has been sent, its socket (the file travels beside the
// message) and, over HTTPS, its TLS session. The new process subscribes it to the same topic and goes on from there: a snapshot newer
// than the one it was sent, then each one after.
type Stream struct {
	Relay string `json:"relay"` // the relay's name ([relays.NAME])
	Topic string `json:"topic"`
	Kind  string `json:"kind"` // "sse" or "websocket"
	// What the subscriber was sent: the version of the last snapshot it got (a WebSocket of change
	// messages: the topic's version when it stopped here), whether that was a seed, and, where the
	// versions are not the upstream's (local counts, a seed's), the SHA-256 of its body.
	Version uint64 `json:"version"`
	Seed    bool   `json:"seed,omitempty"`
	Sum     []byte `json:"sum,omitempty"`
	// Started: an SSE stream whose first event was sent (App Configuration names it otherwise than
	// the ones after it).
	Started bool `json:"started,omitempty"`
	// Change: a WebSocket of the upstream's change messages: the last one it was sent.
	Change []byte    `json:"change,omitempty"`
	Client string    `json:"client"` // the client's address, for the log
	Opened time.Time `json:"opened"`
	// TLS is the session of a client over HTTPS (lb/tlsrecord's state: keys, sequence numbers, the
	// plaintext it sent that the stream has not read), which the new process resumes with fairlead's
	// record layer; nil for a plain client. It holds keys: never log it.
	TLS *tlsrecord.State `json:"tls,omitempty"`

	File *os.File `json:"-"`
}
