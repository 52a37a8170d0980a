// Command client is the load of bench/ha's keepalived test, run inside the client's network namespace
// (ip netns exec): steady GETs to the virtual address and one WebSocket tunnel per asset (see
// ha.Load).
//
//	client -url http://10.213.0.100:8080 -rate 200 -tunnels 50
//
// It prints "ready" once every tunnel opened, then reads commands on stdin, one per line:
//
//	mark NAME   record a moment (the report counts what happened after it); prints "marked NAME"
//	open        print "open N": the tunnels open now
//	stop        stop and print "report <JSON>" (ha.Report); so does the end of stdin or -max
//
// With -probe URL it only GETs URL once and exits 0 on a 200 (printing the body with -print), 1
// otherwise: the test's readiness checks inside a namespace, with no curl needed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fairlead/fairlead/bench/ha"
)

func main() {
	target := flag.String("url", "http://10.213.0.100:8080", "front end base URL")
	rate := flag.Int("rate", 200, "GETs per second")
	tunnels := flag.Int("tunnels", 50, "WebSocket tunnels, one per asset")
	timeout := flag.Duration("timeout", 2*time.Second, "one GET; one tunnel's dial and handshake")
	maxRun := flag.Duration("max", time.Minute, "stop by itself after this long")
	probe := flag.String("probe", "", "GET this URL once: exit 0 on 200")
	printBody := flag.Bool("print", false, "with -probe: print the body")
	flag.Parse()
	if *probe != "" {
		os.Exit(probeOnce(*probe, *printBody))
	}

	l := ha.StartLoad(ha.LoadOptions{URL: *target, Rate: *rate, Tunnels: *tunnels, Timeout: *timeout})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(*maxRun)
	ready := l.Ready()
run:
	for {
		select {
		case <-ready:
			fmt.Println("ready")
			ready = nil
		case <-deadline:
			break run
		case line, ok := <-lines:
			cmd, arg, _ := strings.Cut(line, " ")
			switch {
			case !ok || cmd == "stop":
				break run
			case cmd == "mark":
				l.Mark(arg)
				fmt.Println("marked", arg)
			case cmd == "open":
				fmt.Println("open", l.Open())
			default:
				fmt.Fprintf(os.Stderr, "client: unknown command %q\n", line)
			}
		}
	}
	b, _ := json.Marshal(l.Stop())
	fmt.Printf("report %s\n", b)
}

func probeOnce(url string, printBody bool) int {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get(url)
	if err != nil {
		return 1
	}
	defer resp.Body.Close()
	if printBody {
		io.Copy(os.Stdout, resp.Body) //nolint:errcheck
	}
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
