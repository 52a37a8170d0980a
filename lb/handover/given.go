package handover

import "net"

// Given is what an old process gives a new one before it starts: its listeners by config key
// ("listen", "tls_listen", "admin.listen") and its state (the state file's document).
type Given struct {
	Listeners map[string]Listener
	State     []byte
}

// Listener is a listening socket and the address its config named (":8080" listens on every address:
// the new process takes it where its own config names the same).
type Listener struct {
	Config string
	net.Listener
}
