package store

import (
	"context"
	"fmt"
	"strings"
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
// the version and state read (pending), the node's claim fence (active, no
// other claim of it since n was read, within its capacity: claimFence), the
// credential (keyHash, when set) unrevoked, and each claim's event. A batch
// costs one call; a claim of the node that overtook it fails the fence
// (domain.ErrClaimRaced), and n must come from NodeHolding. An
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
		fence, err := s.claimFence(n, ids(es))
		if err != nil {
			return nil, refused, err
		}
		items = append(items, fence)
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
			return nil, refused, s.fenceRefused(ctx, n)
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

func ids(es []domain.Environment) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// claimFence is the node's part of a claim's transaction: the node is still
// active and no other claim of it committed since n was read (its claimSeq
// is the one read), and it moves claimSeq on and records the environments
// it holds now (n.Claims.Held, what the claimer found on the node, and
// those claimed). So two claims that read the same free capacity cannot
// both commit: the second is cancelled on the node's item, reads again and
// finds the first's environments in Held, strongly consistent, even before
// the node's environments index shows them. A claim past the node's
// capacity is refused here, before any call.
func (s *Store) claimFence(n domain.Node, claimed []string) (types.TransactWriteItem, error) {
	held := append([]string(nil), n.Claims.Held...)
	in := map[string]bool{}
	for _, id := range held {
		in[id] = true
	}
	for _, id := range claimed {
		if !in[id] {
			in[id] = true
			held = append(held, id)
		}
	}
	if len(held) > n.Capacity {
		return types.TransactWriteItem{}, domain.Errorf(domain.CodeConflict, "node %s is at its capacity of %d environment(s); claim again when one has stopped", n.ID, n.Capacity)
	}
	cond := "#state = :active AND "
	vals := map[string]types.AttributeValue{
		":active": str(domain.NodeActive), ":next": num(n.Claims.Seq + 1), ":held": strList(held),
	}
	if n.Claims.Seq == 0 {
		cond += "attribute_not_exists(claimSeq)"
	} else {
		cond += "claimSeq = :seq"
		vals[":seq"] = num(n.Claims.Seq)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(s.table), Key: key(orgPK(n.OrgID), nodeSK(n.ID)),
		UpdateExpression:          aws.String("SET claimSeq = :next, held = :held"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: vals,
	}}, nil
}

func strList(xs []string) types.AttributeValue {
	l := make([]types.AttributeValue, len(xs))
	for i, x := range xs {
		l[i] = str(x)
	}
	return &types.AttributeValueMemberL{Value: l}
}

// fenceRefused says why a claim's fence failed: the node is no longer
// active (Gone), or another claim of it committed first
// (domain.ErrClaimRaced: read the node and what it holds again, and claim
// again).
func (s *Store) fenceRefused(ctx context.Context, n domain.Node) error {
	cur, err := s.GetNode(ctx, n.OrgID, n.ID)
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		return err
	}
	if err != nil || cur.State != domain.NodeActive {
		return domain.Errorf(domain.CodeGone, "node %s is no longer active; register again", n.ID)
	}
	return domain.ErrClaimRaced
}

// NodeHolding reads what node n holds, strongly consistent: the environments
// its index lists and those its claim fence holds (n.Claims.Held, which the
// index may not show yet), each read from its base item and kept while it is
// still the node's (starting, ready, stopping on n). It returns them and n
// with Held cut to them, what the node's next claim writes. One Query and
// one BatchGetItem, as NodeEnvironments.
func (s *Store) NodeHolding(ctx context.Context, n domain.Node) ([]domain.Environment, domain.Node, error) {
	listed, err := s.NodeListed(ctx, n.OrgID, n.ID)
	if err != nil {
		return nil, n, err
	}
	return s.NodeHoldingListed(ctx, n, listed)
}

// NodeListed is the ids of the environments the node's index lists (one
// Query, keys only): eventually consistent in DynamoDB, so it may still
// name an environment that has ended and not yet one just claimed. It
// needs only the node's id, so a claim reads it beside the node itself.
func (s *Store) NodeListed(ctx context.Context, org, node string) ([]string, error) {
	refs, err := s.queryRefs(ctx, "node environments", NodeEnvPK(org, node), 0)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		if id, ok := strings.CutPrefix(attrString(r[AttrSK]), envSK("")); ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// NodeHoldingListed is NodeHolding with the index already read (listed,
// from NodeListed): one BatchGetItem of what listed and n.Claims.Held name,
// none when they name nothing.
func (s *Store) NodeHoldingListed(ctx context.Context, n domain.Node, listed []string) ([]domain.Environment, domain.Node, error) {
	ids := n.MayHold(listed)
	refs := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		refs[i] = key(orgPK(n.OrgID), envSK(id))
	}
	items, err := s.fetchItems(ctx, "node environments", refs)
	if err != nil {
		return nil, n, err
	}
	var envs []domain.Environment
	held := []string{}
	for _, raw := range items {
		e, err := decodeEnv(raw)
		if err != nil {
			return nil, n, err
		}
		if e.Node == n.ID && nodeRuns(e.State) {
			envs = append(envs, e)
			held = append(held, e.ID)
		}
	}
	n.Claims.Held = held
	return envs, n, nil
}
