package domain

import "time"

// NodeConnection is a node's open connection for the node protocol (a
// WebSocket): where a lease finds a node of its pool to wake.
type NodeConnection struct {
	// ID is the connection's id (API Gateway's connectionId, or the local
	// server's own).
	ID    string
	OrgID string
	Pool  string
	Node  string
	// Full says the node last reported it has no free capacity, so wakes go
	// to its neighbours first.
	Full      bool
	Connected time.Time
}

// Offer is a pending environment that a node of its pool was woken for,
// kept until the environment leaves pending, so a wake that was lost is sent
// again (the re-offer job).
type Offer struct {
	OrgID       string
	Pool        string
	Environment string
	// Due is when to look again; Attempts how many wakes were sent.
	Due      time.Time
	Attempts int
	Created  time.Time
}

// OfferShards is how many partitions offers are spread over, so that no
// one partition takes every lease's offer.
const OfferShards = 4
