//go:build unix

package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
)

// The kinds of message, in the order they pass.
const (
	kindHello     = "hello"
	kindListeners = "listeners"
	kindState     = "state"
	kindUpgrades  = "upgrades"
	kindTunnels   = "tunnels"
	kindDone      = "done"
)

// listenerNote is a listener as a message names it; its socket is the message's file of the same index.
type listenerNote struct {
	Key    string `json:"key"`
	Config string `json:"config"`
}

// about is the old process and the count of upgrades so far.
type about struct {
	Upgrades Upgrades `json:"upgrades"`
	From     Hello    `json:"from"`
}

// Serve answers each hello on shared until it is closed: give runs the handover over the new
// process's private channel (and closes it), one at a time.
func Serve(shared *Channel, give func(ch *Channel, h Hello)) {
	for {
		m, err := shared.Receive()
		if err != nil {
			if errors.Is(err, errEOF) || errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a hello cut short by a new process that died: wait for the next
		}
		if m.Kind != kindHello || len(m.Files) != 1 {
			for _, f := range m.Files {
				f.Close()
			}
			continue
		}
		var h Hello
		json.Unmarshal(m.Body, &h) //nolint:errcheck // a hello without its fields is still one
		ch, err := FromFile(m.Files[0])
		if err != nil {
			continue
		}
		give(ch, h)
	}
}

// Join says hello on the shared channel inherited as f and returns the private channel of this
// handover.
func Join(f *os.File, h Hello) (*Channel, error) {
	shared, err := FromFile(f)
	if err != nil {
		return nil, err
	}
	defer shared.Close()
	ch, peer, err := Pair()
	if err != nil {
		return nil, err
	}
	defer peer.Close()
	body, _ := json.Marshal(h)
	if err := shared.Send(Message{Kind: kindHello, Body: body, Files: []*os.File{peer}}); err != nil {
		ch.Close()
		return nil, err
	}
	return ch, nil
}

// Give sends a new process what it needs to start: the listeners and the state.
func Give(ch *Channel, g Given) error {
	var notes []listenerNote
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for key, ln := range g.Listeners {
		tl, ok := ln.Listener.(interface{ File() (*os.File, error) })
		if !ok {
			return fmt.Errorf("handover: listener %s (%T) has no socket to give", key, ln.Listener)
		}
		f, err := tl.File()
		if err != nil {
			return fmt.Errorf("handover: listener %s: %w", key, err)
		}
		files = append(files, f)
		notes = append(notes, listenerNote{Key: key, Config: ln.Config})
	}
	body, _ := json.Marshal(notes)
	if err := ch.Send(Message{Kind: kindListeners, Body: body, Files: files}); err != nil {
		return err
	}
	if err := ch.Send(Message{Kind: kindState, Body: g.State}); err != nil {
		return err
	}
	body, _ = json.Marshal(about{g.Upgrades, g.From})
	return ch.Send(Message{Kind: kindUpgrades, Body: body})
}

// Take receives what Give sent: the listeners, as this process's own, and the state.
func Take(ch *Channel) (Given, error) {
	m, err := ch.Receive()
	if err != nil {
		return Given{}, err
	}
	if m.Kind != kindListeners {
		return Given{}, fmt.Errorf("handover: %s where the listeners were expected", m.Kind)
	}
	var notes []listenerNote
	if err := json.Unmarshal(m.Body, &notes); err != nil || len(notes) != len(m.Files) {
		for _, f := range m.Files {
			f.Close()
		}
		return Given{}, fmt.Errorf("handover: the listeners' message does not name its %d sockets", len(m.Files))
	}
	g := Given{Listeners: map[string]Listener{}}
	for i, n := range notes {
		ln, err := net.FileListener(m.Files[i])
		m.Files[i].Close()
		if err != nil {
			return Given{}, fmt.Errorf("handover: listener %s (%s): %w", n.Key, n.Config, err)
		}
		g.Listeners[n.Key] = Listener{Config: n.Config, Listener: ln}
	}
	s, err := ch.Receive()
	if err != nil {
		return Given{}, err
	}
	if s.Kind != kindState {
		return Given{}, fmt.Errorf("handover: %s where the state was expected", s.Kind)
	}
	g.State = s.Body
	u, err := ch.Receive()
	if err != nil {
		return Given{}, err
	}
	var a about
	if u.Kind != kindUpgrades || json.Unmarshal(u.Body, &a) != nil {
		return Given{}, fmt.Errorf("handover: %s where the upgrades' count was expected", u.Kind)
	}
	g.Upgrades, g.From = a.Upgrades, a.From
	return g, nil
}

// Done tells the new process that nothing more comes.
func Done(ch *Channel) error { return ch.Send(Message{Kind: kindDone}) }

// WaitDone waits for Done (or the old process's end).
func WaitDone(ch *Channel) error {
	m, err := ch.Receive()
	if err != nil {
		return err
	}
	if m.Kind != kindDone {
		return fmt.Errorf("handover: %s where done was expected", m.Kind)
	}
	return nil
}

// tunnelsPerMessage keeps a message's sockets under maxFiles: two each.
const tunnelsPerMessage = maxFiles / 2

// SendTunnels sends ts, their sockets beside them, in messages of up to tunnelsPerMessage; the files
// stay open here (the caller closes them once sent).
func SendTunnels(ch *Channel, ts []Tunnel) error {
	for len(ts) > 0 {
		n := min(len(ts), tunnelsPerMessage)
		batch := ts[:n]
		ts = ts[n:]
		files := make([]*os.File, 0, 2*n)
		for _, t := range batch {
			files = append(files, t.ClientFile, t.ServerFile)
		}
		body, err := json.Marshal(batch)
		if err != nil {
			return err
		}
		if err := ch.Send(Message{Kind: kindTunnels, Body: body, Files: files}); err != nil {
			return err
		}
	}
	return nil
}

// An Adopter takes what the old process hands over once the new one serves, each kind by its own
// function, which owns the sockets it is given.
type Adopter struct {
	Tunnel func(Tunnel)
	Stream func(Stream)
	Conn   func(Conn) // an idle keep-alive connection (conns_unix.go)
}

// Receive gives each tunnel, stream and idle connection that comes to a, until the old process says it is done or the
// channel fails (that error). A message of a kind a has no function for is refused, its sockets
// closed (their clients reconnect), and the rest still received; the first one is then the error
// returned at done.
func Receive(ch *Channel, a Adopter) error {
	var refused error
	for {
		m, err := ch.Receive()
		if err != nil {
			return err
		}
		switch {
		case m.Kind == kindDone:
			return refused
		case m.Kind == kindTunnels && a.Tunnel != nil:
			err = receiveTunnels(m, a.Tunnel)
		case m.Kind == kindStreams && a.Stream != nil:
			err = receiveStreams(m, a.Stream)
		case m.Kind == kindConns && a.Conn != nil:
			err = decodeConns(m, a.Conn)
		default:
			closeAll(m.Files)
			if refused == nil {
				refused = fmt.Errorf("handover: %s refused: this process takes no such thing", m.Kind)
			}
		}
		if err != nil {
			return err
		}
	}
}

// ReceiveTunnels is Receive of tunnels alone.
func ReceiveTunnels(ch *Channel, adopt func(Tunnel)) error {
	return Receive(ch, Adopter{Tunnel: adopt})
}

// receiveTunnels gives each tunnel of m to adopt, which owns its files.
func receiveTunnels(m Message, adopt func(Tunnel)) error {
	var batch []Tunnel
	if err := json.Unmarshal(m.Body, &batch); err != nil || 2*len(batch) != len(m.Files) {
		closeAll(m.Files)
		return fmt.Errorf("handover: a tunnels message that does not name its %d sockets", len(m.Files))
	}
	for i := range batch {
		batch[i].ClientFile, batch[i].ServerFile = m.Files[2*i], m.Files[2*i+1]
		adopt(batch[i])
	}
	return nil
}

// closeAll closes the sockets of a message refused.
func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
