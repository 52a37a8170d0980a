package config

// Host patterns ([[routes]] hosts, [relays.NAME] hosts): their validation, and the match against a
// request's host that lb does on every request (allocating nothing).

import (
	"net/netip"
	"strings"
)

// hostPatternProblem says what is wrong with host pattern h, or "" when it is valid: a host name, an
// IPv4 address, a bracketed IPv6 address, or "*." and a host name.
func hostPatternProblem(h string) string {
	switch {
	case h == "":
		return "empty host pattern"
	case h[0] == '[':
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "an IPv6 address without its closing ]"
		}
		if end != len(h)-1 {
			if h[end+1] == ':' {
				return "has a port: a host pattern matches any port"
			}
			return "characters after the IPv6 address"
		}
		if ip, err := netip.ParseAddr(h[1:end]); err != nil || !ip.Is6() || ip.Zone() != "" {
			return "not an IPv6 address between [ and ]"
		}
		return ""
	case strings.Contains(h, ":"):
		return "has a port: a host pattern matches any port"
	}
	name := h
	if strings.HasPrefix(h, "*.") {
		name = h[2:]
		if name == "" {
			return `"*." needs a name after it`
		}
	} else if h == "*" {
		return `"*" alone: leave hosts out to match every host`
	}
	if len(name) > 253 {
		return "longer than 253 characters"
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return "an empty label (two dots in a row, or a dot at an end)"
		}
		if len(label) > 63 {
			return "a label longer than 63 characters"
		}
		for i := 0; i < len(label); i++ {
			b := label[i]
			switch {
			case b == '*':
				return "* only as the whole first label (\"*.example.org\")"
			case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-':
			default:
				return "a character not allowed in a host name: " + quoteByte(b)
			}
		}
	}
	return ""
}

func quoteByte(b byte) string {
	if b < ' ' || b >= 0x7f {
		return "a control or non-ASCII byte"
	}
	return "'" + string(rune(b)) + "'"
}

// LowerHosts returns the patterns in lower case (a request's host is compared without case).
func LowerHosts(hosts []string) []string {
	if len(hosts) == 0 {
		return nil
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = strings.ToLower(h)
	}
	return out
}

// HostMatches reports whether host (a request's host without its port, as frontend.AuthorityHost gives
// it, in any case) matches one of patterns (valid and lower case, as Config's routes and relay specs hold
// them); no patterns match every host. It allocates nothing.
func HostMatches(patterns []string, host []byte) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if len(p) > 2 && p[0] == '*' && p[1] == '.' {
			// One label, non-empty and without a dot, then p[1:] (".example.org").
			suffix := p[1:]
			if len(host) <= len(suffix) || !equalFold(host[len(host)-len(suffix):], suffix) {
				continue
			}
			label := host[:len(host)-len(suffix)]
			dot := false
			for _, b := range label {
				if b == '.' {
					dot = true
					break
				}
			}
			if !dot {
				return true
			}
			continue
		}
		if len(host) == len(p) && equalFold(host, p) {
			return true
		}
	}
	return false
}

// equalFold reports whether b equals lower-case s, ASCII letters of b compared without case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hostCovers reports whether every host that pattern b matches is matched by one of patterns a (lower
// case); no patterns (a route without hosts) match every host, and b == "" stands for every host.
func hostCovers(a []string, b string) bool {
	if len(a) == 0 {
		return true
	}
	if b == "" {
		return false // a finite list of patterns never matches every host
	}
	for _, p := range a {
		if p == b {
			return true
		}
		if strings.HasPrefix(p, "*.") && !strings.HasPrefix(b, "*.") && HostMatches([]string{p}, []byte(b)) {
			return true
		}
	}
	return false
}

// hostsOverlap reports whether some host matches both a and b (lower case; none: every host) and
// returns one, "" when both match every host. Two patterns share a host when they are equal, or one is
// "*.x" and the other a name one label under x; two different wildcards never do ("*.x" and "*.y.x"
// would need a label with a dot).
func hostsOverlap(a, b []string) (string, bool) {
	example := func(p string) string {
		if strings.HasPrefix(p, "*.") {
			return "x" + p[1:]
		}
		return p
	}
	switch {
	case len(a) == 0 && len(b) == 0:
		return "", true
	case len(a) == 0:
		return example(b[0]), true
	case len(b) == 0:
		return example(a[0]), true
	}
	for _, pa := range a {
		for _, pb := range b {
			switch {
			case pa == pb:
				return example(pa), true
			case !strings.HasPrefix(pb, "*.") && HostMatches([]string{pa}, []byte(pb)):
				return pb, true
			case !strings.HasPrefix(pa, "*.") && HostMatches([]string{pb}, []byte(pa)):
				return pa, true
			}
		}
	}
	return "", false
}
