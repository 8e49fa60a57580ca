package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/usage"
)

// Usage ledger items, one per organization, UTC day and template:
//
//	ORG#<org>  USAGE#<day>#<template>   seconds (N, added to), template, day, ttl
//
// The sort key orders an organization's usage by day, then template, which is
// the order the API answers in, so a read is one range query. Only the stop
// transaction writes them (stopItems), with ADD, so they are written exactly
// once per environment whatever retries or races: the transaction commits
// only if its conditional put of the environment does.

// UsageRetention is how long usage items are kept (DynamoDB TTL) and how far
// back GET /v1/usage may ask.
const UsageRetention = 400 * 24 * time.Hour

// maxTransactItems is DynamoDB's limit of actions in one transaction.
const maxTransactItems = 100

func usageSK(day, template string) string { return "USAGE#" + day + "#" + template }

type usageItem struct {
	Template string `dynamodbav:"template"`
	Day      string `dynamodbav:"day"`
	Seconds  int64  `dynamodbav:"seconds"`
}

// usageItems are the ADD updates that record e's seconds from created to
// stopped, split at UTC midnights. room is how many transaction actions are
// left: an environment live for more days than that (only possible if the
// timeout job did not run for months) has its earliest days folded into the
// first day that fits, so the total stays exact and the stop still commits.
func (s *Store) usageItems(e domain.Environment, stopped time.Time, room int) []types.TransactWriteItem {
	// From its run's start: the lease, or its last wake (a pause added the
	// time before it, pause.go).
	days := usage.Split(e.RunSince(), stopped)
	// Each day takes one item of the template ledger and one per grouping
	// the environment was leased with (usageby.go).
	perDay := 1 + len(e.UsageBy)
	room /= perDay
	if room < 1 {
		return nil
	}
	if len(days) > room {
		var folded int64
		for _, d := range days[:len(days)-room+1] {
			folded += d.Seconds
		}
		days = days[len(days)-room:]
		days[0].Seconds = folded
	}
	items := make([]types.TransactWriteItem, 0, len(days)*perDay)
	for _, d := range days {
		dayStart, _ := time.Parse(usage.DayLayout, d.Day) // Split formats it
		ttl := dayStart.Add(UsageRetention + 24*time.Hour).Unix()
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                aws.String(s.table),
			Key:                      key(orgPK(e.OrgID), usageSK(d.Day, e.Template)),
			UpdateExpression:         aws.String("ADD seconds :s SET template = :t, #day = :d, #ttl = :ttl"),
			ExpressionAttributeNames: map[string]string{"#day": "day", "#ttl": AttrTTL},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":s": num(d.Seconds), ":t": str(e.Template), ":d": str(d.Day), ":ttl": num(ttl),
			},
		}})
		items = append(items, s.groupedUsageItems(e, d, ttl)...)
	}
	return items
}

// ListUsage returns org's ledger from day from to day to (inclusive,
// YYYY-MM-DD), by day then template: one strongly consistent range query on
// the organization's partition, paged by the SDK.
func (s *Store) ListUsage(ctx context.Context, org, from, to string) ([]usage.Entry, error) {
	items, err := queryAll[usageItem](ctx, s, "list usage", &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String("PK = :pk AND SK BETWEEN :from AND :to"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(orgPK(org)), ":from": str("USAGE#" + from), ":to": str("USAGE#" + to + "#\uffff"),
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	out := make([]usage.Entry, len(items))
	for i, it := range items {
		out[i] = usage.Entry{Template: it.Template, Day: it.Day, Seconds: it.Seconds}
	}
	return out, nil
}
