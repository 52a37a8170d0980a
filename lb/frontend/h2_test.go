package frontend

import (
	"net/http"
	"reflect"
	"testing"
)

// An answer's trailer fields go to x/net as trailers (http.TrailerPrefix) but for those an HTTP/2
// message may not carry: connection-specific ones and those RFC 9110 section 6.5.1 keeps out of
// trailers (framing, routing, authentication, ...).
func TestAddTrailersKeepsOnlyFieldsATrailerMayCarry(t *testing.T) {
	hdr := http.Header{}
	addTrailers(hdr, []byte("X-Checksum: abc\r\nconnection: close\r\nContent-Length: 5\r\nHost: evil\r\n"+
		"Authorization: Basic eA==\r\nx-parts: 1\r\nX-Parts: 2\r\nTransfer-Encoding: chunked\r\nnot a field\r\n"))
	want := http.Header{
		http.TrailerPrefix + "X-Checksum": {"abc"},
		http.TrailerPrefix + "X-Parts":    {"1", "2"},
	}
	if !reflect.DeepEqual(hdr, want) {
		t.Errorf("got %v, want %v", hdr, want)
	}
}
