package nodes

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/clock"
)

// DefaultMaxIdle bounds how long a job loop that skips idle shards
// (SkipIdle) goes without reading them all.
const DefaultMaxIdle = 30 * time.Second

// idleSkip lets a job loop read only the shards whose read could find
// something due: those where a record was written since the loop last
// read them (writes, a count per shard every writer moves, has changed),
// those where what it read falls due, and those whose last read or action
// failed. It holds only where every writer of those records moves writes:
// the local stack, where one process holds the store. maxIdle bounds the
// time between reads of every shard whatever the counts say, so a write
// they missed is still picked up; a message lost is sent again.
type idleSkip struct {
	writes  func(shard int) uint64
	shards  int
	maxIdle time.Duration

	full  time.Time // when every shard was last read; zero: never
	state map[int]shardState
}

type shardState struct {
	seen  uint64    // writes before the shard's last read
	next  time.Time // when what that read found falls due; zero: nothing
	stale bool      // the read or an action on it failed
}

func newIdleSkip(writes func(shard int) uint64, shards int, maxIdle time.Duration) *idleSkip {
	if writes == nil {
		return nil
	}
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdle
	}
	return &idleSkip{writes: writes, shards: shards, maxIdle: maxIdle, state: map[int]shardState{}}
}

// plan returns the shards to read at now (nil: all of them, as a nil
// idleSkip, the Lambda's, always says: its writers are other processes)
// and each one's write count before the read, so a write during the read
// is seen by the next tick.
func (q *idleSkip) plan(now time.Time) (only []int, seen map[int]uint64) {
	if q == nil {
		return nil, nil
	}
	seen = make(map[int]uint64, q.shards)
	all := q.full.IsZero() || now.Sub(q.full) >= q.maxIdle
	only = []int{}
	for shard := 0; shard < q.shards; shard++ {
		n := q.writes(shard)
		st := q.state[shard]
		if all || st.stale || n != st.seen || !st.next.IsZero() && !now.Before(st.next) {
			only = append(only, shard)
			seen[shard] = n
		}
	}
	if all {
		return nil, seen
	}
	return only, seen
}

// after records the reads of a walk that started at now.
func (q *idleSkip) after(now time.Time, only []int, seen map[int]uint64, walks map[int]shardWalk) {
	if q == nil {
		return
	}
	if only == nil {
		q.full = now
	}
	for shard, n := range seen {
		w, ok := walks[shard]
		q.state[shard] = shardState{seen: n, next: w.next, stale: !ok || w.failed}
	}
}

// tickLoop runs pass on every tick until ctx ends, ticks is closed, or
// until (zero: never) is less than interval away, reading only the shards
// idle says could hold something due (none: the tick costs nothing).
// report is handed what each pass did.
func tickLoop[R any](ctx context.Context, clk clock.Clock, ticks <-chan time.Time, interval time.Duration, until time.Time,
	idle *idleSkip, pass func(ctx context.Context, only []int) (R, map[int]shardWalk, error), report func(R, error),
) {
	for {
		if !until.IsZero() && time.Until(until) < interval {
			return
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ticks:
			if !ok {
				return
			}
		}
		now := clk.Now()
		only, seen := idle.plan(now)
		if only != nil && len(only) == 0 {
			continue
		}
		res, walks, err := pass(ctx, only)
		idle.after(now, only, seen, walks)
		report(res, err)
	}
}
