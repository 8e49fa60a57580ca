package nodes

import (
	"context"
	"time"

	"github.com/envlease/envlease/shared/clock"
)

// DefaultMaxIdle bounds how long a job loop that skips idle walks (SkipIdle)
// goes without one all the same.
const DefaultMaxIdle = 30 * time.Second

// idleSkip lets a job loop skip the walk of its shards when it knows the
// walk would find nothing due: no offer or stop notice was written since
// its last walk (writes, a count every writer moves, has not changed) and
// the earliest due time that walk saw has not come. It holds only where
// every writer of those records moves writes: the local stack, where one
// process holds the store. A walk that failed is not trusted, and maxIdle
// bounds the time between walks whatever the count says, so a write the
// count missed is still picked up; a message lost is sent again.
type idleSkip struct {
	writes  func() uint64
	maxIdle time.Duration

	walked   bool
	seen     uint64    // writes before the last walk
	next     time.Time // when what the last walk read falls due; zero: nothing read
	lastWalk time.Time
}

// skip reports whether the walk due at now can be left out. A nil idleSkip
// (the Lambda: writers are other processes) never skips.
func (q *idleSkip) skip(now time.Time) bool {
	switch {
	case q == nil || !q.walked:
		return false
	case q.writes() != q.seen:
		return false // something was offered or stopped since
	case !q.next.IsZero() && !now.Before(q.next):
		return false // something falls due
	}
	return now.Sub(q.lastWalk) < q.maxIdle
}

// before returns what the loop passes to after: the count read before a
// walk, so a write during the walk is seen by the next tick.
func (q *idleSkip) before() uint64 {
	if q == nil {
		return 0
	}
	return q.writes()
}

// after records a walk that started at now with writes at seen and found
// its next due time next; a failed walk is not trusted.
func (q *idleSkip) after(now time.Time, seen uint64, next time.Time, err error) {
	if q == nil {
		return
	}
	q.walked = err == nil
	q.seen, q.next, q.lastWalk = seen, next, now
}

func newIdleSkip(writes func() uint64, maxIdle time.Duration) *idleSkip {
	if writes == nil {
		return nil
	}
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdle
	}
	return &idleSkip{writes: writes, maxIdle: maxIdle}
}

// tickLoop runs pass on every tick until ctx ends, ticks is closed, or
// until (zero: never) is less than interval away, leaving out the passes
// idle says would find nothing due. report is handed what each pass did.
func tickLoop[R any](ctx context.Context, clk clock.Clock, ticks <-chan time.Time, interval time.Duration, until time.Time,
	idle *idleSkip, pass func(ctx context.Context) (R, time.Time, error), report func(R, error),
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
		if idle.skip(now) {
			continue
		}
		seen := idle.before()
		res, next, err := pass(ctx)
		idle.after(now, seen, next, err)
		report(res, err)
	}
}
