// Package nodes is the node side of the control plane (/v1/nodes): an admin
// issues a node credential for one of the organization's pools; an agent
// holding it registers a node, heartbeats, claims pending environments of the
// pool, and reports what became of them. Nodes that stop heartbeating are
// declared lost by SweepLostNodes, which runs on its own schedule.
//
// Every write that must be exact under concurrency is one conditional
// DynamoDB call in the store: a claim is a versioned write conditioned on
// the environment still being pending (two nodes never take the same one),
// and leaving the live states always goes through store.StopEnvironment,
// which releases the quota exactly once.
package nodes

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// Store is what the nodes service needs from persistence.
type Store interface {
	GetOrg(ctx context.Context, id string) (domain.Org, error)
	PutKey(ctx context.Context, k domain.APIKey) error
	ListTemplates(ctx context.Context, org string) ([]domain.Template, error)
	GetTemplate(ctx context.Context, org, name string) (domain.Template, error)
	GetArtifact(ctx context.Context, org, id string) (domain.Artifact, error)

	PutNode(ctx context.Context, n domain.Node, keyHash string) error
	GetNode(ctx context.Context, org, id string) (domain.Node, error)
	GetNodeWithCredential(ctx context.Context, org, id, keyHash string) (domain.Node, error)
	ListNodes(ctx context.Context, org string) ([]domain.Node, error)
	KeyNodes(ctx context.Context, org, keyID string) ([]domain.Node, error)
	HeartbeatNode(ctx context.Context, n domain.Node, now, deadline time.Time) (domain.Node, error)
	BeatNode(ctx context.Context, org, id string, cred domain.Principal, now, deadline time.Time) (domain.Node, error)
	EndNode(ctx context.Context, n domain.Node, state string, now time.Time) (bool, error)
	NodeDuePartitions() []string
	DueNodes(ctx context.Context, part string, now time.Time, limit int, cursor string) ([]domain.Node, string, error)
	ReindexNode(ctx context.Context, n domain.Node) error

	GetEnvironment(ctx context.Context, org, id string) (domain.Environment, error)
	GetEnvironments(ctx context.Context, org string, ids []string) ([]domain.Environment, error)
	// TouchEnvironment moves an environment's idle deadline, for the
	// requests its preview links carried (preview.go).
	TouchEnvironment(ctx context.Context, e domain.Environment, idleUntil time.Time) (domain.Environment, bool, error)
	// PutEvent records the openings of preview links (preview.go).
	PutEvent(ctx context.Context, ev domain.Event) error
	// PendingEnvironments reads the pool's pending environments of one
	// class (domain.Needs.Class), oldest first.
	PendingEnvironments(ctx context.Context, org, pool, class string, limit int) ([]domain.Environment, error)
	NodeEnvironments(ctx context.Context, org, node string) ([]domain.Environment, error)
	// NodeHolding reads what a node holds for a claim of it: its
	// environments, strongly consistent, and the node with its claim
	// fence's Held cut to them.
	NodeHolding(ctx context.Context, n domain.Node) ([]domain.Environment, domain.Node, error)
	// NodeListed is the ids the node's index lists (one Query), and
	// NodeHoldingListed NodeHolding with them read already: a batch claim
	// reads the index beside the node (claimReads).
	NodeListed(ctx context.Context, org, node string) ([]string, error)
	NodeHoldingListed(ctx context.Context, n domain.Node, listed []string) ([]domain.Environment, domain.Node, error)
	ClaimEnvironment(ctx context.Context, e domain.Environment, n domain.Node, keyHash string, now time.Time) (domain.Environment, bool, error)
	// ClaimEnvironments claims many for one node in one transaction
	// (a batch claim), leaving out those refused.
	ClaimEnvironments(ctx context.Context, es []domain.Environment, n domain.Node, keyHash string, now time.Time) (claimed []domain.Environment, refused []string, err error)
	ReplaceEnvironment(ctx context.Context, before, after domain.Environment) (domain.Environment, bool, error)
	StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error)
	// PutEnvMetrics keeps an ended environment's coarse metrics history.
	PutEnvMetrics(ctx context.Context, org, id string, samples []domain.MetricSample, purge time.Time) error
}

// Linker signs snapshot download links (artifacts.Service.LinkFor).
type Linker interface {
	LinkFor(ctx context.Context, a domain.Artifact, ttl time.Duration) (domain.Link, error)
}

// Stop reasons a node's side records, of domain's one vocabulary
// (domain.StopReasons).
const (
	// StopFailed: the node reported the environment failed without saying
	// why more precisely (Report.Reason).
	StopFailed = domain.StopFailed
	// StopByNode: the node reported it stopped while it was live: its
	// command ended.
	StopByNode = domain.StopExited
	// StopLost: its node stopped heartbeating.
	StopLost = domain.StopNodeLost
	// StopLeft: its node deregistered.
	StopLeft = domain.StopNodeLeft
	// StopRevoked: its node's credential was revoked.
	StopRevoked = domain.StopNodeRevoked
)

// ErrorNodeLost is the error of an environment whose node was lost.
const ErrorNodeLost = "node lost"

// ErrorNodeRevoked is the error of an environment whose node's credential
// was revoked.
const ErrorNodeRevoked = "the node's credential was revoked"

// Defaults; every one is documented in docs/nodes.md (Nodes and their API).
const (
	// DefaultHeartbeatInterval is how often agents are told to heartbeat.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultLostAfter is how long a node may go without a heartbeat before
	// it is lost: six missed heartbeats, so a slow network does not kill work.
	DefaultLostAfter = 60 * time.Second
	// DefaultDeadlineEvery is how often a heartbeat on the node protocol
	// writes the node's lost deadline: a beat in between that reports no
	// change costs no DynamoDB call. Such a node's deadline is set
	// DeadlineEvery + LostAfter ahead, so it is still lost LostAfter after
	// the write it missed.
	DefaultDeadlineEvery = time.Minute
	// MaxClaimWait bounds a claim's long poll, under the Lambda's 28 s timeout
	// and API Gateway's 30 s.
	MaxClaimWait = 20 * time.Second
	// DefaultPollMin and DefaultPollMax bound the backoff between looks at the
	// pool's pending index during a long poll: a lease waits at most
	// PollMax to be seen, and an idle node costs about two queries a second.
	DefaultPollMin = 25 * time.Millisecond
	DefaultPollMax = 500 * time.Millisecond
	// SnapshotLinkTTL is the life of the links a claim carries (a snapshot,
	// the shares' archives): long enough to download, short enough not to
	// matter if one leaks.
	SnapshotLinkTTL = 30 * time.Minute
	// MaxErrorBytes bounds a reported error text; a longer one keeps its
	// start and its end (CleanError).
	MaxErrorBytes = 4000
	// MaxCapacity bounds a node's declared capacity.
	MaxCapacity = 10000
	// claimCandidates is how many pending environments one look considers.
	claimCandidates = 10
	// sweepPage is how many due nodes the sweep reads at once, and
	// sweepShardWorkers how many due-index partitions it works at once.
	sweepPage         = 25
	sweepShardWorkers = 8
	// attempts bounds retries of a versioned write that lost a race.
	attempts = 5
)

// Options tune the service; zero values take the defaults.
type Options struct {
	HeartbeatInterval time.Duration
	LostAfter         time.Duration
	DeadlineEvery     time.Duration
	PollMin, PollMax  time.Duration
	// SocketURL is where nodes open the node protocol's WebSocket
	// (ws:// or wss://); registration tells them. Empty: nowhere, they use
	// the HTTP endpoints.
	SocketURL string
	// ClassesTTL is how long the pool's template classes are reused by
	// claims (DefaultClassesTTL).
	ClassesTTL time.Duration
	// Secrets opens the secrets an environment's template binds, for the
	// node that runs it (nil: the API holds none).
	Secrets SecretOpener
	// Teller, when set, tells a node at once that an environment it runs
	// paused or stopped on idle (Stopper.Stop), so it frees its capacity
	// without waiting for the stop job's resend (nil: the stop job tells
	// it).
	Teller StopTeller
}

// StopTeller tells an environment's node to tear it down (Stopper).
type StopTeller interface {
	Stop(ctx context.Context, e domain.Environment)
}

// Service holds the node rules.
type Service struct {
	store Store
	links Linker
	clock clock.Clock
	opt   Options

	classes classCache
}

// NewService returns the nodes service. links may be nil where no snapshot
// can be leased (a claim of one then fails the environment).
func NewService(st Store, links Linker, clk clock.Clock, opt Options) *Service {
	if opt.HeartbeatInterval <= 0 {
		opt.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opt.LostAfter <= 0 {
		opt.LostAfter = DefaultLostAfter
	}
	if opt.DeadlineEvery <= 0 {
		opt.DeadlineEvery = DefaultDeadlineEvery
	}
	if opt.PollMin <= 0 {
		opt.PollMin = DefaultPollMin
	}
	if opt.PollMax <= 0 {
		opt.PollMax = DefaultPollMax
	}
	if opt.ClassesTTL <= 0 {
		opt.ClassesTTL = DefaultClassesTTL
	}
	return &Service{store: st, links: links, clock: clk, opt: opt}
}

// CredentialHeir is what a node credential carries of its maker: no scopes
// and no restrictions, which its rights are beyond, so a scoped or
// restricted maker is refused.
var CredentialHeir = auth.Heir{What: "a node credential", ActsWith: domain.AllScopes}

// IssueCredential issues a node credential for one of the organization's
// pools. Admins only. The token serves the node API and nothing else.

func (s *Service) IssueCredential(ctx context.Context, p domain.Principal, pool, name string) (keys.Issued, error) {
	if !p.IsAdmin() || p.Credential == domain.CredentialNode {
		return keys.Issued{}, domain.Errorf(domain.CodeForbidden, "only an organization admin can issue node credentials")
	}
	if err := keys.ValidateName(name); err != nil {
		return keys.Issued{}, err
	}
	if pool == "" {
		return keys.Issued{}, domain.Invalid("pool", "pool is required")
	}
	org, err := s.store.GetOrg(ctx, p.OrgID)
	if err != nil {
		return keys.Issued{}, err
	}
	if !slices.Contains(org.Pools, pool) {
		return keys.Issued{}, domain.Invalid("pool", "pool %q is not one of your organization's pools (%s)", pool, strings.Join(org.Pools, ", "))
	}
	// A node credential can claim any of the pool's environments and
	// receives their exec sessions and tunnels: only a token with every
	// right may make one, and a scoped maker's expiry carries over.
	lim, err := auth.Inherit(p, CredentialHeir, auth.Limits{})
	if err != nil {
		return keys.Issued{}, err
	}
	token, k := keys.NewKey(p, name, "api", auth.PrefixNode, domain.APIKey{
		Owner: domain.Owner{Kind: "pool", ID: pool}, Credential: domain.CredentialNode, Pool: pool,
		Expires: lim.Expires,
	}, s.clock.Now())
	if err := s.store.PutKey(ctx, k); err != nil {
		return keys.Issued{}, err
	}
	return keys.Issued{Token: token, APIKey: k}, nil
}

// RegisterRequest is the body of POST /v1/nodes.
type RegisterRequest struct {
	Name string `json:"name"`
	// Address is the host (IP or DNS name, no port) clients reach the
	// node's environments at.
	Address  string `json:"address"`
	Capacity int    `json:"capacity"`
	Agent    string `json:"agent"`
	// TunnelURL is where the agent serves tunnels (ws:// or wss://, ending
	// in its path); empty when it serves none.
	TunnelURL string `json:"tunnelURL"`
	// Platform is the node's os/arch (linux/amd64, linux/arm64); a node
	// that does not say is taken to run any platform.
	Platform string `json:"platform"`
	// Runtimes are the runtimes the node offers (process, container);
	// none means process.
	Runtimes []string `json:"runtimes"`
}

// Registered is the answer to a registration: the node, what its pool runs,
// and the timing the agent must keep.
type Registered struct {
	Node      domain.Node       `json:"node"`
	Templates []domain.Template `json:"templates"`
	// HeartbeatInterval is how often to heartbeat; LostAfter is how long
	// without one before the node is lost and its environments failed.
	HeartbeatInterval domain.Duration `json:"heartbeatInterval"`
	LostAfter         domain.Duration `json:"lostAfter"`
	// ClaimWait is the longest a claim long-polls.
	ClaimWait domain.Duration `json:"claimWait"`
	// Organization is the node's organization, which tunnel tickets name.
	Organization string `json:"organization"`
	// TunnelKey (base64url, no padding) is the key the service signs this
	// node's tunnel tickets with; the agent checks them with it. Only this
	// answer ever carries it.
	TunnelKey string `json:"tunnelKey"`
	// SocketURL is where the node protocol's WebSocket is served; empty
	// when it is not (the node uses heartbeat and claim over HTTP).
	SocketURL string `json:"socketURL"`
}

// Register records a new node of the credential's pool. Each registration
// is a new node: an agent that restarts registers again, and the node it was
// before is lost after LostAfter, failing what it ran.
func (s *Service) Register(ctx context.Context, p domain.Principal, req RegisterRequest) (Registered, error) {
	if req.Name == "" {
		req.Name = "node"
	}
	if err := domain.ValidateText("name", req.Name, 100); err != nil {
		return Registered{}, err
	}
	if err := validateAddress(req.Address); err != nil {
		return Registered{}, err
	}
	if req.Capacity < 1 || req.Capacity > MaxCapacity {
		return Registered{}, domain.Invalid("capacity", "capacity must be between 1 and %d environments", MaxCapacity)
	}
	if err := domain.ValidateText("agent", req.Agent, 200); err != nil {
		return Registered{}, err
	}
	if err := validateTunnelURL(req.TunnelURL); err != nil {
		return Registered{}, err
	}
	if err := validateCapabilities(&req); err != nil {
		return Registered{}, err
	}
	key := make([]byte, ticket.KeySize)
	if _, err := rand.Read(key); err != nil {
		return Registered{}, domain.Internal(fmt.Errorf("tunnel key: %w", err))
	}
	now := s.clock.Now()
	n := domain.Node{
		ID: domain.SortableID("node_", now), Name: req.Name, Pool: p.Pool, Address: req.Address,
		Capacity: req.Capacity, State: domain.NodeActive, Agent: req.Agent, Registered: now,
		LastHeartbeat: now, Deadline: now.Add(s.opt.LostAfter), OrgID: p.OrgID, KeyID: p.KeyID, Version: 1,
		TunnelURL: req.TunnelURL, TunnelKey: key, Platform: req.Platform, Runtimes: req.Runtimes,
	}
	if err := s.store.PutNode(ctx, n, recheck(p)); err != nil {
		return Registered{}, err
	}
	ts, err := s.poolTemplates(ctx, n)
	if err != nil {
		return Registered{}, err
	}
	return Registered{
		Node: n, Templates: ts, HeartbeatInterval: domain.Duration(s.opt.HeartbeatInterval),
		LostAfter: domain.Duration(s.opt.LostAfter), ClaimWait: domain.Duration(MaxClaimWait),
		Organization: p.OrgID, TunnelKey: base64.RawURLEncoding.EncodeToString(key), SocketURL: s.opt.SocketURL,
	}, nil
}

// validateTunnelURL accepts an empty URL (no tunnels) or a ws:// or wss://
// URL with a host and no credentials, query or fragment: clients dial it as
// given, with their ticket in a header.
func validateTunnelURL(v string) error {
	if v == "" {
		return nil
	}
	if err := domain.ValidateText("tunnelURL", v, 300); err != nil {
		return err
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return domain.Invalid("tunnelURL", "tunnelURL must be a ws:// or wss:// URL with a host, such as ws://10.0.3.7:7443/tunnel, without credentials, query or fragment")
	}
	return nil
}

func validateAddress(a string) error {
	if a == "" {
		return domain.Invalid("address", "address is required: the host (IP or DNS name) clients reach this node at")
	}
	if len(a) > 253 || strings.ContainsAny(a, " /\\@#?[]") || !utf8.ValidString(a) {
		return domain.Invalid("address", "address must be a host name or IP address without port or scheme")
	}
	if net.ParseIP(a) == nil {
		if _, _, err := net.SplitHostPort(a); err == nil {
			return domain.Invalid("address", "address must be a host without a port: the ports are the environments'")
		}
	}
	if err := domain.ValidateText("address", a, 253); err != nil {
		return err
	}
	return nil
}

// poolTemplates are the organization's templates that the node's pool runs.
func (s *Service) poolTemplates(ctx context.Context, n domain.Node) ([]domain.Template, error) {
	all, err := s.store.ListTemplates(ctx, n.OrgID)
	if err != nil {
		return nil, err
	}
	out := []domain.Template{}
	for _, t := range all {
		if slices.Contains(t.Pools, n.Pool) {
			out = append(out, t.Normalized())
		}
	}
	return out, nil
}

// List returns the organization's nodes, for an admin.
func (s *Service) List(ctx context.Context, p domain.Principal) ([]domain.Node, error) {
	ns, err := s.store.ListNodes(ctx, p.OrgID)
	if err != nil {
		return nil, err
	}
	if ns == nil {
		ns = []domain.Node{}
	}
	return ns, nil
}

// recheck is the key hash the writes of p's request check unrevoked: p's
// own when it was authenticated before the request (a node protocol
// connection's), none when the request's own authentication just read it.
func recheck(p domain.Principal) string {
	if p.Recheck {
		return p.KeyHash
	}
	return ""
}

// ownNode reads the node a node credential acts as. Only the credential that
// registered it may: another organization's, another pool's or another
// credential's node is 404, as if it did not exist. A principal authenticated
// before the request (a node protocol connection's) has its key record read
// in the same call, and is refused once it is revoked.
func (s *Service) ownNode(ctx context.Context, p domain.Principal, id string) (domain.Node, error) {
	if !strings.HasPrefix(id, "node_") || len(id) > 64 || strings.ContainsAny(id, "#/ ") {
		return domain.Node{}, domain.NotFound("node")
	}
	var (
		n   domain.Node
		err error
	)
	if p.Recheck {
		n, err = s.store.GetNodeWithCredential(ctx, p.OrgID, id, p.KeyHash)
	} else {
		n, err = s.store.GetNode(ctx, p.OrgID, id)
	}
	if err != nil {
		return domain.Node{}, err
	}
	if n.Pool != p.Pool || n.KeyID != p.KeyID {
		return domain.Node{}, domain.NotFound("node")
	}
	return n, nil
}

func (s *Service) activeNode(ctx context.Context, p domain.Principal, id string) (domain.Node, error) {
	n, err := s.ownNode(ctx, p, id)
	if err != nil {
		return n, err
	}
	if n.State != domain.NodeActive {
		return domain.Node{}, domain.Errorf(domain.CodeGone, "node %s is %s; its environments were failed; register again", n.ID, n.State)
	}
	return n, nil
}

// EnvState is what a heartbeat tells a node about one of its environments.
type EnvState struct {
	ID       string       `json:"id"`
	Template string       `json:"template"`
	State    domain.State `json:"state"`
	Error    string       `json:"error"`
	// Checkpoint is set while a checkpoint of the (ready) environment is
	// asked for: pack it (checkpoint.go).
	Checkpoint *CheckpointOrder `json:"checkpoint,omitempty"`
	// Network is the live environment's own network layer, if it has
	// one, so a node that missed its push applies it (netlog.go).
	Network *domain.EnvNetwork `json:"network,omitempty"`
	// RevokedPreviews are the ids of the environment's revoked preview
	// links whose tokens have not expired: the node refuses them.
	RevokedPreviews []string `json:"revokedPreviews,omitempty"`
}

// Beat is the answer to a heartbeat.
type Beat struct {
	Node domain.Node `json:"node"`
	// Environments are the states of the environments the node named and of
	// every environment assigned to it that is starting, ready or stopping.
	// stopping: tear it down and report stopped. stopped or failed: it is
	// over; stop it without a report. A named id absent here is not the
	// node's to run: stop it.
	Environments []EnvState `json:"environments"`
	// Templates are the pool's templates now, for warm environments.
	Templates []domain.Template `json:"templates"`
}

// MaxHeartbeatIDs bounds the environment ids one heartbeat may name.
const MaxHeartbeatIDs = 1000

// Heartbeat records that the node is alive, moving its lost deadline, and
// tells it the desired state of its environments: that is how a node learns
// that one it runs was deleted or timed out (stopping).
func (s *Service) Heartbeat(ctx context.Context, p domain.Principal, id string, ids []string) (Beat, error) {
	if len(ids) > MaxHeartbeatIDs {
		return Beat{}, domain.Invalid("environments", "at most %d environment ids per heartbeat", MaxHeartbeatIDs)
	}
	n, err := s.ownNode(ctx, p, id)
	if err != nil {
		return Beat{}, err
	}
	now := s.clock.Now()
	if n, err = s.store.HeartbeatNode(ctx, n, now, now.Add(s.opt.LostAfter)); err != nil {
		return Beat{}, err
	}
	var named []domain.Environment
	if len(ids) > 0 {
		valid := make([]string, 0, len(ids))
		for _, x := range ids {
			if strings.HasPrefix(x, "env_") && len(x) <= 64 && !strings.ContainsAny(x, "#/ ") {
				valid = append(valid, x)
			}
		}
		if named, err = s.store.GetEnvironments(ctx, n.OrgID, valid); err != nil {
			return Beat{}, err
		}
	}
	assigned, err := s.store.NodeEnvironments(ctx, n.OrgID, n.ID)
	if err != nil {
		return Beat{}, err
	}
	out := []EnvState{}
	seen := map[string]bool{}
	// The named ones are read strongly consistent, so they come first and win.
	for _, e := range append(named, assigned...) {
		if e.Node != n.ID || seen[e.ID] {
			continue // another node's: not this node's business
		}
		seen[e.ID] = true
		out = append(out, s.envState(e))
	}
	ts, err := s.poolTemplates(ctx, n)
	if err != nil {
		return Beat{}, err
	}
	return Beat{Node: n, Environments: out, Templates: ts}, nil
}

// Claim takes the oldest pending environment of the node's pool and moves it
// to starting on this node. When nothing is pending it looks again, with
// backoff, for up to wait (at most MaxClaimWait) or until the request ends,
// and then returns nil: nothing to do, claim again.
func (s *Service) Claim(ctx context.Context, p domain.Principal, id string, wait time.Duration) (*Claimed, error) {
	n, err := s.activeNode(ctx, p, id)
	if err != nil {
		return nil, err
	}
	wait = min(max(wait, 0), MaxClaimWait)
	runs, n, err := s.store.NodeHolding(ctx, n)
	if err != nil {
		return nil, err
	}
	if len(runs) >= n.Capacity {
		return nil, domain.Errorf(domain.CodeConflict, "node %s is at its capacity of %d environment(s); claim again when one has stopped", n.ID, n.Capacity)
	}
	// The wait is the request's own duration, so it is measured on the real
	// clock, not the service clock (which tests move by hand).
	deadline := time.Now().Add(wait)
	backoff := s.opt.PollMin
	for {
		c, err := s.claimOnce(ctx, p.KeyHash, n)
		if err != nil || c != nil {
			return c, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil // the node went away: nothing was claimed for it
		case <-t.C:
		}
		backoff = min(backoff*2, s.opt.PollMax)
	}
}

// claimOnce looks at the pool's pending index once and claims the first
// environment it can. The index may be stale (DynamoDB GSIs are eventually
// consistent), so a refused claim reads the base item and tries again while
// it is still pending; another node having it is simply the next candidate.
func (s *Service) claimOnce(ctx context.Context, keyHash string, n domain.Node) (*Claimed, error) {
	cands, err := s.pending(ctx, n, claimCandidates)
	if err != nil {
		return nil, err
	}
	return s.claimFirst(ctx, keyHash, n, cands)
}

// claimRandom is claimOnce for nodes woken together on the node protocol:
// every woken node reads the same oldest few pending, so each tries them in
// its own random order rather than all racing for the oldest. (The HTTP
// long-poll keeps strict age order.)
func (s *Service) claimRandom(ctx context.Context, keyHash string, n domain.Node) (*Claimed, error) {
	cands, err := s.pending(ctx, n, claimCandidates)
	if err != nil {
		return nil, err
	}
	mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return s.claimFirst(ctx, keyHash, n, cands)
}

// claimFirst claims the first of cands it can, in order. keyHash, when set,
// is the node credential's record, checked unrevoked by each claim.
func (s *Service) claimFirst(ctx context.Context, keyHash string, n domain.Node, cands []domain.Environment) (*Claimed, error) {
	return s.claimFirstWith(ctx, keyHash, n, cands, s.readTemplate)
}

// claimFirstWith is claimFirst reading templates through tmpl (a batch
// reads each template once).
func (s *Service) claimFirstWith(ctx context.Context, keyHash string, n domain.Node, cands []domain.Environment, tmpl templateFunc) (*Claimed, error) {
	for _, e := range cands {
		// What an environment needs never changes, and the claim's write is
		// conditioned on the version read, so this check holds for the write.
		for try := 0; try < attempts && e.State == domain.StatePending && e.Node == "" && e.Pool == n.Pool && n.Runs(e.Needs); try++ {
			after, ok, err := s.store.ClaimEnvironment(ctx, e, n, keyHash, s.clock.Now())
			if errors.Is(err, domain.ErrClaimRaced) {
				// Another claim of this node came first: read what it
				// holds now and try this one again.
				if n, err = s.roomOf(ctx, n); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			if ok {
				n = holds(n, after.ID)
				c, err := s.prepare(ctx, after, tmpl)
				if err != nil || c != nil {
					return c, err
				}
				break // it could not be run and was failed: next candidate
			}
			if e, err = s.store.GetEnvironment(ctx, n.OrgID, e.ID); err != nil {
				if domain.ErrorCode(err) == domain.CodeNotFound {
					break
				}
				return nil, err
			}
		}
	}
	return nil, nil
}

// roomOf reads node n again with what it holds, after another claim of it
// overtook one of ours: refused when it is no longer active or has no room
// left.
func (s *Service) roomOf(ctx context.Context, n domain.Node) (domain.Node, error) {
	cur, err := s.store.GetNode(ctx, n.OrgID, n.ID)
	if err != nil {
		return domain.Node{}, err
	}
	if cur.State != domain.NodeActive {
		return domain.Node{}, domain.Errorf(domain.CodeGone, "node %s is %s; its environments were failed; register again", n.ID, cur.State)
	}
	runs, cur, err := s.store.NodeHolding(ctx, cur)
	if err != nil {
		return domain.Node{}, err
	}
	if len(runs) >= cur.Capacity {
		return domain.Node{}, atCapacity(cur)
	}
	return cur, nil
}

// holds is n after a claim of ids committed: its fence moved on, and they
// held.
func holds(n domain.Node, ids ...string) domain.Node {
	n.Claims.Seq++
	n.Claims.Held = append(append([]string(nil), n.Claims.Held...), ids...)
	return n
}

func atCapacity(n domain.Node) error {
	return domain.Errorf(domain.CodeConflict, "node %s is at its capacity of %d environment(s); claim again when one has stopped", n.ID, n.Capacity)
}

// fail ends an environment as failed with msg: through StopEnvironment while
// it is live (quota released once), by a versioned replace while stopping.
func (s *Service) fail(ctx context.Context, e domain.Environment, msg, reason string) error {
	_, err := s.failEnv(ctx, e, msg, reason)
	return err
}

func (s *Service) failEnv(ctx context.Context, e domain.Environment, msg, reason string) (domain.Environment, error) {
	for try := 0; try < attempts; try++ {
		switch {
		case e.State.Live():
			e.Error = msg
			cur, done, err := s.store.StopEnvironment(ctx, e, domain.StateFailed, reason, s.clock.Now())
			if err != nil || done {
				return cur, err
			}
			e = cur
		case e.State == domain.StateStopping:
			after := e
			after.State = domain.StateFailed
			after.Error = msg
			cur, done, err := s.store.ReplaceEnvironment(ctx, e, after)
			if err != nil || done {
				return cur, err
			}
			e = cur
		default:
			return e, nil // already over
		}
	}
	return e, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry", e.ID)
}

// ExportTarget is where a node serves one export of an environment.
type ExportTarget struct {
	Service string `json:"service"`
	Target  string `json:"target"`
}

// Report is the body of a node's state report.
type Report struct {
	// State is starting, ready, stopped or failed.
	State domain.State `json:"state"`
	// Exports are the targets of every export, with ready.
	Exports []ExportTarget `json:"exports"`
	// Restored is required with ready when the lease named a snapshot.
	Restored *domain.Restored `json:"restored"`
	// Error says why, with failed.
	Error string `json:"error"`
	// Metrics is the coarse history of its use the node kept (at most
	// domain.MaxMetricHistory points), with stopped or failed: kept with
	// the environment once it ended (GET /v1/environments/{id}/metrics).
	Metrics []domain.MetricSample `json:"metrics,omitempty"`
	// Reason is the node's word for an end, with stopped or failed: one of
	// domain.NodeStopReasons (exited, out_of_memory, out_of_disk,
	// failed). Absent: failed says failed unless the error names
	// out_of_memory or out_of_disk, stopped says exited.
	Reason string `json:"reason,omitempty"`
}

// ReportState applies a node's report about an environment it runs. The
// legal moves (anything else is 409 conflict):
//
//	starting  starting -> (no change)
//	ready     starting -> ready (exports, restored, ready, readyMs); ready -> (no change)
//	stopped   starting|ready -> stopped (quota released); stopping -> stopped; stopped -> (no change)
//	failed    starting|ready -> failed (quota released); stopping -> failed; failed -> (no change)
//
// Repeating a report is harmless, so an agent may retry one whose answer it
// did not get.
func (s *Service) ReportState(ctx context.Context, p domain.Principal, nodeID, envID string, r Report) (domain.Environment, error) {
	switch r.State {
	case domain.StateStarting, domain.StateReady, domain.StateStopped, domain.StateFailed:
	default:
		return domain.Environment{}, domain.Invalid("state", "state must be one of starting, ready, stopped, failed")
	}
	if r.State != domain.StateReady && (len(r.Exports) > 0 || r.Restored != nil) {
		return domain.Environment{}, domain.Invalid("state", "exports and restored are reported with ready only")
	}
	if len(r.Metrics) > 0 && (len(r.Metrics) > domain.MaxMetricHistory || (r.State != domain.StateStopped && r.State != domain.StateFailed)) {
		return domain.Environment{}, domain.Invalid("metrics", "metrics are at most %d points, with stopped or failed", domain.MaxMetricHistory)
	}
	if r.Reason != "" && (!slices.Contains(domain.NodeStopReasons, r.Reason) || (r.State != domain.StateStopped && r.State != domain.StateFailed)) {
		return domain.Environment{}, domain.Invalid("reason", "reason is one of %v, with stopped or failed", domain.NodeStopReasons)
	}
	if r.State != domain.StateFailed && r.Error != "" {
		return domain.Environment{}, domain.Invalid("error", "error is reported with failed only")
	}
	msg := CleanError(r.Error)
	if r.State == domain.StateFailed && msg == "" {
		return domain.Environment{}, domain.Invalid("error", "error is required with failed: say what went wrong")
	}
	// The node and the environment are read at once (two round trips
	// would be one after the other otherwise); the node decides first.
	validEnv := strings.HasPrefix(envID, "env_") && len(envID) <= 64 && !strings.ContainsAny(envID, "#/ ")
	var (
		e    domain.Environment
		eerr error
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		if validEnv {
			e, eerr = s.store.GetEnvironment(ctx, p.OrgID, envID)
		}
	}()
	n, err := s.ownNode(ctx, p, nodeID)
	<-read
	if err != nil {
		return domain.Environment{}, err
	}
	if !validEnv {
		return domain.Environment{}, domain.NotFound("environment")
	}
	if eerr != nil {
		return domain.Environment{}, eerr
	}
	if e.Node != n.ID {
		return domain.Environment{}, domain.Errorf(domain.CodeConflict, "environment %s is not run by node %s", e.ID, n.ID)
	}
	if len(r.Metrics) > 0 && (e.State.Live() || e.State == domain.StateStopping || e.State == domain.StatePaused) {
		// Kept before the end is recorded, so whoever reads the end finds
		// them; a repeated report writes the same item again. A paused
		// environment's are those of the run that paused: its history
		// while it sleeps.
		if err := s.store.PutEnvMetrics(ctx, n.OrgID, e.ID, r.Metrics, s.clock.Now().Add(domain.EnvRecordKept)); err != nil {
			return domain.Environment{}, err
		}
	}
	if e.State == domain.StatePaused && (r.State == domain.StateStopped || r.State == domain.StateFailed) {
		// A paused environment's node tore it down (its files are in its
		// checkpoint): it stays paused, and no longer holds the node.
		return s.nodeLetGo(ctx, e)
	}
	for try := 0; try < attempts; try++ {
		var (
			after domain.Environment
			done  bool
		)
		switch {
		case e.State == r.State && (r.State != domain.StateReady || sameTargets(e, r)):
			return e, nil // a repeated report
		case r.State == domain.StateReady && e.State == domain.StateStarting:
			next, err := s.readyRecord(e, r)
			if err != nil {
				return domain.Environment{}, err
			}
			after, done, err = s.store.ReplaceEnvironment(ctx, e, next)
			if err != nil {
				return domain.Environment{}, err
			}
		case (r.State == domain.StateStopped || r.State == domain.StateFailed) && e.State.Live() && e.State != domain.StatePending:
			reason := StopByNode
			if r.State == domain.StateFailed {
				e.Error, reason = msg, domain.StopReasonOf(msg, StopFailed)
			}
			if r.Reason != "" {
				reason = r.Reason
			}
			after, done, err = s.store.StopEnvironment(ctx, e, r.State, reason, s.clock.Now())
			if err != nil {
				return domain.Environment{}, err
			}
		case (r.State == domain.StateStopped || r.State == domain.StateFailed) && e.State == domain.StateStopping:
			// The stop released the quota already; this only finishes it.
			next := e
			next.State = r.State
			if r.State == domain.StateFailed {
				next.Error = msg
			}
			after, done, err = s.store.ReplaceEnvironment(ctx, e, next)
			if err != nil {
				return domain.Environment{}, err
			}
		default:
			return domain.Environment{}, illegal(e, r.State)
		}
		if done {
			return after, nil
		}
		e = after // something wrote it between the read and the write: decide again
	}
	return domain.Environment{}, domain.Errorf(domain.CodeConflict, "environment %s is changing too fast; retry the report", e.ID)
}

func illegal(e domain.Environment, to domain.State) error {
	hint := ""
	switch e.State {
	case domain.StateStopping:
		hint = "; it is stopping: tear it down and report stopped"
	case domain.StateStopped, domain.StateFailed:
		hint = "; it is over: stop it if it still runs"
	}
	return domain.Errorf(domain.CodeConflict, "environment %s is %s: it cannot be reported %s%s", e.ID, e.State, to, hint)
}

// sameTargets reports whether a repeated ready report names the targets the
// record has, so a retry is harmless and a different claim is a conflict.
func sameTargets(e domain.Environment, r Report) bool {
	for _, x := range r.Exports {
		i := slices.IndexFunc(e.Exports, func(y domain.EnvExport) bool { return y.Service == x.Service })
		if i < 0 || e.Exports[i].Target != x.Target {
			return false
		}
	}
	return true
}

// readyRecord builds the ready record from a report: every export needs a
// host:port target, and a snapshot lease needs its restored record.
func (s *Service) readyRecord(e domain.Environment, r Report) (domain.Environment, error) {
	after := e
	after.Exports = slices.Clone(e.Exports)
	got := map[string]bool{}
	for i, x := range r.Exports {
		field := "exports[" + strconv.Itoa(i) + "]"
		j := slices.IndexFunc(after.Exports, func(y domain.EnvExport) bool { return y.Service == x.Service })
		if j < 0 {
			return e, domain.Invalid(field+".service", "environment %s has no export %q", e.ID, x.Service)
		}
		if got[x.Service] {
			return e, domain.Invalid(field+".service", "export %q is reported twice", x.Service)
		}
		got[x.Service] = true
		host, port, err := net.SplitHostPort(x.Target)
		pn, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || pn < 1 || pn > 65535 || len(x.Target) > 300 {
			return e, domain.Invalid(field+".target", "target must be host:port")
		}
		after.Exports[j].Target = x.Target
	}
	for _, x := range after.Exports {
		if !got[x.Service] {
			return e, domain.Invalid("exports", "export %q has no target: report every export with ready", x.Service)
		}
	}
	switch {
	case e.Snapshot == "" && r.Restored != nil:
		return e, domain.Invalid("restored", "environment %s was not leased from a snapshot", e.ID)
	case e.Snapshot != "" && r.Restored == nil:
		return e, domain.Invalid("restored", "environment %s was leased from snapshot %s: report what was restored", e.ID, e.Snapshot)
	case r.Restored != nil:
		rr := *r.Restored
		if rr.Key == "" || rr.Root == "" || rr.Files < 0 || len(rr.Key) > 1024 || len(rr.Root) > 4096 {
			return e, domain.Invalid("restored", "restored needs key, root and a file count of 0 or more")
		}
		rr.Created = rr.Created.UTC()
		after.Restored = &rr
	}
	now := s.clock.Now()
	after.State = domain.StateReady
	after.Ready = &now
	// From the lease, or from its wake for a paused one woken.
	ms := now.Sub(e.RunSince()).Milliseconds()
	after.ReadyMs = &ms
	return after, nil
}

// CleanError keeps a reported error readable and bounded: valid UTF-8,
// newlines and tabs but no other control characters, at most MaxErrorBytes:
// a longer one keeps its start (what failed) and, after " … ", its end
// (where a process's last words are). The service applies it to what it stores, and the agent to what it
// reports (Report.Fit), so that a failure's report always fits a message
// and is never refused for its size. Applying it twice changes nothing.
func CleanError(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || r >= ' ' && r != 0x7f && !(r >= 0x80 && r < 0xa0) {
			return r
		}
		return -1
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > MaxErrorBytes {
		// The start says what failed, the end a process's last words:
		// a quarter of the room for one, the rest for the other.
		const cut = " … "
		head := (MaxErrorBytes - len(cut)) / 4
		for head > 0 && !utf8.RuneStart(s[head]) {
			head--
		}
		tail := len(s) - (MaxErrorBytes - len(cut) - head)
		for tail < len(s) && !utf8.RuneStart(s[tail]) {
			tail++
		}
		s = s[:head] + cut + s[tail:]
	}
	return s
}

// Fit is the report as the service would store it, cut to what a message
// carries: its error cleaned and cut (CleanError). A report too large for
// the node protocol's message or the API's body would be refused, and the
// environment would stay starting, holding its quota.
func (r Report) Fit() Report {
	r.Error = CleanError(r.Error)
	return r
}

// Deregister takes a node out of its pool: what it still runs is failed
// ("node left the pool") and its quota released. Deregistering twice is harmless.
func (s *Service) Deregister(ctx context.Context, p domain.Principal, id string) (domain.Node, error) {
	n, err := s.ownNode(ctx, p, id)
	if err != nil || n.State != domain.NodeActive {
		return n, err
	}
	if _, err := s.endNode(ctx, n, domain.NodeLeft, "node left the pool", StopLeft); err != nil {
		return domain.Node{}, err
	}
	return s.store.GetNode(ctx, n.OrgID, n.ID)
}

// endNode fails a node's environments, then ends the node. In that order, a
// sweep that dies half way finds the node due again next time. The node item
// is ended under a version condition: a heartbeat that came in between keeps
// it active (its environments already failed; the heartbeat tells it so).
// After the end, claims of the node are refused by the claim transaction, and
// a second look fails what it claimed in between.
func (s *Service) endNode(ctx context.Context, n domain.Node, state, msg, reason string) (int, error) {
	failed, err := s.failNodeEnvs(ctx, n, msg, reason)
	if err != nil {
		return failed, err
	}
	ended, err := s.store.EndNode(ctx, n, state, s.clock.Now())
	if err != nil || !ended {
		return failed, err
	}
	more, err := s.failNodeEnvs(ctx, n, msg, reason)
	return failed + more, err
}

func (s *Service) failNodeEnvs(ctx context.Context, n domain.Node, msg, reason string) (int, error) {
	envs, err := s.store.NodeEnvironments(ctx, n.OrgID, n.ID)
	if err != nil {
		return 0, err
	}
	count := 0
	for _, e := range envs {
		// The index may lag: act on the base item.
		cur, err := s.store.GetEnvironment(ctx, e.OrgID, e.ID)
		if err != nil {
			return count, err
		}
		if cur.Node == n.ID && cur.State == domain.StatePaused {
			// Its files are in its checkpoint: it stays paused, let go.
			if _, err := s.nodeLetGo(ctx, cur); err != nil {
				return count, err
			}
			continue
		}
		if cur.Node != n.ID || !(cur.State.Live() || cur.State == domain.StateStopping) {
			continue
		}
		after, err := s.failEnv(ctx, cur, msg, reason)
		if err != nil {
			return count, err
		}
		if after.State == domain.StateFailed && after.Error == msg {
			count++
		}
	}
	return count, nil
}
