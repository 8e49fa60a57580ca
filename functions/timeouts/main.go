// Command timeouts is the scheduled Lambda (EventBridge, every minute) that
// stops environments past their idle or hard deadline: wiring only, the job
// is shared/timeouts.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/nodes/apigw"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/timeouts"
)

func main() {
	rt := platform.Boot(context.Background())
	cfg, log, awsCfg := rt.Config, rt.Log, rt.AWS
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	// The lost-node sweep has its own schedule (functions/lostnodes); other
	// checks that must share this one would be appended as extra sweeps.
	// A timed-out environment a node runs is told to that node over the
	// node protocol's WebSocket API, where the stack has one (else the
	// nodesws function's stop job tells it).
	opts := timeouts.Options{}
	if cfg.SocketEndpoint != "" {
		opts.Stopper = nodes.NewStopper(st, apigw.New(awsCfg, cfg.SocketEndpoint), clock.System{}, log, 0)
	}
	// The budget run shares this schedule: a spent hard budget's
	// environments stop at the next timeout run.
	lambda.Start(handler(st, clock.System{}, log, opts, budgets.Sweep(st)))
}

// handler runs the timeout job once per scheduled event, then each extra
// sweep with the same instant, and logs one JSON summary. Any error fails the
// invocation, so EventBridge's retry and the function's error metric see it;
// the job itself is safe to repeat.
func handler(st timeouts.Store, clk clock.Clock, log *slog.Logger, opts timeouts.Options, extra ...timeouts.Sweep) func(context.Context, events.EventBridgeEvent) (timeouts.Summary, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (timeouts.Summary, error) {
		sum, err := timeouts.Run(ctx, st, clk, opts)
		errs := []error{err}
		for i, sweep := range extra {
			if serr := sweep(ctx, clk.Now()); serr != nil {
				errs = append(errs, fmt.Errorf("extra sweep %d: %w", i, serr))
			}
		}
		err = errors.Join(errs...)
		level := slog.LevelInfo
		if err != nil {
			level = slog.LevelError
		}
		log.Log(ctx, level, "timeouts run", "event", ev.ID, "scheduled", ev.Time, "summary", sum, "err", errString(err))
		return sum, err
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
