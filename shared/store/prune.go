package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// What `admin apply --prune` reads and removes: the people and templates an
// organization has in the table that its configuration no longer lists.

// ListUsers returns an organization's people, read strongly consistent so a
// person just written by the same apply is never taken for a leftover.
func (s *Store) ListUsers(ctx context.Context, org string) ([]domain.User, error) {
	in := s.inPartition(orgPK(org), "USER#")
	in.ConsistentRead = aws.Bool(true)
	items, err := queryAll[userItem](ctx, s, "list users", in)
	if err != nil {
		return nil, err
	}
	out := make([]domain.User, len(items))
	for i, it := range items {
		out[i] = domain.User{OrgID: it.Org, ID: it.ID, Role: domain.Role(it.Role)}
	}
	return out, nil
}

// DeleteUser removes a person's record. Their credentials are not touched
// here: authentication reads only the key record, so revoking them is what
// locks the person out.
func (s *Store) DeleteUser(ctx context.Context, org, id string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), "USER#"+id),
	})
	return dependencyError("delete user", err)
}

// ListTemplateNames returns the names of an organization's templates, read
// strongly consistent.
func (s *Store) ListTemplateNames(ctx context.Context, org string) ([]string, error) {
	in := s.inPartition(orgPK(org), "TEMPLATE#")
	in.ConsistentRead = aws.Bool(true)
	in.ProjectionExpression = aws.String("#name")
	in.ExpressionAttributeNames = map[string]string{"#name": "name"}
	items, err := queryAll[templateItem](ctx, s, "list template names", in)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Name
	}
	return out, nil
}

// RemoveTemplate takes a template out of service: it can no longer be leased,
// while its live environments run to their end. It returns how many are
// still live.
//
// The quota item is what every lease and stop of the template writes, so it
// goes last and only when idle: its limit drops to 0 first (a function that
// still holds the template from a recent read cannot lease past that), then
// the template goes, and then the quota item, unless environments still count
// on it, for a stop decrements it and must find it. Those keep it, with limit
// 0, until a later removal finds it idle. Every step may be repeated.
func (s *Store) RemoveTemplate(ctx context.Context, org, name string) (live int, err error) {
	quota := key(orgPK(org), QuotaSK(name))
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       quota,
		UpdateExpression:          aws.String("SET maxLeases = :zero"),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": num(0)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	hasQuota := err == nil
	if err != nil && !IsConditionFailed(err) {
		return 0, dependencyError("close quota", err)
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), templateSK(name)),
	}); err != nil {
		return 0, dependencyError("delete template", err)
	}
	if !hasQuota {
		return 0, nil
	}
	var q quotaItem
	if err := unmarshal(out.Attributes, &q); err != nil {
		return 0, err
	}
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.table),
		Key:                       quota,
		ConditionExpression:       aws.String("running = :zero"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": num(0)},
	})
	switch {
	case err == nil:
		return 0, nil
	case IsConditionFailed(err):
		// No lease can raise the count once the limit is 0, so the count seen
		// when closing the quota bounds what is still live.
		return q.Running, nil
	default:
		return 0, dependencyError("delete quota", err)
	}
}
