package discovery

// The zookeeper discovery provider (issue #12). ThingWorx HA registers its platform instances in Apache
// ZooKeeper through Apache Curator service discovery: one child znode per instance under a path, its
// data the instance as JSON ({"address": "10.0.0.5", "port": 8080, "sslPort": 8443, ...}). Other
// registries write "host:port" as the data (or as the name of a child without data); all are read.
//
// One goroutine (Watch) owns a ZooKeeper client and everything the provider remembers. It lists the
// path's children with a watch, reads each child, and hands the complete list to the Watcher; it lists
// again when the watch fires, and every session_timeout as a safety net (a change a watch missed is then
// noticed within that time). The reads run in a goroutine of their own, one at a time, so that the loop
// keeps following the session while ZooKeeper is slow to answer.
//
// Failure modes, each reported through failed (logged, counted; the last list stays in force):
//   - the session is lost (the connection broke, an ensemble member went down, the session expired): a
//     new client connects (to any member of the ensemble, retrying every second while none answers)
//     and reads the path again with new watches; see session for why the library does not reconnect;
//   - no member answers: each read fails after a round of connection attempts, and is retried with a
//     backoff (250ms doubling up to session_timeout);
//   - a read gets no answer for session_timeout (a member that accepts connections but does not answer):
//     reported once, while the library gives up on that member and tries the next;
//   - the path does not exist: fairlead waits for its creation (an exists watch) and retries with the
//     backoff;
//   - a child that is not an instance (bad data, no usable port) is skipped and logged once, not an error
//     for the whole list; a child deleted between the listing and its reading is simply not listed;
//   - a child that cannot be read (its ACL) fails the whole list: wrong credentials never empty a pool.
// A healthy session with no children is an empty list: the Watcher applies it after empty_grace.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/go-zookeeper/zk"
)

// parseInstance returns the address of the instance a child znode describes: its data is "host:port"
// or a Curator service instance (JSON; sslPort is used when the pool speaks TLS and the instance has
// one, port otherwise); a child without data may be named "host:port". why says what is wrong when it
// describes none.
func parseInstance(name string, data []byte, useTLS bool) (addr string, why error) {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) == 0:
		if config.InstanceAddr(name) == nil {
			return name, nil
		}
		return "", errors.New("no data, and its name is not host:port")
	case data[0] == '{':
		var in struct {
			Address string `json:"address"`
			Port    *int   `json:"port"`
			SSLPort *int   `json:"sslPort"`
			Enabled *bool  `json:"enabled"`
		}
		if err := json.Unmarshal(data, &in); err != nil {
			return "", fmt.Errorf("not a Curator service instance: %v", err)
		}
		if in.Enabled != nil && !*in.Enabled {
			return "", errors.New(`disabled ("enabled": false)`)
		}
		port := 0
		switch {
		case useTLS && in.SSLPort != nil && *in.SSLPort > 0:
			port = *in.SSLPort
		case in.Port != nil:
			port = *in.Port
		}
		if in.Address == "" {
			return "", errors.New("the Curator service instance has no address")
		}
		if port <= 0 {
			if !useTLS && in.SSLPort != nil && *in.SSLPort > 0 {
				return "", errors.New("the Curator service instance has only an sslPort, and the pool's [tls] is not enabled")
			}
			return "", errors.New("the Curator service instance has no port")
		}
		addr = net.JoinHostPort(in.Address, strconv.Itoa(port))
	default:
		addr = string(data)
	}
	if err := config.InstanceAddr(addr); err != nil {
		return "", fmt.Errorf("bad address %.80q: %v", addr, err) // at most 80 characters of it
	}
	return addr, nil
}

func newZooKeeper(dc config.Discovery, o Options) (Provider, error) {
	z := &zkProvider{servers: dc.ZooKeeper, path: dc.Path, timeout: dc.SessionTimeout.D, tls: o.TLS,
		logf: func(format string, args ...any) {
			o.Logf("discovery: pool %s: zookeeper: "+format, append([]any{o.Pool}, args...)...)
		}}
	if dc.DigestUser != "" {
		z.auth = []byte(dc.DigestUser + ":" + dc.DigestPassword)
	}
	return z, nil
}

// zkProvider watches the children of one znode.
type zkProvider struct {
	servers []string
	path    string
	timeout time.Duration // session_timeout; also the safety re-list period and the longest backoff
	auth    []byte        // "user:password" for the digest scheme, nil without; never logged
	tls     bool
	logf    func(string, ...any) // prefixed with the pool and the provider

	skipped map[string]string // the children skipped, with the reason logged (each logged once)
}

const zkMinBackoff = 250 * time.Millisecond

func (z *zkProvider) Watch(ctx context.Context, found func([]string), failed func(error)) {
	fail := func(err error) {
		if ctx.Err() == nil { // a read cut short by the end is no error
			failed(err)
		}
	}
	wait := time.Duration(0)
	for ctx.Err() == nil {
		begun := time.Now()
		z.session(ctx, found, fail)
		// A client that lost its session soon after getting it (a server accepting and dropping
		// clients) is replaced after a growing wait; one that served a while at once.
		if time.Since(begun) > z.timeout {
			wait = 0
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(max(2*wait, zkMinBackoff), z.timeout)
	}
}

// zkRead is the outcome of one read of the path.
type zkRead struct {
	list    []string
	skipped map[string]string // child → why it is no instance
	watch   <-chan zk.Event   // the watch set by this read (on the children, or on the path's creation)
	authed  bool              // the digest credentials were added to the connection
	err     error
}

// errNoReconnect refuses the client library's reconnection after a lost session (session).
var errNoReconnect = errors.New("no reconnection: fairlead opens a new client")

// session runs one ZooKeeper client with one session, until ctx ends or the session is lost.
//
// The library would reconnect by itself and re-set the watches of the session, but that path has a data
// race (go-zookeeper/zk#35: lastZxid, read by sendSetWatches while recvLoop writes it), and a client that
// has seen a newer transaction id than an ensemble rebuilt with empty data is refused by it forever. So
// a client is used for one session only: its dialer refuses to reconnect once it had one, and Watch
// starts a new client, which reads the path again with new watches. The old session is left to expire
// (fairlead creates no ephemeral znode).
func (z *zkProvider) session(ctx context.Context, found func([]string), fail func(error)) {
	var hadSession, lost atomic.Bool
	wake := make(chan struct{}, 1)
	onEvent := func(ev zk.Event) { // called by the library's goroutine, before the event channel
		if ev.Type != zk.EventSession {
			return
		}
		switch ev.State {
		case zk.StateHasSession:
			hadSession.Store(true)
		case zk.StateDisconnected, zk.StateExpired:
			if hadSession.Load() && lost.CompareAndSwap(false, true) {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
	}
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		if hadSession.Load() {
			return nil, errNoReconnect
		}
		return net.DialTimeout(network, addr, timeout)
	}
	conn, _, err := zk.Connect(z.servers, z.timeout, zk.WithDialer(dial), zk.WithEventCallback(onEvent),
		zk.WithLogger(zkLogger(z.logf)), zk.WithLogInfo(false))
	if err != nil {
		fail(fmt.Errorf("connecting to %s: %w", strings.Join(z.servers, ", "), err))
		return
	}
	// Closing the client ends a read in progress at once (the library's calls know no context).
	stop := context.AfterFunc(ctx, conn.Close)
	defer func() {
		stop()
		conn.Close()
	}()

	var (
		reading chan zkRead     // the read in progress, nil when none
		due     = true          // a read is wanted as soon as none is in progress
		watch   <-chan zk.Event // the watch in force, nil when none
		authed  = z.auth == nil
		slow    bool // the read in progress was reported slow
		backoff = zkMinBackoff
	)
	timer := time.NewTimer(z.timeout) // Reset leaves no stale tick (Go 1.23 timers)
	defer timer.Stop()
	for {
		if due && reading == nil {
			due, slow = false, false
			reading = make(chan zkRead, 1)
			go func(ch chan<- zkRead, setWatch, authed bool) { ch <- z.read(conn, setWatch, authed) }(reading, watch == nil, authed)
			timer.Reset(z.timeout)
		}
		select {
		case <-ctx.Done():
			return

		case <-wake:
			fail(fmt.Errorf("lost the session with %s; connecting anew", conn.Server()))
			return

		case r := <-reading:
			reading = nil
			authed = authed || r.authed
			if r.watch != nil {
				watch = r.watch
			}
			if r.err != nil {
				if errors.Is(r.err, zk.ErrNoServer) {
					r.err = fmt.Errorf("%w (%s)", r.err, strings.Join(z.servers, ", "))
				}
				if !lost.Load() { // else the lost session is reported, once
					fail(r.err)
				}
				timer.Reset(backoff)
				backoff = min(2*backoff, z.timeout)
				continue
			}
			backoff = zkMinBackoff
			z.logSkipped(r.skipped)
			found(r.list)
			timer.Reset(z.timeout)

		case <-watch:
			// A watch fires once: the children changed, or the path was created or deleted. Read
			// again, with a new watch.
			watch, due = nil, true

		case <-timer.C:
			if reading != nil {
				if !slow {
					slow = true
					fail(fmt.Errorf("no answer for %s (%s); still waiting", z.timeout, conn.State()))
				}
				timer.Reset(z.timeout)
				continue
			}
			due = true // the safety re-list, or a retry after an error
		}
	}
}

// read lists the path's children and reads each of them. With setWatch it sets a watch: on the
// children, or, when the path does not exist, on its creation.
func (z *zkProvider) read(conn *zk.Conn, setWatch, authed bool) (r zkRead) {
	if !authed {
		// Once per client (a client has one session; the first read waits for it).
		if err := conn.AddAuth("digest", z.auth); err != nil {
			r.err = fmt.Errorf("adding the digest credentials: %w", err)
			return r
		}
		r.authed = true
	}
	var children []string
	for attempt := 0; ; attempt++ {
		var err error
		if setWatch {
			children, _, r.watch, err = conn.ChildrenW(z.path)
		} else {
			children, _, err = conn.Children(z.path)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, zk.ErrNoNode) {
			r.err = fmt.Errorf("listing %s: %w", z.path, err)
			return r
		}
		r.err = fmt.Errorf("%s does not exist (waiting for its creation)", z.path)
		if !setWatch || attempt > 0 {
			return r // a watch for its creation is in force, or the next read sets one
		}
		exists, _, w, err := conn.ExistsW(z.path)
		if err != nil {
			r.err = fmt.Errorf("%s: %w", z.path, err)
			return r
		}
		if !exists {
			r.watch = w
			return r
		}
		// Created since: list it (w, a watch on its data, fires at most once and is not needed).
	}
	r.err = nil
	r.list = make([]string, 0, len(children))
	for _, child := range children {
		data, _, err := conn.Get(z.path + "/" + child)
		if errors.Is(err, zk.ErrNoNode) {
			continue // deleted since the listing: the children watch fires
		}
		if err != nil {
			// A registry error (or a child the credentials cannot read) fails the whole list: the last
			// one stays in force.
			r.err = fmt.Errorf("reading %s/%s: %w", z.path, child, err)
			return r
		}
		addr, why := parseInstance(child, data, z.tls)
		if why != nil {
			if r.skipped == nil {
				r.skipped = map[string]string{}
			}
			r.skipped[child] = why.Error()
			continue
		}
		r.list = append(r.list, addr)
	}
	return r
}

// logSkipped logs each child skipped for a new reason; a child skipped on every read is logged once.
func (z *zkProvider) logSkipped(skipped map[string]string) {
	for child, why := range skipped {
		if z.skipped[child] != why {
			z.logf("skipping %s/%s: %s", z.path, child, why)
		}
	}
	z.skipped = skipped
}

// zkLogger passes the ZooKeeper client's own log lines to the provider's log, but for those repeated on
// every attempt while the ensemble is out of reach (the provider reports the outage itself).
type zkLogger func(string, ...any)

func (f zkLogger) Printf(format string, args ...any) {
	for _, noisy := range []string{"failed to connect to", "authentication failed", "recv loop terminated",
		"send loop terminated", "connected to", "authenticated", "re-submitting"} {
		if strings.HasPrefix(format, noisy) {
			return
		}
	}
	f("client: "+format, args...)
}
