package config

import "testing"

// The keys of roundrobin pools, backups and display names (their behaviour is lb's test).
func TestConfigErrorsOfTheBalancingKeysNameTheFileAndTheKey(t *testing.T) {
	f := func(name, extra string, want ...string) {
		t.Helper()
		loadFails(t, name, minimalConfig, extra, want...)
	}
	const rr = "[pools.platform]\nbalance = \"roundrobin\"\n"
	f("negative high_watermark", rr+"high_watermark = -1\n",
		"20-bad.toml: pools.platform.high_watermark: must not be negative")
	f("negative high_watermark_bytes", rr+"high_watermark_bytes = -1\n",
		"20-bad.toml: pools.platform.high_watermark_bytes: must not be negative")
	f("multipart_header on a leader pool", "[pools.platform]\nmultipart_header = \"X-Multipart-Id\"\n",
		"20-bad.toml: pools.platform.multipart_header: only for balance = \"roundrobin\"")
	f("high_watermark on a sticky pool", "[pools.platform]\nbalance = \"sticky\"\nhigh_watermark = 5\n",
		"20-bad.toml: pools.platform.high_watermark: only for balance = \"roundrobin\"")
	f("bad multipart_header", rr+"multipart_header = \"X Multipart\"\n",
		"20-bad.toml: pools.platform.multipart_header: bad header name")
	f("multipart_ttl without multipart_header", rr+"multipart_ttl = \"1m\"\n",
		"20-bad.toml: pools.platform.multipart_ttl: needs multipart_header")
	f("a backup that is also a primary", "[pools.platform]\nbackups = [\"127.0.0.1:9081\"]\n",
		"20-bad.toml: pools.platform.backups.0: backup \"127.0.0.1:9081\" is also a primary")
	f("failback_interval without backups", "[pools.platform]\nfailback_interval = \"5s\"\n",
		"20-bad.toml: pools.platform.failback_interval: needs backups")
	f("failback_close_tunnels on a leader pool", "[pools.platform]\nbackups = [\"127.0.0.1:9083\"]\nfailback_close_tunnels = true\n",
		"20-bad.toml: pools.platform.failback_close_tunnels: not for balance = \"leader\"")
	f("failback_close_spread without failback_close_tunnels", rr+"backups = [\"127.0.0.1:9083\"]\nfailback_close_spread = \"1s\"\n",
		"20-bad.toml: pools.platform.failback_close_spread: needs failback_close_tunnels")
	f("unavailable_status not an error", rr+"unavailable_status = 302\n",
		"20-bad.toml: pools.platform.unavailable_status: must be a 4xx or 5xx status")
	// A [pools.NAME.names] table once made Load panic.
	f("a name for an unknown address", "[pools.platform.names]\n\"127.0.0.1:9999\" = \"ghost\"\n",
		"20-bad.toml: pools.platform.names.\"127.0.0.1:9999\": \"127.0.0.1:9999\" is not a server or backup of the pool")
	f("several at once", rr+"high_watermark = -1\nfailback_interval = \"5s\"\n",
		"pools.platform.high_watermark: must not be negative", "pools.platform.failback_interval: needs backups")
}
