// Command expiry is the scheduled Lambda (EventBridge, every 15 minutes) that
// deletes the objects of expired artifacts and leaves tombstones: wiring
// only, the job is shared/expiry.
package main

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/expiry"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	cfg, log, awsCfg := rt.Config, rt.Log, rt.AWS
	rt.RequireBucket("the expiry job deletes objects from it")
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	blobs := blob.New(blob.Options{Client: s3.NewFromConfig(awsCfg), Bucket: cfg.Bucket})
	lambda.Start(handler(st, blobs, clock.System{}, log, expiry.Options{Log: log}))
}

// handler runs the expiry job once per scheduled event and logs one JSON
// summary. An error fails the invocation; the job is safe to repeat, and
// what it could not expire stays in the due index for the next run.
func handler(st expiry.Store, blobs expiry.Blobs, clk clock.Clock, log *slog.Logger, opts expiry.Options) func(context.Context, events.EventBridgeEvent) (expiry.Summary, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (expiry.Summary, error) {
		sum, err := expiry.Run(ctx, st, blobs, clk, opts)
		if err != nil {
			log.ErrorContext(ctx, "expiry run", "event", ev.ID, "scheduled", ev.Time, "summary", sum, "err", err.Error())
			return sum, err
		}
		log.InfoContext(ctx, "expiry run", "event", ev.ID, "scheduled", ev.Time, "summary", sum)
		return sum, nil
	}
}
