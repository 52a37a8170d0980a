#!/usr/bin/env bash
# `make run`: a simulated ThingWorx cluster (2 platform servers, 2 connection servers, 2
# configuration servers behind a relay route) with fairlead in
# front of it, using the shipped conf.d/. Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

pids=()
cleanup() {
	trap - INT TERM EXIT
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	echo "stopped."
}
trap cleanup INT TERM EXIT

./bin/fairlead-sim -platforms 2 -connections 2 -configs 2 -platform-port 9081 -connection-port 9181 \
	-config-port 9281 -control 127.0.0.1:9000 &
pids+=($!)
# wait for the simulator's control API
for _ in $(seq 50); do curl -fs http://127.0.0.1:9000/status >/dev/null 2>&1 && break; sleep 0.1; done

./bin/fairlead -config conf.d &
pids+=($!)
for _ in $(seq 100); do curl -fs http://127.0.0.1:8404/healthz >/dev/null 2>&1 && break; sleep 0.1; done

cat <<'TXT'

Status page (live; open it in a browser first):  http://127.0.0.1:8404/

fairlead listens on http://127.0.0.1:8080 (admin http://127.0.0.1:8404), in front of a simulated
ThingWorx cluster: platform1 127.0.0.1:9081 (leader), platform2 127.0.0.1:9082 (backup),
connection servers cx1 127.0.0.1:9181 and cx2 127.0.0.1:9182, simulator control on 127.0.0.1:9000.

Which node answered (the X-Served-By header):
  curl -si http://127.0.0.1:8080/Thingworx/Things | grep -i x-served-by

Make the leader step down and platform2 take over (fairlead switches after 3 non-200 LeaderChecks,
probing every fast_interval = 250ms from the first LeaderCheck that sees the change, which comes at the
steady pace, within interval_max = 20s; requests keep flowing meanwhile, none fails):
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/backup
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/leader

Watch traffic move (one request a second):
  while sleep 1; do curl -s -o /dev/null -w '%{http_code} ' -D - http://127.0.0.1:8080/ | grep -i x-served-by; done

Kill the leader outright, or hang it:
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/dead
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/hung

State, the live event stream and metrics:
  curl -s http://127.0.0.1:8404/api/status
  curl -sN http://127.0.0.1:8404/events
  curl -s http://127.0.0.1:8404/metrics | grep fairlead_
  curl -s http://127.0.0.1:9000/status

A relay route (conf.d/40-relay.toml): one upstream WebSocket per topic, snapshots cached, changes
pushed to every subscriber. Subscribe (SSE), fetch the cached snapshot, publish a change, fail over:
  curl -sN -H 'Accept: text/event-stream' http://127.0.0.1:8080/relay/inventory/dev
  curl -si http://127.0.0.1:8080/relay/inventory/dev
  curl -s -XPOST http://127.0.0.1:9000/config/publish/inventory/dev -d '{"feature":"on"}'
  curl -s -XPOST http://127.0.0.1:9000/config/config1/down    # sessions move to config2 at once
  curl -s -XPOST http://127.0.0.1:9000/config/config1/up      # ...and back within failback_interval
  curl -s http://127.0.0.1:8404/api/status | grep -A3 '"relays"'

Drain a connection server (no new devices, its tunnels stay), put it in maintenance, bring it back:
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/drain
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/maint
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/ready

Edit any conf.d/*.toml: fairlead reloads it by itself (a bad edit is refused and logged).

Ctrl-C stops everything.
TXT
wait
