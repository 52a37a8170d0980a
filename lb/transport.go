package lb

import (
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/upstream"
)

// The upstream transport: one bounded upstream client (package upstream) per server, with its dialer,
// built from the pool's config. Upgrades dial through the server's client too (Client.Dial).

// newTransport returns the client of the server at addr: at most max_conns connections, requests waiting
// up to queue_timeout for a free one, connections made within connect_timeout (TCP, then TLS with
// [pools.NAME.tls]).
func newTransport(addr string, cfg *config.Pool) *upstream.Client {
	return upstream.New(upstream.Dialer{Addr: addr, Timeout: cfg.ConnectTimeout.D, TLS: cfg.TLS.ClientFor(addr)},
		upstream.Options{MaxConns: cfg.MaxConns, QueueTimeout: cfg.QueueTimeout.D,
			ResponseTimeout: cfg.ResponseTimeout.D, NoDelay: cfg.NoDelay})
}

// sameTransport reports whether two pool configs build identical transports (a reload that changes none
// of these keeps every server's connections).
func sameTransport(a, b *config.Pool) bool {
	return a.MaxConns == b.MaxConns && a.QueueTimeout.D == b.QueueTimeout.D &&
		a.ConnectTimeout.D == b.ConnectTimeout.D && a.ResponseTimeout.D == b.ResponseTimeout.D &&
		a.NoDelay == b.NoDelay && a.TLS.Same(&b.TLS)
}
