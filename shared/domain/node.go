package domain

import "time"

// Node states. A node is active from registration until it deregisters
// (left) or stops heartbeating for longer than the lost timeout (lost).
const (
	NodeActive = "active"
	NodeLost   = "lost"
	NodeLeft   = "left"
)

// Node is a machine of a pool that runs environments through an agent.
type Node struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Pool    string `json:"pool"`
	Address string `json:"address"`
	// Capacity is how many environments the node runs at once.
	Capacity int    `json:"capacity"`
	State    string `json:"state"`
	// Agent is the agent's self-description ("envlease-agent/1", say).
	Agent         string    `json:"agent"`
	Registered    time.Time `json:"registered"`
	LastHeartbeat time.Time `json:"lastHeartbeat"`
	// Deadline is when the node is lost unless it heartbeats first.
	Deadline time.Time  `json:"deadline"`
	Left     *time.Time `json:"left"`
	// TunnelURL is where the node's agent serves tunnels to its
	// environments' exports (ws:// or wss://); empty when it serves none.
	TunnelURL string `json:"tunnelURL"`

	OrgID string `json:"-"`
	// KeyID is the node credential that registered it; only that credential
	// may act as the node.
	KeyID   string `json:"-"`
	Version int64  `json:"-"`
	// TunnelKey signs the node's tunnel tickets. The service made it at
	// registration and told only the registering agent; it is never listed.
	TunnelKey []byte `json:"-"`
}
