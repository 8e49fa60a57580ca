package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// identityKeysItem is ISSUER KEYS: the local issuer's signing keys
// (identity.Local), one item replaced whole, written once per rotation.
// A deployment on AWS signs with KMS and has no such item.
type identityKeysItem struct {
	PK      string `dynamodbav:"PK"`
	SK      string `dynamodbav:"SK"`
	Body    string `dynamodbav:"body"`
	Version int64  `dynamodbav:"version"`
}

const (
	identityKeysPK = "ISSUER"
	identityKeysSK = "KEYS"
)

// GetIdentityKeys reads the local issuer's keys: "" and 0 when none.
func (s *Store) GetIdentityKeys(ctx context.Context) (string, int64, error) {
	it, err := getOne[identityKeysItem](ctx, s, "identity keys", key(identityKeysPK, identityKeysSK))
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	return it.Body, it.Version, nil
}

// PutIdentityKeys writes body as version+1 if the stored version is
// version (0: none stored); false when another write came first.
func (s *Store) PutIdentityKeys(ctx context.Context, body string, version int64) (bool, error) {
	item, err := marshal(identityKeysItem{PK: identityKeysPK, SK: identityKeysSK, Body: body, Version: version + 1})
	if err != nil {
		return false, err
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}
	if version == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(PK)")
	} else {
		in.ConditionExpression = aws.String("version = :v")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": num(version)}
	}
	if _, err := s.db.PutItem(ctx, in); err != nil {
		if IsConditionFailed(err) {
			return false, nil
		}
		return false, dependencyError("put identity keys", err)
	}
	return true, nil
}
