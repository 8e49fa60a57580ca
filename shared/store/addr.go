package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// addrItem holds the recent failed authentication attempts of one peer
// address and its block. Times are epoch milliseconds so they compare as numbers.
type addrItem struct {
	PK string `dynamodbav:"PK"`
	SK string `dynamodbav:"SK"`
	// Recent are the times of the latest failures, in the order they were
	// appended; entries older than the window are dropped now and then.
	Recent []int64 `dynamodbav:"recent,omitempty"`
	// Seq is bumped by every write, so a trim replaces the list only if no
	// failure was appended since it was read.
	Seq            int64 `dynamodbav:"seq"`
	BlockedUntilMs int64 `dynamodbav:"blockedUntilMs"`
	TTL            int64 `dynamodbav:"ttl"`
}

// AuthWritePrefixes are the partition key prefixes of every item that
// authentication writes: TOKEN#<hash> (a key's lastUsed) and ADDR#<ip> (an
// address's failed attempts). Functions that otherwise only read write
// nothing else, and the stack confines their writes to these prefixes.
var AuthWritePrefixes = []string{"TOKEN#", addrPrefix}

const addrPrefix = "ADDR#"

func addrPK(addr string) string { return addrPrefix + addr }

func (it addrItem) domain() domain.AddressState {
	st := domain.AddressState{Recent: make([]time.Time, 0, len(it.Recent))}
	for _, ms := range it.Recent {
		st.Recent = append(st.Recent, time.UnixMilli(ms).UTC())
	}
	if it.BlockedUntilMs > 0 {
		st.BlockedUntil = time.UnixMilli(it.BlockedUntilMs).UTC()
	}
	return st
}

// RecordAuthFailure counts one failed attempt from addr at now. When
// threshold failures fall within the window ending at now (a sliding window:
// any threshold failures less than window apart), the address is blocked
// until now+block. Failures before a block do not count after it. It returns
// the address's state after the update.
//
// The failure is appended to the address's list in one atomic update, which
// returns the whole list: concurrent failures are all counted, each caller
// sees every one appended before its own, and no read comes first.
func (s *Store) RecordAuthFailure(ctx context.Context, addr string, now time.Time, window time.Duration, threshold int, block time.Duration) (domain.AddressState, error) {
	k := key(addrPK(addr), "ADDR")
	ttl := now.Add(window + block + time.Hour).Unix()
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      k,
		UpdateExpression:         aws.String("SET recent = list_append(if_not_exists(recent, :none), :now), seq = if_not_exists(seq, :zero) + :one, #ttl = :ttl"),
		ExpressionAttributeNames: map[string]string{"#ttl": AttrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":none": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
			":now":  &types.AttributeValueMemberL{Value: []types.AttributeValue{num(now.UnixMilli())}},
			":zero": num(0), ":one": num(1), ":ttl": num(ttl),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return domain.AddressState{}, dependencyError("record auth failure", err)
	}
	var it addrItem
	if err := unmarshal(out.Attributes, &it); err != nil {
		return domain.AddressState{}, err
	}
	// What counts: failures within the window, and none from before the last block.
	cutoff := now.Add(-window).UnixMilli()
	if it.BlockedUntilMs > 0 {
		cutoff = max(cutoff, it.BlockedUntilMs-block.Milliseconds())
	}
	var kept []int64
	for _, ms := range it.Recent {
		if ms > cutoff {
			kept = append(kept, ms)
		}
	}
	if len(kept) >= threshold {
		until := now.Add(block).UnixMilli()
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:        aws.String(s.table),
			Key:              k,
			UpdateExpression: aws.String("SET blockedUntilMs = :until, seq = seq + :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":until": num(until), ":one": num(1),
			},
		})
		if err != nil {
			return domain.AddressState{}, dependencyError("block address", err)
		}
		it.BlockedUntilMs = until
	} else if len(it.Recent) > 2*threshold {
		// Keep the item small: drop what has aged out, unless a failure was
		// appended meanwhile (then a later failure trims).
		list := make([]types.AttributeValue, len(kept))
		for i, ms := range kept {
			list[i] = num(ms)
		}
		if len(list) == 0 {
			// The store writes no empty list (docs/local.md: minidyn
			// mishandles them): the latest failure stays, aged out, and
			// counts for nothing since only those after the cutoff do.
			list = []types.AttributeValue{num(it.Recent[len(it.Recent)-1])}
		}
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:           aws.String(s.table),
			Key:                 k,
			UpdateExpression:    aws.String("SET recent = :kept, seq = seq + :one"),
			ConditionExpression: aws.String("seq = :seq"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":kept": &types.AttributeValueMemberL{Value: list}, ":one": num(1), ":seq": num(it.Seq),
			},
		})
		if err != nil && !IsConditionFailed(err) {
			return domain.AddressState{}, dependencyError("trim auth failures", err)
		}
	}
	it.Recent = kept
	return it.domain(), nil
}
