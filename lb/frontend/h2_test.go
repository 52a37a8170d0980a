package frontend

import (
	"slices"
	"testing"
)

// An answer's trailer fields go to the client as trailers but for those an HTTP/2 message may not
// carry: connection-specific ones and those RFC 9110 section 6.5.1 keeps out of trailers (framing,
// routing, authentication, ...).
func TestEachTrailerKeepsOnlyFieldsATrailerMayCarry(t *testing.T) {
	var got []string
	eachTrailer([]byte("X-Checksum: abc\r\nconnection: close\r\nContent-Length: 5\r\nHost: evil\r\n"+
		"Authorization: Basic eA==\r\nx-parts: 1\r\nX-Parts: 2\r\nTransfer-Encoding: chunked\r\nnot a field\r\n"),
		func(name, value []byte) { got = append(got, string(name)+"="+string(value)) })
	if want := []string{"X-Checksum=abc", "x-parts=1", "X-Parts=2"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The HTTP/1.1 field lines written for an HTTP/2 request's fields give each name its usual case.
func TestAppendFieldWritesTheNameInItsUsualCase(t *testing.T) {
	got := string(appendField(nil, "x-forwarded-for", "1.2.3.4"))
	got += string(appendField(nil, "content-type", []byte("text/plain")))
	if want := "X-Forwarded-For: 1.2.3.4\r\nContent-Type: text/plain\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
