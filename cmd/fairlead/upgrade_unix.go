//go:build unix

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/fairlead/fairlead/lb"
	"github.com/fairlead/fairlead/lb/handover"
)

// A binary upgrade (SIGUSR2, nginx's signal for it): fairlead starts the executable now at the path
// it was started from, with the same arguments, and hands itself over (package handover). The process
// part — the new process started with the one inherited file, its readiness, a bound on the wait, the
// PID file — is cloudflare/tableflip's. Only the shared handover channel goes through tableflip's
// files: a listener given to tableflip stays open in its list for the life of the process (it has no
// way to drop one), so a reload that moved a listener would leave the old address bound and accepting
// connections nobody serves. The listeners go over the handover channel instead, with the state.

// handoverFile is the name of the inherited file that carries the shared handover channel.
const handoverFile = "fairlead-handover"

// upgrader is this process's side of binary upgrades: as the new process of one (join), and as the
// old process of the next (serve, upgrade).
type upgrader struct {
	upg     *tableflip.Upgrader
	version string
	logger  *slog.Logger

	mu      sync.Mutex
	busy    bool
	pending *handover.Channel // the new process's private channel, once it said hello
}

// newUpgrader sets up binary upgrades; pidFile ("" for none) gets the PID of the process that serves;
// a new process not ready within timeout is killed and the old one keeps everything.
func newUpgrader(pidFile string, timeout time.Duration, version string, logger *slog.Logger) (*upgrader, error) {
	upg, err := tableflip.New(tableflip.Options{PIDFile: pidFile, UpgradeTimeout: timeout})
	if err != nil {
		return nil, err
	}
	return &upgrader{upg: upg, version: version, logger: logger}, nil
}

// join takes over from the old process, if this process is the new one of a binary upgrade: it says
// hello and receives the listeners and the state; rest then takes what the old process hands over
// once this one serves, until it is done. nil: no old process.
func (u *upgrader) join() (g *handover.Given, rest func(*lb.LB), err error) {
	if !u.upg.HasParent() {
		return nil, func(*lb.LB) {}, nil
	}
	f, err := u.upg.File(handoverFile)
	if err != nil || f == nil {
		return nil, nil, fmt.Errorf("binary upgrade: no handover channel from the old process (%v)", err)
	}
	ch, err := handover.Join(f, handover.Hello{PID: os.Getpid(), Version: u.version})
	if err != nil {
		return nil, nil, err
	}
	given, err := handover.Take(ch)
	if err != nil {
		ch.Close()
		return nil, nil, err
	}
	return &given, func(l *lb.LB) {
		adopted, closed, streams, ended, conns := 0, 0, 0, 0, 0
		err := handover.Receive(ch, handover.Adopter{
			Tunnel: func(t handover.Tunnel) {
				if l.Succession().Adopt(t) {
					adopted++
				} else {
					closed++
				}
			},
			Stream: func(s handover.Stream) {
				if l.Succession().AdoptStream(s) {
					streams++
				} else {
					ended++
				}
			},
			Conn: func(c handover.Conn) {
				if l.Succession().AdoptConn(c) {
					conns++
				}
			},
		})
		ch.Close()
		if err != nil {
			u.logger.Warn("binary upgrade: what the old process hands over (tunnels, relay streams) stopped coming: " + err.Error())
		}
		u.logger.Info(fmt.Sprintf("binary upgrade: %d tunnels taken over from the old process, %d closed (their pool or server is gone)", adopted, closed))
		u.logger.Info(fmt.Sprintf("binary upgrade: %d relay streams taken over from the old process, %d closed (their relay or topic is gone)", streams, ended))
		u.logger.Info(fmt.Sprintf("binary upgrade: %d idle keep-alive connections taken over", conns))
		l.Succession().TookOver(given.From, adopted, closed)
	}, nil
}

// ready tells the old process, if any, that this one serves (it then stops accepting and goes), and
// opens this process's own shared channel for the next upgrade, served for l.
func (u *upgrader) ready(l *lb.LB) error {
	shared, peer, err := handover.Pair()
	if err != nil {
		return err
	}
	defer peer.Close()
	if err := u.upg.AddFile(handoverFile, peer); err != nil {
		shared.Close()
		return err
	}
	go handover.Serve(shared, func(ch *handover.Channel, h handover.Hello) {
		if err := handover.Give(ch, l.Succession().Give()); err != nil {
			u.logger.Warn("binary upgrade: handing over to the new process failed: " + err.Error())
			ch.Close()
			return
		}
		u.mu.Lock()
		u.pending = ch
		u.mu.Unlock()
	})
	return u.upg.Ready()
}

// notify runs upgrade at each SIGUSR2.
func (u *upgrader) notify(upgrade func()) {
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	go func() {
		for range usr2 {
			upgrade()
		}
	}()
}

// upgrade starts the new process and waits until it serves (true: this one must go) or fails (false:
// this one keeps everything, and says why). A second SIGUSR2 during an upgrade is refused.
func (u *upgrader) upgrade(l *lb.LB) bool {
	u.mu.Lock()
	if u.busy {
		u.mu.Unlock()
		u.logger.Warn("binary upgrade: SIGUSR2 refused: an upgrade is already under way")
		return false
	}
	u.busy = true
	u.mu.Unlock()
	defer func() { u.mu.Lock(); u.busy = false; u.mu.Unlock() }()

	exe, _ := os.Executable()
	u.logger.Info("binary upgrade: starting the new process", "executable", exe)
	err := u.upg.Upgrade()
	u.mu.Lock()
	ch := u.pending
	u.pending = nil
	u.mu.Unlock()
	if err != nil {
		if ch != nil {
			ch.Close()
		}
		l.Succession().Failed(errors.New(upgradeReason(err))) // a WARN line, the event, the metric
		return false
	}
	u.logger.Info("binary upgrade: the new process serves; this one stops accepting, hands its tunnels over, drains and exits")
	if ch != nil {
		moved, stayed := l.Succession().HandOverTunnels(func(ts []handover.Tunnel) error { return handover.SendTunnels(ch, ts) })
		smoved, sstayed := l.Succession().HandOverStreams(func(ss []handover.Stream) error { return handover.SendStreams(ch, ss) })
		idle, busy := l.Succession().HandOverConns(func(cs []handover.Conn) error { return handover.SendConns(ch, cs) })
		handover.Done(ch) //nolint:errcheck // the new process serves either way
		ch.Close()
		u.logger.Info(fmt.Sprintf("binary upgrade: %d tunnels handed over; %d close with the drain (a TLS session crypto/tls kept, or half-closed)", moved, stayed))
		u.logger.Info(fmt.Sprintf("binary upgrade: %d relay streams handed over; %d end with the drain (their client gone or not read, a TLS session crypto/tls keeps, or an SSE stream over HTTP/2)", smoved, sstayed))
		u.logger.Info(fmt.Sprintf("binary upgrade: %d idle keep-alive connections handed over (%d more began a request meanwhile, or crypto/tls kept their TLS session: answered here, then closed)", idle, busy))
	}
	return true
}

// upgradeReason is tableflip's error in fairlead's words.
func upgradeReason(err error) string {
	if errors.Is(err, tableflip.ErrNotSupported) {
		return "binary upgrades are not supported here"
	}
	return err.Error()
}

// stop gives up the upgrader's files (at exit without an upgrade).
func (u *upgrader) stop() { u.upg.Stop() }
