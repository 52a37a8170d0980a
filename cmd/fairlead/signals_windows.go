package main

import (
	"os"
	"syscall"
)

// stopSignals drain and stop fairlead: Ctrl-C or Ctrl-Break (os.Interrupt), and the console's closing,
// the user's logoff or the system's shutdown, which Go delivers as SIGTERM.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// reloadHint says how to reload when the config watch cannot follow a file: Windows has no SIGHUP.
const reloadHint = "restart fairlead: Windows has no SIGHUP"

// notifyReload does nothing: Windows has no SIGHUP. A change to a config file or to a file the config
// reads reloads (watchConfig), as on every platform.
func notifyReload(func()) {}
