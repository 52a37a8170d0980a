package config

// Single-point auth of a route, as loaded ([routes.auth], from the ThingWorx relay proxy): clients present a key
// fairlead defines; fairlead removes it and injects the upstream credential (the platform's application
// key) that only fairlead holds, so that devices never hold it.
//
// The keys file and the upstream value file are read when the config is loaded, so they reload with it,
// and both are folded into the config digest, so that a reload after editing only a keys file applies.
// Only each key's SHA-256 is kept. A presented key is hashed and compared with every key in constant
// time, with no early exit, so the time taken tells neither which key matched nor how many bytes did.
// The upstream value is kept as it must be sent; it never appears in logs, errors, /status or answers.

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
	"strings"

	"github.com/fairlead/fairlead/lb/httpfield"
)

// Auth is the loaded single-point auth of one route. It is part of an immutable Config.
type Auth struct {
	Header         string              // the request header carrying the client's key
	Bearer         bool                // header is Authorization: the key comes as "Bearer <key>"
	RawOrBearer    bool                // …or as it is (an App Configuration relay: its client SDKs send it raw)
	keys           [][sha256.Size]byte // SHA-256 of every client key; the keys themselves are not kept
	UpstreamHeader string              // set on admitted requests; "" = nothing injected
	UpstreamValue  string              // its value: a credential, never logged
}

// Admits reports whether v, the value of the key's header, carries one of the keys. Every key is
// compared (constant time each, no early exit).
func (a *Auth) Admits(v []byte) bool {
	if a.Bearer {
		if t := bearerToken(v); t != nil || !a.RawOrBearer {
			v = t
		}
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	sum := sha256.Sum256(v)
	ok := 0
	for i := range a.keys {
		ok |= subtle.ConstantTimeCompare(sum[:], a.keys[i][:])
	}
	return ok == 1
}

// bearerToken returns the token of an Authorization value "Bearer <token>" (the scheme in any case,
// RFC 9110 11.1), or nil for any other value.
func bearerToken(v []byte) []byte {
	const scheme = "Bearer "
	if len(v) < len(scheme) || !bytes.EqualFold(v[:len(scheme)], []byte(scheme)) {
		return nil
	}
	return v[len(scheme):]
}

// RouteAuthOf returns the loaded auth of route i, or nil when the route has none.
func (c *Config) RouteAuthOf(i int) *Auth {
	if i < 0 || i >= len(c.routeAuth) {
		return nil
	}
	return c.routeAuth[i]
}

// loadRouteAuth validates route i's [routes.auth] and reads its files into c.routeAuth[i].
func (c *Config) loadRouteAuth(i int) []string {
	ac := c.Routes[i].Auth
	if ac == nil {
		return nil
	}
	a, p := c.loadAuth("routes."+strconv.Itoa(i)+".auth.", ac)
	c.routeAuth[i] = a
	return p
}

// loadAuth validates an auth table ([routes.auth], [relays.NAME.auth]) whose keys start with k and
// reads its files; the loaded auth is nil when there are problems. Problems name the file and the key,
// and never hold a file's contents.
func (c *Config) loadAuth(k string, ac *RouteAuth) (*Auth, []string) {
	var p []string
	add := func(key, format string, args ...any) { p = append(p, c.at(k+key, format, args...)) }
	a := &Auth{Header: ac.Header, Bearer: strings.EqualFold(ac.Header, "Authorization"),
		UpstreamHeader: ac.UpstreamHeader}

	if !validHeaderName(ac.Header) {
		add("header", "bad header name %q", ac.Header)
	} else if httpfield.Of(ac.Header).Framing() {
		add("header", "%q cannot carry a key: it frames or routes the request", ac.Header)
	}
	// The files count in the config digest (readFile): a reload after rotating one applies it.
	if ac.KeysFile == "" {
		add("keys_file", "required with [routes.auth]")
	} else if data, err := c.readFile(k+"keys_file", ac.KeysFile); err != nil {
		add("keys_file", "%v", err)
	} else {
		if a.keys = parseKeys(data); len(a.keys) == 0 {
			add("keys_file", "%s has no keys (one per line; blank lines and # comments are ignored)", ac.KeysFile)
		}
	}
	switch {
	case ac.UpstreamHeader == "" && ac.UpstreamValueFile != "":
		add("upstream_header", "upstream_header and upstream_value_file go together: upstream_header is missing")
	case ac.UpstreamHeader != "" && ac.UpstreamValueFile == "":
		add("upstream_value_file", "upstream_header and upstream_value_file go together: upstream_value_file is missing")
	case ac.UpstreamHeader != "":
		if !validHeaderName(ac.UpstreamHeader) {
			add("upstream_header", "bad header name %q", ac.UpstreamHeader)
		} else if httpfield.Of(ac.UpstreamHeader).Reserved() {
			add("upstream_header", "%q is set or removed by fairlead itself when it forwards a request", ac.UpstreamHeader)
		}
		data, err := c.readFile(k+"upstream_value_file", ac.UpstreamValueFile)
		if err != nil {
			add("upstream_value_file", "%v", err)
			break
		}
		v := strings.TrimSpace(string(data))
		switch {
		case v == "":
			add("upstream_value_file", "%s is empty", ac.UpstreamValueFile)
		case strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			// A line break would inject headers of its own. Never echo the value.
			add("upstream_value_file", "%s must hold one line without control characters", ac.UpstreamValueFile)
		}
		a.UpstreamValue = v
	}
	if len(p) > 0 {
		return nil, p
	}
	return a, nil
}

// parseKeys returns the SHA-256 of every key of a keys file: one key per line, surrounding white space
// trimmed; blank lines and lines starting with # are ignored.
func parseKeys(data []byte) [][sha256.Size]byte {
	var sums [][sha256.Size]byte
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		sums = append(sums, sha256.Sum256(line))
	}
	return sums
}
