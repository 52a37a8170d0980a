package harness

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Plan sizes a bench run. FullPlan is `make bench`, QuickPlan `make bench-quick`, TinyPlan the harness's
// own test.
type Plan struct {
	Mode   string `json:"mode"`
	Rounds int    `json:"rounds"`

	// HTTPDuration is the measurement of http-small, http-16k, upload-1m and http-rr (whole seconds with
	// wrk).
	HTTPDuration time.Duration `json:"http_duration"`
	// Warmup precedes every throughput measurement.
	Warmup      time.Duration `json:"warmup"`
	HTTPConns   int           `json:"http_conns"`
	UploadConns int           `json:"upload_conns"`
	UploadSize  int           `json:"upload_size"`
	// UseWrk runs wrk for the HTTP scenarios when it is installed (the Go generator otherwise).
	UseWrk bool `json:"use_wrk"`
	// RRWatermark is http-rr's cap on the requests in flight per platform server (fairlead
	// high_watermark, HAProxy server maxconn, nginx max_conns, Caddy unhealthy_request_count): half of
	// HTTPConns, each server's fair share, so that a server is skipped whenever the split of the requests
	// in flight is uneven, while the two caps together still admit every client connection's request (no
	// peer needs to queue or refuse one: nginx OSS cannot queue).
	RRWatermark int `json:"rr_watermark"`

	WSConns    int           `json:"ws_conns"`
	WSMessage  int           `json:"ws_message"`
	WSDuration time.Duration `json:"ws_duration"`

	// IdleTunnels is the ws-idle target N (lowered to what the descriptor limits allow).
	IdleTunnels int `json:"idle_tunnels"`
	// IdleOpenTimeout bounds opening them.
	IdleOpenTimeout time.Duration `json:"idle_open_timeout"`

	FailoverRate    int           `json:"failover_rate"`
	FailoverWorkers int           `json:"failover_workers"`
	FailoverSteady  time.Duration `json:"failover_steady"`
	// FailoverWindow bounds the wait for a failover to converge; the slowest peer (HAProxy with plain
	// 15 s checks: up to 3 × 15 s) needs about 50 s.
	FailoverWindow time.Duration `json:"failover_window"`

	ReloadTunnels int           `json:"reload_tunnels"`
	ReloadRate    int           `json:"reload_rate"`
	ReloadBefore  time.Duration `json:"reload_before"`
	ReloadAfter   time.Duration `json:"reload_after"`

	// FanInClients is the fan-in client connections (lowered to what the descriptor limits allow).
	FanInClients  int `json:"fanin_clients"`
	FanInRequests int `json:"fanin_requests"`
	// FanInCap is fairlead's (and HAProxy's, Caddy's) per-server upstream connection cap in fan-in.
	FanInCap int `json:"fanin_cap"`

	// FanOutSizes are the fan-out subscriber counts N, one run each (a 0 is skipped; each is lowered to
	// what the descriptor limits allow). The subscribers open within IdleOpenTimeout.
	FanOutSizes [2]int `json:"fanout_sizes"`
	// FanOutChanges is how many changes fan-out publishes (each a new version of every topic), one every
	// FanOutInterval.
	FanOutChanges  int           `json:"fanout_changes"`
	FanOutInterval time.Duration `json:"fanout_interval"`

	// StormDevices is the storm scenario's devices (lowered to what the descriptor limits allow);
	// StormRate the new tunnels per second each connection server admits in its limited variant;
	// StormWindow bounds the wait for every device to be back.
	StormDevices int           `json:"storm_devices"`
	StormRate    int           `json:"storm_rate"`
	StormWindow  time.Duration `json:"storm_window"`

	// UpgradeDevices is the upgrade scenario's devices, each holding a tunnel (lowered to what the
	// descriptor limits allow); each echoes a message every UpgradeEvery (at its own phase), an echo
	// later than UpgradeEchoTimeout counting as missing. Beside them UpgradeHTTPRate keep-alive GETs/s and
	// UpgradeAttemptRate new connections/s. The upgrade comes after UpgradeWarmup; the wait for the old
	// process to be gone is bounded by UpgradeBound (from the signal), and the load goes on UpgradeAfter
	// longer. UpgradeHardStop is HAProxy's hard-stop-after (how long its old worker keeps tunnels).
	UpgradeDevices     int           `json:"upgrade_devices"`
	UpgradeEvery       time.Duration `json:"upgrade_every"`
	UpgradeEchoTimeout time.Duration `json:"upgrade_echo_timeout"`
	UpgradeHTTPRate    int           `json:"upgrade_http_rate"`
	UpgradeAttemptRate int           `json:"upgrade_attempt_rate"`
	UpgradeWarmup      time.Duration `json:"upgrade_warmup"`
	UpgradeHardStop    time.Duration `json:"upgrade_hard_stop"`
	UpgradeBound       time.Duration `json:"upgrade_bound"`
	UpgradeAfter       time.Duration `json:"upgrade_after"`
}

// FullPlan is the real run: 3 rounds, 10 s measurements, 8,000 idle tunnels, failovers waited for up
// to 60 s, 20,000 fan-in client connections, 1,000 and 10,000 fan-out subscribers getting 10 changes.
func FullPlan() Plan {
	return Plan{
		Mode: "full", Rounds: 3,
		HTTPDuration: 10 * time.Second, Warmup: 2 * time.Second,
		HTTPConns: 64, UploadConns: 16, UploadSize: 1 << 20, UseWrk: true, RRWatermark: 32,
		WSConns: 64, WSMessage: 64, WSDuration: 10 * time.Second,
		IdleTunnels: 8000, IdleOpenTimeout: 120 * time.Second,
		FailoverRate: 400, FailoverWorkers: 32, FailoverSteady: 3 * time.Second, FailoverWindow: 60 * time.Second,
		ReloadTunnels: 200, ReloadRate: 400, ReloadBefore: 2 * time.Second, ReloadAfter: 8 * time.Second,
		FanInClients: 20000, FanInRequests: 3, FanInCap: 64,
		FanOutSizes: [2]int{1000, 10000}, FanOutChanges: 10, FanOutInterval: time.Second,
		StormDevices: 5000, StormRate: 200, StormWindow: 90 * time.Second,
		UpgradeDevices: 8000, UpgradeEvery: 5 * time.Second, UpgradeEchoTimeout: 5 * time.Second,
		UpgradeHTTPRate: 400, UpgradeAttemptRate: 100, UpgradeWarmup: 10 * time.Second,
		UpgradeHardStop: 60 * time.Second, UpgradeBound: 70 * time.Second, UpgradeAfter: 5 * time.Second,
	}
}

// QuickPlan runs every scenario briefly (1 round, about a second per measurement, small N): well under
// two minutes for the four proxies. Failovers that take longer than the short window are reported as
// not converged.
func QuickPlan() Plan {
	return Plan{
		Mode: "quick", Rounds: 1,
		HTTPDuration: time.Second, Warmup: 200 * time.Millisecond,
		HTTPConns: 64, UploadConns: 16, UploadSize: 1 << 20, UseWrk: true, RRWatermark: 32,
		WSConns: 64, WSMessage: 64, WSDuration: time.Second,
		IdleTunnels: 300, IdleOpenTimeout: 10 * time.Second,
		FailoverRate: 400, FailoverWorkers: 32, FailoverSteady: 500 * time.Millisecond, FailoverWindow: 2 * time.Second,
		ReloadTunnels: 100, ReloadRate: 400, ReloadBefore: 500 * time.Millisecond, ReloadAfter: time.Second,
		FanInClients: 1000, FanInRequests: 3, FanInCap: 64,
		FanOutSizes: [2]int{200, 1000}, FanOutChanges: 3, FanOutInterval: time.Second,
		StormDevices: 1000, StormRate: 200, StormWindow: 30 * time.Second,
		UpgradeDevices: 1000, UpgradeEvery: 2 * time.Second, UpgradeEchoTimeout: 5 * time.Second,
		UpgradeHTTPRate: 200, UpgradeAttemptRate: 100, UpgradeWarmup: 4 * time.Second,
		UpgradeHardStop: 30 * time.Second, UpgradeBound: 35 * time.Second, UpgradeAfter: 3 * time.Second,
	}
}

// TinyPlan is the harness's self-test: every scenario, fractions of a second, the Go generator only.
func TinyPlan() Plan {
	return Plan{
		Mode: "tiny", Rounds: 1,
		HTTPDuration: 400 * time.Millisecond, Warmup: 100 * time.Millisecond,
		HTTPConns: 8, UploadConns: 2, UploadSize: 256 << 10, UseWrk: false, RRWatermark: 4,
		WSConns: 8, WSMessage: 64, WSDuration: 400 * time.Millisecond,
		IdleTunnels: 40, IdleOpenTimeout: 10 * time.Second,
		FailoverRate: 200, FailoverWorkers: 16, FailoverSteady: 300 * time.Millisecond, FailoverWindow: 1500 * time.Millisecond,
		ReloadTunnels: 20, ReloadRate: 200, ReloadBefore: 300 * time.Millisecond, ReloadAfter: 700 * time.Millisecond,
		FanInClients: 200, FanInRequests: 2, FanInCap: 16,
		FanOutSizes: [2]int{20, 0}, FanOutChanges: 3, FanOutInterval: 200 * time.Millisecond,
		StormDevices: 60, StormRate: 20, StormWindow: 10 * time.Second,
		UpgradeDevices: 40, UpgradeEvery: 200 * time.Millisecond, UpgradeEchoTimeout: 3 * time.Second,
		UpgradeHTTPRate: 100, UpgradeAttemptRate: 50, UpgradeWarmup: 500 * time.Millisecond,
		UpgradeHardStop: 3 * time.Second, UpgradeBound: 8 * time.Second, UpgradeAfter: 500 * time.Millisecond,
	}
}

// MarshalJSON writes durations in Go syntax ("10s") rather than nanoseconds.
func (p Plan) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	v := reflect.ValueOf(p)
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if d, ok := v.Field(i).Interface().(time.Duration); ok {
			m[key] = d.String()
		} else {
			m[key] = v.Field(i).Interface()
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Plan) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	v := reflect.ValueOf(p).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		raw, ok := m[key]
		if !ok {
			continue
		}
		if f.Type == reflect.TypeOf(time.Duration(0)) {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("plan.%s: %v", key, err)
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("plan.%s: %v", key, err)
			}
			v.Field(i).SetInt(int64(d))
			continue
		}
		if err := json.Unmarshal(raw, v.Field(i).Addr().Interface()); err != nil {
			return fmt.Errorf("plan.%s: %v", key, err)
		}
	}
	return nil
}
