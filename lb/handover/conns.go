package handover

import "os"

// Conn is an idle keep-alive client connection as it passes to the new process: the listener it was
// accepted on (its config key, "listen"), its client's address (for the log and max_conns_per_source)
// and its socket (the file travels beside the message). Its last answer was written and no byte of its
// next request was read: the new process serves that request as the first of a new connection.
type Conn struct {
	Listener string `json:"listener"`
	Client   string `json:"client"`

	File *os.File `json:"-"`
}
