// Package discoverytest serves the registries of package discovery's providers in tests: a DNS zone on a
// loopback port whose records a test changes, server files written as editors and deploy tools write
// them, and a real ZooKeeper server (zookeeper.go) with the client calls ThingWorx HA's registration
// makes and a partition to cut it off. It is used by the tests of package discovery, which run each
// provider against its registry, and by lb's, which put a discovered list in force behind a whole load
// balancer.
package discoverytest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// A Zone is a DNS server on 127.0.0.1 (UDP, and TCP on the same port for truncated answers) answering
// from records the test sets. A name without any record gets NXDOMAIN; a name with records but none of
// the type asked gets an empty NOERROR answer.
type Zone struct {
	t    testing.TB
	Addr string // host:port, UDP and TCP

	mu       sync.Mutex
	records  []dns.RR
	noGlue   map[string]bool // SRV targets whose addresses the additional section leaves out
	rcode    int             // answer every query with this code (SERVFAIL, REFUSED) when not 0
	truncUDP bool            // answer UDP queries truncated and empty, TCP ones in full
	okFirst  int             // when not 0: answer this many queries, then SERVFAIL to every one
	asked    int             // queries so far
	queries  map[string]int  // "name TYPE" → count
	servers  []*dns.Server
}

// StartZone starts a zone on a free port, stopped at the end of the test.
func StartZone(t testing.TB, records ...string) *Zone {
	t.Helper()
	z := &Zone{t: t, noGlue: map[string]bool{}, queries: map[string]int{}}
	z.Set(records...)
	var err error
	for range 20 { // a free UDP port whose TCP twin is free too
		if err = z.listen("127.0.0.1:0"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Stop)
	return z
}

// listen serves on addr (UDP and TCP; port 0: a free one, kept in z.Addr).
func (z *Zone) listen(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		return err
	}
	z.Addr = pc.LocalAddr().String()
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	udp := &dns.Server{PacketConn: pc, Handler: z, NotifyStartedFunc: notify}
	tcp := &dns.Server{Listener: ln, Handler: z, NotifyStartedFunc: notify}
	z.mu.Lock()
	z.servers = []*dns.Server{udp, tcp}
	z.mu.Unlock()
	go udp.ActivateAndServe() //nolint:errcheck // ends at stop
	go tcp.ActivateAndServe() //nolint:errcheck
	<-started
	<-started
	return nil
}

// Stop shuts the server down: its port answers nothing (UDP: "connection refused").
func (z *Zone) Stop() {
	z.mu.Lock()
	servers := z.servers
	z.servers = nil
	z.mu.Unlock()
	for _, s := range servers {
		s.Shutdown() //nolint:errcheck
	}
}

// Restart serves again on the same port.
func (z *Zone) Restart() {
	z.t.Helper()
	if err := z.listen(z.Addr); err != nil {
		z.t.Fatal(err)
	}
}

// Set replaces the zone's records (zone file lines, e.g. "cx.test. 5 IN SRV 0 0 9081 p1.test.").
func (z *Zone) Set(records ...string) {
	z.t.Helper()
	var rrs []dns.RR
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			z.t.Fatalf("record %q: %v", r, err)
		}
		rrs = append(rrs, rr)
	}
	z.mu.Lock()
	z.records = rrs
	z.mu.Unlock()
}

// SetRcode answers every query with rcode (dns.RcodeServerFailure, dns.RcodeRefused; 0: as the records
// say).
func (z *Zone) SetRcode(rcode int) {
	z.mu.Lock()
	z.rcode = rcode
	z.mu.Unlock()
}

// HideGlue leaves the addresses of these SRV targets out of the additional section.
func (z *Zone) HideGlue(targets ...string) {
	z.mu.Lock()
	for _, n := range targets {
		z.noGlue[n] = true
	}
	z.mu.Unlock()
}

// TruncateUDP answers UDP queries truncated and empty (the client asks again over TCP), TCP ones in full.
func (z *Zone) TruncateUDP() {
	z.mu.Lock()
	z.truncUDP = true
	z.mu.Unlock()
}

// FailAfter answers n more queries, then SERVFAIL to every one; 0 answers every one again.
func (z *Zone) FailAfter(n int) {
	z.mu.Lock()
	z.okFirst, z.asked = n, 0
	z.mu.Unlock()
}

// Queried returns how many times name was asked for type qtype ("A", "SRV").
func (z *Zone) Queried(name, qtype string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queries[name+" "+qtype]
}

// ServeDNS answers a query (dns.Handler).
func (z *Zone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	z.mu.Lock()
	defer z.mu.Unlock()
	q := r.Question[0]
	z.queries[q.Name+" "+dns.TypeToString[q.Qtype]]++
	z.asked++
	switch {
	case z.rcode != 0:
		m.Rcode = z.rcode
	case z.okFirst != 0 && z.asked > z.okFirst:
		m.Rcode = dns.RcodeServerFailure
	case udp && z.truncUDP:
		m.Truncated = true
	default:
		exists := false
		for _, rr := range z.records {
			if h := rr.Header(); strings.EqualFold(h.Name, q.Name) {
				exists = true
				if h.Rrtype == q.Qtype {
					m.Answer = append(m.Answer, dns.Copy(rr))
				}
			}
		}
		if !exists {
			m.Rcode = dns.RcodeNameError
		}
		for _, rr := range m.Answer {
			srv, ok := rr.(*dns.SRV)
			if !ok || z.noGlue[srv.Target] {
				continue
			}
			for _, a := range z.records {
				if t := a.Header().Rrtype; strings.EqualFold(a.Header().Name, srv.Target) && (t == dns.TypeA || t == dns.TypeAAAA) {
					m.Extra = append(m.Extra, dns.Copy(a))
				}
			}
		}
	}
	w.WriteMsg(m) //nolint:errcheck
}

// WriteFile writes body to path in place (truncate and write, as most editors and `echo >` do).
func WriteFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// RenameOver writes body to a temporary file beside path and renames it over path, as vim, emacs and
// deploy tools save.
func RenameOver(t testing.TB, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	WriteFile(t, tmp, body)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TOMLServers is a TOML server file listing addrs.
func TOMLServers(addrs ...string) string {
	var q []string
	for _, a := range addrs {
		q = append(q, fmt.Sprintf("%q", a))
	}
	return "# written by the deploy\nservers = [" + strings.Join(q, ", ") + "]\n"
}

// CuratorInstance is the data Apache Curator's service discovery writes in ZooKeeper for an instance
// (JsonInstanceSerializer of a ServiceInstance), as ThingWorx HA registers its platforms; sslPort 0 is
// null.
func CuratorInstance(id, host string, port, sslPort int) string {
	ssl := "null"
	if sslPort > 0 {
		ssl = fmt.Sprint(sslPort)
	}
	return fmt.Sprintf(`{"name":"thingworx","id":%q,"address":%q,"port":%d,"sslPort":%s,"payload":null,`+
		`"registrationTimeUTC":1767225600000,"serviceType":"DYNAMIC","uriSpec":null,"enabled":true}`, id, host, port, ssl)
}
