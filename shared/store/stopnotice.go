package store

import (
	"context"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Stops told to nodes (docs/nodes.md, "Stops"):
//
//	STOP#<shard>            <org>#<env>   an environment its node must tear down; the stop job's
//	NODECONN#<org>#<node>   CONN          the node's open connection, so a stop reaches it
//
// A stop notice is written in the stop transaction that moves an
// environment a node runs to stopping, so no such stop commits without it;
// the stop job sends it again until the environment has left stopping,
// then deletes it. The node's connection is recorded by its hello (in the
// same transaction as the pool's connection record) and forgotten at
// $disconnect, so a stop costs one read to find where to go.
type stopItem struct {
	PK       string    `dynamodbav:"PK"`
	SK       string    `dynamodbav:"SK"`
	Org      string    `dynamodbav:"org"`
	Node     string    `dynamodbav:"node"`
	Env      string    `dynamodbav:"env"`
	Due      time.Time `dynamodbav:"due"`
	Attempts int       `dynamodbav:"attempts"`
	Created  time.Time `dynamodbav:"created"`
	TTL      int64     `dynamodbav:"ttl"`
}

type nodeConnItem struct {
	PK   string `dynamodbav:"PK"`
	SK   string `dynamodbav:"SK"`
	Conn string `dynamodbav:"conn"`
	TTL  int64  `dynamodbav:"ttl"`
}

// StopNoticeKept bounds how long a stop notice is kept if the job never
// removes it (its node was lost, which fails the environment, long before).
const StopNoticeKept = 24 * time.Hour

// StopResendAfter is how long after a stop its notice is first due for the
// stop job: the stop's own caller posts it at once, so the job only sends
// what was lost (or not sent: a caller without a connection to post on).
// Long enough for most nodes to have torn the environment down and
// reported it, so the job's first look usually only deletes the notice
// rather than sending the stop again; a lost stop holds only the node's
// resources meanwhile (the quota was released by the stop).
const StopResendAfter = 30 * time.Second

// StopShard is the shard of an environment's stop notice.
func StopShard(env string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(env))
	return int(h.Sum32() % domain.StopShards)
}

func stopPK(shard int) string            { return "STOP#" + strconv.Itoa(shard) }
func stopSK(org, env string) string      { return org + "#" + env }
func nodeConnPK(org, node string) string { return "NODECONN#" + org + "#" + node }

const nodeConnSK = "CONN"

// The stop job goes through the same store.
var _ nodes.StopStore = (*Store)(nil)

func newStopItem(n domain.StopNotice) stopItem {
	return stopItem{
		PK: stopPK(StopShard(n.Environment)), SK: stopSK(n.OrgID, n.Environment), Org: n.OrgID, Node: n.Node,
		Env: n.Environment, Due: n.Due, Attempts: n.Attempts, Created: n.Created, TTL: n.Created.Add(StopNoticeKept).Unix(),
	}
}

// stopNoticePut is the stop transaction's put of the notice of e, which is
// being moved to stopping on its node.
func (s *Store) stopNoticePut(e domain.Environment, now time.Time) (types.TransactWriteItem, error) {
	item, err := marshal(newStopItem(domain.StopNotice{OrgID: e.OrgID, Node: e.Node, Environment: e.ID,
		Due: now.Add(StopResendAfter), Created: now}))
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: item}}, nil
}

// PutStopNotice records (or moves) a stop notice.
func (s *Store) PutStopNotice(ctx context.Context, n domain.StopNotice) error {
	item, err := marshal(newStopItem(n))
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item})
	s.dueWritten(stopPK(StopShard(n.Environment))) // whatever the answer: a call that timed out may have written
	return dependencyError("put stop notice", err)
}

// DeleteStopNotice forgets a stop notice; forgetting one twice is harmless.
func (s *Store) DeleteStopNotice(ctx context.Context, org, env string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.table), Key: key(stopPK(StopShard(env)), stopSK(org, env)),
	})
	return dependencyError("delete stop notice", err)
}

// ShardStopNotices returns up to limit stop notices of one shard, due or
// not: the shard holds only stops not yet seen finished.
func (s *Store) ShardStopNotices(ctx context.Context, shard, limit int) ([]domain.StopNotice, error) {
	items, err := queryUpTo[stopItem](ctx, s, "shard stop notices", s.shardQuery(stopPK(shard), limit), limit)
	if err != nil {
		return nil, err
	}
	out := make([]domain.StopNotice, 0, len(items))
	for _, it := range items {
		out = append(out, domain.StopNotice{OrgID: it.Org, Node: it.Node, Environment: it.Env, Due: it.Due.UTC(),
			Attempts: it.Attempts, Created: it.Created.UTC()})
	}
	return out, nil
}

// nodeConnPut is the put of a node's connection pointer, beside its pool's
// connection record.
func (s *Store) nodeConnPut(c domain.NodeConnection) (types.TransactWriteItem, error) {
	item, err := marshal(nodeConnItem{PK: nodeConnPK(c.OrgID, c.Node), SK: nodeConnSK, Conn: c.ID,
		TTL: c.Connected.Add(ConnectionKept).Unix()})
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: item}}, nil
}

// NodeConnection returns the id of the node's open connection, "" when it
// has none (it uses the HTTP fallback, or its connection ended). One read.
func (s *Store) NodeConnection(ctx context.Context, org, node string, at time.Time) (string, error) {
	if !idOK(node) {
		return "", nil
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(nodeConnPK(org, node), nodeConnSK)})
	if err != nil {
		return "", dependencyError("node connection", err)
	}
	if out.Item == nil {
		return "", nil
	}
	var it nodeConnItem
	if err := unmarshal(out.Item, &it); err != nil {
		return "", err
	}
	if it.TTL < at.Unix() {
		return "", nil // TTL deletes lazily
	}
	return it.Conn, nil
}

// DeleteNodeConnection forgets the node's connection pointer if it still
// names conn (the node may have reconnected since).
func (s *Store) DeleteNodeConnection(ctx context.Context, org, node, conn string) error {
	if !idOK(node) {
		return nil
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.table), Key: key(nodeConnPK(org, node), nodeConnSK),
		ConditionExpression:       aws.String("conn = :conn"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":conn": str(conn)},
	})
	if IsConditionFailed(err) {
		return nil
	}
	return dependencyError("delete node connection", err)
}
