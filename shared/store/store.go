// Package store is the only persistence of envlease: one DynamoDB table,
// reached through aws-sdk-go-v2. It turns SDK errors into domain codes so the
// layers above never see DynamoDB types.
//
// Item layout (PK / SK, and the sparse index keys where an item has them):
//
//	ORG#<org>          ORG                      organization
//	ORG#<org>          USER#<user>              person
//	ORG#<org>          TEMPLATE#<name>          template
//	ORG#<org>          QUOTA#<template>         maxLeases and the running count
//	ORG#<org>          SECRET#<name>            a secret, sealed (secret.go)
//	TOKEN#<sha256>     TOKEN                    key record, found by hash; GSI1 ORG#<org>#KEYS / KEY#<id>
//	ADDR#<ip>          ADDR                     recent failed attempts and block
//	ISSUER             KEYS                     the local issuer's signing keys (identitykeys.go; none on AWS, where KMS signs)
package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/metrics"

	"github.com/envlease/envlease/shared/domain"
)

// Store reads and writes the single table.
type Store struct {
	db    *dynamodb.Client
	table string
	// shards is how many partitions each due index is spread over.
	shards int
	// clock stamps the events of the few writes not given a time (see SetClock).
	clock clock.Clock
	// changes signals, inside this process, environments whose state a
	// transaction of this store (or of a WithClient copy) changed.
	changes *changeSignal
	// due counts, inside this process, puts of offers and stop notices per shard.
	due *dueWrites
}

// New returns a store over table. Every call it makes is counted against the
// request in its context (see package metrics), for the request log.
func New(db *dynamodb.Client, table string) *Store {
	return &Store{db: dynamodb.New(db.Options(), countRequestCalls), table: table, shards: Schema.DueShards, changes: newChangeSignal(), due: newDueWrites()}
}

func countRequestCalls(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("envleaseRequestCalls",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				metrics.AddDynamoCall(ctx)
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

// Table returns the table name.
func (s *Store) Table() string { return s.table }

// DB returns the DynamoDB client, for jobs and tests that need the raw table.
func (s *Store) DB() *dynamodb.Client { return s.db }

func orgPK(org string) string { return "ORG#" + org }

// maxIDLen bounds an identifier that goes into a key. Every id the service
// makes is far shorter; the bound keeps keys that clients can choose (path
// ids, cursors) well inside DynamoDB's 1,024-byte sort keys.
const maxIDLen = 128

// idOK reports whether id can be an identifier of ours: 1 to maxIDLen
// characters of [A-Za-z0-9_-]. Lookups of anything else are not found without
// a call, so no client-chosen text reaches DynamoDB as a key it would refuse.
func idOK(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// key builds a primary key.
func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrPK: &types.AttributeValueMemberS{Value: pk},
		AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

func str(v string) types.AttributeValue   { return &types.AttributeValueMemberS{Value: v} }
func num(v int64) types.AttributeValue    { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
func boolean(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

// TimeLayout is how the table stores instants: UTC with a fixed nine-digit
// fraction, so that string order is time order in sort keys and conditions
// (RFC 3339 with trimmed fractions does not sort: "05Z" > "05.1Z").
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// FormatTime renders t in TimeLayout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

var encoder = attributevalue.NewEncoder(func(o *attributevalue.EncoderOptions) {
	o.EncodeTime = func(t time.Time) (types.AttributeValue, error) { return str(FormatTime(t)), nil }
})

// marshal renders an item struct; a failure here is a programming error.
func marshal(v any) (map[string]types.AttributeValue, error) {
	av, err := encoder.Encode(v)
	var item map[string]types.AttributeValue
	if m, ok := av.(*types.AttributeValueMemberM); ok && err == nil {
		item = m.Value
	} else if err == nil {
		err = fmt.Errorf("%T is not a struct or map", v)
	}
	if err != nil {
		return nil, domain.Internal(fmt.Errorf("marshal item: %w", err))
	}
	return item, nil
}

func unmarshal(item map[string]types.AttributeValue, v any) error {
	if err := attributevalue.UnmarshalMap(item, v); err != nil {
		return domain.Internal(fmt.Errorf("unmarshal item: %w", err))
	}
	return nil
}

// putNew writes an item that must not exist yet. A collision (the same token
// hash, a reused random id) is refused with conflict, never overwritten.
func (s *Store) putNew(ctx context.Context, op string, v any, conflict string) error {
	item, err := marshal(v)
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(PK)"),
	})
	if IsConditionFailed(err) {
		if s.ownRetriedPut(ctx, item) {
			return nil
		}
		return domain.Errorf(domain.CodeConflict, "%s", conflict)
	}
	return dependencyError(op, err)
}

// ownRetriedPut reports whether the item a refused conditional put found is
// exactly the one it was writing: the SDK retried a put whose first attempt
// was written but whose answer was lost (a timeout on a busy host), so the
// write succeeded. A genuine collision holds another item.
func (s *Store) ownRetriedPut(ctx context.Context, item map[string]types.AttributeValue) bool {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{AttrPK: item[AttrPK], AttrSK: item[AttrSK]},
	})
	return err == nil && out.Item != nil && reflect.DeepEqual(out.Item, item)
}

// IsConditionFailed reports whether err is a failed condition on a single-item write.
func IsConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// CancellationReasons returns the per-item reason codes of a cancelled
// transaction ("ConditionalCheckFailed", "None", ...), or nil.
func CancellationReasons(err error) []string {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil
	}
	out := make([]string, len(tce.CancellationReasons))
	for i, r := range tce.CancellationReasons {
		out[i] = aws.ToString(r.Code)
	}
	return out
}

// dependencyError maps an SDK error that no caller handled. Requests DynamoDB
// refused as malformed are our bugs (500); everything else — throttling,
// server errors, a network that does not answer — is a dependency the client
// may retry (503). The SDK has already retried with backoff by then.
func dependencyError(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return domain.Unavailable("the table", fmt.Errorf("%s: %w", op, err))
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch code := api.ErrorCode(); {
		case code == "ValidationException", code == "SerializationException",
			strings.HasSuffix(code, "ConditionalCheckFailedException"):
			return domain.Internal(fmt.Errorf("%s: %w", op, err))
		}
	}
	return domain.Unavailable("the table", fmt.Errorf("%s: %w", op, err))
}
