// Package frontend is fairlead's front end below HTTP routing: the listeners that accept client
// connections, plain and TLS, and the check of every byte a client sends before fasthttp parses it.
//
// Each accepted connection reads through a framer, a strict RFC 9112 state machine (framer.go) that
// refuses what servers behind an ingress might read differently (smuggling), and enforces the
// [frontend] limits (Limits: max_header_size, max_body_size, header_timeout). A refused request gets
// its answer (400, 408, 413, 431 or 505, with Connection: close) from the server's error handler
// (Front.ErrorHandler), from the handler that finds it in a streamed body (Claim), or from the
// connection's Close, and the connection then closes with a lingering close so that the answer is not
// lost to a reset (refuse.go). The TLS listener (tls.go) runs each handshake once, with the running
// configuration, under the same check. A connection's errors (the client closed, reset or stalled in
// the middle of a request, a failed handshake, a refusal) are counted by kind and logged rate-limited
// without a byte of the request; fasthttp's own log lines are never printed (connerrors.go). A
// connection handed to a tunnel or a relay stream leaves the front end's accounting (UnwrapHijacked,
// hijack.go).
//
// HTTP/2 (h2.go, h2conn.go): a TLS connection that negotiates h2 is served by fairlead's own
// connection loop over x/net's framer and HPACK; each stream is translated into the HTTP/1.1 request
// the handler reads, checked as strictly (no connection-specific fields, :authority and Host as
// ValidAuthority in authority.go says, origin-form :path, a content-length that agrees with the DATA)
// and bounded by the same limits, and the answer is translated back. The limits per client address
// (sources.go: rate_per_source, burst_per_source, max_conns_per_source, behind trusted_proxies) admit
// connections at accept and requests at their first byte. conn.go is a connection's framer state. At
// a binary upgrade the idle HTTP/1.1 keep-alive connections move to the new process on their sockets,
// an HTTPS one with its TLS session (idle.go: HandOverIdle, Inject). A connection from a proxy_protocol
// sender starts with a PROXY header, read from its socket before TLS and the framer (proxyproto.go):
// the client it names is the connection's address from then on, and goes with it at an upgrade.
//
// What routes and forwards a request is package lb's; this package knows neither pools nor config
// generations: lb gives it the limits, the TLS configuration in force, and counts what the handler
// itself refuses (Front.Refused).
package frontend
