package sim

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// Default option values.
const (
	DefaultPlatforms       = 2
	DefaultConnections     = 2
	DefaultCredentials     = "YWRtaW46YWRtaW4=" // admin:admin
	DefaultLeaderCheckPath = "/Thingworx/Admin/HA/LeaderCheck"
	// DefaultIAMAPIKey is the IBM Cloud API key the simulated IAM exchanges for tokens when
	// Options.IAMAPIKey is empty: a demo value (bench/demo.d/demo-ibmcloud-apikey holds it), not a secret.
	DefaultIAMAPIKey = "fairlead-demo-ibmcloud-apikey"
)

// DefaultAppConfigGUIDs are the instance GUIDs of the first App Configuration instances when
// Options.AppConfigGUIDs names none: a primary and a backup instance with a guid of its own, as in two
// regions. A further instance i (from 1) is "demo-instance<i>".
var DefaultAppConfigGUIDs = []string{"demo-us-south", "demo-eu-gb"}

// Options configures Start. The zero value starts two platforms and two
// connection servers on free 127.0.0.1 ports, without a control API.
type Options struct {
	// Platforms is the number of fake platform servers; 0 means
	// DefaultPlatforms, or len(PlatformAddrs) if that is larger.
	Platforms int
	// Connections is the number of fake connection servers; 0 means
	// DefaultConnections, or the length of ConnectionAddrs or
	// ConnectionHealthAddrs if larger.
	Connections int

	// PlatformAddrs are optional fixed listen addresses, by index; missing
	// or empty entries mean "127.0.0.1:0".
	PlatformAddrs []string
	// ConnectionAddrs are optional fixed listen addresses, by index; missing
	// or empty entries mean "127.0.0.1:0".
	ConnectionAddrs []string
	// ConnectionHealthAddrs are optional separate health-check listen
	// addresses, by index; a missing or empty entry means health is served
	// on the connection server's main port only.
	ConnectionHealthAddrs []string
	// NoConnections starts no connection server (a process running only
	// platform servers); Connections and the connection addresses must
	// then be empty.
	NoConnections bool

	// ConfigServers is the number of simulated configuration services (see ConfigServer), the
	// upstream of a relay route; 0 means len(ConfigAddrs), by default none.
	ConfigServers int
	// ConfigAddrs are optional fixed listen addresses of the config servers, by index; missing or
	// empty entries mean "127.0.0.1:0".
	ConfigAddrs []string
	// ConfigAPIKey, if non-empty, is the key every config server requires as
	// "Authorization: Bearer <ConfigAPIKey>" (ConfigOptions.APIKey).
	ConfigAPIKey string

	// AppConfigs is the number of simulated IBM Cloud App Configuration instances (see AppConfig),
	// the upstream of a relay route with protocol = "appconfiguration", named "appconfig1",
	// "appconfig2", ...; 0 means len(AppConfigAddrs), by default none. With at least one, an IAM token
	// service (see IAM) starts too, whose tokens the instances require on their REST and wsfeature
	// paths.
	AppConfigs int
	// AppConfigAddrs are optional fixed listen addresses of the instances, by index; missing or empty
	// entries mean "127.0.0.1:0".
	AppConfigAddrs []string
	// AppConfigGUIDs are the instances' GUIDs, by index; a missing or empty entry means
	// DefaultAppConfigGUIDs[i] (or "demo-instance<i+1>" past its end). GUIDs must be unique.
	AppConfigGUIDs []string
	// AppConfigTopics are topics ("collection/environment") bumped once on every instance at start
	// (AppConfig.Bump: version 1), so that they exist; others appear with a publish.
	AppConfigTopics []string
	// AppConfigClientKeys, if any, are the keys the instances require on their SSE path (the client
	// SDKs pointed at them directly; AppConfigOptions.ClientKeys); none leaves it unchecked.
	AppConfigClientKeys []string
	// IAMAddr is the IAM service's listen address; "" means "127.0.0.1:0". Unused without AppConfigs.
	IAMAddr string
	// IAMAPIKey is the API key the IAM service exchanges for tokens; default DefaultIAMAPIKey.
	IAMAPIKey string

	// PlatformNames are optional names of the platform servers, by index;
	// a missing or empty entry means "platform<i+1>". Names must be unique.
	PlatformNames []string
	// PlatformStates are optional initial states of the platform servers,
	// by index; a missing entry means Leader for the first platform and
	// Backup for the others. A platform starting Dead does not listen until
	// it leaves Dead (its address is still reserved by a first listen, so
	// "127.0.0.1:0" works).
	PlatformStates []State

	// DeliveryHeader, if set, makes every platform record the value of this
	// request header on each ordinary request that reaches its handler (see
	// Platform.Deliveries): a test tags each request with a unique id and
	// proves that none was delivered twice.
	DeliveryHeader string
	// DeliveryLog, if set (with DeliveryHeader), receives one line
	// "<platform> <id>\n" per delivery, written before the request is
	// answered, in one Write call: a file keeps the record of a process
	// that is killed.
	DeliveryLog io.Writer

	// Credentials is the base64 "user:pass" a LeaderCheck probe must present
	// as "Authorization: Basic <Credentials>"; default DefaultCredentials.
	Credentials string
	// LeaderCheckPath is the LeaderCheck path; default
	// DefaultLeaderCheckPath. A request with any method on this path is a
	// LeaderCheck probe.
	LeaderCheckPath string
	// Body is the body of ordinary platform answers; default
	// "hello from <name>\n".
	Body []byte

	// TLS, if set, makes every platform server, connection server (its
	// main port and its separate health port, if any), config server, App
	// Configuration instance and the IAM service serve over TLS with this config, e.g. a certificate from NewCA and
	// CA.Issue, and ClientAuth to ask fairlead for a client certificate. The
	// control API stays plain HTTP. nil serves plain HTTP.
	TLS *tls.Config

	// ControlAddr, if non-empty, starts the HTTP control API there
	// ("127.0.0.1:0" picks a free port; see Cluster.ControlAddr).
	ControlAddr string

	// Logf, if set, receives state changes and server errors.
	Logf func(format string, args ...any)
}

// Cluster is a running simulated ThingWorx HA cluster. Platform servers are
// named "platform1", "platform2", ...; initially platform1 is Leader and the
// others are Backup. Connection servers are named "cx1", "cx2", ... and start
// healthy. Config servers, if any, are named "config1", "config2", ... and
// start up, with no topic known. App Configuration instances, if any, are named "appconfig1",
// "appconfig2", ... (appconfig1 the one a relay would call primary), start up with the
// Options.AppConfigTopics at version 1, and accept the tokens of IAM.
type Cluster struct {
	// Platforms are the platform servers, in name order.
	Platforms []*Platform
	// Connections are the connection servers, in name order.
	Connections []*ConnServer
	// Configs are the config servers, in name order.
	Configs []*ConfigServer
	// AppConfigs are the App Configuration instances, in name order.
	AppConfigs []*AppConfig
	// IAM is the IAM token service of the instances, nil without AppConfigs.
	IAM *IAM
	// ControlAddr is the actual address of the control API, "" if none.
	ControlAddr string

	control   *http.Server
	controlWG sync.WaitGroup
	closeOnce sync.Once
}

// Start starts a cluster. On error nothing is left running.
func Start(opts Options) (*Cluster, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	var log *lineLog
	if opts.DeliveryLog != nil {
		log = &lineLog{w: opts.DeliveryLog}
	}
	for i := range opts.Platforms {
		st := Backup
		if i == 0 {
			st = Leader
		}
		if i < len(opts.PlatformStates) {
			st = opts.PlatformStates[i]
		}
		initial := st
		if st == Dead {
			initial = Backup // listen once to fix the address, then die
		}
		name := addrAt(opts.PlatformNames, i, "platform"+strconv.Itoa(i+1))
		if c.Platform(name) != nil {
			return nil, fmt.Errorf("sim: two platforms named %q", name)
		}
		p, err := newPlatform(name, addrAt(opts.PlatformAddrs, i, "127.0.0.1:0"), initial, &opts, log)
		if err != nil {
			return nil, err
		}
		c.Platforms = append(c.Platforms, p)
		if st == Dead {
			if err := p.SetState(Dead); err != nil {
				return nil, err
			}
		}
	}
	for i := range opts.Connections {
		s, err := newConnServer("cx"+strconv.Itoa(i+1),
			addrAt(opts.ConnectionAddrs, i, "127.0.0.1:0"),
			addrAt(opts.ConnectionHealthAddrs, i, ""), &opts)
		if err != nil {
			return nil, err
		}
		c.Connections = append(c.Connections, s)
	}
	for i := range opts.ConfigServers {
		s, err := StartConfigServer("config"+strconv.Itoa(i+1), addrAt(opts.ConfigAddrs, i, "127.0.0.1:0"),
			ConfigOptions{APIKey: opts.ConfigAPIKey, TLS: opts.TLS, Logf: opts.Logf})
		if err != nil {
			return nil, err
		}
		c.Configs = append(c.Configs, s)
	}
	if opts.AppConfigs > 0 {
		if err := c.startAppConfigs(&opts); err != nil {
			return nil, err
		}
	}
	if opts.ControlAddr != "" {
		if err := c.startControl(opts.ControlAddr, opts.Logf); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

func (o *Options) setDefaults() error {
	if o.Platforms < 0 || o.Connections < 0 || o.ConfigServers < 0 {
		return errors.New("sim: negative server count")
	}
	if o.Platforms == 0 {
		o.Platforms = max(len(o.PlatformAddrs), len(o.PlatformNames), len(o.PlatformStates), DefaultPlatforms)
	}
	if o.NoConnections {
		if o.Connections != 0 || len(o.ConnectionAddrs) != 0 || len(o.ConnectionHealthAddrs) != 0 {
			return errors.New("sim: NoConnections with connection servers configured")
		}
	} else if o.Connections == 0 {
		o.Connections = max(len(o.ConnectionAddrs), len(o.ConnectionHealthAddrs), DefaultConnections)
	}
	if n := max(len(o.PlatformNames), len(o.PlatformStates)); n > o.Platforms {
		return fmt.Errorf("sim: %d platform names or states for %d platforms", n, o.Platforms)
	}
	for _, st := range o.PlatformStates {
		if !st.valid() {
			return fmt.Errorf("sim: invalid platform state %d", int(st))
		}
	}
	if len(o.PlatformAddrs) > o.Platforms {
		return fmt.Errorf("sim: %d platform addresses for %d platforms", len(o.PlatformAddrs), o.Platforms)
	}
	if n := max(len(o.ConnectionAddrs), len(o.ConnectionHealthAddrs)); n > o.Connections {
		return fmt.Errorf("sim: %d connection addresses for %d connection servers", n, o.Connections)
	}
	if o.ConfigServers == 0 {
		o.ConfigServers = len(o.ConfigAddrs)
	}
	if len(o.ConfigAddrs) > o.ConfigServers {
		return fmt.Errorf("sim: %d config server addresses for %d config servers", len(o.ConfigAddrs), o.ConfigServers)
	}
	if o.AppConfigs < 0 {
		return errors.New("sim: negative App Configuration instance count")
	}
	if o.AppConfigs == 0 {
		o.AppConfigs = len(o.AppConfigAddrs)
	}
	if n := max(len(o.AppConfigAddrs), len(o.AppConfigGUIDs)); n > o.AppConfigs {
		return fmt.Errorf("sim: %d App Configuration addresses or GUIDs for %d instances", n, o.AppConfigs)
	}
	for _, topic := range o.AppConfigTopics {
		if _, _, ok := splitTopic(topic); !ok {
			return fmt.Errorf("sim: bad App Configuration topic %q (want collection/environment, each [A-Za-z0-9._-]+)", topic)
		}
	}
	if o.IAMAPIKey == "" {
		o.IAMAPIKey = DefaultIAMAPIKey
	}
	if o.Credentials == "" {
		o.Credentials = DefaultCredentials
	}
	if o.LeaderCheckPath == "" {
		o.LeaderCheckPath = DefaultLeaderCheckPath
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

func addrAt(addrs []string, i int, def string) string {
	if i < len(addrs) && addrs[i] != "" {
		return addrs[i]
	}
	return def
}

// PortRange returns n addresses on host with consecutive ports from
// firstPort; a firstPort of 0 gives n times "host:0" (free ports).
func PortRange(host string, firstPort, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		port := 0
		if firstPort != 0 {
			port = firstPort + i
		}
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(port))
	}
	return addrs
}

// startAppConfigs starts the IAM service and the App Configuration instances of opts, and bumps
// opts.AppConfigTopics on each.
func (c *Cluster) startAppConfigs(opts *Options) error {
	iam, err := StartIAM(addrAt([]string{opts.IAMAddr}, 0, "127.0.0.1:0"),
		IAMOptions{APIKeys: []string{opts.IAMAPIKey}, TLS: opts.TLS, Logf: opts.Logf})
	if err != nil {
		return err
	}
	c.IAM = iam
	guids := map[string]bool{}
	for i := range opts.AppConfigs {
		guid := "demo-instance" + strconv.Itoa(i+1)
		if i < len(DefaultAppConfigGUIDs) {
			guid = DefaultAppConfigGUIDs[i]
		}
		guid = addrAt(opts.AppConfigGUIDs, i, guid)
		if guids[guid] {
			return fmt.Errorf("sim: two App Configuration instances with GUID %q", guid)
		}
		guids[guid] = true
		a, err := StartAppConfig("appconfig"+strconv.Itoa(i+1), addrAt(opts.AppConfigAddrs, i, "127.0.0.1:0"),
			AppConfigOptions{GUID: guid, IAM: iam, ClientKeys: opts.AppConfigClientKeys, TLS: opts.TLS, Logf: opts.Logf})
		if err != nil {
			return err
		}
		c.AppConfigs = append(c.AppConfigs, a)
		for _, topic := range opts.AppConfigTopics {
			a.Bump(topic)
		}
	}
	return nil
}

// Close stops the control API and every server and closes every open
// connection. It is idempotent. Afterwards the servers stay down: leaving
// Dead, ConnServer.Restart, ConfigServer.Start, AppConfig.Start and
// IAM.Start fail.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		if c.control != nil {
			_ = c.control.Close()
			c.controlWG.Wait()
		}
		for _, p := range c.Platforms {
			p.close()
		}
		for _, s := range c.Connections {
			s.close()
		}
		for _, s := range c.Configs {
			s.Close()
		}
		for _, a := range c.AppConfigs {
			a.Close()
		}
		if c.IAM != nil {
			c.IAM.Close()
		}
	})
}

// Platform returns the platform server with the given name, nil if unknown.
func (c *Cluster) Platform(name string) *Platform {
	for _, p := range c.Platforms {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Connection returns the connection server with the given name, nil if
// unknown.
func (c *Cluster) Connection(name string) *ConnServer {
	for _, s := range c.Connections {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Config returns the config server with the given name, nil if unknown.
func (c *Cluster) Config(name string) *ConfigServer {
	for _, s := range c.Configs {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// AppConfig returns the App Configuration instance with the given name, nil if unknown.
func (c *Cluster) AppConfig(name string) *AppConfig {
	for _, a := range c.AppConfigs {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Leader returns the first platform in state Leader, nil if none.
func (c *Cluster) Leader() *Platform {
	for _, p := range c.Platforms {
		if p.State() == Leader {
			return p
		}
	}
	return nil
}

// WriteSummary writes one line per server (name, role, address, and its
// state, health address or guid), the IAM service's before the App
// Configuration instances', and one for the control API, if any, last.
func (c *Cluster) WriteSummary(w io.Writer) {
	for _, p := range c.Platforms {
		fmt.Fprintf(w, "%s platform %s state=%s\n", p.Name, p.Addr, p.State())
	}
	for _, s := range c.Connections {
		fmt.Fprintf(w, "%s connection %s health=%s\n", s.Name, s.Addr, s.HealthAddr)
	}
	for _, s := range c.Configs {
		fmt.Fprintf(w, "%s config %s\n", s.Name, s.Addr)
	}
	if c.IAM != nil {
		fmt.Fprintf(w, "iam iam %s\n", c.IAM.Addr)
	}
	for _, a := range c.AppConfigs {
		fmt.Fprintf(w, "%s appconfiguration %s guid=%s\n", a.Name, a.Addr, a.GUID)
	}
	if c.ControlAddr != "" {
		fmt.Fprintf(w, "control %s\n", c.ControlAddr)
	}
}
