package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The two ways the function is invoked.
const (
	triggerSchedule = "schedule" // EventBridge's rule, every minute
	triggerStream   = "stream"   // the table's stream: new events entered the outbox
)

// trigger is what woke a run, for its log line.
type trigger struct {
	Kind string
	// ID is the scheduled event's id, or the batch's first stream record's.
	ID string
	// Time is the scheduled time, or the newest record's creation time
	// (DynamoDB's approximate time of the write).
	Time time.Time
	// Records is how many stream records the batch holds (0 when scheduled).
	Records int
}

// decodeTrigger tells an EventBridge scheduled event from a DynamoDB stream
// batch. Anything else is refused, so a wrongly wired trigger shows up as
// errors rather than as runs nobody asked for.
func decodeTrigger(raw json.RawMessage) (trigger, error) {
	var probe struct {
		Records    []json.RawMessage `json:"Records"`
		Source     string            `json:"source"`
		DetailType string            `json:"detail-type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return trigger{}, fmt.Errorf("invocation event: %w", err)
	}
	switch {
	case probe.Records != nil:
		var batch events.DynamoDBEvent
		if err := json.Unmarshal(raw, &batch); err != nil {
			return trigger{}, fmt.Errorf("stream batch: %w", err)
		}
		if len(batch.Records) == 0 {
			return trigger{}, errors.New("stream batch without records")
		}
		tr := trigger{Kind: triggerStream, ID: batch.Records[0].EventID, Records: len(batch.Records)}
		for _, r := range batch.Records {
			if r.EventSource != "aws:dynamodb" {
				return trigger{}, fmt.Errorf("stream batch: record %s from %q, want aws:dynamodb", r.EventID, r.EventSource)
			}
			if t := r.Change.ApproximateCreationDateTime.Time; t.After(tr.Time) {
				tr.Time = t.UTC()
			}
		}
		return tr, nil
	case probe.Source == "aws.events" && probe.DetailType == "Scheduled Event":
		var ev events.EventBridgeEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return trigger{}, fmt.Errorf("scheduled event: %w", err)
		}
		return trigger{Kind: triggerSchedule, ID: ev.ID, Time: ev.Time.UTC()}, nil
	}
	return trigger{}, fmt.Errorf("invocation event is neither a scheduled event nor a DynamoDB stream batch (source %q)", probe.Source)
}
