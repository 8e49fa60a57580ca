package domain

import (
	"crypto/rand"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// State is the lifecycle state of an environment.
type State string

const (
	// StatePending: leased, waiting for a node of its pool to claim it.
	StatePending State = "pending"
	// StateStarting: a node claimed it and is starting it.
	StateStarting State = "starting"
	// StateReady: running; its exports can be reached.
	StateReady State = "ready"
	// StateStopping: deleted or timed out while a node runs it; the node tears it down.
	StateStopping State = "stopping"
	// StateStopped: over. Terminal.
	StateStopped State = "stopped"
	// StateFailed: the node could not start or keep it. Terminal.
	StateFailed State = "failed"
	// StatePaused: its template's idle action is pause and it went idle: its
	// files are kept as a checkpoint, it holds no node and no running quota
	// slot, and it wakes (back to pending, restored from that checkpoint) on
	// use. Not live. See docs/environments.md, "Pause on idle, wake on use".
	StatePaused State = "paused"
)

// States lists every state, in lifecycle order.
var States = []State{StatePending, StateStarting, StateReady, StateStopping, StateStopped, StateFailed, StatePaused}

// LiveStates are the states that hold a lease: they count in `running`.
var LiveStates = []State{StatePending, StateStarting, StateReady}

// Live reports whether s holds a lease.
func (s State) Live() bool { return s == StatePending || s == StateStarting || s == StateReady }

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Reasons an environment left the live states, recorded in stopReason: one
// vocabulary for stopped, failed (and paused) environments alike, the same
// in the API, the CLI, the console and the events (docs/environments.md,
// "Why it ended"; reasons.go maps the values stored before it).
const (
	// StopDeleted: deleted through the API (or the CLI, the console).
	StopDeleted = "deleted"
	// StopIdle: nothing its template counts as activity happened for its
	// idle timeout (its idleUntil passed).
	StopIdle = "idle"
	// StopExpired: its hard timeout (expires) passed.
	StopExpired = "expired"
	// StopHard is StopExpired, by the timeout's name.
	StopHard = StopExpired
	// StopBudget: a hard budget of its scope was spent (budgets.Run).
	StopBudget = "budget"
	// StopExited: its command ended on its own (stopped when it exited
	// 0, failed otherwise; error says how).
	StopExited = "exited"
	// StopOutOfMemory: it was killed at its memory limit.
	StopOutOfMemory = "out_of_memory"
	// StopOutOfDisk: it ended with its disk full (resources.disk).
	StopOutOfDisk = "out_of_disk"
	// StopFailed: its node could not start or keep it (an image, a
	// snapshot, a share, a port, a template gone; error says which).
	StopFailed = "failed"
	// StopNodeLost: its node stopped heartbeating.
	StopNodeLost = "node_lost"
	// StopNodeLeft: its node left the pool (deregistered).
	StopNodeLeft = "node_left"
	// StopNodeRevoked: its node's credential was revoked.
	StopNodeRevoked = "node_revoked"
	// StopRetention: it stayed paused past its template's retention and
	// was deleted with its checkpoint (timeouts.Run).
	StopRetention = "retention"
	// PauseIdle is why an environment is paused: it went idle and its
	// template's idle action is pause. The same word as StopIdle, so one
	// vocabulary says why an environment left its node.
	PauseIdle = StopIdle
)

// Idle actions of a template (Idle.Action): what the timeout job does
// with an environment that went idle.
const (
	IdleStop  = "stop"
	IdlePause = "pause"
)

// EnvExport is a service of an environment and where the sandbox reaches it.
type EnvExport struct {
	Service string `json:"service"`
	// Listen is the address the sandbox listens on for this service.
	Listen string `json:"listen"`
	// Target is the node's address for the service; empty until a node runs it.
	Target string `json:"target"`
}

// EnvShare is a folder of the client shared into an environment.
type EnvShare struct {
	Name      string   `json:"name"`
	Direction string   `json:"direction"`
	EnvPath   string   `json:"envPath"`
	LocalPath string   `json:"localPath"`
	Files     []string `json:"files"`
	// Artifact is the sealed tar.zst of the share's files that the node
	// unpacks at EnvPath before the command starts; empty when the lease
	// sent names only.
	Artifact string `json:"artifact"`
}

// Restored describes the snapshot an environment was restored from.
type Restored struct {
	Key     string    `json:"key"`
	Root    string    `json:"root"`
	Files   int       `json:"files"`
	Created time.Time `json:"created"`
}

// Environment is a leased environment (spec 2.1). Every field of the spec is
// always present in JSON; timestamps not reached yet are null.
type Environment struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Template  string            `json:"template"`
	State     State             `json:"state"`
	Node      string            `json:"node"`
	Sandbox   string            `json:"sandbox"`
	Pool      string            `json:"pool"`
	Labels    map[string]string `json:"labels"`
	Project   string            `json:"project"`
	ReadyMs   *int64            `json:"readyMs"`
	Error     string            `json:"error"`
	CreatedBy string            `json:"createdBy"`
	Created   time.Time         `json:"created"`
	Ready     *time.Time        `json:"ready"`
	Stopped   *time.Time        `json:"stopped"`
	Expires   time.Time         `json:"expires"`
	IdleUntil time.Time         `json:"idleUntil"`
	Idle      Duration          `json:"idle"`
	Hard      Duration          `json:"hard"`
	Exports   []EnvExport       `json:"exports"`
	Shares    []EnvShare        `json:"shares"`
	Snapshot  string            `json:"snapshot"`
	Restored  *Restored         `json:"restored"`
	// StopReason is added to the spec's record: why it left the live states
	// (deleted, idle, expired, or a node's report); empty while live.
	StopReason string `json:"stopReason"`
	// Log is the artifact that keeps the environment's log once it ended
	// (its node uploads it), "" until then. See docs/api.md, "Logs".
	Log string `json:"log"`
	// NetworkLog is the artifact that keeps its network log once it ended,
	// for templates with network open or rules (docs/nodes.md, "Network
	// boundary"); absent until then.
	NetworkLog string `json:"networkLog,omitempty"`
	// Network is its own layer of its network policy (EnvNetwork), absent
	// when it has none (its template's policy alone).
	Network *EnvNetwork `json:"network,omitempty"`
	// Checkpoint is added to the spec's record: the latest checkpoint asked
	// of it (POST /v1/environments/{id}/checkpoints); absent if none.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Identity is its template's identity at lease (audiences, lifetime):
	// the tokens its node fetches for it (docs/identity.md); absent for none.
	Identity *TemplateIdentity `json:"identity,omitempty"`
	// OnIdle is its template's idle action when leased ("pause"; absent:
	// stop), kept on the record so the timeout job decides without reading
	// the template; Retention is how long it may stay paused.
	OnIdle    string   `json:"onIdle,omitempty"`
	Retention Duration `json:"retention,omitempty"`
	// PausedAt is when it was last paused, RetainUntil when a paused
	// environment is deleted unless woken, Resumed when it last woke (its
	// compute time runs from then: RunSince).
	PausedAt    *time.Time `json:"pausedAt,omitempty"`
	RetainUntil *time.Time `json:"retainUntil,omitempty"`
	Resumed     *time.Time `json:"resumed,omitempty"`

	OrgID string `json:"-"`
	// Ports are the sandbox listen ports this environment holds; the stop
	// transaction releases them.
	Ports []int `json:"-"`
	// Version counts writes to the record; a stop replaces the item only if
	// no other write came between its read and its write.
	Version int64 `json:"-"`
	// Needs is what a node must offer to run it: its template's runtime and
	// platforms at lease, kept on the record so a claim decides without
	// reading the template.
	Needs Needs `json:"-"`
	// UsageBy are the groupings of usage (usage.Dimension: "project", "user",
	// "label:KEY") the organization enabled when it was leased: its stop adds
	// its seconds to one ledger item per grouping, and no more.
	UsageBy []string `json:"-"`
	// Previews are its preview links, live and revoked (until they would
	// have expired), listed by GET /v1/environments/{id}/previews.
	Previews []Preview `json:"-"`
}

// Normalize replaces nil collections with empty ones so JSON shows [] and {}.
func (e *Environment) Normalize() {
	if e.Labels == nil {
		e.Labels = map[string]string{}
	}
	if e.Exports == nil {
		e.Exports = []EnvExport{}
	}
	if e.Shares == nil {
		e.Shares = []EnvShare{}
	}
	for i := range e.Shares {
		if e.Shares[i].Files == nil {
			e.Shares[i].Files = []string{}
		}
	}
}

// Due is when the environment must stop unless touched: the earlier of its
// idle deadline and its hard expiry.
func (e Environment) Due() time.Time {
	if e.State == StatePaused && e.RetainUntil != nil {
		// Paused: its retention or its hard expiry, whichever comes first.
		if e.RetainUntil.Before(e.Expires) {
			return *e.RetainUntil
		}
		return e.Expires
	}
	if e.IdleUntil.Before(e.Expires) {
		return e.IdleUntil
	}
	return e.Expires
}

// RunSince is when its current run began: the lease, or its last wake.
// Compute time (usage) accrues from it while it is live; the time before a
// pause was added to usage when it paused.
func (e Environment) RunSince() time.Time {
	if e.Resumed != nil && e.Resumed.After(e.Created) {
		return *e.Resumed
	}
	return e.Created
}

// Pauses says whether going idle pauses e rather than stopping it.
func (e Environment) Pauses() bool { return e.OnIdle == IdlePause }

// SandboxConfig is the sandbox's new configuration returned with a lease:
// what the client on that machine needs to forward the exports and sync the
// shares of this environment.
type SandboxConfig struct {
	// Sandbox is the sandbox id; empty when the lease named none.
	Sandbox     string      `json:"sandbox"`
	Environment string      `json:"environment"`
	Exports     []EnvExport `json:"exports"`
	Shares      []EnvShare  `json:"shares"`
	// Node is the address of the node running the environment, empty until a
	// node claims it; the client reads Status until the state is ready.
	Node string `json:"node"`
	// Status is the control-plane path to poll for the environment's state.
	Status string `json:"status"`
	// Touch is the path to call while a command runs, to move idleUntil.
	Touch string `json:"touch"`
}

// ConfigFor builds the sandbox configuration of an environment.
func ConfigFor(e Environment) SandboxConfig {
	return SandboxConfig{
		Sandbox: e.Sandbox, Environment: e.ID, Exports: e.Exports, Shares: e.Shares, Node: e.Node,
		Status: "/v1/environments/" + e.ID, Touch: "/v1/environments/" + e.ID + "/touch",
	}
}

// Lease is what the store writes for one lease, in one transaction.
type Lease struct {
	Env Environment
	// Idempotency, when set, is recorded in the same transaction.
	Idempotency *IdempotencyRecord
	// BudgetKeys, when set, are checked in the same transaction against the
	// organization's spent budgets (usage.LeaseBlockKeys).
	BudgetKeys []string
}

// IdempotencyRecord remembers the response of a lease made with an
// Idempotency-Key, so a retry gets the same answer and leases nothing.
type IdempotencyRecord struct {
	OrgID       string
	Key         string
	RequestHash string
	Status      int
	Body        []byte
	Created     time.Time
	Expires     time.Time
}

// Errors the store reports to the leasing rules, which turn them into answers.
var (
	// ErrListenPortTaken: another live environment of the sandbox holds a
	// chosen listen port; the service picks others and retries.
	ErrListenPortTaken = errors.New("a listen port of the sandbox is taken")
	// ErrIdempotencyKeyUsed: a record for the Idempotency-Key exists.
	ErrIdempotencyKeyUsed = errors.New("idempotency key already used")
	// ErrPausedQuotaFull: a pause would take the template past its
	// quota.maxPaused; the environment is stopped instead.
	ErrPausedQuotaFull = errors.New("the template's quota of paused environments is full")
)

// EnvQuery selects a page of environments.
type EnvQuery struct {
	// State is a state, or "live" (the default) for pending, starting and ready.
	State string
	Limit int
	// Cursor is the opaque `next` of the previous page.
	Cursor string
}

// EnvPage is one page of a listing.
type EnvPage struct {
	Environments []Environment
	// Next is the cursor of the following page; empty on the last.
	Next string
}

// ValidateText checks a free-text field: at most max bytes, UTF-8, no control characters.
func ValidateText(field, v string, max int) error {
	if len(v) > max {
		return Invalid(field, "%s must be at most %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return Invalid(field, "%s must be UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return Invalid(field, "%s must not contain control characters", field)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s...", s[:n])
}

// QuotaCount is a template's stored limit and live count.
type QuotaCount struct {
	Template  string
	MaxLeases int
	Running   int
	// MaxPaused and Paused are the limit and count of paused environments
	// (StatePaused), apart from the running ones.
	MaxPaused int
	Paused    int
	// Idle and Hard are the template's default timeouts, kept beside the
	// limit so the quotas endpoint is one query.
	Idle, Hard Duration
}

// SortableID returns prefix + a fixed-width creation time (milliseconds, hex)
// + 12 random characters, so ids sort by creation and never collide in practice.
func SortableID(prefix string, t time.Time) string {
	const alphabet = "0123456789abcdefghijklmnopqrstuv" // 32 symbols: a byte's low 5 bits map evenly
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error()) // no entropy: nothing safe to do
	}
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return fmt.Sprintf("%s%011x%s", prefix, t.UnixMilli(), b[:])
}

// EnvRecordKept is how long a stopped or failed environment's record stays
// readable (GET, the stopped and failed listings) after it stopped; DynamoDB
// TTL deletes it later. Usage is kept apart, in the usage ledger, for as long
// as usage is reported.
const EnvRecordKept = 30 * 24 * time.Hour

// PurgeAt is when a stopped or failed environment's record is gone: stopped
// (or, for a record without that instant, created) plus EnvRecordKept. Live
// and stopping environments are never purged (ok false).
func (e Environment) PurgeAt() (time.Time, bool) {
	if e.State.Live() || e.State == StateStopping || e.State == StatePaused {
		return time.Time{}, false
	}
	from := e.Created
	if e.Stopped != nil {
		from = *e.Stopped
	}
	return from.Add(EnvRecordKept), true
}

// Purged reports whether e's record is past its keeping at now. DynamoDB TTL
// deletes late (and emulators never), so readers ask this rather than rely
// on the record being gone.
func (e Environment) Purged(now time.Time) bool {
	at, ok := e.PurgeAt()
	return ok && !now.Before(at)
}
