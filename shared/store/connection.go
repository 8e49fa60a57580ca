package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// Node protocol items:
//
//	CONNS#<org>#<pool>  CONN#<connection>   a node's open WebSocket, with its credential's keyId; ttl a little past the longest connection
//	OFFER#<shard>       <org>#<env>         a pending environment a node was woken for; the re-offer job's
//	NODECONN#<org>#<node> CONN              the node's open connection (stopnotice.go)
//
// Connections live in one partition per pool, so a lease reads a few of its
// pool's with one query and wakes one of them. A node credential serves one
// pool, so the connections of a revoked credential are in that one
// partition too: revoking reads it (KeyConnections) rather than every
// hello and $disconnect writing a second record for a rare operation. Offers are spread over
// domain.OfferShards partitions by environment, so no one partition takes every
// lease's write; the re-offer job reads every shard, and what it reads is
// what is still offered: its cost follows what is pending.
type connItem struct {
	PK        string    `dynamodbav:"PK"`
	SK        string    `dynamodbav:"SK"`
	Org       string    `dynamodbav:"org"`
	Pool      string    `dynamodbav:"pool"`
	Conn      string    `dynamodbav:"conn"`
	Node      string    `dynamodbav:"node"`
	KeyID     string    `dynamodbav:"keyId,omitempty"`
	Full      bool      `dynamodbav:"full"`
	Short     bool      `dynamodbav:"short,omitempty"`
	Connected time.Time `dynamodbav:"connected"`
	TTL       int64     `dynamodbav:"ttl"`
	Platform  string    `dynamodbav:"platform,omitempty"`
	Runtimes  []string  `dynamodbav:"runtimes,omitempty"`
}

type offerItem struct {
	PK       string    `dynamodbav:"PK"`
	SK       string    `dynamodbav:"SK"`
	Org      string    `dynamodbav:"org"`
	Pool     string    `dynamodbav:"pool"`
	Env      string    `dynamodbav:"env"`
	Due      time.Time `dynamodbav:"due"`
	Attempts int       `dynamodbav:"attempts"`
	Created  time.Time `dynamodbav:"created"`
	TTL      int64     `dynamodbav:"ttl"`
}

// ConnectionKept bounds how long a connection record outlives a $disconnect
// that never came: API Gateway closes every WebSocket after two hours.
const ConnectionKept = 3 * time.Hour

// OfferKept bounds how long an offer is kept if the job never removes it.
const OfferKept = 24 * time.Hour

func connPK(org, pool string) string { return "CONNS#" + org + "#" + pool }
func connSK(id string) string        { return "CONN#" + id }

// OfferShard is the shard of an environment's offer.
func OfferShard(env string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(env))
	return int(h.Sum32() % domain.OfferShards)
}

func offerPK(shard int) string       { return "OFFER#" + strconv.Itoa(shard) }
func offerSK(org, env string) string { return org + "#" + env }

// The node protocol's handler and its offers go through the same store.
var (
	_ nodes.ConnectionStore = (*Store)(nil)
	_ nodes.OfferStore      = (*Store)(nil)
)

func (it connItem) domain() domain.NodeConnection {
	return domain.NodeConnection{ID: it.Conn, OrgID: it.Org, Pool: it.Pool, Node: it.Node, KeyID: it.KeyID, Full: it.Full, Short: it.Short, Connected: it.Connected.UTC(),
		Platform: it.Platform, Runtimes: it.Runtimes}
}

// PutConnection records a node's open connection (again, on a resumed
// hello). With keyHash, the credential the connection opened with, the put
// is one transaction with the check that the key is not revoked: a
// revocation either commits first, and the connection is refused, or
// after, and its strongly consistent read of the pool's connections
// (KeyConnections) finds this one to close.
func (s *Store) PutConnection(ctx context.Context, c domain.NodeConnection, keyHash string) error {
	item, err := marshal(connItem{
		PK: connPK(c.OrgID, c.Pool), SK: connSK(c.ID), Org: c.OrgID, Pool: c.Pool, Conn: c.ID, Node: c.Node,
		KeyID: c.KeyID, Full: c.Full, Short: c.Short, Connected: c.Connected, TTL: c.Connected.Add(ConnectionKept).Unix(),
		Platform: c.Platform, Runtimes: c.Runtimes,
	})
	if err != nil {
		return err
	}
	// The node's pointer to this connection goes in the same call, so a
	// stop of one of its environments finds it (stopnotice.go).
	pointer, err := s.nodeConnPut(c)
	if err != nil {
		return err
	}
	items := []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(s.table), Item: item}}, pointer}
	if keyHash != "" {
		items = append(items, s.credentialCheck(keyHash))
	}
	reasons, err := s.transact(ctx, "put connection", items)
	switch {
	case err != nil:
		return err
	case conditionFailed(reasons, 2):
		return errRevokedCredential()
	case reasons != nil:
		return domain.Internal(fmt.Errorf("put connection cancelled: %v", reasons))
	}
	return nil
}

// KeyConnections returns the recorded connections of a node credential,
// which are all in its pool's partition: one strongly consistent query of
// that partition (a page per 1 MB), filtered on the key. Records whose TTL
// passed are included: closing one that is gone is harmless.
//
// Records written before connections named their key (at most
// ConnectionKept old) are matched through their node's keyId, read in one
// BatchGetItem per 100 of them.
func (s *Store) KeyConnections(ctx context.Context, org, pool, keyID string) ([]domain.NodeConnection, error) {
	items, err := queryAll[connItem](ctx, s, "key connections", &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("PK = :pk AND begins_with(SK, :sk)"),
		FilterExpression:          aws.String("keyId = :key OR attribute_not_exists(keyId)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(connPK(org, pool)), ":sk": str("CONN#"), ":key": str(keyID)},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	var out []domain.NodeConnection
	var unnamed []connItem
	var refs []map[string]types.AttributeValue
	for _, it := range items {
		switch {
		case it.KeyID == keyID:
			out = append(out, it.domain())
		case it.KeyID == "" && idOK(it.Node):
			unnamed = append(unnamed, it)
			refs = append(refs, key(orgPK(org), nodeSK(it.Node)))
		}
	}
	if len(unnamed) == 0 {
		return out, nil
	}
	raws, err := s.fetchItems(ctx, "key connections", refs)
	if err != nil {
		return nil, err
	}
	ofKey := map[string]bool{}
	for _, raw := range raws {
		var n nodeItem
		if err := unmarshal(raw, &n); err != nil {
			return nil, err
		}
		ofKey[n.ID] = n.KeyID == keyID
	}
	for _, it := range unnamed {
		if ofKey[it.Node] {
			it.KeyID = keyID
			out = append(out, it.domain())
		}
	}
	return out, nil
}

// DeleteConnection forgets a connection, and its node's pointer to it
// when that still names it (a second call, only when there was a record):
// the node is then known to have no connection, so its stops wait for the
// stop job or its next connection's first beat. Forgetting one twice is
// harmless.
func (s *Store) DeleteConnection(ctx context.Context, org, pool, id string) error {
	out, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: key(connPK(org, pool), connSK(id)),
		ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return dependencyError("delete connection", err)
	}
	var it connItem
	if out.Attributes == nil || unmarshal(out.Attributes, &it) != nil || it.Node == "" {
		return nil
	}
	return s.DeleteNodeConnection(ctx, org, it.Node, id)
}

// SetConnectionRoom records, if the connection is still recorded, what its
// node last said of its room: full (no free capacity) and short (short of
// disk, so it can run nothing); nil leaves one as it was. One write for
// both, and none when both are nil.
func (s *Store) SetConnectionRoom(ctx context.Context, org, pool, id string, full, short *bool) error {
	var sets []string
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	if full != nil {
		sets = append(sets, "#full = :full")
		names["#full"], values[":full"] = "full", boolean(*full)
	}
	if short != nil {
		sets = append(sets, "#short = :short")
		names["#short"], values[":short"] = "short", boolean(*short)
	}
	if len(sets) == 0 {
		return nil
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: key(connPK(org, pool), connSK(id)),
		UpdateExpression:          aws.String("SET " + strings.Join(sets, ", ")),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if IsConditionFailed(err) {
		return nil
	}
	return dependencyError("set connection room", err)
}

// PoolConnections returns up to limit recorded connections of a pool,
// starting after the connection id from (ids are random, so a random from
// reads a random window), wrapping to the start when the window is short.
// One query when the pool has limit connections past from, two otherwise.
// Records whose TTL passed by at are left out (TTL deletes lazily).
func (s *Store) PoolConnections(ctx context.Context, org, pool, from string, limit int, at time.Time) ([]domain.NodeConnection, error) {
	now := at.Unix()
	var out []domain.NodeConnection
	seen := map[string]bool{}
	for pass := 0; pass < 2 && len(out) < limit; pass++ {
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(s.table),
			KeyConditionExpression:    aws.String("PK = :pk AND SK > :from"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(connPK(org, pool)), ":from": str(connSK(from))},
			Limit:                     aws.Int32(int32(limit)),
		}
		if pass == 1 {
			if from == "" {
				break
			}
			in.ExpressionAttributeValues[":from"] = str("CONN#")
		}
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, dependencyError("pool connections", err)
		}
		for _, raw := range res.Items {
			var it connItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, err
			}
			// TTL deletion is lazy: an expired record is not a connection.
			if it.TTL < now || seen[it.Conn] {
				continue
			}
			seen[it.Conn] = true
			out = append(out, it.domain())
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// PutOffer records (or moves) the offer of a pending environment.
func (s *Store) PutOffer(ctx context.Context, o domain.Offer) error {
	item, err := marshal(offerItem{
		PK: offerPK(OfferShard(o.Environment)), SK: offerSK(o.OrgID, o.Environment), Org: o.OrgID, Pool: o.Pool,
		Env: o.Environment, Due: o.Due, Attempts: o.Attempts, Created: o.Created, TTL: o.Created.Add(OfferKept).Unix(),
	})
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item})
	s.dueWritten(offerPK(OfferShard(o.Environment))) // whatever the answer: a call that timed out may have written
	return dependencyError("put offer", err)
}

// DeleteOffer forgets an offer; forgetting one twice is harmless.
func (s *Store) DeleteOffer(ctx context.Context, org, env string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.table), Key: key(offerPK(OfferShard(env)), offerSK(org, env)),
	})
	return dependencyError("delete offer", err)
}

// ShardOffers returns up to limit offers of one shard, due or not: the
// shard holds only environments offered and not yet seen claimed.
func (s *Store) ShardOffers(ctx context.Context, shard, limit int) ([]domain.Offer, error) {
	items, err := queryUpTo[offerItem](ctx, s, "shard offers", s.shardQuery(offerPK(shard), limit), limit)
	if err != nil {
		return nil, err
	}
	out := make([]domain.Offer, 0, len(items))
	for _, it := range items {
		out = append(out, domain.Offer{OrgID: it.Org, Pool: it.Pool, Environment: it.Env, Due: it.Due.UTC(), Attempts: it.Attempts, Created: it.Created.UTC()})
	}
	return out, nil
}
