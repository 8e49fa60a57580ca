package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// addrItem counts failed authentication attempts of one peer address in a
// fixed window. Times are epoch seconds so conditions compare numbers.
type addrItem struct {
	PK           string `dynamodbav:"PK"`
	SK           string `dynamodbav:"SK"`
	Failures     int    `dynamodbav:"fails"`
	WindowStart  int64  `dynamodbav:"windowStart"`
	BlockedUntil int64  `dynamodbav:"blockedUntil"`
	TTL          int64  `dynamodbav:"ttl"`
}

func addrPK(addr string) string { return "ADDR#" + addr }

func (it addrItem) domain() domain.AddressState {
	st := domain.AddressState{Failures: it.Failures}
	if it.WindowStart > 0 {
		st.WindowStart = time.Unix(it.WindowStart, 0).UTC()
	}
	if it.BlockedUntil > 0 {
		st.BlockedUntil = time.Unix(it.BlockedUntil, 0).UTC()
	}
	return st
}

// RecordAuthFailure counts one failed attempt from addr. When the count within
// window reaches threshold, the address is blocked until now+block and the
// count starts over. It returns the address's state after the update.
func (s *Store) RecordAuthFailure(ctx context.Context, addr string, now time.Time, window time.Duration, threshold int, block time.Duration) (domain.AddressState, error) {
	k := key(addrPK(addr), "ADDR")
	cutoff := now.Add(-window).Unix()
	ttl := now.Add(window + block + time.Hour).Unix()
	vals := map[string]types.AttributeValue{
		":one": num(1), ":cutoff": num(cutoff), ":ttl": num(ttl),
	}
	// Within the current window: add one. Otherwise start a new window. Two
	// conditional writes keep the counter exact under concurrent failures.
	var out *dynamodb.UpdateItemOutput
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		out, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       k,
			UpdateExpression:          aws.String("SET fails = fails + :one, #ttl = :ttl"),
			ConditionExpression:       aws.String("windowStart > :cutoff"),
			ExpressionAttributeNames:  map[string]string{"#ttl": AttrTTL},
			ExpressionAttributeValues: vals,
			ReturnValues:              types.ReturnValueAllNew,
		})
		if !IsConditionFailed(err) {
			break
		}
		out, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                aws.String(s.table),
			Key:                      k,
			UpdateExpression:         aws.String("SET fails = :one, windowStart = :now, #ttl = :ttl"),
			ConditionExpression:      aws.String("attribute_not_exists(windowStart) OR windowStart <= :cutoff"),
			ExpressionAttributeNames: map[string]string{"#ttl": AttrTTL},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":one": num(1), ":cutoff": num(cutoff), ":ttl": num(ttl), ":now": num(now.Unix()),
			},
			ReturnValues: types.ReturnValueAllNew,
		})
		if !IsConditionFailed(err) {
			break
		}
	}
	if err != nil {
		return domain.AddressState{}, dependencyError("record auth failure", err)
	}
	var it addrItem
	if err := unmarshal(out.Attributes, &it); err != nil {
		return domain.AddressState{}, err
	}
	if it.Failures < threshold {
		return it.domain(), nil
	}
	until := now.Add(block).Unix()
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       k,
		UpdateExpression:          aws.String("SET blockedUntil = :until, fails = :zero, windowStart = :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": num(until), ":zero": num(0), ":now": num(now.Unix())},
	})
	if err != nil {
		return domain.AddressState{}, dependencyError("block address", err)
	}
	return domain.AddressState{BlockedUntil: time.Unix(until, 0).UTC(), WindowStart: now}, nil
}
