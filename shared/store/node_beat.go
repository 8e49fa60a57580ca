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

// BeatNode is HeartbeatNode for a node named by id, in one call: the update
// is conditioned on the node being active and belonging to the credential
// (cred.KeyID) and pool, so the node protocol's heartbeat needs no read first.
// A refusal is told apart with one read: not the credential's node is
// NotFound, no longer active is Gone. Like HeartbeatNode it writes the base
// item alone: the due-index entry stays a lower bound of the deadline, moved
// by the lost-node sweep (see due.go).
//
// With cred.KeyHash (always, on the node protocol) the write is a transaction
// that also checks the credential is not revoked: a connection keeps the
// principal it opened with, so without it a revoked node would live on until
// its connection closed. A revoked credential gets Unauthorized; the agent's
// reconnect is then refused at the connection's authentication.
func (s *Store) BeatNode(ctx context.Context, org, id string, cred domain.Principal, now, deadline time.Time) (domain.Node, error) {
	if !idOK(id) {
		return domain.Node{}, domain.NotFound("node")
	}
	update := types.Update{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(org), nodeSK(id)),
		UpdateExpression:         aws.String("SET lastHeartbeat = :now, deadline = :dl, version = version + :one"),
		ConditionExpression:      aws.String("attribute_exists(PK) AND #state = :active AND keyId = :key AND #pool = :pool AND " + deadlineLater),
		ExpressionAttributeNames: map[string]string{"#state": "state", "#pool": "pool"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": str(FormatTime(now)), ":dl": str(FormatTime(deadline)),
			":one": num(1), ":active": str(domain.NodeActive),
			":key": str(cred.KeyID), ":pool": str(cred.Pool),
		},
	}
	if cred.KeyHash == "" {
		out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: update.TableName, Key: update.Key, UpdateExpression: update.UpdateExpression,
			ConditionExpression: update.ConditionExpression, ExpressionAttributeNames: update.ExpressionAttributeNames,
			ExpressionAttributeValues: update.ExpressionAttributeValues, ReturnValues: types.ReturnValueAllNew,
		})
		if IsConditionFailed(err) {
			return s.beatRefused(ctx, org, id, cred, deadline)
		}
		if err != nil {
			return domain.Node{}, dependencyError("heartbeat node", err)
		}
		var it nodeItem
		if err := unmarshal(out.Attributes, &it); err != nil {
			return domain.Node{}, err
		}
		return it.domain(), nil
	}
	// The credential's check comes first: a revoked credential's node is
	// also ended (nodes.Revocations), and not every DynamoDB reports past
	// the first condition that failed, so the revocation is what it tells.
	reasons, err := s.transact(ctx, "heartbeat node", []types.TransactWriteItem{s.credentialCheck(cred.KeyHash), {Update: &update}})
	switch {
	case err != nil:
		return domain.Node{}, err
	case conditionFailed(reasons, 0):
		return domain.Node{}, errRevokedCredential()
	case conditionFailed(reasons, 1):
		return s.beatRefused(ctx, org, id, cred, deadline)
	case reasons != nil:
		return domain.Node{}, domain.Internal(fmt.Errorf("heartbeat node cancelled: %v", reasons))
	}
	// A transaction returns no item: what the beat's answer needs is known.
	return domain.Node{ID: id, OrgID: org, Pool: cred.Pool, KeyID: cred.KeyID, State: domain.NodeActive,
		LastHeartbeat: now, Deadline: deadline}, nil
}

// beatRefused tells apart why a beat's condition failed, with one read.
func (s *Store) beatRefused(ctx context.Context, org, id string, cred domain.Principal, deadline time.Time) (domain.Node, error) {
	n, err := s.GetNode(ctx, org, id)
	switch {
	case err != nil:
		return domain.Node{}, err
	case n.KeyID != cred.KeyID || n.Pool != cred.Pool:
		return domain.Node{}, domain.NotFound("node")
	case n.State == domain.NodeActive && n.Deadline.After(deadline):
		return n, nil // alive, and its deadline is already later (HeartbeatNode)
	}
	return domain.Node{}, domain.Errorf(domain.CodeGone, "node %s is no longer active (declared lost or deregistered); its environments were failed; register again", id)
}

// credentialCheck is a transaction item that holds only while the key
// record of keyHash exists and is not revoked.
func (s *Store) credentialCheck(keyHash string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(s.table), Key: key(tokenPK(keyHash), "TOKEN"),
		ConditionExpression: aws.String("attribute_exists(PK) AND attribute_not_exists(revoked)"),
	}}
}

// errRevokedCredential answers a node protocol write whose credential was
// revoked after its connection opened.
func errRevokedCredential() error {
	return domain.Errorf(domain.CodeUnauthorized, "the node credential has been revoked")
}
