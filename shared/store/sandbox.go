package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Sandbox items:
//
//	ORG#<org>         SANDBOX#<id>   the sandbox record
//	JOINKEY#<sha256>  JOINKEY        its network-join key, found by hash; `redeemed` once used
type sandboxItem struct {
	PK            string     `dynamodbav:"PK"`
	SK            string     `dynamodbav:"SK"`
	Org           string     `dynamodbav:"org"`
	ID            string     `dynamodbav:"id"`
	Name          string     `dynamodbav:"name"`
	Hostname      string     `dynamodbav:"hostname"`
	PublicKey     string     `dynamodbav:"publicKey"`
	CreatedBy     string     `dynamodbav:"createdBy"`
	Created       time.Time  `dynamodbav:"created"`
	Joined        *time.Time `dynamodbav:"joined,omitempty"`
	JoinKeyPrefix string     `dynamodbav:"joinKeyPrefix"`
	JoinKeyHash   string     `dynamodbav:"joinKeyHash"`
}

type joinKeyItem struct {
	PK       string     `dynamodbav:"PK"`
	SK       string     `dynamodbav:"SK"`
	Org      string     `dynamodbav:"org"`
	Sandbox  string     `dynamodbav:"sandbox"`
	Created  time.Time  `dynamodbav:"created"`
	Redeemed *time.Time `dynamodbav:"redeemed,omitempty"`
}

func sandboxSK(id string) string   { return "SANDBOX#" + id }
func joinKeyPK(hash string) string { return "JOINKEY#" + hash }

func (it sandboxItem) domain() domain.Sandbox {
	return domain.Sandbox{
		OrgID: it.Org, ID: it.ID, Name: it.Name, Hostname: it.Hostname, PublicKey: it.PublicKey,
		CreatedBy: it.CreatedBy, Created: it.Created.UTC(), Joined: utcPtr(it.Joined),
		JoinKeyPrefix: it.JoinKeyPrefix, JoinKeyHash: it.JoinKeyHash,
	}
}

// PutSandbox registers a sandbox and its join key (by hash) in one transaction.
func (s *Store) PutSandbox(ctx context.Context, sb domain.Sandbox) error {
	sbAV, err := marshal(sandboxItem{
		PK: orgPK(sb.OrgID), SK: sandboxSK(sb.ID), Org: sb.OrgID, ID: sb.ID, Name: sb.Name,
		Hostname: sb.Hostname, PublicKey: sb.PublicKey, CreatedBy: sb.CreatedBy, Created: sb.Created,
		Joined: sb.Joined, JoinKeyPrefix: sb.JoinKeyPrefix, JoinKeyHash: sb.JoinKeyHash,
	})
	if err != nil {
		return err
	}
	jkAV, err := marshal(joinKeyItem{PK: joinKeyPK(sb.JoinKeyHash), SK: "JOINKEY", Org: sb.OrgID, Sandbox: sb.ID, Created: sb.Created})
	if err != nil {
		return err
	}
	cond := aws.String("attribute_not_exists(PK)")
	evPut, err := s.eventPut(domain.NewEvent(ctx, domain.EventSbxRegister, sb.OrgID, domain.Subject{Kind: "sandbox", ID: sb.ID}, sb.Created,
		map[string]any{"name": sb.Name, "hostname": sb.Hostname}))
	if err != nil {
		return err
	}
	reasons, err := s.transact(ctx, "put sandbox", []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.table), Item: sbAV, ConditionExpression: cond}},
		{Put: &types.Put{TableName: aws.String(s.table), Item: jkAV, ConditionExpression: cond}},
		evPut,
	})
	if err != nil {
		return err
	}
	if reasons != nil {
		return domain.Errorf(domain.CodeConflict, "a sandbox with this id or join key already exists")
	}
	return nil
}

// GetSandbox reads one sandbox of org.
func (s *Store) GetSandbox(ctx context.Context, org, id string) (domain.Sandbox, error) {
	if !idOK(id) {
		return domain.Sandbox{}, domain.NotFound("sandbox")
	}
	it, err := getOne[sandboxItem](ctx, s, "sandbox", key(orgPK(org), sandboxSK(id)))
	if err != nil {
		return domain.Sandbox{}, err
	}
	return it.domain(), nil
}

// ListSandboxes returns org's sandboxes, newest first (ids sort by creation).
func (s *Store) ListSandboxes(ctx context.Context, org string) ([]domain.Sandbox, error) {
	in := s.inPartition(orgPK(org), "SANDBOX#")
	in.ScanIndexForward = aws.Bool(false)
	items, err := queryAll[sandboxItem](ctx, s, "list sandboxes", in)
	if err != nil {
		return nil, err
	}
	out := make([]domain.Sandbox, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, nil
}

// RedeemJoinKey marks a join key used and its sandbox joined, once: the
// condition on `redeemed` makes a second redemption fail even when two race.
// An unknown key, or another organization's, is 404; a used one is 410.
func (s *Store) RedeemJoinKey(ctx context.Context, org, hash string, now time.Time) (domain.Sandbox, error) {
	jk, err := s.getJoinKey(ctx, hash)
	if err != nil {
		return domain.Sandbox{}, err
	}
	if jk == nil || jk.Org != org {
		return domain.Sandbox{}, domain.NotFound("join key")
	}
	if jk.Redeemed != nil {
		return domain.Sandbox{}, usedJoinKey()
	}
	// Read the sandbox before redeeming, not after: once the transaction has
	// committed the key is spent, so no call may follow that could fail and
	// tell the client to retry a redemption that can then only be 410.
	sb, err := s.GetSandbox(ctx, org, jk.Sandbox)
	if err != nil {
		return domain.Sandbox{}, err
	}
	at := str(FormatTime(now))
	evPut, err := s.eventPut(domain.NewEvent(ctx, domain.EventSbxJoined, org, domain.Subject{Kind: "sandbox", ID: sb.ID}, now,
		map[string]any{"name": sb.Name, "hostname": sb.Hostname}))
	if err != nil {
		return domain.Sandbox{}, err
	}
	reasons, err := s.transact(ctx, "redeem join key", []types.TransactWriteItem{
		evPut,
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(joinKeyPK(hash), "JOINKEY"),
			UpdateExpression:          aws.String("SET redeemed = :now"),
			ConditionExpression:       aws.String("attribute_exists(PK) AND attribute_not_exists(redeemed)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": at},
		}},
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(org), sandboxSK(jk.Sandbox)),
			UpdateExpression:          aws.String("SET joined = :now"),
			ConditionExpression:       aws.String("attribute_exists(PK)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": at},
		}},
	})
	if err != nil {
		return domain.Sandbox{}, err
	}
	switch {
	case conditionFailed(reasons, 1):
		return domain.Sandbox{}, usedJoinKey()
	case conditionFailed(reasons, 2):
		return domain.Sandbox{}, domain.NotFound("sandbox")
	case reasons != nil:
		return domain.Sandbox{}, domain.Internal(fmt.Errorf("redeem join key cancelled: %v", reasons))
	}
	// The transaction wrote exactly this: every other field of a sandbox is
	// fixed at registration.
	joined := now.UTC()
	sb.Joined = &joined
	return sb, nil
}

func usedJoinKey() error {
	return domain.Errorf(domain.CodeGone, "this join key has already been redeemed; register the sandbox again for a new one")
}

func (s *Store) getJoinKey(ctx context.Context, hash string) (*joinKeyItem, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(joinKeyPK(hash), "JOINKEY"), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, dependencyError("get join key", err)
	}
	if out.Item == nil {
		return nil, nil
	}
	var it joinKeyItem
	if err := unmarshal(out.Item, &it); err != nil {
		return nil, err
	}
	return &it, nil
}
