package config

// Validation: every problem of a loaded config is listed at once, each naming the file and the key.

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fairlead/fairlead/stickiness"
)

func (c *Config) validate() []string {
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at(key, format, args...)) }
	// at adds a problem with the key of field, a pointer into c: the key's name is its toml tag.
	at := func(field any, format string, args ...any) { add(c.keyOf(field), format, args...) }
	checkAddr := func(addr *string, allowEmpty bool) {
		if *addr == "" {
			if !allowEmpty {
				at(addr, "must not be empty")
			}
			return
		}
		if err := ValidAddr(*addr); err != nil {
			at(addr, "bad address %q: %v", *addr, err)
		}
	}
	checkDur := func(d *Duration, positive bool) {
		if d.err != nil {
			at(d, "bad duration %q: %v", d.raw, d.err)
		} else if positive && d.D <= 0 {
			at(d, "must be greater than zero")
		}
	}
	checkPositive := func(field *int) {
		if *field <= 0 {
			at(field, "must be greater than zero, got %d", *field)
		}
	}

	if c.Frontend.Listen == "" && c.Frontend.TLSListen == "" {
		at(&c.Frontend.Listen, "must not be empty unless tls_listen is set (HTTPS only)")
	} else {
		checkAddr(&c.Frontend.Listen, true)
	}
	checkAddr(&c.Frontend.TLSListen, true)
	if c.Frontend.TLSListen != "" && c.Frontend.TLSListen == c.Frontend.Listen {
		at(&c.Frontend.TLSListen, "is the same address as listen")
	}
	p = append(p, c.loadFrontTLS()...) // reads the certificates (tls.go)
	p = append(p, c.loadACME()...)     // [frontend.acme] (acme.go)
	checkDur(&c.Frontend.ReadTimeout, true)
	checkDur(&c.Frontend.IdleTimeout, true)
	checkPositive(&c.Frontend.MaxConns)
	if c.Frontend.MaxBodySize < 0 {
		at(&c.Frontend.MaxBodySize, "must not be negative")
	}
	if c.Frontend.RetryBuffer < 0 {
		at(&c.Frontend.RetryBuffer, "must not be negative")
	}
	checkDur(&c.Frontend.DrainTimeout, false)
	checkDur(&c.Frontend.HeaderTimeout, false)
	for _, n := range []*int{&c.Frontend.RatePerSource, &c.Frontend.BurstPerSource, &c.Frontend.MaxConnsPerSource} {
		if *n < 0 {
			at(n, "must not be negative, got %d", *n)
		}
	}
	if c.Frontend.BurstPerSource > 0 && c.Frontend.RatePerSource == 0 {
		at(&c.Frontend.BurstPerSource, "needs rate_per_source")
	}
	if n := c.Frontend.HTTP2MaxStreams; n < 1 || n > 1000 {
		at(&c.Frontend.HTTP2MaxStreams, "must be between 1 and 1000, got %d", n)
	}
	if n := c.Frontend.MaxHeaderSize; n < 1024 || n > 1<<20 {
		at(&c.Frontend.MaxHeaderSize, "must be between 1024 and 1048576 bytes, got %d", n)
	}
	c.Frontend.ProxyFrom = c.Frontend.ProxyFrom[:0]
	for i, s := range c.Frontend.ProxyProtocol {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				add(fmt.Sprintf("frontend.proxy_protocol.%d", i), "%q is neither a CIDR nor an IP address", s)
				continue
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		if pfx.Bits() == 0 {
			// Every address would be believed: any host that reaches the listener could pass for any
			// client (X-Forwarded-For, the limits per source, the sticky source key).
			add(fmt.Sprintf("frontend.proxy_protocol.%d", i), "%q lists every address: any host could forge its clients' addresses; list only the load balancers' own addresses or subnets", s)
			continue
		}
		c.Frontend.ProxyFrom = append(c.Frontend.ProxyFrom, pfx.Masked())
	}
	c.Frontend.Trusted = c.Frontend.Trusted[:0]
	for i, s := range c.Frontend.TrustedProxies {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				add(fmt.Sprintf("frontend.trusted_proxies.%d", i), "%q is neither a CIDR nor an IP address", s)
				continue
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		c.Frontend.Trusted = append(c.Frontend.Trusted, pfx.Masked())
	}
	checkAddr(&c.Admin.Listen, true)
	p = append(p, c.validateAdmin()...)
	gl := &c.Global
	checkDur(&c.Global.StateMaxAge, true)
	if problem := startProblem(gl.Start, gl.StateFile != "", "global.state_file"); problem != "" {
		at(&c.Global.Start, "%s", problem)
	}
	if gl.LogFormat != "text" && gl.LogFormat != "json" {
		at(&c.Global.LogFormat, "unknown log format %q (want \"text\" or \"json\")", gl.LogFormat)
	}
	if _, ok := LogLevels[gl.LogLevel]; !ok {
		at(&c.Global.LogLevel, "unknown log level %q (want \"debug\", \"info\", \"warn\" or \"error\")", gl.LogLevel)
	}

	names := make([]string, 0, len(c.Pools))
	for name := range c.Pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := c.Pools[name]
		k := "pools." + name + "."
		if !slices.Contains(Balances, pc.Balance) {
			at(&pc.Balance, "unknown balance %q (want one of %s)", pc.Balance, quoted(Balances))
		}
		if len(pc.Servers) == 0 && pc.Discovery.Provider == "" {
			at(&pc.Servers, "empty server list (or a [discovery] provider)")
		}
		p = append(p, c.validateDiscovery(name)...) // discovery.go
		seen := map[string]string{}                 // address → the list that has it
		for _, list := range []*[]string{&pc.Servers, &pc.Backups} {
			for i, s := range *list {
				checkAddr(&(*list)[i], false)
				if _, port, err := net.SplitHostPort(s); err == nil && port == "0" {
					at(&(*list)[i], "bad address %q: port 0", s)
				}
				switch seen[s] {
				case "":
					seen[s] = c.keyOf(list)
				case c.keyOf(list):
					at(list, "server %q listed twice", s)
				default:
					at(&(*list)[i], "backup %q is also a primary (listed in servers)", s)
				}
			}
		}
		names := map[string]string{} // name → address
		for _, addr := range sortedKeys(pc.Names) {
			name := pc.Names[addr]
			key := k + "names." + strconv.Quote(addr)
			switch {
			case seen[addr] == "":
				add(key, "%q is not a server or backup of the pool", addr)
			case strings.TrimSpace(name) == "" || strings.ContainsAny(name, "\"\\\n"):
				add(key, "bad name %q: must be non-empty, without quotes, backslashes or newlines", name)
			case names[name] != "":
				add(key, "name %q is already the name of %s", name, names[name])
			default:
				names[name] = addr
			}
		}
		if len(pc.Backups) == 0 {
			for _, f := range []any{&pc.FailbackInterval, &pc.FailbackCloseTunnels} {
				if c.set(f) {
					at(f, "needs backups")
				}
			}
		}
		checkDur(&pc.FailbackInterval, true)
		if pc.FailbackCloseTunnels && pc.Balance == "leader" {
			at(&pc.FailbackCloseTunnels, "not for balance = \"leader\": a leader pool closes its tunnels whenever the leader changes")
		}
		if c.set(&pc.FailbackCloseSpread) && !pc.FailbackCloseTunnels {
			at(&pc.FailbackCloseSpread, "needs failback_close_tunnels = true")
		}
		checkDur(&pc.FailbackCloseSpread, false)
		if pc.UnavailableStatus < 400 || pc.UnavailableStatus > 599 {
			at(&pc.UnavailableStatus, "must be a 4xx or 5xx status, got %d", pc.UnavailableStatus)
		}
		if pc.Balance != "roundrobin" {
			for _, f := range []any{&pc.HighWatermark, &pc.HighWatermarkBytes, &pc.MultipartHeader} {
				if c.set(f) {
					at(f, "only for balance = \"roundrobin\"")
				}
			}
		}
		if pc.HighWatermark < 0 {
			at(&pc.HighWatermark, "must not be negative, got %d", pc.HighWatermark)
		}
		if pc.HighWatermarkBytes < 0 {
			at(&pc.HighWatermarkBytes, "must not be negative, got %d", pc.HighWatermarkBytes)
		}
		if h := pc.MultipartHeader; h != "" && !validHeaderName(h) {
			at(&pc.MultipartHeader, "bad header name %q", h)
		}
		if pc.MultipartHeader == "" {
			for _, f := range []any{&pc.MultipartTTL, &pc.MultipartMaxPins} {
				if c.set(f) {
					at(f, "needs multipart_header")
				}
			}
		}
		checkDur(&pc.MultipartTTL, true)
		checkPositive(&pc.MultipartMaxPins)
		checkDur(&pc.QueueTimeout, false)
		checkPositive(&pc.MaxQueue)
		checkPositive(&pc.MaxConns)
		checkDur(&pc.SlowStart, false)
		if pc.SlowStart.D < 0 {
			at(&pc.SlowStart, "must not be negative")
		}
		if pc.NewTunnelsPerSecond < 0 {
			at(&pc.NewTunnelsPerSecond, "must not be negative, got %d", pc.NewTunnelsPerSecond)
		}
		checkDur(&pc.ConnectTimeout, true)
		checkDur(&pc.ResponseTimeout, true)
		checkDur(&pc.TunnelIdleTimeout, false)
		checkDur(&pc.TunnelCloseSpread, false)
		if pc.Balance == "sticky" {
			if _, err := stickiness.NewExtractor(pc.Sticky.Keys); err != nil {
				at(&pc.Sticky.Keys, "%v", strings.TrimPrefix(err.Error(), "stickiness: "))
			}
			if ck := pc.Sticky.Cookie; ck != "" && !slices.Contains(pc.Sticky.Keys, "cookie:"+ck) {
				at(&pc.Sticky.Cookie, "cookie %q is set but sticky.keys does not list \"cookie:%s\"", ck, ck)
			}
			checkDur(&pc.Sticky.IdleTimeout, true)
			checkPositive(&pc.Sticky.MaxEntries)
		} else if c.set(&pc.Sticky) {
			at(&pc.Sticky, "only for balance = \"sticky\"")
		}
		p = append(p, c.loadPoolTLS(name)...) // [pools.NAME.tls]: reads its files
		ck := &pc.Check
		if ck.Path != "" && !strings.HasPrefix(ck.Path, "/") || ck.Path == "" && pc.Balance == "leader" {
			at(&ck.Path, "must start with /, got %q", ck.Path)
		}
		if ck.Port < 0 || ck.Port > 65535 {
			at(&ck.Port, "bad port %d", ck.Port)
		}
		checkPositive(&ck.Rise)
		// Never echo the credentials themselves: they are a password.
		if ck.CredentialsFile != "" {
			// The file counts in the config digest (readFile): a reload after rotating it applies it,
			// and its value, kept in Credentials, changes the check options, which restarts the probes.
			if ck.Credentials != "" {
				at(&ck.CredentialsFile, "set with credentials (in %s): set one of them", c.FileOf(c.keyOf(&ck.Credentials)))
			} else if data, err := c.readFile(c.keyOf(&ck.CredentialsFile), ck.CredentialsFile); err != nil {
				at(&ck.CredentialsFile, "%v", err)
			} else if ck.Credentials = strings.TrimSpace(string(data)); ck.Credentials == "" {
				at(&ck.CredentialsFile, "%s is empty", ck.CredentialsFile)
			} else if raw, err := base64.StdEncoding.DecodeString(ck.Credentials); err != nil || !strings.Contains(string(raw), ":") {
				at(&ck.CredentialsFile, "%s must hold base64 of user:password, as credentials would", ck.CredentialsFile)
			}
		} else if ck.Credentials != "" {
			if raw, err := base64.StdEncoding.DecodeString(ck.Credentials); err != nil {
				at(&ck.Credentials, "not valid base64")
			} else if !strings.Contains(string(raw), ":") {
				at(&ck.Credentials, "must be base64 of user:password")
			}
		}
		checkDur(&ck.Interval, true)
		checkDur(&ck.IntervalMax, true)
		if ck.Interval.err == nil && ck.IntervalMax.err == nil && ck.IntervalMax.D < ck.Interval.D {
			at(&ck.IntervalMax, "%s is less than interval %s", ck.IntervalMax.D, ck.Interval.D)
		}
		checkDur(&ck.FastInterval, true)
		checkDur(&ck.Timeout, true)
		checkPositive(&ck.Fall)
	}

	if len(c.Routes) == 0 && len(c.Relays) == 0 {
		add("routes", "no [[routes]] and no [relays.NAME]: at least one route must name a pool")
	}
	c.routeAuth = make([]*Auth, len(c.Routes))
	for i, r := range c.Routes {
		p = append(p, c.loadRouteAuth(i)...) // [routes.auth]: reads its files (auth.go)
		k := "routes." + strconv.Itoa(i) + "."
		if r.Pool == "" {
			at(&c.Routes[i].Pool, "missing pool")
		} else if _, ok := c.Pools[r.Pool]; !ok {
			at(&c.Routes[i].Pool, "pool %q is not defined in any file", r.Pool)
		}
		for j, pfx := range r.Paths {
			if !strings.HasPrefix(pfx, "/") {
				add(fmt.Sprintf("%spaths.%d", k, j), "path prefix must start with /, got %q", pfx)
			}
		}
		for j, h := range r.Hosts {
			if why := hostPatternProblem(h); why != "" {
				add(fmt.Sprintf("%shosts.%d", k, j), "bad host pattern %q: %s", h, why)
			}
		}
	}
	p = append(p, c.validateRouteOrder()...)
	p = append(p, c.validateRelays()...) // relay.go
	return p
}

// validateRouteOrder refuses a route that the routes before it shadow completely: it could never match,
// and its requests would silently go to another pool (a websocket route after a catch-all sends devices
// to the platform). The problem names the route and the routes that take its requests, each with its
// file. A partial overlap (an earlier route takes some of a route's requests) is allowed and common.
//
// App Configuration relays come first: each takes every path under /apprapp/ on its hosts (relay.go),
// so a route that only they and earlier routes match is refused too, naming the relays.
func (c *Config) validateRouteOrder() []string {
	var p []string
	// all is the relays that can shadow a route, as routes, then the routes; keyOf names an entry.
	var all []Route
	var relayNames []string
	for _, name := range slices.Sorted(maps.Keys(c.Relays)) {
		if r := c.Relays[name]; r.Protocol == "appconfiguration" {
			all = append(all, Route{Paths: []string{"/" + appConfigPrefix + "/"}, Hosts: r.Hosts})
			relayNames = append(relayNames, name)
		}
	}
	nr := len(all)
	all = append(all, c.Routes...)
	keyOf := func(j int) string {
		if j < nr {
			return "relays." + relayNames[j]
		}
		return "routes." + strconv.Itoa(j-nr)
	}
	describe := func(j int) string {
		if j < nr {
			return describeRoute(all[j]) + `, protocol "appconfiguration"`
		}
		return describeRoute(all[j])
	}
	for i := range c.Routes {
		by := shadowedBy(all, nr+i)
		if by == nil {
			continue
		}
		var names, keys, routeKeys, relayKeys []string
		for _, j := range by {
			key := keyOf(j)
			keys = append(keys, key)
			if j >= nr {
				routeKeys = append(routeKeys, key)
			} else {
				relayKeys = append(relayKeys, key)
			}
			names = append(names, fmt.Sprintf("%s (%s, in %s)", key, describe(j), c.fileAt(key)))
		}
		how := "comes before it and matches"
		if len(by) > 1 {
			how = "come before it and together match"
		}
		key := "routes." + strconv.Itoa(i)
		narrow := "the paths"
		if len(c.Routes[i].Hosts) > 0 || slices.ContainsFunc(by, func(j int) bool { return len(all[j].Hosts) > 0 }) {
			narrow = "the paths or hosts"
		}
		fix := fmt.Sprintf("put %s first or narrow %s of %s", key, narrow, strings.Join(keys, " and "))
		if len(relayKeys) > 0 { // relays come before every route, and their paths are implied
			fix = fmt.Sprintf("narrow %s of %s, or the hosts of %s", narrow, strings.Join(append([]string{key}, routeKeys...), " and "),
				strings.Join(relayKeys, " and "))
		}
		p = append(p, c.at(key, "never matches (%s): %s %s every request it could; %s",
			describeRoute(c.Routes[i]), strings.Join(names, " and "), how, fix))
	}
	return p
}

// shadowedBy returns the routes before routes[i] that together match every request routes[i] could
// match, so that it never does, or nil when some request reaches it. The rule follows route.matches
// (lb), the first matching route winning:
//   - a request matches a route when its path starts with one of the route's prefixes; a route without
//     paths has the prefix "/", which every request path has (fasthttp's path always starts with "/");
//   - a websocket route matches only WebSocket upgrades, another route upgrades and plain requests alike;
//   - a route with hosts matches only a request whose host matches one of them (HostMatches); route a
//     takes every request of b's host pattern h when hostCovers(a's hosts, h), "" for b without hosts;
//   - so route a takes every request of route b's prefix q when one of a's prefixes is a prefix of q and
//     a is not websocket-only or b is (a's prefix that is not a prefix of q leaves q itself, a path b
//     matches, to b). Prefixes of b are covered one by one, possibly by different earlier routes.
//
// Relay paths ([relays.NAME], matched before every route) of protocol = "generic" never shadow a route:
// such a relay matches paths of a fixed number of segments only, and a route's prefix followed by more
// segments escapes it. An App Configuration relay takes every path under /apprapp/ on its hosts: the
// caller puts it before the routes as a route of that prefix.
func shadowedBy(routes []Route, i int) []int {
	b := routes[i]
	if !validPrefixes(b.Paths) || !validHosts(b.Hosts) {
		return nil // already a problem of its own
	}
	var by []int
	for _, h := range hostsOf(b) {
		for _, q := range prefixesOf(b) {
			j := slices.IndexFunc(routes[:i], func(a Route) bool {
				return (!a.WebSocket || b.WebSocket) && validPrefixes(a.Paths) && validHosts(a.Hosts) &&
					hostCovers(LowerHosts(a.Hosts), h) &&
					slices.ContainsFunc(prefixesOf(a), func(pa string) bool { return strings.HasPrefix(q, pa) })
			})
			if j < 0 {
				return nil
			}
			if !slices.Contains(by, j) {
				by = append(by, j)
			}
		}
	}
	slices.Sort(by)
	return by
}

// hostsOf returns a route's host patterns in lower case, "" (every host) for a route without hosts.
func hostsOf(r Route) []string {
	if len(r.Hosts) == 0 {
		return []string{""}
	}
	return LowerHosts(r.Hosts)
}

func validHosts(hosts []string) bool {
	return !slices.ContainsFunc(hosts, func(h string) bool { return hostPatternProblem(h) != "" })
}

// prefixesOf returns a route's path prefixes, "/" (every path) for a route without paths.
func prefixesOf(r Route) []string {
	if len(r.Paths) == 0 {
		return []string{"/"}
	}
	return r.Paths
}

func validPrefixes(paths []string) bool {
	return !slices.ContainsFunc(paths, func(p string) bool { return !strings.HasPrefix(p, "/") })
}

// describeRoute says what a route matches, for a problem: its paths (or every path), websocket only.
func describeRoute(r Route) string {
	s := "every path"
	if len(r.Paths) > 0 {
		q := make([]string, len(r.Paths))
		for i, p := range r.Paths {
			q[i] = strconv.Quote(p)
		}
		s = "paths " + strings.Join(q, ", ")
	}
	if len(r.Hosts) > 0 {
		s += ", hosts " + quoted(r.Hosts)
	}
	if r.WebSocket {
		s += ", websocket only"
	}
	return s
}

// Balances are the values of a pool's balance key (lb has a policy for each; its tests check that).
var Balances = []string{"leader", "roundrobin", "sticky"}

// LogLevels are the values of [global] log_level.
var LogLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// quoted lists names for an error message: "a", "b", "c".
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// startProblem checks a start mode ([global] start, [relays.NAME] start): "normal", or "fast", which
// needs the file named by fileKey.
func startProblem(start string, haveFile bool, fileKey string) string {
	switch start {
	case "normal":
	case "fast":
		if !haveFile {
			return `"fast" needs ` + fileKey
		}
	default:
		return fmt.Sprintf(`unknown start %q (want "normal" or "fast")`, start)
	}
	return ""
}

// validateAdmin reads the admin secrets ([admin] token_file, password_file) and checks that a listener
// other than loopback is protected. A secret never appears in a problem.
func (c *Config) validateAdmin() []string {
	var p []string
	a := c.Admin
	read := func(key, file string) string {
		if file == "" {
			return ""
		}
		b, err := c.readFile(key, file) // in the config digest: a secret rotated in place applies
		if err != nil {
			p = append(p, c.at(key, "cannot read: %v", err))
			return ""
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			p = append(p, c.at(key, "%s is empty", file))
		}
		return v
	}
	c.AdminToken = read("admin.token_file", a.TokenFile)
	c.AdminPassword = read("admin.password_file", a.PasswordFile)
	if (a.User == "") != (a.PasswordFile == "") {
		p = append(p, c.at("admin.user", "user and password_file go together"))
	}
	if strings.ContainsRune(a.User, ':') {
		p = append(p, c.at("admin.user", "must not contain ':'"))
	}
	if a.Listen != "" && a.TokenFile == "" && a.PasswordFile == "" && !LoopbackAddr(a.Listen) {
		p = append(p, c.at("admin.listen", "%q is not a loopback address: set token_file or user and password_file", a.Listen))
	}
	return p
}

// LoopbackAddr reports whether addr (host:port) listens on a loopback address only.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validHeaderName reports whether h is an HTTP field name (an RFC 9110 token).
func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return h != ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func ValidAddr(addr string) error {
	for i := 0; i < len(addr); i++ {
		if c := addr[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("control or space character %q", c)
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// Its message repeats the address unquoted: say what is wrong without it.
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /:") {
		return fmt.Errorf("bad host %q", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// loadPoolTLS validates pool name's [pools.NAME.tls] and builds the pool's client TLS config from its
// files, read now: at start, at -check and at every reload, so that a missing or bad file fails the
// load (and a reload keeps the running config). Problems name the file and the key and never hold a
// file's contents. The contents go into the config digest, so a reload after replacing a CA, a
// certificate or a key applies it, and into the table's sum, so that the servers' transports are
// rebuilt (sameTransport).
func (c *Config) loadPoolTLS(name string) []string {
	t := &c.Pools[name].TLS
	k := "pools." + name + ".tls."
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at(k+key, format, args...)) }
	if !t.Enabled {
		// A key that would be parsed and ignored is a mistake: say so.
		for _, f := range []string{"ca_file", "server_name", "insecure_skip_verify", "cert", "key"} {
			if c.isSet(k + f) {
				add(f, "needs enabled = true")
			}
		}
		return p
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, // the operator's explicit choice, logged as a warning
		// Resumed sessions spare most handshakes of new upstream connections; the cache is shared by
		// the pool's servers and kept until the config changes.
		ClientSessionCache: tls.NewLRUClientSessionCache(0),
	}
	digest := sha256.New()
	read := func(key, file string) []byte {
		data, err := c.readFile(k+key, file) // in the config digest too
		if err != nil {
			add(key, "%v", err)
			return nil
		}
		fmt.Fprintf(digest, "%s %d\n", key, len(data))
		digest.Write(data)
		return data
	}
	if t.CAFile != "" {
		if t.InsecureSkipVerify {
			add("ca_file", "not used with insecure_skip_verify = true, which verifies nothing")
		}
		if data := read("ca_file", t.CAFile); data != nil {
			roots, err := parseCABundle(data)
			if err != nil {
				add("ca_file", "%s: %v", t.CAFile, err)
			}
			cfg.RootCAs = roots
		}
	}
	if sn := t.ServerName; sn != "" && net.ParseIP(sn) == nil && !validServerName(sn) {
		add("server_name", "bad server name %q (a DNS name or an IP address, without a port)", sn)
	}
	switch {
	case t.Cert != "" && t.Key == "":
		add("key", "cert and key go together: key is missing")
	case t.Cert == "" && t.Key != "":
		add("cert", "cert and key go together: cert is missing")
	case t.Cert != "":
		certPEM, keyPEM := read("cert", t.Cert), read("key", t.Key)
		if certPEM == nil || keyPEM == nil {
			break
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			add("cert", "%s with key %s: %v", t.Cert, t.Key, err)
			break
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	t.sum = hex.EncodeToString(digest.Sum(nil))
	if len(p) == 0 {
		t.Client = cfg
	}
	return p
}

// parseCABundle returns the certificates of a PEM bundle as a pool. Every block must be a
// certificate, and there must be one at least.
func parseCABundle(data []byte) (*x509.CertPool, error) {
	roots := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		n++
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE", n, b.Type)
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", n, err)
		}
		roots.AddCert(cert)
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return roots, nil
}

// validServerName reports whether s may be a DNS name: letters, digits, '-', '.' and '_'.
func validServerName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return len(s) <= 253
}
