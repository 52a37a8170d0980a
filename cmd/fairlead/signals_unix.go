//go:build !windows

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// stopSignals drain and stop fairlead.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// reloadHint says how to reload when the config watch cannot follow a file.
const reloadHint = "reload with SIGHUP"

// notifyReload calls reload at each SIGHUP.
func notifyReload(reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			reload()
		}
	}()
}
