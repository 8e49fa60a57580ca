package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// BeatNode is HeartbeatNode for a node named by id, in one call: the update
// is conditioned on the node being active and belonging to the credential
// (keyID) and pool, so the node protocol's heartbeat needs no read first.
// A refusal is told apart with one read: not the credential's node is
// NotFound, no longer active is Gone. Like HeartbeatNode it writes the base
// item alone: the due-index entry stays a lower bound of the deadline, moved
// by the lost-node sweep (see due.go).
func (s *Store) BeatNode(ctx context.Context, org, id, keyID, pool string, now, deadline time.Time) (domain.Node, error) {
	if !idOK(id) {
		return domain.Node{}, domain.NotFound("node")
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(org), nodeSK(id)),
		UpdateExpression:         aws.String("SET lastHeartbeat = :now, deadline = :dl, version = version + :one"),
		ConditionExpression:      aws.String("attribute_exists(PK) AND #state = :active AND keyId = :key AND #pool = :pool AND " + deadlineLater),
		ExpressionAttributeNames: map[string]string{"#state": "state", "#pool": "pool"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": str(FormatTime(now)), ":dl": str(FormatTime(deadline)),
			":one": num(1), ":active": str(domain.NodeActive),
			":key": str(keyID), ":pool": str(pool),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if IsConditionFailed(err) {
		n, gerr := s.GetNode(ctx, org, id)
		switch {
		case gerr != nil:
			return domain.Node{}, gerr
		case n.KeyID != keyID || n.Pool != pool:
			return domain.Node{}, domain.NotFound("node")
		case n.State == domain.NodeActive && n.Deadline.After(deadline):
			return n, nil // alive, and its deadline is already later (HeartbeatNode)
		}
		return domain.Node{}, domain.Errorf(domain.CodeGone, "node %s is no longer active (declared lost or deregistered); its environments were failed; register again", id)
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
