package main

// fairlead-sim devices: edge devices holding WebSocket tunnels through fairlead, each saying where it
// landed, so that a demo shows stickiness and what a connection server going down does to tunnels.

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"
)

const devicesUsage = `usage: fairlead-sim devices [-n 6] [-url ws://127.0.0.1:8080/Thingworx/WS] [-insecure]

Connects n simulated edge devices through fairlead, each with its own asset id (PREFIX1, PREFIX2, ...,
sent as X-Asset-Id, the demo's sticky key), and keeps their tunnels open until SIGINT or SIGTERM. Each
prints one line where it landed (the connection server that answered the upgrade, its X-Served-By),
one when its tunnel closes, and one where it landed after it reconnected.

`

// runDevices runs the devices mode until SIGINT or SIGTERM: 0 then, 2 for bad flags.
func runDevices(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return devices(ctx, args, stdout, stderr)
}

// devices is runDevices until ctx ends.
func devices(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fairlead-sim devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, devicesUsage); fs.PrintDefaults() }
	n := fs.Int("n", 6, "number of devices")
	url := fs.String("url", "ws://127.0.0.1:8080/Thingworx/WS", "fairlead's WebSocket address (ws:// or wss://)")
	prefix := fs.String("prefix", "device-", "asset ids are PREFIX1 ... PREFIXn")
	insecure := fs.Bool("insecure", false, "wss: accept any server certificate (as curl -k; the demo's is made at start by a CA of its own)")
	ping := fs.Duration("ping", 5*time.Second, "how often each device sends a message (its connection server echoes it)")
	retry := fs.Duration("retry", time.Second, "the wait before reconnecting (plus up to half of it at random)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *n < 1 || *ping <= 0 || *retry <= 0 || fs.NArg() > 0 ||
		!strings.HasPrefix(*url, "ws://") && !strings.HasPrefix(*url, "wss://") {
		fmt.Fprintln(stderr, "fairlead-sim devices: -n at least 1, -ping and -retry positive, -url ws://… or wss://…, no arguments")
		return 2
	}
	out := &lines{w: stdout}
	dialer := &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		TLSClientConfig:  &tls.Config{InsecureSkipVerify: *insecure}, //nolint:gosec // asked for with -insecure
	}
	var wg sync.WaitGroup
	for i := 1; i <= *n; i++ {
		d := &device{id: fmt.Sprintf("%s%d", *prefix, i), url: *url, dialer: dialer, ping: *ping, retry: *retry, out: out}
		wg.Go(func() { d.run(ctx) })
	}
	wg.Wait()
	return 0
}

// lines writes whole lines, one at a time, each after the time of day.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, time.Now().Format("15:04:05")+" "+format+"\n", args...)
}

// device is one simulated edge device: one tunnel at a time, reopened when it closes.
type device struct {
	id, url     string
	dialer      *websocket.Dialer
	ping, retry time.Duration
	out         *lines
}

// run connects, holds the tunnel until it closes, and reconnects, until ctx ends.
func (d *device) run(ctx context.Context) {
	header := http.Header{"X-Asset-Id": {d.id}}
	was := ""       // the server of the previous tunnel
	failed := false // the last dial failed (said once per outage)
	for {
		c, resp, err := d.dialer.DialContext(ctx, d.url, header)
		if ctx.Err() != nil {
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil {
			if !failed {
				d.out.printf("%s cannot connect: %s (retrying every %s)", d.id, dialError(err, resp), d.retry)
				failed = true
			}
			if !d.wait(ctx) {
				return
			}
			continue
		}
		failed = false
		server := resp.Header.Get("X-Served-By")
		if server == "" {
			server = "an unnamed server"
		}
		switch {
		case was == "":
			d.out.printf("%s connected to %s", d.id, server)
		case was == server:
			d.out.printf("%s reconnected to %s (the same server)", d.id, server)
		default:
			d.out.printf("%s reconnected to %s (was on %s)", d.id, server, was)
		}
		why := d.hold(ctx, c)
		if ctx.Err() != nil {
			return
		}
		d.out.printf("%s lost its tunnel to %s: %s; reconnecting", d.id, server, why)
		was = server
		if !d.wait(ctx) {
			return
		}
	}
}

// wait waits retry and up to half of it more at random (so that devices cut off together do not all
// come back in the same instant); false if ctx ended first.
func (d *device) wait(ctx context.Context) bool {
	t := time.NewTimer(d.retry + rand.N(d.retry/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// hold keeps the tunnel c busy (a message every ping, echoed back) until it closes or ctx ends, and
// says why it closed. At the end of ctx it says goodbye with a close frame.
func (d *device) hold(ctx context.Context, c *websocket.Conn) string {
	defer c.Close()
	closed := make(chan error, 1)
	go func() {
		for {
			// An echo is due within ping; twice that and more of silence is a dead tunnel.
			c.SetReadDeadline(time.Now().Add(3 * d.ping)) //nolint:errcheck
			if _, _, err := c.ReadMessage(); err != nil {
				closed <- err
				return
			}
		}
	}()
	tick := time.NewTicker(d.ping)
	defer tick.Stop()
	for {
		select {
		case err := <-closed:
			return closeReason(err)
		case <-ctx.Done():
			msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "device stopping")
			c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second)) //nolint:errcheck
			return "stopped"
		case <-tick.C:
			c.SetWriteDeadline(time.Now().Add(d.ping)) //nolint:errcheck
			if err := c.WriteMessage(websocket.TextMessage, []byte("telemetry from "+d.id)); err != nil {
				c.Close() // ends the reader, which says why
			}
		}
	}
}

// closeReason says in words why a tunnel's read ended.
func closeReason(err error) string {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce) && ce.Code == websocket.CloseAbnormalClosure:
		return "the connection was closed without a close frame"
	case errors.As(err, &ce):
		if ce.Text != "" {
			return fmt.Sprintf("closed with code %d (%s)", ce.Code, ce.Text)
		}
		return fmt.Sprintf("closed with code %d", ce.Code)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed"
	default:
		return err.Error()
	}
}

// dialError says why an upgrade failed: fairlead's answer when there was one, else the dial's error.
func dialError(err error, resp *http.Response) string {
	if resp != nil {
		return "answered " + resp.Status
	}
	return err.Error()
}
