package lb

import (
	"testing"

	"github.com/fairlead/fairlead/lb/discovery"
)

// Counts are written "1 server", never "1 servers": in log lines, events and the page.
func TestCountsAreWrittenInTheSingularForOne(t *testing.T) {
	for n, want := range map[int]string{0: "0 tunnels", 1: "1 tunnel", 2: "2 tunnels"} {
		if got := plural(n, "tunnel"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
	c := discovery.Change{Provider: "dns", List: []string{"10.0.0.1:8080"}, Added: []string{"10.0.0.1:8080"}}
	if got, want := c.String(), "dns: 1 server (added 10.0.0.1:8080; removed none)"; got != want {
		t.Errorf("discovery change %q, want %q", got, want)
	}
}
