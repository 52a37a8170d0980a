package config

// Defaults: each is defined here once (the sticky table's in package stickiness), by field: a key's
// name is only its toml tag (keys.go). The generated reference (conf.d/REFERENCE.md) shows them; the
// field comments do not restate them, and a test fails when conf.d/ shows another value (doc_test.go).

import (
	"time"

	"github.com/fairlead/fairlead/stickiness"
)

func (c *Config) applyDefaults() {
	gl := &c.Global
	defDuration(c, &gl.StateMaxAge, time.Hour)
	def(c, &gl.Start, "normal")
	def(c, &gl.LogFormat, "text")
	def(c, &gl.LogLevel, "info")
	fe := &c.Frontend
	defDuration(c, &fe.DrainTimeout, 10*time.Second)
	def(c, &fe.Listen, "127.0.0.1:8080")
	defDuration(c, &fe.ReadTimeout, 30*time.Second)
	defDuration(c, &fe.IdleTimeout, 60*time.Second)
	def(c, &fe.MaxConns, 20000)
	def(c, &fe.MaxHeaderSize, 8<<10)
	defDuration(c, &fe.HeaderTimeout, 10*time.Second)
	def(c, &fe.RetryBuffer, 64<<10)
	def(c, &fe.HTTP2, true)
	def(c, &fe.HTTP2MaxStreams, 100)
	def(c, &c.Admin.Listen, "127.0.0.1:8404")
	for name, p := range c.Pools {
		if !c.set(&p.Balance) {
			p.Balance = "leader"
			if c.RelayOnlyPool(name) {
				p.Balance = "roundrobin" // relay.go
			}
		}
		defDuration(c, &p.QueueTimeout, 5*time.Second)
		def(c, &p.UnavailableStatus, 503)
		defDuration(c, &p.FailbackInterval, 15*time.Second)
		defDuration(c, &p.FailbackCloseSpread, 5*time.Second)
		defDuration(c, &p.MultipartTTL, 5*time.Minute)
		def(c, &p.MultipartMaxPins, 100000)
		def(c, &p.MaxQueue, 10000)
		def(c, &p.MaxConns, 512)
		defDuration(c, &p.ConnectTimeout, 3*time.Second)
		defDuration(c, &p.ResponseTimeout, 60*time.Second)
		defDuration(c, &p.TunnelIdleTimeout, 10*time.Minute)
		sk := &p.Sticky
		def(c, &sk.Keys, []string{"source"})
		defDuration(c, &sk.IdleTimeout, stickiness.DefaultIdleTimeout)
		def(c, &sk.MaxEntries, stickiness.DefaultMaxEntries)
		dc := &p.Discovery
		defDuration(c, &dc.EmptyGrace, 30*time.Second)
		switch dc.Provider {
		case "zookeeper":
			defDuration(c, &dc.SessionTimeout, 10*time.Second)
		case "dns":
			defDuration(c, &dc.ResolveInterval, 10*time.Second)
		}

		leader := p.Balance == "leader"
		ck := &p.Check
		if leader && !c.set(&ck.Path) {
			ck.Path = "/Thingworx/Admin/HA/LeaderCheck"
		}
		interval, timeout, fall := 5*time.Second, 2*time.Second, 2
		if leader {
			interval, timeout, fall = 15*time.Second, 5*time.Second, 3
		}
		defDuration(c, &ck.Interval, interval)
		defDuration(c, &ck.IntervalMax, ck.Interval.D*4/3)
		defDuration(c, &ck.FastInterval, 250*time.Millisecond)
		defDuration(c, &ck.Timeout, timeout)
		def(c, &ck.Fall, fall)
		def(c, &ck.Rise, 2)
	}
	c.relayDefaults() // relay.go
	c.acmeDefaults()  // acme.go
	// [[routes]] entries are merged whole, so their keys have no origin of their own: an empty header
	// is the default one.
	for _, r := range c.Routes {
		if r.Auth != nil && r.Auth.Header == "" {
			r.Auth.Header = "Authorization"
		}
	}
}
