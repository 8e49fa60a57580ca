package nodes

import (
	"context"
	"errors"
	"time"
)

// eachDueByOrg is the walk the re-offer and stop jobs share: read every
// shard of records, keep those due by now, and hand them to act grouped by
// organization (each group costs act one batch read of its environments).
// A failed shard or group is reported and the walk goes on. It returns how
// many records were read, and when the next of them falls due: the
// earliest due time of those not yet due, or now+again when act was handed
// any (it moves them at least that far; again is the shortest backoff of
// the job), or now when a shard filled its limit (more may be unread).
// Zero: nothing was read, so nothing falls due until another is written.
func eachDueByOrg[T any](ctx context.Context, shards, limit int, now time.Time, again time.Duration,
	read func(ctx context.Context, shard int) ([]T, error),
	key func(T) (org string, due time.Time),
	act func(ctx context.Context, org string, due []T) error,
) (int, time.Time, error) {
	var errs []error
	seen := 0
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for shard := 0; shard < shards; shard++ {
		recs, err := read(ctx, shard)
		if err != nil {
			errs = append(errs, err)
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
			}
		}
	}
	return seen, next, errors.Join(errs...)
}
