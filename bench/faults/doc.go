// Package faults is fairlead's fault suite: each scenario (a test of this package) starts a real
// fairlead process built from ./cmd/fairlead in front of the simulated ThingWorx cluster (bench/sim,
// in process, or as cmd/fairlead-sim processes where a platform server must die with SIGKILL), drives
// steady load through it from a real HTTP client on 127.0.0.1, injects one fault, and fails when
// fairlead breaks its promise:
//
//   - no idempotent request (GET) fails while a leader exists or appears within queue_timeout;
//   - a non-idempotent request (POST) is retried only when none of its bytes reached a server: every
//     POST carries a unique X-Request-Id, the platforms record each id that reaches them
//     (sim.Options.DeliveryHeader), and no id may arrive twice. A POST that failed after reaching a
//     server that died or hung is expected to fail (fairlead cannot know whether it took effect) and
//     is counted apart ("post_lost"), never as a broken promise.
//
// Every scenario prints one line
//
//	scenario: sent=N ok=N failed=N longest_gap=D ...
//
// (failed counts broken promises; the scenario's own figures follow) and cleans up every process it
// started. `go test ./bench/faults/` runs the short form (a few seconds each; `make test` runs it);
// `make faults` runs the long form (`-faults.long`: longer load phases, 1,000 tunnels) with -v, which
// shows the lines. See bench/README.md, "Fault suite".
package faults
