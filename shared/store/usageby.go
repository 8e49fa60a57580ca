package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/usage"
)

// Grouped usage ledger items, one per organization, grouping, UTC day,
// value and template:
//
//	ORG#<org>  USAGEBY#<grouping>#<day>#<value>#<template>   seconds (N, added to), dim, value, template, day, ttl
//	ORG#<org>  USAGESETTINGS                                   body (usage.Settings as JSON), version
//
// The stop transaction writes them beside the template ledger (usage.go),
// one per grouping the environment was leased with (domain.Environment.
// UsageBy), so a stop's added writes are bounded by usage.MaxGroupings
// whatever labels an environment carries. Template names hold no '#', so the
// key stays unique for any value. A grouping's days sort together, so a
// month of one grouping is one range query of the organization's partition,
// paged by 1 MB: its read cost grows with the (value, template, day) items
// that exist, not with the environments that made them.

const usageSettingsSK = "USAGESETTINGS"

func usageBySK(dim, day, value, template string) string {
	return "USAGEBY#" + dim + "#" + day + "#" + value + "#" + template
}

type usageByItem struct {
	Dim      string `dynamodbav:"dim"`
	Value    string `dynamodbav:"value"`
	Template string `dynamodbav:"template"`
	Day      string `dynamodbav:"day"`
	Seconds  int64  `dynamodbav:"seconds"`
}

// groupedUsageItems are the ADD updates of one day of e in each grouping e
// records.
func (s *Store) groupedUsageItems(e domain.Environment, d usage.DaySeconds, ttl int64) []types.TransactWriteItem {
	items := make([]types.TransactWriteItem, 0, len(e.UsageBy))
	for _, dim := range e.UsageBy {
		v := usage.ValueOf(e, dim)
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName:                aws.String(s.table),
			Key:                      key(orgPK(e.OrgID), usageBySK(dim, d.Day, v, e.Template)),
			UpdateExpression:         aws.String("ADD seconds :s SET dim = :g, #value = :v, template = :t, #day = :d, #ttl = :ttl"),
			ExpressionAttributeNames: map[string]string{"#day": "day", "#ttl": AttrTTL, "#value": "value"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":s": num(d.Seconds), ":g": str(dim), ":v": str(v), ":t": str(e.Template), ":d": str(d.Day), ":ttl": num(ttl),
			},
		}})
	}
	return items
}

// ListUsageBy returns org's ledger of grouping dim from day from to day to
// (inclusive): one strongly consistent range query, paged by the SDK.
func (s *Store) ListUsageBy(ctx context.Context, org, dim, from, to string) ([]usage.GroupEntry, error) {
	items, err := queryAll[usageByItem](ctx, s, "list usage", &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String("PK = :pk AND SK BETWEEN :from AND :to"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(orgPK(org)), ":from": str("USAGEBY#" + dim + "#" + from), ":to": str("USAGEBY#" + dim + "#" + to + "#\uffff"),
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	out := make([]usage.GroupEntry, 0, len(items))
	for _, it := range items {
		if it.Dim != dim { // a longer label key sharing the prefix, e.g. label:team-a vs label:team
			continue
		}
		out = append(out, usage.GroupEntry{Dim: it.Dim, Value: it.Value, Template: it.Template, Day: it.Day, Seconds: it.Seconds})
	}
	return out, nil
}

type usageSettingsItem struct {
	PK      string `dynamodbav:"PK"`
	SK      string `dynamodbav:"SK"`
	Body    string `dynamodbav:"body"`
	Version int64  `dynamodbav:"version"`
}

// GetUsageSettings reads org's usage settings; an organization that never set
// them has the zero settings (no groupings, no rates) at version 0.
func (s *Store) GetUsageSettings(ctx context.Context, org string) (usage.Settings, int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), usageSettingsSK), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return usage.Settings{}, 0, dependencyError("get usage settings", err)
	}
	var set usage.Settings
	if out.Item == nil {
		set.Normalize()
		return set, 0, nil
	}
	var it usageSettingsItem
	if err := unmarshal(out.Item, &it); err != nil {
		return usage.Settings{}, 0, err
	}
	if err := json.Unmarshal([]byte(it.Body), &set); err != nil {
		return usage.Settings{}, 0, domain.Internal(fmt.Errorf("decode usage settings of %s: %w", org, err))
	}
	set.Normalize()
	return set, it.Version, nil
}

// PutUsageSettings replaces org's usage settings if they are still at
// version (0: never set), so two admins' writes never lose one another;
// a lost race is 409.
func (s *Store) PutUsageSettings(ctx context.Context, org string, set usage.Settings, version int64) error {
	body, err := json.Marshal(set)
	if err != nil {
		return domain.Internal(fmt.Errorf("encode usage settings: %w", err))
	}
	item, err := marshal(usageSettingsItem{PK: orgPK(org), SK: usageSettingsSK, Body: string(body), Version: version + 1})
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table), Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(PK) OR version = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(version)},
	})
	if IsConditionFailed(err) {
		return domain.Errorf(domain.CodeConflict, "the usage settings changed meanwhile; read them again and retry")
	}
	return dependencyError("put usage settings", err)
}

// PutUsageBy adds grouped ledger items as they are, 25 per BatchWriteItem,
// replacing any with the same key: for seeding benchmarks and importing
// history, never from a stop.
func (s *Store) PutUsageBy(ctx context.Context, org string, entries []usage.GroupEntry) error {
	for len(entries) > 0 {
		n := min(25, len(entries))
		reqs := make([]types.WriteRequest, 0, n)
		for _, e := range entries[:n] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
				AttrPK: str(orgPK(org)), AttrSK: str(usageBySK(e.Dim, e.Day, e.Value, e.Template)),
				"dim": str(e.Dim), "value": str(e.Value), "template": str(e.Template), "day": str(e.Day), "seconds": num(e.Seconds),
			}}})
		}
		entries = entries[n:]
		pending := map[string][]types.WriteRequest{s.table: reqs}
		for attempt := 0; len(pending[s.table]) > 0; attempt++ {
			if attempt > 8 {
				return domain.Unavailable("the table", fmt.Errorf("put usage: items left unprocessed"))
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return dependencyError("put usage", err)
			}
			pending = out.UnprocessedItems
		}
	}
	return nil
}
