package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// StopStore is what telling nodes of stops needs from the table.
type StopStore interface {
	NodeConnection(ctx context.Context, org, node string, at time.Time) (string, error)
	DeleteNodeConnection(ctx context.Context, org, node, conn string) error
	PutStopNotice(ctx context.Context, n domain.StopNotice) error
	DeleteStopNotice(ctx context.Context, org, env string) error
	ShardStopNotices(ctx context.Context, shard, limit int) ([]domain.StopNotice, error)
	GetEnvironments(ctx context.Context, org string, ids []string) ([]domain.Environment, error)
}

// Stop timing; docs/nodes.md, "The node protocol", gives them.
const (
	// DefaultResendAfter is the first wait of the stop job between sends of
	// a stop its node has not finished (the stop transaction makes the
	// notice first due 30 s after the stop, store.StopResendAfter).
	DefaultResendAfter = 30 * time.Second
	// MaxResendBackoff bounds the wait between sends of a stop whose node
	// neither finishes it nor is lost (it has no connection: it uses the
	// HTTP fallback, whose heartbeat tells it, or is reconnecting, and its
	// next connection's first beat tells it).
	MaxResendBackoff = time.Minute
	// noticesPerShard bounds what one stop job pass reads of a shard.
	noticesPerShard = 1000
)

// Stopper tells a node over its connection that environments it runs are
// stopping, as the Offerer tells a node of work: the environments service
// calls Stop after a delete, the timeout job after a timeout; the stop
// notice the stop transaction wrote makes the stop job (Resend) send it
// again until the environment has left stopping, so a lost message delays
// a stop, never loses it.
type Stopper struct {
	store  StopStore
	poster Poster
	clock  clock.Clock
	log    *slog.Logger
	after  time.Duration

	// idle, when set (SkipIdle), lets ResendLoop leave out idle passes.
	idle *idleSkip
}

// NewStopper returns a Stopper; resendAfter 0 takes DefaultResendAfter.
func NewStopper(st StopStore, poster Poster, clk clock.Clock, log *slog.Logger, resendAfter time.Duration) *Stopper {
	if resendAfter <= 0 {
		resendAfter = DefaultResendAfter
	}
	return &Stopper{store: st, poster: poster, clock: clk, log: log, after: resendAfter}
}

// Stop tells e's node, when e is stopping on one (or paused on one that
// has not let it go), to tear it down. It never fails the stop (already
// committed): what goes wrong is logged, and the stop job sends it again.
func (s *Stopper) Stop(ctx context.Context, e domain.Environment) {
	if e.Node == "" || e.State != domain.StateStopping && e.State != domain.StatePaused {
		return
	}
	// A node without a connection (on the HTTP fallback, or reconnecting)
	// learns it from its heartbeat: nothing to warn about.
	if err := s.tell(ctx, e.OrgID, e.Node, []string{e.ID}); err != nil && !errors.Is(err, errNoConnection) {
		s.log.WarnContext(ctx, "stop not sent", "environment", e.ID, "node", e.Node, "err", err.Error())
	}
}

// errNoConnection: the node has no open connection to post on.
var errNoConnection = errors.New("the node has no open connection")

// tell posts one stop message naming envs to the node's connection: one
// read to find it, one post. A connection that is gone is forgotten.
func (s *Stopper) tell(ctx context.Context, org, node string, envs []string) error {
	conn, err := s.store.NodeConnection(ctx, org, node, s.clock.Now())
	if err != nil {
		return err
	}
	if conn == "" {
		return errNoConnection
	}
	msg, err := json.Marshal(Message{Type: MsgStop, Node: node, Environments: envs})
	if err != nil {
		return err
	}
	err = s.poster.Post(ctx, ConnectionID(conn), msg)
	if errors.Is(err, ErrGone) {
		if derr := s.store.DeleteNodeConnection(ctx, org, node, conn); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}

// ResendResult says what one pass of the stop job did.
type ResendResult struct {
	// Notices is how many were read, Resent how many were sent again (or
	// tried: a node without a connection is tried again later), Done how
	// many were forgotten (the environment left stopping).
	Notices int `json:"notices"`
	Resent  int `json:"resent"`
	Done    int `json:"done"`
}

// Resend is one pass of the stop job: every notice due whose environment
// is still stopping on its node is sent again (one message per node, with
// backoff up to MaxResendBackoff); notices of environments that left
// stopping are forgotten. It reads every shard, which holds only stops not
// yet seen finished, so its cost follows what is stopping.
func (s *Stopper) Resend(ctx context.Context) (ResendResult, error) {
	res, _, err := s.resend(ctx, nil)
	return res, err
}

// resend is Resend over the shards given (nil: all), also saying per
// shard read when its next notice falls due.
func (s *Stopper) resend(ctx context.Context, only []int) (ResendResult, map[int]shardWalk, error) {
	var res ResendResult
	now := s.clock.Now()
	n, walks, err := eachDueByOrg(ctx, domain.StopShards, only, noticesPerShard, now, min(s.after, MaxResendBackoff),
		func(ctx context.Context, shard int) ([]domain.StopNotice, error) {
			return s.store.ShardStopNotices(ctx, shard, noticesPerShard)
		},
		func(n domain.StopNotice) (string, time.Time) { return n.OrgID, n.Due },
		func(ctx context.Context, org string, due []domain.StopNotice) error {
			return s.resendOrg(ctx, org, due, now, &res)
		})
	res.Notices = n
	return res, walks, err
}

func (s *Stopper) resendOrg(ctx context.Context, org string, notices []domain.StopNotice, now time.Time, res *ResendResult) error {
	ids := make([]string, len(notices))
	for i, n := range notices {
		ids[i] = n.Environment
	}
	envs, err := s.store.GetEnvironments(ctx, org, ids)
	if err != nil {
		return err
	}
	stopping := map[string]bool{}
	for _, e := range envs {
		// A paused environment whose node has not yet said it is down is
		// torn down as a stopping one is.
		if e.State == domain.StateStopping || e.State == domain.StatePaused && e.Node != "" {
			stopping[e.ID+"@"+e.Node] = true
		}
	}
	byNode := map[string][]string{}
	for _, n := range notices {
		if !stopping[n.Environment+"@"+n.Node] {
			if err := s.store.DeleteStopNotice(ctx, org, n.Environment); err != nil {
				return err
			}
			res.Done++
			continue
		}
		byNode[n.Node] = append(byNode[n.Node], n.Environment)
	}
	for node, envs := range byNode {
		slices.Sort(envs)
		if err := s.tell(ctx, org, node, envs); err != nil && !errors.Is(err, errNoConnection) {
			s.log.WarnContext(ctx, "stop not re-sent", "node", node, "environments", envs, "err", err.Error())
		}
	}
	for _, n := range notices {
		if !stopping[n.Environment+"@"+n.Node] {
			continue
		}
		n.Attempts++
		n.Due = now.Add(min(s.after<<min(n.Attempts-1, 10), MaxResendBackoff))
		if err := s.store.PutStopNotice(ctx, n); err != nil {
			return err
		}
		res.Resent++
	}
	return nil
}

// SkipIdle makes ResendLoop read only the shards that could hold a notice
// due, as Offerer.SkipIdle does for re-offers: writes must count every put
// of a stop notice of a shard by every writer of the table
// (store.Store.StopWrites).
func (s *Stopper) SkipIdle(writes func(shard int) uint64, maxIdle time.Duration) {
	s.idle = newIdleSkip(writes, domain.StopShards, maxIdle)
}

// ResendLoop runs Resend every interval until ctx ends or until stops
// (zero: never) is less than interval away, as ReofferLoop does.
func (s *Stopper) ResendLoop(ctx context.Context, interval time.Duration, until time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	s.resendTicks(ctx, t.C, interval, until)
}

func (s *Stopper) resendTicks(ctx context.Context, ticks <-chan time.Time, interval time.Duration, until time.Time) {
	tickLoop(ctx, s.clock, ticks, interval, until, s.idle, s.resend, func(res ResendResult, err error) {
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.ErrorContext(ctx, "stop job run", "summary", res, "err", err.Error())
		case res.Resent > 0 || res.Done > 0:
			s.log.InfoContext(ctx, "stop job run", "summary", res)
		}
	})
}
