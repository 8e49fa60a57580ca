package agent

import "github.com/envlease/envlease/shared/agent/confine"

// UIDRange is a range of user ids environments run as when the agent runs
// as root (confine.UIDRange).
type UIDRange = confine.UIDRange

// DefaultUIDRange lies above the ids useradd hands out (up to 60000) and
// the 16-bit ones (nobody is 65534).
var DefaultUIDRange = confine.DefaultUIDRange

// ParseUIDRange reads "FIRST-LAST" (as -uid-range takes it).
func ParseUIDRange(s string) (UIDRange, error) { return confine.ParseUIDRange(s) }

// EgressPort is where an egress environment's proxy listens, on 127.0.0.1
// of its network namespace (confine.EgressPort).
const EgressPort = confine.EgressPort
