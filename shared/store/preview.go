package store

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// previewsText is an environment's previews as its item keeps them: read
// and written only whole, with the record.
func previewsText(ps []domain.Preview) string {
	if len(ps) == 0 {
		return ""
	}
	b, err := json.Marshal(ps)
	if err != nil {
		return ""
	}
	return string(b)
}

// previewsOf reads them back; a text that does not read is none.
func previewsOf(s string) []domain.Preview {
	if s == "" {
		return nil
	}
	var ps []domain.Preview
	if json.Unmarshal([]byte(s), &ps) != nil {
		return nil
	}
	for i := range ps {
		ps[i].Created = ps[i].Created.UTC()
		ps[i].Expires = ps[i].Expires.UTC()
		if r := ps[i].Revoked; r != nil {
			t := r.UTC()
			ps[i].Revoked = &t
		}
	}
	return ps
}

// SetEnvironmentPreviews replaces the previews of an environment that is
// live or paused (a paused one's links open again when it wakes), if its
// record is still the one e was read as (version): one conditional update.
// ok is false when another write came between or it ended; the caller
// reads again and decides.
func (s *Store) SetEnvironmentPreviews(ctx context.Context, e domain.Environment, ps []domain.Preview) (after domain.Environment, ok bool, err error) {
	vals := map[string]types.AttributeValue{":v": num(e.Version), ":one": num(1), ":ready": str(string(domain.StateReady)),
		":paused": str(string(domain.StatePaused)), ":pending": str(string(domain.StatePending)), ":starting": str(string(domain.StateStarting))}
	update := "SET version = version + :one"
	names := map[string]string{"#state": "state"}
	if t := previewsText(ps); t != "" {
		update += ", previews = :p"
		vals[":p"] = str(t)
	} else {
		update += " REMOVE previews"
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(orgPK(e.OrgID), envSK(e.ID)),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("attribute_exists(PK) AND version = :v AND #state IN (:ready, :paused, :pending, :starting)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
	})
	if IsConditionFailed(err) {
		return domain.Environment{}, false, nil
	}
	if err != nil {
		return domain.Environment{}, false, dependencyError("set environment previews", err)
	}
	e.Previews = ps
	e.Version++
	return e, true, nil
}
