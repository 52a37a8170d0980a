// Package upstream is fairlead's HTTP/1.1 client of the servers behind it, and the one dialer that makes
// every connection to them. It knows nothing of pools, routes or health: the proxy (package lb) builds a
// Client per server, sends each attempt of a request with Do, and decides from the error what the attempt
// was (a *DialError, a *ClientError, fasthttp.ErrNoFreeConns, a timeout, ErrAbandoned, any other failure).
//
// The client replaces fasthttp.HostClient on the proxy path for what the proxy needs and nothing else.
// fasthttp's types still parse and write the messages (RequestHeader, ResponseHeader); what is fairlead's
// own is the connection pool and the streaming of large answers. HostClient wrapped every streamed answer
// in a new object and three closures (4 allocations per request) and did work the proxy does not need
// (URI scheme checks, default headers, per-host bookkeeping); here a request costs no allocation, with or
// without a streamed answer:
//
//   - An answer whose Content-Length is at most bufferedBody is read whole into the reader's buffer (one
//     read system call for a small answer, with its head) and its connection goes back to the pool
//     before the client is written to: a slow client never holds a server connection for a small
//     answer. The reader is kept by the response's body stream (an upBody), whose bytes are written to
//     the client in one piece, and given back when fasthttp closes it.
//   - A larger answer, a chunked one or one that ends when the server closes is streamed: the response
//     gets a pooled upBody as its body stream, which fasthttp's server copies to the client and then
//     closes. Close puts the connection back only if the body was read to its end and both sides kept
//     the connection alive; otherwise it is closed (an unread rest would poison the next request).
//
// The pool: at most Options.MaxConns connections (open or being dialled); a request finding none idle
// and the cap reached waits up to Options.QueueTimeout, first come first served, for one to be released
// (it takes it over) or closed (it dials in its place), then fails with fasthttp.ErrNoFreeConns. Idle
// connections are reused most recent first and closed after IdleTimeout unused (a timer runs only while
// some are idle). A reused connection may turn out closed by the server while idle: if no byte of the
// answer came, an idempotent request with its body in memory is sent once more on a fresh connection
// (the proxy decides everything else, across servers). Reads and writes time out after
// Options.ResponseTimeout without progress (idleConn).
//
// The dialer (dial.go): TCP within the connect timeout, then TLS when configured, the handshake within
// the same timeout; a failure of either is a *DialError. The client's connections and the proxy's
// upgrades (Client.Dial) are made by it.
//
// A leader pool's in-flight failover and hung-leader watch have their client side in watch.go.
package upstream
