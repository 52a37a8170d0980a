package sim

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// maxMessageSize is the largest WebSocket message a connection server
// accepts.
const maxMessageSize = 16 << 20

var pathHealth = []byte("/health")

// ConnServer is a simulated ThingWorx connection server: a WebSocket echo
// server with a health endpoint.
//
// A request carrying a WebSocket upgrade, on any path, is upgraded (the 101
// carries "X-Served-By: <Name>") and every message is echoed back with the
// same type; messages up to 16 MiB are accepted. GET /health answers 200
// "ok" or 503 according to SetHealthy, on Addr and on HealthAddr. Any other
// request on Addr gets 400.
//
// /health understands two query parameters, so that a test has a slow or a
// large answer from a connection server's HTTP side (a route of plain
// requests to a pool of connection servers):
//
//	delay=D      sleep D (a Go duration) before answering
//	bytes=N      answer with an N-byte body, byte i being 'a'+i%26, streamed
//	             with a Content-Length, instead of "ok" (when healthy)
//
// All methods are safe for concurrent use.
type ConnServer struct {
	// Name is "cx1", "cx2", ...
	Name string
	// Addr is the host:port of the WebSocket (and health) listener.
	Addr string
	// HealthAddr is the host:port answering /health; it equals Addr when
	// there is no separate health listener.
	HealthAddr string

	main   *netServer
	health *netServer // nil without a separate health listener
	logf   func(format string, args ...any)

	servedBy []byte
	upgrader websocket.FastHTTPUpgrader

	// opMu serializes Kill, Restart, PauseListener and ResumeListener.
	opMu         sync.Mutex
	healthy      atomic.Bool
	upgradeFault atomic.Int32 // an UpgradeFault

	upgrades atomic.Int64
	tunnels  atomic.Int64

	hdrMu   sync.Mutex
	lastHdr http.Header
	times   []time.Time // when each upgrade was answered (UpgradeTimes), the last maxUpgradeTimes
}

// maxUpgradeTimes bounds the upgrade times a connection server keeps.
const maxUpgradeTimes = 100_000

func newConnServer(name, addr, healthAddr string, opts *Options) (*ConnServer, error) {
	s := &ConnServer{
		Name:     name,
		logf:     opts.Logf,
		servedBy: []byte(name),
		upgrader: websocket.FastHTTPUpgrader{
			CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		},
	}
	s.healthy.Store(true)
	main, err := newNetServer(addr, opts.TLS, func() *fasthttp.Server { return s.newServer(s.handle) }, s.logf)
	if err != nil {
		return nil, fmt.Errorf("connection server %s: %w", name, err)
	}
	s.main = main
	s.Addr = main.addr
	s.HealthAddr = main.addr
	if healthAddr != "" {
		health, err := newNetServer(healthAddr, opts.TLS, func() *fasthttp.Server { return s.newServer(s.handleHealthOnly) }, s.logf)
		if err != nil {
			main.close()
			return nil, fmt.Errorf("connection server %s health: %w", name, err)
		}
		s.health = health
		s.HealthAddr = health.addr
	}
	return s, nil
}

func (s *ConnServer) newServer(h fasthttp.RequestHandler) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:        h,
		Name:           "fairlead-sim",
		ReadBufferSize: 16 << 10,
		Logger:         fasthttpLogger{prefix: s.Name + ": ", logf: s.logf},
	}
}

// SetHealthy sets what /health answers: 200 "ok" when ok, 503 otherwise.
// The default is healthy. It does not affect WebSocket traffic.
func (s *ConnServer) SetHealthy(ok bool) {
	if s.healthy.Swap(ok) != ok {
		s.logf("%s: healthy=%v", s.Name, ok)
	}
}

// UpgradeFault is how a connection server answers WebSocket upgrades (SetUpgradeFault); /health is not
// affected, so a health check keeps passing.
type UpgradeFault int32

const (
	UpgradeServed    UpgradeFault = iota // upgraded: the 101, then an echo (the default)
	UpgradeHung                          // the request is read and never answered; the connection stays open
	UpgradeMalformed                     // answered with a head that is no HTTP response, then closed
	UpgradeReset                         // the connection is reset (RST) once the request is read
)

// SetUpgradeFault sets how the server answers WebSocket upgrades from now on.
func (s *ConnServer) SetUpgradeFault(f UpgradeFault) {
	if s.upgradeFault.Swap(int32(f)) != int32(f) {
		s.logf("%s: upgrade fault %d", s.Name, f)
	}
}

// Healthy reports what /health answers (true for 200).
func (s *ConnServer) Healthy() bool {
	return s.healthy.Load()
}

// Kill simulates the server process dying: it closes the listener(s) and
// every open connection, WebSocket tunnels included, so tunnel reads fail at
// once and new dials are refused. Killing a killed server is a no-op.
func (s *ConnServer) Kill() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	wasAlive := s.main.running()
	s.main.stop()
	if s.health != nil {
		s.health.stop()
	}
	if wasAlive {
		s.logf("%s: killed", s.Name)
	}
	return nil
}

// Restart listens again on Addr (and HealthAddr) after Kill, retrying
// briefly while a port is still busy. Restarting a running server is a
// no-op.
func (s *ConnServer) Restart() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.main.running() {
		return nil
	}
	if err := s.main.start(); err != nil {
		return fmt.Errorf("connection server %s: %w", s.Name, err)
	}
	if s.health != nil {
		if err := s.health.start(); err != nil {
			s.main.stop()
			return fmt.Errorf("connection server %s health: %w", s.Name, err)
		}
	}
	s.logf("%s: restarted", s.Name)
	return nil
}

// Alive reports whether the server is running (not killed); a server whose
// listener is paused is alive.
func (s *ConnServer) Alive() bool {
	return s.main.running()
}

// PauseListener closes the listener on Addr while the server stays alive:
// new dials to Addr are refused, but the WebSocket tunnels and keep-alive
// connections already open go on being served, as when a process stops
// accepting or a firewall briefly closes the port. A separate health
// listener (HealthAddr != Addr) keeps answering; with health served on Addr,
// health checks are refused too. Pausing a paused server is a no-op; a
// killed server gives an error. Kill and Restart work on a paused server
// (Restart listens again).
func (s *ConnServer) PauseListener() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	wasListening := s.main.listening()
	if err := s.main.pauseListener(); err != nil {
		return fmt.Errorf("connection server %s: %w", s.Name, err)
	}
	if wasListening {
		s.logf("%s: listener paused", s.Name)
	}
	return nil
}

// ResumeListener listens on Addr again after PauseListener, retrying
// briefly while the port is still busy; the tunnels opened before the pause
// are kept. Resuming a server that is not paused is a no-op; a killed server
// gives an error.
func (s *ConnServer) ResumeListener() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	wasListening := s.main.listening()
	if err := s.main.resumeListener(); err != nil {
		return fmt.Errorf("connection server %s: %w", s.Name, err)
	}
	if !wasListening {
		s.logf("%s: listener resumed", s.Name)
	}
	return nil
}

// Listening reports whether new dials to Addr are accepted: the server is
// alive and its listener is not paused.
func (s *ConnServer) Listening() bool {
	return s.main.listening()
}

// Upgrades returns the number of successful WebSocket upgrades so far. It is
// incremented before the 101 response is sent.
func (s *ConnServer) Upgrades() int64 {
	return s.upgrades.Load()
}

// UpgradeTimes returns when the server received each upgrade it answered, oldest first (the last
// 100,000): how a test sees the rate at which a proxy admits new tunnels to it.
func (s *ConnServer) UpgradeTimes() []time.Time {
	s.hdrMu.Lock()
	defer s.hdrMu.Unlock()
	return slices.Clone(s.times)
}

// MaxInOneSecond is the most of times (oldest first, as UpgradeTimes) that fall in any one-second
// window: the peak rate at which a server received new tunnels.
func MaxInOneSecond(times []time.Time) int {
	most := 0
	for i, j := 0, 0; j < len(times); j++ {
		for times[j].Sub(times[i]) >= time.Second {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// OpenTunnels returns the number of currently open WebSocket connections.
// A tunnel counts from just after the 101 is written until its connection
// closes.
func (s *ConnServer) OpenTunnels() int {
	return int(s.tunnels.Load())
}

// LastUpgradeHeaders returns a copy of the request headers of the latest
// upgrade request (nil before the first one), with canonical names.
func (s *ConnServer) LastUpgradeHeaders() http.Header {
	s.hdrMu.Lock()
	defer s.hdrMu.Unlock()
	return s.lastHdr.Clone()
}

func (s *ConnServer) close() {
	s.main.close()
	if s.health != nil {
		s.health.close()
	}
}

func (s *ConnServer) handle(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetBytesKV(hdrServedBy, s.servedBy)
	if websocket.FastHTTPIsWebSocketUpgrade(ctx) {
		if f := UpgradeFault(s.upgradeFault.Load()); f != UpgradeServed {
			s.faultUpgrade(ctx, f)
			return
		}
		s.upgrade(ctx)
		return
	}
	if bytes.Equal(ctx.Path(), pathHealth) {
		s.serveHealth(ctx, s.main)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusBadRequest)
	ctx.SetBodyString("websocket upgrade expected\n")
}

func (s *ConnServer) handleHealthOnly(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetBytesKV(hdrServedBy, s.servedBy)
	if bytes.Equal(ctx.Path(), pathHealth) {
		s.serveHealth(ctx, s.health)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusNotFound)
	ctx.SetBodyString("not found\n")
}

// serveHealth answers /health on srv (whose stop cuts a delay short).
func (s *ConnServer) serveHealth(ctx *fasthttp.RequestCtx, srv *netServer) {
	nbytes, ok := delayAndBytes(ctx, func(d time.Duration) bool { return sleepUnlessStopped(d, srv.stopping()) })
	if !ok {
		return
	}
	ctx.SetContentTypeBytes(textPlain)
	if s.healthy.Load() {
		if nbytes >= 0 {
			ctx.SetBodyStream(&patternReader{left: nbytes}, int(nbytes))
			return
		}
		ctx.SetBodyString("ok\n")
		return
	}
	ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	ctx.SetBodyString("unhealthy\n")
}

// faultUpgrade answers an upgrade as f says (SetUpgradeFault).
func (s *ConnServer) faultUpgrade(ctx *fasthttp.RequestCtx, f UpgradeFault) {
	stop := s.main.stopping()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		switch f {
		case UpgradeHung:
			<-stop // held until the server is killed or closed
		case UpgradeMalformed:
			c.Write([]byte("HTTP/1.1 OK\r\nX-Served-By: " + s.Name + "\r\n\r\n")) //nolint:errcheck // a fault
		case UpgradeReset:
			raw := c
			if t, ok := raw.(*trackedConn); ok {
				raw = t.Conn
			}
			if tc, ok := raw.(*net.TCPConn); ok {
				tc.SetLinger(0) //nolint:errcheck // then Close sends RST
			}
		}
		c.Close()
	})
}

func (s *ConnServer) upgrade(ctx *fasthttp.RequestCtx) {
	h := make(http.Header)
	for k, v := range ctx.Request.Header.All() {
		h.Add(string(k), string(v))
	}
	s.hdrMu.Lock()
	s.lastHdr = h
	if len(s.times) == maxUpgradeTimes {
		s.times = s.times[:copy(s.times, s.times[maxUpgradeTimes/2:])]
	}
	s.times = append(s.times, time.Now())
	s.hdrMu.Unlock()
	if err := s.upgrader.Upgrade(ctx, func(c *websocket.Conn) { echoMessages(c, &s.tunnels) }); err != nil {
		s.logf("%s: upgrade failed: %s", s.Name, err)
		return
	}
	s.upgrades.Add(1)
}

// echoMessages echoes every message of c back with the same type until the
// connection fails or closes; open counts it while it runs. Messages up to
// maxMessageSize are accepted.
func echoMessages(c *websocket.Conn, open *atomic.Int64) {
	open.Add(1)
	defer open.Add(-1)
	c.SetReadLimit(maxMessageSize)
	for {
		mt, r, err := c.NextReader()
		if err != nil {
			return
		}
		w, err := c.NextWriter(mt)
		if err != nil {
			return
		}
		if _, err := io.Copy(w, r); err != nil {
			return
		}
		if err := w.Close(); err != nil {
			return
		}
	}
}
