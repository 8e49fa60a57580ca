package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// The scheduled jobs find what is due through GSI2, whose partitions hold
// only live environments (DuePK), active nodes (NodeDuePK) and artifacts not
// yet tombstoned (ArtifactDuePK), sorted by deadline. Each of the three is
// spread over Schema.DueShards partitions ("ENVDUE#7"), chosen by a stable
// hash of the item's organization and id, so the writes of every
// organization do not meet on one partition key; a job reads the shards in
// parallel. A query for "deadline before now" reads what is due and nothing
// else, so a run's cost grows with what is due, not with what exists.
//
// The index holds a lower bound of the deadline, not the deadline itself.
// A touch or a heartbeat only ever moves a deadline later, so the entry
// written before it is still early enough and the touch writes the base item
// alone. The job that finds an entry whose item is not due yet moves the
// entry to the item's current deadline (ReindexEnvironment, ReindexNode):
// one extra read and write per idle period instead of an index write per
// touch. An entry is never later than the real deadline, so nothing due is
// missed.
//
// GSI2 projects keys only and is eventually consistent in DynamoDB: the jobs
// read the base items of what it lists (one strongly consistent BatchGetItem
// per page) and act through writes conditioned on the base item
// (StopEnvironment's version condition, AbandonArtifact's upload-window
// condition, ExpireArtifact's state condition), never on the index alone.

// shardOf is the due-index shard of an item: FNV-1a of "<org>/<id>" modulo
// the store's shard count.
func (s *Store) shardOf(org, id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(org + "/" + id))
	return int(h.Sum32() % uint32(s.shards))
}

func shardPK(base string, shard int) string { return base + "#" + strconv.Itoa(shard) }

// WithDueShards returns a store over the same table and client whose due
// indexes are spread over n shards (benchmarks and tests; the service uses
// Schema.DueShards).
func (s *Store) WithDueShards(n int) *Store {
	c := *s
	c.shards = max(1, n)
	return &c
}

// duePartitions lists the GSI2 partitions of one due index: every shard, and
// the unsharded partition base that entries written before sharding may
// still occupy (it empties as the jobs stop or move what is in it).
func (s *Store) duePartitions(base string) []string {
	out := make([]string, 0, s.shards+1)
	for i := range s.shards {
		out = append(out, shardPK(base, i))
	}
	return append(out, base)
}

// EnvDuePartitions are the GSI2 partitions the timeout job reads.
func (s *Store) EnvDuePartitions() []string { return s.duePartitions(DuePK) }

// NodeDuePartitions are the GSI2 partitions the lost-node sweep reads.
func (s *Store) NodeDuePartitions() []string { return s.duePartitions(NodeDuePK) }

// ArtifactDuePartitions are the GSI2 partitions the expiry job reads.
func (s *Store) ArtifactDuePartitions() []string { return s.duePartitions(ArtifactDuePK) }

// DueEnvironments returns one page of at most limit live environments of
// due partition part whose index entry is at or before now, earliest first,
// and the cursor of the next page ("" after the last). The environments are
// the base items, read strongly consistent: one found not due yet (touched
// since its entry was written) goes to ReindexEnvironment. cursor is "" or a
// Next of a previous page of the same partition.
func (s *Store) DueEnvironments(ctx context.Context, part string, now time.Time, limit int, cursor string) (domain.EnvPage, error) {
	items, next, err := s.queryDue(ctx, "due environments", DuePK, part, now, limit, cursor)
	if err != nil {
		return domain.EnvPage{}, err
	}
	page := domain.EnvPage{Environments: make([]domain.Environment, 0, len(items)), Next: next}
	for _, raw := range items {
		e, err := decodeEnv(raw)
		if err != nil {
			return domain.EnvPage{}, err
		}
		page.Environments = append(page.Environments, e)
	}
	return page, nil
}

// ReindexEnvironment moves a live environment's due-index entry to its
// current deadline, e.Due(), read from the base item: the timeout job calls
// it for an environment the index listed but which is not due yet. The
// deadline only moves later, so an entry computed from a read that a touch
// has since overtaken is still a lower bound. The version is not bumped: no
// field a reader sees changes, and a writer racing this one recomputes the
// entry from its own read anyway. A stopped environment is left alone (the
// condition keeps it out of the index).
func (s *Store) ReindexEnvironment(ctx context.Context, e domain.Environment) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(e.OrgID), envSK(e.ID)),
		UpdateExpression:         aws.String("SET GSI2SK = :due"),
		ConditionExpression:      aws.String("attribute_exists(GSI2PK) AND " + liveCondition),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: liveValues(map[string]types.AttributeValue{
			":due": str(DueSK(e.Due(), e.OrgID, e.ID)),
		}),
	})
	if IsConditionFailed(err) {
		return nil
	}
	return dependencyError("reindex environment", err)
}

// DueArtifacts returns one page of at most limit artifacts of due partition
// part whose entry is at or before now (domain.Artifact.DueAt: sealed ones
// past their expiry, open and failed ones past their upload window and its
// grace), earliest first, and the next page's cursor. They are the base items.
func (s *Store) DueArtifacts(ctx context.Context, part string, now time.Time, limit int, cursor string) ([]domain.Artifact, string, error) {
	items, next, err := s.queryDue(ctx, "due artifacts", ArtifactDuePK, part, now, limit, cursor)
	if err != nil {
		return nil, "", err
	}
	out := make([]domain.Artifact, 0, len(items))
	for _, raw := range items {
		var it artifactItem
		if err := unmarshal(raw, &it); err != nil {
			return nil, "", err
		}
		a, err := it.domain()
		if err != nil {
			return nil, "", err
		}
		out = append(out, a)
	}
	return out, next, nil
}

// queryDue reads one page of due partition part (of index base) and then the
// base items it lists.
func (s *Store) queryDue(ctx context.Context, op, base, part string, now time.Time, limit int, cursor string) ([]map[string]types.AttributeValue, string, error) {
	if part != base && !strings.HasPrefix(part, base+"#") {
		return nil, "", domain.Internal(fmt.Errorf("%s: %q is not a partition of %s", op, part, base))
	}
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(IndexGSI2),
		KeyConditionExpression: aws.String("GSI2PK = :pk AND GSI2SK < :before"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(part), ":before": str(DueBefore(now)),
		},
		Limit: aws.Int32(int32(limit)),
	}
	if cursor != "" {
		start, err := decodeDueCursor(cursor, part)
		if err != nil {
			return nil, "", err
		}
		in.ExclusiveStartKey = start
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return nil, "", dependencyError(op, err)
	}
	next := ""
	if len(out.LastEvaluatedKey) > 0 {
		if next, err = encodeCursor(out.LastEvaluatedKey); err != nil {
			return nil, "", err
		}
	}
	items, err := s.fetchItems(ctx, op, out.Items)
	return items, next, err
}

// fetchItems reads the base items whose keys (PK, SK) are in refs, in the
// order of refs, strongly consistent, 100 per BatchGetItem; refs are index
// entries (or anything else carrying the table's keys). Items gone since the
// index was read are left out.
func (s *Store) fetchItems(ctx context.Context, op string, refs []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	byKey := make(map[string]map[string]types.AttributeValue, len(refs))
	order := make([]string, 0, len(refs))
	for len(refs) > 0 {
		n := min(100, len(refs))
		keys := make([]map[string]types.AttributeValue, 0, n)
		for _, r := range refs[:n] {
			k := itemKeyString(r)
			if _, dup := byKey[k]; dup {
				continue
			}
			byKey[k] = nil
			order = append(order, k)
			keys = append(keys, map[string]types.AttributeValue{AttrPK: r[AttrPK], AttrSK: r[AttrSK]})
		}
		refs = refs[n:]
		if len(keys) == 0 {
			continue // all of this hundred were read already
		}
		req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 5 {
				return nil, domain.Unavailable("the table", fmt.Errorf("%s: keys left unprocessed", op))
			}
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, dependencyError(op, err)
			}
			for _, raw := range res.Responses[s.table] {
				byKey[itemKeyString(raw)] = raw
			}
			req = res.UnprocessedKeys
		}
	}
	out := make([]map[string]types.AttributeValue, 0, len(order))
	for _, k := range order {
		if it := byKey[k]; it != nil {
			out = append(out, it)
		}
	}
	return out, nil
}

func itemKeyString(item map[string]types.AttributeValue) string {
	return attrString(item[AttrPK]) + "\x00" + attrString(item[AttrSK])
}

func attrString(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// decodeDueCursor reads a cursor of queryDue. Jobs pass back only what they
// were given, so anything else is a programming error.
func decodeDueCursor(c, pk string) (map[string]types.AttributeValue, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	var m map[string]string
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || m[AttrGSI2PK] != pk || m[AttrPK] == "" || m[AttrSK] == "" || m[AttrGSI2SK] == "" || len(m) != 4 {
		return nil, domain.Internal(errors.New("due index cursor is not one this store returned"))
	}
	out := map[string]types.AttributeValue{}
	for k, v := range m {
		out[k] = str(v)
	}
	return out, nil
}

// encodeCursor writes a job's position in a due index: the query's
// LastEvaluatedKey (all strings) as base64url JSON. Only the jobs, which
// pass back what they were given, read it (decodeDueCursor).
func encodeCursor(k map[string]types.AttributeValue) (string, error) {
	m := map[string]string{}
	for name, v := range k {
		sv, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return "", domain.Internal(fmt.Errorf("cursor attribute %s is not a string", name))
		}
		m[name] = sv.Value
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", domain.Internal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
