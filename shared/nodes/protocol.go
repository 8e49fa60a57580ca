package nodes

import (
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// The node protocol: JSON text messages over one WebSocket per node, the
// same in AWS (an API Gateway WebSocket API, functions/nodesws) and on the
// local stack (LocalSockets). A node sends requests, each with an id the
// answer repeats; the service also sends an offer, unasked, when a lease
// wants a node of the pool, and a stop when environments the node runs
// are stopping. docs/nodes.md, "The node protocol", is the reference.
const (
	// Node -> service, and the answer's type.
	MsgHello      = "hello"      // -> registered
	MsgHeartbeat  = "heartbeat"  // -> beat
	MsgClaim      = "claim"      // -> claimed
	MsgReport     = "report"     // -> reported
	MsgRegistered = "registered" //
	MsgBeat       = "beat"       //
	MsgClaimed    = "claimed"    //
	MsgReported   = "reported"   //
	// MsgError answers a request that failed, with its status and code as
	// the HTTP endpoint would give them.
	MsgError = "error"
	// MsgOffer (service -> node, unasked): there is pending work in your
	// pool, possibly naming environments; claim.
	MsgOffer = "offer"
	// MsgStop (service -> node, unasked): the named environments are
	// stopping; tear them down and report each stopped, as for a
	// heartbeat answer's stopping state. Sent again by the stop job until
	// they have left stopping.
	MsgStop = "stop"
	// MsgPreviews (service -> node, unasked): the preview links Previews
	// of the environment Environment are revoked; refuse them. Heartbeat
	// answers name them too (EnvState.RevokedPreviews).
	MsgPreviews = "previews"
)

// Message is every message of the node protocol; Type says which fields
// mean something.
type Message struct {
	Type string `json:"type"`
	// ID is a request's id, repeated in its answer.
	ID string `json:"id,omitempty"`
	// Node is the node a request acts as (every request but a hello that
	// registers).
	Node string `json:"node,omitempty"`

	// hello: Register registers a new node (the answer is a registration,
	// with its tunnel key); without it the hello resumes Node, on a new
	// connection.
	Register *RegisterRequest `json:"register,omitempty"`

	// heartbeat: Changed are the environment ids the node started or
	// stopped running since its last answered beat (all it runs, on the
	// first beat of a connection); Running how many it runs now; Full
	// whether it has no free capacity, when that changed; Short whether it
	// is short of disk (so it can run nothing and claims only to fail),
	// when that changed (an older agent never says; it only says full);
	// Deadline the lost deadline of the last answer (zero: unknown, so
	// write it).
	Changed []string `json:"changed,omitempty"`
	Running int      `json:"running,omitempty"`
	// Active are the environments that were active on the node (what
	// their templates count as activity) since the node last said so:
	// their idle deadlines move (preview.go, touchActive).
	Active []string `json:"active,omitempty"`
	// Opened are the preview links opened since the last beat.
	Opened []PreviewOpened `json:"opened,omitempty"`
	// NetVersions are the versions of the environments' own network
	// layers the node applies (EnvNetwork.Version), of every environment
	// it runs behind a network boundary; on a beat that writes the
	// deadline, the service reads them and names, with its layer, each
	// whose layer is newer: a push that was lost is sent again.
	NetVersions map[string]int64 `json:"netVersions,omitempty"`
	Full        *bool            `json:"full,omitempty"`
	Short       *bool            `json:"short,omitempty"`
	Deadline    time.Time        `json:"deadline,omitzero"`

	// claim and report: the environment (a claim's is the one offered, to
	// try first); report: what became of it.
	Environment string  `json:"environment,omitempty"`
	Report      *Report `json:"report,omitempty"`
	// Only, on a claim, claims the named environment or nothing: a node
	// that takes an environment only to refuse it (it is short of disk)
	// must never be handed another one instead.
	Only bool `json:"only,omitempty"`
	// Max, on a claim, asks for up to Max environments in one claim (at
	// most MaxClaimBatch, and never past the node's free capacity): the
	// offered ones it names in Environments first, then pending ones. The
	// answer carries them in Claims. Without Max a claim takes one
	// environment (Environment), answered in Claimed.
	Max int `json:"max,omitempty"`

	// Answers.
	Registered *Registered         `json:"registered,omitempty"`
	Beat       *SocketBeat         `json:"beat,omitempty"`
	Claimed    *Claimed            `json:"claimed,omitempty"`
	Claims     []Claimed           `json:"claims,omitempty"`
	Record     *domain.Environment `json:"record,omitempty"`
	Error      *MessageError       `json:"error,omitempty"`

	// offer: the pool, and the environments that want a node; stop: the
	// environments to tear down; a claim with Max: the offered ones.
	Pool         string   `json:"pool,omitempty"`
	Environments []string `json:"environments,omitempty"`
	// previews: the revoked preview links of Environment.
	Previews []string `json:"previews,omitempty"`

	// checkpoint (the order, pushed), checkpointUpload and checkpointDone
	// (Checkpoint names it, Packed says what was packed), and their
	// answers: checkpoint.go.
	Checkpoint   *CheckpointOrder     `json:"checkpoint,omitempty"`
	Packed       *CheckpointPacked    `json:"packed,omitempty"`
	Uploading    *CheckpointUploading `json:"uploading,omitempty"`
	Checkpointed *domain.Checkpoint   `json:"checkpointed,omitempty"`

	// network (pushed, netlog.go): the environment's own network layer.
	Network *domain.EnvNetwork `json:"network,omitempty"`
}

// MessageError is a failed request's error, as the HTTP endpoint's status
// and body would carry it.
type MessageError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SocketBeat is the answer to a heartbeat on the node protocol.
type SocketBeat struct {
	// Deadline is the node's lost deadline now; send it with the next beat.
	Deadline time.Time `json:"deadline"`
	// Environments are the states of the environments the beat named and,
	// when the node runs any, of every environment assigned to it that is
	// starting, ready or stopping: the same rules as Beat.
	Environments []EnvState `json:"environments"`
	// Templates are the pool's templates, sent with the beats that moved
	// the deadline (about once a minute); absent otherwise.
	Templates []domain.Template `json:"templates,omitempty"`
	// BeatIn is how long after this answer the deadline is next due to be
	// written: a node with nothing to report sends no heartbeat before then
	// (a WebSocket ping keeps its connection meanwhile). It is relative, so
	// the node's clock need not agree with the service's.
	BeatIn domain.Duration `json:"beatIn"`
}
