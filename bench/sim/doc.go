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
// the optional HTTP control API (see Options.ControlAddr):
//
//	GET  /status                                  Status as JSON
//	POST /platform/<name>/<state>                 Platform.SetState
//	POST /platform/<name>/leadercheck/<code>      Platform.SetLeaderCheckStatus (0 clears)
//	POST /connection/<name>/<up|down|kill|restart>
//
// GET is accepted wherever POST is. A change answers 200 with the server's
// new status (PlatformStatus or ConnStatus) as one line of JSON, 404 for an
// unknown server and 400 for a bad state, code or action.
//
// The platform servers are built on fasthttp with streamed request bodies, so
// they sustain high request rates and arbitrarily large uploads and
// downloads without holding bodies in memory.
package sim
