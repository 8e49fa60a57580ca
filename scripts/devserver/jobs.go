package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/expiry"
	"github.com/envlease/envlease/shared/timeouts"
)

// minRunTime is the least time a local run is given, however short -sweep:
// a run stops taking work before its deadline, and one given a few
// milliseconds would do nothing.
const minRunTime = 10 * time.Second

// startJobs runs the timeout and expiry jobs every d.sweep, and the lost-node
// sweep on its own loop at the same period, as EventBridge runs
// functions/timeouts, functions/expiry and functions/lostnodes in AWS. Each
// run gets a deadline of one period (at least minRunTime), as a Lambda gets
// its timeout, so it stops taking new work before the next tick. It returns a function that
// stops them: it cancels a run in progress and waits for it to end, so
// nothing touches the table or the bucket after the stack is torn down.
// A sweep of 0 or less runs no jobs.
func startJobs(d deps) func() {
	if d.sweep <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(d.ctx)
	blobs := blob.New(blob.Options{Client: d.s3, Bucket: d.bucket, Clock: d.clock})
	lost := lostNodeSweep(d)
	var wg sync.WaitGroup
	every := func(run func(ctx context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(d.sweep)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				runCtx, done := context.WithTimeout(ctx, max(d.sweep, minRunTime))
				run(runCtx)
				done()
			}
		}()
	}
	every(func(ctx context.Context) {
		sum, err := timeouts.Run(ctx, d.store, d.clock, timeouts.Options{Stopper: stopperOf(d)})
		logRun(ctx, d.log, "timeouts run", sum.Found, sum, err)
		bsum, err := budgets.Run(ctx, d.store, d.clock.Now())
		logRun(ctx, d.log, "budget run", bsum.Spent+bsum.Alerts+bsum.Stopped, bsum, err)
		esum, err := expiry.Run(ctx, d.store, blobs, d.clock, expiry.Options{Log: d.log})
		logRun(ctx, d.log, "expiry run", esum.Found, esum, err)
	})
	every(func(ctx context.Context) {
		if err := lost(ctx, d.clock.Now()); err != nil && ctx.Err() == nil {
			d.log.ErrorContext(ctx, "lost-node sweep", "err", err.Error())
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// logRun logs a job's summary: at info when it found something, at debug
// when the tick was idle (every 15 s otherwise fills the terminal), at error
// when it failed, unless the stack is stopping.
func logRun(ctx context.Context, log *slog.Logger, msg string, found int, sum any, err error) {
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil:
		log.ErrorContext(ctx, msg, "summary", sum, "err", err.Error())
	case found > 0:
		log.InfoContext(ctx, msg, "summary", sum)
	default:
		log.DebugContext(ctx, msg, "summary", sum)
	}
}

// stopperOf is the stack's Stopper as the timeout job takes it (none when
// the stack has no node protocol).
func stopperOf(d deps) timeouts.Stopper {
	if d.stopper == nil {
		return nil
	}
	return d.stopper
}
