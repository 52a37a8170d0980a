package lb

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/fairlead/fairlead/lb/config"
)

// The config refuses an injected credential in a field the head builder sets or removes
// (config.ReservedUpstreamHeaders); the two lists must agree.
func TestConfigReservedUpstreamHeadersAreTheFieldsTheHeadBuilderSetsOrRemoves(t *testing.T) {
	reserved := func(name string) bool {
		switch classifyField([]byte(name)) {
		case fieldPass, fieldForwarded:
			return false
		}
		return true
	}
	for _, h := range config.ReservedUpstreamHeaders {
		if !reserved(h) {
			t.Errorf("%s is reserved by the config but passed by the head builder", h)
		}
	}
	for _, h := range []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "TE",
		"Trailer", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Expect",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", "X-Forwarded-Port",
		"Authorization", "Cookie", "appKey", "X-Api-Key"} {
		if reserved(h) != slices.ContainsFunc(config.ReservedUpstreamHeaders, func(r string) bool { return strings.EqualFold(r, h) }) {
			t.Errorf("%s: the head builder reserves it: %v; the config: %v", h, reserved(h), !reserved(h))
		}
	}
}

func TestEveryBalanceTheConfigAcceptsHasAPolicy(t *testing.T) {
	if got := slices.Sorted(maps.Keys(balances)); !slices.Equal(got, config.Balances) {
		t.Fatalf("lb's policies %v, the config's balances %v", got, config.Balances)
	}
}
