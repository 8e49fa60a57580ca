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
	// KeyID is the node credential the connection opened with: revoking
	// it finds and closes the connection.
	KeyID string
	// Full says the node last reported it has no free capacity, so wakes go
	// to its neighbours first.
	Full bool
	// Short says the node last reported it is short of disk: it can run
	// nothing, so a wake reaches it only when every connection it could
	// choose from is short too (the node then fails the environment,
	// saying why, rather than leaving it pending for nobody).
	Short     bool
	Connected time.Time
	// Platform and Runtimes are the node's, so a lease wakes a node that
	// can run its environment.
	Platform string
	Runtimes []string
}

// Runs reports whether the connection's node can run what needs asks.
func (c NodeConnection) Runs(needs Needs) bool {
	return Node{Platform: c.Platform, Runtimes: c.Runtimes}.Runs(needs)
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
// one partition takes every lease's offer: at 10x the target fleet (about
// 3,300 leases a second, each an offer put and delete) 16 shards keep each
// under half of a partition's 1,000 write units a second. The re-offer job
// reads every shard each pass, so more shards cost idle reads.
const OfferShards = 16

// StopNotice is an environment a node must be told to tear down: written
// in the transaction that moves the environment to stopping, so no stop
// can be committed without it, and kept until the environment leaves
// stopping, so a message that was lost is sent again (the stop job).
type StopNotice struct {
	OrgID       string
	Node        string
	Environment string
	// Due is when to send it again; Attempts how many times it was sent.
	Due      time.Time
	Attempts int
	Created  time.Time
}

// StopShards is how many partitions stop notices are spread over: a stop
// writes one and the stop job deletes it, as many as offers at most (every
// stop of a running environment follows a claim), so as many shards.
const StopShards = OfferShards
