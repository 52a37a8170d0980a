//go:build unix

package handover

import (
	"encoding/json"
	"fmt"
	"os"
)

// kindConns is the message of idle keep-alive connections (Conn), sent after the tunnels, before done.
const kindConns = "conns"

// SendConns sends cs, their sockets beside them, in messages of up to maxFiles; the files stay open here
// (the caller closes them once sent).
func SendConns(ch *Channel, cs []Conn) error {
	for len(cs) > 0 {
		n := min(len(cs), maxFiles)
		batch := cs[:n]
		cs = cs[n:]
		files := make([]*os.File, 0, n)
		for _, c := range batch {
			files = append(files, c.File)
		}
		body, err := json.Marshal(batch)
		if err != nil {
			return err
		}
		if err := ch.Send(Message{Kind: kindConns, Body: body, Files: files}); err != nil {
			return err
		}
	}
	return nil
}

// decodeConns gives each connection of m, a message of kind conns, to adopt, which owns its file. A
// message that does not name its sockets is an error, and its files are closed.
func decodeConns(m Message, adopt func(Conn)) error {
	var batch []Conn
	if err := json.Unmarshal(m.Body, &batch); err != nil || len(batch) != len(m.Files) {
		for _, f := range m.Files {
			f.Close()
		}
		return fmt.Errorf("handover: a connections message that does not name its %d sockets", len(m.Files))
	}
	for i := range batch {
		batch[i].File = m.Files[i]
		adopt(batch[i])
	}
	return nil
}
