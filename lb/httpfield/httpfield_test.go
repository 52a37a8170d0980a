package httpfield

import (
	"strings"
	"testing"
)

// Every field fairlead treats by name, with what it is: the one list, as the RFCs and fairlead's own
// rules have it (README: The strict front end; lb/headers.go).
func TestTheFieldsAndWhatTheyAre(t *testing.T) {
	for _, tc := range []struct {
		name                                      string
		want                                      Field
		hopByHop, connSpecific, framing, reserved bool
	}{
		{"Connection", Connection, true, true, true, true},
		{"Upgrade", Upgrade, true, true, true, true},
		{"TE", TE, true, true, false, true},
		{"Trailer", Trailer, true, false, false, true},
		{"Keep-Alive", KeepAlive, true, true, false, true},
		{"Proxy-Connection", ProxyConnection, true, true, false, true},
		{"Proxy-Authenticate", ProxyAuthenticate, true, false, false, true},
		{"Proxy-Authorization", ProxyAuthorization, true, false, false, true},
		{"Expect", Expect, true, false, false, true},
		{"Host", Host, false, false, true, true},
		{"Content-Length", ContentLength, false, false, true, true},
		{"Transfer-Encoding", TransferEncoding, false, true, true, true},
		{"X-Forwarded-For", XForwardedFor, false, false, false, true},
		{"X-Forwarded-Proto", XForwardedProto, false, false, false, true},
		{"X-Forwarded-Host", XForwardedHost, false, false, false, true},
		{"Forwarded", Forwarded, false, false, false, false},
		{"X-Forwarded-Port", Forwarded, false, false, false, false},
		{"X-Forwarded-", Forwarded, false, false, false, false},
		{"Authorization", Other, false, false, false, false},
		{"Cookie", Other, false, false, false, false},
		{"appKey", Other, false, false, false, false},
		{"X-Forwarded", Other, false, false, false, false},
		{"Hostx", Other, false, false, false, false},
		{"", Other, false, false, false, false},
	} {
		for _, name := range []string{tc.name, strings.ToLower(tc.name), strings.ToUpper(tc.name)} {
			f := Of(name)
			if f != tc.want || Of([]byte(name)) != f {
				t.Errorf("Of(%q) = %d (bytes: %d), want %d", name, f, Of([]byte(name)), tc.want)
			}
			if f.HopByHop() != tc.hopByHop || f.ConnectionSpecific() != tc.connSpecific || f.Framing() != tc.framing || f.Reserved() != tc.reserved {
				t.Errorf("%s: hop-by-hop %v, connection-specific %v, framing %v, reserved %v; want %v %v %v %v", name,
					f.HopByHop(), f.ConnectionSpecific(), f.Framing(), f.Reserved(), tc.hopByHop, tc.connSpecific, tc.framing, tc.reserved)
			}
		}
	}
}

func TestOfDoesNotAllocate(t *testing.T) {
	name := []byte("Proxy-Authorization")
	if n := testing.AllocsPerRun(100, func() { _ = Of(name); _ = Of("x-forwarded-port") }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
