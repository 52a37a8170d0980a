package healthcheck

import "github.com/fairlead/fairlead/healthcheck/event"

// The event stream lives in package event now, the one place of every event kind. These aliases keep
// code written against the old names compiling while the branches of issue #22 merge.
//
// Deprecated: use package event; the aliases go once nothing refers to them.
type (
	Event = event.Event
	Kind  = event.Kind
	Bus   = event.Bus
)

// Deprecated: use package event.
const (
	ServerUp         = event.ServerUp
	ServerDown       = event.ServerDown
	ServerAdded      = event.ServerAdded
	ServerRemoved    = event.ServerRemoved
	LeaderChanged    = event.LeaderChanged
	SplitBrain       = event.SplitBrain
	CheckAnswered    = event.CheckAnswered
	ReloadApplied    = event.ReloadApplied
	ReloadFailed     = event.ReloadFailed
	Failover         = event.Failover
	Failback         = event.Failback
	AdminAction      = event.AdminAction
	DiscoveryChanged = event.DiscoveryChanged
	PoolDown         = event.PoolDown
	PoolUp           = event.PoolUp
	NumKinds         = event.NumKinds
)

// Deprecated: use package event.
var (
	NewBus = event.NewBus
	Kinds  = event.Kinds
)
