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
	checkAddr := func(key, addr string, allowEmpty bool) {
		if addr == "" {
			if !allowEmpty {
				add(key, "must not be empty")
			}
			return
		}
		if err := ValidAddr(addr); err != nil {
			add(key, "bad address %q: %v", addr, err)
		}
	}
	checkDur := func(key string, d Duration, positive bool) {
		if d.err != nil {
			add(key, "bad duration %q: %v", d.raw, d.err)
		} else if positive && d.D <= 0 {
			add(key, "must be greater than zero")
		}
	}
	checkPositive := func(key string, v int64) {
		if v <= 0 {
			add(key, "must be greater than zero, got %d", v)
		}
	}

	if c.Frontend.Listen == "" && c.Frontend.TLSListen == "" {
		add("frontend.listen", "must not be empty unless tls_listen is set (HTTPS only)")
	} else {
		checkAddr("frontend.listen", c.Frontend.Listen, true)
	}
	checkAddr("frontend.tls_listen", c.Frontend.TLSListen, true)
	if c.Frontend.TLSListen != "" && c.Frontend.TLSListen == c.Frontend.Listen {
		add("frontend.tls_listen", "is the same address as listen")
	}
	p = append(p, c.loadFrontTLS()...) // reads the certificates (tls.go)
	checkDur("frontend.read_timeout", c.Frontend.ReadTimeout, true)
	checkDur("frontend.idle_timeout", c.Frontend.IdleTimeout, true)
	checkPositive("frontend.max_conns", int64(c.Frontend.MaxConns))
	if c.Frontend.MaxBodySize < 0 {
		add("frontend.max_body_size", "must not be negative")
	}
	if c.Frontend.RetryBuffer < 0 {
		add("frontend.retry_buffer", "must not be negative")
	}
	checkDur("frontend.drain_timeout", c.Frontend.DrainTimeout, false)
	checkDur("frontend.header_timeout", c.Frontend.HeaderTimeout, false)
	if n := c.Frontend.MaxHeaderSize; n < 1024 || n > 1<<20 {
		add("frontend.max_header_size", "must be between 1024 and 1048576 bytes, got %d", n)
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
	checkAddr("admin.listen", c.Admin.Listen, true)
	p = append(p, c.validateAdmin()...)
	gl := c.Global
	checkDur("global.state_max_age", gl.StateMaxAge, true)
	if problem := startProblem(gl.Start, gl.StateFile != "", "global.state_file"); problem != "" {
		add("global.start", "%s", problem)
	}
	if gl.LogFormat != "text" && gl.LogFormat != "json" {
		add("global.log_format", "unknown log format %q (want \"text\" or \"json\")", gl.LogFormat)
	}
	if _, ok := LogLevels[gl.LogLevel]; !ok {
		add("global.log_level", "unknown log level %q (want \"debug\", \"info\", \"warn\" or \"error\")", gl.LogLevel)
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
			add(k+"balance", "unknown balance %q (want one of %s)", pc.Balance, quoted(Balances))
		}
		if len(pc.Servers) == 0 && pc.Discovery.Provider == "" {
			add(k+"servers", "empty server list (or a [discovery] provider)")
		}
		p = append(p, c.validateDiscovery(name)...) // discovery.go
		seen := map[string]string{}                 // address → the list that has it
		for _, list := range []struct {
			field string
			addrs []string
		}{{"servers", pc.Servers}, {"backups", pc.Backups}} {
			for i, s := range list.addrs {
				key := fmt.Sprintf("%s%s.%d", k, list.field, i)
				checkAddr(key, s, false)
				if _, port, err := net.SplitHostPort(s); err == nil && port == "0" {
					add(key, "bad address %q: port 0", s)
				}
				switch seen[s] {
				case "":
					seen[s] = list.field
				case list.field:
					add(k+list.field, "server %q listed twice", s)
				default:
					add(key, "backup %q is also a primary (listed in servers)", s)
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
			for _, f := range []string{"failback_interval", "failback_close_tunnels"} {
				if c.isSet(k + f) {
					add(k+f, "needs backups")
				}
			}
		}
		checkDur(k+"failback_interval", pc.FailbackInterval, true)
		if pc.FailbackCloseTunnels && pc.Balance == "leader" {
			add(k+"failback_close_tunnels", "not for balance = \"leader\": a leader pool closes its tunnels whenever the leader changes")
		}
		if c.isSet(k+"failback_close_spread") && !pc.FailbackCloseTunnels {
			add(k+"failback_close_spread", "needs failback_close_tunnels = true")
		}
		checkDur(k+"failback_close_spread", pc.FailbackCloseSpread, false)
		if pc.UnavailableStatus < 400 || pc.UnavailableStatus > 599 {
			add(k+"unavailable_status", "must be a 4xx or 5xx status, got %d", pc.UnavailableStatus)
		}
		if pc.Balance != "roundrobin" {
			for _, f := range []string{"high_watermark", "high_watermark_bytes", "multipart_header"} {
				if c.isSet(k + f) {
					add(k+f, "only for balance = \"roundrobin\"")
				}
			}
		}
		if pc.HighWatermark < 0 {
			add(k+"high_watermark", "must not be negative, got %d", pc.HighWatermark)
		}
		if pc.HighWatermarkBytes < 0 {
			add(k+"high_watermark_bytes", "must not be negative, got %d", pc.HighWatermarkBytes)
		}
		if h := pc.MultipartHeader; h != "" && !validHeaderName(h) {
			add(k+"multipart_header", "bad header name %q", h)
		}
		if pc.MultipartHeader == "" {
			for _, f := range []string{"multipart_ttl", "multipart_max_pins"} {
				if c.isSet(k + f) {
					add(k+f, "needs multipart_header")
				}
			}
		}
		checkDur(k+"multipart_ttl", pc.MultipartTTL, true)
		checkPositive(k+"multipart_max_pins", int64(pc.MultipartMaxPins))
		checkDur(k+"queue_timeout", pc.QueueTimeout, false)
		checkPositive(k+"max_queue", int64(pc.MaxQueue))
		checkPositive(k+"max_conns", int64(pc.MaxConns))
		checkDur(k+"connect_timeout", pc.ConnectTimeout, true)
		checkDur(k+"response_timeout", pc.ResponseTimeout, true)
		checkDur(k+"tunnel_idle_timeout", pc.TunnelIdleTimeout, false)
		checkDur(k+"tunnel_close_spread", pc.TunnelCloseSpread, false)
		if pc.Balance == "sticky" {
			if _, err := stickiness.NewExtractor(pc.Sticky.Keys); err != nil {
				add(k+"sticky.keys", "%v", strings.TrimPrefix(err.Error(), "stickiness: "))
			}
			if ck := pc.Sticky.Cookie; ck != "" && !slices.Contains(pc.Sticky.Keys, "cookie:"+ck) {
				add(k+"sticky.cookie", "cookie %q is set but sticky.keys does not list \"cookie:%s\"", ck, ck)
			}
			checkDur(k+"sticky.idle_timeout", pc.Sticky.IdleTimeout, true)
			checkPositive(k+"sticky.max_entries", int64(pc.Sticky.MaxEntries))
		} else if c.isSet(k + "sticky") {
			add(k+"sticky", "only for balance = \"sticky\"")
		}
		p = append(p, c.loadPoolTLS(name)...) // [pools.NAME.tls]: reads its files
		ck := pc.Check
		k += "check."
		if ck.Path != "" && !strings.HasPrefix(ck.Path, "/") || ck.Path == "" && pc.Balance == "leader" {
			add(k+"path", "must start with /, got %q", ck.Path)
		}
		if ck.Port < 0 || ck.Port > 65535 {
			add(k+"port", "bad port %d", ck.Port)
		}
		checkPositive(k+"rise", int64(ck.Rise))
		if ck.Credentials != "" {
			// Never echo the credentials themselves: they are a password.
			if raw, err := base64.StdEncoding.DecodeString(ck.Credentials); err != nil {
				add(k+"credentials", "not valid base64")
			} else if !strings.Contains(string(raw), ":") {
				add(k+"credentials", "must be base64 of user:password")
			}
		}
		checkDur(k+"interval", ck.Interval, true)
		checkDur(k+"interval_max", ck.IntervalMax, true)
		if ck.Interval.err == nil && ck.IntervalMax.err == nil && ck.IntervalMax.D < ck.Interval.D {
			add(k+"interval_max", "%s is less than interval %s", ck.IntervalMax.D, ck.Interval.D)
		}
		checkDur(k+"fast_interval", ck.FastInterval, true)
		checkDur(k+"timeout", ck.Timeout, true)
		checkPositive(k+"fall", int64(ck.Fall))
	}

	if len(c.Routes) == 0 && len(c.Relays) == 0 {
		add("routes", "no [[routes]] and no [relays.NAME]: at least one route must name a pool")
	}
	c.routeAuth = make([]*Auth, len(c.Routes))
	for i, r := range c.Routes {
		p = append(p, c.loadRouteAuth(i)...) // [routes.auth]: reads its files (auth.go)
		k := "routes." + strconv.Itoa(i) + "."
		if r.Pool == "" {
			add(k+"pool", "missing pool")
		} else if _, ok := c.Pools[r.Pool]; !ok {
			add(k+"pool", "pool %q is not defined in any file", r.Pool)
		}
		for j, pfx := range r.Paths {
			if !strings.HasPrefix(pfx, "/") {
				add(fmt.Sprintf("%spaths.%d", k, j), "path prefix must start with /, got %q", pfx)
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
func (c *Config) validateRouteOrder() []string {
	var p []string
	for i := range c.Routes {
		by := shadowedBy(c.Routes, i)
		if by == nil {
			continue
		}
		var names, keys []string
		for _, j := range by {
			key := "routes." + strconv.Itoa(j)
			keys = append(keys, key)
			names = append(names, fmt.Sprintf("%s (%s, in %s)", key, describeRoute(c.Routes[j]), c.origin[key]))
		}
		how := "comes before it and matches"
		if len(by) > 1 {
			how = "come before it and together match"
		}
		key := "routes." + strconv.Itoa(i)
		p = append(p, c.at(key, "never matches (%s): %s %s every request it could; put %s first or narrow the paths of %s",
			describeRoute(c.Routes[i]), strings.Join(names, " and "), how, key, strings.Join(keys, " and ")))
	}
	return p
}

// shadowedBy returns the routes before routes[i] that together match every request routes[i] could
// match, so that it never does, or nil when some request reaches it. The rule follows route.matches
// (lb), the first matching route winning:
//   - a request matches a route when its path starts with one of the route's prefixes; a route without
//     paths has the prefix "/", which every request path has (fasthttp's path always starts with "/");
//   - a websocket route matches only WebSocket upgrades, another route upgrades and plain requests alike;
//   - so route a takes every request of route b's prefix q when one of a's prefixes is a prefix of q and
//     a is not websocket-only or b is (a's prefix that is not a prefix of q leaves q itself, a path b
//     matches, to b). Prefixes of b are covered one by one, possibly by different earlier routes.
//
// Relay paths ([relays.NAME], matched before every route) never shadow a route: a relay matches paths of
// a fixed number of segments only, and a route's prefix followed by more segments escapes it.
func shadowedBy(routes []Route, i int) []int {
	b := routes[i]
	if !validPrefixes(b.Paths) {
		return nil // already a problem of its own
	}
	var by []int
	for _, q := range prefixesOf(b) {
		j := slices.IndexFunc(routes[:i], func(a Route) bool {
			return (!a.WebSocket || b.WebSocket) && validPrefixes(a.Paths) &&
				slices.ContainsFunc(prefixesOf(a), func(pa string) bool { return strings.HasPrefix(q, pa) })
		})
		if j < 0 {
			return nil
		}
		if !slices.Contains(by, j) {
			by = append(by, j)
		}
	}
	slices.Sort(by)
	return by
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
