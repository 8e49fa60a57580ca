package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// MaxClaimTogether bounds the environments ClaimEnvironments moves in one
// transaction: two items each (the environment, its event) and two for the
// node and its credential, within DynamoDB's 100 items per transaction.
const MaxClaimTogether = 48

// ClaimEnvironments is ClaimEnvironment for many pending environments of one
// node at once, in one transaction: every environment's put conditioned on
// the version and state read (pending), the node active, the credential
// (keyHash, when set) unrevoked, and each claim's event. Concurrent claims
// of one node so never meet on the node's item (DynamoDB cancels
// transactions that hold one item at once), and a batch costs one call. An
// environment whose condition failed (another node claimed it, it was
// deleted or changed since it was read) is left out and the rest claimed
// again; refused lists those left out. The node gone or the credential
// revoked is an error, as for ClaimEnvironment.
func (s *Store) ClaimEnvironments(ctx context.Context, es []domain.Environment, n domain.Node, keyHash string, now time.Time) (claimed []domain.Environment, refused []string, err error) {
	if len(es) > MaxClaimTogether {
		return nil, nil, domain.Internal(fmt.Errorf("claim environments: %d at once, at most %d", len(es), MaxClaimTogether))
	}
	for len(es) > 0 {
		items := make([]types.TransactWriteItem, 0, 2*len(es)+2)
		afters := make([]domain.Environment, len(es))
		for i, e := range es {
			after := e
			after.State = domain.StateStarting
			after.Node = n.ID
			after.Version = e.Version + 1
			afters[i] = after
			item, err := marshal(s.newEnvItem(after))
			if err != nil {
				return nil, nil, err
			}
			items = append(items, types.TransactWriteItem{Put: &types.Put{
				TableName: aws.String(s.table), Item: item,
				ConditionExpression:      aws.String("attribute_exists(PK) AND version = :v AND #state = :pending"),
				ExpressionAttributeNames: map[string]string{"#state": "state"},
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":v": num(e.Version), ":pending": str(string(domain.StatePending)),
				},
			}})
		}
		for _, after := range afters {
			evPut, err := s.eventPut(domain.EnvEvent(ctx, after, now))
			if err != nil {
				return nil, nil, err
			}
			items = append(items, evPut)
		}
		nodeAt := len(items)
		items = append(items, s.nodeActiveCheck(n))
		credAt := -1
		if keyHash != "" {
			credAt = len(items)
			items = append(items, s.credentialCheck(keyHash))
		}
		reasons, err := s.transact(ctx, "claim environments", items)
		if err != nil {
			return nil, refused, err
		}
		switch {
		case reasons == nil:
			return afters, refused, nil
		case conditionFailed(reasons, credAt):
			return nil, refused, errRevokedCredential()
		case conditionFailed(reasons, nodeAt):
			return nil, refused, domain.Errorf(domain.CodeGone, "node %s is no longer active; register again", n.ID)
		}
		kept := es[:0:0]
		for i, e := range es {
			if conditionFailed(reasons, i) {
				refused = append(refused, e.ID)
			} else {
				kept = append(kept, e)
			}
		}
		if len(kept) == len(es) {
			return nil, refused, domain.Internal(fmt.Errorf("claim environments cancelled: %v", reasons))
		}
		es = kept
	}
	return nil, refused, nil
}
