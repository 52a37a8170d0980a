package lb

import (
	"maps"
	"slices"
	"testing"

	"github.com/fairlead/fairlead/lb/config"
)

func TestEveryBalanceTheConfigAcceptsHasAPolicy(t *testing.T) {
	if got := slices.Sorted(maps.Keys(balances)); !slices.Equal(got, config.Balances) {
		t.Fatalf("lb's policies %v, the config's balances %v", got, config.Balances)
	}
}
