package lb

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/fairlead/fairlead/stickiness"
)

// Config is the whole configuration as the operator wrote it, merged from every file of conf.d and with
// defaults applied. A loaded Config is never modified: a reload builds a new one.
//
// Every key is documented here with its default; conf.d/ shows each of them commented and README.md lists
// them all.
type Config struct {
	Frontend FrontendConfig         `toml:"frontend"`
	Admin    AdminConfig            `toml:"admin"`
	Pools    map[string]*PoolConfig `toml:"pools"`
	Routes   []RouteConfig          `toml:"routes"`

	// Files are the files the config was read from, in the order they were merged.
	Files []string `toml:"-"`
	// origin maps a dotted key ("pools.platform.check.interval", "routes.2.pool") to the file that set it.
	origin map[string]string
	// digest identifies the bytes of every file read, so that a reload of unchanged files is skipped.
	digest string
}

// FrontendConfig is the [frontend] table: where clients connect.
type FrontendConfig struct {
	// Listen is the TCP address of the client-facing HTTP listener. Default "127.0.0.1:8080".
	Listen string `toml:"listen"`
	// ReadTimeout bounds reading one request's headers (and a non-streamed body). Default "30s".
	ReadTimeout Duration `toml:"read_timeout"`
	// IdleTimeout closes a client keep-alive connection idle this long between requests. Default "60s".
	IdleTimeout Duration `toml:"idle_timeout"`
	// MaxConns caps concurrent client connections; over it new connections are refused. Default 20000.
	MaxConns int `toml:"max_conns"`
	// MaxBodySize caps a request body in bytes; bigger bodies get 413. 0 means no limit. Default 0.
	MaxBodySize int64 `toml:"max_body_size"`
	// RetryBuffer is the largest request body (bytes, with a Content-Length) held in memory so that a failed
	// request can be replayed on the new leader. Larger or chunked bodies stream and are retried only when
	// none of their bytes were read. Default 65536.
	RetryBuffer int `toml:"retry_buffer"`
}

// AdminConfig is the [admin] table: status and metrics endpoints.
type AdminConfig struct {
	// Listen is the address of the admin HTTP listener (/status, /metrics, /healthz). "" disables it.
	// Default "127.0.0.1:8404".
	Listen string `toml:"listen"`
}

// PoolConfig is one [pools.NAME] table: a set of upstream servers and how to choose among them.
type PoolConfig struct {
	// Balance is the selection policy: "leader" sends everything to the one server that answers the
	// leader check with 200; "sticky" keeps each key (asset, session) on one server, placing new keys by
	// rendezvous hashing over the healthy servers. Default "leader".
	Balance string `toml:"balance"`
	// Servers are the upstream addresses (host:port). Required, non-empty.
	Servers []string `toml:"servers"`
	// QueueTimeout is how long a request may wait for a usable server (a leader) or a free upstream
	// connection before it gets 503 with Retry-After. Default "5s".
	QueueTimeout Duration `toml:"queue_timeout"`
	// MaxQueue caps the requests waiting at once in this pool; over it requests get 503 at once. Default 10000.
	MaxQueue int `toml:"max_queue"`
	// MaxConns caps the upstream connections fairlead opens to each server. Default 512.
	MaxConns int `toml:"max_conns"`
	// ConnectTimeout bounds dialing a server. Default "3s".
	ConnectTimeout Duration `toml:"connect_timeout"`
	// ResponseTimeout bounds waiting for a server's response headers; past it the client gets 504.
	// Default "60s".
	ResponseTimeout Duration `toml:"response_timeout"`
	// NoDelay sets TCP_NODELAY on upstream connections. Default false: Nagle's algorithm stays on, which
	// never delays a request written in one piece (fasthttp writes a request and a body under 32 KiB in
	// one system call) and measured ~20% more small requests per second through fairlead; set it for
	// upstreams that receive large streamed bodies in many small writes and need each pushed at once.
	NoDelay bool `toml:"nodelay"`
	// TunnelIdleTimeout closes an upgraded connection (WebSocket tunnel) with no bytes either way for
	// this long; "0s" never does. Default "10m".
	TunnelIdleTimeout Duration `toml:"tunnel_idle_timeout"`
	// Check is the active health check.
	Check CheckConfig `toml:"check"`
	// Sticky configures balance = "sticky".
	Sticky StickyConfig `toml:"sticky"`
}

// StickyConfig is a [pools.NAME.sticky] table.
type StickyConfig struct {
	// Keys are the sources of the stickiness key, tried in order; the first one present wins:
	// "header:NAME", "query:NAME", "cookie:NAME", "source" (client IP). Default ["source"].
	Keys []string `toml:"keys"`
	// Cookie, if set, is a cookie fairlead sets (on the 101 of a WebSocket, or on an HTTP response) naming
	// the chosen server, so that cookie-keeping clients stick by it; Keys must list "cookie:<Cookie>".
	// Default "" (no cookie).
	Cookie string `toml:"cookie"`
	// IdleTimeout forgets a key with no open tunnel (and no request) for this long. Default "10m".
	IdleTimeout Duration `toml:"idle_timeout"`
	// MaxEntries bounds the table; the longest-idle keys go first. Default 1000000.
	MaxEntries int `toml:"max_entries"`
}

// CheckConfig is a [pools.NAME.check] table: the active probe of every server of the pool.
type CheckConfig struct {
	// Path is probed with GET. Default "/Thingworx/Admin/HA/LeaderCheck" for leader pools; for other
	// pools default "" (no active probe: a server is taken down when a connection to it fails and tried
	// again after interval), and a path enables rise/fall probing where 2xx/3xx pass.
	Path string `toml:"path"`
	// Port, if set, is the port probes go to instead of each server's own (connection servers may answer
	// health checks on a port of their own). Default 0 (the server's port).
	Port int `toml:"port"`
	// Credentials is base64 of "user:password", sent as "Authorization: Basic <credentials>" exactly as
	// ThingWorx's LoadBalancerBase64EncodedCredentials. Never logged. Default "" (no Authorization header).
	Credentials string `toml:"credentials"`
	// Interval and IntervalMax bound the random wait between two probes of one server in steady state.
	// Defaults "15s" for leader pools, "5s" for others, and IntervalMax = Interval*4/3.
	Interval    Duration `toml:"interval"`
	IntervalMax Duration `toml:"interval_max"`
	// FastInterval is the probe period of every server while the leader is failing or unknown. Default "2s".
	FastInterval Duration `toml:"fast_interval"`
	// Timeout bounds one probe; a probe that times out counts as a non-200 answer. Default "5s" for
	// leader pools, "2s" for others.
	Timeout Duration `toml:"timeout"`
	// Fall is the number of consecutive non-200 answers after which the leader is replaced (leader
	// pools, default 3), or consecutive failures that take a server down (other pools, default 2).
	Fall int `toml:"fall"`
	// Rise is the number of consecutive passes that bring a down server back (not for leader pools,
	// where the 200 answer itself decides). Default 2.
	Rise int `toml:"rise"`
}

// RouteConfig is one [[routes]] entry. Routes are tried in order; the first that matches names the pool.
type RouteConfig struct {
	// Pool is the name of the pool that serves matching requests. Required.
	Pool string `toml:"pool"`
	// Paths are optional path prefixes; a route with none matches every path.
	Paths []string `toml:"paths"`
	// WebSocket, if true, makes the route match only WebSocket upgrades (Upgrade: websocket), so that
	// ordinary requests never reach its pool. Default false (the route matches every request).
	WebSocket bool `toml:"websocket"`
}

// Duration is a TOML string in Go syntax ("250ms", "15s"). A bad value is kept and reported by
// validation with the file and key, so that every error of a config is listed at once.
type Duration struct {
	D   time.Duration
	raw string
	err error
}

// UnmarshalText implements encoding.TextUnmarshaler; it never fails (see Duration).
func (d *Duration) UnmarshalText(b []byte) error {
	d.raw = string(b)
	d.D, d.err = time.ParseDuration(d.raw)
	if d.err == nil && d.D < 0 {
		d.err = errors.New("must not be negative")
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.D.String()), nil }

// ConfigError lists every problem found in a configuration. Each line names the file and the key.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string { return strings.Join(e.Problems, "\n") }

// LoadConfig reads path (a directory whose *.toml files are merged in lexical order, or one file),
// applies defaults and validates the result. The error is a *ConfigError listing every problem.
func LoadConfig(path string) (*Config, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, &ConfigError{Problems: []string{err.Error()}}
	}
	c := &Config{Files: files, origin: map[string]string{}}
	var problems []string
	for _, f := range files {
		problems = append(problems, c.mergeFile(f)...)
	}
	c.applyDefaults()
	if problems = append(problems, c.validate()...); len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return c, nil
}

func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read config: %w", path, err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.toml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.toml files", path)
	}
	sort.Strings(files)
	return files, nil
}

// mergeFile decodes one file on its own (so type errors and unknown keys name this file and its lines)
// and merges every key it defines over what earlier files set.
func (c *Config) mergeFile(file string) []string {
	var fc Config
	data, err := os.ReadFile(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", file, err)}
	}
	sum := sha256.Sum256(data)
	c.digest += file + ":" + hex.EncodeToString(sum[:]) + ";"
	md, err := toml.Decode(string(data), &fc)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s", file, strings.TrimPrefix(err.Error(), "toml: "))}
	}
	var problems []string
	for _, k := range md.Undecoded() {
		problems = append(problems, fmt.Sprintf("%s: %s: unknown key", file, k))
	}
	merge(reflect.ValueOf(c).Elem(), reflect.ValueOf(&fc).Elem(), nil, &md, file, c.origin)
	return problems
}

// merge copies into dst every field of src that the file's metadata says was defined, recording the
// file of each key in origin. Tables merge key by key, [[routes]] append, other values replace.
func merge(dst, src reflect.Value, path []string, md *toml.MetaData, file string, origin map[string]string) {
	t := src.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("toml"), ",")[0]
		if name == "" || name == "-" {
			continue
		}
		key := append(append([]string(nil), path...), name)
		if !md.IsDefined(key...) {
			continue
		}
		s, d := src.Field(i), dst.Field(i)
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration{}):
			origin[strings.Join(key, ".")] = file
			merge(d, s, key, md, file, origin)
		case f.Type.Kind() == reflect.Map:
			origin[strings.Join(key, ".")] = file
			if d.IsNil() {
				d.Set(reflect.MakeMap(f.Type))
			}
			for _, mk := range s.MapKeys() {
				dv := d.MapIndex(mk)
				if !dv.IsValid() {
					dv = reflect.New(f.Type.Elem().Elem())
					d.SetMapIndex(mk, dv)
				}
				sub := append(append([]string(nil), key...), mk.String())
				origin[strings.Join(sub, ".")] = file
				merge(dv.Elem(), s.MapIndex(mk).Elem(), sub, md, file, origin)
			}
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			// Arrays of tables ([[routes]]) accumulate across files; each entry remembers its file.
			for j := 0; j < s.Len(); j++ {
				origin[fmt.Sprintf("%s.%d", strings.Join(key, "."), d.Len())] = file
				d.Set(reflect.Append(d, s.Index(j)))
			}
		default:
			origin[strings.Join(key, ".")] = file
			d.Set(s)
		}
	}
}

// isSet tells whether some file set the dotted key.
func (c *Config) isSet(key string) bool { _, ok := c.origin[key]; return ok }

// at formats a problem with the file that set key (or the closest enclosing key that some file set).
func (c *Config) at(key, format string, args ...any) string {
	file := ""
	for k := key; k != ""; {
		if f, ok := c.origin[k]; ok {
			file = f
			break
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	if file == "" && len(c.Files) > 0 {
		file = c.Files[0]
	}
	return fmt.Sprintf("%s: %s: %s", file, key, fmt.Sprintf(format, args...))
}

func setDuration(d *Duration, set bool, def time.Duration) {
	if !set {
		d.D = def
	}
}

func (c *Config) applyDefaults() {
	fe := &c.Frontend
	if !c.isSet("frontend.listen") {
		fe.Listen = "127.0.0.1:8080"
	}
	setDuration(&fe.ReadTimeout, c.isSet("frontend.read_timeout"), 30*time.Second)
	setDuration(&fe.IdleTimeout, c.isSet("frontend.idle_timeout"), 60*time.Second)
	if !c.isSet("frontend.max_conns") {
		fe.MaxConns = 20000
	}
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
		}
		setDuration(&p.QueueTimeout, c.isSet(k+"queue_timeout"), 5*time.Second)
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
		setDuration(&sk.IdleTimeout, c.isSet(k+"sticky.idle_timeout"), 10*time.Minute)
		if !c.isSet(k + "sticky.max_entries") {
			sk.MaxEntries = 1_000_000
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
		setDuration(&ck.FastInterval, c.isSet(k+"fast_interval"), 2*time.Second)
		setDuration(&ck.Timeout, c.isSet(k+"timeout"), timeout)
		if !c.isSet(k + "fall") {
			ck.Fall = fall
		}
		if !c.isSet(k + "rise") {
			ck.Rise = 2
		}
	}
}

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
		if err := validAddr(addr); err != nil {
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

	checkAddr("frontend.listen", c.Frontend.Listen, false)
	checkDur("frontend.read_timeout", c.Frontend.ReadTimeout, true)
	checkDur("frontend.idle_timeout", c.Frontend.IdleTimeout, true)
	checkPositive("frontend.max_conns", int64(c.Frontend.MaxConns))
	if c.Frontend.MaxBodySize < 0 {
		add("frontend.max_body_size", "must not be negative")
	}
	if c.Frontend.RetryBuffer < 0 {
		add("frontend.retry_buffer", "must not be negative")
	}
	checkAddr("admin.listen", c.Admin.Listen, true)

	names := make([]string, 0, len(c.Pools))
	for name := range c.Pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := c.Pools[name]
		k := "pools." + name + "."
		if _, ok := balances[pc.Balance]; !ok {
			add(k+"balance", "unknown balance %q (want one of %s)", pc.Balance, balanceNames())
		}
		if len(pc.Servers) == 0 {
			add(k+"servers", "empty server list")
		}
		seen := map[string]bool{}
		for i, s := range pc.Servers {
			checkAddr(fmt.Sprintf("%sservers.%d", k, i), s, false)
			if _, port, err := net.SplitHostPort(s); err == nil && port == "0" {
				add(fmt.Sprintf("%sservers.%d", k, i), "bad address %q: port 0", s)
			}
			if seen[s] {
				add(k+"servers", "server %q listed twice", s)
			}
			seen[s] = true
		}
		checkDur(k+"queue_timeout", pc.QueueTimeout, false)
		checkPositive(k+"max_queue", int64(pc.MaxQueue))
		checkPositive(k+"max_conns", int64(pc.MaxConns))
		checkDur(k+"connect_timeout", pc.ConnectTimeout, true)
		checkDur(k+"response_timeout", pc.ResponseTimeout, true)
		checkDur(k+"tunnel_idle_timeout", pc.TunnelIdleTimeout, false)
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

	if len(c.Routes) == 0 {
		add("routes", "no [[routes]]: at least one route must name a pool")
	}
	for i, r := range c.Routes {
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
	return p
}

func validAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
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
