package nodes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/metrics"
)

// ConnectionID names one node's open connection for the node protocol.
type ConnectionID string

// Conn is who sent a message: the connection, and the node credential its
// opening authenticated (API Gateway's authorizer context, or the local
// server's own check).
type Conn struct {
	ID        ConnectionID
	Principal domain.Principal
}

// ErrGone is what a Poster returns for a connection that no longer exists.
var ErrGone = errors.New("the connection is gone")

// Poster sends a message to one open connection: the API Gateway
// Management API in AWS (nodes/apigw), LocalSockets on the local stack.
type Poster interface {
	Post(ctx context.Context, conn ConnectionID, msg []byte) error
}

// Closer ends one open connection: API Gateway's DeleteConnection in AWS
// (nodes/apigw), closing the socket on the local stack (LocalSockets).
// Ending a connection that is already gone is not an error.
type Closer interface {
	CloseConnection(ctx context.Context, conn ConnectionID, reason string) error
}

// ReasonRevoked is the reason a connection of a revoked credential is
// closed with (the local stack's close frame carries it; API Gateway's
// DeleteConnection carries none).
const ReasonRevoked = "the node credential has been revoked"

// ConnectionStore is what the node protocol keeps in the table.
type ConnectionStore interface {
	PutConnection(ctx context.Context, c domain.NodeConnection, keyHash string) error
	DeleteConnection(ctx context.Context, org, pool, id string) error
	SetConnectionRoom(ctx context.Context, org, pool, id string, full, short *bool) error
}

// Socket handles the node protocol's messages. The same code serves API
// Gateway's routes ($connect is authenticated before it is called,
// $disconnect calls Disconnect, $default Handle) and the local server.
type Socket struct {
	svc   *Service
	conns ConnectionStore
	log   *slog.Logger
	clock clock.Clock
}

// NewSocket returns the node protocol's handler over the nodes service.
func NewSocket(svc *Service, conns ConnectionStore, log *slog.Logger) *Socket {
	return &Socket{svc: svc, conns: conns, log: log, clock: svc.clock}
}

// Disconnect forgets a closed connection, so no lease wakes it. Its node
// stays registered: it may come back on another connection.
func (k *Socket) Disconnect(ctx context.Context, c Conn) error {
	ctx, counters := metrics.WithRequest(ctx)
	start := time.Now()
	err := k.conns.DeleteConnection(ctx, c.Principal.OrgID, c.Principal.Pool, string(c.ID))
	k.logMessage(ctx, start, c, "$disconnect", "", err, counters)
	return err
}

// MaxMessageBytes bounds a message a node may send (API Gateway's frame
// limit is 32 KB, its message limit 128 KB).
const MaxMessageBytes = 128 << 10

// Handle answers one message of a node. The answer is nil for messages that
// have none; a request that fails is answered with an error message.
func (k *Socket) Handle(ctx context.Context, c Conn, raw []byte) []byte {
	out, _ := k.Answer(ctx, c, raw)
	return out
}

// Answer is Handle that also says whether the connection must end after
// its answer is sent: the message was refused because the connection's
// credential is revoked (Unauthorized; nothing else on the node protocol
// is). The server sends the answer, then closes the connection (Closer),
// so a revoked node that still holds one is cut off at its first checked
// message even if the revocation's own close did not reach it.
func (k *Socket) Answer(ctx context.Context, c Conn, raw []byte) (out []byte, end bool) {
	ctx, counters := metrics.WithRequest(ctx)
	// The connection's principal was authenticated when it opened: what the
	// message reads or writes also checks the key record is unrevoked.
	c.Principal.Recheck = true
	start := time.Now()
	var m Message
	var err error
	var ans *Message
	switch {
	case len(raw) > MaxMessageBytes:
		err = domain.BadRequest("message", "a message is at most %d bytes", MaxMessageBytes)
	case json.Unmarshal(raw, &m) != nil:
		err = domain.BadRequest("message", "a message is one JSON object with a type")
	case c.Principal.Credential != domain.CredentialNode:
		err = domain.Errorf(domain.CodeForbidden, "the node protocol takes a node credential")
	case c.Principal.Expires != nil && !k.clock.Now().Before(*c.Principal.Expires):
		// A credential that inherited its maker's expiry ends with it, on
		// a connection opened before that too.
		err = domain.Errorf(domain.CodeUnauthorized, "the node credential has expired")
	default:
		ans, err = k.handle(ctx, c, m)
	}
	typ := m.Type
	if typ == "" {
		typ = "unknown"
	}
	k.logMessage(ctx, start, c, typ, m.Node, err, counters)
	if err != nil {
		e := domain.AsError(err)
		msg := e.Message
		status := httpapi.Status(e.Code)
		if msg == "" {
			msg = http.StatusText(status)
		}
		ans = &Message{Type: MsgError, Error: &MessageError{Status: status, Code: string(e.Code), Message: msg}}
		end = e.Code == domain.CodeUnauthorized
	}
	if ans == nil {
		return nil, end
	}
	ans.ID = m.ID
	b, merr := json.Marshal(ans)
	if merr != nil {
		k.log.ErrorContext(ctx, "node message answer", "err", merr.Error())
		return nil, end
	}
	return b, end
}

func (k *Socket) handle(ctx context.Context, c Conn, m Message) (*Message, error) {
	p := c.Principal
	// The store stamps this on the events the message's writes record.
	ctx = domain.WithActor(ctx, domain.ActorOf(p))
	switch m.Type {
	case MsgHello:
		reg, err := k.hello(ctx, c, m)
		if err != nil {
			return nil, err
		}
		return &Message{Type: MsgRegistered, Node: reg.Node.ID, Registered: &reg}, nil
	case MsgHeartbeat:
		beat, err := k.svc.SocketHeartbeat(ctx, p, m)
		if err != nil {
			return nil, err
		}
		if m.Full != nil || m.Short != nil {
			if err := k.conns.SetConnectionRoom(ctx, p.OrgID, p.Pool, string(c.ID), m.Full, m.Short); err != nil {
				return nil, err
			}
		}
		return &Message{Type: MsgBeat, Node: m.Node, Beat: &beat}, nil
	case MsgClaim:
		if m.Max > 0 {
			offered := m.Environments
			if m.Environment != "" {
				offered = append([]string{m.Environment}, offered...)
			}
			cls, err := k.svc.ClaimBatch(ctx, p, m.Node, offered, m.Max, m.Only)
			if err != nil && len(cls) == 0 {
				return nil, err
			}
			if err != nil {
				// The claims made stand: the node must hear of them.
				k.log.WarnContext(ctx, "batch claim cut short", "node", m.Node, "claimed", len(cls), "err", err.Error())
			}
			return &Message{Type: MsgClaimed, Node: m.Node, Claims: cls}, nil
		}
		cl, err := k.svc.ClaimOffered(ctx, p, m.Node, m.Environment, m.Only)
		if err != nil {
			return nil, err
		}
		return &Message{Type: MsgClaimed, Node: m.Node, Claimed: cl}, nil
	case MsgReport:
		if m.Report == nil {
			return nil, domain.Invalid("report", "report is required")
		}
		e, err := k.svc.ReportState(ctx, p, m.Node, m.Environment, *m.Report)
		if err != nil {
			return nil, err
		}
		return &Message{Type: MsgReported, Node: m.Node, Environment: e.ID, Record: &e}, nil
	case MsgCheckpointUpload, MsgCheckpointDone:
		return k.socketCheckpoint(ctx, p, m)
	}
	return nil, domain.BadRequest("type", "unknown message type %q; one of hello, heartbeat, claim, report, checkpointUpload, checkpointDone", m.Type)
}

// hello registers a node (with register) or resumes one on a new
// connection, and records the connection under the node's pool, so leases
// of the pool can wake it.
func (k *Socket) hello(ctx context.Context, c Conn, m Message) (Registered, error) {
	var (
		reg Registered
		err error
	)
	if m.Register != nil {
		reg, err = k.svc.Register(ctx, c.Principal, *m.Register)
	} else {
		reg, err = k.svc.Resume(ctx, c.Principal, m.Node)
	}
	if err != nil {
		return Registered{}, err
	}
	// The record names the credential, so revoking it finds the
	// connection, and is written only while the credential is unrevoked.
	err = k.conns.PutConnection(ctx, domain.NodeConnection{
		ID: string(c.ID), OrgID: reg.Node.OrgID, Pool: reg.Node.Pool, Node: reg.Node.ID, KeyID: c.Principal.KeyID, Connected: k.clock.Now(),
		Platform: reg.Node.Platform, Runtimes: reg.Node.Runtimes,
	}, c.Principal.KeyHash)
	if err != nil {
		return Registered{}, err
	}
	return reg, nil
}

func (k *Socket) logMessage(ctx context.Context, start time.Time, c Conn, typ, node string, err error, counters *metrics.Request) {
	status := http.StatusOK
	if err != nil {
		e := domain.AsError(err)
		status = httpapi.Status(e.Code)
		if e.Err != nil || status >= 500 {
			k.log.WarnContext(ctx, "node message failed", "code", e.Code, "err", err.Error())
		}
	}
	k.log.InfoContext(ctx, "request",
		"request_id", newMessageID(), "method", "WS", "path", typ, "status", status,
		"ms", time.Since(start).Milliseconds(), "org", c.Principal.OrgID, "node", node,
		"connection", string(c.ID), "route", "WS "+typ, "ddb_calls", counters.DynamoCalls(), "s3_calls", counters.S3Calls(), "socket_calls", counters.SocketCalls())
}

func newMessageID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Resume is a hello on a new connection of a node registered before: the
// registration's timing and the pool's templates, without the tunnel key
// (the node has it). A node that was declared lost or left is gone.
func (s *Service) Resume(ctx context.Context, p domain.Principal, id string) (Registered, error) {
	n, err := s.activeNode(ctx, p, id)
	if err != nil {
		return Registered{}, err
	}
	ts, err := s.poolTemplates(ctx, n)
	if err != nil {
		return Registered{}, err
	}
	return Registered{
		Node: n, Templates: ts, HeartbeatInterval: domain.Duration(s.opt.HeartbeatInterval),
		LostAfter: domain.Duration(s.opt.LostAfter), ClaimWait: domain.Duration(0),
		Organization: p.OrgID, SocketURL: s.opt.SocketURL,
	}, nil
}

// SocketHeartbeat is a heartbeat on the node protocol. It costs what
// changed: the node's deadline is written (one conditional update) only
// when the one the node last heard is older than DeadlineEvery (or
// unknown), the pool's templates are read only then (one query), and
// environments are read only when the beat names some; every environment
// assigned to the node only on the first beat of a connection (no
// deadline: the node may have missed stops, or a claim's answer, while it
// had none). Stops reach a connected node as stop messages (Stopper), so a
// node running environments costs what an idle one does: two calls a
// DeadlineEvery, and its beats in between none. Identity, and that the
// connection's credential is not revoked, are checked whenever anything is
// read or written (in that same call); a beat that reads nothing discloses
// nothing (its answer is the deadline the node sent) and changes nothing.
func (s *Service) SocketHeartbeat(ctx context.Context, p domain.Principal, m Message) (SocketBeat, error) {
	out, err := s.socketBeat(ctx, p, m)
	if err == nil {
		out.BeatIn = domain.Duration(max(out.Deadline.Sub(s.clock.Now())-s.opt.LostAfter, 0))
	}
	return out, err
}

func (s *Service) socketBeat(ctx context.Context, p domain.Principal, m Message) (SocketBeat, error) {
	if len(m.Changed) > MaxHeartbeatIDs {
		return SocketBeat{}, domain.Invalid("changed", "at most %d environment ids per heartbeat", MaxHeartbeatIDs)
	}
	if !validNodeID(m.Node) {
		return SocketBeat{}, domain.NotFound("node")
	}
	now := s.clock.Now()
	// The deadline a write sets is DeadlineEvery + LostAfter ahead; the
	// next write is due once less than LostAfter of it is left.
	write := m.Deadline.IsZero() || m.Deadline.Sub(now) < s.opt.LostAfter
	all := m.Deadline.IsZero() && m.Running > 0
	// The network layers the node applies are checked on the beats that
	// write anyway, in the same read as the changed environments: a lost
	// push is sent again within DeadlineEvery, at no call of its own on
	// the beats in between.
	var netIDs []string
	if write && !all {
		netIDs = netBehindCandidates(m)
	}
	look := len(m.Changed) > 0 || all || len(netIDs) > 0
	out := SocketBeat{Deadline: m.Deadline, Environments: []EnvState{}}
	if !write && !look && len(m.Active) == 0 && len(m.Opened) == 0 {
		return out, nil
	}
	var n domain.Node
	var err error
	if write {
		// One conditional write: it checks the node is the credential's.
		if n, err = s.store.BeatNode(ctx, p.OrgID, m.Node, p, now, now.Add(s.opt.DeadlineEvery+s.opt.LostAfter)); err != nil {
			return SocketBeat{}, err
		}
		out.Deadline = n.Deadline
		if out.Templates, err = s.poolTemplates(ctx, n); err != nil {
			return SocketBeat{}, err
		}
	} else {
		if n, err = s.activeNode(ctx, p, m.Node); err != nil {
			return SocketBeat{}, err
		}
	}
	if look {
		if out.Environments, err = s.envStates(ctx, n, append(slices.Clip(m.Changed), netIDs...), all); err != nil {
			return SocketBeat{}, err
		}
		if len(netIDs) > 0 {
			out.Environments = netBehind(out.Environments, m)
		}
	}
	if len(m.Active) > 0 || len(m.Opened) > 0 {
		if n.ID == "" {
			if n, err = s.activeNode(ctx, p, m.Node); err != nil {
				return SocketBeat{}, err
			}
		}
		if err := s.previewActivity(ctx, n, m.Active, m.Opened); err != nil {
			return SocketBeat{}, err
		}
	}
	return out, nil
}

// envStates reads the named environments (strongly consistent) and, with
// assigned, every environment the node runs or tears down.
func (s *Service) envStates(ctx context.Context, n domain.Node, ids []string, assigned bool) ([]EnvState, error) {
	var named, runs []domain.Environment
	var err error
	valid := make([]string, 0, len(ids))
	for _, x := range ids {
		if validEnvID(x) {
			valid = append(valid, x)
		}
	}
	if len(valid) > 0 {
		if named, err = s.store.GetEnvironments(ctx, n.OrgID, valid); err != nil {
			return nil, err
		}
	}
	if assigned {
		if runs, err = s.store.NodeEnvironments(ctx, n.OrgID, n.ID); err != nil {
			return nil, err
		}
	}
	out := []EnvState{}
	seen := map[string]bool{}
	for _, e := range append(named, runs...) {
		if e.Node != n.ID || seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		out = append(out, s.envState(e))
	}
	return out, nil
}

// nodeWithRoom reads the claiming node and what it holds (NodeHolding:
// what its index lists and its claim fence holds), and refuses a claim when
// it holds as many environments as its capacity.
func (s *Service) nodeWithRoom(ctx context.Context, p domain.Principal, id string) (domain.Node, []domain.Environment, error) {
	n, err := s.activeNode(ctx, p, id)
	if err != nil {
		return domain.Node{}, nil, err
	}
	runs, n, err := s.store.NodeHolding(ctx, n)
	if err != nil {
		return domain.Node{}, nil, err
	}
	if len(runs) >= n.Capacity {
		return domain.Node{}, nil, atCapacity(n)
	}
	return n, runs, nil
}

// ClaimOffered claims for a node on the node protocol, at once (no long
// poll: an offer says when to claim): the offered environment first, when
// one is named and still pending in the node's pool, then the oldest few
// pending in random order; with only, the offered environment or nothing.
// nil: nothing to claim.
func (s *Service) ClaimOffered(ctx context.Context, p domain.Principal, id, env string, only bool) (*Claimed, error) {
	n, _, err := s.nodeWithRoom(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if validEnvID(env) {
		e, err := s.store.GetEnvironment(ctx, n.OrgID, env)
		if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
			return nil, err
		}
		if err == nil && e.State == domain.StatePending && e.Pool == n.Pool && !n.Runs(e.Needs) {
			return nil, cannotRun(n, e)
		}
		if err == nil && e.State == domain.StatePending && e.Pool == n.Pool {
			c, err := s.claimFirst(ctx, p.KeyHash, n, []domain.Environment{e})
			if err != nil || c != nil {
				return c, err
			}
		}
	}
	if only {
		return nil, nil
	}
	return s.claimRandom(ctx, p.KeyHash, n)
}

func validNodeID(id string) bool {
	return strings.HasPrefix(id, "node_") && len(id) <= 64 && !strings.ContainsAny(id, "#/ ")
}

func validEnvID(id string) bool {
	return strings.HasPrefix(id, "env_") && len(id) <= 64 && !strings.ContainsAny(id, "#/ ")
}

// netBehindCandidates are the environments whose network layer version the
// node reported and that the beat does not name as changed (those are
// answered in full anyway), at most MaxHeartbeatIDs of them all.
func netBehindCandidates(m Message) []string {
	named := make(map[string]bool, len(m.Changed))
	for _, id := range m.Changed {
		named[id] = true
	}
	var ids []string
	for id := range m.NetVersions {
		if !named[id] && validEnvID(id) && len(ids)+len(m.Changed) < MaxHeartbeatIDs {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// netBehind keeps, of the states read, those the beat named as changed and
// those whose network layer is newer than the version the node reported.
func netBehind(states []EnvState, m Message) []EnvState {
	named := make(map[string]bool, len(m.Changed))
	for _, id := range m.Changed {
		named[id] = true
	}
	out := states[:0]
	for _, st := range states {
		v, reported := m.NetVersions[st.ID]
		if named[st.ID] || reported && st.Network != nil && st.Network.Version > v {
			out = append(out, st)
		}
	}
	return out
}
