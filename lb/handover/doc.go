// Package handover hands a running fairlead over to a new process of itself (a binary upgrade,
// SIGUSR2): the listening sockets and the state first, so that the new process serves at once, then
// what the old one still holds.
//
// The old process starts the new one with cloudflare/tableflip, which passes one inherited file: an
// end of a long-lived Channel (a SOCK_SEQPACKET Unix socket pair) whose other end the old process
// reads (Serve). The new process says hello on it (Join) with the end of a Channel of its own, private
// to this handover, over which everything else passes, sockets as SCM_RIGHTS:
//
//	new → old   hello        the new process's PID and version, with the private channel's end
//	old → new   listeners    each listener's config key and address, with its socket
//	old → new   state        the state file's document: each pool's leader and health, the sticky keys
//	            (the new process starts, then tells tableflip it is ready; the old one stops accepting)
//	old → new   tunnels      batches of tunnels: each one's pool, server, sticky key, client (a PROXY
//	                         header's, through a proxy_protocol sender), and the TLS session of each TLS
//	                         side (lb/tlsrecord's state: keys, sequence numbers, the part of a record
//	                         read), with its two sockets
//	old → new   streams      the relays' subscribers (SSE, WebSocket): what each was sent, an HTTPS
//	                         client's TLS session, with its socket
//	old → new   conns        the idle HTTP/1.1 keep-alive connections: each one's listener, client (a
//	                         PROXY header's, through a proxy_protocol sender), and an HTTPS one's TLS
//	                         session, with its socket (conns.go)
//	old → new   done         nothing more comes; the old process drains what stays with it and exits
//
// Only a process the old one started can say hello: the shared channel is a file it inherited, not a
// name anyone can connect to. The TLS sessions' keys pass only over the private socket pair, and are
// never written anywhere else.
package handover
