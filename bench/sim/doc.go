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
//	POST /platform/<name>/delay/<duration>        Platform.SetDelay (0 clears)
//	POST /platform/<name>/flap/<on|off>           Platform.SetLeaderCheckFlap
//	POST /connection/<name>/<up|down|kill|restart>
//	GET  /deliveries                              Cluster.Deliveries as JSON
//	POST /config/publish/<collection>/<environment>
//	                                              Cluster.PublishConfig (body: the JSON document, optional)
//	POST /config/<name>/<up|down>                 ConfigServer.Start / ConfigServer.Stop
//	POST /config/reset                            ConfigServer.ResetCounters on every config server
//
// GET is accepted wherever POST is. A change answers 200 with the server's
// new status (PlatformStatus, ConnStatus or ConfigStats) as one line of JSON,
// 404 for an unknown server and 400 for a bad state, code, action, topic or
// document; a publish answers {"topic":"c/e","version":N}.
//
// Beyond the states, the fault suite (bench/faults) uses three knobs of a
// platform: Platform.SetDelay delays every answer, LeaderCheck included, by
// a fixed time (a slow leader); Platform.SetLeaderCheckFlap makes the
// LeaderCheck alternate 503 and 200 at every probe (a flapping leader); and
// Options.DeliveryHeader makes the platforms record each request's id as it
// reaches the handler (Platform.Deliveries, Cluster.Deliveries, and with
// Options.DeliveryLog a line per delivery in a file that survives a
// SIGKILL), so that a test can prove that no request was delivered twice.
// Options.PlatformNames, Options.PlatformStates and Options.NoConnections
// let one process run a single platform server under a chosen name and
// state (cmd/fairlead-sim -platforms 1 -connections 0 -platform-names
// platform2 -states backup), so that a test can kill it with SIGKILL.
//
// Options.ConfigServers adds simulated configuration services
// (ConfigServer, named config1, config2, ...), the upstream of a relay
// route: per topic ("collection/environment") a version and a JSON
// document, served as a snapshot on GET /config/<collection>/<environment>
// and pushed as a change message {"topic":"c/e","version":N} to every
// WebSocket session on /events/<collection>/<environment> at each publish
// (Cluster.PublishConfig publishes on every config server with the same
// version, as a replicated upstream would). Options.ConfigAPIKey makes them
// require "Authorization: Bearer <key>"; ConfigServer.Stop and Start kill
// and revive one as a process. A subscriber that stops reading is closed
// after a second without delaying the others.
//
// StartAppConfig and StartIAM run a simulated IBM Cloud App Configuration
// instance and IAM token service (AppConfig, IAM; issue #23), on their own,
// outside a Cluster: per topic ("collection/environment") an export
// document (AppConfig.Set, or AppConfig.Bump's generated one), served as the
// server SDKs fetch it (REST, two forms, with an IAM bearer token), pushed
// to their wsfeature WebSockets ("test message" heartbeats, one frame per
// change) and to the client SDKs' server-sent events (Registration, then
// SSEConfig_payload per change, with a client key), with the metering POSTs
// answered 202. Their counters (fetches, sessions and subscribers per topic,
// tokens issued, unauthorized requests, client keys where only tokens
// belong) let a test prove what a relay in front of them sent upstream.
//
// Options.TLS serves every platform server, connection server (its main
// port and its separate health port, if any) and config server over TLS
// with the given config, so that fairlead's upstream TLS ([pools.NAME.tls])
// can be tested against the same fake nodes: certificates come from NewCA
// and CA.Issue, made at run time (no key is committed), and
// tls.Config.ClientAuth with ClientCAs makes the servers require fairlead's
// client certificate. Everything else behaves as over plain HTTP; the
// control API stays plain HTTP.
//
// The platform servers are built on fasthttp with streamed request bodies, so
// they sustain high request rates and arbitrarily large uploads and
// downloads without holding bodies in memory.
package sim
