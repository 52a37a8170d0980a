#!/usr/bin/env bash
# `make run`: a simulated ThingWorx cluster (2 platform servers, 2 connection servers, 2
# configuration servers behind a relay route) and 2 simulated IBM Cloud App Configuration instances
# with their IAM (behind an App Configuration relay route) with fairlead in front of them, using the
# demo config bench/demo.d/ (conf.d/ is the production starting point `make install` installs). Ctrl-C stops everything this script started.
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

./bin/fairlead -config bench/demo.d &
pids+=($!)
for _ in $(seq 100); do curl -fs http://127.0.0.1:8404/healthz >/dev/null 2>&1 && break; sleep 0.1; done

# One request, one line: status code, the node that answered (X-Served-By; blank when fairlead answered
# itself) and the time taken. curl has %header{} since 7.84; an older one gets the header through grep.
url=http://127.0.0.1:8080/Thingworx/Things
one="curl -s -o /dev/null -w '%{http_code} %header{x-served-by} %{time_total}s\\n' $url"
if [ "$(printf '%s\n' 7.84.0 "$(curl --version | awk 'NR==1{print $2}')" | sort -V | head -1)" != 7.84.0 ]; then
	one="curl -s -o /dev/null -D - -w '%{http_code} %{time_total}s\\n' $url | grep -i -e '^x-served-by' -e '^[0-9]' | tr -d '\\r' | paste -sd' '"
fi

cat <<TXT

Status page (live; open it in a browser first):  http://127.0.0.1:8404/

fairlead listens on http://127.0.0.1:8080 (admin http://127.0.0.1:8404), in front of a simulated
ThingWorx cluster: platform1 127.0.0.1:9081 (leader), platform2 127.0.0.1:9082 (backup),
connection servers cx1 127.0.0.1:9181 and cx2 127.0.0.1:9182, simulator control on 127.0.0.1:9000.
Every simulator control call below answers the server's new state as JSON.

Which node answered (status code, X-Served-By, time):
  $one

Watch traffic move, in another terminal (one request a second, one line each; a 503 is fairlead's
own answer when no leader appears within queue_timeout = 5s):
  while sleep 1; do date +%T | tr '\\n' ' '; $one; done

Failures, each followed by its undo. Run each group top to bottom: each starts and ends with platform1
leading and platform2 its backup. The simulator holds no election, so each failure also makes platform2
leader, as ThingWorx would.

1. The leader steps down, platform2 takes over: fairlead switches after 3 non-200 LeaderChecks, probing
   every fast_interval = 250ms from the first LeaderCheck that sees the change (at the steady pace, within
   interval_max = 20s); requests keep flowing meanwhile, none fails:
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/backup
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/leader
   undo (platform1 leads again):
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/backup
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/leader

2. The leader dies (connections refused), platform2 takes over:
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/dead
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/leader
   undo (platform1 revived, leading again):
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/backup
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/leader

3. The leader hangs (accepts, never answers), platform2 takes over; a request caught by the hang is
   retried on platform2 (watch its time):
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/hung
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/leader
   undo (platform1 answers and leads again):
  curl -s -XPOST http://127.0.0.1:9000/platform/platform2/backup
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/leader

4. No leader at all (both answer 503 to LeaderCheck): requests wait queue_timeout, then get 503:
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/backup
   undo:
  curl -s -XPOST http://127.0.0.1:9000/platform/platform1/leader

State, the live event stream (Ctrl-C ends it) and metrics:
  curl -s http://127.0.0.1:8404/api/status
  curl -sN http://127.0.0.1:8404/events
  curl -s http://127.0.0.1:8404/metrics | grep fairlead_
  curl -s http://127.0.0.1:9000/status

TXT
cat <<'TXT'
A relay route (bench/demo.d/40-relay.toml): one upstream WebSocket per topic, snapshots cached, changes
pushed to every subscriber. Subscribe (SSE; in another terminal, Ctrl-C ends it), fetch the cached
snapshot, publish a change, fail over (the relays' status says which server each follows) and back:
  curl -sN -H 'Accept: text/event-stream' http://127.0.0.1:8080/relay/inventory/dev
  curl -si http://127.0.0.1:8080/relay/inventory/dev
  curl -s -XPOST http://127.0.0.1:9000/config/publish/inventory/dev -d '{"feature":"on"}'
  curl -s -XPOST http://127.0.0.1:9000/config/config1/down    # sessions move to config2 at once
  curl -s http://127.0.0.1:8404/api/status | grep -E '"(protocol|upstream|serving_backup)"'
  curl -s -XPOST http://127.0.0.1:9000/config/config1/up      # undo: back to config1 within failback_interval

IBM Cloud App Configuration (bench/demo.d/45-appconfig.toml): the SDKs, pointed at fairlead, hold the demo
key "demo-sdk-key"; fairlead holds the API key and follows instance appconfig1 (127.0.0.1:9291, guid
demo-us-south), its backup appconfig2 (:9292, guid demo-eu-gb) and IAM (:9290). A client SDK's SSE
stream (raw key; in another terminal), a server SDK's REST fetch (Bearer key), a change published, a
fail-over and back:
  curl -sN -H 'Authorization: demo-sdk-key' 'http://127.0.0.1:8080/apprapp/feature/v1/instances/demo-us-south/environments/dev/sse/subscribe?collection_id=inventory'
  curl -si -H 'Authorization: Bearer demo-sdk-key' 'http://127.0.0.1:8080/apprapp/feature/v1/instances/demo-us-south/config?action=sdkConfig&collection_id=inventory&environment_id=dev'
  curl -s -XPOST http://127.0.0.1:9000/appconfig/publish/inventory/dev      # every instance: version +1
  curl -s -XPOST http://127.0.0.1:9000/appconfig/appconfig1/down   # the session moves to appconfig2 at once
  curl -s http://127.0.0.1:8404/api/status | grep -E '"(protocol|upstream|serving_backup)"'
  curl -s -XPOST http://127.0.0.1:9000/appconfig/appconfig1/up     # undo: back within failback_interval
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

Drain a connection server (no new devices, its tunnels stay), put it in maintenance, and the undo of
both, ready (each answers the server's new state):
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/drain
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/maint
  curl -s -XPOST http://127.0.0.1:8404/api/servers/cxserver/127.0.0.1:9181/ready

Edit any bench/demo.d/*.toml: fairlead reloads it by itself (a bad edit is refused and logged).

Ctrl-C stops everything.
TXT
wait
