package config

// Defaults: each is defined here once (the sticky table's in package stickiness). The configuration
// reference shows them from here (reference_test.go); the field comments do not restate them, and a test
// fails when conf.d/ shows another value (doc_test.go).

import (
	"time"

	"github.com/fairlead/fairlead/stickiness"
)

func setDuration(d *Duration, set bool, def time.Duration) {
	if !set {
		d.D = def
	}
}

func (c *Config) applyDefaults() {
	gl := &c.Global
	setDuration(&gl.StateMaxAge, c.isSet("global.state_max_age"), time.Hour)
	if !c.isSet("global.start") {
		gl.Start = "normal"
	}
	if !c.isSet("global.log_format") {
		gl.LogFormat = "text"
	}
	if !c.isSet("global.log_level") {
		gl.LogLevel = "info"
	}
	fe := &c.Frontend
	setDuration(&fe.DrainTimeout, c.isSet("frontend.drain_timeout"), 10*time.Second)
	if !c.isSet("frontend.listen") {
		fe.Listen = "127.0.0.1:8080"
	}
	setDuration(&fe.ReadTimeout, c.isSet("frontend.read_timeout"), 30*time.Second)
	setDuration(&fe.IdleTimeout, c.isSet("frontend.idle_timeout"), 60*time.Second)
	if !c.isSet("frontend.max_conns") {
		fe.MaxConns = 20000
	}
	if !c.isSet("frontend.max_header_size") {
		fe.MaxHeaderSize = 8 << 10
	}
	setDuration(&fe.HeaderTimeout, c.isSet("frontend.header_timeout"), 10*time.Second)
	if !c.isSet("frontend.retry_buffer") {
		fe.RetryBuffer = 64 << 10
	}
	if !c.isSet("admin.listen") {
		c.Admin.Listen = "127.0.0.1:8404"
	}
	for name, p := range c.Pools {
		k := "pools." + name + "."
		if !c.isSet(k + "balance") {
			p.Balance = "leader"
			if c.relayOnlyPool(name) {
				p.Balance = "roundrobin" // relay.go
			}
		}
		setDuration(&p.QueueTimeout, c.isSet(k+"queue_timeout"), 5*time.Second)
		if !c.isSet(k + "unavailable_status") {
			p.UnavailableStatus = 503
		}
		setDuration(&p.FailbackInterval, c.isSet(k+"failback_interval"), 15*time.Second)
		setDuration(&p.FailbackCloseSpread, c.isSet(k+"failback_close_spread"), 5*time.Second)
		setDuration(&p.MultipartTTL, c.isSet(k+"multipart_ttl"), 5*time.Minute)
		if !c.isSet(k + "multipart_max_pins") {
			p.MultipartMaxPins = 100000
		}
		if !c.isSet(k + "max_queue") {
			p.MaxQueue = 10000
		}
		if !c.isSet(k + "max_conns") {
			p.MaxConns = 512
		}
		setDuration(&p.ConnectTimeout, c.isSet(k+"connect_timeout"), 3*time.Second)
		setDuration(&p.ResponseTimeout, c.isSet(k+"response_timeout"), 60*time.Second)
		setDuration(&p.TunnelIdleTimeout, c.isSet(k+"tunnel_idle_timeout"), 10*time.Minute)
		sk := &p.Sticky
		if !c.isSet(k + "sticky.keys") {
			sk.Keys = []string{"source"}
		}
		setDuration(&sk.IdleTimeout, c.isSet(k+"sticky.idle_timeout"), stickiness.DefaultIdleTimeout)
		if !c.isSet(k + "sticky.max_entries") {
			sk.MaxEntries = stickiness.DefaultMaxEntries
		}
		dc := &p.Discovery
		setDuration(&dc.EmptyGrace, c.isSet(k+"discovery.empty_grace"), 30*time.Second)
		if dc.Provider == "zookeeper" {
			setDuration(&dc.SessionTimeout, c.isSet(k+"discovery.session_timeout"), 10*time.Second)
		}

		if p.Discovery.Provider == "dns" {
			setDuration(&p.Discovery.ResolveInterval, c.isSet(k+"discovery.resolve_interval"), 10*time.Second)
		}

		leader := p.Balance == "leader"
		ck := &p.Check
		k += "check."
		if !c.isSet(k+"path") && leader {
			ck.Path = "/Thingworx/Admin/HA/LeaderCheck"
		}
		interval, timeout, fall := 5*time.Second, 2*time.Second, 2
		if leader {
			interval, timeout, fall = 15*time.Second, 5*time.Second, 3
		}
		setDuration(&ck.Interval, c.isSet(k+"interval"), interval)
		setDuration(&ck.IntervalMax, c.isSet(k+"interval_max"), ck.Interval.D*4/3)
		setDuration(&ck.FastInterval, c.isSet(k+"fast_interval"), 250*time.Millisecond)
		setDuration(&ck.Timeout, c.isSet(k+"timeout"), timeout)
		if !c.isSet(k + "fall") {
			ck.Fall = fall
		}
		if !c.isSet(k + "rise") {
			ck.Rise = 2
		}
	}
	c.relayDefaults() // relay.go
	// [[routes]] entries are merged whole, so their keys have no origin of their own: an empty header
	// is the default one.
	for _, r := range c.Routes {
		if r.Auth != nil && r.Auth.Header == "" {
			r.Auth.Header = "Authorization"
		}
	}
}
