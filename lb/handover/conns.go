package handover

import (
	"os"

	"github.com/fairlead/fairlead/lb/tlsrecord"
)

// Conn is an idle keep-alive client connection as it passes to the new process: the listener it was
// accepted on (its config key, "listen" or "tls_listen"), its client's address (for the log,
// X-Forwarded-For, the sticky source key and the limits per source: a PROXY header's client for a
// connection that came through a proxy_protocol sender, whose own address the socket's peer is), an
// HTTPS connection's TLS session, and its socket (the file travels beside the message). Its last answer was written and no byte of its next request was read: the new process
// serves that request as the first of a new connection.
type Conn struct {
	Listener string `json:"listener"`
	Client   string `json:"client"`
	// ProxyLocal marks a proxy_protocol sender's own connection (a LOCAL header): Client is the
	// sender's, and max_conns_per_source does not count it.
	ProxyLocal bool `json:"proxy_local,omitempty"`
	// The TLS session of a connection of tls_listen (fairlead's record layer's state: keys, sequence
	// numbers), nil for a plain one. It passes only over the handover's private socket pair.
	TLS *tlsrecord.State `json:"tls,omitempty"`

	File *os.File `json:"-"`
}
