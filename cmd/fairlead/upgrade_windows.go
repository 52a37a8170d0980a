package main

import (
	"log/slog"
	"time"

	"github.com/fairlead/fairlead/lb"
	"github.com/fairlead/fairlead/lb/handover"
)

// upgrader does nothing on Windows: it has no SIGUSR2 and no inherited sockets of this kind; an
// upgrade there is a restart.
type upgrader struct{}

func newUpgrader(string, time.Duration, string, *slog.Logger) (*upgrader, error) {
	return &upgrader{}, nil
}
func (u *upgrader) join() (*handover.Given, func(*lb.LB), error) { return nil, func(*lb.LB) {}, nil }
func (u *upgrader) ready(*lb.LB) error                           { return nil }
func (u *upgrader) notify(func())                                {}
func (u *upgrader) upgrade(*lb.LB) bool                          { return false }
func (u *upgrader) stop()                                        {}
