package sim

import "fmt"

// State is the HA state of a simulated platform server.
type State int

const (
	// Leader answers LeaderCheck with 200 and serves ordinary requests.
	Leader State = iota
	// Backup answers LeaderCheck with 503 and serves ordinary requests.
	Backup
	// Standby answers LeaderCheck with 503 and every ordinary request with
	// 503, as a ThingWorx node that is up but not serving does.
	Standby
	// Hung keeps its listener and accepts TCP connections but never answers
	// anything; requests arriving on already-open keep-alive connections hang
	// too. A connection that hung stays hung (its input is read and
	// discarded) until the peer closes it or the server goes Dead or is
	// closed, even if the state changes in the meantime.
	Hung
	// Dead closes the listener and every open connection: dials are refused.
	// Leaving Dead listens again on the same address.
	Dead
)

var stateNames = [...]string{
	Leader:  "leader",
	Backup:  "backup",
	Standby: "standby",
	Hung:    "hung",
	Dead:    "dead",
}

// String returns the lower-case name of s ("leader", "backup", ...), the
// same names ParseState accepts.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// ParseState parses "leader", "backup", "standby", "hung" or "dead".
func ParseState(s string) (State, error) {
	for i, name := range stateNames {
		if s == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("sim: unknown state %q (want leader, backup, standby, hung or dead)", s)
}

func (s State) valid() bool {
	return s >= 0 && int(s) < len(stateNames)
}
