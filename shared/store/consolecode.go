package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// consoleCodeItem is CONSOLECODE#<hash> CODE: a console sign-in code, stored
// under its SHA-256 like a token. It lives a minute; the ttl lets DynamoDB
// delete the unused ones, and readers compare expires themselves.
type consoleCodeItem struct {
	PK      string    `dynamodbav:"PK"`
	SK      string    `dynamodbav:"SK"`
	OrgID   string    `dynamodbav:"org"`
	UserID  string    `dynamodbav:"user"`
	Role    string    `dynamodbav:"role"`
	KeyHash string    `dynamodbav:"keyHash"`
	Created time.Time `dynamodbav:"created"`
	Expires time.Time `dynamodbav:"expires"`
	// TokenExpires caps the console token's expiry (its maker's).
	TokenExpires *time.Time `dynamodbav:"tokenExpires,omitempty"`
	TTL          int64      `dynamodbav:"ttl"`
}

func consoleCodePK(hash string) string { return "CONSOLECODE#" + hash }

const consoleCodeSK = "CODE"

// PutConsoleCode stores a new sign-in code. A hash collision is refused.
func (s *Store) PutConsoleCode(ctx context.Context, c domain.ConsoleCode) error {
	return s.putNew(ctx, "put console code", consoleCodeItem{
		PK: consoleCodePK(c.Hash), SK: consoleCodeSK, OrgID: c.OrgID, UserID: c.UserID, Role: string(c.Role),
		KeyHash: c.KeyHash, Created: c.Created, Expires: c.Expires, TokenExpires: c.TokenExpires, TTL: c.Expires.Unix(),
	}, "a console code with this hash already exists")
}

// GetConsoleCode reads a sign-in code by hash (strongly consistent); an
// unknown one is NotFound. It may be expired: the caller compares.
func (s *Store) GetConsoleCode(ctx context.Context, hash string) (domain.ConsoleCode, error) {
	it, err := getOne[consoleCodeItem](ctx, s, "console code", key(consoleCodePK(hash), consoleCodeSK))
	if err != nil {
		return domain.ConsoleCode{}, err
	}
	c := domain.ConsoleCode{
		Hash: hash, OrgID: it.OrgID, UserID: it.UserID, Role: domain.Role(it.Role), KeyHash: it.KeyHash,
		Created: it.Created.UTC(), Expires: it.Expires.UTC(),
	}
	if it.TokenExpires != nil {
		at := it.TokenExpires.UTC()
		c.TokenExpires = &at
	}
	return c, nil
}

// ExchangeConsoleCode spends a sign-in code and stores the console token k
// it mints, in one transaction: the code is deleted on the condition that it
// still exists and has not expired at now (so of two exchanges of one code,
// exactly one succeeds), the asking token must still be unrevoked, and the
// new key is written with its key.created event.
func (s *Store) ExchangeConsoleCode(ctx context.Context, c domain.ConsoleCode, k domain.APIKey, now time.Time) error {
	item, err := marshal(newKeyItem(k))
	if err != nil {
		return err
	}
	evPut, err := s.eventPut(keyEvent(ctx, domain.EventKeyCreated, k, k.Created))
	if err != nil {
		return err
	}
	reasons, err := s.transact(ctx, "exchange console code", []types.TransactWriteItem{
		{Delete: &types.Delete{
			TableName:                 aws.String(s.table),
			Key:                       key(consoleCodePK(c.Hash), consoleCodeSK),
			ConditionExpression:       aws.String("attribute_exists(PK) AND expires > :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": str(FormatTime(now))},
		}},
		{ConditionCheck: &types.ConditionCheck{
			TableName:           aws.String(s.table),
			Key:                 key(tokenPK(c.KeyHash), "TOKEN"),
			ConditionExpression: aws.String("attribute_exists(PK) AND attribute_not_exists(revoked)"),
		}},
		{Put: &types.Put{TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		evPut,
	})
	switch {
	case err != nil:
		return err
	case conditionFailed(reasons, 0):
		return domain.ConsoleCodeSpent()
	case conditionFailed(reasons, 1):
		return domain.Errorf(domain.CodeUnauthorized, "the token that asked for this sign-in code has been revoked")
	case reasons != nil:
		return domain.Errorf(domain.CodeConflict, "a key with this token already exists")
	}
	return nil
}
