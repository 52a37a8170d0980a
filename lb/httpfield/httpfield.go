// Package httpfield is the one list of the HTTP fields fairlead treats by their name: the hop-by-hop
// fields a proxy never forwards as they came (RFC 9110 section 7.6.1), the connection-specific fields an
// HTTP/2 message must not carry (RFC 9113 section 8.2.2), the fields that frame or route a request, and
// the X-Forwarded-* family. The head builder and the 101's relay (package lb), the HTTP/2 translation
// (lb/frontend) and the config's checks of injected fields (lb/config) all ask it, so a field added here
// is treated alike on every path. It is a leaf: it imports nothing of fairlead's.
package httpfield

// Field names a field fairlead treats by its name; Other is every other field.
type Field uint8

const (
	Other Field = iota

	// The hop-by-hop fields: they describe one connection, not the message, and are never forwarded
	// as they came.
	Connection         // and every field it names
	Upgrade            // forwarded only on a WebSocket upgrade (with "Connection: Upgrade")
	TE                 // HTTP/2 allows "TE: trailers" only
	Trailer            // the chunked body is re-chunked: the client's declaration is the client's
	KeepAlive          // "Keep-Alive"
	ProxyConnection    // "Proxy-Connection"
	ProxyAuthenticate  // "Proxy-Authenticate"
	ProxyAuthorization // "Proxy-Authorization": a credential for fairlead's hop, never the server's
	Expect             // fasthttp already answered "100 Continue": the body follows at once

	// The fields that frame or route a request.
	Host
	ContentLength
	TransferEncoding

	// The forwarding fields: set by fairlead, believed only from a trusted proxy.
	XForwardedFor
	XForwardedProto
	XForwardedHost
	Forwarded // Forwarded and every other X-Forwarded-* field
)

// Of returns the field named name, in any ASCII case. It allocates nothing.
func Of[T string | []byte](name T) Field {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return TE
		}
	case 4:
		if eqFold(name, "host") {
			return Host
		}
	case 6:
		if eqFold(name, "expect") {
			return Expect
		}
	case 7:
		if eqFold(name, "upgrade") {
			return Upgrade
		}
		if eqFold(name, "trailer") {
			return Trailer
		}
	case 9:
		if eqFold(name, "forwarded") {
			return Forwarded
		}
	case 10:
		if eqFold(name, "connection") {
			return Connection
		}
		if eqFold(name, "keep-alive") {
			return KeepAlive
		}
	case 14:
		if eqFold(name, "content-length") {
			return ContentLength
		}
	case 15:
		if eqFold(name, "x-forwarded-for") {
			return XForwardedFor
		}
	case 16:
		if eqFold(name, "proxy-connection") {
			return ProxyConnection
		}
		if eqFold(name, "x-forwarded-host") {
			return XForwardedHost
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return TransferEncoding
		}
		if eqFold(name, "x-forwarded-proto") {
			return XForwardedProto
		}
	case 18:
		if eqFold(name, "proxy-authenticate") {
			return ProxyAuthenticate
		}
	case 19:
		if eqFold(name, "proxy-authorization") {
			return ProxyAuthorization
		}
	}
	if len(name) >= len("x-forwarded-") && eqFold(name[:len("x-forwarded-")], "x-forwarded-") {
		return Forwarded
	}
	return Other
}

// HopByHop reports a field that describes one connection, not the message: never forwarded as it
// came (RFC 9110 section 7.6.1, and Expect, Proxy-Authenticate and Proxy-Authorization, which are
// the hop's too).
func (f Field) HopByHop() bool { return f >= Connection && f <= Expect }

// ConnectionSpecific reports a field an HTTP/2 message must not carry (RFC 9113 section 8.2.2): the
// stream is malformed with it (TE but "TE: trailers"), and an HTTP/1.1 answer's is not translated.
func (f Field) ConnectionSpecific() bool {
	switch f {
	case Connection, Upgrade, TE, KeepAlive, ProxyConnection, TransferEncoding:
		return true
	}
	return false
}

// Framing reports a field that frames or routes a request (Host, Content-Length, Transfer-Encoding,
// Connection, Upgrade): it cannot carry a client's key, nor be set by the config.
func (f Field) Framing() bool {
	switch f {
	case Host, ContentLength, TransferEncoding, Connection, Upgrade:
		return true
	}
	return false
}

// Reserved reports a field fairlead itself sets or removes on the way upstream (framing, hop-by-hop,
// X-Forwarded-For, -Proto and -Host), where an injected credential would be lost or break the request.
// Forwarded and the other X-Forwarded-* fields pass from a trusted proxy and are not reserved.
func (f Field) Reserved() bool { return f != Other && f != Forwarded }

// eqFold reports whether b equals lower, an ASCII lower-case string, in any case.
func eqFold[T string | []byte](b T, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(lower); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
