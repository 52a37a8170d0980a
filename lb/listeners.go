package lb

import (
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/frontend"
	"github.com/fairlead/fairlead/lb/handover"
	"github.com/valyala/fasthttp"
)

// The front end's wiring: its listeners (plain and HTTPS, checked by lb/frontend) and the admin's,
// which a reload may move to another address.

// listenerID names one of the LB's listeners.
type listenerID int

const (
	lnPlain listenerID = iota // [frontend] listen
	lnTLS                     // [frontend] tls_listen
	lnAdmin                   // [admin] listen
	numListeners
)

// listenerKeys are the listeners' config keys, by listenerID: the names a binary upgrade hands them
// over by (package handover).
var listenerKeys = [numListeners]string{lnPlain: "listen", lnTLS: "tls_listen", lnAdmin: "admin.listen"}

// listeners are the LB's listening sockets, nil where none is configured, each with the socket under
// the front end's wrapping and the address its config named. Safe for concurrent use.
type listeners struct {
	mu     sync.Mutex
	ln     [numListeners]net.Listener
	raw    [numListeners]net.Listener
	config [numListeners]string
}

// set makes ln the listener id (raw its socket, config its configured address) and returns the one it
// replaces (nil: none).
func (l *listeners) set(id listenerID, ln, raw net.Listener, config string) (old net.Listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, l.ln[id], l.raw[id], l.config[id] = l.ln[id], ln, raw, config
	return old
}

// handover returns the listening sockets by config key, for a new process of a binary upgrade.
func (l *listeners) handover() map[string]handover.Listener {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]handover.Listener)
	for id, raw := range l.raw {
		if raw != nil {
			m[listenerKeys[id]] = handover.Listener{Config: l.config[id], Listener: raw}
		}
	}
	return m
}

// listenAs listens on addr for the listener key: on the socket the old process of a binary upgrade
// handed over for that key when its config named the same address (it is taken: used once), else anew.
func listenAs(given *handover.Given, key, addr string) (net.Listener, error) {
	if hl, ok := given.Listeners[key]; ok && hl.Config == addr {
		delete(given.Listeners, key)
		return hl.Listener, nil
	}
	return net.Listen("tcp", addr)
}

// addr returns the address of the listener id, or "" if there is none.
func (l *listeners) addr(id listenerID) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln[id] == nil {
		return ""
	}
	return l.ln[id].Addr().String()
}

// closeAll closes every listener (their Serve calls return).
func (l *listeners) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.ln {
		if ln != nil {
			ln.Close() //nolint:errcheck // Shutdown may close it again
		}
	}
}

// frontListenerSpec describes one of the front end's listeners: its config key, its address in a
// config, which it is and how an accepted socket is wrapped.
type frontListenerSpec struct {
	key  string
	addr func(*config.Config) string
	id   listenerID
	wrap func(net.Listener) net.Listener
}

func (lb *LB) frontListeners() []frontListenerSpec {
	return []frontListenerSpec{
		{"listen", func(c *config.Config) string { return c.Frontend.Listen }, lnPlain, lb.px.front.Listener},
		{"tls_listen", func(c *config.Config) string { return c.Frontend.TLSListen }, lnTLS, func(ln net.Listener) net.Listener {
			return lb.px.front.TLSListener(ln, lb.px.frontTLS)
		}},
	}
}

// frontTLS is the TLS configuration of the running generation's front end (nil without tls_listen):
// every handshake takes it, so that a reload replaces certificates without touching open connections.
func (px *proxy) frontTLS() *tls.Config {
	return px.gen.Load().tls
}

// frontLimits are the limits the front end's framer enforces.
func frontLimits(fe *config.Frontend) frontend.Limits {
	return frontend.Limits{MaxHeader: fe.MaxHeaderSize, MaxBody: fe.MaxBodySize, HeaderTimeout: fe.HeaderTimeout.D}
}

// sourceLimits are the limits per client address of fe.
func sourceLimits(fe *config.Frontend, now func() time.Time) frontend.SourceLimits {
	return frontend.SourceLimits{Rate: float64(fe.RatePerSource), Burst: float64(fe.BurstPerSource),
		MaxConns: fe.MaxConnsPerSource, Trusted: fe.Trusted, Now: now}
}

// frontendError is the front end's fasthttp error handler: lb/frontend answers a request that could
// not be read, counts it and has it logged (logRefused).
func (px *proxy) frontendError(ctx *fasthttp.RequestCtx, err error) {
	px.front.ErrorHandler(ctx, err)
}
