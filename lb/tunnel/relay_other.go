//go:build !linux || tunnel_portable

package tunnel

import (
	"errors"
	"io"
	"sync"
)

// The portable fallback: two goroutines per tunnel, each with a buffer, copying one direction
// with blocking reads and writes. Same API and semantics (half-close, idle timeout, groups,
// reasons) as the epoll relay, without its memory properties. Build with -tags tunnel_portable
// to use (and test) it on Linux too.

const epollRelay = false

type sysRelay struct {
	bufs sync.Pool
}

type side struct{}

func (r *Relay) sysStart() error {
	size := r.opts.BufferSize
	r.sys.bufs.New = func() any {
		b := make([]byte, size)
		return &b
	}
	return nil
}

// sysClose runs after every tunnel is closed (which unblocks their goroutines) and waits for
// them and the janitor.
func (r *Relay) sysClose() { r.wg.Wait() }

func (r *Relay) sysPrepare(*Tunnel) error { return nil }

func (r *Relay) sysAdd(t *Tunnel, toServer, toClient []byte) (ioErr bool, err error) {
	pending := [2][]byte{toServer, toClient}
	for i, p := range pending {
		if len(p) > 0 {
			p = append([]byte(nil), p...) // Add does not keep the caller's bytes
		}
		r.wg.Add(1) // under t.mu: Close cannot reach its Wait before this
		go r.pump(t, i, p)
	}
	return false, nil
}

func (r *Relay) sysDetachLocked(*Tunnel) {}

func (r *Relay) sysForget(*Tunnel) {}

// pump copies side i to its peer: pending first, then everything read until EOF or an error.
func (r *Relay) pump(t *Tunnel, i int, pending []byte) {
	defer r.wg.Done()
	src, dst := t.conns[i], t.conns[1-i]
	if len(pending) > 0 {
		n, err := dst.Write(pending)
		r.count(t, i, n)
		if err != nil {
			r.closeTunnel(t, Error)
			return
		}
	}
	bp := r.sys.bufs.Get().(*[]byte)
	defer r.sys.bufs.Put(bp)
	for {
		n, err := src.Read(*bp)
		if n > 0 {
			if _, werr := dst.Write((*bp)[:n]); werr != nil {
				r.writeFailed(t, i)
				return
			}
			r.count(t, i, n)
			t.touch()
		}
		if errors.Is(err, io.EOF) {
			r.sideEOF(t, i)
			return
		}
		if err != nil {
			r.closeTunnel(t, Error)
			return
		}
	}
}
