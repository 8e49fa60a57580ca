package nodes

import (
	"context"
	"errors"
	"time"
)

// shardWalk is what a walk learnt of one shard: when the next of its
// records falls due (zero: it holds none), and whether reading it or
// acting on it failed.
type shardWalk struct {
	next   time.Time
	failed bool
}

// eachDueByOrg is the walk the re-offer and stop jobs share: read the
// shards given (nil: all of shards), keep the records due by now, and hand
// them to act grouped by organization (each group costs act one batch
// read of its environments). A failed shard or group is reported and the
// walk goes on. It returns how many records were read and, per shard read,
// when its next record falls due: the earliest due time of those not yet
// due, now+again when act was handed any (it moves them at least that
// far; again is the job's shortest backoff), or now when the shard filled
// limit (more may be unread).
func eachDueByOrg[T any](ctx context.Context, shards int, only []int, limit int, now time.Time, again time.Duration,
	read func(ctx context.Context, shard int) ([]T, error),
	key func(T) (org string, due time.Time),
	act func(ctx context.Context, org string, due []T) error,
) (int, map[int]shardWalk, error) {
	if only == nil {
		only = make([]int, shards)
		for i := range only {
			only[i] = i
		}
	}
	var errs []error
	seen := 0
	walks := make(map[int]shardWalk, len(only))
	for _, shard := range only {
		var w shardWalk
		soonest := func(t time.Time) {
			if w.next.IsZero() || t.Before(w.next) {
				w.next = t
			}
		}
		recs, err := read(ctx, shard)
		if err != nil {
			errs = append(errs, err)
			walks[shard] = shardWalk{failed: true}
			continue
		}
		seen += len(recs)
		if len(recs) >= limit {
			soonest(now)
		}
		byOrg := map[string][]T{}
		for _, r := range recs {
			org, at := key(r)
			if at.After(now) {
				soonest(at)
				continue
			}
			byOrg[org] = append(byOrg[org], r)
			soonest(now.Add(again))
		}
		for org, list := range byOrg {
			if err := act(ctx, org, list); err != nil {
				errs = append(errs, err)
				w.failed = true
			}
		}
		walks[shard] = w
	}
	return seen, walks, errors.Join(errs...)
}
