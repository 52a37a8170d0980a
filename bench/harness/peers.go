package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// The proxies under test. Each gets the closest equivalent of fairlead's bench configuration, generated
// into a temporary directory from the templates below:
//
//   - the four ThingWorx WebSocket paths, for WebSocket upgrades, go to the connection servers, sticky on
//     X-Asset-Id, with a /health check;
//   - everything else goes to the platform server that passes GET /Thingworx/Admin/HA/LeaderCheck with
//     the Basic credentials, over keep-alive upstream connections;
//   - except in http-rr (Setup.RoundRobin), where everything else is balanced round robin over both
//     platform servers, each checked with GET /Thingworx/ready (any 2xx passes) and capped at
//     Setup.Watermark requests in flight (fairlead high_watermark, HAProxy server maxconn, nginx
//     max_conns, Caddy unhealthy_request_count).
//
// What a peer cannot express is listed in its Limits and printed with the results.

// Peer is one proxy (or one configuration variant of a proxy) under test.
type Peer struct {
	// Name is what the results show: "fairlead", "fairlead-tuned", "haproxy", "haproxy-tuned", "nginx",
	// "caddy".
	Name string
	// Base is the proxy: "fairlead", "haproxy", "nginx" or "caddy".
	Base string
	// Tuned selects the tuned failover variant (fairlead: fast_interval 250ms; HAProxy: fastinter,
	// observe layer7, retry-on 503).
	Tuned bool
	// Bin is the binary; "" when not installed.
	Bin string
	// Version is what the binary says about itself.
	Version string
	// Limits lists what this peer's configuration cannot express of fairlead's behaviour.
	Limits []string
}

// baseline is the peer every figure is divided by.
const baseline = "haproxy"

// PeerNames are the proxies a run compares by default, in the order they alternate.
var PeerNames = []string{"fairlead", "haproxy", "nginx", "caddy"}

var peerLimits = map[string][]string{
	"fairlead": nil,
	"haproxy": {
		"no leader semantics: every server passing LeaderCheck gets traffic (round robin), so during a split brain both nodes get requests (fairlead keeps the current leader)",
		"a server is UP at start until its first check fails, and a new leader needs `rise` passing checks",
		"plain variant (inter 15s fall 3): a node that stepped down keeps getting requests, answered 503, until 3 checks failed (up to 45 s); a dead node's requests fail until then",
		"stickiness by consistent hash of X-Asset-Id (balance hdr), not a table: a key moves when a server goes down and comes back",
		"http-rr: `server … maxconn N` counts a request until its response has been forwarded (fairlead's high_watermark only until the response head arrives); above it on every server requests wait in the backend queue (`timeout queue 5s`, as fairlead's queue_timeout)",
		"storm: no rate of new connections per server: `server … maxconn N` with a queue counts connections open, which tunnels hold, so set at what a server may hold it paces nothing (`rate-limit sessions` is per frontend, not per server)",
	},
	"nginx": {
		"no active health checks in nginx OSS (NGINX Plus only): LeaderCheck is never sent; the first platform server is primary, the other `backup`, and a 503 or a refused connection moves the request to the backup (proxy_next_upstream error timeout http_503, idempotent requests only)",
		"no leader semantics: it cannot tell which node is leader; a Backup node answering 200 would get traffic whenever the primary fails, and after fail_timeout (10s) the old primary is tried again",
		"no queueing at a connection cap (max_conns queue is NGINX Plus): the fan-in cap is not set, only `keepalive 64` idle connections are kept",
		"stickiness by `hash $http_x_asset_id consistent`; connection servers are taken out only by failed connects (no /health check)",
		"http-rr: `max_conns=N` (nginx OSS ≥ 1.11.5) skips a server with N active connections, but with every server at N a request fails at once with 502 (no queue); /Thingworx/ready is never probed (a server is taken out only by failed requests: max_fails, fail_timeout)",
		"fan-out, fan-out-appconfig: nchan is a pub/sub server, not a relay: it has no upstream to watch or fetch from (no session, fetch or IAM token; the harness POSTs every change to its publisher location), so its delay lacks the upstream's change message and the fetch it triggers",
		"fan-out-appconfig: " + fanOutAppConfigLimits,
		"storm: no rate of new connections per server: `limit_conn` counts connections open, which tunnels hold, so set at what a server may hold it paces nothing; `limit_req` paces requests per key (an address, a header), not per upstream server, and refuses with 503 without Retry-After",
	},
	"caddy": {
		"no fall/rise counting (health_fails/health_passes are not in Caddy 2.6): one failed LeaderCheck drops a server, one pass restores it",
		"no leader semantics: lb_policy first over the servers whose LeaderCheck passes",
		"a 503 is relayed, never retried (only dial failures are retried, within lb_try_duration 5s); passive health (unhealthy_status 503) takes the server out for fail_duration 10s after it",
		"stickiness by lb_policy header X-Asset-Id (hash, no table)",
		"`caddy reload` closes every open WebSocket tunnel (Caddy 2.6 has no stream_close_delay, added in 2.7)",
		"http-rr: no per-server in-flight cap as such; the closest is passive health `unhealthy_request_count N`: an upstream with N requests in flight counts as unavailable and round_robin skips it, but with every upstream at N a request is not queued: Caddy selects again every lb_try_interval (250ms) until lb_try_duration (5s), then fails it; one failed /Thingworx/ready check takes a server out",
	},
}

// NewPeer describes the peer called name ("fairlead-tuned", "haproxy-tuned" are variants); fairleadBin is
// the fairlead binary. A peer whose binary is missing has Bin "".
func NewPeer(name, fairleadBin string) (*Peer, error) {
	base, tuned := strings.CutSuffix(name, "-tuned")
	p := &Peer{Name: name, Base: base, Tuned: tuned}
	limits, ok := peerLimits[base]
	if !ok || (tuned && base != "fairlead" && base != "haproxy") {
		return nil, fmt.Errorf("unknown peer %q (known: fairlead, fairlead-tuned, haproxy, haproxy-tuned, nginx, caddy)", name)
	}
	p.Limits = limits
	var verArgs []string
	switch base {
	case "fairlead":
		p.Bin = lookBin(fairleadBin)
		verArgs = []string{"-version"}
	case "haproxy":
		p.Bin = lookBin("haproxy")
		verArgs = []string{"-v"}
	case "nginx":
		p.Bin = lookBin("nginx")
		verArgs = []string{"-v"}
	case "caddy":
		p.Bin = lookBin("caddy")
		verArgs = []string{"version"}
	}
	if p.Bin != "" {
		out, _ := exec.Command(p.Bin, verArgs...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		p.Version = line
	}
	return p, nil
}

// Setup is what a peer's configuration is generated from.
type Setup struct {
	Dir         string
	Port        int // client-facing port
	AdminPort   int // fairlead's admin / Caddy's admin API
	Platforms   []string
	Connections []string
	Credentials string
	CheckPath   string
	WSPaths     []string
	Tuned       bool
	// UpstreamCap, if non-zero, caps upstream connections per platform server (fan-in).
	UpstreamCap int
	// RoundRobin balances the platform route round robin over every platform server, each checked with
	// GET ReadyPath, instead of sending it to the leader (http-rr).
	RoundRobin bool
	// Watermark, with RoundRobin and if non-zero, caps the requests in flight per platform server
	// (fairlead high_watermark, HAProxy server maxconn, nginx max_conns, Caddy unhealthy_request_count).
	Watermark int
	// MaxClients is how many concurrent client connections the proxy must accept.
	MaxClients int
	// FDLimit is the hard open-file limit the proxy will run under.
	FDLimit int
	// Threads is the proxy's workers (HAProxy nbthread, nginx worker_processes, fairlead and Caddy
	// GOMAXPROCS); 0 means 1.
	Threads int
	// ConnectTimeout is the upstream connect timeout; a reload changes it ("3s" → "3100ms"), which leaves
	// the configuration equivalent.
	ConnectTimeout string
	// TLSPort, if non-zero, adds an HTTPS listener on 127.0.0.1:TLSPort beside the plain one (same routes
	// and pools), with the run's certificate: TLSCert and TLSKey (PEM files: fairlead, nginx, Caddy) or
	// TLSPEM (both in one file: HAProxy's crt). TLS 1.2 and 1.3, ALPN http/1.1, the TLS 1.3 cipher suites
	// in Go's order (TLS13Suites); upstreams stay plain.
	TLSPort                 int
	TLSCert, TLSKey, TLSPEM string
	// H2 offers HTTP/2 on the TLS listener too (ALPN h2, then http/1.1): https-small-h2.
	H2 bool
	// TunnelRate, if non-zero, is fairlead's new_tunnels_per_second on the connection servers (storm).
	TunnelRate int
	// TunnelCap, if non-zero, caps each connection server's connections: HAProxy server maxconn with
	// a backend queue (timeout queue 5s), nginx limit_conn (storm).
	TunnelCap int
	// Upgradable starts the proxy so that its binary can be upgraded in place (upgrade): fairlead from a
	// copy of its binary in Dir (FairleadExe, which the upgrade replaces) with a PID file (PIDFile);
	// nginx through a launcher that leaves it orphaned once it wrote its PID file (nginxLauncher: nginx
	// ignores USR2 while its parent is still the process that started it). HAProxy needs nothing more
	// than its master-worker mode (-W) and its stats socket with expose-fd listeners, always there.
	Upgradable bool
	// HardStopAfter, if non-zero, is HAProxy's hard-stop-after: how long an old worker may keep its
	// connections (tunnels) after a reload before it is stopped (upgrade).
	HardStopAfter time.Duration
}

// FairleadExe is the copy of the fairlead binary an Upgradable fairlead runs from.
func (s Setup) FairleadExe() string { return filepath.Join(s.Dir, "fairlead") }

// PIDFile is the PID file of an Upgradable fairlead (-pidfile: the PID of the process that serves) or
// of nginx (its pid directive, always).
func (s Setup) PIDFile(base string) string { return filepath.Join(s.Dir, base+".pid") }

// HardStopAfterMS is HardStopAfter in milliseconds.
func (s Setup) HardStopAfterMS() int64 { return s.HardStopAfter.Milliseconds() }

// nginxLauncher starts nginx ("$@", with daemon off) in a subshell that exits once nginx wrote its PID
// file ($1), so that nginx's parent is no longer the process that started it: nginx ignores USR2 ("the
// changing binary signal is ignored") while getppid() is still the parent it had at start. The launcher
// itself stays, and exits once neither the PID file nor the old binary's (.oldbin) exists, i.e. when
// nginx has stopped, so that the harness sees the proxy end as with any other peer.
const nginxLauncher = `pid=$1; shift; rm -f "$pid" "$pid.oldbin"
( "$@" & n=0; while [ ! -s "$pid" ] && kill -0 $! 2>/dev/null && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done )
while [ -s "$pid" ] || [ -s "$pid.oldbin" ]; do sleep 0.2; done`

// TLS13Suites is the TLS 1.3 cipher suite preference of the OpenSSL-based peers (HAProxy, nginx): Go's
// (fairlead's and Caddy's) on hardware with AES instructions, so that every peer negotiates the same
// suite with every client (AES-128-GCM; OpenSSL's own default prefers AES-256-GCM, which costs the proxy
// and the load generator more per record).
func (s Setup) TLS13Suites() string {
	return "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
}

// TLSListen is the client-facing HTTPS address ("" without TLSPort).
func (s Setup) TLSListen() string {
	if s.TLSPort == 0 {
		return ""
	}
	return fmt.Sprintf("127.0.0.1:%d", s.TLSPort)
}

// Listen is the client-facing address.
func (s Setup) Listen() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// ReadyPath is the health check of the platform servers when RoundRobin: any ordinary path answers 200
// on the simulator (every state but Standby, Hung and Dead).
func (s Setup) ReadyPath() string { return readyPath }

// HAProxyMaxConn is HAProxy's global maxconn: HAProxy needs about two descriptors per connection (a
// client's and a server's), or, with UpstreamCap, one per client connection beside the capped upstream
// connections (fan-in).
func (s Setup) HAProxyMaxConn() int {
	want := max(s.MaxClients+500, 4000)
	if s.UpstreamCap > 0 {
		return min(want, s.FDLimit-200-s.UpstreamCap*len(s.Platforms))
	}
	return min(want, (s.FDLimit-200)/2)
}

// HAProxyNoStrictLimits reports whether HAProxyMaxConn is above what HAProxy itself allows for FDLimit:
// HAProxy sizes its descriptors as two per connection (maxsock), and from 2.3 on refuses to start when
// the open-file limit is below that (strict-limits is the default). With capped upstream connections one
// per client connection is enough, so the config says `no strict-limits`: HAProxy then warns ("FD limit
// … too low for maxconn") and runs.
func (s Setup) HAProxyNoStrictLimits() bool {
	return s.HAProxyMaxConn() > (s.FDLimit-200)/2
}

// Workers is Threads, at least 1.
func (s Setup) Workers() int { return max(s.Threads, 1) }

// NginxWorkerConns is nginx's worker_connections (client and upstream connections together).
func (s Setup) NginxWorkerConns() int {
	return min(max(2*s.MaxClients+1000, 8000), s.FDLimit-100)
}

// FairleadMaxConns is fairlead's [frontend] max_conns.
func (s Setup) FairleadMaxConns() int { return max(s.MaxClients+1000, 20000) }

// ConnectTimeoutMS is ConnectTimeout in milliseconds (for configs without Go duration syntax).
func (s Setup) ConnectTimeoutMS() int {
	d, err := time.ParseDuration(s.ConnectTimeout)
	if err != nil {
		return 3000
	}
	return int(d / time.Millisecond)
}

var tmplFuncs = template.FuncMap{
	"quote": func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = fmt.Sprintf("%q", x)
		}
		return strings.Join(q, ", ")
	},
	"join": strings.Join,
	"inc":  func(i int) int { return i + 1 },
}

var fairleadTmpl = template.Must(template.New("fairlead").Funcs(tmplFuncs).Parse(`# generated by fairlead-bench
[frontend]
listen = "{{.Listen}}"
max_conns = {{.FairleadMaxConns}}
{{- if .TLSPort}}
tls_listen = "{{.TLSListen}}"
tls_cert = "{{.TLSCert}}"
tls_key = "{{.TLSKey}}"
http2 = {{.H2}}
{{- end}}

[admin]
listen = "127.0.0.1:{{.AdminPort}}"

[pools.platform]
{{- if .RoundRobin}}
balance = "roundrobin"
servers = [{{quote .Platforms}}]
{{- if .Watermark}}
high_watermark = {{.Watermark}}
{{- end}}
queue_timeout = "5s"
{{- else}}
balance = "leader"
servers = [{{quote .Platforms}}]
{{- end}}
connect_timeout = "{{.ConnectTimeout}}"
{{- if .UpstreamCap}}
max_conns = {{.UpstreamCap}}
{{- end}}

[pools.platform.check]
{{- if .RoundRobin}}
path = "{{.ReadyPath}}"
{{- else}}
path = "{{.CheckPath}}"
credentials = "{{.Credentials}}"
{{- if .Tuned}}
fast_interval = "250ms"
{{- end}}
{{- end}}

[pools.cxserver]
balance = "sticky"
servers = [{{quote .Connections}}]
tunnel_idle_timeout = "10m"
connect_timeout = "{{.ConnectTimeout}}"
{{- if .TunnelRate}}
new_tunnels_per_second = {{.TunnelRate}}
{{- end}}

[pools.cxserver.sticky]
keys = ["header:X-Asset-Id", "source"]

[pools.cxserver.check]
path = "/health"
interval = "1s"
fall = 2
rise = 2

[[routes]]
websocket = true
paths = [{{quote .WSPaths}}]
pool = "cxserver"

[[routes]]
pool = "platform"
`))

var haproxyTmpl = template.Must(template.New("haproxy").Funcs(tmplFuncs).Parse(`# generated by fairlead-bench
global
	nbthread {{.Workers}}
	maxconn {{.HAProxyMaxConn}}
{{- if .HAProxyNoStrictLimits}}
	no strict-limits
{{- end}}
	stats socket {{.Dir}}/haproxy.sock mode 600 level admin expose-fd listeners
{{- if .HardStopAfter}}
	hard-stop-after {{.HardStopAfterMS}}ms
{{- end}}
{{- if .TLSPort}}
	ssl-default-bind-ciphersuites {{.TLS13Suites}}
{{- end}}

defaults
	mode http
	option http-keep-alive
	option forwardfor
	timeout connect {{.ConnectTimeoutMS}}ms
	timeout client 60s
	timeout server 60s
	timeout http-keep-alive 60s
	timeout http-request 30s
	timeout tunnel 10m
	timeout queue 5s
	maxconn {{.HAProxyMaxConn}}

frontend fe
	bind {{.Listen}}
{{- if .TLSPort}}
	bind {{.TLSListen}} ssl crt {{.TLSPEM}} alpn {{if .H2}}h2,{{end}}http/1.1
{{- end}}
	acl ws_path path_beg {{join .WSPaths " "}}
	acl ws_upgrade hdr(Upgrade) -i websocket
	use_backend cxserver if ws_path ws_upgrade
	default_backend platform

backend platform
{{- if .RoundRobin}}
	balance roundrobin
	option httpchk GET {{.ReadyPath}}
	timeout check 2s
	default-server inter 5s fall 2 rise 2
{{- range $i, $a := .Platforms}}
	server platform{{inc $i}} {{$a}}{{if $.Watermark}} maxconn {{$.Watermark}}{{end}} check
{{- end}}
{{- else}}
	option httpchk
	http-check send meth GET uri {{.CheckPath}} hdr Authorization "Basic {{.Credentials}}"
	http-check expect status 200
{{- if .Tuned}}
	retry-on 503 conn-failure
	option redispatch
	retries 3
	default-server inter 15s fastinter 1s downinter 1s fall 3 rise 1 observe layer7{{if .UpstreamCap}} maxconn {{.UpstreamCap}}{{end}}
{{- else}}
	default-server inter 15s fall 3{{if .UpstreamCap}} maxconn {{.UpstreamCap}}{{end}}
{{- end}}
{{- range $i, $a := .Platforms}}
	server platform{{inc $i}} {{$a}} check
{{- end}}
{{- end}}

backend cxserver
	balance hdr(X-Asset-Id)
	hash-type consistent
	option httpchk GET /health
	default-server inter 1s fall 2 rise 2
{{- if .TunnelCap}}
	timeout queue 5s
{{- end}}
{{- range $i, $a := .Connections}}
	server cx{{inc $i}} {{$a}} check{{if $.TunnelCap}} maxconn {{$.TunnelCap}}{{end}}
{{- end}}
`))

// nginxMain and nginxHTTP are the parts every bench configuration of nginx shares: the process and its
// files under the run's directory, and the http block's temporary paths.
const (
	nginxMain = `user root root;
worker_processes {{.Workers}};
worker_rlimit_nofile {{.FDLimit}};
daemon off;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/nginx-error.log warn;
`
	nginxHTTP = `	access_log off;
	client_body_temp_path {{.Dir}}/tmp-body;
	proxy_temp_path {{.Dir}}/tmp-proxy;
	fastcgi_temp_path {{.Dir}}/tmp-fastcgi;
	uwsgi_temp_path {{.Dir}}/tmp-uwsgi;
	scgi_temp_path {{.Dir}}/tmp-scgi;
`
)

var nginxTmpl = template.Must(template.New("nginx").Funcs(tmplFuncs).Parse(`# generated by fairlead-bench
` + nginxMain + `
events {
	worker_connections {{.NginxWorkerConns}};
}

http {
` + nginxHTTP + `	client_max_body_size 0;
	keepalive_requests 1000000;
	keepalive_timeout 60s;

	map $http_upgrade $connection_upgrade {
		default upgrade;
		'' close;
	}

{{- if .RoundRobin}}
	# Round robin (nginx's default) over every platform server, each capped at max_conns active
	# connections; no active health checks in nginx OSS.
	upstream platform {
{{- range .Platforms}}
		server {{.}}{{if $.Watermark}} max_conns={{$.Watermark}}{{end}};
{{- end}}
		keepalive 64;
	}
{{- else}}
	# No active health checks in nginx OSS: the first server is primary, the others backups; a 503 or a
	# failed connect moves an idempotent request on to the next server.
	upstream platform {
{{- range $i, $a := .Platforms}}
		server {{$a}}{{if $i}} backup{{else}} max_fails=1 fail_timeout=10s{{end}};
{{- end}}
		keepalive 64;
	}
{{- end}}

{{- if .TunnelCap}}
	limit_conn_zone $server_addr zone=tunnels:1m;
{{- end}}
	upstream cxserver {
		hash $http_x_asset_id consistent;
{{- range .Connections}}
		server {{.}};
{{- end}}
	}

	server {
		listen {{.Listen}} backlog=4096;
{{- if .TLSPort}}
		listen {{.TLSListen}} ssl{{if .H2}} http2{{end}} backlog=4096;
		ssl_certificate {{.TLSCert}};
		ssl_certificate_key {{.TLSKey}};
		ssl_protocols TLSv1.2 TLSv1.3;
		ssl_prefer_server_ciphers on;
		ssl_conf_command Ciphersuites {{.TLS13Suites}};
{{- end}}

		location ~ ^/Thingworx/(WS|WSTunnelServer|WSTunnelClient|VWS)(/|$) {
{{- if .TunnelCap}}
			limit_conn tunnels {{.TunnelCap}};
{{- end}}
			proxy_pass http://cxserver;
			proxy_http_version 1.1;
			proxy_set_header Upgrade $http_upgrade;
			proxy_set_header Connection $connection_upgrade;
			proxy_set_header Host $host;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_connect_timeout {{.ConnectTimeoutMS}}ms;
			proxy_read_timeout 10m;
			proxy_send_timeout 10m;
		}

		location / {
			proxy_pass http://platform;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host $host;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_next_upstream error timeout http_503;
			proxy_request_buffering off;
			proxy_connect_timeout {{.ConnectTimeoutMS}}ms;
		}
	}
}
`))

var caddyTmpl = template.Must(template.New("caddy").Funcs(tmplFuncs).Parse(`# generated by fairlead-bench
{
	admin 127.0.0.1:{{.AdminPort}}
	auto_https off
	grace_period 10s
{{- if .TLSPort}}
	default_sni 127.0.0.1
{{- end}}
}

http://{{.Listen}} {
{{- template "site" .}}
}
{{- if .TLSPort}}

https://{{.TLSListen}} {
	tls {{.TLSCert}} {{.TLSKey}} {
		protocols tls1.2 tls1.3
		alpn {{if .H2}}h2 {{end}}http/1.1
	}
{{- template "site" .}}
}
{{- end}}
{{- define "site"}}
	@ws {
		path{{range .WSPaths}} {{.}} {{.}}/*{{end}}
		header Connection *Upgrade*
		header Upgrade websocket
	}
	reverse_proxy @ws {{join .Connections " "}} {
		lb_policy header X-Asset-Id
		health_uri /health
		health_interval 1s
		health_timeout 2s
		transport http {
			dial_timeout {{.ConnectTimeoutMS}}ms
		}
	}

	reverse_proxy {{join .Platforms " "}} {
{{- if .RoundRobin}}
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 250ms
		health_uri {{.ReadyPath}}
		health_status 2xx
		health_interval 5s
		health_timeout 2s
		# unhealthy_request_count is the closest to a cap on the requests in flight per upstream. It makes
		# the passive health check count too, which in Caddy 2.6 takes every upstream out unless max_fails
		# is set (it defaults to 0 without fail_duration): 2 failed requests within 5s, as fairlead's fall.
		fail_duration 5s
		max_fails 2
{{- if .Watermark}}
		unhealthy_request_count {{.Watermark}}
{{- end}}
{{- else}}
		lb_policy first
		lb_try_duration 5s
		lb_try_interval 250ms
		health_uri {{.CheckPath}}
		health_headers {
			Authorization "Basic {{.Credentials}}"
		}
		health_status 200
		health_interval 15s
		health_timeout 5s
		fail_duration 10s
		max_fails 1
		unhealthy_status 503
{{- end}}
		transport http {
			dial_timeout {{.ConnectTimeoutMS}}ms
			keepalive 60s
			keepalive_idle_conns 1024
			keepalive_idle_conns_per_host 1024
{{- if .UpstreamCap}}
			max_conns_per_host {{.UpstreamCap}}
{{- end}}
		}
	}
{{- end}}
`))

// nginxHasMaxConns reports whether the nginx that printed version ("nginx version: nginx/1.22.1")
// accepts `server … max_conns=N` (open-source nginx since 1.11.5); true when the version is unknown.
func nginxHasMaxConns(version string) bool {
	_, v, ok := strings.Cut(version, "nginx/")
	if !ok {
		return true
	}
	v, _, _ = strings.Cut(v, " ")
	var n [3]int
	for i, f := range strings.SplitN(v, ".", 3) {
		x, err := strconv.Atoi(f)
		if err != nil {
			return true
		}
		n[i] = x
	}
	return n[0] > 1 || (n[0] == 1 && (n[1] > 11 || (n[1] == 11 && n[2] >= 5)))
}

// Instance is a running peer.
type Instance struct {
	Peer  *Peer
	Setup Setup
	Proc  *Proc
	conf  string
}

// Addr is the client-facing address.
func (in *Instance) Addr() string { return in.Setup.Listen() }

// Pid is the proxy's main process.
func (in *Instance) Pid() int { return in.Proc.Pid() }

func (p *Peer) writeConfig(s Setup) (string, error) {
	var t *template.Template
	var name string
	switch p.Base {
	case "fairlead":
		t, name = fairleadTmpl, "fairlead.toml"
	case "haproxy":
		t, name = haproxyTmpl, "haproxy.cfg"
	case "nginx":
		t, name = nginxTmpl, "nginx.conf"
		for _, d := range []string{"tmp-body", "tmp-proxy", "tmp-fastcgi", "tmp-uwsgi", "tmp-scgi"} {
			if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o755); err != nil {
				return "", err
			}
		}
	case "caddy":
		t, name = caddyTmpl, "Caddyfile"
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, s); err != nil {
		return "", err
	}
	path := filepath.Join(s.Dir, name)
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// command is the command line and extra environment that run the peer on the configuration conf written
// for s: the Go proxies get their workers (s.Workers) as GOMAXPROCS, the others in their configuration.
func (p *Peer) command(s Setup, conf string) (argv, env []string) {
	procs := "GOMAXPROCS=" + strconv.Itoa(s.Workers())
	switch p.Base {
	case "fairlead":
		argv = []string{p.Bin, "-config", conf}
		if s.Upgradable {
			argv = []string{s.FairleadExe(), "-pidfile", s.PIDFile("fairlead"), "-config", conf}
		}
		env = []string{procs}
	case "haproxy":
		// master-worker mode in the foreground: soft reloads with SIGUSR2 to the master.
		argv = []string{p.Bin, "-W", "-f", conf}
	case "nginx":
		argv = []string{p.Bin, "-e", filepath.Join(s.Dir, "nginx-error.log"), "-p", s.Dir, "-c", conf}
		if s.Upgradable {
			argv = append([]string{"/bin/sh", "-c", nginxLauncher, "nginx-launcher", s.PIDFile("nginx")}, argv...)
		}
	case "caddy":
		argv = []string{p.Bin, "run", "--config", conf, "--adapter", "caddyfile"}
		env = []string{procs, "HOME=" + s.Dir, "XDG_CONFIG_HOME=" + s.Dir, "XDG_DATA_HOME=" + s.Dir}
	}
	return argv, env
}

// Start writes the peer's configuration for s and starts it pinned to core (-1: unpinned) with
// s.Workers() workers; it returns once the proxy answers on its port (see waitReady for when it routes
// correctly).
func (p *Peer) Start(s Setup, core int) (*Instance, error) {
	if p.Bin == "" {
		return nil, fmt.Errorf("%s is not installed", p.Base)
	}
	conf, err := p.writeConfig(s)
	if err != nil {
		return nil, err
	}
	if s.Upgradable && p.Base == "fairlead" {
		if err := installExe(p.Bin, s.FairleadExe()); err != nil {
			return nil, err
		}
	}
	argv, env := p.command(s, conf)
	proc, err := startProc(p.Name, core, env, filepath.Join(s.Dir, p.Base+".log"), argv...)
	if err != nil {
		return nil, err
	}
	in := &Instance{Peer: p, Setup: s, Proc: proc, conf: conf}
	err = waitFor(20*time.Second, 20*time.Millisecond, func() error {
		if proc.Exited() {
			return errExited
		}
		if err := dialOK(s.Listen()); err != nil {
			return err
		}
		if s.TLSPort != 0 {
			return dialOK(s.TLSListen())
		}
		return nil
	})
	if err != nil {
		if proc.Exited() {
			err = fmt.Errorf("exited (%v)", proc.err)
		}
		tail := proc.LogTail(1500)
		proc.Stop(time.Second)
		return nil, fmt.Errorf("%s did not start listening: %v\n%s", p.Name, err, tail)
	}
	return in, nil
}

// Reload makes the proxy reload a changed but equivalent configuration (the upstream connect timeout
// moves from 3s to 3.1s) the way an operator would: fairlead SIGHUP, HAProxy master-worker SIGUSR2 (a
// soft reload: the old worker finishes its connections), `nginx -s reload`, `caddy reload`.
func (in *Instance) Reload(ctx context.Context) error {
	s := in.Setup
	s.ConnectTimeout = "3100ms"
	if _, err := in.Peer.writeConfig(s); err != nil {
		return err
	}
	in.Setup = s
	switch in.Peer.Base {
	case "fairlead":
		return syscall.Kill(in.Pid(), syscall.SIGHUP)
	case "haproxy":
		return syscall.Kill(in.Pid(), syscall.SIGUSR2)
	case "nginx":
		cmd := exec.CommandContext(ctx, in.Peer.Bin, "-e", filepath.Join(s.Dir, "nginx-error.log"), "-p", s.Dir, "-c", in.conf, "-s", "reload")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nginx -s reload: %v: %s", err, out)
		}
	case "caddy":
		cmd := exec.CommandContext(ctx, in.Peer.Bin, "reload", "--config", in.conf, "--adapter", "caddyfile",
			"--address", fmt.Sprintf("127.0.0.1:%d", s.AdminPort), "--force")
		cmd.Env = append(os.Environ(), "HOME="+s.Dir, "XDG_CONFIG_HOME="+s.Dir, "XDG_DATA_HOME="+s.Dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("caddy reload: %v: %s", err, out)
		}
	}
	return nil
}

// Stop stops the proxy and all its processes (SIGTERM, and SIGKILL after a second: nothing of a
// graceful shutdown is measured).
func (in *Instance) Stop() { in.Proc.Stop(time.Second) }

// RSS is the resident memory of all the proxy's processes.
func (in *Instance) RSS() int64 { return RSS(in.Pid()) }

// CPU is the CPU time the proxy's processes used so far.
func (in *Instance) CPU() time.Duration { return CPUTime(in.Pid()) }

// FDLimit is the open-file limit of the proxy's processes (the worker's, where there is one).
func (in *Instance) FDLimit() int {
	limit := 0
	for _, pid := range Tree(in.Pid()) {
		if l := FDLimit(pid); l > limit {
			limit = l
		}
	}
	return limit
}
