package store

import (
	"context"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Organization secrets (docs/secrets.md):
//
//	ORG#<org>   SECRET#<name>   the value sealed under a data key, the data
//	                            key sealed by the key service; who set it
//
// Nothing here is a value in plain: the table (and its backups, streams and
// exports) holds only what the key service must open.
type secretItem struct {
	PK         string    `dynamodbav:"PK"`
	SK         string    `dynamodbav:"SK"`
	Org        string    `dynamodbav:"org"`
	Name       string    `dynamodbav:"name"`
	SetBy      string    `dynamodbav:"setBy"`
	Set        time.Time `dynamodbav:"set"`
	Size       int       `dynamodbav:"size"`
	KeyID      string    `dynamodbav:"keyId"`
	DataKey    []byte    `dynamodbav:"dataKey"`
	Nonce      []byte    `dynamodbav:"nonce"`
	Ciphertext []byte    `dynamodbav:"ciphertext"`
}

func secretSK(name string) string { return "SECRET#" + name }

func (it secretItem) sealed() domain.SealedSecret {
	return domain.SealedSecret{OrgID: it.Org, Name: it.Name, SetBy: it.SetBy, Set: it.Set.UTC(), Size: it.Size,
		KeyID: it.KeyID, DataKey: it.DataKey, Nonce: it.Nonce, Ciphertext: it.Ciphertext}
}

// PutSecret writes (or replaces) a sealed secret with its secret.set event,
// in one transaction.
func (s *Store) PutSecret(ctx context.Context, sec domain.SealedSecret) error {
	item, err := marshal(secretItem{PK: orgPK(sec.OrgID), SK: secretSK(sec.Name), Org: sec.OrgID, Name: sec.Name, SetBy: sec.SetBy,
		Set: sec.Set, Size: sec.Size, KeyID: sec.KeyID, DataKey: sec.DataKey, Nonce: sec.Nonce, Ciphertext: sec.Ciphertext})
	if err != nil {
		return err
	}
	_, err = s.transactWithEvent(ctx, "put secret", types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: item}},
		domain.NewEvent(ctx, domain.EventSecretSet, sec.OrgID, domain.Subject{Kind: "secret", ID: sec.Name}, sec.Set,
			map[string]any{"name": sec.Name, "size": sec.Size}))
	return err
}

// ListSecrets returns an organization's secrets in name order, sealed (the
// listing shows none of the sealed parts).
func (s *Store) ListSecrets(ctx context.Context, org string) ([]domain.SealedSecret, error) {
	in := s.inPartition(orgPK(org), "SECRET#")
	in.ConsistentRead = aws.Bool(true)
	items, err := queryAll[secretItem](ctx, s, "list secrets", in)
	if err != nil {
		return nil, err
	}
	out := make([]domain.SealedSecret, len(items))
	for i, it := range items {
		out[i] = it.sealed()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GetSecret reads one sealed secret.
func (s *Store) GetSecret(ctx context.Context, org, name string) (domain.SealedSecret, error) {
	if !idOK(name) {
		return domain.SealedSecret{}, domain.NotFound("secret")
	}
	it, err := getOne[secretItem](ctx, s, "secret", key(orgPK(org), secretSK(name)))
	if err != nil {
		return domain.SealedSecret{}, err
	}
	return it.sealed(), nil
}

// GetSecrets reads the named secrets of an organization in one call;
// the names it does not find are missing from the answer.
func (s *Store) GetSecrets(ctx context.Context, org string, names []string) (map[string]domain.SealedSecret, error) {
	out := map[string]domain.SealedSecret{}
	if len(names) == 0 {
		return out, nil
	}
	keys := make([]map[string]types.AttributeValue, 0, len(names))
	for _, n := range names {
		if idOK(n) {
			keys = append(keys, key(orgPK(org), secretSK(n)))
		}
	}
	if len(keys) == 0 {
		return out, nil
	}
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	for len(req) > 0 {
		res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, dependencyError("get secrets", err)
		}
		for _, raw := range res.Responses[s.table] {
			var it secretItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, err
			}
			out[it.Name] = it.sealed()
		}
		req = res.UnprocessedKeys
	}
	return out, nil
}

// DeleteSecret removes a secret with its secret.deleted event. Environments
// running with it keep the value their node holds until they end.
func (s *Store) DeleteSecret(ctx context.Context, org, name string, now time.Time) error {
	if !idOK(name) {
		return domain.NotFound("secret")
	}
	reasons, err := s.transactWithEvent(ctx, "delete secret", types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(s.table), Key: key(orgPK(org), secretSK(name)),
		ConditionExpression: aws.String("attribute_exists(PK)"),
	}}, domain.NewEvent(ctx, domain.EventSecretDeleted, org, domain.Subject{Kind: "secret", ID: name}, now, map[string]any{"name": name}))
	if err != nil {
		return err
	}
	if conditionFailed(reasons, 0) {
		return domain.NotFound("secret")
	}
	return nil
}
