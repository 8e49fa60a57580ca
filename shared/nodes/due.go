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
// many records were read.
func eachDueByOrg[T any](ctx context.Context, shards int, now time.Time,
	read func(ctx context.Context, shard int) ([]T, error),
	key func(T) (org string, due time.Time),
	act func(ctx context.Context, org string, due []T) error,
) (int, error) {
	var errs []error
	seen := 0
	for shard := 0; shard < shards; shard++ {
		recs, err := read(ctx, shard)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen += len(recs)
		byOrg := map[string][]T{}
		for _, r := range recs {
			if org, at := key(r); !at.After(now) {
				byOrg[org] = append(byOrg[org], r)
			}
		}
		for org, list := range byOrg {
			if err := act(ctx, org, list); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return seen, errors.Join(errs...)
}
