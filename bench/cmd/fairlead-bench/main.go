// Command fairlead-bench compares fairlead with HAProxy, nginx and Caddy in front of the simulated
// ThingWorx cluster (see package bench/harness) and writes a Markdown report to stdout and
// <out>/<timestamp>.json and .svg.
//
//	go run ./bench/cmd/fairlead-bench -rounds 3     # make bench
//	go run ./bench/cmd/fairlead-bench -quick        # make bench-quick
//	go run ./bench/cmd/fairlead-bench -threads 2 -scenarios http-small,http-16k,ws-echo   # make bench-2core
//
// Unless -pin=false or -threads is above 1, it re-executes itself under `taskset -c 1` (the load
// generators and the simulated servers run in this process, on core 1) and runs every proxy under
// `taskset -c 0`. With -threads N > 1 every proxy gets N workers and nothing is pinned.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/fairlead/fairlead/bench/harness"
)

const pinnedEnv = "FAIRLEAD_BENCH_PINNED"

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("fairlead-bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "every scenario briefly: 1 round, ~1 s per measurement, small N (under two minutes)")
	rounds := fs.Int("rounds", 0, "rounds (peers alternate within each); default 3, or 1 with -quick")
	scen := fs.String("scenarios", "", "comma-separated scenarios (default all: "+strings.Join(harness.ScenarioNames(), ",")+")")
	peers := fs.String("peers", "", "comma-separated peers (default "+strings.Join(harness.PeerNames, ",")+"; fairlead is always included)")
	out := fs.String("out", "bench/results", "directory for <timestamp>.json and .svg (\"\" writes none)")
	fairlead := fs.String("fairlead", "bin/fairlead", "fairlead binary")
	pin := fs.Bool("pin", true, "pin proxies to core 0 and this process (generators, simulated servers) to core 1 with taskset (not with -threads above 1)")
	tunnels := fs.Int("tunnels", 0, "ws-idle: number of idle tunnels N (default 8000, 300 with -quick)")
	devices := fs.Int("upgrade-devices", 0, "upgrade: devices N holding a tunnel through the binary upgrade (default 8000, 1000 with -quick; lowered to what the fd limits allow)")
	keep := fs.Bool("keep", false, "keep the generated configs and proxy logs (their directory is printed)")
	threads := fs.Int("threads", 1, "workers per proxy (HAProxy nbthread, nginx worker_processes, fairlead and Caddy GOMAXPROCS); above 1 nothing is pinned, so proxies and load share every core")
	costs := fs.Bool("costs", false, "http-small and https-small-h2: after each peer's measurement, extra 3 s phases measuring the proxy's CPU µs and context switches, the host's TCP segments and (with strace, if installed) the proxy's system calls per request")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *threads < 1 {
		fmt.Fprintf(os.Stderr, "fairlead-bench: -threads %d: want at least 1\n", *threads)
		return 2
	}
	if *threads > 1 {
		*pin = false
	}

	if *pin && os.Getenv(pinnedEnv) == "" && runtime.NumCPU() < 2 {
		fmt.Fprintln(os.Stderr, "fairlead-bench: fewer than 2 CPUs; running unpinned")
		*pin = false
	}
	if *pin && os.Getenv(pinnedEnv) == "" {
		if ts, err := exec.LookPath("taskset"); err == nil {
			if self, err := os.Executable(); err == nil {
				os.Setenv(pinnedEnv, "1")
				argv := append([]string{ts, "-c", "1", self}, os.Args[1:]...)
				err := syscall.Exec(ts, argv, os.Environ())
				fmt.Fprintf(os.Stderr, "fairlead-bench: re-exec under taskset failed (%v); running unpinned\n", err)
				*pin = false
			}
		} else {
			fmt.Fprintln(os.Stderr, "fairlead-bench: taskset not found; running unpinned")
			*pin = false
		}
	}

	plan := harness.FullPlan()
	if *quick {
		plan = harness.QuickPlan()
	}
	if *rounds > 0 {
		plan.Rounds = *rounds
	}
	if *tunnels > 0 {
		plan.IdleTunnels = *tunnels
	}
	if *devices > 0 {
		plan.UpgradeDevices = *devices
	}
	opts := harness.Options{
		Plan: plan, FairleadBin: *fairlead, Pin: *pin, Threads: *threads, Progress: os.Stderr, KeepTemp: *keep, Costs: *costs,
		Scenarios: split(*scen), Peers: split(*peers),
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := harness.Run(ctx, opts)
	if rep == nil {
		fmt.Fprintf(os.Stderr, "fairlead-bench: %v\n", err)
		return 2
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "fairlead-bench: %v\n", err)
	}
	rep.WriteMarkdown(os.Stdout)
	if *out != "" {
		j, s, werr := rep.WriteFiles(*out)
		if werr != nil {
			fmt.Fprintf(os.Stderr, "fairlead-bench: writing results: %v\n", werr)
			return 1
		}
		fmt.Fprintf(os.Stderr, "results: %s\nchart:   %s\n", j, s)
	}
	if rep.TempDir != "" {
		fmt.Fprintf(os.Stderr, "configs and logs kept in %s\n", rep.TempDir)
	}
	if err != nil {
		return 1
	}
	for _, r := range rep.Results {
		if r.Error != "" && strings.HasPrefix(r.Peer, "fairlead") {
			return 1
		}
	}
	return 0
}

func split(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
