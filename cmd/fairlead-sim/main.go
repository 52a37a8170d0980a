// Command fairlead-sim runs a simulated ThingWorx HA cluster (see package
// github.com/fairlead/fairlead/bench/sim) until SIGINT or SIGTERM.
//
// Platform servers listen on consecutive ports from -platform-port,
// connection servers on consecutive ports from -connection-port and, if
// -health-port is set, answer health checks on consecutive ports from it as
// well. A port of 0 gives every server of that kind a free port. The servers
// are driven through the control API on -control (empty disables it).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/fairlead/fairlead/bench/sim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fairlead-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	platforms := fs.Int("platforms", 2, "number of platform servers")
	connections := fs.Int("connections", 2, "number of connection servers")
	platformPort := fs.Int("platform-port", 9081, "first platform server port (0: free ports)")
	connectionPort := fs.Int("connection-port", 9181, "first connection server port (0: free ports)")
	healthPort := fs.Int("health-port", 0, "if non-zero, first separate health-check port of the connection servers")
	control := fs.String("control", "127.0.0.1:9000", "control API address (empty: none)")
	credentials := fs.String("credentials", sim.DefaultCredentials, `base64 "user:pass" expected on LeaderCheck`)
	host := fs.String("host", "127.0.0.1", "host to listen on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *platforms < 1 || *connections < 1 {
		fmt.Fprintln(stderr, "fairlead-sim: -platforms and -connections must be at least 1")
		return 2
	}

	logger := log.New(stderr, "fairlead-sim: ", log.LstdFlags)
	opts := sim.Options{
		Platforms:       *platforms,
		Connections:     *connections,
		PlatformAddrs:   sim.PortRange(*host, *platformPort, *platforms),
		ConnectionAddrs: sim.PortRange(*host, *connectionPort, *connections),
		Credentials:     *credentials,
		ControlAddr:     *control,
		Logf:            logger.Printf,
	}
	if *healthPort != 0 {
		opts.ConnectionHealthAddrs = sim.PortRange(*host, *healthPort, *connections)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := sim.Start(opts)
	if err != nil {
		fmt.Fprintf(stderr, "fairlead-sim: %s\n", err)
		return 1
	}
	c.WriteSummary(stdout)
	<-ctx.Done()
	c.Close()
	logger.Printf("stopped")
	return 0
}
