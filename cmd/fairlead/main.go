// Command fairlead is an L7 load balancer for ThingWorx High Availability clusters.
//
//	fairlead -config conf.d          run with every conf.d/*.toml merged in lexical order
//	fairlead -check -config conf.d   validate, print every error, exit 0 or 2
//	fairlead -version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/fairlead/fairlead/healthcheck/event"
	"github.com/fairlead/fairlead/lb"
	"github.com/fairlead/fairlead/lb/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("fairlead", flag.ContinueOnError)
	configPath := fs.String("config", "conf.d", "config directory (its *.toml files are merged in lexical order) or one file")
	check := fs.Bool("check", false, "validate the config and exit: 0 if valid, 2 with every error otherwise")
	showVersion := fs.Bool("version", false, "print the version and exit")
	pidFile := fs.String("pidfile", "", "write the PID of the process that serves to this file (a binary upgrade, SIGUSR2, rewrites it)")
	upgradeTimeout := fs.Duration("upgrade-timeout", time.Minute, "a binary upgrade's new process must serve within this, or it is killed and this one keeps serving")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("fairlead", version)
		return 0
	}

	cfg, err := config.Load(*configPath)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				fmt.Fprintln(os.Stderr, p)
			}
		} else {
			fmt.Fprintln(os.Stderr, err)
		}
		return 2
	}
	if *check {
		fmt.Printf("config ok: %d file(s), %d pool(s), %d route(s), %d relay(s)\n", len(cfg.Files), len(cfg.Pools), len(cfg.Routes), len(cfg.Relays))
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...) // SIGINT, SIGTERM (signals_*.go)
	defer stop()
	level := new(slog.LevelVar) // [global] log_level: New sets it, a reload changes it
	logger := lb.NewLogger(cfg.Global.LogFormat, level, os.Stderr)
	slog.SetDefault(logger) // main's own log lines go through it too
	// A binary upgrade (SIGUSR2, upgrade_*.go): this process may be the new one of an upgrade, which
	// takes the old one's listeners and state before it starts.
	up, err := newUpgrader(*pidFile, *upgradeTimeout, version, logger)
	if err != nil {
		logger.Error("fairlead: cannot start: " + err.Error())
		return 1
	}
	defer up.stop()
	given, handedOver, err := up.join()
	if err != nil {
		logger.Error("fairlead: cannot start: " + err.Error())
		return 1
	}
	l := lb.New(cfg, lb.Options{Logger: logger, Level: level, Version: version, Given: given})
	if err := l.Start(ctx); err != nil {
		// Fatal (a listen address in use, a relay that cannot start): an ERROR line, not log.Print,
		// which the default slog logger writes at INFO.
		logger.Error("fairlead: cannot start: " + err.Error())
		return 1
	}
	if err := up.ready(l); err != nil {
		logger.Error("fairlead: cannot start: " + err.Error())
		l.Close()
		return 1
	}
	go handedOver(l) // what the old process hands over once this one serves: its tunnels
	// systemd (Type=notify): this process serves. After a binary upgrade it is the service's main
	// process from now on (the old one exits), which NotifyAccess=all lets it say.
	notifySystemd(fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()))
	upgraded := make(chan struct{})
	up.notify(func() {
		if up.upgrade(l) {
			close(upgraded)
		}
	})
	log.Print(startupLine(version, l.Addr(), l.TLSAddr(), l.AdminAddr()))

	// SIGHUP (not on Windows), or a change to a config file, reloads the config; a bad config is reported
	// (one WARN line naming every file and key: the reload_failed event's) and the running one stays.
	// Reloads run one at a time.
	// The watch's catch-up at start (catchUp) is no reload anyone asked for: files found unchanged
	// then are not logged. A reload asked for while one is pending makes the pending one asked for.
	reloads := make(chan struct{}, 1)
	var asked atomic.Bool
	request := func() {
		select {
		case reloads <- struct{}{}:
		default: // one is pending already: it will read the files as they are then
		}
	}
	reload := func() { asked.Store(true); request() }
	catchUp := request
	go func() {
		for range reloads {
			quiet := !asked.Swap(false)
			cfg, err := config.Load(*configPath)
			if err != nil {
				l.ReloadFailed(err) // logged once, by the event's line
				continue
			}
			if quiet && l.Unchanged(cfg) {
				slog.Debug("config watch: the files are as read at start")
				continue
			}
			l.Reload(cfg) //nolint:errcheck // Reload logs its outcome itself
		}
	}()
	notifyReload(reload)
	applied := make(chan struct{}, 1) // a reload applied: the watch follows the new config's secret files
	l.Subscribe(func(e event.Event) {
		if e.Kind == event.ReloadApplied {
			select {
			case applied <- struct{}{}:
			default:
			}
		}
	})
	go watchConfig(ctx, *configPath, reload, catchUp, l.SecretFiles, applied, log.Printf)

	select {
	case <-ctx.Done():
		log.Print("fairlead: stopping: draining")
	case <-upgraded:
	}
	l.Close()
	return 0
}

// startupLine is the line that says fairlead serves: its version and every listener it has (the plain
// and the TLS front end, the admin), e.g. "fairlead 1.2 listening on 127.0.0.1:8080 (HTTP) and
// 127.0.0.1:8443 (HTTPS), admin on 127.0.0.1:8404".
func startupLine(version, addr, tlsAddr, adminAddr string) string {
	var on []string
	if addr != "" {
		on = append(on, addr+" (HTTP)")
	}
	if tlsAddr != "" {
		on = append(on, tlsAddr+" (HTTPS)")
	}
	line := "fairlead " + version + " listening on " + strings.Join(on, " and ")
	if adminAddr != "" {
		return line + ", admin on " + adminAddr
	}
	return line + ", no admin listener"
}

// notifySystemd sends state to systemd's notify socket, when there is one (sd_notify(3)).
func notifySystemd(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		slog.Warn("systemd: cannot notify: " + err.Error())
	}
}
