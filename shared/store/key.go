package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// keyItem is a key record stored under its token's hash, so authentication
// is one read by hash. GSI1 lists an organization's keys and finds one by id.
type keyItem struct {
	PK         string     `dynamodbav:"PK"`
	SK         string     `dynamodbav:"SK"`
	GSI1PK     string     `dynamodbav:"GSI1PK"`
	GSI1SK     string     `dynamodbav:"GSI1SK"`
	ID         string     `dynamodbav:"id"`
	Kind       string     `dynamodbav:"kind"`
	Name       string     `dynamodbav:"name"`
	Prefix     string     `dynamodbav:"prefix"`
	CreatedBy  string     `dynamodbav:"createdBy"`
	Source     string     `dynamodbav:"source"`
	Created    time.Time  `dynamodbav:"created"`
	LastUsed   *time.Time `dynamodbav:"lastUsed,omitempty"`
	Revoked    *time.Time `dynamodbav:"revoked,omitempty"`
	Expires    *time.Time `dynamodbav:"expires,omitempty"`
	TTL        int64      `dynamodbav:"ttl,omitempty"`
	OwnerKind  string     `dynamodbav:"ownerKind"`
	OwnerID    string     `dynamodbav:"ownerId"`
	OrgID      string     `dynamodbav:"org"`
	Credential string     `dynamodbav:"credential"`
	UserID     string     `dynamodbav:"user,omitempty"`
	Role       string     `dynamodbav:"role,omitempty"`
	Pool       string     `dynamodbav:"pool,omitempty"`
	Hash       string     `dynamodbav:"hash"`
	// Scopes and restrictions ride on the record authentication reads
	// (one BatchGetItem), so checking them costs no call.
	Scopes       []string             `dynamodbav:"scopes,omitempty"`
	Restrictions *domain.Restrictions `dynamodbav:"restrictions,omitempty"`
	Exchange     *domain.Exchange     `dynamodbav:"exchange,omitempty"`
}

// ExpiredKeyRetention is how long the record of a token with an expiry (a
// console sign-in token) stays listed after it expired, before DynamoDB's TTL
// may delete it: each envlease console makes one, and they would otherwise
// pile up in the listing. Its events stay for the events' retention.
const ExpiredKeyRetention = 7 * 24 * time.Hour

func tokenPK(hash string) string   { return "TOKEN#" + hash }
func keysGSI1PK(org string) string { return "ORG#" + org + "#KEYS" }

func newKeyItem(k domain.APIKey) keyItem {
	var ttl int64
	if k.Expires != nil {
		ttl = k.Expires.Add(ExpiredKeyRetention).Unix()
	}
	return keyItem{
		PK: tokenPK(k.Hash), SK: "TOKEN",
		GSI1PK: keysGSI1PK(k.OrgID), GSI1SK: "KEY#" + k.ID,
		ID: k.ID, Kind: k.Kind, Name: k.Name, Prefix: k.Prefix, CreatedBy: k.CreatedBy,
		Source: k.Source, Created: k.Created, LastUsed: k.LastUsed, Revoked: k.Revoked,
		OwnerKind: k.Owner.Kind, OwnerID: k.Owner.ID, OrgID: k.OrgID, Credential: k.Credential,
		UserID: k.UserID, Role: string(k.Role), Pool: k.Pool, Hash: k.Hash,
		Expires: k.Expires, TTL: ttl,
		Scopes: k.Scopes, Restrictions: k.Restrictions, Exchange: k.Exchange,
	}
}

func (it keyItem) domain() domain.APIKey {
	return domain.APIKey{
		ID: it.ID, Kind: it.Kind, Name: it.Name, Prefix: it.Prefix, CreatedBy: it.CreatedBy,
		Source: it.Source, Created: it.Created.UTC(), LastUsed: utcPtr(it.LastUsed), Revoked: utcPtr(it.Revoked),
		Expires: utcPtr(it.Expires), Owner: domain.Owner{Kind: it.OwnerKind, ID: it.OwnerID}, OrgID: it.OrgID, Credential: it.Credential,
		UserID: it.UserID, Role: domain.Role(it.Role), Pool: it.Pool, Hash: it.Hash,
		Scopes: it.Scopes, Restrictions: it.Restrictions, Exchange: it.Exchange,
	}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// PutKey stores a new key record. Hash collisions are refused, not overwritten.
func (s *Store) PutKey(ctx context.Context, k domain.APIKey) error {
	return s.putNewWithEvent(ctx, "put key", newKeyItem(k), "a key with this token already exists", keyEvent(ctx, domain.EventKeyCreated, k, k.Created))
}

// ListKeys returns an organization's key records, newest first.
func (s *Store) ListKeys(ctx context.Context, org string) ([]domain.APIKey, error) {
	items, err := queryIndexAll[keyItem](ctx, s, "list keys", &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(IndexGSI1),
		KeyConditionExpression: aws.String("GSI1PK = :pk AND begins_with(GSI1SK, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(keysGSI1PK(org)), ":sk": str("KEY#"),
		},
	})
	if err != nil {
		return nil, err
	}
	out := make([]domain.APIKey, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// GetKey finds a key record of org by id.
func (s *Store) GetKey(ctx context.Context, org, id string) (domain.APIKey, error) {
	if !idOK(id) {
		return domain.APIKey{}, domain.NotFound("key")
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(IndexGSI1),
		KeyConditionExpression: aws.String("GSI1PK = :pk AND GSI1SK = :sk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(keysGSI1PK(org)), ":sk": str("KEY#" + id),
		},
	})
	if err != nil {
		return domain.APIKey{}, dependencyError("get key", err)
	}
	// GSI1 projects keys only: the record is the base item it points at.
	items, err := s.fetchItems(ctx, "get key", out.Items[:min(1, len(out.Items))])
	if err != nil {
		return domain.APIKey{}, err
	}
	if len(items) == 0 {
		return domain.APIKey{}, domain.NotFound("key")
	}
	var it keyItem
	if err := unmarshal(items[0], &it); err != nil {
		return domain.APIKey{}, err
	}
	return it.domain(), nil
}

// RevokeKey sets revoked on a key once; revoking again keeps the first time.
func (s *Store) RevokeKey(ctx context.Context, k domain.APIKey, now time.Time) (domain.APIKey, error) {
	// The first revocation writes the key.revoked event with it; a repeated
	// one (the condition fails) changes nothing and falls through to the read below.
	if k.Revoked == nil {
		at := now.UTC()
		reasons, err := s.transactWithEvent(ctx, "revoke key", types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(s.table),
			Key:                       key(tokenPK(k.Hash), "TOKEN"),
			UpdateExpression:          aws.String("SET revoked = :now"),
			ConditionExpression:       aws.String("attribute_exists(PK) AND attribute_not_exists(revoked)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": str(FormatTime(now))},
		}}, keyEvent(ctx, domain.EventKeyRevoked, k, at))
		if err != nil {
			return domain.APIKey{}, err
		}
		if reasons == nil {
			k.Revoked = &at
			return k, nil
		}
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(tokenPK(k.Hash), "TOKEN"),
		UpdateExpression:          aws.String("SET revoked = if_not_exists(revoked, :now)"),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": str(FormatTime(now))},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if IsConditionFailed(err) {
		return domain.APIKey{}, domain.NotFound("key")
	}
	if err != nil {
		return domain.APIKey{}, dependencyError("revoke key", err)
	}
	var it keyItem
	if err := unmarshal(out.Attributes, &it); err != nil {
		return domain.APIKey{}, err
	}
	return it.domain(), nil
}

// SetUserKeysRole gives a person's CLI tokens the person's role, so a role
// changed by configuration applies to the tokens already issued (a token
// acts as its person). Organization keys and node credentials keep theirs.
func (s *Store) SetUserKeysRole(ctx context.Context, org, user string, role domain.Role) error {
	ks, err := s.ListKeys(ctx, org)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if k.Credential != domain.CredentialCLI || k.UserID != user || k.Role == role {
			continue
		}
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       key(tokenPK(k.Hash), "TOKEN"),
			UpdateExpression:          aws.String("SET #role = :role"),
			ConditionExpression:       aws.String("attribute_exists(PK)"),
			ExpressionAttributeNames:  map[string]string{"#role": "role"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":role": str(string(role))},
		})
		if err != nil && !IsConditionFailed(err) {
			return dependencyError("set key role", err)
		}
	}
	return nil
}

// MarkKeyUsed records lastUsed unless it was recorded within minInterval, so a
// busy key costs one write a minute, not one per request.
func (s *Store) MarkKeyUsed(ctx context.Context, hash string, now time.Time, minInterval time.Duration) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.table),
		Key:                 key(tokenPK(hash), "TOKEN"),
		UpdateExpression:    aws.String("SET lastUsed = :now"),
		ConditionExpression: aws.String("attribute_exists(PK) AND (attribute_not_exists(lastUsed) OR lastUsed <= :cutoff)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now":    str(FormatTime(now)),
			":cutoff": str(FormatTime(now.Add(-minInterval))),
		},
	})
	if IsConditionFailed(err) {
		return nil
	}
	return dependencyError("mark key used", err)
}

// LookupCredential fetches the key record for a token hash and the failed-attempt
// record of addr in one BatchGetItem: authentication costs one round trip.
// hash may be empty (no token presented); then only the address is read.
func (s *Store) LookupCredential(ctx context.Context, hash, addr string) (*domain.APIKey, domain.AddressState, error) {
	keys := []map[string]types.AttributeValue{key(addrPK(addr), "ADDR")}
	if hash != "" {
		keys = append(keys, key(tokenPK(hash), "TOKEN"))
	}
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	var (
		found *domain.APIKey
		state domain.AddressState
	)
	// UnprocessedKeys is rare for two keys but legal; retry those few times.
	for attempt := 0; len(req) > 0 && attempt < 5; attempt++ {
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, state, dependencyError("lookup credential", err)
		}
		for _, raw := range out.Responses[s.table] {
			pk, _ := raw[AttrPK].(*types.AttributeValueMemberS)
			if pk == nil {
				continue
			}
			if pk.Value == addrPK(addr) {
				var it addrItem
				if err := unmarshal(raw, &it); err != nil {
					return nil, state, err
				}
				state = it.domain()
				continue
			}
			var it keyItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, state, err
			}
			k := it.domain()
			found = &k
		}
		req = out.UnprocessedKeys
	}
	if len(req) > 0 {
		return nil, state, domain.Unavailable("the table", fmt.Errorf("lookup credential: keys left unprocessed"))
	}
	return found, state, nil
}
