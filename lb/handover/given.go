package handover

import (
	"net"
	"os"
	"time"

	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Given is what an old process gives a new one before it starts: its listeners by config key
// ("listen", "tls_listen", "admin.listen") and its state (the state file's document).
type Given struct {
	Listeners map[string]Listener
	State     []byte
	Upgrades  Upgrades
	From      Hello // the old process
}

// Upgrades counts the binary upgrades of a chain of processes (fairlead_upgrades_total), so that the
// counter goes on across them.
type Upgrades struct {
	OK     uint64 `json:"ok"`
	Failed uint64 `json:"failed"`
}

// Listener is a listening socket and the address its config named (":8080" listens on every address:
// the new process takes it where its own config names the same).
type Listener struct {
	Config string
	net.Listener
}

// Tunnel is a WebSocket tunnel as it passes to the new process: what it belongs to, and its two
// sockets (their files travel beside the message).
type Tunnel struct {
	Pool   string `json:"pool"`
	Server string `json:"server"`        // the server's address in the pool
	Key    []byte `json:"key,omitempty"` // the sticky key it holds, if any
	// The client's address: for the log and max_conns_per_source, a PROXY header's client for a
	// tunnel that came through a proxy_protocol sender (whose own address the socket's peer is).
	Client string `json:"client"`
	// ProxyLocal marks a proxy_protocol sender's own connection (a LOCAL header): Client is the
	// sender's, and max_conns_per_source does not count it.
	ProxyLocal bool      `json:"proxy_local,omitempty"`
	Opened     time.Time `json:"opened"`

	// Each TLS side's session (fairlead's record layer's state: keys, sequence numbers, the part of a
	// record read), nil for a plain side. It passes only over the handover's private socket pair.
	ClientTLS *tlsrecord.State `json:"client_tls,omitempty"`
	ServerTLS *tlsrecord.State `json:"server_tls,omitempty"`

	ClientFile, ServerFile *os.File `json:"-"`
}

// Hello is what a new process says of itself.
type Hello struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
}
