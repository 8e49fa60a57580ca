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

// Node items live under their organization:
//
//	ORG#<org>  NODE#<id>
//	  GSI2 NODEDUE#<shard>   <heartbeat deadline>#<org>#<id>   active only: the lost-node sweep's index
//	  ttl            lost or left nodes only: the record is kept a week, then TTL removes it
//
// A heartbeat moves the deadline forward on the base item only: the index
// entry is a lower bound of it, moved by the sweep that finds the node not
// lost yet (ReindexNode; see due.go). Leaving the index needs its
// keys gone, which minidyn v0.8.2 cannot do with REMOVE, so marking a node
// lost or left replaces the whole item under a version condition, like a stop.
type nodeItem struct {
	PK     string `dynamodbav:"PK"`
	SK     string `dynamodbav:"SK"`
	GSI2PK string `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK string `dynamodbav:"GSI2SK,omitempty"`

	Org           string     `dynamodbav:"org"`
	ID            string     `dynamodbav:"id"`
	Name          string     `dynamodbav:"name"`
	Pool          string     `dynamodbav:"pool"`
	Address       string     `dynamodbav:"address"`
	Capacity      int        `dynamodbav:"capacity"`
	State         string     `dynamodbav:"state"`
	Agent         string     `dynamodbav:"agent"`
	KeyID         string     `dynamodbav:"keyId"`
	Registered    time.Time  `dynamodbav:"registered"`
	LastHeartbeat time.Time  `dynamodbav:"lastHeartbeat"`
	Deadline      time.Time  `dynamodbav:"deadline"`
	Left          *time.Time `dynamodbav:"left,omitempty"`
	Version       int64      `dynamodbav:"version"`
	TTL           int64      `dynamodbav:"ttl,omitempty"`
	TunnelURL     string     `dynamodbav:"tunnelUrl,omitempty"`
	TunnelKey     []byte     `dynamodbav:"tunnelKey,omitempty"`
	Platform      string     `dynamodbav:"platform,omitempty"`
	Runtimes      []string   `dynamodbav:"runtimes,omitempty"`
	// ClaimSeq and Held are the claim fence (domain.NodeClaims; claim.go).
	ClaimSeq int64    `dynamodbav:"claimSeq,omitempty"`
	Held     []string `dynamodbav:"held,omitempty"`
}

// NodeDuePK is the base of the GSI2 partitions of active nodes
// (NodeDuePK#<shard>), ordered by the time they are lost unless they heartbeat.
const NodeDuePK = "NODEDUE"

// NodeRecordKept is how long a lost or left node's record stays readable.
const NodeRecordKept = 7 * 24 * time.Hour

func nodeSK(id string) string { return "NODE#" + id }

func (s *Store) newNodeItem(n domain.Node) nodeItem {
	it := nodeItem{
		PK: orgPK(n.OrgID), SK: nodeSK(n.ID),
		Org: n.OrgID, ID: n.ID, Name: n.Name, Pool: n.Pool, Address: n.Address, Capacity: n.Capacity,
		State: n.State, Agent: n.Agent, KeyID: n.KeyID, Registered: n.Registered,
		LastHeartbeat: n.LastHeartbeat, Deadline: n.Deadline, Left: n.Left, Version: n.Version,
		TunnelURL: n.TunnelURL, TunnelKey: n.TunnelKey, Platform: n.Platform, Runtimes: n.Runtimes,
		ClaimSeq: n.Claims.Seq, Held: n.Claims.Held,
	}
	if len(it.Held) == 0 {
		it.Held = nil
	}
	if len(it.Runtimes) == 0 {
		it.Runtimes = nil
	}
	if n.State == domain.NodeActive {
		it.GSI2PK, it.GSI2SK = shardPK(NodeDuePK, s.shardOf(n.OrgID, n.ID)), DueSK(n.Deadline, n.OrgID, n.ID)
	} else {
		kept := n.LastHeartbeat
		if n.Left != nil {
			kept = *n.Left
		}
		it.TTL = kept.Add(NodeRecordKept).Unix()
	}
	return it
}

func (it nodeItem) domain() domain.Node {
	return domain.Node{
		OrgID: it.Org, ID: it.ID, Name: it.Name, Pool: it.Pool, Address: it.Address, Capacity: it.Capacity,
		State: it.State, Agent: it.Agent, KeyID: it.KeyID, Registered: it.Registered.UTC(),
		LastHeartbeat: it.LastHeartbeat.UTC(), Deadline: it.Deadline.UTC(), Left: utcPtr(it.Left), Version: it.Version,
		TunnelURL: it.TunnelURL, TunnelKey: it.TunnelKey, Platform: it.Platform,
		Runtimes: domain.Node{Runtimes: it.Runtimes}.RuntimesOrDefault(),
		Claims:   domain.NodeClaims{Seq: it.ClaimSeq, Held: it.Held},
	}
}

// PutNode writes a newly registered node, with its event. With keyHash
// (a registration on a node protocol connection, authenticated when the
// connection opened) the same transaction checks the credential is not
// revoked: a revoked credential registers nothing.
func (s *Store) PutNode(ctx context.Context, n domain.Node, keyHash string) error {
	ev := domain.NewEvent(ctx, domain.EventNodeRegister, n.OrgID, domain.Subject{Kind: "node", ID: n.ID}, n.Registered,
		map[string]any{"name": n.Name, "pool": n.Pool, "capacity": n.Capacity})
	const conflict = "a node with this id already exists"
	if keyHash == "" {
		return s.putNewWithEvent(ctx, "put node", s.newNodeItem(n), conflict, ev)
	}
	item, err := marshal(s.newNodeItem(n))
	if err != nil {
		return err
	}
	evPut, err := s.eventPut(ev)
	if err != nil {
		return err
	}
	reasons, err := s.transact(ctx, "put node", []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		s.credentialCheck(keyHash), evPut,
	})
	switch {
	case err != nil:
		return err
	case conditionFailed(reasons, 1):
		return errRevokedCredential()
	case reasons != nil:
		return domain.Errorf(domain.CodeConflict, "%s", conflict)
	}
	return nil
}

// GetNodeWithCredential is GetNode for a node credential whose principal
// was authenticated before (a node protocol connection's): one
// BatchGetItem reads the node and the key record of keyHash, both strongly
// consistent, and a revoked (or deleted) key is refused before the node is
// looked at. It costs the one call GetNode costs.
func (s *Store) GetNodeWithCredential(ctx context.Context, org, id, keyHash string) (domain.Node, error) {
	if !idOK(id) {
		return domain.Node{}, domain.NotFound("node")
	}
	items, err := s.fetchItems(ctx, "get node", []map[string]types.AttributeValue{
		key(orgPK(org), nodeSK(id)), key(tokenPK(keyHash), "TOKEN"),
	})
	if err != nil {
		return domain.Node{}, err
	}
	var (
		n        *domain.Node
		keyValid bool
	)
	for _, raw := range items {
		if attrString(raw[AttrPK]) == tokenPK(keyHash) {
			var k keyItem
			if err := unmarshal(raw, &k); err != nil {
				return domain.Node{}, err
			}
			keyValid = k.Revoked == nil
			continue
		}
		var it nodeItem
		if err := unmarshal(raw, &it); err != nil {
			return domain.Node{}, err
		}
		d := it.domain()
		n = &d
	}
	switch {
	case !keyValid:
		return domain.Node{}, errRevokedCredential()
	case n == nil:
		return domain.Node{}, domain.NotFound("node")
	}
	return *n, nil
}

// GetNode reads a node of org, strongly consistent.
func (s *Store) GetNode(ctx context.Context, org, id string) (domain.Node, error) {
	if !idOK(id) {
		return domain.Node{}, domain.NotFound("node")
	}
	it, err := getOne[nodeItem](ctx, s, "node", key(orgPK(org), nodeSK(id)))
	if err != nil {
		return domain.Node{}, err
	}
	return it.domain(), nil
}

// ListNodes returns an organization's node records, newest registration first.
func (s *Store) ListNodes(ctx context.Context, org string) ([]domain.Node, error) {
	items, err := queryAll[nodeItem](ctx, s, "list nodes", s.inPartition(orgPK(org), "NODE#"))
	if err != nil {
		return nil, err
	}
	out := make([]domain.Node, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, nil
}

// KeyNodes returns the organization's active nodes that node credential
// keyID registered, read strongly consistent: after a revocation committed
// it finds every one (a node is registered only in a transaction that checks
// the credential unrevoked, PutNode).
func (s *Store) KeyNodes(ctx context.Context, org, keyID string) ([]domain.Node, error) {
	in := s.inPartition(orgPK(org), "NODE#")
	in.ConsistentRead = aws.Bool(true)
	items, err := queryAll[nodeItem](ctx, s, "key nodes", in)
	if err != nil {
		return nil, err
	}
	var out []domain.Node
	for _, it := range items {
		if it.KeyID == keyID && it.State == domain.NodeActive {
			out = append(out, it.domain())
		}
	}
	return out, nil
}

// HeartbeatNode records a heartbeat at now and moves the lost deadline, if
// the node is still active. It writes the base item alone (see the note on
// nodeItem). A node already declared lost (or gone) gets
// domain.CodeGone: its environments were failed, it must register again.
//
// The deadline only ever moves later (deadlineLater): the node's due-index
// entry may lie anywhere up to the deadline it was last moved to, so a
// heartbeat that pulled the deadline earlier (an HTTP beat, 60 s ahead, after
// a socket beat, 120 s ahead) would let the lost-node sweep find the node late.
func (s *Store) HeartbeatNode(ctx context.Context, n domain.Node, now, deadline time.Time) (domain.Node, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(n.OrgID), nodeSK(n.ID)),
		UpdateExpression:         aws.String("SET lastHeartbeat = :now, deadline = :dl, version = version + :one"),
		ConditionExpression:      aws.String("attribute_exists(PK) AND #state = :active AND " + deadlineLater),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": str(FormatTime(now)), ":dl": str(FormatTime(deadline)),
			":one": num(1), ":active": str(domain.NodeActive),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if IsConditionFailed(err) {
		cur, gerr := s.GetNode(ctx, n.OrgID, n.ID)
		if gerr == nil && cur.State == domain.NodeActive && cur.Deadline.After(deadline) {
			return cur, nil // alive, and its deadline is already later
		}
		return domain.Node{}, domain.Errorf(domain.CodeGone, "node %s is no longer active (declared lost or deregistered); its environments were failed; register again", n.ID)
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

// deadlineLater is the condition that a heartbeat's deadline (:dl) is not
// earlier than the one recorded (times are fixed-width UTC strings, so they
// compare as strings).
const deadlineLater = "(attribute_not_exists(deadline) OR deadline <= :dl)"

// EndNode replaces an active node with its lost or left record (out of the
// due index, with a TTL), if nothing wrote it since n was read. It reports
// whether this call ended it; false means a heartbeat came in between (or it
// had already ended).
func (s *Store) EndNode(ctx context.Context, n domain.Node, state string, now time.Time) (bool, error) {
	after := n
	after.State = state
	at := now.UTC()
	after.Left = &at
	after.Version = n.Version + 1
	// No ticket can be signed for an ended node, so its key goes with it.
	after.TunnelKey = nil
	item, err := marshal(s.newNodeItem(after))
	if err != nil {
		return false, err
	}
	reasons, err := s.transactWithEvent(ctx, "end node", types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: item,
		ConditionExpression:      aws.String("attribute_exists(PK) AND version = :v AND #state = :active"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":v": num(n.Version), ":active": str(domain.NodeActive),
		},
	}}, nodeEndEvent(ctx, after, at))
	if err != nil {
		return false, err
	}
	return reasons == nil, nil
}

// DueNodes returns one page of at most limit active nodes of due partition
// part whose index entry is at or before now, oldest first, and the next
// page's cursor. They are the base items: one whose deadline is still ahead
// (it heartbeat since its entry was written) goes to ReindexNode.
func (s *Store) DueNodes(ctx context.Context, part string, now time.Time, limit int, cursor string) ([]domain.Node, string, error) {
	items, next, err := s.queryDue(ctx, "due nodes", NodeDuePK, part, now, limit, cursor)
	if err != nil {
		return nil, "", err
	}
	nodes := make([]domain.Node, 0, len(items))
	for _, raw := range items {
		var it nodeItem
		if err := unmarshal(raw, &it); err != nil {
			return nil, "", err
		}
		nodes = append(nodes, it.domain())
	}
	return nodes, next, nil
}

// ReindexNode moves an active node's due-index entry to its current lost
// deadline, read from the base item. Heartbeats only move the deadline
// later, so the entry stays a lower bound; the version is not bumped, as in
// ReindexEnvironment.
func (s *Store) ReindexNode(ctx context.Context, n domain.Node) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(n.OrgID), nodeSK(n.ID)),
		UpdateExpression:         aws.String("SET GSI2SK = :due"),
		ConditionExpression:      aws.String("attribute_exists(GSI2PK) AND #state = :active"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":due": str(DueSK(n.Deadline, n.OrgID, n.ID)), ":active": str(domain.NodeActive),
		},
	})
	if IsConditionFailed(err) {
		return nil
	}
	return dependencyError("reindex node", err)
}

// PendingEnvironments returns up to limit pending environments of an
// organization's pool, oldest first. GSI reads are eventually consistent in
// DynamoDB: an item may already be claimed or changed, so a claim is always a
// conditional write on the base item (ClaimEnvironment), never trusted from here.
func (s *Store) PendingEnvironments(ctx context.Context, org, pool, class string, limit int) ([]domain.Environment, error) {
	return s.queryGSI3(ctx, "pending environments", PoolPendingClassPK(org, pool, class), limit)
}

// NodeEnvironments returns the environments a node runs or tears down
// (starting, ready, stopping), oldest first.
func (s *Store) NodeEnvironments(ctx context.Context, org, node string) ([]domain.Environment, error) {
	return s.queryGSI3(ctx, "node environments", NodeEnvPK(org, node), 0)
}

func (s *Store) queryGSI3(ctx context.Context, op, pk string, limit int) ([]domain.Environment, error) {
	refs, err := s.queryRefs(ctx, op, pk, limit)
	if err != nil {
		return nil, err
	}
	// GSI3 projects keys only: what a node acts on is the base item, read
	// strongly consistent (no read at all when the partition is empty).
	items, err := s.fetchItems(ctx, op, refs)
	if err != nil {
		return nil, err
	}
	envs := make([]domain.Environment, 0, len(items))
	for _, raw := range items {
		e, err := decodeEnv(raw)
		if err != nil {
			return nil, err
		}
		envs = append(envs, e)
	}
	return envs, nil
}

// queryRefs reads the keys GSI3 lists under pk (at most limit, 0 for all).
func (s *Store) queryRefs(ctx context.Context, op, pk string, limit int) ([]map[string]types.AttributeValue, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(IndexGSI3),
		KeyConditionExpression:    aws.String("GSI3PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
	}
	if limit > 0 {
		in.Limit = aws.Int32(int32(limit))
	}
	var refs []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, dependencyError(op, err)
		}
		refs = append(refs, page.Items...)
		if limit > 0 && len(refs) >= limit {
			break
		}
	}
	return refs, nil
}

// GetEnvironments reads environments of org by id, strongly consistent, in
// one BatchGetItem per 100 ids. Unknown ids are left out.
func (s *Store) GetEnvironments(ctx context.Context, org string, ids []string) ([]domain.Environment, error) {
	var out []domain.Environment
	for len(ids) > 0 {
		n := min(100, len(ids))
		keys := make([]map[string]types.AttributeValue, 0, n)
		seen := map[string]bool{}
		for _, id := range ids[:n] {
			if !seen[id] {
				seen[id] = true
				keys = append(keys, key(orgPK(org), envSK(id)))
			}
		}
		ids = ids[n:]
		req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 5 {
				return nil, domain.Unavailable("the table", fmt.Errorf("get environments: keys left unprocessed"))
			}
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, dependencyError("get environments", err)
			}
			for _, raw := range res.Responses[s.table] {
				e, err := decodeEnv(raw)
				if err != nil {
					return nil, err
				}
				out = append(out, e)
			}
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

// ClaimEnvironment moves a pending environment to starting on node, in one
// transaction that also checks the node is still active: the environment's
// put is conditioned on the version and state read (pending), so of two
// nodes racing for it exactly one wins, and a node the lost-node sweep has
// ended can claim nothing more. With keyHash (a node protocol claim, whose
// principal was authenticated when its connection opened) the transaction
// also checks the node credential is not revoked since. The node's claim
// fence (claimFence) keeps it within the node's capacity however many
// claims of the node run at once: n must come from NodeHolding, and a claim
// another one overtook fails with domain.ErrClaimRaced. It reports whether this
// call claimed it.
func (s *Store) ClaimEnvironment(ctx context.Context, e domain.Environment, n domain.Node, keyHash string, now time.Time) (domain.Environment, bool, error) {
	fence, err := s.claimFence(n, []string{e.ID})
	if err != nil {
		return domain.Environment{}, false, err
	}
	after := e
	after.State = domain.StateStarting
	after.Node = n.ID
	after.Version = e.Version + 1
	item, err := marshal(s.newEnvItem(after))
	if err != nil {
		return domain.Environment{}, false, err
	}
	items := []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(s.table), Item: item,
			ConditionExpression:      aws.String("attribute_exists(PK) AND version = :v AND #state = :pending"),
			ExpressionAttributeNames: map[string]string{"#state": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":v": num(e.Version), ":pending": str(string(domain.StatePending)),
			},
		}},
		fence,
	}
	credAt := -1
	if keyHash != "" {
		credAt = len(items)
		items = append(items, s.credentialCheck(keyHash))
	}
	evPut, err := s.eventPut(domain.EnvEvent(ctx, after, now))
	if err != nil {
		return domain.Environment{}, false, err
	}
	items = append(items, evPut)
	reasons, err := s.transact(ctx, "claim environment", items)
	if err != nil {
		return domain.Environment{}, false, err
	}
	switch {
	case reasons == nil:
		return after, true, nil
	case conditionFailed(reasons, credAt):
		return domain.Environment{}, false, errRevokedCredential()
	case conditionFailed(reasons, 1):
		return domain.Environment{}, false, s.fenceRefused(ctx, n)
	case conditionFailed(reasons, 0):
		return domain.Environment{}, false, nil
	}
	return domain.Environment{}, false, domain.Internal(fmt.Errorf("claim environment cancelled: %v", reasons))
}

// ReplaceEnvironment writes after in place of before, if the stored record is
// still before (same version and state): a node's report that keeps the
// environment where the lease stands (starting -> ready), or finishes a
// teardown (stopping -> stopped or failed). Leaving the live states is never
// done here: that is StopEnvironment's, which releases the quota. It reports
// whether the write happened; false returns the current record.
func (s *Store) ReplaceEnvironment(ctx context.Context, before, after domain.Environment) (domain.Environment, bool, error) {
	if before.State.Live() && !after.State.Live() {
		return domain.Environment{}, false, domain.Internal(fmt.Errorf("replace environment %s -> %s: stops go through StopEnvironment", before.State, after.State))
	}
	after.Version = before.Version + 1
	item, err := marshal(s.newEnvItem(after))
	if err != nil {
		return domain.Environment{}, false, err
	}
	put := types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: item,
		ConditionExpression:      aws.String("attribute_exists(PK) AND version = :v AND #state = :from"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":v": num(before.Version), ":from": str(string(before.State)),
		},
	}}
	reasons, err := s.replaceWithEvent(ctx, put, before, after)
	if err != nil {
		return domain.Environment{}, false, err
	}
	if reasons != nil {
		cur, err := s.GetEnvironment(ctx, before.OrgID, before.ID)
		return cur, false, err
	}
	return after, true, nil
}
