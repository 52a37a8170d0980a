package harness

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/fairlead/fairlead/bench/sim"
)

// fan-out-appconfig (issue #23): fan-out with IBM Cloud App Configuration's client SDK shape. The same
// N subscribers (Plan.FanOutSizes) on the same 4 topics ("collection/environment"), every one of them
// the SSE stream the JS client SDK opens:
//
//	GET /apprapp/feature/v1/instances/{guid}/environments/{e}/sse/subscribe?collection_id={c}
//	Authorization: <client key, raw>
//
// answered with "event: Registration" and the whole configuration at connect, then
// "event: SSEConfig_payload" and the whole new configuration at each change. The subscribers are Go
// readers in the bench process (not the SDK in Node, which would not scale to thousands); the version
// they record is the configuration's "version" property (sim.AppConfigProperty). One change a second
// on every topic: sim.AppConfig.Bump on the simulated instance. Measured per N as fan-out: the delay
// from the Bump to the receipt at every subscriber (p50, p99), the deliveries missed, KiB per idle
// subscriber, the proxy's CPU per delivery, and for fairlead the instance's wsfeature sessions opened
// and REST fetches per topic per change (expected 4 and 1) and the IAM tokens issued (expected 1);
// also the subscribers whose first event was not a Registration.
//
// fairlead: a [relays.NAME] route with protocol = "appconfiguration" in front of one simulated
// instance and IAM. nginx: nchan, fed each change by a POST of the same configuration document to its
// publisher location (named SSEConfig_payload there), one message kept per channel and sent first to a
// new subscriber; nchan cannot name that first message Registration (fanOutAppConfigLimits).
// HAProxy and Caddy: not applicable.

const (
	// fanOutACGUID is the simulated instance's id, in every path.
	fanOutACGUID = "bench-appconfig-guid"
	// fanOutACAPIKey is the bench's made-up IBM Cloud API key (fairlead's apikey_file, IAM's only key)
	// and fanOutACClientKey the made-up key its subscribers present; neither is a real credential.
	fanOutACAPIKey    = "bench-ibm-cloud-apikey"
	fanOutACClientKey = "bench-client-key"
)

// fanOutAppConfigLimits is what nchan cannot do of the client SDK's shape (one of nginx's Limits;
// bench/README.md says it too).
const fanOutAppConfigLimits = "nchan cannot name the message a new subscriber gets first Registration and the later ones SSEConfig_payload " +
	"(an event name belongs to a message, set when it is published, or to a whole subscriber location), so its subscribers get the current " +
	"configuration at connect as an SSEConfig_payload: the official client SDK's setContext would never resolve through it"

func fanOutAppConfigScenario() *scenario {
	return &scenario{
		name: "fan-out-appconfig",
		summary: "fan-out with App Configuration's client SDK shape: N subscribers (as fan-out) on 4 topics (collection/environment), every one the SDK's SSE stream " +
			"(GET /apprapp/feature/v1/instances/{guid}/environments/{e}/sse/subscribe?collection_id={c}, Authorization: the client key; Registration at connect, SSEConfig_payload per change), " +
			"one change a second (as fan-out) on every topic of one simulated App Configuration instance: delay from the change to receipt at every subscriber (p50, p99), missed deliveries, " +
			"proxy memory per idle subscriber, proxy CPU per delivery, subscribers without a Registration first; fairlead's upstream wsfeature sessions, REST fetches per topic per change " +
			"and IAM tokens as counted by the simulated instance and IAM (expected: 4, 1 and 1). fairlead: a [relays] route with protocol = \"appconfiguration\"; " +
			"nginx: nchan, fed every change (the same document) by a POST to its publisher location, one message kept per channel and sent first to a new subscriber " +
			"(no upstream: sessions, fetches and tokens n/a; no Registration: see what the peers cannot express); HAProxy and Caddy: not applicable, not run",
		metrics: []metric{
			{key: "subscribers", label: "subscribers"},
			{key: "p50_ms", label: "p50 ms", better: "lower", format: "%.2f"},
			{key: "p99_ms", label: "p99 ms", better: "lower", format: "%.2f"},
			{key: "missed", label: "missed deliveries", better: "lower"},
			{key: "no_registration", label: "no Registration first", better: "lower"},
			{key: "kib_per_sub", label: "KiB/subscriber", better: "lower", format: "%.1f"},
			{key: "cpu_us", label: "proxy CPU µs per delivery", better: "lower", format: "%.2f"},
			{key: "upstream_sessions", label: "upstream sessions"},
			{key: "fetches_per_change", label: "fetches per topic per change", format: "%.2f"},
			{key: "iam_tokens", label: "IAM tokens"},
		},
		sized:    true,
		variants: fanOutPeers,
		run:      func(rc *runCtx) (*Result, error) { return runFanOutSizes(rc, fanOutAppConfig) },
	}
}

// startAppConfig starts fan-out-appconfig's upstream and proxy for n subscribers, in dir, and
// publishes every topic's first configuration; stop stops them. fairlead gets an IAM and an instance
// holding the topics; nginx a generator instance whose configurations the feeder POSTs.
func (fr *fanOutRun) startAppConfig(n int, dir string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	cfg := fanOutConfig{Topics: fanOutTopics, AppConfig: true, GUID: fanOutACGUID, ClientKey: fanOutACClientKey}
	opts := sim.AppConfigOptions{GUID: fanOutACGUID}
	if fr.rc.peer.Base == "fairlead" {
		if fr.iam, err = sim.StartIAM("127.0.0.1:0", sim.IAMOptions{APIKeys: []string{fanOutACAPIKey}}); err != nil {
			return nil, err
		}
		stops = append(stops, fr.iam.Close)
		opts.IAM = fr.iam
		cfg.IAMURL = fr.iam.URL()
		cfg.APIKeyFile, cfg.KeysFile = filepath.Join(dir, "apikey"), filepath.Join(dir, "client-keys")
		for path, key := range map[string]string{cfg.APIKeyFile: fanOutACAPIKey, cfg.KeysFile: fanOutACClientKey} {
			if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
				return nil, err
			}
		}
	}
	if fr.ac, err = sim.StartAppConfig("appconfig", "127.0.0.1:0", opts); err != nil {
		return nil, err
	}
	stops = append(stops, fr.ac.Close)
	cfg.ConfigAddr = fr.ac.Addr
	if fr.rc.peer.Base == "fairlead" {
		// The relay's normal start fetches every listed topic: they exist first.
		for _, t := range fanOutTopics {
			fr.ac.Bump(t)
		}
		fr.publish = fr.publishAppConfig
	} else {
		fr.publish = fr.publishAppConfigNchan
	}
	if fr.in, err = startFanOutPeer(fr.rc, cfg, n, dir); err != nil {
		return nil, err
	}
	stops = append(stops, fr.in.Stop)
	if fr.rc.peer.Base == "nginx" {
		for t := range fanOutTopics {
			if _, err := fr.publish(t, 0); err != nil {
				return nil, fmt.Errorf("publishing the first configuration of %s: %w", fanOutTopics[t], err)
			}
		}
	}
	return stop, nil
}

// publishAppConfig makes the next configuration of topic t on the simulated instance, which tells
// fairlead's wsfeature session of the topic.
func (fr *fanOutRun) publishAppConfig(t, _ int) (uint64, error) {
	at := time.Since(fr.base)
	v := uint64(fr.ac.Bump(fanOutTopics[t]))
	fr.pubAt[t][v] = at
	return v, nil
}

// publishAppConfigNchan makes the next configuration of topic t on the generator instance and POSTs
// it to nchan's publisher: the document fairlead's subscribers get for the same change.
func (fr *fanOutRun) publishAppConfigNchan(t, _ int) (uint64, error) {
	v := uint64(fr.ac.Bump(fanOutTopics[t]))
	doc, _ := fr.ac.Export(fanOutTopics[t])
	at := time.Since(fr.base)
	resp, err := fr.client.Post("http://"+fr.in.Addr()+"/pub/"+fanOutTopics[t], "application/json", bytes.NewReader(doc))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("nchan publisher: status %d", resp.StatusCode)
	}
	fr.pubAt[t][v] = at
	return v, nil
}

// openAppConfig subscribes s as the JS client SDK does and starts its reader: every event's version
// is recorded, and the first event's name (Registration expected), whether it carried a configuration
// and the misnamed events are kept.
func (fr *fanOutRun) openAppConfig(s *fanOutSub) error {
	c, e, _ := strings.Cut(fanOutTopics[s.topic], "/")
	path := "/apprapp/feature/v1/instances/" + fanOutACGUID + "/environments/" + e + "/sse/subscribe?collection_id=" + c
	header := "Authorization: " + fanOutACClientKey + "\r\nUser-Agent: appconfiguration-js-client-sdk/v0.2.0-beta.3 (fairlead-bench)\r\n"
	var event string
	events := 0
	return fr.openSSE(s, path, header, func(line []byte) {
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			event = ""
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			// One data line per event (the relay's, the instance's and nchan's events are one line).
			events++
			v, ok := parseAppConfigVersion(line)
			if events == 1 {
				s.firstEvent, s.firstConfig = event, ok
			} else if event != "SSEConfig_payload" {
				s.badEvents++
			}
			if ok {
				s.got(v, fr.base)
			}
		}
	})
}

// appConfigRESTPath is the server SDKs' REST path of topic's configuration.
func appConfigRESTPath(guid, topic string) string {
	c, e, _ := strings.Cut(topic, "/")
	return "/apprapp/feature/v1/instances/" + guid + "/config?action=sdkConfig&collection_id=" + c + "&environment_id=" + e
}

// parseAppConfigVersion reads the value of the property sim.AppConfigProperty in a configuration
// document of the simulated instance (compact JSON, keys in order: "value" follows "property_id").
func parseAppConfigVersion(b []byte) (uint64, bool) {
	_, rest, ok := bytes.Cut(b, []byte(`"property_id":"`+sim.AppConfigProperty+`"`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, '}') // the property object ends before any later object
	if end < 0 {
		return 0, false
	}
	_, rest, ok = bytes.Cut(rest[:end], []byte(`"value":`))
	if !ok {
		return 0, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	v, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	return v, err == nil
}

// fairleadAppConfigTmpl is fairlead's fan-out-appconfig configuration: an App Configuration relay and
// its pool, nothing else.
var fairleadAppConfigTmpl = template.Must(template.New("fairlead-appconfig").Funcs(tmplFuncs).Parse(`# generated by fairlead-bench (fan-out-appconfig)
[frontend]
listen = "{{.Listen}}"
max_conns = {{.FairleadMaxConns}}

[admin]
listen = "127.0.0.1:{{.AdminPort}}"

[pools.appconfig]
balance = "roundrobin"
servers = ["{{.ConfigAddr}}"]

[relays.appconfig]
pool = "appconfig"
protocol = "appconfiguration"
guid = "{{.GUID}}"
apikey_file = "{{.APIKeyFile}}"
iam_url = "{{.IAMURL}}"
topics = [{{quote .Topics}}]
max_subscribers = {{.FairleadMaxConns}}

[relays.appconfig.auth]
keys_file = "{{.KeysFile}}"
`))

// nchanAppConfigTmpl is nginx's fan-out-appconfig configuration: nchan EventSource subscribers on the
// client SDK's path (the client key checked, the channel "collection/environment"), one message kept
// per channel and sent first to a new subscriber, and the publisher location the feeder POSTs each
// configuration to, named SSEConfig_payload.
var nchanAppConfigTmpl = template.Must(template.New("nchan-appconfig").Parse(`# generated by fairlead-bench (fan-out-appconfig: nginx with nchan)
load_module {{.Module}};
` + nginxMain + `
events {
	worker_connections {{.Conns}};
}

http {
` + nginxHTTP + `
	# The client key, raw (as the client SDK sends it) or after "Bearer ".
	map $http_authorization $appconfig_client {
		default 0;
		"{{.ClientKey}}" 1;
		"Bearer {{.ClientKey}}" 1;
	}

	# Each channel keeps its latest configuration only, for as long as it is the latest.
	nchan_message_buffer_length 1;
	nchan_message_timeout 0;

	server {
		listen {{.Listen}} backlog=4096;

		# The client SDK's SSE stream: the current configuration at once (the one kept), then each new one.
		location ~ ^/apprapp/feature/v1/instances/{{.GUID}}/environments/([A-Za-z0-9._-]+)/sse/subscribe$ {
			if ($appconfig_client = 0) {
				return 401;
			}
			nchan_subscriber eventsource;
			nchan_channel_id $arg_collection_id/$1;
			nchan_subscriber_first_message oldest;
		}

		# The feeder: the harness POSTs every configuration here.
		location ~ ^/pub/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)$ {
			nchan_publisher;
			nchan_channel_id $1/$2;
			nchan_eventsource_event SSEConfig_payload;
		}
	}
}
`))
