package lb

import (
	"crypto/tls"
	"net"

	"github.com/fairlead/fairlead/lb/upstream"
)

// The upstream transport: one bounded upstream client (package upstream) per server, with its dialer,
// built from the pool's config. Upgrades dial through the server's client too (Client.Dial).

// newTransport returns the client of the server at addr: at most max_conns connections, requests waiting
// up to queue_timeout for a free one, connections made within connect_timeout (TCP, then TLS with
// [pools.NAME.tls]).
func newTransport(addr string, cfg *PoolConfig) *upstream.Client {
	return upstream.New(upstream.Dialer{Addr: addr, Timeout: cfg.ConnectTimeout.D, TLS: cfg.TLS.clientFor(addr)},
		upstream.Options{MaxConns: cfg.MaxConns, QueueTimeout: cfg.QueueTimeout.D,
			ResponseTimeout: cfg.ResponseTimeout.D, NoDelay: cfg.NoDelay})
}

// sameTransport reports whether two pool configs build identical transports (a reload that changes none
// of these keeps every server's connections).
func sameTransport(a, b *PoolConfig) bool {
	return a.MaxConns == b.MaxConns && a.QueueTimeout.D == b.QueueTimeout.D &&
		a.ConnectTimeout.D == b.ConnectTimeout.D && a.ResponseTimeout.D == b.ResponseTimeout.D &&
		a.NoDelay == b.NoDelay && a.TLS.same(&b.TLS)
}

// same reports whether two [pools.NAME.tls] tables make the same connections: the same keys and the
// same contents of their files.
func (t *PoolTLSConfig) same(o *PoolTLSConfig) bool {
	return t.Enabled == o.Enabled && t.CAFile == o.CAFile && t.ServerName == o.ServerName &&
		t.InsecureSkipVerify == o.InsecureSkipVerify && t.Cert == o.Cert && t.Key == o.Key && t.sum == o.sum
}

// clientFor returns the TLS config of connections to the server at addr, or nil for plain TCP. Without
// server_name, the name sent (SNI) and verified is the server's host; an IP address is verified
// against the certificate's IP SANs (and sent as no SNI).
func (t *PoolTLSConfig) clientFor(addr string) *tls.Config {
	if t.client == nil {
		return nil
	}
	cfg := t.client.Clone() // shares the session cache
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}
