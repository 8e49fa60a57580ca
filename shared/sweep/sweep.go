// Package sweep is what every scheduled job shares: it works the partitions
// of a due index in parallel with a bounded number of workers, and stops
// taking new work when the run's time budget is spent, so a run ends before
// its Lambda is killed and the next run picks up what is left.
package sweep

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envlease/envlease/shared/clock"
)

// DefaultMargin is how long before its context's deadline a run stops taking
// new work: time for the calls in flight to finish and the summary to be
// logged.
const DefaultMargin = 5 * time.Second

// Budget says when a run must stop taking new work.
type Budget struct {
	clk   clock.Clock
	until time.Time // zero: no deadline
}

// NewBudget is the budget of a run under ctx: ctx's deadline (a Lambda's is
// its remaining time) less margin. A context without a deadline gives an
// unbounded budget. clk measures it; nil is real time, which is what a
// context's deadline is in; tests pass a fake clock they move on.
func NewBudget(ctx context.Context, clk clock.Clock, margin time.Duration) Budget {
	if clk == nil {
		clk = clock.System{}
	}
	if margin <= 0 {
		margin = DefaultMargin
	}
	b := Budget{clk: clk}
	if dl, ok := ctx.Deadline(); ok {
		// A run given less than twice the margin keeps half of what it has,
		// rather than none of it.
		if rem := dl.Sub(clk.Now()); margin > rem/2 {
			margin = rem / 2
		}
		b.until = dl.Add(-margin)
	}
	return b
}

// Spent reports whether the run must stop taking new work.
func (b Budget) Spent() bool {
	return !b.until.IsZero() && !b.clk.Now().Before(b.until)
}

// Each calls fn once for every partition, with up to workers calls at once
// (at least one), and returns when all have returned. fn decides itself when
// to stop within its partition (Budget.Spent, ctx). The partitions are taken
// in a random order: a run whose budget ends before it reaches them all
// would otherwise start every time with the same ones and never reach the
// rest.
func Each(ctx context.Context, parts []string, workers int, fn func(ctx context.Context, part string)) {
	parts = slices.Clone(parts)
	rand.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	Work(parts, workers, Budget{}, func(p string) { fn(ctx, p) }) // no budget: fn minds it
}

// Work calls fn for the items, with up to workers calls at once, and starts
// none once the budget is spent; it reports whether some were left for the
// next run. The budget is looked at again when a worker takes an item, not
// only before it is handed over: a worker takes it once its last call has
// returned, by when the budget may be spent.
func Work[T any](items []T, workers int, budget Budget, fn func(T)) (left bool) {
	var rest atomic.Bool
	jobs := make(chan T)
	var wg sync.WaitGroup
	for range max(1, min(workers, len(items))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range jobs {
				if budget.Spent() {
					rest.Store(true)
					continue
				}
				fn(it)
			}
		}()
	}
	for _, it := range items {
		if budget.Spent() {
			rest.Store(true)
			break
		}
		jobs <- it
	}
	close(jobs)
	wg.Wait()
	return rest.Load()
}
