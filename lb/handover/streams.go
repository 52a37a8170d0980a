//go:build unix

package handover

import (
	"encoding/json"
	"fmt"
	"os"
)

// kindStreams is a message of relay subscribers (Stream), their sockets beside them.
const kindStreams = "streams"

// SendStreams sends ss, their sockets beside them, in messages of up to maxFiles; the files stay open
// here (the caller closes them once sent).
func SendStreams(ch *Channel, ss []Stream) error {
	for len(ss) > 0 {
		n := min(len(ss), maxFiles)
		batch := ss[:n]
		ss = ss[n:]
		files := make([]*os.File, 0, n)
		for _, s := range batch {
			files = append(files, s.File)
		}
		body, err := json.Marshal(batch)
		if err != nil {
			return err
		}
		if err := ch.Send(Message{Kind: kindStreams, Body: body, Files: files}); err != nil {
			return err
		}
	}
	return nil
}

// receiveStreams gives each stream of m to adopt, which owns its file.
func receiveStreams(m Message, adopt func(Stream)) error {
	var batch []Stream
	if err := json.Unmarshal(m.Body, &batch); err != nil || len(batch) != len(m.Files) {
		closeAll(m.Files)
		return fmt.Errorf("handover: a streams message that does not name its %d sockets", len(m.Files))
	}
	for i := range batch {
		batch[i].File = m.Files[i]
		adopt(batch[i])
	}
	return nil
}
