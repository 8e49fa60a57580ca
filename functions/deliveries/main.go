// Command deliveries is the scheduled Lambda (EventBridge, every minute) that
// delivers events to webhooks: wiring only, the job is shared/webhooks.
package main

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/webhooks"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	// Public HTTPS receivers only: the guard has no local allowance here.
	job := webhooks.NewJob(st, clock.System{}, rt.Log, webhooks.Options{})
	lambda.Start(handler(job, rt.Log))
}

// handler runs the job once per scheduled event, until the outbox is empty
// or the invocation's deadline is near, and logs one JSON summary. An error
// fails the invocation so the function's error metric sees it; the job is
// safe to repeat (every step is a conditional write).
func handler(job *webhooks.Job, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (webhooks.Summary, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (webhooks.Summary, error) {
		sum, err := job.Run(ctx)
		level := slog.LevelInfo
		msg := ""
		if err != nil {
			level, msg = slog.LevelError, err.Error()
		}
		log.Log(ctx, level, "deliveries run", "event", ev.ID, "scheduled", ev.Time, "summary", sum, "err", msg)
		return sum, err
	}
}
