//go:build !linux || tunnel_portable

package tunnel

// The portable fallback: every tunnel is streamed (stream.go), two goroutines per tunnel copying
// one direction each with blocking reads and writes. Same API and semantics (half-close, idle
// timeout, groups, reasons) as the epoll relay, without its memory properties. Build with -tags
// tunnel_portable to use (and test) it on Linux too.

const epollRelay = false

type sysRelay struct{}

type side struct{}

func (r *Relay) sysStart() error { return nil }

// sysClose runs after every tunnel is closed (which unblocks their goroutines) and waits for
// them and the janitor.
func (r *Relay) sysClose() { r.wg.Wait() }

func (r *Relay) sysPrepare(*Tunnel) error { return nil }

func (r *Relay) sysAdd(t *Tunnel, toServer, toClient []byte) (ioErr bool, err error) {
	r.startPumps(t, toServer, toClient)
	return false, nil
}

func (r *Relay) sysDetachLocked(*Tunnel) {}

func (r *Relay) sysForget(*Tunnel) {}
