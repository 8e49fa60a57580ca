package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/shared/store"
)

// The delivery job's trigger: the table's stream wakes the function when an
// event enters the webhook outbox, so a webhook hears of it within about a
// second rather than at the next minute's schedule. The records are only a
// wake-up (the job reads the outbox itself), so:
//   - the filter passes new outbox events only: an INSERT of an event item
//     (partition EVT#) that is in a GSI2 outbox partition (WHDUE#<n>). The
//     deliveries a fan-out creates are tried in the run that created them,
//     and every other write of the job is a MODIFY, so the job never wakes
//     itself; the filtered-out records cost nothing.
//   - NEW_IMAGE, because the outbox partition is not a key of the table.
//   - a batch waits up to a second and holds up to 1,000 records: under a
//     burst one run serves many events.
//   - no bisecting: no record can make a run fail (none is read), so halving
//     a failed batch would only run the same job again.
//   - a failed run is retried twice, and a record older than a minute is
//     dropped: by then the scheduled run has done its work. Nothing is
//     lost either way, the event waits in the outbox until a run fans it out.
//   - one batch at a time per stream shard; the function's reserved
//     concurrency caps the runs, stream-woken and scheduled, that overlap.
const (
	triggerBatchSize   = 1000
	triggerBatchWindow = 1 // seconds
	triggerRetries     = 2
	triggerMaxAge      = 60 // seconds; the least Lambda accepts
)

// tableStreamView is what the table's stream carries: the filter reads the
// new image's GSI2PK.
var tableStreamView = awsdynamodb.StreamViewType_NEW_IMAGE

// outboxFilter is the event source mapping's filter pattern (Lambda's
// event filtering syntax over the stream record).
func outboxFilter() map[string]interface{} {
	prefix := func(p string) map[string]interface{} {
		return map[string]interface{}{"S": []interface{}{map[string]interface{}{"prefix": p}}}
	}
	return map[string]interface{}{
		"eventName": []interface{}{"INSERT"},
		"dynamodb": map[string]interface{}{
			"Keys":     map[string]interface{}{store.AttrPK: prefix(store.EventPKPrefix)},
			"NewImage": map[string]interface{}{store.AttrGSI2PK: prefix(store.WebhookDueBase + "#")},
		},
	}
}

// wakeOnOutbox maps the table's stream to g's function. The event source
// grants the function's role the stream reads (Table.GrantStreamRead).
func (s *EnvleaseStack) wakeOnOutbox(g Group) {
	fn := s.Functions[g.Name]
	filter := outboxFilter()
	fn.AddEventSource(awslambdaeventsources.NewDynamoEventSource(s.Table, &awslambdaeventsources.DynamoEventSourceProps{
		StartingPosition:      awslambda.StartingPosition_LATEST,
		BatchSize:             jsii.Number(triggerBatchSize),
		MaxBatchingWindow:     awscdk.Duration_Seconds(jsii.Number(triggerBatchWindow)),
		BisectBatchOnError:    jsii.Bool(false),
		RetryAttempts:         jsii.Number(triggerRetries),
		MaxRecordAge:          awscdk.Duration_Seconds(jsii.Number(triggerMaxAge)),
		ParallelizationFactor: jsii.Number(1),
		Filters:               &[]*map[string]interface{}{awslambda.FilterCriteria_Filter(&filter)},
	}))
	suppressTree(fn.Role(), nagRule{"AwsSolutions-IAM5",
		"dynamodb:ListStreams has no resource-level permission; the stream trigger's event source mapping needs it, and it lists stream ARNs, never an item. The stream's records are read on its own ARN.",
		[]string{"Resource::*"}})
}
