// Package timeouts is the timeout job: it stops every live environment whose
// idle deadline (idleUntil) or hard expiry (expires) has passed, recording
// why in stopReason. It runs on a schedule (functions/timeouts in AWS, the
// devserver locally) and is a plain function of a context, a store and a
// clock, so tests drive it with a fake clock instead of sleeping.
package timeouts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/sweep"
)

// Stop reasons this job records. idle: idleUntil passed without a touch;
// hard: the hard timeout (expires) passed, whatever the touches.
const (
	ReasonIdle = domain.StopIdle
	ReasonHard = domain.StopHard
)

// Store is what the job needs from persistence (store.Store).
type Store interface {
	EnvDuePartitions() []string
	DueEnvironments(ctx context.Context, part string, now time.Time, limit int, cursor string) (domain.EnvPage, error)
	ReindexEnvironment(ctx context.Context, e domain.Environment) error
	StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error)
}

// Sweep is another periodic check run beside the timeout job by the same
// schedule. Each gets the run's context and instant.
type Sweep func(ctx context.Context, now time.Time) error

// Defaults of Options.
const (
	DefaultPageSize = 100
	// DefaultWorkers stops run at once within one partition's page, and
	// DefaultShardWorkers partitions are worked at once: at most 32 calls in
	// flight, which a 512 MB function keeps busy without queueing.
	DefaultWorkers      = 4
	DefaultShardWorkers = 8
	// stopAttempts bounds how often one environment is stopped again after
	// its record changed under the job (a touch, a node's report).
	stopAttempts = 5
)

// Options tune a run; zero values take the defaults.
type Options struct {
	// PageSize is how many due environments one index query reads.
	PageSize int
	// Workers is how many stops of a page run at once.
	Workers int
	// ShardWorkers is how many due-index partitions are worked at once.
	ShardWorkers int
	// MaxPages bounds the index pages of one run over all partitions (0:
	// until nothing is due). What is left is found by the next run.
	MaxPages int
	// Margin is how long before the context's deadline the run stops taking
	// new work (sweep.DefaultMargin if 0); BudgetClock measures it (real
	// time if nil).
	Margin      time.Duration
	BudgetClock clock.Clock
	// Stopper, when set, tells the node of every environment the run moved
	// to stopping (nodes.Stopper); without it the stop job tells it, a few
	// seconds later.
	Stopper Stopper
}

// Stopper tells the node of a stopping environment to tear it down. It
// cannot fail the stop, already committed.
type Stopper interface {
	Stop(ctx context.Context, e domain.Environment)
}

// telling is a Store whose stops that leave an environment stopping tell
// its node.
type telling struct {
	Store
	stopper Stopper
}

// teller is the stopper's checkpoint order, when it gives them.
func (t telling) teller() checkpointTeller {
	ct, _ := t.stopper.(checkpointTeller)
	return ct
}

func (t telling) StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error) {
	cur, stopped, err := t.Store.StopEnvironment(ctx, e, to, reason, now)
	if err == nil && stopped && cur.State == domain.StateStopping {
		t.stopper.Stop(ctx, cur)
	}
	return cur, stopped, err
}

// Summary is what a run did; the scheduled function logs it as JSON.
type Summary struct {
	// Found is how many due candidates the index returned.
	Found int `json:"found"`
	// Stopped is how many this run stopped, Idle and Hard by reason.
	Stopped int `json:"stopped"`
	Idle    int `json:"idle"`
	Hard    int `json:"hard"`
	// Pausing is how many idle environments whose template pauses had
	// their pause checkpoint asked for (or still packing); Ended how many
	// paused ones were deleted (retention or hard expiry).
	Pausing int `json:"pausing"`
	Ended   int `json:"ended"`
	// AlreadyStopped were no longer live when the run came to them: a DELETE,
	// a node or an overlapping run stopped them first.
	AlreadyStopped int `json:"alreadyStopped"`
	// NotDue were touched after their index entry was written: their
	// deadline moved, and Reindexed of them had their entry moved to it.
	NotDue    int `json:"notDue"`
	Reindexed int `json:"reindexed"`
	// Failed could not be stopped (a dependency error); the next run retries.
	Failed int `json:"failed"`
	// Partitions is how many due-index partitions the run read; Pages how
	// many index queries it made.
	Partitions int `json:"partitions"`
	Pages      int `json:"pages"`
	// More is true when MaxPages or the time budget ended the run before the
	// index was exhausted.
	More       bool  `json:"more"`
	DurationMs int64 `json:"durationMs"`
}

// Reason says why e must stop at now, or "" if it need not. The hard expiry
// wins when both have passed: no touch can extend it.
func Reason(e domain.Environment, now time.Time) string {
	switch {
	case !now.Before(e.Expires):
		return ReasonHard
	case !now.Before(e.IdleUntil):
		return ReasonIdle
	}
	return ""
}

// StopState is where a stop takes e: stopping while a node runs it (the node
// tears it down and reports stopped), stopped otherwise. The quota and the
// usage ledger are settled either way, by the stop transaction.
func StopState(e domain.Environment) domain.State {
	if e.Node != "" && (e.State == domain.StateStarting || e.State == domain.StateReady) {
		return domain.StateStopping
	}
	return domain.StateStopped
}

// Run stops every environment due at the clock's current instant. It works
// the partitions of the due index with up to ShardWorkers at once, each in
// pages of PageSize with continuation, and stops taking new work when the
// time budget (the context's deadline less Margin) or MaxPages is reached,
// reporting More. Each stop goes through StopEnvironment, conditioned on the
// base item's version, so the quota is released exactly once however many
// runs, DELETEs and node reports race it. An environment the index listed
// but whose deadline a touch moved is reindexed (see store's due.go).
// Errors on one environment are counted, not fatal: the rest is still
// stopped and the next run retries. An error reading a partition ends that
// partition's work and is returned with the summary.
func Run(ctx context.Context, st Store, clk clock.Clock, opts Options) (Summary, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.ShardWorkers <= 0 {
		opts.ShardWorkers = DefaultShardWorkers
	}
	if opts.Stopper != nil {
		st = telling{Store: st, stopper: opts.Stopper}
	}
	start := time.Now()
	now := clk.Now()
	budget := sweep.NewBudget(ctx, opts.BudgetClock, opts.Margin)
	var (
		mu    sync.Mutex
		sum   Summary
		errs  []error
		pages int
	)
	// takePage reserves one index query of the run, or reports that the run
	// must stop (and that there may be more).
	takePage := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if budget.Spent() || opts.MaxPages > 0 && pages >= opts.MaxPages {
			sum.More = true
			return false
		}
		pages++
		return true
	}
	parts := st.EnvDuePartitions()
	sweep.Each(ctx, parts, opts.ShardWorkers, func(ctx context.Context, part string) {
		read := false
		for cursor := ""; ; {
			if err := ctx.Err(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			if !takePage() {
				return
			}
			page, err := st.DueEnvironments(ctx, part, now, opts.PageSize, cursor)
			mu.Lock()
			if !read {
				read = true
				sum.Partitions++
			}
			sum.Pages++
			if err != nil {
				errs = append(errs, fmt.Errorf("read due partition %s: %w", part, err))
				mu.Unlock()
				return
			}
			sum.Found += len(page.Environments)
			mu.Unlock()
			if err := stopAll(ctx, st, page.Environments, clk, opts.Workers, budget, &mu, &sum); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			if page.Next == "" {
				return
			}
			cursor = page.Next
		}
	})
	sum.DurationMs = time.Since(start).Milliseconds()
	return sum, errors.Join(errs...)
}

// stopAll stops the environments of one page with up to workers at once and
// adds the outcomes to sum (under mu). Once the budget is spent it takes no
// more of them; they stay due for the next run. It returns the first error met.
//
// Each stop is stamped with the clock's time when it is made, not the run's
// start: a run may last most of a minute, and a stop (its record, its usage
// and its event) stamped earlier than the events written before it would be
// missed by a reader following events by time.
func stopAll(ctx context.Context, st Store, envs []domain.Environment, clk clock.Clock, workers int, budget sweep.Budget, mu *sync.Mutex, sum *Summary) error {
	var first error
	left := sweep.Work(envs, workers, budget, func(e domain.Environment) {
		out, err := stopOne(ctx, st, e, clk.Now())
		mu.Lock()
		defer mu.Unlock()
		sum.add(out)
		if err != nil && first == nil {
			first = fmt.Errorf("stop %s/%s: %w", e.OrgID, e.ID, err)
		}
	})
	if left {
		mu.Lock()
		sum.More = true
		mu.Unlock()
	}
	return first
}

type outcome int

const (
	stoppedIdle outcome = iota
	stoppedHard
	alreadyStopped
	notDue
	reindexed
	failed
	pausing
	ended
)

func (s *Summary) add(o outcome) {
	switch o {
	case stoppedIdle:
		s.Stopped++
		s.Idle++
	case stoppedHard:
		s.Stopped++
		s.Hard++
	case alreadyStopped:
		s.AlreadyStopped++
	case notDue:
		s.NotDue++
	case reindexed:
		s.NotDue++
		s.Reindexed++
	case failed:
		s.Failed++
	case pausing:
		s.Pausing++
	case ended:
		s.Ended++
	}
}

// stopOne stops e if it is still due. e comes from the index, which may lag
// the table; StopEnvironment's version condition catches that, and hands
// back the current record, from which the decision is made again.
func stopOne(ctx context.Context, st Store, e domain.Environment, now time.Time) (outcome, error) {
	for range stopAttempts {
		if e.State == domain.StatePaused {
			return endPaused(ctx, st, e, now)
		}
		if !e.State.Live() {
			return alreadyStopped, nil
		}
		reason := Reason(e, now)
		if reason == ReasonIdle && e.Pauses() && e.State == domain.StateReady && e.Node != "" {
			if out, err, ok := pause(ctx, st, e, now); ok {
				return out, err
			}
			// Not paused (see pause): stopped below, as the template's stop would.
		}
		if reason == "" {
			// Touched since its entry was written: move the entry to the
			// deadline now on the item. A failure only leaves it early.
			if err := st.ReindexEnvironment(ctx, e); err != nil {
				return notDue, nil
			}
			return reindexed, nil
		}
		cur, stopped, err := st.StopEnvironment(ctx, e, StopState(e), reason, now)
		if err != nil {
			return failed, err
		}
		if stopped {
			if reason == ReasonHard {
				return stoppedHard, nil
			}
			return stoppedIdle, nil
		}
		e = cur
	}
	return failed, fmt.Errorf("the record kept changing; the next run retries")
}
