// Package ha tests fairlead in its own high-availability pair (issue #12): two fairlead processes with
// the same configuration, each in a network namespace of its own, and keepalived (VRRP) moving one
// virtual address between them, as conf.d/keepalived.conf.example ships it.
//
// TestKeepalivedMovesTheVirtualAddressWhenTheActiveFairleadDies (keepalived_test.go) builds the
// network itself, as root: namespaces for a switch (a bridge), two load balancers, the simulated
// ThingWorx cluster (cmd/fairlead-sim) and a client, joined by veth links on 10.213.0.0/24; nothing
// of the root namespace is touched. A client (./client, the Load of this package) sends steady GETs
// to the virtual address and holds WebSocket tunnels, one per asset; the test kills the active
// fairlead with SIGKILL, waits for keepalived to move the address, and reports the requests failed,
// the longest gap without an answer, the tunnels closed and reopened, and whether every asset landed
// on the same connection server again. It skips when not root or when ip or keepalived is missing.
//
// Load (load.go, a testkit.Load) is the client's code: a steady stream of GETs and a set of tunnels, with marks set
// by the test ("kill", "switch") so that the report splits the figures by phase.
package ha
