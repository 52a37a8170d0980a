// Command fairlead-sim runs a simulated ThingWorx HA cluster (see package
// github.com/fairlead/fairlead/bench/sim) until SIGINT or SIGTERM.
//
// Platform servers listen on consecutive ports from -platform-port,
// connection servers on consecutive ports from -connection-port and, if
// -health-port is set, answer health checks on consecutive ports from it as
// well. With -configs N it also runs N simulated configuration services (the
// upstream of a relay route; none by default) on consecutive ports from
// -config-port, requiring "Authorization: Bearer KEY" with -config-api-key
// KEY. With -appconfigs N it runs N simulated IBM Cloud App Configuration
// instances (the upstream of a relay route with protocol = "appconfiguration")
// on consecutive ports from -appconfig-port, with the GUIDs of -appconfig-guids
// (default demo-us-south, demo-eu-gb, ...) and the topics of -appconfig-topics
// at version 1, and their IAM token service on -iam-port, which exchanges
// -iam-api-key for tokens. A port of 0 gives every server of that kind a free port. The servers
// are driven through the control API on -control (empty disables it).
//
// One process can run a single platform server under a chosen name and
// state, so that a test can kill it with SIGKILL while the others run on:
//
//	fairlead-sim -platforms 1 -connections 0 -platform-port 0 -control 127.0.0.1:0 \
//	    -platform-names platform2 -states backup
//
// With -delivery-header X-Request-Id the platforms record each request's id
// (GET /deliveries on the control API), and with -delivery-log FILE they also
// append a line "<platform> <id>" per delivery to FILE, which outlives the
// process.
//
// Two more modes, for `make run`'s demo:
//
//	fairlead-sim devices -n 6 -url ws://127.0.0.1:8080/Thingworx/WS
//
// connects simulated edge devices through fairlead and prints where each landed, when its tunnel
// closes and where it landed again (devices.go), and
//
//	fairlead-sim cert -dir DIR
//
// writes a certificate for 127.0.0.1 and localhost and its key, for an HTTPS listener (cert.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fairlead/fairlead/bench/sim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "devices":
			return runDevices(args[1:], stdout, stderr)
		case "cert":
			return runCert(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("fairlead-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: fairlead-sim [flags]     (a simulated cluster)\n"+
			"       fairlead-sim devices -h    (edge devices through fairlead)\n"+
			"       fairlead-sim cert -h       (a certificate for an HTTPS listener)\n\n")
		fs.PrintDefaults()
	}
	platforms := fs.Int("platforms", 2, "number of platform servers")
	connections := fs.Int("connections", 2, "number of connection servers")
	platformPort := fs.Int("platform-port", 9081, "first platform server port (0: free ports)")
	connectionPort := fs.Int("connection-port", 9181, "first connection server port (0: free ports)")
	healthPort := fs.Int("health-port", 0, "if non-zero, first separate health-check port of the connection servers")
	configs := fs.Int("configs", 0, "number of simulated configuration services (relay upstreams)")
	configPort := fs.Int("config-port", 9281, "first config server port (0: free ports)")
	configAPIKey := fs.String("config-api-key", "", `if set, the config servers require "Authorization: Bearer <key>"`)
	appconfigs := fs.Int("appconfigs", 0, "number of simulated IBM Cloud App Configuration instances (with an IAM token service)")
	appconfigPort := fs.Int("appconfig-port", 9291, "first App Configuration instance port (0: free ports)")
	appconfigGUIDs := fs.String("appconfig-guids", "", `comma-separated instance GUIDs (default "`+strings.Join(sim.DefaultAppConfigGUIDs, ",")+`", then demo-instance3, ...)`)
	appconfigTopics := fs.String("appconfig-topics", "inventory/dev,inventory/prod", "comma-separated collection/environment topics every instance has at start")
	iamPort := fs.Int("iam-port", 9290, "IAM token service port, with -appconfigs (0: a free port)")
	iamAPIKey := fs.String("iam-api-key", sim.DefaultIAMAPIKey, "the IBM Cloud API key the IAM service exchanges for tokens (a demo value by default)")
	control := fs.String("control", "127.0.0.1:9000", "control API address (empty: none)")
	credentials := fs.String("credentials", sim.DefaultCredentials, `base64 "user:pass" expected on LeaderCheck`)
	host := fs.String("host", "127.0.0.1", "host to listen on")
	names := fs.String("platform-names", "", "comma-separated platform server names (default platform1, platform2, ...)")
	states := fs.String("states", "", "comma-separated initial platform states: leader, backup, standby, hung or dead (default: the first leader, the others backup)")
	deliveryHeader := fs.String("delivery-header", "", "record the value of this request header on every ordinary request (GET /deliveries)")
	deliveryLog := fs.String("delivery-log", "", `append "<platform> <id>" per recorded delivery to this file (needs -delivery-header)`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *platforms < 1 || *connections < 0 || *configs < 0 || *appconfigs < 0 {
		fmt.Fprintln(stderr, "fairlead-sim: -platforms must be at least 1, -connections, -configs and -appconfigs at least 0")
		return 2
	}
	guids, topics := splitList(*appconfigGUIDs), splitList(*appconfigTopics)
	if len(guids) > *appconfigs {
		fmt.Fprintln(stderr, "fairlead-sim: more -appconfig-guids than -appconfigs")
		return 2
	}
	if *iamAPIKey == "" {
		fmt.Fprintln(stderr, "fairlead-sim: -iam-api-key is empty")
		return 2
	}
	if *deliveryLog != "" && *deliveryHeader == "" {
		fmt.Fprintln(stderr, "fairlead-sim: -delivery-log needs -delivery-header")
		return 2
	}
	var initial []sim.State
	if *states != "" {
		for _, name := range strings.Split(*states, ",") {
			st, err := sim.ParseState(strings.TrimSpace(name))
			if err != nil {
				fmt.Fprintf(stderr, "fairlead-sim: -states: %s\n", err)
				return 2
			}
			initial = append(initial, st)
		}
	}
	var platformNames []string
	if *names != "" {
		for _, n := range strings.Split(*names, ",") {
			platformNames = append(platformNames, strings.TrimSpace(n))
		}
	}
	if len(initial) > *platforms || len(platformNames) > *platforms {
		fmt.Fprintln(stderr, "fairlead-sim: more -states or -platform-names than -platforms")
		return 2
	}

	logger := log.New(stderr, "fairlead-sim: ", log.LstdFlags)
	opts := sim.Options{
		Platforms:      *platforms,
		Connections:    *connections,
		NoConnections:  *connections == 0,
		PlatformAddrs:  sim.PortRange(*host, *platformPort, *platforms),
		PlatformNames:  platformNames,
		PlatformStates: initial,
		Credentials:    *credentials,
		ControlAddr:    *control,
		DeliveryHeader: *deliveryHeader,
		ConfigServers:  *configs,
		ConfigAddrs:    sim.PortRange(*host, *configPort, *configs),
		ConfigAPIKey:   *configAPIKey,
		Logf:           logger.Printf,
	}
	if *appconfigs > 0 {
		opts.AppConfigs = *appconfigs
		opts.AppConfigAddrs = sim.PortRange(*host, *appconfigPort, *appconfigs)
		opts.AppConfigGUIDs = guids
		opts.AppConfigTopics = topics
		opts.IAMAddr = sim.PortRange(*host, *iamPort, 1)[0]
		opts.IAMAPIKey = *iamAPIKey
	}
	if *connections > 0 {
		opts.ConnectionAddrs = sim.PortRange(*host, *connectionPort, *connections)
		if *healthPort != 0 {
			opts.ConnectionHealthAddrs = sim.PortRange(*host, *healthPort, *connections)
		}
	}
	if *deliveryLog != "" {
		f, err := os.OpenFile(*deliveryLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "fairlead-sim: %s\n", err)
			return 1
		}
		defer f.Close()
		opts.DeliveryLog = f
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

// splitList splits a comma-separated flag value, dropping blanks around the items; "" is none.
func splitList(s string) []string {
	var items []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}
