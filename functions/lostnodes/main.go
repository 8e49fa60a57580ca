// Command lostnodes is the scheduled Lambda (EventBridge, every minute) that
// declares lost the nodes that stopped heartbeating and fails what they ran:
// wiring only, the sweep is shared/nodes (SweepLostNodes). It has its own
// schedule and concurrency, so a long timeout run never starves it.
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

func main() {
	rt := platform.Boot(context.Background())
	st := store.New(dynamodb.NewFromConfig(rt.AWS), rt.Config.Table)
	svc := nodes.NewService(st, nil, clock.System{}, nodes.Options{})
	lambda.Start(handler(svc.SweepLostNodes, clock.System{}, rt.Log))
}

// handler runs one sweep per scheduled event and logs one JSON summary. An
// error fails the invocation (the function's error metric and the DLQ see
// it); the sweep is safe to repeat.
func handler(sweep func(context.Context, time.Time) (nodes.SweepResult, error), clk clock.Clock, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (nodes.SweepResult, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (nodes.SweepResult, error) {
		res, err := sweep(ctx, clk.Now())
		if err != nil {
			log.ErrorContext(ctx, "lost-node sweep", "event", ev.ID, "scheduled", ev.Time, "summary", res, "err", err.Error())
			return res, err
		}
		log.InfoContext(ctx, "lost-node sweep", "event", ev.ID, "scheduled", ev.Time, "summary", res)
		return res, nil
	}
}
