#!/usr/bin/env bash
# Installs the peers fairlead is benchmarked against (HAProxy, nginx, Caddy), nginx's nchan module (the
# fan-out scenario's pub/sub peer), the wrk and h2load (https-small-h2) load generators and taskset (util-linux) when any of them is
# missing: one `apt-get update`, one `apt-get install`. Debian or Ubuntu, as root (or with sudo). Nothing
# is downloaded when everything is already there.
set -euo pipefail

need=()
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
[ -e /usr/lib/nginx/modules/ngx_nchan_module.so ] || [ -e /usr/share/nginx/modules/ngx_nchan_module.so ] || need+=(libnginx-mod-nchan)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
command -v ss >/dev/null 2>&1 || need+=(iproute2)

if [ ${#need[@]} -eq 0 ]; then
	echo "install-peers: haproxy, nginx (with nchan), caddy, wrk, h2load, taskset and ss are installed"
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		sudo=(sudo)
	else
		echo "install-peers: missing ${need[*]} and not root: install them, or the bench skips those peers" >&2
		exit 0
	fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-peers: no apt-get; install ${need[*]} by hand (the bench skips missing peers)" >&2
	exit 0
fi

echo "install-peers: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# The packages' own services are not wanted (they would hold ports 80/443 and run in the background):
# the bench starts each proxy itself with a generated configuration. A policy-rc.d that forbids starting
# services is in place during the install unless the system already has one.
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
	"${sudo[@]}" chmod +x "$policy"
	own_policy=1
fi
cleanup() { if [ -n "$own_policy" ]; then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "${need[@]}"; }; then
	echo "install-peers: apt-get failed; the bench skips the peers that are missing" >&2
	exit 0
fi
for svc in haproxy nginx caddy; do
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
		"${sudo[@]}" systemctl stop "$svc" || true
	fi
done
echo "install-peers: done"
