package testkit

import "github.com/fairlead/fairlead/bench/sim"

// StartCluster starts a simulated ThingWorx cluster in this process, closed at the end of the test.
func StartCluster(t T, opts sim.Options) *sim.Cluster {
	t.Helper()
	c, err := sim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// PlatformAddrs are the addresses of the cluster's platform servers, in order.
func PlatformAddrs(c *sim.Cluster) []string {
	var out []string
	for _, p := range c.Platforms {
		out = append(out, p.Addr)
	}
	return out
}

// ConnectionAddrs are the addresses of the cluster's connection servers, in order.
func ConnectionAddrs(c *sim.Cluster) []string {
	var out []string
	for _, s := range c.Connections {
		out = append(out, s.Addr)
	}
	return out
}
