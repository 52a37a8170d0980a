// Package stickiness maps a request to a key and a key to a server: key
// extraction, rendezvous hashing, and a sharded, bounded table with idle
// expiry. It knows nothing of sockets.
//
// The pieces fit together like this:
//
//   - An [Extractor], built from config strings such as "header:X-Asset-Id",
//     "query:assetId", "cookie:FAIRLEAD_CX" or "source", turns a request into
//     a key (without allocating).
//   - rendezvous hashing (inside [Table]) picks a server for a key among [Candidates], the same way
//     in every process that has the same server names, so that two load
//     balancers in front of the same cluster agree without talking.
//   - A [Table] remembers the choice, so that a key stays on its server when
//     the set of servers changes (a server coming back does not steal keys
//     that moved away while it was down), and forgets keys that have been
//     idle for a while or that no longer fit.
package stickiness
