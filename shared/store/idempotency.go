package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/domain"
)

// idemItem is ORG#<org> IDEM#<key>: the hash of the request an
// Idempotency-Key was first used with and the response it got. It is written
// by the lease transaction itself, so a record exists exactly when its lease does.
type idemItem struct {
	PK          string    `dynamodbav:"PK"`
	SK          string    `dynamodbav:"SK"`
	RequestHash string    `dynamodbav:"requestHash"`
	Status      int       `dynamodbav:"status"`
	Body        []byte    `dynamodbav:"body"`
	Created     time.Time `dynamodbav:"created"`
	Expires     time.Time `dynamodbav:"expires"`
	TTL         int64     `dynamodbav:"ttl"`
}

func idemSK(k string) string { return "IDEM#" + k }

func newIdemItem(r domain.IdempotencyRecord) idemItem {
	return idemItem{
		PK: orgPK(r.OrgID), SK: idemSK(r.Key), RequestHash: r.RequestHash, Status: r.Status, Body: r.Body,
		Created: r.Created, Expires: r.Expires, TTL: r.Expires.Unix(),
	}
}

// GetIdempotency returns the record of an Idempotency-Key, or nil when there
// is none or it has expired (DynamoDB's TTL deletes late, and minidyn never).
func (s *Store) GetIdempotency(ctx context.Context, org, k string, now time.Time) (*domain.IdempotencyRecord, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), idemSK(k)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, dependencyError("get idempotency record", err)
	}
	if out.Item == nil {
		return nil, nil
	}
	var it idemItem
	if err := unmarshal(out.Item, &it); err != nil {
		return nil, err
	}
	if !now.Before(it.Expires) {
		return nil, nil
	}
	return &domain.IdempotencyRecord{
		OrgID: org, Key: k, RequestHash: it.RequestHash, Status: it.Status, Body: it.Body,
		Created: it.Created.UTC(), Expires: it.Expires.UTC(),
	}, nil
}
