package main

import (
	"context"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/webhooks"
)

// startDeliveries runs the webhook delivery job every d.webhooks, as
// EventBridge runs functions/deliveries in AWS (there every minute; here
// more often, so a local receiver hears of a change at once), and returns a
// function that stops it and waits for a run in progress.
func startDeliveries(d deps) func() {
	if d.webhooks <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(d.ctx)
	job := webhooks.NewJob(d.store, d.clock, d.log, webhooks.Options{Guard: webhooks.Guard{AllowLocal: d.allowLocalHooks}})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(d.webhooks)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Bounded like a Lambda run, so a stop is never kept waiting long.
			rctx, done := context.WithTimeout(ctx, time.Minute)
			sum, err := job.Run(rctx)
			done()
			logRun(ctx, d.log, "deliveries run", sum.FannedOut+sum.Succeeded+sum.Retrying+sum.Failed, sum, err)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
