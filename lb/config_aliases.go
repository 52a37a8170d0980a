package lb

import "github.com/fairlead/fairlead/lb/config"

// The config's types under their former names in lb, while the restructure of issue #22 moves the
// request path's files; they go once every file names the config package.
type (
	Config          = config.Config
	GlobalConfig    = config.Global
	FrontendConfig  = config.Frontend
	CertConfig      = config.Cert
	AdminConfig     = config.Admin
	PoolConfig      = config.Pool
	PoolTLSConfig   = config.PoolTLS
	StickyConfig    = config.Sticky
	CheckConfig     = config.Check
	RouteConfig     = config.Route
	RouteAuthConfig = config.RouteAuth
	RelayConfig     = config.Relay
	DiscoveryConfig = config.Discovery
	Duration        = config.Duration
	ConfigError     = config.Error
	routeAuth       = config.Auth
	frontTLS        = config.FrontTLS
	relaySpec       = config.RelaySpec
)

// LoadConfig is config.Load.
func LoadConfig(path string) (*Config, error) { return config.Load(path) }
