// Package sim is a simulated ThingWorx High-Availability cluster for tests,
// local runs and benchmarks of fairlead.
//
// A Cluster is a set of fake platform servers (the ThingWorx Foundation
// nodes; exactly one of them is normally the HA leader and answers the
// LeaderCheck probe with 200) and fake connection servers (WebSocket echo
// servers with a /health endpoint, standing in for ThingWorx connection
// servers). Every server listens on a real TCP socket, so a load balancer in
// front of them sees the same failure modes it would see in production:
// refused dials, hung sockets, 503 answers and closed tunnels.
//
// Tests drive the cluster through the Go API (Platform.SetState,
// ConnServer.Kill, ...); `make run` and the benchmark may drive it through
// the optional HTTP control API (see Options.ControlAddr).
//
// The platform servers are built on fasthttp with streamed request bodies, so
// they sustain high request rates and arbitrarily large uploads and
// downloads without holding bodies in memory.
package sim
