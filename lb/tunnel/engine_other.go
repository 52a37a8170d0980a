//go:build !linux || tunnel_portable || nbio_portable

package tunnel

// The portable fallback: every tunnel is streamed (stream.go), two goroutines per tunnel copying
// one direction each with blocking reads and writes. Same API and semantics (half-close, idle
// timeout, groups, reasons) as the epoll engine, without its memory properties. It is the engine of
// every platform but Linux (Windows, macOS, the BSDs), and of Linux built with -tags tunnel_portable
// (to use and test it there) or -tags nbio_portable (the epoll engine needs lb/nbio's Linux half: its
// free system calls and evented mode).

import "time"

const epollEngine = false

type sysEngine struct{}

type side struct{}

func (r *Engine) sysStart() error { return nil }

// sysClose runs after every tunnel is closed (which unblocks their goroutines) and waits for
// them and the janitor.
func (r *Engine) sysClose() { r.wg.Wait() }

func (r *Engine) sysPrepare(*Tunnel) error { return nil }

func (r *Engine) sysAdd(t *Tunnel, toServer, toClient []byte) (ioErr bool, err error) {
	r.startPumps(t, toServer, toClient)
	return false, nil
}

func (r *Engine) sysDetachLocked(*Tunnel) {}

func (r *Engine) sysForget(*Tunnel) {}

func (r *Engine) sysClosedWrite(*Tunnel, int) {}

func (r *Engine) sysQuiesce(*Tunnel, time.Duration) error { return ErrNotDetachable }
