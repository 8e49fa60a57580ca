package main

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/envlease/envlease/shared/webhooks"
)

// handler runs the job once per invocation, scheduled or woken by the
// stream, until the outbox is empty or the invocation's deadline is near,
// and logs one JSON summary. The stream's records are only a wake-up: the
// job reads the outbox itself, so a batch of one record or of a hundred is
// the same run. An error fails the invocation so the function's error
// metric sees it (and the stream's poller retries the batch a bounded number
// of times); the job is safe to repeat and to overlap with itself (every
// step is a conditional write).
func handler(job *webhooks.Job, log *slog.Logger) func(context.Context, json.RawMessage) (webhooks.Summary, error) {
	return func(ctx context.Context, raw json.RawMessage) (webhooks.Summary, error) {
		tr, err := decodeTrigger(raw)
		if err != nil {
			log.ErrorContext(ctx, "deliveries run", "err", err.Error())
			return webhooks.Summary{}, err
		}
		sum, err := job.Run(ctx)
		level := slog.LevelInfo
		msg := ""
		if err != nil {
			level, msg = slog.LevelError, err.Error()
		}
		log.Log(ctx, level, "deliveries run", "trigger", tr.Kind, "event", tr.ID, "time", tr.Time, "records", tr.Records,
			"summary", sum, "err", msg)
		return sum, err
	}
}
