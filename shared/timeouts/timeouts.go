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
)

// Stop reasons this job records. idle: idleUntil passed without a touch;
// hard: the hard timeout (expires) passed, whatever the touches.
const (
	ReasonIdle = domain.StopIdle
	ReasonHard = domain.StopHard
)

// Store is what the job needs from persistence (store.Store).
type Store interface {
	DueEnvironments(ctx context.Context, now time.Time, limit int, cursor string) (domain.EnvPage, error)
	StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error)
}

// Sweep is another periodic check run beside the timeout job by the same
// schedule (the lost-node sweep of the node side, for one). Each gets the
// run's context and instant.
type Sweep func(ctx context.Context, now time.Time) error

// Defaults of Options.
const (
	DefaultPageSize = 100
	DefaultWorkers  = 8
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
	// MaxPages bounds one run (0: until nothing is due). What is left is
	// found by the next run, which starts again from the earliest deadline.
	MaxPages int
}

// Summary is what a run did; the scheduled function logs it as JSON.
type Summary struct {
	// Found is how many due candidates the index returned.
	Found int `json:"found"`
	// Stopped is how many this run stopped, Idle and Hard by reason.
	Stopped int `json:"stopped"`
	Idle    int `json:"idle"`
	Hard    int `json:"hard"`
	// AlreadyStopped were no longer live when the run came to them: a DELETE,
	// a node or an overlapping run stopped them first.
	AlreadyStopped int `json:"alreadyStopped"`
	// NotDue were touched after the index was read: their deadline moved.
	NotDue int `json:"notDue"`
	// Failed could not be stopped (a dependency error); the next run retries.
	Failed int `json:"failed"`
	Pages  int `json:"pages"`
	// More is true when MaxPages ended the run before the index was exhausted.
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

// Run stops every environment due at the clock's current instant. It walks
// the due index in pages of PageSize with continuation. Each stop goes
// through StopEnvironment, conditioned on the base item's version, so the
// quota is released exactly once however many runs, DELETEs and node reports
// race it. Errors stopping one environment are counted, not fatal: the rest
// of the page is still stopped and the next run retries. An error reading
// the index ends the run and is returned with the summary so far.
func Run(ctx context.Context, st Store, clk clock.Clock, opts Options) (Summary, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	start := time.Now()
	now := clk.Now()
	var sum Summary
	var errs []error
	cursor := ""
	for {
		if opts.MaxPages > 0 && sum.Pages == opts.MaxPages {
			sum.More = true
			break
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		page, err := st.DueEnvironments(ctx, now, opts.PageSize, cursor)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the due index: %w", err))
			break
		}
		sum.Pages++
		sum.Found += len(page.Environments)
		pageErr := stopAll(ctx, st, page.Environments, now, opts.Workers, &sum)
		if pageErr != nil {
			errs = append(errs, pageErr)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	sum.DurationMs = time.Since(start).Milliseconds()
	return sum, errors.Join(errs...)
}

// stopAll stops the environments of one page with up to workers at once and
// adds the outcomes to sum. It returns the first error met, if any.
func stopAll(ctx context.Context, st Store, envs []domain.Environment, now time.Time, workers int, sum *Summary) error {
	var mu sync.Mutex
	var first error
	jobs := make(chan domain.Environment)
	var wg sync.WaitGroup
	for range min(workers, len(envs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				out, err := stopOne(ctx, st, e, now)
				mu.Lock()
				sum.add(out)
				if err != nil && first == nil {
					first = fmt.Errorf("stop %s/%s: %w", e.OrgID, e.ID, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, e := range envs {
		jobs <- e
	}
	close(jobs)
	wg.Wait()
	return first
}

type outcome int

const (
	stoppedIdle outcome = iota
	stoppedHard
	alreadyStopped
	notDue
	failed
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
	case failed:
		s.Failed++
	}
}

// stopOne stops e if it is still due. e comes from the index, which may lag
// the table; StopEnvironment's version condition catches that, and hands
// back the current record, from which the decision is made again.
func stopOne(ctx context.Context, st Store, e domain.Environment, now time.Time) (outcome, error) {
	for range stopAttempts {
		if !e.State.Live() {
			return alreadyStopped, nil
		}
		reason := Reason(e, now)
		if reason == "" {
			return notDue, nil
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
