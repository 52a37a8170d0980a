#!/usr/bin/env bash
# `make run`: a simulated ThingWorx cluster (2 platform servers, 2 connection servers, 2
# configuration servers behind a relay route) and 2 simulated IBM Cloud App Configuration instances
# with their IAM (behind an App Configuration relay route) with fairlead in front of them, using the
# shipped conf.d/. Ctrl-C stops everything this script started.
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
	-config-port 9281 -appconfigs 2 -appconfig-port 9291 -iam-port 9290 -control 127.0.0.1:9000 &
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

IBM Cloud App Configuration (conf.d/45-appconfig.toml): the SDKs, pointed at fairlead, hold the demo
key "demo-sdk-key"; fairlead holds the API key and follows instance appconfig1 (127.0.0.1:9291, guid
demo-us-south), its backup appconfig2 (:9292, guid demo-eu-gb) and IAM (:9290). A client SDK's SSE
stream (raw key), a server SDK's REST fetch (Bearer key), a change published, a fail-over and back:
  curl -sN -H 'Authorization: demo-sdk-key' 'http://127.0.0.1:8080/apprapp/feature/v1/instances/demo-us-south/environments/dev/sse/subscribe?collection_id=inventory'
  curl -s -H 'Authorization: Bearer demo-sdk-key' 'http://127.0.0.1:8080/apprapp/feature/v1/instances/demo-us-south/config?action=sdkConfig&collection_id=inventory&environment_id=dev'
  curl -s -XPOST http://127.0.0.1:9000/appconfig/publish/inventory/dev      # every instance: version +1
  curl -s -XPOST http://127.0.0.1:9000/appconfig/appconfig1/down   # the session moves to appconfig2 at once
  curl -s -XPOST http://127.0.0.1:9000/appconfig/appconfig1/up     # ...and back within failback_interval
  curl -s http://127.0.0.1:9000/status | grep -o '"appconfigs".*'  # per topic: fetches, sessions; IAM tokens
TXT
if command -v node >/dev/null && [ -d bench/appconfig/node_modules ]; then cat <<'TXT'
The official JS client SDK, unmodified, through fairlead (one JSON line per configuration it gets):
  node bench/appconfig/appconfig-client.js --url http://127.0.0.1:8080 --guid demo-us-south --apikey demo-sdk-key --collection inventory --environment dev --property version
TXT
else cat <<'TXT'
(With Node and `npm ci --prefix bench/appconfig --no-audit --no-fund`, this prints how to run the official
JS client SDK through fairlead.)
TXT
fi
cat <<'TXT'

Drain a connection server (no new devices, its tunnels stay), put it in maintenance, bring it back:
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/drain
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/maint
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/ready

Edit any conf.d/*.toml: fairlead reloads it by itself (a bad edit is refused and logged).

Ctrl-C stops everything.
TXT
wait
