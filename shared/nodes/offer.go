package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// OfferStore is what waking nodes needs from the table.
type OfferStore interface {
	PoolConnections(ctx context.Context, org, pool, from string, limit int, at time.Time) ([]domain.NodeConnection, error)
	DeleteConnection(ctx context.Context, org, pool, id string) error
	PutOffer(ctx context.Context, o domain.Offer) error
	DeleteOffer(ctx context.Context, org, env string) error
	ShardOffers(ctx context.Context, shard, limit int) ([]domain.Offer, error)
	GetEnvironments(ctx context.Context, org string, ids []string) ([]domain.Environment, error)
}

// Offer timing; docs/nodes.md, "The node protocol", gives them.
const (
	// DefaultReofferAfter is how long an offered environment may stay
	// pending before the re-offer job wakes a node for it again.
	DefaultReofferAfter = 3 * time.Second
	// MaxReofferBackoff bounds the wait between re-offers of an environment
	// no node takes (its pool has no connected node, or all are full).
	MaxReofferBackoff = time.Minute
	// connectionSample is how many of a pool's connections a wake reads to
	// choose one from.
	connectionSample = 8
	// connectionCacheTTL is how long a warm function reuses a pool's
	// connections it read.
	connectionCacheTTL = 5 * time.Second
	// offersPerShard bounds what one re-offer pass reads of a shard.
	offersPerShard = 1000
	// postTries bounds the connections one wake tries.
	postTries = 3
)

// Offerer wakes one connected node of a pool for a pending environment,
// and keeps the offer so the re-offer job sends it again while nobody has
// claimed the environment. The environments service calls Offer after a
// lease; the re-offer job calls Reoffer.
type Offerer struct {
	store  OfferStore
	poster Poster
	clock  clock.Clock
	log    *slog.Logger
	after  time.Duration

	mu    sync.Mutex
	cache map[string]cachedConns

	// idle, when set (SkipIdle), lets ReofferLoop leave out idle passes.
	idle *idleSkip
}

type cachedConns struct {
	conns   []domain.NodeConnection
	fetched time.Time
}

// NewOfferer returns an Offerer; reofferAfter 0 takes DefaultReofferAfter.
func NewOfferer(st OfferStore, poster Poster, clk clock.Clock, log *slog.Logger, reofferAfter time.Duration) *Offerer {
	if reofferAfter <= 0 {
		reofferAfter = DefaultReofferAfter
	}
	return &Offerer{store: st, poster: poster, clock: clk, log: log, after: reofferAfter, cache: map[string]cachedConns{}}
}

// Offer wakes a node of the environment's pool and records the offer. It
// never fails the lease: what goes wrong is logged, and the re-offer job
// (or a node's next claim) picks the environment up.
func (o *Offerer) Offer(ctx context.Context, e domain.Environment) {
	if e.State != domain.StatePending {
		return
	}
	// The record first: it is what the re-offer job follows, so a wake that
	// fails, or is cut short, or is lost on the way still gets sent again.
	now := o.clock.Now()
	err := o.store.PutOffer(ctx, domain.Offer{OrgID: e.OrgID, Pool: e.Pool, Environment: e.ID, Due: now.Add(o.after), Attempts: 1, Created: now})
	if err != nil {
		o.log.WarnContext(ctx, "offer not recorded", "environment", e.ID, "err", err.Error())
	}
	if err := o.wake(ctx, e.OrgID, e.Pool, e.Needs, []string{e.ID}); err != nil {
		o.log.WarnContext(ctx, "offer not sent", "environment", e.ID, "pool", e.Pool, "err", err.Error())
	}
}

// wake posts an offer to one connected node of the pool that can run what
// needs asks: one at random among a few, preferring those with free
// capacity, and never one short of disk while another is there (pick). A connection that is gone is forgotten and the next one tried.
// No connection is not an error: nodes on the HTTP fallback find the work by
// claiming, and the re-offer job looks again (at another random window of
// the pool's connections when none of this one could run it).
func (o *Offerer) wake(ctx context.Context, org, pool string, needs domain.Needs, envs []string) error {
	msg, err := json.Marshal(Message{Type: MsgOffer, Pool: pool, Environments: envs})
	if err != nil {
		return err
	}
	var last error
	for round := 0; round < 2; round++ {
		// The second round reads the pool afresh: every connection the
		// cached sample named was gone.
		conns, err := o.connections(ctx, org, pool, round > 0)
		if err != nil {
			return err
		}
		all := len(conns)
		conns = slices.DeleteFunc(conns, func(c domain.NodeConnection) bool { return !c.Runs(needs) })
		if len(conns) == 0 && all > 0 && round == 0 {
			continue // none of this sample can run it: read another window
		}
		// A short node is woken only when the whole sample is short: not
		// as a fallback after a post to another failed either.
		if slices.ContainsFunc(conns, func(c domain.NodeConnection) bool { return !c.Short }) {
			conns = slices.DeleteFunc(conns, func(c domain.NodeConnection) bool { return c.Short })
		}
		gone := 0
		for try := 0; try < postTries && len(conns) > 0; try++ {
			i := pick(conns)
			c := conns[i]
			conns = append(conns[:i:i], conns[i+1:]...)
			err := o.poster.Post(ctx, ConnectionID(c.ID), msg)
			if err == nil {
				return nil
			}
			last = err
			if errors.Is(err, ErrGone) {
				gone++
				o.forget(org, pool, c.ID)
				if derr := o.store.DeleteConnection(ctx, org, pool, c.ID); derr != nil {
					return derr
				}
			}
		}
		if gone == 0 {
			break
		}
	}
	return last
}

// pick chooses a connection at random: never a short one (short of disk,
// it can run nothing) while any other is there, and among the others one
// not full when any is. A full node takes the environment when a slot
// frees; a short one only fails it, which is right only when every node
// the wake could choose from is short: then no node can take it, and the
// short node's claim fails it saying why.
func pick(conns []domain.NodeConnection) int {
	var free, busy []int
	for i, c := range conns {
		switch {
		case c.Short:
		case c.Full:
			busy = append(busy, i)
		default:
			free = append(free, i)
		}
	}
	switch {
	case len(free) > 0:
		return free[mrand.IntN(len(free))]
	case len(busy) > 0:
		return busy[mrand.IntN(len(busy))]
	}
	return mrand.IntN(len(conns))
}

// connections returns a sample of the pool's connections, read at most
// every connectionCacheTTL by a warm function (fresh: now): a burst of
// leases of one pool costs one query, not one each.
func (o *Offerer) connections(ctx context.Context, org, pool string, fresh bool) ([]domain.NodeConnection, error) {
	k := org + "#" + pool
	o.mu.Lock()
	c, ok := o.cache[k]
	o.mu.Unlock()
	// An empty sample is read again: a node may have just connected.
	if ok && !fresh && len(c.conns) > 0 && time.Since(c.fetched) < connectionCacheTTL {
		return append([]domain.NodeConnection(nil), c.conns...), nil
	}
	conns, err := o.store.PoolConnections(ctx, org, pool, randomFrom(), connectionSample, o.clock.Now())
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.cache[k] = cachedConns{conns: conns, fetched: time.Now()}
	o.mu.Unlock()
	return append([]domain.NodeConnection(nil), conns...), nil
}

func (o *Offerer) forget(org, pool, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := org + "#" + pool
	c := o.cache[k]
	out := c.conns[:0:0]
	for _, x := range c.conns {
		if x.ID != id {
			out = append(out, x)
		}
	}
	c.conns = out
	o.cache[k] = c
}

// randomFrom is a random point among connection ids (API Gateway's are
// base64-like, the local server's hex), so a pool's sample is a random
// window of its connections.
func randomFrom() string {
	const alphabet = "+/0123456789=ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
	return string(alphabet[mrand.IntN(len(alphabet))])
}

// ReofferResult says what one re-offer pass did.
type ReofferResult struct {
	// Offers is how many offers were read, Reoffered how many were sent
	// again, Done how many were forgotten (the environment left pending).
	Offers    int `json:"offers"`
	Reoffered int `json:"reoffered"`
	Done      int `json:"done"`
}

// Reoffer is one pass of the re-offer job: every offer whose environment is
// still pending after its due time wakes a node again (with backoff up to
// MaxReofferBackoff); offers of environments no longer pending are
// forgotten. It reads every offer shard, which holds only what was offered
// and not yet seen claimed, so its cost follows what is pending.
func (o *Offerer) Reoffer(ctx context.Context) (ReofferResult, error) {
	res, _, err := o.reoffer(ctx, nil)
	return res, err
}

// reoffer is Reoffer over the shards given (nil: all), also saying per
// shard read when its next offer falls due.
func (o *Offerer) reoffer(ctx context.Context, only []int) (ReofferResult, map[int]shardWalk, error) {
	var res ReofferResult
	now := o.clock.Now()
	n, walks, err := eachDueByOrg(ctx, domain.OfferShards, only, offersPerShard, now, min(o.after, MaxReofferBackoff),
		func(ctx context.Context, shard int) ([]domain.Offer, error) {
			return o.store.ShardOffers(ctx, shard, offersPerShard)
		},
		func(of domain.Offer) (string, time.Time) { return of.OrgID, of.Due },
		func(ctx context.Context, org string, due []domain.Offer) error {
			return o.reofferOrg(ctx, org, due, now, &res)
		})
	res.Offers = n
	return res, walks, err
}

func (o *Offerer) reofferOrg(ctx context.Context, org string, offers []domain.Offer, now time.Time, res *ReofferResult) error {
	ids := make([]string, len(offers))
	for i, of := range offers {
		ids[i] = of.Environment
	}
	envs, err := o.store.GetEnvironments(ctx, org, ids)
	if err != nil {
		return err
	}
	pending := map[string]bool{}
	needs := map[string]domain.Needs{}
	for _, e := range envs {
		if e.State == domain.StatePending {
			pending[e.ID] = true
			needs[e.ID] = e.Needs
		}
	}
	for _, of := range offers {
		if !pending[of.Environment] {
			if err := o.store.DeleteOffer(ctx, org, of.Environment); err != nil {
				return err
			}
			res.Done++
			continue
		}
		if err := o.wake(ctx, org, of.Pool, needs[of.Environment], []string{of.Environment}); err != nil {
			o.log.WarnContext(ctx, "re-offer not sent", "environment", of.Environment, "pool", of.Pool, "err", err.Error())
		}
		of.Attempts++
		of.Due = now.Add(min(o.after<<min(of.Attempts-1, 10), MaxReofferBackoff))
		if err := o.store.PutOffer(ctx, of); err != nil {
			return err
		}
		res.Reoffered++
	}
	return nil
}

// SkipIdle makes ReofferLoop read only the shards that could hold an offer
// due: those written since it last read them, and those where what it read
// falls due. writes must count every put of an offer of a shard by every
// writer of the table (store.Store.OfferWrites, where one process holds
// the store: the local stack); maxIdle (0: DefaultMaxIdle) bounds the time
// between reads of every shard all the same. Without it every tick reads
// every shard, as the scheduled function must (its writers are other
// functions).
func (o *Offerer) SkipIdle(writes func(shard int) uint64, maxIdle time.Duration) {
	o.idle = newIdleSkip(writes, domain.OfferShards, maxIdle)
}

// ReofferLoop runs Reoffer every interval until ctx ends or until stops
// (zero: never) is less than interval away: the scheduled function runs it
// within its invocation, the local job loop for as long as it runs. It logs
// the passes that did something.
func (o *Offerer) ReofferLoop(ctx context.Context, interval time.Duration, until time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	o.reofferTicks(ctx, t.C, interval, until)
}

func (o *Offerer) reofferTicks(ctx context.Context, ticks <-chan time.Time, interval time.Duration, until time.Time) {
	tickLoop(ctx, o.clock, ticks, interval, until, o.idle, o.reoffer, func(res ReofferResult, err error) {
		switch {
		case err != nil && ctx.Err() == nil:
			o.log.ErrorContext(ctx, "re-offer run", "summary", res, "err", err.Error())
		case res.Reoffered > 0 || res.Done > 0:
			o.log.InfoContext(ctx, "re-offer run", "summary", res)
		}
	})
}
