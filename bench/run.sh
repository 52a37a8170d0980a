#!/usr/bin/env bash
# `make run`: a simulated ThingWorx cluster (2 platform servers, 2 connection servers, 2
# configuration servers behind a relay route) and 2 simulated IBM Cloud App Configuration instances
# with their IAM (behind an App Configuration relay route) with fairlead in front of them, using the
# demo config bench/demo.d/ (conf.d/ is the production starting point `make install` installs), copied
# into a temporary directory with the ports of the FAIRLEAD_DEMO_* variables below and an HTTPS listener
# whose certificate `fairlead-sim cert` makes at start. If the simulator or fairlead cannot start (a port
# taken), it says so and exits 1, stopping what it started. Ctrl-C (or SIGTERM) stops everything this
# script started.
set -euo pipefail
cd "$(dirname "$0")/.."

# The ports, each overridable (README: Quick start); platforms, connection, config and App Configuration
# servers take two consecutive ports from theirs.
http=${FAIRLEAD_DEMO_HTTP:-8080}           # fairlead's front end, plain HTTP and ws://
https=${FAIRLEAD_DEMO_HTTPS:-8443}         # fairlead's front end, HTTPS (HTTP/2) and wss://
admin=${FAIRLEAD_DEMO_ADMIN:-8404}         # fairlead's admin listener: the status page, /api, /metrics
control=${FAIRLEAD_DEMO_CONTROL:-9000}     # the simulator's control API
platform=${FAIRLEAD_DEMO_PLATFORM:-9081}   # platform1, platform2
connection=${FAIRLEAD_DEMO_CONNECTION:-9181} # cx1, cx2
config=${FAIRLEAD_DEMO_CONFIG:-9281}       # config1, config2 (the relay route's)
appconfig=${FAIRLEAD_DEMO_APPCONFIG:-9291} # appconfig1, appconfig2 (App Configuration instances)
iam=${FAIRLEAD_DEMO_IAM:-9290}             # their IAM token service
bin=${FAIRLEAD_DEMO_BIN:-./bin}            # where fairlead and fairlead-sim are (tests run other builds)
for v in http https admin control platform connection config appconfig iam; do
	if ! [[ ${!v} =~ ^[1-9][0-9]{0,4}$ ]] || [ "${!v}" -gt 65534 ]; then
		echo "make run: FAIRLEAD_DEMO_${v^^}=${!v} is not a port (1-65534)" >&2
		exit 2
	fi
done

pids=()
dir=
cleanup() {
	trap - INT TERM EXIT
	# fairlead first, so that it does not log the simulated servers going away.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	[ -z "$dir" ] || rm -rf "$dir"
	echo "stopped."
}
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM # Ctrl-C is how the demo ends: not a failure

# fail NAME PID: NAME exited (or never came up): stop the rest, then say so (under its error), exit 1.
fail() {
	local code=0 msg
	if kill -0 "$2" 2>/dev/null; then
		msg="make run: $1 did not start within 30 s"
	else
		wait "$2" || code=$?
		msg="make run: $1 could not start (exit $code; its error is above). A port taken? This run's ports:"
		for v in http https admin control platform connection config appconfig iam; do
			msg+=" FAIRLEAD_DEMO_${v^^}=${!v}"
		done
		msg+=$'\n'"Set others in the environment, e.g. FAIRLEAD_DEMO_HTTP=$((http == 18080 ? 28080 : 18080)) make run (README: Quick start)."
	fi
	cleanup
	echo "$msg" >&2
	exit 1
}

# started NAME PID FILE WORDS: waits until FILE (the process's output) has a line with WORDS, which it
# writes once all its listeners are bound; fails if the process exits first or after 30 s.
started() {
	for _ in $(seq 300); do
		grep -q "$4" "$3" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || fail "$1" "$2"
		sleep 0.1
	done
	fail "$1" "$2"
}

# The demo's config: bench/demo.d with this run's ports, and an HTTPS listener with a new certificate.
dir=$(mktemp -d "${TMPDIR:-/tmp}/fairlead-demo.XXXXXX")
from=() to=()
for pair in 8080:$http 8443:$https 8404:$admin 9081:$platform 9082:$((platform + 1)) 9181:$connection \
	9182:$((connection + 1)) 9281:$config 9282:$((config + 1)) 9291:$appconfig 9292:$((appconfig + 1)) 9290:$iam; do
	# Two passes, through a placeholder, so that a new port that is also an old one is not replaced again.
	from+=(-e "s/127\.0\.0\.1:${pair%%:*}\b/127.0.0.1:@${pair%%:*}@/g")
	to+=(-e "s/@${pair%%:*}@/${pair#*:}/g")
done
for f in bench/demo.d/*.toml; do sed "${from[@]}" "${to[@]}" "$f" >"$dir/$(basename "$f")"; done
"$bin/fairlead-sim" cert -dir "$dir" >/dev/null
cat >"$dir/01-tls.toml" <<TOML
# Written by bench/run.sh: the demo's HTTPS listener, with the certificate it made at start for
# 127.0.0.1 and localhost (demo-ca.crt is its CA: curl --cacert).
[frontend]
tls_listen = "127.0.0.1:$https"
tls_cert = "$dir/demo.crt"
tls_key = "$dir/demo.key"
TOML

"$bin/fairlead-sim" -platforms 2 -connections 2 -configs 2 -platform-port "$platform" -connection-port "$connection" \
	-config-port "$config" -appconfigs 2 -appconfig-port "$appconfig" -iam-port "$iam" -control "127.0.0.1:$control" \
	> >(tee "$dir/sim.out") &
pids+=($!)
started "the simulator (fairlead-sim)" "${pids[-1]}" "$dir/sim.out" '^control '

"$bin/fairlead" -config "$dir" 2> >(tee "$dir/fairlead.log" >&2) &
pids+=($!)
started fairlead "${pids[-1]}" "$dir/fairlead.log" ' listening on '

# One request, one line: status code, the node that answered (X-Served-By; blank when fairlead answered
# itself) and the time taken. curl has %header{} since 7.84; an older one gets the header through grep.
url=http://127.0.0.1:$http/Thingworx/Things
one="curl -s -o /dev/null -w '%{http_code} %header{x-served-by} %{time_total}s\\n' $url"
if [ "$(printf '%s\n' 7.84.0 "$(curl --version | awk 'NR==1{print $2}')" | sort -V | head -1)" != 7.84.0 ]; then
	one="curl -s -o /dev/null -D - -w '%{http_code} %{time_total}s\\n' $url | grep -i -e '^x-served-by' -e '^[0-9]' | tr -d '\\r' | paste -sd' '"
fi
ctl=http://127.0.0.1:$control
adm=http://127.0.0.1:$admin
fe=http://127.0.0.1:$http

cat <<TXT

Status page (live; open it in a browser first):  $adm/

fairlead listens on $fe and https://127.0.0.1:$https (admin $adm), in front of a
simulated ThingWorx cluster: platform1 127.0.0.1:$platform (leader), platform2 127.0.0.1:$((platform + 1)) (standby),
connection servers cx1 127.0.0.1:$connection and cx2 127.0.0.1:$((connection + 1)), simulator control on 127.0.0.1:$control.
(Other ports: FAIRLEAD_DEMO_HTTP=... make run, and the other FAIRLEAD_DEMO_* variables of README.)
Every simulator control call below answers the server's new state as JSON.

Which node answered (status code, X-Served-By, time), over HTTP and over HTTPS with HTTP/2 (the
certificate was made at start for 127.0.0.1: -k, or --cacert $dir/demo-ca.crt):
  $one
  curl -s --http2 -k -o /dev/null -w '%{http_version} %{http_code}\\n' https://127.0.0.1:$https/Thingworx/Things

Watch traffic move, in another terminal (one request a second, one line each; a 503 is fairlead's
own answer when no leader appears within queue_timeout = 5s):
  while sleep 1; do date +%T | tr '\\n' ' '; $one; done

Edge devices (the headline: WebSocket tunnels, each asset sticking to one connection server). In another
terminal, six devices, each with its own X-Asset-Id; each says where it landed, when its tunnel closes
and where it lands again (Ctrl-C ends them; wss:// through the HTTPS listener works the same):
  $bin/fairlead-sim devices -n 6 -url ws://127.0.0.1:$http/Thingworx/WS
  $bin/fairlead-sim devices -n 6 -url wss://127.0.0.1:$https/Thingworx/WS -insecure -prefix tls-device-
A connection server fails its health checks: fairlead takes it down (2 failed checks) and closes its
tunnels; its devices reconnect and land on the other. When it is back, the moved devices stay where they
are (their tunnels are open; new assets are placed on both again):
  curl -s -XPOST $ctl/connection/cx1/down
   undo:
  curl -s -XPOST $ctl/connection/cx1/up
A connection server dies (its tunnels cut at once, new connections refused): the devices reconnect at
once, and fairlead, whose dial to it is refused, sends them to the other; restart it to undo:
  curl -s -XPOST $ctl/connection/cx2/kill
  curl -s -XPOST $ctl/connection/cx2/restart
Drain a connection server (no new devices, its tunnels stay), put it in maintenance (its tunnels are
closed: the devices move), and the undo of both (each answers the server's new state):
  curl -s -XPOST $adm/api/servers/cxserver/cx1/drain
  curl -s -XPOST $adm/api/servers/cxserver/cx1/maint
  curl -s -XPOST $adm/api/servers/cxserver/cx1/ready

Failures of the platform, each followed by its undo. Run each group top to bottom: each starts and ends
with platform1 leading and platform2 its standby. The simulator holds no election, so each failure also
makes platform2 leader, as ThingWorx would.

1. The leader steps down, platform2 takes over: fairlead switches after 3 non-200 LeaderChecks, probing
   every fast_interval = 250ms from the first LeaderCheck that sees the change (at the steady pace, within
   interval_max = 20s); requests keep flowing meanwhile, none fails:
  curl -s -XPOST $ctl/platform/platform1/backup
  curl -s -XPOST $ctl/platform/platform2/leader
   undo (platform1 leads again):
  curl -s -XPOST $ctl/platform/platform2/backup
  curl -s -XPOST $ctl/platform/platform1/leader

2. The leader dies (connections refused), platform2 takes over:
  curl -s -XPOST $ctl/platform/platform1/dead
  curl -s -XPOST $ctl/platform/platform2/leader
   undo (platform1 revived, leading again):
  curl -s -XPOST $ctl/platform/platform2/backup
  curl -s -XPOST $ctl/platform/platform1/leader

3. The leader hangs (accepts, never answers), platform2 takes over; a request caught by the hang is
   retried on platform2 (watch its time):
  curl -s -XPOST $ctl/platform/platform1/hung
  curl -s -XPOST $ctl/platform/platform2/leader
   undo (platform1 answers and leads again):
  curl -s -XPOST $ctl/platform/platform2/backup
  curl -s -XPOST $ctl/platform/platform1/leader

4. No leader at all (both answer 503 to LeaderCheck): requests wait queue_timeout, then get 503:
  curl -s -XPOST $ctl/platform/platform1/backup
   undo:
  curl -s -XPOST $ctl/platform/platform1/leader

State, the live event stream (Ctrl-C ends it) and metrics:
  curl -s $adm/api/status
  curl -sN $adm/events
  curl -s $adm/metrics | grep fairlead_
  curl -s $ctl/status

A relay route (40-relay.toml): one upstream WebSocket per topic, snapshots cached, changes pushed to
every subscriber. Subscribe (SSE; in another terminal, Ctrl-C ends it), fetch the cached snapshot,
publish a change, fail over (the relays' status says which server each follows) and back:
  curl -sN -H 'Accept: text/event-stream' $fe/relay/inventory/dev
  curl -si $fe/relay/inventory/dev
  curl -s -XPOST $ctl/config/publish/inventory/dev -d '{"feature":"on"}'
  curl -s -XPOST $ctl/config/config1/down    # sessions move to config2 at once
  curl -s $adm/api/status | grep -E '"(protocol|upstream|serving_backup)"'
  curl -s -XPOST $ctl/config/config1/up      # undo: back to config1 within failback_interval

IBM Cloud App Configuration (45-appconfig.toml): the SDKs, pointed at fairlead, hold the demo key
"demo-sdk-key"; fairlead holds the API key and follows instance appconfig1 (127.0.0.1:$appconfig, guid
demo-us-south), its backup appconfig2 (:$((appconfig + 1)), guid demo-eu-gb) and IAM (:$iam). A client SDK's SSE
stream (raw key; in another terminal), a server SDK's REST fetch (Bearer key), a change published, a
fail-over and back:
  curl -sN -H 'Authorization: demo-sdk-key' '$fe/apprapp/feature/v1/instances/demo-us-south/environments/dev/sse/subscribe?collection_id=inventory'
  curl -si -H 'Authorization: Bearer demo-sdk-key' '$fe/apprapp/feature/v1/instances/demo-us-south/config?action=sdkConfig&collection_id=inventory&environment_id=dev'
  curl -s -XPOST $ctl/appconfig/publish/inventory/dev      # every instance: version +1
  curl -s -XPOST $ctl/appconfig/appconfig1/down   # the session moves to appconfig2 at once
  curl -s $adm/api/status | grep -E '"(protocol|upstream|serving_backup)"'
  curl -s -XPOST $ctl/appconfig/appconfig1/up     # undo: back within failback_interval
  curl -s $ctl/status | grep -o '"appconfigs".*'  # per topic: fetches, sessions; IAM tokens
TXT
if command -v node >/dev/null && [ -d bench/appconfig/node_modules ]; then cat <<TXT
The official JS client SDK, unmodified, through fairlead (one JSON line per configuration it gets):
  node bench/appconfig/appconfig-client.js --url $fe --guid demo-us-south --apikey demo-sdk-key --collection inventory --environment dev --property version
TXT
else cat <<'TXT'
(With Node and `npm ci --prefix bench/appconfig --no-audit --no-fund`, this prints how to run the official
JS client SDK through fairlead.)
TXT
fi
cat <<TXT

fairlead runs on $dir: bench/demo.d with this run's ports, and 01-tls.toml.
Edit a *.toml there and fairlead reloads it by itself (a bad edit is refused and logged); copy an edit
worth keeping back into bench/demo.d. The directory goes when the demo stops.

Ctrl-C stops everything.
TXT
wait
