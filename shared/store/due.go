package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// The scheduled jobs find what is due through GSI2, whose partitions hold
// only live environments (DuePK) and artifacts not yet tombstoned
// (ArtifactDuePK), sorted by deadline. A query for "deadline before now"
// reads what is due and nothing else, so a run's cost grows with what is due,
// not with what exists.
//
// GSI2 is eventually consistent in DynamoDB: an item found there may have
// been touched, stopped, renewed, sealed or expired since. The jobs therefore
// act through writes conditioned on the base item (StopEnvironment's version
// condition, AbandonArtifact's upload-window condition, ExpireArtifact's
// state condition), never on the index copy alone.

// DueEnvironments returns one page of at most limit live environments whose
// deadline, min(idleUntil, expires), is at or before now, earliest first, and
// the cursor of the next page ("" after the last). cursor is "" or a Next of
// a previous page.
func (s *Store) DueEnvironments(ctx context.Context, now time.Time, limit int, cursor string) (domain.EnvPage, error) {
	items, next, err := s.queryDue(ctx, "due environments", DuePK, now, limit, cursor)
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

// DueArtifacts returns one page of at most limit artifacts due at or before
// now (domain.Artifact.DueAt: sealed ones past their expiry, open and failed
// ones past their upload window and its grace), earliest first, and the next
// page's cursor.
func (s *Store) DueArtifacts(ctx context.Context, now time.Time, limit int, cursor string) ([]domain.Artifact, string, error) {
	items, next, err := s.queryDue(ctx, "due artifacts", ArtifactDuePK, now, limit, cursor)
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

func (s *Store) queryDue(ctx context.Context, op, pk string, now time.Time, limit int, cursor string) ([]map[string]types.AttributeValue, string, error) {
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(IndexGSI2),
		KeyConditionExpression: aws.String("GSI2PK = :pk AND GSI2SK < :before"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(pk), ":before": str(DueBefore(now)),
		},
		Limit: aws.Int32(int32(limit)),
	}
	if cursor != "" {
		start, err := decodeDueCursor(cursor, pk)
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
	return out.Items, next, nil
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
