package discovery

// The dns discovery provider (issue #12): a name resolved every resolve_interval. SRV records give each
// server's host and port (a Kubernetes headless service's named port, _http._tcp.NAME; Consul's
// NAME.service.consul); without SRV records the A and AAAA records give the hosts, with the configured
// port (a plain Kubernetes headless service). The client is github.com/miekg/dns rather than the Go
// resolver so that a round can tell "the name has no servers" (NXDOMAIN, no records: an answer, emptied
// after empty_grace) from "no resolver answered" (an error: the last list stays), which net.Resolver
// folds into one error, and so that it can ask a resolver of its own (a Consul agent on port 8600).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fairlead/fairlead/lb/config"
	"github.com/miekg/dns"
)

// dnsTimeout bounds one exchange with one resolver; a shorter resolve_interval bounds it too, so that a
// dead resolver never holds a round for longer than the pace the operator asked for.
const dnsTimeout = 2 * time.Second

// resolvConf is the system resolver's configuration, read at every round (a container's resolv.conf may
// change under a running fairlead).
var resolvConf = "/etc/resolv.conf"

// dnsProvider resolves one name. Every round is a fresh set of queries: nothing is cached, so a
// record's TTL only matters to the resolvers in between.
type dnsProvider struct {
	name      string        // fully qualified (a trailing dot): search domains are never applied
	interval  time.Duration // resolve_interval
	port      int           // for A/AAAA answers; 0 = none (then the name must have SRV records)
	resolvers []string      // host:port; none = the system's (resolvConf)
}

func newDNSProvider(dc config.Discovery, _ Options) (Provider, error) {
	p := &dnsProvider{name: dns.Fqdn(dc.Name), interval: dc.ResolveInterval.D, port: dc.Port, resolvers: dc.Resolvers}
	if p.interval <= 0 {
		p.interval = 10 * time.Second
	}
	return p, nil
}

// Watch resolves at once, then every resolve_interval: a complete answer is found (NXDOMAIN, or a name
// without records, is an empty list: the Watcher applies it after empty_grace), a round that no
// resolver could answer is failed (the last list stays).
func (p *dnsProvider) Watch(ctx context.Context, found func([]string), failed func(error)) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		list, err := p.resolve(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed(err)
		} else {
			found(list)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// resolve is one round: SRV first; with SRV records, each target's addresses (from the answer's
// additional section when it has them, else queried) with the record's port; without, the name's A and
// AAAA records with the configured port. Any query that no resolver answers fails the round: a partial
// list would remove servers that are still there.
func (p *dnsProvider) resolve(ctx context.Context) ([]string, error) {
	servers, err := p.servers()
	if err != nil {
		return nil, err
	}
	r := dnsRound{ctx: ctx, servers: servers, timeout: min(dnsTimeout, p.interval)}
	in, err := r.query(p.name, dns.TypeSRV)
	if err != nil {
		return nil, err
	}
	if in.Rcode == dns.RcodeNameError {
		return []string{}, nil // the name does not exist: no record of any type
	}
	var srvs []*dns.SRV
	for _, rr := range in.Answer {
		if s, ok := rr.(*dns.SRV); ok {
			srvs = append(srvs, s)
		}
	}
	list := []string{}
	if len(srvs) > 0 {
		// Priority and weight are not used: every target is a server of the pool, balanced by the pool's
		// own policy.
		for _, s := range srvs {
			if s.Target == "." || s.Port == 0 {
				continue // RFC 2782: "." means the service is decidedly not available here
			}
			ips := addressesIn(in.Extra, s.Target)
			if len(ips) == 0 {
				if ips, err = r.addresses(s.Target); err != nil {
					return nil, err
				}
			}
			for _, ip := range ips {
				list = append(list, net.JoinHostPort(ip, strconv.Itoa(int(s.Port))))
			}
		}
		return list, nil
	}
	if p.port == 0 {
		return nil, fmt.Errorf("%s has no SRV record and port is not set (A/AAAA records need it)", p.name)
	}
	ips, err := r.addresses(p.name)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		list = append(list, net.JoinHostPort(ip, strconv.Itoa(p.port)))
	}
	return list, nil
}

// servers returns the resolvers to ask, in order: the configured ones, else resolv.conf's nameservers.
func (p *dnsProvider) servers() ([]string, error) {
	if len(p.resolvers) > 0 {
		return p.resolvers, nil
	}
	cc, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("system resolver: %v", err)
	}
	if len(cc.Servers) == 0 {
		return nil, fmt.Errorf("system resolver: no nameserver in %s", resolvConf)
	}
	out := make([]string, len(cc.Servers))
	for i, s := range cc.Servers {
		out[i] = net.JoinHostPort(s, cc.Port)
	}
	return out, nil
}

// addressesIn returns the addresses that rrs (an answer's additional section) give name.
func addressesIn(rrs []dns.RR, name string) []string {
	var ips []string
	for _, rr := range rrs {
		if !strings.EqualFold(rr.Header().Name, name) {
			continue
		}
		switch a := rr.(type) {
		case *dns.A:
			ips = append(ips, a.A.String())
		case *dns.AAAA:
			ips = append(ips, a.AAAA.String())
		}
	}
	return ips
}

// dnsRound asks the resolvers of one round.
type dnsRound struct {
	ctx     context.Context
	servers []string
	timeout time.Duration
}

// addresses returns name's A and AAAA records (those of the CNAME chain's end, as a recursive resolver
// answers them); a name that does not exist has none.
func (r *dnsRound) addresses(name string) ([]string, error) {
	var ips []string
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		in, err := r.query(name, qtype)
		if err != nil {
			return nil, err
		}
		for _, rr := range in.Answer {
			switch a := rr.(type) {
			case *dns.A:
				ips = append(ips, a.A.String())
			case *dns.AAAA:
				ips = append(ips, a.AAAA.String())
			}
		}
	}
	return ips, nil
}

// query asks each resolver in turn until one answers NOERROR or NXDOMAIN; a timeout, a network error,
// SERVFAIL, REFUSED or any other code moves on to the next. The error names every resolver and why.
func (r *dnsRound) query(name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype) // recursion desired
	m.SetEdns0(4096, false)    // room for a large SRV set over UDP; a truncated answer is asked again over TCP
	var why []string
	for _, s := range r.servers {
		in, err := r.exchange(m, s)
		if err == nil && in.Rcode != dns.RcodeSuccess && in.Rcode != dns.RcodeNameError {
			err = errors.New(dns.RcodeToString[in.Rcode])
		}
		if err == nil {
			return in, nil
		}
		if r.ctx.Err() != nil {
			return nil, r.ctx.Err()
		}
		why = append(why, s+": "+err.Error())
	}
	return nil, fmt.Errorf("%s %s: no resolver answered (%s)", dns.TypeToString[qtype], name, strings.Join(why, "; "))
}

func (r *dnsRound) exchange(m *dns.Msg, server string) (*dns.Msg, error) {
	in, err := r.exchangeOver("udp", m, server)
	if err == nil && in.Truncated {
		in, err = r.exchangeOver("tcp", m, server)
	}
	return in, err
}

// exchangeOver asks server over network ("udp", "tcp"). Stopping the provider (ctx) cuts the exchange
// short: miekg/dns only takes a context's deadline, so without this a stop (Close, a reload changing the
// table) would wait for a silent resolver's timeout.
func (r *dnsRound) exchangeOver(network string, m *dns.Msg, server string) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: r.timeout}
	conn, err := c.DialContext(r.ctx, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(r.ctx, func() { conn.Close() })
	defer stop()
	in, _, err := c.ExchangeWithConnContext(r.ctx, m, conn)
	return in, err
}
