package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Status is a snapshot of the cluster, as served by the control API's
// GET /status.
type Status struct {
	Platforms   []PlatformStatus `json:"platforms"`
	Connections []ConnStatus     `json:"connections"`
	// Configs are the config servers' ConfigServer.Stats.
	Configs []ConfigStats `json:"configs"`
	// AppConfigs are the App Configuration instances' AppConfig.Stats.
	AppConfigs []AppConfigStats `json:"appconfigs"`
	// IAM is the IAM service's IAM.Stats, absent without App Configuration instances.
	IAM *IAMStats `json:"iam,omitempty"`
}

// PlatformStatus is a snapshot of one platform server.
type PlatformStatus struct {
	Name     string `json:"name"`
	Addr     string `json:"addr"`
	State    string `json:"state"`
	Requests int64  `json:"requests"`
	// OpenConns is Platform.OpenConns.
	OpenConns int `json:"open_conns"`
	// LeaderCheckStatus is the forced LeaderCheck status, 0 if none.
	LeaderCheckStatus int `json:"leadercheck_status"`
	// Delay is Platform.Delay as a Go duration ("2s"), absent if none.
	Delay string `json:"delay,omitempty"`
	// LeaderCheckFlap is Platform.LeaderCheckFlap, absent if off.
	LeaderCheckFlap bool `json:"leadercheck_flap,omitempty"`
}

// ConnStatus is a snapshot of one connection server.
type ConnStatus struct {
	Name        string `json:"name"`
	Addr        string `json:"addr"`
	HealthAddr  string `json:"health_addr"`
	Healthy     bool   `json:"healthy"`
	Alive       bool   `json:"alive"`
	OpenTunnels int    `json:"open_tunnels"`
	Upgrades    int64  `json:"upgrades"`
}

// Status returns a snapshot of p.
func (p *Platform) Status() PlatformStatus {
	st := PlatformStatus{
		Name:              p.Name,
		Addr:              p.Addr,
		State:             p.State().String(),
		Requests:          p.Requests(),
		OpenConns:         p.OpenConns(),
		LeaderCheckStatus: p.LeaderCheckStatus(),
		LeaderCheckFlap:   p.LeaderCheckFlap(),
	}
	if d := p.Delay(); d > 0 {
		st.Delay = d.String()
	}
	return st
}

// Status returns a snapshot of s.
func (s *ConnServer) Status() ConnStatus {
	return ConnStatus{
		Name:        s.Name,
		Addr:        s.Addr,
		HealthAddr:  s.HealthAddr,
		Healthy:     s.Healthy(),
		Alive:       s.Alive(),
		OpenTunnels: s.OpenTunnels(),
		Upgrades:    s.Upgrades(),
	}
}

// Status returns a snapshot of every server of the cluster.
func (c *Cluster) Status() Status {
	st := Status{
		Platforms:   make([]PlatformStatus, 0, len(c.Platforms)),
		Connections: make([]ConnStatus, 0, len(c.Connections)),
		Configs:     c.configStats(),
		AppConfigs:  c.appConfigStats(),
	}
	if c.IAM != nil {
		iam := c.IAM.Stats()
		st.IAM = &iam
	}
	for _, p := range c.Platforms {
		st.Platforms = append(st.Platforms, p.Status())
	}
	for _, s := range c.Connections {
		st.Connections = append(st.Connections, s.Status())
	}
	return st
}

// configStats returns the Stats of every config server, in name order.
func (c *Cluster) configStats() []ConfigStats {
	st := make([]ConfigStats, 0, len(c.Configs))
	for _, s := range c.Configs {
		st = append(st, s.Stats())
	}
	return st
}

// appConfigStats returns the Stats of every App Configuration instance, in name order.
func (c *Cluster) appConfigStats() []AppConfigStats {
	st := make([]AppConfigStats, 0, len(c.AppConfigs))
	for _, a := range c.AppConfigs {
		st = append(st, a.Stats())
	}
	return st
}

// startControl serves the control API on addr:
//
//	GET  /status                              Status as JSON
//	POST /platform/<name>/<state>             Platform.SetState
//	POST /platform/<name>/leadercheck/<code>  Platform.SetLeaderCheckStatus (0 or 200-599)
//	POST /platform/<name>/delay/<duration>    Platform.SetDelay (a Go duration; 0 clears)
//	POST /platform/<name>/flap/<on|off>       Platform.SetLeaderCheckFlap
//	POST /connection/<name>/<up|down|kill|restart>
//	GET  /deliveries                          Cluster.Deliveries as JSON (id -> count)
//	POST /config/publish/<collection>/<environment>
//	                                          Cluster.PublishConfig with the request body (optional, a
//	                                          JSON document); answers {"topic":...,"version":N}
//	POST /config/<name>/<up|down>             ConfigServer.Start / ConfigServer.Stop
//	POST /config/reset                        ConfigServer.ResetCounters on every config server;
//	                                          answers their ConfigStats
//	POST /appconfig/publish/<collection>/<environment>
//	                                          a change on every App Configuration instance: AppConfig.Bump,
//	                                          or with a body (a JSON export document) AppConfig.Set;
//	                                          answers {"topic":...,"versions":{"appconfig1":N,...}}
//	POST /appconfig/<name>/publish/<collection>/<environment>
//	                                          the same on one instance
//	POST /appconfig/<name>/<up|down>          AppConfig.Start / AppConfig.Stop; answers its AppConfigStats
//	POST /appconfig/reset                     AppConfig.ResetCounters on every instance and
//	                                          IAM.ResetCounters; answers the instances' AppConfigStats
//	POST /iam/<up|down>                       IAM.Start / IAM.Stop; answers its IAMStats
//
// GET is accepted wherever POST is. Changes answer 200 with the server's new
// status as one line of JSON, 404 for an unknown server (or a publish without
// config servers or App Configuration instances) and 400 for a bad state, code,
// action, topic or document.
func (c *Cluster) startControl(addr string, logf func(string, ...any)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("sim: control API: %w", err)
	}
	c.ControlAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/status", c.handleStatus)
	mux.HandleFunc("/platform/{name}/{state}", c.handlePlatformState)
	mux.HandleFunc("/platform/{name}/leadercheck/{code}", c.handleLeaderCheck)
	mux.HandleFunc("/platform/{name}/delay/{delay}", c.handleDelay)
	mux.HandleFunc("/platform/{name}/flap/{onoff}", c.handleFlap)
	mux.HandleFunc("/deliveries", c.handleDeliveries)
	mux.HandleFunc("/connection/{name}/{action}", c.handleConnection)
	mux.HandleFunc("/config/publish/{collection}/{environment}", c.handleConfigPublish)
	mux.HandleFunc("/config/reset", c.handleConfigReset)
	mux.HandleFunc("/config/{name}/{action}", c.handleConfigServer)
	mux.HandleFunc("/appconfig/publish/{collection}/{environment}", c.handleAppConfigPublish)
	mux.HandleFunc("/appconfig/{name}/publish/{collection}/{environment}", c.handleAppConfigPublish)
	mux.HandleFunc("/appconfig/reset", c.handleAppConfigReset)
	mux.HandleFunc("/appconfig/{name}/{action}", c.handleAppConfigInstance)
	mux.HandleFunc("/iam/{action}", c.handleIAM)
	c.control = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}
	c.controlWG.Add(1)
	go func() {
		defer c.controlWG.Done()
		if err := c.control.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("control API: %s", err)
		}
	}()
	return nil
}

func allowMethod(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodPost {
		return true
	}
	w.Header().Set("Allow", "GET, POST")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (c *Cluster) handleStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, c.Status())
}

func (c *Cluster) handlePlatformState(w http.ResponseWriter, r *http.Request) {
	p := c.platformOf(w, r)
	if p == nil {
		return
	}
	st, err := ParseState(r.PathValue("state"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.SetState(st); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, p.Status())
}

func (c *Cluster) handleLeaderCheck(w http.ResponseWriter, r *http.Request) {
	p := c.platformOf(w, r)
	if p == nil {
		return
	}
	code, err := strconv.Atoi(r.PathValue("code"))
	if err != nil || (code != 0 && (code < 200 || code > 599)) {
		http.Error(w, "bad status code", http.StatusBadRequest)
		return
	}
	p.SetLeaderCheckStatus(code)
	writeJSON(w, p.Status())
}

func (c *Cluster) handleConnection(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	s := c.Connection(r.PathValue("name"))
	if s == nil {
		http.Error(w, "unknown connection server", http.StatusNotFound)
		return
	}
	var err error
	switch r.PathValue("action") {
	case "up":
		s.SetHealthy(true)
	case "down":
		s.SetHealthy(false)
	case "kill":
		err = s.Kill()
	case "restart":
		err = s.Restart()
	default:
		http.Error(w, "unknown action (want up, down, kill or restart)", http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, s.Status())
}

func (c *Cluster) handleDelay(w http.ResponseWriter, r *http.Request) {
	p := c.platformOf(w, r)
	if p == nil {
		return
	}
	d, err := time.ParseDuration(r.PathValue("delay"))
	if err != nil || d < 0 {
		http.Error(w, "bad delay (want a Go duration such as 2s, or 0)", http.StatusBadRequest)
		return
	}
	p.SetDelay(d)
	writeJSON(w, p.Status())
}

func (c *Cluster) handleFlap(w http.ResponseWriter, r *http.Request) {
	p := c.platformOf(w, r)
	if p == nil {
		return
	}
	switch r.PathValue("onoff") {
	case "on":
		p.SetLeaderCheckFlap(true)
	case "off":
		p.SetLeaderCheckFlap(false)
	default:
		http.Error(w, "want on or off", http.StatusBadRequest)
		return
	}
	writeJSON(w, p.Status())
}

func (c *Cluster) handleDeliveries(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, c.Deliveries())
}

// platformOf returns the platform a control request names, or nil after answering 405 (a method other
// than GET or POST) or 404 (no such platform).
func (c *Cluster) platformOf(w http.ResponseWriter, r *http.Request) *Platform {
	if !allowMethod(w, r) {
		return nil
	}
	p := c.Platform(r.PathValue("name"))
	if p == nil {
		http.Error(w, "unknown platform", http.StatusNotFound)
	}
	return p
}

// configPublished is the answer to a publish on the control API.
type configPublished struct {
	Topic   string `json:"topic"`
	Version uint64 `json:"version"`
}

func (c *Cluster) handleConfigPublish(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	if len(c.Configs) == 0 {
		http.Error(w, "no config servers", http.StatusNotFound)
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessageSize))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "cannot read the document: "+err.Error(), code)
		return
	}
	topic := r.PathValue("collection") + "/" + r.PathValue("environment")
	v, err := c.PublishConfig(topic, data)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, configPublished{Topic: topic, Version: v})
}

func (c *Cluster) handleConfigServer(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	s := c.Config(r.PathValue("name"))
	if s == nil {
		http.Error(w, "unknown config server", http.StatusNotFound)
		return
	}
	switch r.PathValue("action") {
	case "up":
		if err := s.Start(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case "down":
		s.Stop()
	default:
		http.Error(w, "unknown action (want up or down)", http.StatusBadRequest)
		return
	}
	writeJSON(w, s.Stats())
}

func (c *Cluster) handleConfigReset(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	for _, s := range c.Configs {
		s.ResetCounters()
	}
	writeJSON(w, c.configStats())
}

// appConfigPublished is the answer to an App Configuration publish on the control API.
type appConfigPublished struct {
	Topic string `json:"topic"`
	// Versions holds each instance's new version of the topic (AppConfigTopicStats.Version), by name.
	Versions map[string]int `json:"versions"`
}

// handleAppConfigPublish publishes a change of a topic on one App Configuration instance (the path
// names it) or on every one: the next generated configuration (Bump), or the request's body (Set).
func (c *Cluster) handleAppConfigPublish(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	targets := c.AppConfigs
	if name := r.PathValue("name"); name != "" {
		a := c.AppConfig(name)
		if a == nil {
			http.Error(w, "unknown App Configuration instance", http.StatusNotFound)
			return
		}
		targets = []*AppConfig{a}
	}
	if len(targets) == 0 {
		http.Error(w, "no App Configuration instances", http.StatusNotFound)
		return
	}
	doc, err := io.ReadAll(http.MaxBytesReader(w, r.Body, appConfigMaxBody))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "cannot read the document: "+err.Error(), code)
		return
	}
	topic := r.PathValue("collection") + "/" + r.PathValue("environment")
	if _, _, ok := splitTopic(topic); !ok {
		http.Error(w, fmt.Sprintf("bad topic %q (want collection/environment, each [A-Za-z0-9._-]+)", topic), http.StatusBadRequest)
		return
	}
	ans := appConfigPublished{Topic: topic, Versions: map[string]int{}}
	for _, a := range targets {
		if len(doc) == 0 {
			ans.Versions[a.Name] = a.Bump(topic)
			continue
		}
		// Every instance derives the same answers from doc: the first refuses it or none does.
		if err := a.Set(topic, doc); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ans.Versions[a.Name] = a.Stats().Topics[topic].Version
	}
	writeJSON(w, ans)
}

func (c *Cluster) handleAppConfigInstance(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	a := c.AppConfig(r.PathValue("name"))
	if a == nil {
		http.Error(w, "unknown App Configuration instance", http.StatusNotFound)
		return
	}
	switch r.PathValue("action") {
	case "up":
		if err := a.Start(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case "down":
		a.Stop()
	default:
		http.Error(w, "unknown action (want up or down)", http.StatusBadRequest)
		return
	}
	writeJSON(w, a.Stats())
}

func (c *Cluster) handleAppConfigReset(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	for _, a := range c.AppConfigs {
		a.ResetCounters()
	}
	if c.IAM != nil {
		c.IAM.ResetCounters()
	}
	writeJSON(w, c.appConfigStats())
}

func (c *Cluster) handleIAM(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	if c.IAM == nil {
		http.Error(w, "no IAM service (no App Configuration instances)", http.StatusNotFound)
		return
	}
	switch r.PathValue("action") {
	case "up":
		if err := c.IAM.Start(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case "down":
		c.IAM.Stop()
	default:
		http.Error(w, "unknown action (want up or down)", http.StatusBadRequest)
		return
	}
	writeJSON(w, c.IAM.Stats())
}
