package frontend

import "net/netip"

// ValidAuthority reports whether a is an authority an "http" or "https" URI may carry: host [":" port]
// (RFC 3986 section 3.2, RFC 9110 section 4.2), without userinfo (RFC 9110 section 4.2.4 forbids it, and
// "user@evil.example" read as a host by one server and as userinfo by another is a confusion to avoid).
// The host is a bracketed IPv6 address, or a non-empty reg-name of unreserved and sub-delims characters
// (which an IPv4 address is too); the port is decimal, at most 65535, and may be empty (RFC 3986 allows
// "host:"). Percent-encodings, which RFC 3986 allows in a reg-name, are refused: no DNS name holds one,
// and fasthttp decodes them where a server behind might not. It is the check of HTTP/2's :authority and
// Host (RFC 9113 section 8.3.1: anything else is a malformed request), and of an HTTP/1.1 Host (lb).
func ValidAuthority[T string | []byte](a T) bool {
	host, port := a, a[:0]
	if len(a) > 0 && a[0] == '[' {
		end := -1
		for i := 1; i < len(a); i++ {
			if a[i] == ']' {
				end = i
				break
			}
		}
		if end < 0 {
			return false
		}
		ip, err := netip.ParseAddr(string(a[1:end])) // rare: an IPv6 literal
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return false // IPvFuture and zone identifiers are not offered
		}
		host, port = a[:0], a[end+1:]
		if len(port) > 0 {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else {
		for i := 0; i < len(a); i++ {
			if a[i] == ':' {
				host, port = a[:i], a[i+1:]
				break
			}
		}
		if len(host) == 0 || !validRegName(host) {
			return false
		}
		if len(host) == len(a) {
			return true
		}
	}
	if len(port) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
		n = n*10 + int(port[i]-'0')
	}
	return n <= 65535
}

// validRegName reports whether h is a reg-name without percent-encodings: unreserved and sub-delims.
func validRegName[T string | []byte](h T) bool {
	for i := 0; i < len(h); i++ {
		if !regNameByte[h[i]] {
			return false
		}
	}
	return true
}

// regNameByte marks the unreserved and sub-delims characters of RFC 3986.
var regNameByte = alnumAnd("-._~!$&'()*+,;=")

// AuthorityHost returns the host of authority a (host [":" port], as ValidAuthority accepts it) without
// its port: an IPv6 literal keeps its brackets, and one trailing dot of a DNS name is dropped
// ("example.com." is example.com). It returns a sub-slice of a and allocates nothing; the case is left
// as sent (host names compare without case). On an authority ValidAuthority refuses it still returns
// the part before the first ':' (outside brackets), which no valid host pattern matches.
func AuthorityHost(a []byte) []byte {
	host := a
	if len(a) > 0 && a[0] == '[' {
		for i := 1; i < len(a); i++ {
			if a[i] == ']' {
				return a[:i+1]
			}
		}
		return a
	}
	for i := 0; i < len(a); i++ {
		if a[i] == ':' {
			host = a[:i]
			break
		}
	}
	if n := len(host); n > 1 && host[n-1] == '.' {
		host = host[:n-1]
	}
	return host
}
