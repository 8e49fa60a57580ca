// Command deliveries is the Lambda that delivers events to webhooks: woken
// by the table's stream when an event enters the outbox, and every minute by
// EventBridge as the safety net and for retries. Wiring only: the job is
// shared/webhooks, the two event shapes are decoded in trigger.go.
package main

import (
	"context"

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
