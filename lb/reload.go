package lb

import (
	"fmt"
	"net"
	"reflect"

	"github.com/fairlead/fairlead/lb/acme"
	"github.com/fairlead/fairlead/lb/config"
	"github.com/fairlead/fairlead/lb/relay"
)

// A reload, step by step (LB.Reload). What a running fairlead holds, each thing once, and the step
// of a reload that takes it over from the running generation:
//
//	listeners   plain, TLS and admin sockets (lns, listeners.go)        bind, then rebind
//	relays      one upstream session per topic, cached (relays.go)     startRelays, swap
//	acme        [frontend.acme]'s certificates (certificates.go)       prepareACME, startACME
//	pools       health checks, sticky tables, limiters (pool.go)       build, startPools, retire
//	generation  the config, routes and pools requests read (proxy.gen)  swap
//	discovery   each pool's provider (discovery.go)                    swap
//	tunnels     every WebSocket tunnel (proxy.tunnels)                 kept: they outlive generations
//	state       state file writer, history, event subscribers          kept: fixed at start
//
// A step that can fail comes before anything is in force: a new listen address that cannot be bound,
// a relay that cannot start, and the running config stays whole.
//
// A binary upgrade (package handover, SIGUSR2) hands the same list to a new process of fairlead: the
// listeners' sockets and the pools' state (each leader and its health, the sticky keys) before it starts
// (LB.HandOver, Options.Given); its relays, discovery and history start anew. Once it serves, the old
// process stops accepting and hands over every plain tunnel, its two sockets open (handover.go); a TLS
// tunnel is not handed over yet: the old process's drain closes it.
type reload struct {
	lb      *LB
	cfg     *config.Config
	old, g  *generation
	listens []boundListener         // bind: new front-end listen addresses, bound
	adminLn net.Listener            // bind: a new admin listen address, bound
	relays  map[string]*relay.Route // startRelays: every relay of cfg, running or new
	acme    *acme.Manager           // prepareACME: [frontend.acme]'s manager, the running one or new
	acmeNew bool                    // prepareACME: acme is new (it manages once the listeners serve)
	fresh   []*Pool                 // build: the pools new in g (their checks start in startPools)
	restart []string                // what only a restart applies (bind finds some, needsRestart the rest)
}

// boundListener is a front-end listener of the new config, bound before anything applies.
type boundListener struct {
	spec    frontListenerSpec
	ln, raw net.Listener // wrapped for the front end, and its socket
	addr    string       // as the config names it
}

// bind binds the new listen addresses: if one cannot be, nothing of the reload applies. A listener
// added or removed needs a restart.
func (r *reload) bind() error {
	lb, cfg := r.lb, r.cfg
	for _, f := range lb.frontListeners() {
		was, now := f.addr(r.old.cfg), f.addr(cfg)
		switch {
		case lb.frontServer == nil || was == now:
		case was == "" || now == "":
			r.restart = append(r.restart, "[frontend] "+f.key+" added or removed")
		default:
			ln, err := net.Listen("tcp", now)
			if err != nil {
				r.unbind()
				return fmt.Errorf("%s: frontend.%s: %w", cfg.FileOf("frontend."+f.key), f.key, err)
			}
			r.listens = append(r.listens, boundListener{spec: f, ln: f.wrap(ln), raw: ln, addr: now})
		}
	}
	if lb.adminServer != nil && cfg.Admin.Listen != "" && cfg.Admin.Listen != r.old.cfg.Admin.Listen {
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			r.unbind()
			return fmt.Errorf("%s: admin.listen: %w", cfg.FileOf("admin.listen"), err)
		}
		r.adminLn = ln
	}
	return nil
}

// unbind closes what bind bound, when the reload does not apply.
func (r *reload) unbind() {
	for _, b := range r.listens {
		b.ln.Close() //nolint:errcheck
	}
	if r.adminLn != nil {
		r.adminLn.Close() //nolint:errcheck
	}
}

// startRelays starts the new or changed relays before anything else applies: a relay whose start
// fails (start = "normal" and a listed topic cannot be fetched) fails the reload.
func (r *reload) startRelays() error {
	var fresh []*relay.Route
	r.relays, fresh = r.lb.relays.prepare(r.lb, r.cfg)
	if err := startRelays(r.lb.ctx, fresh); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// prepareACME keeps the running [frontend.acme] manager when the table is the same, else makes the
// new one (it obtains nothing before startACME).
func (r *reload) prepareACME() error {
	var err error
	r.acme, r.acmeNew, err = r.lb.acmeFor(r.cfg, r.old.acme)
	if r.acmeNew {
		r.acme.LoadStored() // served from the first handshake after the swap
	}
	return err
}

// dropACME closes a new manager when the reload does not apply.
func (r *reload) dropACME() {
	if r.acmeNew {
		r.acme.Close()
	}
}

// build makes the new generation: the pools that stay get their server set change, new ones are made.
func (r *reload) build() {
	r.g, r.fresh = r.lb.newGeneration(r.cfg, r.old, r.relays)
	r.g.withACME(r.acme)
}

// startACME makes a new manager obtain and renew, now that the listeners it answers challenges on
// serve, and closes the one it replaced.
func (r *reload) startACME() {
	r.lb.startACME(r.g, r.old.acme, r.acmeNew)
}

// startPools starts the new pools' checks and waits for their first round (bounded by the check
// timeout), so that no request meets a pool that knows no server yet.
func (r *reload) startPools() error {
	for _, p := range r.fresh {
		p.start(r.lb.ctx)
	}
	for _, p := range r.fresh {
		select {
		case <-p.ready():
		case <-r.lb.ctx.Done():
			return r.lb.ctx.Err()
		}
	}
	return nil
}

// swap puts the new generation in force: requests from now on read it, with its limits per source,
// its log level, its relays and its discovery.
func (r *reload) swap() {
	lb := r.lb
	lb.px.gen.Store(r.g)
	lb.px.front.Sources().SetLimits(sourceLimits(&r.cfg.Frontend, lb.now))
	lb.px.front.SetProxyProtocol(r.cfg.Frontend.ProxyFrom)
	lb.level.Set(config.LogLevels[r.cfg.Global.LogLevel])
	lb.relays.swap(r.relays)
	lb.disc.sync(r.g)
}

// rebind serves the listeners bind bound; the old ones close without cutting their connections.
func (r *reload) rebind() {
	for _, b := range r.listens {
		what := "frontend"
		if b.spec.key != "listen" {
			what += " " + b.spec.key
		}
		r.lb.rebind(r.lb.frontServer, b.spec.id, b.ln, b.raw, b.addr, what)
	}
	if r.adminLn != nil {
		r.lb.rebind(r.lb.adminServer, lnAdmin, r.adminLn, r.adminLn, r.cfg.Admin.Listen, "admin")
	}
}

// retire closes the pools the new generation does not keep (their checks stop; their servers' tunnels
// close with the server_removed events).
func (r *reload) retire() {
	for name, p := range r.old.pools {
		if r.g.pools[name] != p {
			p.close()
		}
	}
}

// needsRestart lists the changes in force only after a restart. The listen addresses moved above, the
// admin credentials, access_log and log_level apply at once; the rest of [frontend] configures the
// running HTTP server, and the logger's format and the state file are set up at start.
func (r *reload) needsRestart() []string {
	cfg, old := r.cfg, r.old.cfg
	fe, ofe := cfg.Frontend, old.Frontend
	fe.Listen, ofe.Listen, fe.TLSListen, ofe.TLSListen = "", "", "", ""
	// Certificates, client CAs and redirect_https apply at once (every handshake and request reads the
	// running generation's).
	for _, f := range []*config.Frontend{&fe, &ofe} {
		f.TLSCert, f.TLSKey, f.Certs, f.ClientCA, f.ClientAuth, f.RedirectHTTPS, f.TLS = "", "", nil, "", "", false, nil
		f.ACME = nil // [frontend.acme] too: the ACME manager is replaced when it changes (acme.go)
	}
	// trusted_proxies applies at once (read from the generation of each request), and so do the limits
	// per source (frontend.Sources).
	fe.TrustedProxies, ofe.TrustedProxies, fe.Trusted, ofe.Trusted = nil, nil, nil, nil
	fe.RatePerSource, ofe.RatePerSource, fe.BurstPerSource, ofe.BurstPerSource = 0, 0, 0, 0
	fe.MaxConnsPerSource, ofe.MaxConnsPerSource = 0, 0
	fe.ProxyProtocol, ofe.ProxyProtocol, fe.ProxyFrom, ofe.ProxyFrom = nil, nil, nil, nil // at once too
	restart := r.restart
	if !reflect.DeepEqual(fe, ofe) {
		restart = append(restart, "[frontend] (but its listeners and TLS)")
	}
	if (cfg.Admin.Listen == "") != (old.Admin.Listen == "") {
		restart = append(restart, "[admin] listen")
	}
	if gl, ogl := cfg.Global, old.Global; gl.LogFormat != ogl.LogFormat || gl.StateFile != ogl.StateFile || gl.Start != ogl.Start {
		restart = append(restart, "[global] log_format, state_file or start")
	}
	return restart
}
